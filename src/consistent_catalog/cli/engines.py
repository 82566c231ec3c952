"""Engine commands: ``spark-conf`` (render spark-defaults.conf) and ``duckdb`` (DuckDB SQL for a cut)."""

from __future__ import annotations

import click

from consistent_catalog.cli.output import Context, command_errors
from consistent_catalog.resolver import DEFAULT_LEVEL, LEVELS


@click.command("spark-conf")
@click.option("--write", "path", type=click.Path(dir_okay=False), default=None,
              help="write the rendered file here (default: print it)")
@click.option("--catalog-uri", default=None,
              help="pyiceberg SQL URI or SQLite path (default: .demo/catalog.db of the checkout you are in, else "
                   "lake/catalog.db of the current directory, as consistent-catalog init makes it)")
@click.option("--warehouse", default=None, help="warehouse path or URI (default: .demo/warehouse, or lake/warehouse, "
                                                "as for --catalog-uri)")
@click.option("--name", default="lake", show_default=True, help="catalog name, the same in Spark and pyiceberg")
@click.option("--template", default=None, help="template to render (default: the one shipped in the package, which a "
                                               "checkout's spark-conf/spark-defaults.conf.template links to)")
@click.option("--no-init-catalog", is_flag=True, help="do not create the SQLite catalog database with pyiceberg")
@click.option("--dbt-profile", "dbt_profile", default=None, metavar="PROFILE",
              help="render a dbt profiles.yml with the profile PROFILE instead (dbt-spark's session method, these "
                   "settings inline, the consistent catalog as default catalog)")
@click.option("--dbt-schema", default="analytics", show_default=True,
              help="with --dbt-profile: the profile's schema, the Iceberg namespace of the models")
@click.pass_obj
@command_errors
def spark_conf(ctx: Context, path: str | None, catalog_uri: str | None, warehouse: str | None, name: str,
               template: str | None, no_init_catalog: bool, dbt_profile: str | None, dbt_schema: str) -> None:
    """Render spark-defaults.conf for an Iceberg catalog shared by Spark and pyiceberg.

    Stock shells use it directly: spark-sql --properties-file PATH. This writes no .pyiceberg.yaml entry:
    consistent-catalog init sets up a lake for Spark, the CLI and Python at once. The consistent catalog
    (<name>_consistent) is included when its jar is found: $CONSISTENT_PLUGIN_JAR, else the jar inside
    the installed package, else build/jvm/spark-<line>/lake-consistent-spark-*.jar of a checkout (scripts/build_jvm.sh).

    \b
    Example:
      consistent-catalog spark-conf --write spark-conf/spark-defaults.conf
      consistent-catalog spark-conf --catalog-uri postgresql+psycopg2://u:p@127.0.0.1/cat --warehouse s3://bucket/wh
      consistent-catalog spark-conf --dbt-profile jaffle_shop --write ~/.dbt/profiles.yml   # a dbt profile instead
    """
    import shlex
    import tempfile
    from pathlib import Path

    from consistent_catalog.cli.shell import one_line
    from consistent_catalog.lake_setup import DEFAULT_DIR
    from consistent_catalog.spark.session import TEMPLATE_RELPATH, parse_spark_defaults, repo_root, write_spark_defaults

    if catalog_uri is None and not (repo_root() / TEMPLATE_RELPATH).is_file():
        # outside a checkout there is no demo: the lake `init` sets up (a directory named for real data)
        catalog_uri = f"sqlite:///{Path(DEFAULT_DIR, 'catalog.db').absolute()}"
        warehouse = warehouse or str(Path(DEFAULT_DIR, "warehouse").absolute())
        click.echo(f"note: the CLI and Python do not know this catalog yet: consistent-catalog init --dir {DEFAULT_DIR} "
                   "also adds it to .pyiceberg.yaml", err=True)
    if dbt_profile is not None:
        _write_dbt_profile(path, catalog_uri, warehouse, name, dbt_profile, dbt_schema, not no_init_catalog)
        return
    if path is None:
        with tempfile.TemporaryDirectory() as tmp:
            written = write_spark_defaults(Path(tmp) / "spark-defaults.conf", catalog_uri, warehouse, name=name,
                                           template=template, init_catalog=not no_init_catalog)
            text = written.read_text(encoding="utf-8")
            click.echo(text, nl=False)
        _note_missing_plugin(parse_spark_defaults(text), name)
        return
    written = write_spark_defaults(path, catalog_uri, warehouse, name=name, template=template,
                                   init_catalog=not no_init_catalog)
    conf = parse_spark_defaults(written.read_text(encoding="utf-8"))
    _note_missing_plugin(conf, name)
    click.echo(f"wrote {written}")
    click.echo(f"  catalog   {name}: {conf.get(f'spark.sql.catalog.{name}.uri')}")
    click.echo(f"  warehouse {conf.get(f'spark.sql.catalog.{name}.warehouse')}")
    if "spark.jars.packages" in conf:
        click.echo(f"  from Maven: {conf['spark.jars.packages']} (needs network access to Maven Central)")
    click.echo(f"run: {one_line([f'spark-sql --properties-file {shlex.quote(str(written))}'])}")


