"""The Spark catalog plugin (jvm/spark-plugin) for tests and benchmarks: a Spark conf with it.

``plugin_conf()`` builds the plugin (``scripts/build_jvm.sh`` compiles it and packs
``build/jvm/spark-plugin.jar``) and returns ``spark_conf()``, which then holds the plain catalog and the
consistent catalog ``<name>_consistent`` over the same catalog database — exactly what the rendered
``spark-conf/spark-defaults.conf`` holds. ``write_properties()`` writes it as a ``spark-sql --properties-file``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from consistent_catalog.spark.session import SMALL_MACHINE_CONF, spark_conf

ROOT = Path(__file__).resolve().parents[2]
CONSISTENT = "lake_consistent"

#: What a stock spark-sql needs besides (see spark-conf/spark-defaults.conf.template).
SPARK_SQL_CONF = {
    "spark.master": "local[2]",
    "spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:derby:memory:spark_sql_metastore;create=true",
    "spark.driver.extraJavaOptions": "-Dderby.stream.error.file=/dev/null",
}


def plugin_conf(
    catalog_uri: str, warehouse: str | Path, *, name: str = "lake", consistent: str = CONSISTENT,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The plain catalog ``name`` and the consistent catalog over the same database, with the plugin jar."""
    subprocess.run(["bash", str(ROOT / "scripts" / "build_jvm.sh")], check=True, cwd=ROOT)
    conf = spark_conf(catalog_uri, warehouse, name=name)
    assert consistent == f"{name}_consistent" and f"spark.sql.catalog.{consistent}" in conf, sorted(conf)
    conf.update(extra or {})
    return conf


def write_properties(path: Path, conf: Mapping[str, str]) -> Path:
    """A spark-defaults.conf for ``spark-sql --properties-file`` (small-machine and spark-sql settings included)."""
    lines = {**SMALL_MACHINE_CONF, **SPARK_SQL_CONF, **conf}
    path.write_text("".join(f"{k} {v.replace(chr(92), chr(92) * 2)}\n" for k, v in lines.items()), encoding="utf-8")
    return path
