"""The ``consistent-catalog`` command: a thin layer over ``ConsistentCatalog``."""

from __future__ import annotations

import functools
import json
import shutil
import sys
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

import click

from consistent_catalog.exceptions import ConsistentCatalogError
from consistent_catalog.resolver import DEFAULT_LEVEL, LEVELS

F = TypeVar("F", bound=Callable[..., Any])

OUTPUT = click.Choice(["text", "json"])
WRAPPING_COLUMNS = {"sources", "note", "reads", "feeds", "sinks"}


class Context:
    def __init__(self, catalog_name: str | None, output: str, verbose: bool) -> None:
        self.catalog_name = catalog_name
        self.output = output
        self.verbose = verbose
        self._catalog: Any = None

    @property
    def catalog(self) -> Any:
        if self._catalog is None:
            from consistent_catalog.catalog import ConsistentCatalog

            self._catalog = ConsistentCatalog.load(self.catalog_name)
        return self._catalog


def command_errors(func: F) -> F:
    """Turn library errors into one line on stderr and exit code 1 (a traceback only with --verbose)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context().find_object(Context)
        try:
            return func(*args, **kwargs)
        except ConsistentCatalogError as exc:
            if ctx is not None and ctx.verbose:
                traceback.print_exc()
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # anything unexpected: still one line, but say how to see more
            if ctx is not None and ctx.verbose:
                traceback.print_exc()
            click.echo(
                f"error: unexpected {type(exc).__name__}: {exc} (rerun with --verbose for the traceback)", err=True
            )
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def output_option(func: F) -> F:
    """``--output`` is accepted after the command too (``resolve ... --output json``)."""
    return click.option("--output", "-o", "output", type=OUTPUT, default=None, help="text tables or stable JSON")(func)


def emit(ctx: Context, output: str | None, payload: Any, render_text: Callable[[], None]) -> None:
    if (output or ctx.output) == "json":
        click.echo(json.dumps(payload, indent=None if not sys.stdout.isatty() else 2))
    else:
        render_text()


def fmt_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def fmt_duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    sign = "-" if ms < 0 else ""
    seconds = abs(ms) / 1000
    if seconds < 120:
        return f"{sign}{seconds:.1f}s"
    if seconds < 7200:
        return f"{sign}{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{sign}{seconds / 3600:.1f}h"
    return f"{sign}{seconds / 86400:.1f}d"


def table_out(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column not in WRAPPING_COLUMNS)
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 250
    Console(width=width).print(table)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--catalog", "-c", "catalog_name", default=None, help="pyiceberg catalog name (.pyiceberg.yaml or PYICEBERG_CATALOG__<NAME>__<KEY>)")
@click.option("--output", "-o", type=OUTPUT, default="text", show_default=True, help="text tables or stable JSON")
@click.option("--verbose", "-v", is_flag=True, help="print tracebacks on errors")
@click.version_option(package_name="consistent-catalog")
@click.pass_context
def cli(click_ctx: click.Context, catalog_name: str | None, output: str, verbose: bool) -> None:
    """Consistent reads across a pipeline of Iceberg tables, from catalog metadata alone.

    \b
    Example:
      export PYICEBERG_CATALOG__LAKE__URI=sqlite:///$PWD/.demo/catalog.db
      export PYICEBERG_CATALOG__LAKE__WAREHOUSE=file://$PWD/.demo/warehouse
      consistent-catalog --catalog lake status
    """
    click_ctx.obj = Context(catalog_name, output, verbose)


@cli.command()
@click.argument("tables", nargs=-1, required=True)
@click.option("--level", "-l", type=click.Choice(LEVELS), default=DEFAULT_LEVEL, show_default=True,
              help="repeatable-read: published epochs; read-committed: also staged ones; read-uncommitted: newest of each")
@click.option("--as-of", "as_of", default=None, help="read the cut at or before this barrier (ms) or ISO-8601 time")
@click.option("--sql", "sql", is_flag=True, help="print Spark SQL (VERSION AS OF) statements that read the cut")
@click.option("--spark-catalog", default="lake", show_default=True, help="Spark catalog name used in --sql output")
@output_option
@click.pass_obj
@command_errors
def resolve(ctx: Context, tables: tuple[str, ...], level: str, as_of: str | None, sql: bool, spark_catalog: str, output: str | None) -> None:
    """Resolve a consistent cut: one snapshot id per table, all reflecting the same barrier.

    \b
    Example:
      consistent-catalog --catalog lake resolve demo.words demo.word_counts --output json
      {"level": "repeatable-read", "barrier": 1700000000123, "tables": {...}}
    """
    cut = ctx.catalog.resolve(tables, level=level, as_of=as_of)
    if sql:
        from consistent_catalog.sql import cut_to_spark_sql

        for statement in cut_to_spark_sql(cut, spark_catalog):
            click.echo(statement)
        return

    def text() -> None:
        table_out(
            f"{cut.level} cut at barrier {cut.barrier if cut.barrier is not None else '-'} ({fmt_ms(cut.barrier)})",
            ["table", "snapshot_id", "barrier", "branch"],
            [[name, t.snapshot_id, t.barrier, t.branch] for name, t in cut.tables.items()],
        )

    emit(ctx, output, cut.to_json(), text)


@cli.command()
@click.argument("tables", nargs=-1)
@output_option
@click.pass_obj
@command_errors
def status(ctx: Context, tables: tuple[str, ...], output: str | None) -> None:
    """Role, owner job, lease, watermark, staged barrier and delays of each table (all tables by default).

    \b
    Example:
      consistent-catalog --catalog lake status demo.word_counts
    """
    rows = ctx.catalog.status(tables or None)

    def text() -> None:
        table_out(
            "status",
            ["table", "role", "job", "lease", "watermark", "staged", "delay", "own delay", "slowest source",
             "bottleneck", "rev", "note"],
            [
                [r.table, r.role, r.job, r.lease + (" (zombie suspect)" if r.lease == "expired" else ""),
                 fmt_ms(r.watermark), r.staged_barrier, fmt_duration(r.delay_ms), fmt_duration(r.own_delay_ms),
                 r.slowest_source, r.bottleneck_job, r.revision, r.error]
                for r in rows
            ],
        )

    emit(ctx, output, [r.to_json() for r in rows], text)


@cli.command()
@click.argument("tables", nargs=-1)
@output_option
@click.pass_obj
@command_errors
def lineage(ctx: Context, tables: tuple[str, ...], output: str | None) -> None:
    """The lineage graph: jobs, their sources and sinks (whole catalog, or what connects to TABLES).

    \b
    Example:
      consistent-catalog --catalog lake lineage demo.words
    """
    graph = ctx.catalog.lineage(tables or None)

    def text() -> None:
        table_out("jobs", ["job", "sources", "sinks"],
                  [[j.job, ", ".join(j.sources), ", ".join(j.sinks)] for j in graph.jobs()])
        downstream = graph.downstream
        table_out("tables", ["table", "role", "owner", "reads", "feeds"],
                  [[t, "derived" if t in graph.upstream else "root", graph.owners.get(t),
                    ", ".join(graph.upstream.get(t, ())), ", ".join(downstream.get(t, ()))]
                   for t in graph.topological()])

    emit(ctx, output, graph.to_json(), text)


@cli.command()
@click.argument("table")
@click.option("--limit", "-n", type=int, default=50, show_default=True, help="newest N entries (0: all)")
@click.option("--epochs", "by_epoch", is_flag=True,
              help="one row per epoch: barrier, when staged and published, latency, rows")
@output_option
@click.pass_obj
@command_errors
def history(ctx: Context, table: str, limit: int, by_epoch: bool, output: str | None) -> None:
    """Snapshots (or epochs) of TABLE, newest first: barrier, job, sources and commit time.

    \b
    Example:
      consistent-catalog --catalog lake history demo.word_counts --limit 10
      consistent-catalog --catalog lake history demo.word_counts --epochs -o json
    """
    if by_epoch:
        rows = ctx.catalog.epochs(table)
        rows = rows[:limit] if limit > 0 else rows

        def epoch_text() -> None:
            table_out(
                f"epochs of {table}",
                ["barrier", "job", "branch", "staged", "published", "staged for", "latency", "+rows", "-rows", "rows"],
                [[e.barrier, e.job, e.branch, fmt_ms(e.staged_at_ms), fmt_ms(e.published_at_ms),
                  fmt_duration(e.publish_ms), fmt_duration(e.latency_ms), e.added_records, e.deleted_records,
                  e.total_records] for e in rows],
            )

        emit(ctx, output, [e.to_json() for e in rows], epoch_text)
        return
    entries = ctx.catalog.history(table)
    if limit > 0:
        entries = entries[:limit]

    def text() -> None:
        table_out(
            f"history of {table}",
            ["snapshot_id", "branch", "barrier", "job", "sources", "committed", "op", "+rows", "-rows"],
            [[e.snapshot_id, e.branch, e.barrier, e.job, json.dumps(e.sources) if e.sources else None,
              fmt_ms(e.committed_at_ms), e.operation, e.added_records, e.deleted_records] for e in entries],
        )

    emit(ctx, output, [e.to_json() for e in entries], text)


@cli.command("advance-watermark")
@click.argument("table")
@click.argument("barrier")
@output_option
@click.pass_obj
@command_errors
def advance_watermark(ctx: Context, table: str, barrier: str, output: str | None) -> None:
    """Declare an idle root TABLE complete up to BARRIER (ms or ISO-8601), so it stops holding back the DAG.

    \b
    Example:
      consistent-catalog --catalog lake advance-watermark demo.words 2024-01-01T00:00:00Z
    """
    watermark = ctx.catalog.advance_watermark(table, barrier)
    emit(ctx, output, {"table": table, "watermark": watermark},
         lambda: click.echo(f"{table}: watermark {watermark} ({fmt_ms(watermark)})"))


@cli.command()
@click.argument("table")
@click.option("--to-barrier", "barrier", required=True, help="barrier (ms) or ISO-8601 time to roll back to")
@click.option("--mode", type=click.Choice(["incremental", "full"]), default="incremental", show_default=True,
              help="incremental: downstream jobs replay from the barrier; full: downstream tables are rebuilt")
@output_option
@click.pass_obj
@command_errors
def revise(ctx: Context, table: str, barrier: str, mode: str, output: str | None) -> None:
    """Roll TABLE and every table downstream of it back to their state at a barrier, and bump their revision.

    Their jobs then replay from that barrier (incremental) or rebuild from scratch (full).

    \b
    Example:
      consistent-catalog --catalog lake revise demo.words --to-barrier 2024-01-01T00:00:00Z --mode incremental
    """
    result = ctx.catalog.revise(table, barrier, mode=mode)

    def text() -> None:
        table_out(
            f"revised {result.table} to barrier {result.barrier} ({mode})",
            ["table", "action", "from", "to", "watermark", "revision"],
            [[s.table, s.action, s.from_snapshot, s.to_snapshot, s.watermark, s.revision] for s in result.steps],
        )

    emit(ctx, output, result.to_json(), text)


@cli.command()
@click.option("--dir", "directory", default=".demo", show_default=True, type=click.Path(file_okay=False),
              help="catalog at DIR/catalog.db, warehouse at DIR/warehouse")
@click.option("--epochs", type=int, default=6, show_default=True, help="epochs of words to ingest")
@click.option("--rows-per-epoch", type=int, default=1000, show_default=True, help="words per epoch")
@click.option("--engine", type=click.Choice(["spark", "pyiceberg"]), default="spark", show_default=True,
              help="who runs the jobs: local Spark (local[2]) or pyiceberg in-process")
@click.option("--interval", type=float, default=0.0, show_default=True, help="seconds between ingest epochs")
@output_option
@click.pass_obj
@command_errors
def demo(ctx: Context, directory: str, epochs: int, rows_per_epoch: int, engine: str, interval: float,
         output: str | None) -> None:
    """Run FLIP-276's three-table pipeline (words -> word_counts -> count_histogram) and check its invariants.

    Re-running on the same DIR resumes where it stopped.

    \b
    Example:
      consistent-catalog demo --dir .demo --epochs 6 --rows-per-epoch 1000
    """
    from consistent_catalog.demo import run_demo

    json_out = (output or ctx.output) == "json"
    report = run_demo(directory, epochs=epochs, rows_per_epoch=rows_per_epoch, engine=engine, interval=interval,
                      echo=(lambda line: click.echo(line, err=True)) if json_out else click.echo)
    emit(ctx, output, report, lambda: None)


from consistent_catalog.cli.retention import register as register_retention  # noqa: E402  (after cli exists)

register_retention(cli)


def main() -> None:
    cli(prog_name="consistent-catalog")


if __name__ == "__main__":
    main()
