"""``consistent-catalog init``: one command sets up a lake for Spark, the CLI and Python (``lake_setup``)."""

from __future__ import annotations

import shlex

import click

from consistent_catalog.cli.output import Context, command_errors, output_option


@click.command("init")
@click.option("--dir", "directory", default="lake", show_default=True,
              help="the lake's directory: DIR/catalog.db, DIR/warehouse and DIR/spark-defaults.conf")
@click.option("--name", default="lake", show_default=True,
              help="catalog name, the same in Spark (NAME and NAME_consistent) and pyiceberg")
@click.option("--catalog-uri", default=None,
              help="an existing catalog instead of DIR/catalog.db: postgresql+psycopg2://..., http(s)://... (REST), "
                   "sqlite:////path")
@click.option("--warehouse", default=None, help="warehouse path or URI (default: DIR/warehouse for DIR's catalog)")
@click.option("--spark-conf", "spark_conf", type=click.Path(dir_okay=False), default=None,
              help="write Spark's properties file here (default: DIR/spark-defaults.conf)")
@click.option("--pyiceberg-yaml", type=click.Path(dir_okay=False), default=None,
              help="the .pyiceberg.yaml to add the entry to (default: the one pyiceberg reads, else "
                   "$PYICEBERG_HOME/.pyiceberg.yaml or ~/.pyiceberg.yaml)")
@click.option("--print", "print_only", is_flag=True, help="print the .pyiceberg.yaml entry instead of writing it")
@click.option("--force", is_flag=True, help="repoint an existing .pyiceberg.yaml entry of NAME at this catalog")
@output_option
@click.pass_obj
@command_errors
def init(ctx: Context, directory: str, name: str, catalog_uri: str | None, warehouse: str | None,
         spark_conf: str | None, pyiceberg_yaml: str | None, print_only: bool, force: bool,
         output: str | None) -> None:
    """Set up a lake: the catalog, its .pyiceberg.yaml entry and Spark's properties file, naming one catalog.

    Creates DIR/catalog.db (SQLite; an existing catalog is kept) and DIR/warehouse, adds catalog NAME to
    the .pyiceberg.yaml pyiceberg reads (the CLI and ConsistentCatalog.load find it), and writes
    DIR/spark-defaults.conf with NAME and NAME_consistent (spark-sql --properties-file, a Thrift server,
    SPARK_CONF_DIR=DIR). Running it again changes nothing.

    \b
    Example:
      consistent-catalog init                        # ./lake, catalog 'lake'
      consistent-catalog status
      spark-sql --properties-file lake/spark-defaults.conf -e 'SHOW NAMESPACES IN lake'
      consistent-catalog init --dir /data/lake --name analytics --print
    """
    from consistent_catalog.lake_setup import set_up_lake

    done = set_up_lake(directory, name=name, catalog_uri=catalog_uri, warehouse=warehouse, spark_conf=spark_conf,
                       pyiceberg_yaml=pyiceberg_yaml, write_pyiceberg=not print_only, force=force)
    payload = {
        "name": done.name,
        "uri": done.uri,
        "warehouse": done.warehouse,
        "pyiceberg_yaml": str(done.pyiceberg_yaml),
        "pyiceberg_entry": done.pyiceberg_action,
        "spark_conf": str(done.spark_conf),
        "spark_catalogs": [done.name, *([f"{done.name}_consistent"] if done.consistent_catalog else [])],
        "notes": list(done.notes),
        "next": next_commands(done.name, str(done.spark_conf)),
    }

    def text() -> None:
        from consistent_catalog.spark.session import missing_plugin_jar_message

        click.echo(f"catalog {done.name}: {done.uri}")
        click.echo(f"  warehouse  {done.warehouse}")
        if done.pyiceberg_action == "printed":
            click.echo(f"  pyiceberg  add to {done.pyiceberg_yaml} (or the .pyiceberg.yaml you use):")
            click.echo("\n".join("    " + line for line in done.pyiceberg_entry.splitlines()))
        else:
            click.echo(f"  pyiceberg  {done.pyiceberg_yaml}: entry {done.name!r} {done.pyiceberg_action}")
        click.echo(f"  Spark      {done.spark_conf}: {' and '.join(payload['spark_catalogs'])}")
        if not done.consistent_catalog:
            click.echo(f"note: no {done.name}_consistent, no Spark plugin jar: {missing_plugin_jar_message()}",
                       err=True)
        for note in done.notes:
            click.echo(f"note: {note}", err=True)
        click.echo("next:")
        for line in payload["next"]:
            click.echo(f"  {line}")

    ctx.out(output).emit(payload, text)


def next_commands(name: str, spark_conf: str) -> list[str]:
    """The shell lines that use the lake, runnable as printed from the shell ``init`` was called in."""
    from consistent_catalog.cli.shell import runnable

    return runnable([f"consistent-catalog --catalog {shlex.quote(name)} status",
                     f"spark-sql --properties-file {shlex.quote(spark_conf)}"])


@click.command("check-catalog")
@click.option("--no-record", is_flag=True, help="do not record the result in the catalog (writers read it)")
@output_option
@click.pass_obj
@command_errors
def check_catalog(ctx: Context, no_record: bool, output: str | None) -> None:
    """Probe the catalog for what the protocol relies on (protocol §6.5); exit code 1 when a capability fails.

    On scratch tables in the namespace consistent_probe (dropped afterwards): a commit from a stale base is
    refused; of two concurrent commits from one base exactly one lands; a branch survives a commit to main;
    snapshot summary properties round-trip. The result is recorded as that namespace's property
    consistent.catalog-probe, which writers read once per process: they refuse a catalog that failed.

    \b
    Example:
      consistent-catalog --catalog glue check-catalog
      consistent-catalog --catalog hive check-catalog -o json
    """
    import sys

    from consistent_catalog.cli.output import Col, table_out
    from consistent_catalog.probe import probe_catalog

    report = probe_catalog(ctx.catalog.catalog, record=not no_record)

    def text() -> None:
        verdict = "holds what the protocol relies on" if report.holds else f"FAILS: {', '.join(report.failed)}"
        table_out(f"catalog {report.catalog} ({report.kind}): {verdict}",
                  [Col("capability"), Col("result"), Col("evidence", "text")],
                  [[c.capability, {True: "holds", False: "FAILS", None: "not used"}[c.holds], c.evidence]
                   for c in report.checks])

    ctx.out(output).emit(report.to_json(), text)
    if not report.holds:
        sys.exit(1)


COMMANDS = (init, check_catalog)
