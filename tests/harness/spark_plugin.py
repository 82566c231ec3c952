"""The Spark catalog plugin (jvm/spark-plugin) for tests and benchmarks: a Spark conf with it.

``plugin_conf()`` builds the plugin (``scripts/build_jvm.sh`` builds it and packs
``build/jvm/spark-<line>/lake-consistent-spark-<line>_<scala>-<version>.jar`` with Maven) and returns ``spark_conf()``, which then holds the plain catalog and the
consistent catalog ``<name>_consistent`` over the same catalog database — exactly what the rendered
``spark-conf/spark-defaults.conf`` holds. ``write_properties()`` writes it as a ``spark-sql --properties-file``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

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


@contextmanager
def session_in_own_jvm(
    catalog_uri: str, warehouse: str | Path, *, env: Mapping[str, str | None], cwd: Path, app_name: str,
) -> Iterator[Any]:
    """A Spark session (``build_session``) on a driver JVM started for it with ``env`` set (None: unset) and ``cwd``
    as its working directory.

    PySpark starts one driver JVM per Python process and keeps it after ``spark.stop()``, with the environment and
    working directory the process had then: so the JVM an earlier module left is ended first, and this one is ended
    when the block ends (a later module starts its own again, with the test process's environment).
    """
    from consistent_catalog.spark.session import build_session

    end_driver_jvm()
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            if value is None:
                patch.delenv(key, raising=False)
            else:
                patch.setenv(key, value)
        patch.chdir(cwd)
        spark = build_session(catalog_uri, str(warehouse), app_name=app_name)
    try:
        yield spark
    finally:
        spark.stop()
        end_driver_jvm()


def end_driver_jvm() -> None:
    """Stop the running SparkContext, if any, and end the driver JVM PySpark keeps (EOF on its standard input is how
    PySpark's gateway server exits; its shutdown hooks run) and wait for it."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=120)
    SparkContext._gateway = None
    SparkContext._jvm = None
