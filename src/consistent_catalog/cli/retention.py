"""Retention commands: ``expire``, ``retain``, ``pin``, ``unpin``, ``pins``. Added to the CLI by ``register(cli)``."""

from __future__ import annotations

import click

from consistent_catalog.cli.main import Context, command_errors, emit, fmt_ms, output_option, table_out
from consistent_catalog.resolver import DEFAULT_LEVEL, LEVELS


def _reasons(reasons: tuple[str, ...] | list[str], limit: int = 2) -> str:
    """The first reasons, so that rows stay one line wide (--output json has them all)."""
    shown = [r for r in reasons if r != "..."]
    if not shown:
        return "-"
    more = len(shown) - limit
    return "; ".join(shown[:limit]) + (f" (+{more} more)" if more > 0 else "")


@click.command()
@click.argument("tables", nargs=-1)
@click.option("--older-than", "older_than", default=None,
              help="never expire snapshots newer than this (90s, 30m, 12h, 7d, 2w; a bare number is ms); "
                   "default: the table property history.expire.max-snapshot-age-ms, else 5d")
@click.option("--keep-last", type=int, default=None,
              help="always keep the newest N snapshots of main (default: history.expire.min-snapshots-to-keep, else 1)")
@click.option("--delete-files", is_flag=True, help="also delete data, manifest and manifest-list files no retained snapshot references")
@click.option("--dry-run", is_flag=True, help="list what would be expired and why the rest stays; change nothing")
@click.option("--details", is_flag=True, help="list every kept snapshot with its reasons")
@output_option
@click.pass_obj
@command_errors
def expire(ctx: Context, tables: tuple[str, ...], older_than: str | None, keep_last: int | None, delete_files: bool,
           dry_run: bool, details: bool, output: str | None) -> None:
    """Expire old snapshots of TABLES (all tables by default) that no consistent cut still needs.

    Never expires a snapshot needed by the latest repeatable-read cut of the tables' lineage, by the
    epoch inputs recorded downstream, by a staged epoch, or by a live pin or retained cut
    (consistent-* tags; those whose ref age passed are dropped).

    \b
    Example:
      consistent-catalog --catalog lake expire --older-than 1d --dry-run
      consistent-catalog --catalog lake expire demo.words demo.word_counts --older-than 12h --delete-files
    """
    from consistent_catalog.retention import RetentionPolicy
    from consistent_catalog.retention import expire as run_expire

    policy = RetentionPolicy.of(older_than=older_than, keep_last=keep_last, delete_files=delete_files)
    result = run_expire(ctx.catalog, tables or None, policy, dry_run=dry_run)
    plan = result.plan

    def text() -> None:
        verb = "would expire" if dry_run else "expired"
        table_out(
            f"{'dry run: ' if dry_run else ''}expiry at {fmt_ms(plan.now)}",
            ["table", "snapshots", verb, "kept", "tags dropped", "history starts at", "barrier", "held by"],
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
                table_out(f"kept snapshots of {name}", ["snapshot_id", "barrier", "committed", "why it stays"],
                          [[sid, t.barriers.get(sid), fmt_ms(t.timestamps.get(sid)), _reasons(r)] for sid, r in t.keep.items()])

    emit(ctx, output, result.to_json(details=details), text)


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
    from consistent_catalog.retention import RetentionPolicy, retained_cuts
    from consistent_catalog.retention import retain as run_retain

    if not list_only:
        if not (hourly or daily or weekly):
            raise click.UsageError("give at least one of --hourly N, --daily N, --weekly N (or --list)")
        created = run_retain(ctx.catalog, tables or None, RetentionPolicy(hourly=hourly, daily=daily, weekly=weekly))
        payload = [r.to_json() for r in created]

        def text() -> None:
            table_out("retained cuts", ["tag", "action", "barrier", "expires", "tables"],
                      [[r.tag, r.action, r.barrier, fmt_ms(r.expires_at), ", ".join(f"{t}@{s}" for t, s in r.tables.items())]
                       for r in created])

        emit(ctx, output, payload, text)
        return
    listed = retained_cuts(ctx.catalog, tables or None)

    def text_list() -> None:
        table_out("retained cuts", ["tag", "expires", "expired", "tables"],
                  [[e["tag"], fmt_ms(e["expires_at"]), e["expired"], ", ".join(f"{t}@{s}" for t, s in e["tables"].items())]
                   for e in listed])

    emit(ctx, output, listed, text_list)


@click.command()
@click.argument("tables", nargs=-1, required=True)
@click.option("--ttl", default="1h", show_default=True, help="how long the pin lives (30m, 2h, 1d); it expires by itself")
@click.option("--level", "-l", type=click.Choice(LEVELS), default=DEFAULT_LEVEL, show_default=True, help="isolation level of the pinned cut")
@click.option("--as-of", "as_of", default=None, help="pin the cut at or before this barrier (ms) or ISO-8601 time")
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
    from consistent_catalog.pins import pin as take_pin

    pinned = take_pin(ctx.catalog, tables, level=level, as_of=as_of, ttl=ttl)

    def text() -> None:
        click.echo(f"pinned {pinned.tag} until {fmt_ms(pinned.expires_at)} (cut at barrier {pinned.cut.barrier})")
        for name in pinned.tables:
            click.echo(f"  SELECT * FROM {spark_catalog}.{name} VERSION AS OF '{pinned.tag}'")

    emit(ctx, output, pinned.to_json(), text)


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
    from consistent_catalog.exceptions import InvalidInputError
    from consistent_catalog.pins import unpin as release

    removed = release(ctx.catalog, tag, tables or None)
    if not removed and not tables:
        raise InvalidInputError(f"no table carries tag {tag}; `consistent-catalog pins` lists the live pins")
    emit(ctx, output, {"tag": tag, "removed_from": removed},
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
    from consistent_catalog.pins import list_pins

    found = list_pins(ctx.catalog, tables or None)

    def text() -> None:
        table_out("pins", ["tag", "expires", "expired", "tables"],
                  [[p.tag, fmt_ms(p.expires_at), p.expired, ", ".join(f"{t}@{s}" for t, s in p.tables.items())] for p in found])

    emit(ctx, output, [p.to_json() for p in found], text)


COMMANDS = (expire, retain, pin, unpin, pins)


def register(cli_group: click.Group) -> None:
    """Add the retention commands to the ``consistent-catalog`` group."""
    for command in COMMANDS:
        cli_group.add_command(command)
