"""``configure_spark(builder, ...)``: what it adds to a PySpark builder, without starting a JVM.

A session built this way is started by tests/integration/test_wheel.py (from the installed wheel) and, through
``build_session``, by every Spark test module.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from consistent_catalog.exceptions import CatalogConfigError
from consistent_catalog.spark import _jvm
from consistent_catalog.spark.session import (
    EXTENSIONS,
    PLUGIN_EXTENSIONS,
    configure_spark,
    find_plugin_jar,
    spark_conf,
)


def test_it_adds_both_catalogs_and_the_jars_and_keeps_what_the_builder_had(tmp_path: Path) -> None:
    plugin = find_plugin_jar()
    assert plugin is not None, "make setup builds build/jvm/spark-<line>/lake-consistent-spark-*.jar"
    builder = (SparkSession.builder.appName("mine")
               .config("spark.jars", "/opt/mine.jar")
               .config("spark.sql.extensions", "com.example.MyExtensions"))
    returned = configure_spark(builder, f"sqlite:///{tmp_path}/catalog.db", tmp_path / "warehouse")
    assert returned is builder
    options = _jvm.builder_options(builder)
    expected = spark_conf(f"sqlite:///{tmp_path}/catalog.db", tmp_path / "warehouse")
    assert options["spark.sql.catalog.lake_consistent"] == "io.consistentcatalog.spark.ConsistentSparkCatalog"
    assert options["spark.sql.catalog.lake.uri"] == f"jdbc:sqlite:{tmp_path}/catalog.db"
    # the builder's own jars and extensions first, ours appended, nothing twice
    assert options["spark.jars"].split(",") == ["/opt/mine.jar", *expected["spark.jars"].split(",")]
    assert plugin in options["spark.jars"].split(",")
    assert options["spark.sql.extensions"].split(",") == ["com.example.MyExtensions", EXTENSIONS, PLUGIN_EXTENSIONS]
    assert options["spark.app.name"] == "mine"
    assert {k: v for k, v in options.items() if k not in ("spark.jars", "spark.sql.extensions", "spark.app.name")} == {
        k: v for k, v in expected.items() if k not in ("spark.jars", "spark.sql.extensions")}
    # pyiceberg created the SQLite catalog database before any Spark could (the SQLite-lock trap)
    assert (tmp_path / "catalog.db").is_file()

    again = configure_spark(builder, f"sqlite:///{tmp_path}/catalog.db", tmp_path / "warehouse")
    assert _jvm.builder_options(again)["spark.jars"] == options["spark.jars"]  # idempotent


def test_without_the_plugin_jar_it_refuses_naming_the_way_out_unless_asked_for_the_plain_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONSISTENT_PLUGIN_JAR", str(tmp_path / "missing.jar"))
    with pytest.raises(CatalogConfigError) as raised:
        configure_spark(SparkSession.builder, f"sqlite:///{tmp_path}/catalog.db", tmp_path / "warehouse")
    message = str(raised.value)
    assert "\n" not in message
    assert f"$CONSISTENT_PLUGIN_JAR={tmp_path / 'missing.jar'} is not a file" in message
    assert "consistent=False" in message

    builder = configure_spark(SparkSession.builder, f"sqlite:///{tmp_path}/catalog.db", tmp_path / "warehouse",
                              consistent=False)
    options = _jvm.builder_options(builder)
    assert options["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert not [k for k in options if k.startswith("spark.sql.catalog.lake_consistent")]
    assert options["spark.sql.extensions"] == EXTENSIONS


def test_it_takes_only_a_builder(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"SparkSession\.Builder \(SparkSession\.builder\), not dict"):
        configure_spark({}, f"sqlite:///{tmp_path}/catalog.db", tmp_path / "warehouse")  # type: ignore[arg-type]
