"""The Spark catalog plugin (jvm/spark-plugin) for tests and benchmarks: its jar and a Spark conf with it.

``plugin_jar()`` compiles the module with ``scripts/build_jvm.sh`` and packs the classes into
``build/jvm/spark-plugin.jar`` with the JDK's ``jar`` tool (``spark.jars`` takes jars, not class
directories, and the plugin must be loaded by the same class loader as the Iceberg runtime jar).
``plugin_conf()`` is ``spark_conf()`` of the plain catalog plus the consistent catalog over the same
catalog database; ``write_properties()`` writes it as a ``spark-sql --properties-file``.

What the rendered ``spark-conf/spark-defaults.conf`` needs (for the lead, src/): the same lines.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from consistent_catalog.spark.session import SMALL_MACHINE_CONF, spark_conf

ROOT = Path(__file__).resolve().parents[2]
MODULE = "spark-plugin"
PLUGIN_CLASS = "io.consistentcatalog.spark.ConsistentSparkCatalog"
EXTENSIONS_CLASS = "io.consistentcatalog.spark.ConsistentSqlExtensions"
"""Parses CALL <catalog>.system.refresh_cut() / current_cut(...) (Iceberg's parser takes only its own procedures)."""
CONSISTENT = "lake_consistent"

#: Copied from the plain catalog to the consistent one: the same catalog database and warehouse.
SHARED_KEYS = ("type", "uri", "warehouse", "jdbc.init-catalog-tables", "cache-enabled", "jdbc.user", "jdbc.password",
               "io-impl")

#: What a stock spark-sql needs besides (see spark-conf/spark-defaults.conf.template).
SPARK_SQL_CONF = {
    "spark.master": "local[2]",
    "spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:derby:memory:spark_sql_metastore;create=true",
    "spark.driver.extraJavaOptions": "-Dderby.stream.error.file=/dev/null",
}


def build_module() -> Path:
    """``scripts/build_jvm.sh`` (idempotent); returns build/jvm/spark-plugin."""
    subprocess.run(["bash", str(ROOT / "scripts" / "build_jvm.sh")], check=True, cwd=ROOT)
    return ROOT / "build" / "jvm" / MODULE


def plugin_jar() -> Path:
    """build/jvm/spark-plugin.jar, repacked when the classes are newer."""
    module = build_module()
    classes = module / "classes"
    jar = ROOT / "build" / "jvm" / f"{MODULE}.jar"
    newest = max((p.stat().st_mtime for p in classes.rglob("*") if p.is_file()), default=0.0)
    if jar.is_file() and jar.stat().st_mtime >= newest:
        return jar
    java_file = module / "java"
    java = Path(java_file.read_text().strip()) if java_file.is_file() else None
    tool = str(java.parent / "jar") if java is not None and (java.parent / "jar").exists() else "jar"
    partial = jar.with_suffix(".jar.tmp")
    subprocess.run([tool, "cf", str(partial), "-C", str(classes), "."], check=True)
    partial.replace(jar)
    return jar


def plugin_conf(
    catalog_uri: str, warehouse: str | Path, *, name: str = "lake", consistent: str = CONSISTENT,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The plain catalog ``name`` and the consistent catalog over the same database, with the plugin jar."""
    conf = spark_conf(catalog_uri, warehouse, name=name)
    plain = f"spark.sql.catalog.{name}"
    target = f"spark.sql.catalog.{consistent}"
    conf[target] = PLUGIN_CLASS
    for key in SHARED_KEYS:
        if f"{plain}.{key}" in conf:
            conf[f"{target}.{key}"] = conf[f"{plain}.{key}"]
    conf[f"{target}.plain-catalog"] = name
    conf["spark.sql.extensions"] = ",".join([conf["spark.sql.extensions"], EXTENSIONS_CLASS])
    jars = [j for j in conf.get("spark.jars", "").split(",") if j]
    conf["spark.jars"] = ",".join([*jars, str(plugin_jar())])
    conf.update(extra or {})
    return conf


def write_properties(path: Path, conf: Mapping[str, str]) -> Path:
    """A spark-defaults.conf for ``spark-sql --properties-file`` (small-machine and spark-sql settings included)."""
    lines = {**SMALL_MACHINE_CONF, **SPARK_SQL_CONF, **conf}
    path.write_text("".join(f"{k} {v.replace(chr(92), chr(92) * 2)}\n" for k, v in lines.items()), encoding="utf-8")
    return path
