"""The ``consistent-catalog`` command: a thin layer over ``ConsistentCatalog``."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import click

from consistent_catalog.cli import engines, lake, retention
from consistent_catalog.cli.output import (
    EX_TEMPFAIL,
    OUTPUT,
    Col,
    Context,
    command_errors,
    fmt_barrier,
    fmt_duration,
    note,
    output_option,
    table_out,
)
from consistent_catalog.exceptions import InvalidInputError, NotFreshError
from consistent_catalog.report import Freshness, HistoryEntry
from consistent_catalog.resolver import DEFAULT_LEVEL, LEVELS


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--catalog", "-c", "catalog_name", default=None, help="pyiceberg catalog name (.pyiceberg.yaml or PYICEBERG_CATALOG__<NAME>__<KEY>); default: pyiceberg's default-catalog, or the only one configured")
@click.option("--output", "-o", type=OUTPUT, default="text", show_default=True, help="text tables or stable JSON")
@click.option("--verbose", "-v", is_flag=True, help="print tracebacks on errors")
@click.version_option(package_name="consistent-catalog")
@click.pass_context
def cli(click_ctx: click.Context, catalog_name: str | None, output: str, verbose: bool) -> None:
    """Consistent reads across a pipeline of Iceberg tables, from catalog metadata alone.

    \b
    Example:
      consistent-catalog init        # ./lake: the catalog, its .pyiceberg.yaml entry, Spark's properties file
      consistent-catalog status
      # or a catalog configured by hand:
      export PYICEBERG_CATALOG__LAKE__URI=sqlite:///$PWD/.demo/catalog.db
      export PYICEBERG_CATALOG__LAKE__WAREHOUSE=file://$PWD/.demo/warehouse
      consistent-catalog --catalog lake status
    """
    click_ctx.obj = Context(catalog_name, output, verbose)
    show_warnings()


def show_warnings() -> None:
    """The library's warnings (a catalog fault being waited out, protocol §6.8) as ``warning: ...`` lines on
    stderr, unless logging was configured already."""
    import logging

    logger = logging.getLogger("consistent_catalog")
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("warning: %(message)s"))
    handler.setLevel(logging.WARNING)
    logger.addHandler(handler)


@cli.command()
@click.argument("tables", nargs=-1, required=True)
@click.option("--level", "-l", type=click.Choice(LEVELS), default=DEFAULT_LEVEL, show_default=True,
              help="repeatable-read: published epochs; read-committed: also staged ones; read-uncommitted: newest of each")
@click.option("--as-of", "as_of", default=None, help="read the cut at or before this barrier: ms, ISO-8601 time, now, now-1h or -1h (protocol §3.8)")
@click.option("--component", is_flag=True,
              help="the cut of the TABLES' whole lineage component: what Spark's lake_consistent serves")
@click.option("--sql", "sql", is_flag=True, help="print Spark SQL (VERSION AS OF) statements that read the cut")
@click.option("--spark-catalog", default="lake", show_default=True, help="Spark catalog name used in --sql output")
@output_option
@click.pass_obj
@command_errors
def resolve(ctx: Context, tables: tuple[str, ...], level: str, as_of: str | None, component: bool, sql: bool,
            spark_catalog: str, output: str | None) -> None:
    """Resolve a consistent cut: one snapshot id per table, all reflecting the same barrier.

    The cut covers TABLES and what they are derived from; with --component it covers their whole
    lineage component (downstream tables too), as Spark's lake_consistent does for every statement.

    \b
    Example:
      consistent-catalog --catalog lake resolve demo.words demo.word_counts --output json
      {"level": "repeatable-read", "barrier": 1700000000123, "tables": {...}}
    """
    cut = ctx.catalog.resolve(tables, level=level, as_of=as_of, component=component)
    if sql:
        from consistent_catalog.sql import cut_to_spark_sql

        for statement in cut_to_spark_sql(cut, spark_catalog):
            click.echo(statement)
        return

    def text() -> None:
        at = f"at barrier {fmt_barrier(cut.barrier)}" if cut.barrier is not None else "(newest snapshots, no common barrier)"
        table_out(
            f"{cut.level} cut {at}",
            [Col("table"), Col("snapshot_id"), Col("barrier", "barrier"), Col("branch", drop=1)],
            [[name, t.snapshot_id, t.barrier, t.branch] for name, t in cut.tables.items()],
        )

    ctx.out(output).emit(cut.to_json(), text)


_UNITLESS = re.compile(r"\s*\d+(\.\d+)?\s*")
#: Exit code of ``wait`` when the timeout ends before the cut is fresh (sysexits' EX_TEMPFAIL: try again later).
EXIT_NOT_FRESH = EX_TEMPFAIL
#: Exit code after Ctrl-C (128 + SIGINT, what shells report).
EXIT_INTERRUPTED = 130


@cli.command()
@click.argument("tables", nargs=-1, required=True)
@click.option("--fresher-than", "fresher_than", default=None, metavar="D",
              help="fresh when now minus the cut's barrier is at most D (with a unit: 90s, 5m, 2h)")
@click.option("--barrier", "barrier", default=None, metavar="B",
              help="fresh when the cut's barrier is at least B (ms, ISO-8601 time, now-5m..., like --as-of)")
@click.option("--timeout", default=None, metavar="D",
              help="give up after D with exit code 75 (0: check once); default: wait for as long as it takes")
@click.option("--interval", default="5s", show_default=True, metavar="D", help="pause between the first polls")
@click.option("--max-interval", "max_interval", default="60s", show_default=True, metavar="D",
              help="longest pause: the pause doubles while the cut does not move, up to this")
@output_option
@click.pass_obj
@command_errors
def wait(ctx: Context, tables: tuple[str, ...], fresher_than: str | None, barrier: str | None, timeout: str | None,
         interval: str, max_interval: str, output: str | None) -> None:
    """Block until the consistent cut of TABLES is fresh enough: what a scheduler's sensor calls.

    Re-resolves the repeatable-read cut (the one resolve prints) at every poll. Exit code 0: fresh;
    75: the timeout ended first (the line names the delay and the bottleneck job); 1: an error
    (unknown table, untracked write, bad input); 130: interrupted.

    \b
    Example (a scheduler's sensor: exit 0 once fresh, 75 after an hour):
      consistent-catalog --catalog lake wait demo.word_counts \\
          --fresher-than 10m --timeout 1h
      fresh: barrier 1700000000000 (2023-11-14 22:13:20.000Z), delay 4.2s ...
    """
    if (fresher_than is None) == (barrier is None):
        raise InvalidInputError("give exactly one of --fresher-than D (e.g. 10m) or --barrier B (ms or ISO-8601 time)")
    for flag, value in (("--fresher-than", fresher_than), ("--timeout", timeout), ("--interval", interval),
                        ("--max-interval", max_interval)):
        # the library reads a bare number as ms; on a scheduler's command line "--timeout 3600" means an hour
        if value is not None and _UNITLESS.fullmatch(value) and float(value) != 0:
            raise InvalidInputError(f"{flag} {value} has no unit; write it with one: {value}s, {value}m or {value}ms")
    last: list[Freshness] = []
    out = ctx.out(output)
    try:
        found = ctx.catalog.wait_for(tables, fresher_than=fresher_than, barrier=barrier, timeout=timeout,
                                     interval=interval, max_interval=max_interval, on_poll=last.append)
    except NotFreshError as exc:
        stale = exc.freshness or last[-1]
        out.emit(stale.to_json(), lambda: click.echo(f"not fresh after {fmt_duration(stale.waited_ms)}: {stale.describe()}"))
        sys.exit(EXIT_NOT_FRESH)
    except KeyboardInterrupt:
        seen = f": {last[-1].describe()}" if last else ""
        click.echo(f"interrupted: stopped waiting for {', '.join(tables)}{seen}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    out.emit(found.to_json(), lambda: click.echo(f"fresh: {found.describe()}"))


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
        if not rows:
            note(f"no tables in catalog {ctx.catalog.name!r} yet. Next: create a namespace and a table on the plain "
                 f"catalog (spark-sql: CREATE NAMESPACE {ctx.catalog.name}.shop; CREATE TABLE "
                 f"{ctx.catalog.name}.shop.orders (...) USING iceberg), then ingest into it through "
                 f"{ctx.catalog.name}_consistent (INSERT INTO {ctx.catalog.name}_consistent.shop.orders ...) or "
                 "with Python (ConsistentCatalog.ingest); `consistent-catalog demo --dir .demo` builds an example "
                 "pipeline of three tables")
            return
        table_out(
            "status",
            [Col("table"), Col("role", drop=5), Col("job"), Col("lease", "text"), Col("watermark", "barrier"),
             Col("staged", "barrier"), Col("delay"), Col("own delay", drop=1), Col("slowest source", drop=2),
             Col("bottleneck", drop=3), Col("rev", drop=4), Col("note", "note")],
            [
                [r.table, r.role, r.job, r.lease + (" (zombie suspect)" if r.lease == "expired" else ""),
                 r.watermark, r.staged_barrier, fmt_duration(r.delay_ms), fmt_duration(r.own_delay_ms),
                 r.slowest_source, r.bottleneck_job, r.revision,
                 "; ".join(n for n in (r.error, generation_note(r.generation, r.staged_barrier)) if n) or None]
                for r in rows
            ],
        )

    ctx.out(output).emit([r.to_json() for r in rows], text)


@cli.command()
@click.argument("tables", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["graph", "openlineage"]), default="graph", show_default=True,
              help="graph: this tool's JSON (protocol §10.3); openlineage: one OpenLineage JobEvent per job, as a "
                   "JSON array (needs the [openlineage] extra)")
@output_option
@click.pass_obj
@command_errors
def lineage(ctx: Context, tables: tuple[str, ...], fmt: str, output: str | None) -> None:
    """The lineage graph: jobs, their sources and sinks (whole catalog, or what connects to TABLES).

    \b
    Example:
      consistent-catalog --catalog lake lineage demo.words
      consistent-catalog --catalog lake lineage --format openlineage > jobs.json
    """
    graph = ctx.catalog.lineage(tables or None)
    if fmt == "openlineage":
        from consistent_catalog.openlineage_events import graph_events

        catalog = ctx.catalog.catalog
        click.echo(json.dumps(graph_events(graph, catalog.name, catalog.properties)))
        return

    def text() -> None:
        table_out("jobs", [Col("job"), Col("sources", "text"), Col("sinks", "text")],
                  [[j.job, ", ".join(j.sources), ", ".join(j.sinks)] for j in graph.jobs()])
        downstream = graph.downstream
        table_out("tables", [Col("table"), Col("role", drop=1), Col("owner"), Col("reads", "text"), Col("feeds", "text"),
                             Col("note", "note")],
                  [[t, "derived" if t in graph.upstream else "root", graph.owners.get(t),
                    ", ".join(graph.upstream.get(t, ())), ", ".join(downstream.get(t, ())),
                    generation_note({**graph.generations[t], "previous_watermark": None, "staged": None}, None)
                    if t in graph.generations else None]
                   for t in graph.topological()])

    ctx.out(output).emit(graph.to_json(), text)


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
                [Col("barrier", "barrier"), Col("job"), Col("branch", drop=3), Col("staged", "time", drop=2),
                 Col("published", "time"), Col("staged for", drop=5), Col("latency"), Col("+rows", drop=6),
                 Col("-rows", drop=7), Col("rows", drop=4)],
                [[e.barrier, e.job, e.branch, e.staged_at_ms, e.published_at_ms,
                  fmt_duration(e.publish_ms), fmt_duration(e.latency_ms), e.added_records, e.deleted_records,
                  e.total_records] for e in rows],
            )

        ctx.out(output).emit([e.to_json() for e in rows], epoch_text)
        return
    entries = ctx.catalog.history(table)
    genesis = _genesis(entries)
    if limit > 0:
        entries = entries[:limit]

    def text() -> None:
        table_out(
            f"history of {table}",
            [Col("snapshot_id"), Col("branch", drop=3), Col("barrier", "barrier"), Col("job"),
             Col("sources", "text", drop=1), Col("committed", "time", drop=2), Col("op", drop=4),
             Col("+rows", drop=5), Col("-rows", drop=6)],
            [[e.snapshot_id, e.branch, "genesis" if e is genesis else e.barrier, e.job, _sources(e.sources),
              e.committed_at_ms, e.operation, e.added_records, e.deleted_records] for e in entries],
        )
        if genesis is not None and genesis in entries:
            note(f"genesis: snapshot {genesis.snapshot_id} is the empty first snapshot that registering job "
                 f"{genesis.job!r} gave the table (no rows, no barrier; protocol §6.1); its epochs are the rows above")

    ctx.out(output).emit([e.to_json() for e in entries], text)


def _genesis(entries: list[HistoryEntry]) -> HistoryEntry | None:
    """The registration's genesis snapshot (protocol §6.1) among a table's whole history, newest first: the oldest
    snapshot, written by a job, with no barrier and no rows; None when the history starts otherwise."""
    if not entries:
        return None
    first = entries[-1]
    empty = first.raw_barrier is None and first.added_records == 0 and first.deleted_records == 0
    return first if empty and first.job is not None else None


def _sources(sources: dict[str, int | None]) -> str | None:
    """Recorded epoch inputs as ``table@snapshot`` (one word each, so a narrow column never splits an id)."""
    return ", ".join(f"{t}@{'-' if s is None else s}" for t, s in sources.items()) or None


@cli.command("advance-watermark", context_settings={"ignore_unknown_options": True})  # BARRIER may be -5m (§3.8)
@click.argument("table")
@click.argument("barrier")
@click.option("--allow-future", is_flag=True,
              help="accept a barrier beyond now plus the clock-skew allowance (table property consistent.clock-skew-ms)")
@output_option
@click.pass_obj
@command_errors
def advance_watermark(ctx: Context, table: str, barrier: str, allow_future: bool, output: str | None) -> None:
    """Declare an idle root TABLE complete up to BARRIER (ms, ISO-8601, `now` or `now-5m`: protocol §3.8), so it stops holding back the DAG.

    A barrier in the future is refused unless --allow-future; a watermark never moves back.

    \b
    Examples:
      consistent-catalog --catalog lake advance-watermark demo.words 2024-01-01T00:00:00Z
      consistent-catalog --catalog lake advance-watermark demo.words now
    """
    watermark = ctx.catalog.advance_watermark(table, barrier, allow_future=allow_future)
    ctx.out(output).emit({"table": table, "watermark": watermark},
         lambda: click.echo(f"{table}: watermark {fmt_barrier(watermark)}"))


@cli.command()
@click.argument("table")
@click.option("--to-job", "job", required=True, help="the job that owns TABLE from now on")
@click.option("--takeover", is_flag=True,
              help="the current owner's instance still holds a live lease but is known dead: take the table anyway")
@output_option
@click.pass_obj
@command_errors
def reassign(ctx: Context, table: str, job: str, takeover: bool, output: str | None) -> None:
    """Hand the derived TABLE to another job: the only way a table changes owner (a typo'd job name is refused).

    The table keeps its data, history and sources; the job registers it at its next run, and its next epoch
    starts a new generation of the table if its definition differs. Refused for a root, while the owner runs, and when the new job
    would read its own output.

    \b
    Example:
      consistent-catalog --catalog lake reassign shop.customer_totals --to-job cust-totals
    """
    result = ctx.catalog.reassign(table, job, takeover=takeover)

    def text() -> None:
        if result.changed:
            click.echo(f"{result.table}: owned by job {result.to_job} (was {result.from_job or 'nobody'})")
        else:
            click.echo(f"{result.table}: already owned by job {result.to_job}; nothing changed")

    ctx.out(output).emit(result.to_json(), text)


def generation_note(generation: dict[str, Any] | None, staged_barrier: int | None) -> str | None:
    """``status``'s note on a table's generations (protocol §6.10): the old one still read, a new one staged."""
    if generation is None:
        return None
    parts = []
    if generation["staged"] is not None:
        parts.append(f"a new generation ({generation['staged']}) is staged at barrier {fmt_barrier(staged_barrier)}, "
                     "not published: cuts read the serving one")
    if generation["previous_snapshot"] is not None:
        readers = generation["read_by"]
        where = (f"cuts with {', '.join(readers)} read it until {'their jobs switch' if len(readers) > 1 else 'its job switches'}"
                 if readers else "no table reads it: the next expire removes it")
        mark = generation["previous_watermark"]
        parts.append(f"previous generation at snapshot {generation['previous_snapshot']}"
                     + (f", watermark {fmt_barrier(mark)}" if mark is not None else "") + f": {where}")
    return "; ".join(parts)


@cli.command()
@click.argument("table")
@click.option("--to-barrier", "barrier", help="barrier to roll back to: ms, ISO-8601 time, now-1h ... (protocol §3.8)")
@click.option("--mode", type=click.Choice(["incremental", "full"]), default="incremental", show_default=True,
              help="incremental: downstream jobs replay from the barrier; full: downstream tables are rebuilt")
@click.option("--abandon", is_flag=True,
              help="instead of a barrier: return TABLE and its downstream to the generation before a new definition")
@output_option
@click.pass_obj
@command_errors
def revise(ctx: Context, table: str, barrier: str | None, mode: str, abandon: bool, output: str | None) -> None:
    """Roll TABLE and every table downstream of it back to their state at a barrier, and bump their revision.

    Their jobs then replay from that barrier (incremental) or rebuild from scratch (full). With --abandon instead,
    TABLE and its downstream return to the generation before a new definition (protocol §6.10): revert the
    definition too, or its job regenerates again.

    \b
    Examples:
      consistent-catalog --catalog lake revise demo.words --to-barrier 2024-01-01T00:00:00Z --mode incremental
      consistent-catalog --catalog lake revise demo.word_counts --abandon
    """
    if (barrier is None) == (not abandon):
        raise click.UsageError("give either --to-barrier T (roll back to a barrier) or --abandon (drop a new generation)")
    if abandon:
        result = ctx.catalog.abandon_generation(table)
        title = f"abandoned the new generation of {result.table}"
    else:
        assert barrier is not None
        result = ctx.catalog.revise(table, barrier, mode=mode)
        title = f"revised {result.table} to barrier {fmt_barrier(result.barrier)} ({mode})"

    def text() -> None:
        table_out(
            title,
            [Col("table"), Col("action"), Col("from"), Col("to"), Col("watermark", "barrier"), Col("revision", drop=1)],
            [[s.table, s.action, s.from_snapshot, s.to_snapshot, s.watermark, s.revision] for s in result.steps],
        )

    ctx.out(output).emit(result.to_json(), text)


@cli.command()
@click.option("--dir", "directory", default=".demo", show_default=True, type=click.Path(file_okay=False),
              help="catalog at DIR/catalog.db, warehouse at DIR/warehouse")
@click.option("--epochs", type=int, default=6, show_default=True, help="epochs of words to ingest")
@click.option("--rows-per-epoch", type=int, default=1000, show_default=True, help="words per epoch")
@click.option("--engine", type=click.Choice(["spark", "pyiceberg"]), default=None,
              help="who runs the jobs: local Spark (local[2], the default) or pyiceberg in-process")
@click.option("--interval", type=float, default=0.0, show_default=True, help="seconds between ingest epochs")
@click.option("--takeover", is_flag=True,
              help="take the jobs over from a crashed earlier run whose leases have not lapsed yet")
@click.option("--streaming", is_flag=True, help="Structured Streaming (Spark): a file-source root and streaming jobs; "
              "EPOCHS files of ROWS-PER-EPOCH words, one per INTERVAL s (default 1); the root and both jobs are "
              "plain streaming queries through lake_consistent (where the plugin jar is found); with --engine "
              "pyiceberg the jobs' transforms run in pyarrow, still one streaming query per job")
@click.option("--sql", is_flag=True, help="the jobs as plain Spark SQL (the packaged flip_pipeline.sql: INSERT "
              "OVERWRITE through lake_consistent), one stock spark-sql process per epoch with DIR/spark-defaults.conf "
              "rendered for it; words ingested with pyiceberg between them (run_demo(engine='sql'); not with "
              "--engine or --streaming)")
@output_option
@click.pass_obj
@command_errors
def demo(ctx: Context, directory: str, epochs: int, rows_per_epoch: int, engine: str | None, interval: float,
         takeover: bool, streaming: bool, sql: bool, output: str | None) -> None:
    """Run FLIP-276's three-table pipeline (words -> word_counts -> count_histogram) and check its invariants.

    Re-running on the same DIR resumes where it stopped; after a crash (kill -9) the jobs' leases
    hold for 5 minutes — restart with --takeover to take over at once. A second demo running on the
    same DIR is refused (single writer per table); each epoch's words are ingested once.

    \b
    Example:
      consistent-catalog demo --dir .demo --epochs 6 --rows-per-epoch 1000
      consistent-catalog demo --dir .demo-sql --epochs 3 --sql
    """
    from consistent_catalog.demo import run_demo

    if sql and (engine is not None or streaming):
        raise click.UsageError("--sql runs the jobs as Spark SQL files in spark-sql processes; "
                               f"leave out {'--streaming' if streaming else '--engine'}")
    engine = "sql" if sql else engine or "spark"
    json_out = (output or ctx.output) == "json"
    if streaming:
        from consistent_catalog.demo import check_invariants, count_words, histogram
        from consistent_catalog.spark.session import find_plugin_jar
        from consistent_catalog.spark.streaming_demo import run_streaming_demo

        # --engine pyiceberg: the two jobs' transforms in pyarrow, still driven by streaming queries; otherwise the
        # root and word-count are plain streaming queries through the plugin's catalog when its jar is found
        transforms = {"word-count": count_words, "count-histogram": histogram} if engine == "pyiceberg" else None
        native = transforms is None and find_plugin_jar() is not None
        echo = (lambda line: click.echo(line, err=True)) if json_out else click.echo
        echo("words, word-count and count-histogram run through lake_consistent (no Python in their path)" if native else "the root and both jobs are Python-driven streaming queries"
             + ("" if transforms is not None else " (the plugin jar was not found: `consistent-catalog spark-conf` says why)"))
        report = run_streaming_demo(directory, check=check_invariants, files=epochs, rows_per_file=rows_per_epoch,
                                    interval=interval or 1.0, takeover=takeover, transforms=transforms, native=native,
                                    echo=echo)
        if report["violations"]:
            raise SystemExit(1)
        ctx.out(output).emit(report, lambda: None)
        return
    report = run_demo(directory, epochs=epochs, rows_per_epoch=rows_per_epoch, engine=engine, interval=interval,
                      takeover=takeover, echo=(lambda line: click.echo(line, err=True)) if json_out else click.echo)
    ctx.out(output).emit(report, lambda: None)


for command in (*lake.COMMANDS, *retention.COMMANDS, *engines.COMMANDS):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="consistent-catalog")


if __name__ == "__main__":
    main()
