"""Retention commands: ``expire``, ``retain``, ``pin``, ``unpin``, ``pins`` (``COMMANDS``, added by ``cli.main``)."""

from __future__ import annotations

import re
from collections.abc import Mapping

import click

from consistent_catalog.cli.output import Col, Context, command_errors, fmt_barrier, fmt_ms, output_option, table_out
from consistent_catalog.exceptions import InvalidInputError
from consistent_catalog.resolver import DEFAULT_LEVEL, LEVELS
from consistent_catalog.retention import RetentionPolicy

_BARRIER = re.compile(r"\bbarrier (\d+)")


def _reasons(reasons: tuple[str, ...] | list[str], limit: int = 2) -> str:
    """The first reasons, so that rows stay short (--output json has them all), barriers with their UTC time."""
    shown = [_BARRIER.sub(lambda m: f"barrier {fmt_barrier(int(m.group(1)))}", r) for r in reasons]
    if not shown:
        return "-"
    more = len(shown) - limit
    return "; ".join(shown[:limit]) + (f" (+{more} more)" if more > 0 else "")


def _tables(tables: Mapping[str, int | None]) -> str:
    """A cut's tables as ``table@snapshot`` (one word each, so a narrow column never splits an id)."""
    return ", ".join(f"{t}@{'-' if s is None else s}" for t, s in tables.items())


@click.command()
@click.argument("tables", nargs=-1)
@click.option("--older-than", "older_than", default=None,
              help="never expire snapshots newer than this (90s, 30m, 12h, 7d, 2w; a bare number is ms); "
                   "default: the table property history.expire.max-snapshot-age-ms, else 5d")
@click.option("--keep-last", type=int, default=None,
              help="always keep the newest N snapshots of main (default: history.expire.min-snapshots-to-keep, else 1)")
@click.option("--delete-files", is_flag=True, help="also delete data, manifest and manifest-list files no retained snapshot references")
@click.option("--dry-run", is_flag=True, help="list what would be expired and why the rest stays; change nothing")
@click.option("--details", is_flag=True, help="list every kept snapshot with its reasons (with --orphans: every orphan file)")
@click.option("--orphans", is_flag=True,
              help="instead of expiring snapshots, delete files under the table locations that no snapshot or metadata "
                   "references and older than --older-than (required; Iceberg's remove_orphan_files)")
@click.option("--force", is_flag=True, help="with --orphans: allow --older-than below 1h (only when no writer can be running)")
@output_option
@click.pass_obj
@command_errors
def expire(ctx: Context, tables: tuple[str, ...], older_than: str | None, keep_last: int | None, delete_files: bool,
           dry_run: bool, details: bool, orphans: bool, force: bool, output: str | None) -> None:
    """Expire old snapshots of TABLES (all tables by default) that no consistent cut still needs.

    Never expires a snapshot needed by the latest repeatable-read cut of the tables' lineage, by the
    epoch inputs recorded downstream, by a staged epoch, or by a live pin or retained cut
    (consistent-* tags; those whose ref age passed are dropped).

    \b
    Example:
      consistent-catalog --catalog lake expire --older-than 1d --dry-run
      consistent-catalog --catalog lake expire demo.words demo.word_counts --older-than 12h --delete-files
      consistent-catalog --catalog lake expire --orphans --older-than 3d --dry-run
    """
    if orphans:
        _expire_orphans(ctx, tables, older_than, keep_last, delete_files, dry_run, details, force, output)
        return
    if force:
        raise click.UsageError("--force only applies to --orphans (it lowers the orphan sweep's 1h safety floor)")
    policy = RetentionPolicy.of(older_than=older_than, keep_last=keep_last, delete_files=delete_files)
    result = ctx.catalog.retention.expire(tables or None, policy, dry_run=dry_run)
    plan = result.plan

    def text() -> None:
        verb = "would expire" if dry_run else "expired"
        table_out(
            f"{'dry run: ' if dry_run else ''}expiry at {fmt_ms(plan.now)}",
            [Col("table"), Col("snapshots", drop=2), Col(verb), Col("kept", drop=1), Col("tags dropped", "text"),
             Col("history starts at"), Col("barrier", "barrier"), Col("held by", "text")],
            [[name, t.snapshots, len(t.expire), len(t.keep), ", ".join(t.drop_tags) or None, t.history_start,
              t.barriers.get(t.history_start) if t.history_start is not None else None, _reasons(t.held_by)]
             for name, t in plan.tables.items()],
        )
        for name, reason in plan.skipped.items():
            click.echo(f"skipped {name}: {reason}")
        for name, deleted in result.deleted.items():
            click.echo(f"{name}: deleted {deleted.data_files} data file(s), {deleted.manifests} manifest(s), "
                       f"{deleted.manifest_lists} manifest list(s), {deleted.bytes} bytes")
        if details:
            for name, t in plan.tables.items():
                table_out(f"kept snapshots of {name}",
                          [Col("snapshot_id"), Col("barrier", "barrier"), Col("committed", "time", drop=1),
                           Col("why it stays", "text")],
                          [[sid, t.barriers.get(sid), t.timestamps.get(sid), _reasons(r)] for sid, r in t.keep.items()])

    ctx.out(output).emit(result.to_json(details=details), text)