def _write_dbt_profile(path: str | None, catalog_uri: str | None, warehouse: str | None, name: str, profile: str,
                       schema: str, init_catalog: bool) -> None:
    from pathlib import Path

    from consistent_catalog.dbt import dbt_profile
    from consistent_catalog.spark.session import (
        DEMO_CATALOG,
        DEMO_WAREHOUSE,
        ensure_sql_catalog,
        is_service_uri,
        parse_catalog_uri,
        repo_root,
    )

    root = repo_root()
    catalog_uri = catalog_uri if catalog_uri is not None else f"sqlite:///{(root / DEMO_CATALOG).absolute()}"
    warehouse = warehouse if warehouse is not None else str(root / DEMO_WAREHOUSE)
    text = dbt_profile(catalog_uri, warehouse, name=name, profile=profile, schema=schema)
    if init_catalog:
        ensure_sql_catalog(catalog_uri, warehouse, name=name)
    if path is None:
        click.echo(text, nl=False)
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    if not is_service_uri(catalog_uri) and parse_catalog_uri(catalog_uri).password is not None:
        target.chmod(0o600)  # it holds the catalog database password
    click.echo(f"wrote {target} (dbt profile {profile}, schema {schema}): dbt run --profiles-dir {target.parent}")


@click.command("dbt-path")
def dbt_path() -> None:
    """Print the directory of the dbt package shipped in this install (the `epoch` materialization).

    A dbt project installs it with dbt deps, its packages.yml naming that path (README.md, "dbt").

    \b
    Example:
      printf 'packages:\n  - local: %s\n' "$(consistent-catalog dbt-path)" > packages.yml && dbt deps
    """
    from consistent_catalog.dbt import PACKAGE_DIR

    click.echo(str(PACKAGE_DIR))


def _note_missing_plugin(conf: dict[str, str], name: str) -> None:
    """One line on stderr when the rendered file has no consistent catalog: why the jar is missing, the way out."""
    from consistent_catalog.spark.session import missing_plugin_jar_message

    if f"spark.sql.catalog.{name}_consistent" not in conf:
        click.echo(f"note: no {name}_consistent in the file, no Spark plugin jar: {missing_plugin_jar_message()}",
                   err=True)


@click.command("duckdb")
@click.argument("tables", nargs=-1, required=True)
@click.option("--level", "-l", type=click.Choice(LEVELS), default=DEFAULT_LEVEL, show_default=True,
              help="isolation level of the cut")
@click.option("--as-of", "as_of", default=None, help="read the cut at or before this barrier: ms, ISO-8601 time, now, now-1h or -1h (protocol §3.8)")
@click.option("--with-secret", is_flag=True, help="include the S3 secret (it holds the keys!)")
@click.pass_obj
@command_errors
def duckdb(ctx: Context, tables: tuple[str, ...], level: str, as_of: str | None, with_secret: bool) -> None:
    """Print DuckDB SQL that pins one view per table of TABLES at a consistent cut.

    \b
    Example:
      consistent-catalog --catalog lake duckdb demo.words demo.word_counts > cut.sql
      duckdb -c "LOAD iceberg; .read cut.sql"
    """
    from consistent_catalog.duckdb_reader import cut_statements, duckdb_s3_secret

    cc = ctx.catalog
    cut = cc.resolve(tables, level=level, as_of=as_of)
    secret = duckdb_s3_secret(cc.catalog.properties) if with_secret else None
    click.echo("\n".join(cut_statements(cc, cut, secret=secret)))


COMMANDS = (spark_conf, duckdb, dbt_path)
