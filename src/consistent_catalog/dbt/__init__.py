"""The dbt package shipped inside the wheel (``dbt_project.yml``, ``macros/``): ``consistent-catalog dbt-path``."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""The dbt package's directory: a project's packages.yml names it as ``- local: <this path>``."""

# spark-defaults keys that only the spark-sql CLI uses (its Hive metastore, its result header): not in a profile
_CLI_ONLY = ("spark.hadoop.javax.jdo.option.ConnectionURL", "spark.hadoop.hive.cli.print.header")


def dbt_profile(
    catalog_uri: str,
    warehouse: str | None,
    *,
    name: str = "lake",
    profile: str = "consistent",
    schema: str = "analytics",
) -> str:
    """A profiles.yml holding one profile ``profile``: dbt-spark's ``session`` method (Spark in dbt's process) with
    every setting of ``consistent-catalog spark-conf`` as ``server_side_parameters``, the consistent catalog
    ``<name>_consistent`` as the default catalog (dbt-spark names tables ``schema.table``) and one thread.

    Nothing else is needed at run time: no SPARK_CONF_DIR, no spark-defaults.conf.
    """
    import json
    import re

    from consistent_catalog.exceptions import CatalogConfigError
    from consistent_catalog.spark.session import builtin_template, parse_spark_defaults, render_spark_defaults

    for what, value in (("profile", profile), ("schema", schema)):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise CatalogConfigError(f"dbt {what} name {value!r} must be letters, digits and _ (a dbt/Spark identifier)")
    conf = parse_spark_defaults(render_spark_defaults(builtin_template(), catalog_uri, warehouse, name=name))
    if f"spark.sql.catalog.{name}_consistent" not in conf:
        from consistent_catalog.spark.session import missing_plugin_jar_message

        raise CatalogConfigError(f"no Spark plugin jar, so no {name}_consistent for dbt to write through: "
                                 f"{missing_plugin_jar_message()}")
    for key in _CLI_ONLY:
        conf.pop(key, None)
    # dbt-spark renders relations as schema.table: every name dbt writes, reads or lists resolves in the default
    # catalog. The session method asks for Hive support; an in-memory session catalog avoids starting a metastore.
    conf["spark.sql.defaultCatalog"] = f"{name}_consistent"
    conf["spark.sql.catalogImplementation"] = "in-memory"
    lines = [
        "# Rendered by `consistent-catalog spark-conf --dbt-profile` (README.md, \"dbt\"). dbt-spark's session method:",
        "# Spark runs inside dbt's process with these settings; tables are written through the consistent catalog.",
        f"{profile}:",
        "  target: lake_consistent",
        "  outputs:",
        "    lake_consistent:",
        "      type: spark",
        "      method: session",
        "      host: NA            # required by dbt-spark, unused by the session method",
        f"      schema: {schema}   # the default Iceberg namespace of the models (a model's schema config adds to it)",
        "      # one thread: a model's job is the Spark session's setting spark.sql.consistent.job, shared by all threads",
        "      threads: 1",
        "      server_side_parameters:",
    ]
    lines.extend(f"        {json.dumps(key)}: {json.dumps(value)}" for key, value in conf.items())
    return "\n".join(lines) + "\n"