def _expire_orphans(ctx: Context, tables: tuple[str, ...], older_than: str | None, keep_last: int | None,
                    delete_files: bool, dry_run: bool, details: bool, force: bool, output: str | None) -> None:
    """``expire --orphans``: the orphan-file sweep, one row per table."""
    if keep_last is not None or delete_files:
        raise click.UsageError("--orphans sweeps files only; expire snapshots (--keep-last, --delete-files) in a separate run")
    if older_than is None:
        raise click.UsageError("--orphans needs --older-than (e.g. 3d, Iceberg's default): only files older than that are deleted")
    result = ctx.catalog.retention.remove_orphan_files(tables or None, older_than_ms=older_than, dry_run=dry_run, force=force)

    def text() -> None:
        table_out(
            f"{'dry run: ' if dry_run else ''}orphan files at {fmt_ms(result.now)}: unreferenced, modified before "
            f"{fmt_ms(result.threshold)}",
            [Col("table"), Col("files"), Col("referenced"), Col("orphaned"), Col("too young"),
             Col("would delete" if dry_run else "deleted"), Col("bytes"), Col("location", drop=1)],
            [[name, t.files, t.referenced, t.orphaned, t.too_young, t.orphaned if dry_run else t.deleted,
              t.orphaned_bytes if dry_run else t.bytes, t.location] for name, t in result.tables.items()],
        )
        for name, t in result.tables.items():
            if t.skipped:
                click.echo(f"skipped {name}: {t.skipped}")
            if t.failed:
                click.echo(f"{name}: {t.failed} orphan(s) could not be deleted (see the log, --verbose)")
            if details:
                for path in t.orphan_files:
                    click.echo(f"{name}: orphan {path}")

    ctx.out(output).emit(result.to_json(), text)


@click.command()
@click.argument("tables", nargs=-1)
@click.option("--hourly", type=int, default=0, show_default=True, help="keep an hourly cut for N hours")
@click.option("--daily", type=int, default=0, show_default=True, help="keep a daily cut for N days")
@click.option("--weekly", type=int, default=0, show_default=True, help="keep a weekly cut for N weeks")
@click.option("--list", "list_only", is_flag=True, help="only list the retained cuts (consistent-* tags other than pins)")
@output_option
@click.pass_obj
@command_errors
def retain(ctx: Context, tables: tuple[str, ...], hourly: int, daily: int, weekly: int, list_only: bool,
           output: str | None) -> None:
    """Tag the latest consistent cut of the lineage of TABLES (all by default) as this hour's/day's/week's cut.

    Tags are consistent-hourly-YYYYMMDDTHH, consistent-daily-YYYYMMDD and consistent-weekly-YYYYWww on
    every table of the cut, with Iceberg ref ages so that every engine's expiry drops them after N
    hours/days/weeks. Run it periodically (cron, or EpochJob(retention=..., expire_every=...)); the
    first run in a period creates its tag. Any engine reads the cut by tag.

    \b
    Example:
      consistent-catalog --catalog lake retain --hourly 24 --daily 7 --weekly 4
      spark-sql> SELECT * FROM lake.demo.word_counts VERSION AS OF 'consistent-daily-20261122'
    """
    if not list_only:
        if not (hourly or daily or weekly):
            raise click.UsageError("give at least one of --hourly N, --daily N, --weekly N (or --list)")
        created = ctx.catalog.retention.retain(tables or None, RetentionPolicy(hourly=hourly, daily=daily, weekly=weekly))
        payload = [r.to_json() for r in created]

        def text() -> None:
            table_out("retained cuts",
                      [Col("tag"), Col("action"), Col("barrier", "barrier"), Col("expires", "time"), Col("tables", "text")],
                      [[r.tag, r.action, r.barrier, r.expires_at, _tables(r.tables)] for r in created])

        ctx.out(output).emit(payload, text)
        return
    listed = ctx.catalog.retention.retained_cuts(tables or None)

    def text_list() -> None:
        table_out("retained cuts", [Col("tag"), Col("expires", "time"), Col("expired"), Col("tables", "text")],
                  [[e.tag, e.expires_at, e.expired, _tables(e.tables)] for e in listed])

    ctx.out(output).emit([e.to_json() for e in listed], text_list)


