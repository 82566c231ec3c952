"""Contract tests for the PySpark internals the package relies on (``consistent_catalog.spark._jvm``) and
for Spark behaviour the streaming root builds on: each assumption asserted on real Spark, so an
upgrade that breaks one fails here first."""

from __future__ import annotations

import re
import time

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from consistent_catalog import ConsistentCatalog
from tests.harness.lake import sqlite_catalog
from tests.harness.source import lines_matching

pytestmark = pytest.mark.spark

PRIVATE = re.compile(r"\._jvm\b|\._jsparkSession\b|\._gateway\b|\._jsc\b|\._jdf\b|\._jconf\b|\._options\b")


def test_no_other_module_touches_pyspark_internals() -> None:
    assert lines_matching(PRIVATE, except_in="_jvm.py") == []


def test_builder_options_are_the_settings_a_builder_holds() -> None:
    """``configure_spark`` reads them to add to a builder's jars and extensions rather than replace them."""
    from pyspark.sql import SparkSession

    from consistent_catalog.spark import _jvm

    builder = SparkSession.builder.appName("options").config("spark.jars", "/a.jar").config("spark.x", 1)
    assert _jvm.builder_options(builder) == {"spark.app.name": "options", "spark.jars": "/a.jar", "spark.x": "1"}
    assert _jvm.builder_options(SparkSession.builder) == {}  # every access is a new builder


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from consistent_catalog.spark.session import build_session

    root = tmp_path_factory.mktemp("spark-internals")
    catalog = sqlite_catalog(root)
    spark = build_session(f"sqlite:///{root}/catalog.db", root / "warehouse", app_name="test-spark-internals")
    yield root, catalog, spark
    spark.stop()


def test_jvm_accessors_reach_the_driver(env) -> None:
    from consistent_catalog.spark import _jvm

    _, _, spark = env
    jvm = _jvm.jvm(spark)
    assert jvm.java.lang.Math.max(2, 7) == 7
    session = _jvm.java_session(spark)
    assert session is _jvm.java_session(spark)  # one object per session: a stable key
    assert session.sparkContext().appName() == "test-spark-internals"
    fs = jvm.org.apache.hadoop.fs.Path("file:///tmp").getFileSystem(_jvm.hadoop_configuration(spark))
    assert jvm.java.lang.Class.forName("org.apache.hadoop.fs.LocalFileSystem").isInstance(fs)
    assert _jvm.catalog_plugin(spark, "lake").name() == "lake"
    gateway = _jvm.start_callback_server(spark)
    assert gateway.get_callback_server() is not None


def test_a_streaming_query_has_catalogs_of_its_own_taken_from_the_conf_at_start(env) -> None:
    """The root stream caches its table in the query's session only (``_stream_catalog_cache``)."""
    from consistent_catalog.spark import _jvm
    from consistent_catalog.spark.streaming import RootStreamWriter, start_root_stream

    root, catalog, spark = env
    catalog.create_namespace("internals")
    catalog.create_table("internals.ticks", schema=Schema(NestedField(1, "id", LongType(), required=False)))
    cc = ConsistentCatalog(catalog)
    seen: list[str] = []
    write = RootStreamWriter._write_batch

    def spying(self, frame, batch_id):
        lake = _jvm.java_session(frame.sparkSession).sessionState().catalogManager().catalog("lake")
        seen.append(lake.icebergCatalog().getClass().getName())
        return write(self, frame, batch_id)

    RootStreamWriter._write_batch = spying
    try:
        ticks = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 10).load().selectExpr("value AS id")
        query = start_root_stream(ticks, cc, "internals.ticks", checkpoint_location=str(root / "chk"),
                                  trigger="0 seconds", idle_after=None)
        deadline = time.monotonic() + 120
        while len(query.batches) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        query.stop()
    finally:
        RootStreamWriter._write_batch = write
    assert len(seen) >= 3 and set(seen) == {"org.apache.iceberg.CachingCatalog"}
    parent = _jvm.java_session(spark).sessionState().catalogManager().catalog("lake").icebergCatalog()
    assert parent.getClass().getName() == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert spark.conf.get("spark.sql.catalog.lake.cache-enabled") == "false"
    # every batch landed once, staged and published (a stale cached table would have written to main directly)
    table = sqlite_catalog(root).load_table("internals.ticks")
    ids = table.scan().to_arrow()["id"].to_pylist()
    landed = [b for b in query.batches if not b.skipped]
    assert len(ids) == len(set(ids)) == 10 * len(landed)
    assert all(s.summary.additional_properties.get("wap.id") for s in table.snapshots()
               if s.snapshot_id in {b.snapshot_id for b in landed})