@click.command()
@click.argument("tables", nargs=-1, required=True)
@click.option("--ttl", default="1h", show_default=True, help="how long the pin lives (30m, 2h, 1d); it expires by itself")
@click.option("--level", "-l", type=click.Choice(LEVELS), default=DEFAULT_LEVEL, show_default=True, help="isolation level of the pinned cut")
@click.option("--as-of", "as_of", default=None, help="pin the cut at or before this barrier: ms, ISO-8601 time, now, now-1h or -1h (protocol §3.8)")
@click.option("--spark-catalog", default="lake", show_default=True, help="Spark catalog name used in the printed SQL")
@output_option
@click.pass_obj
@command_errors
def pin(ctx: Context, tables: tuple[str, ...], ttl: str, level: str, as_of: str | None, spark_catalog: str,
        output: str | None) -> None:
    """Pin a consistent cut of TABLES while a long read runs: no expiry removes it until the ttl passes.

    The pin is an Iceberg tag consistent-pin-<id> on every table, with a ref age that Spark's and
    other engines' expiry honour too. Release it with `unpin TAG` when the read is done.

    \b
    Example:
      consistent-catalog --catalog lake pin demo.words demo.word_counts --ttl 2h --output json
      spark-sql> SELECT * FROM lake.demo.words VERSION AS OF 'consistent-pin-<id>'
      consistent-catalog --catalog lake unpin consistent-pin-<id>
    """
    pinned = ctx.catalog.pins.pin(tables, level=level, as_of=as_of, ttl=ttl)

    def text() -> None:
        click.echo(f"pinned {pinned.tag} until {fmt_ms(pinned.expires_at)} (cut at barrier {fmt_barrier(pinned.cut.barrier)})")
        for name in pinned.tables:
            click.echo(f"  SELECT * FROM {spark_catalog}.{name} VERSION AS OF '{pinned.tag}'")

    ctx.out(output).emit(pinned.to_json(), text)


@click.command()
@click.argument("tag")
@click.argument("tables", nargs=-1)
@output_option
@click.pass_obj
@command_errors
def unpin(ctx: Context, tag: str, tables: tuple[str, ...], output: str | None) -> None:
    """Release pin TAG (remove the tag from TABLES, or from every table that carries it).

    \b
    Example:
      consistent-catalog --catalog lake unpin consistent-pin-3f2a9c0d1e2b4a5f
    """
    removed = ctx.catalog.pins.unpin(tag, tables or None)
    if not removed and not tables:
        raise InvalidInputError(
            f"no table carries tag {tag}; `consistent-catalog pins` lists the pins, `consistent-catalog retain --list` "
            "the retained cuts"
        )
    ctx.out(output).emit({"tag": tag, "removed_from": removed},
         lambda: click.echo(f"removed {tag} from {', '.join(removed) or 'no table'}"))


@click.command()
@click.argument("tables", nargs=-1)
@output_option
@click.pass_obj
@command_errors
def pins(ctx: Context, tables: tuple[str, ...], output: str | None) -> None:
    """List reader pins on TABLES (all tables by default) with their expiry.

    \b
    Example:
      consistent-catalog --catalog lake pins
    """
    found = ctx.catalog.pins.list(tables or None)

    def text() -> None:
        table_out("pins", [Col("tag"), Col("expires", "time"), Col("expired"), Col("tables", "text")],
                  [[p.tag, p.expires_at, p.expired, _tables(p.tables)] for p in found])

    ctx.out(output).emit([p.to_json() for p in found], text)


COMMANDS = (expire, retain, pin, unpin, pins)

