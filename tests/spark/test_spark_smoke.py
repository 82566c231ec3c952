"""End-to-end smoke test of the Spark stack (the installed PySpark line, Java 17, the local Iceberg Spark runtime jar, the SQLite
JDBC driver): Spark and pyiceberg on one SQLite catalog.

One SparkSession for the whole module (start-up costs seconds and hundreds of MB). Proves that
- pyiceberg creates the catalog and table, Spark appends to it with consistent.* snapshot properties;
- pyiceberg reads those properties back and the resolver turns them into a cut;
- pyiceberg still commits while Spark's JVM holds the catalog open (the SQLite-lock trap) and Spark sees
  the commit at once (table cache disabled);
- the rendered spark-defaults.conf carries the jar paths and catalog settings.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType

from consistent_catalog import ConsistentCatalog
from consistent_catalog.spark import session as spark_session
from consistent_catalog.spark.lines import current_line

pytestmark = [pytest.mark.spark]

BARRIER = 1_700_000_000_000
LATER = 1_700_000_001_000
WORDS = ["hello", "world", "hello"]
TEMPLATE = Path(__file__).resolve().parents[2] / "spark-conf" / "spark-defaults.conf.template"


def _missing_stack() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install 'consistent-catalog[spark]')"
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        return "no Java runtime (Java 17)"
    if spark_session.find_iceberg_runtime_jar() is None:
        return "no local Iceberg Spark runtime jar (make setup copies it from Maven into build/jvm/spark-<line>/lib)"
    if not any("sqlite" in Path(j).name for j in spark_session.find_jdbc_jars()):
        return "no SQLite JDBC driver (make setup copies it from Maven into build/jvm/spark-<line>/lib)"
    return None


def _installed_line():
    """The line of the installed pyspark, read from pyspark itself (not from the code under test's choice)."""
    import pyspark

    from consistent_catalog.spark.lines import SPARK_LINES

    return SPARK_LINES[".".join(pyspark.__version__.split(".")[:2])]


@dataclass
class Lake:
    root: Path
    uri: str
    warehouse: Path
    catalog: SqlCatalog
    spark: object  # pyspark.sql.SparkSession


@dataclass(frozen=True)
class SparkCommit:
    snapshot_id: int
    cut_json: dict  # ConsistentCatalog.resolve(...).to_json() right after the Spark commit


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory):
    reason = _missing_stack()
    # make test installs the whole stack; a missing piece is a failure, never a silent skip
    assert not reason, f"{reason}: run make setup"
    root = tmp_path_factory.mktemp("spark-lake")
    uri = f"sqlite:///{root / 'catalog.db'}"
    warehouse = root / "warehouse"
    # pyiceberg creates the SQLite catalog database (and the table) before Spark opens it.
    catalog = SqlCatalog("lake", uri=uri, warehouse=f"file://{warehouse}")
    catalog.create_namespace("demo")
    catalog.create_table("demo.words", Schema(NestedField(1, "word", StringType(), required=False)))
    spark = spark_session.build_session(uri, warehouse, app_name="consistent-catalog-smoke")
    try:
        yield Lake(root, uri, warehouse, catalog, spark)
    finally:
        spark.stop()


@pytest.fixture(scope="module")
def spark_commit(lake: Lake) -> SparkCommit:
    df = lake.spark.createDataFrame([(w,) for w in WORDS], "word string")
    (
        df.writeTo("lake.demo.words")
        .option("snapshot-property.consistent.barrier", str(BARRIER))
        .option("snapshot-property.consistent.job", "smoke")
        .append()
    )
    snapshot = lake.catalog.load_table("demo.words").current_snapshot()
    assert snapshot is not None
    # Captured now: later tests commit more snapshots.
    cut = ConsistentCatalog(lake.catalog).resolve(["demo.words"]).to_json()
    return SparkCommit(snapshot.snapshot_id, cut)


def spark_count(lake: Lake, sql_from: str = "lake.demo.words") -> int:
    return lake.spark.sql(f"SELECT count(*) AS n FROM {sql_from}").collect()[0]["n"]


def test_spark_commit_carries_snapshot_properties(lake: Lake, spark_commit: SparkCommit) -> None:
    table = lake.catalog.load_table("demo.words")
    snapshot = table.snapshot_by_id(spark_commit.snapshot_id)
    assert snapshot is not None and snapshot.summary is not None
    summary = snapshot.summary.additional_properties
    assert summary["consistent.barrier"] == str(BARRIER)
    assert summary["consistent.job"] == "smoke"
    assert summary.get("engine-name") == "spark"  # really written by Spark, not pyiceberg
    assert table.scan(snapshot_id=spark_commit.snapshot_id).to_arrow().num_rows == len(WORDS)


def test_resolver_finds_spark_snapshot(spark_commit: SparkCommit) -> None:
    assert spark_commit.cut_json == {
        "level": "repeatable-read",
        "barrier": BARRIER,
        "tables": {"demo.words": {"snapshot_id": spark_commit.snapshot_id, "barrier": BARRIER}},
    }


def test_pyiceberg_commits_while_spark_runs_and_spark_sees_them(lake: Lake, spark_commit: SparkCommit) -> None:
    before = spark_count(lake)  # Spark's JdbcCatalog has the SQLite file open now
    cc = ConsistentCatalog(lake.catalog)
    result = cc.ingest("demo.words", pa.table({"word": pa.array(["late", "words"], pa.string())}), barrier=LATER)
    assert result.barrier == LATER

    pyiceberg_rows = lake.catalog.load_table("demo.words").scan().to_arrow().num_rows
    assert pyiceberg_rows == before + 2
    assert spark_count(lake) == pyiceberg_rows  # no 30 s table cache hiding pyiceberg's commit

    cut = cc.resolve(["demo.words"]).to_json()
    assert cut["barrier"] == LATER
    assert cut["tables"]["demo.words"] == {"snapshot_id": result.snapshot_id, "barrier": LATER}

    # Spark can read the resolved snapshots of both cuts; the earlier cut still shows the Spark commit only.
    assert spark_count(lake, f"lake.demo.words VERSION AS OF {result.snapshot_id}") == pyiceberg_rows
    assert spark_count(lake, f"lake.demo.words VERSION AS OF {spark_commit.snapshot_id}") == len(WORDS)
    spark_ids = {r["snapshot_id"] for r in lake.spark.sql("SELECT snapshot_id FROM lake.demo.words.snapshots").collect()}
    assert {spark_commit.snapshot_id, result.snapshot_id} <= spark_ids


def test_an_airflow_tasks_pinned_cut_reads_in_spark_at_its_snapshots(lake: Lake, spark_commit: SparkCommit) -> None:
    """Issue 48: what a sensor hands its task (``PinnedCut``) reads in Spark the cut it names, not the newest."""
    from consistent_catalog.airflow import PinnedCut

    ConsistentCatalog(lake.catalog).ingest("demo.words", pa.table({"word": pa.array(["newer"], pa.string())}),
                                           barrier=LATER + 500)
    pinned = PinnedCut.of({"catalog": "lake", **spark_commit.cut_json})
    assert pinned.spark_read(lake.spark, "demo.words").count() == len(WORDS)  # versionAsOf
    for statement in pinned.spark_sql("lake")[1:]:  # after the comment line: one pinned view
        lake.spark.sql(statement.rstrip(";"))
    try:
        assert spark_count(lake, "words") == len(WORDS)
    finally:
        lake.spark.catalog.dropTempView("words")
    assert spark_count(lake) == lake.catalog.load_table("demo.words").scan().to_arrow().num_rows > len(WORDS)


def test_rendered_spark_defaults_has_jars_and_catalog(tmp_path: Path) -> None:
    reason = _missing_stack()
    # make test installs the whole stack; a missing piece is a failure, never a silent skip
    assert not reason, f"{reason}: run make setup"
    catalog_db = tmp_path / "demo" / "catalog.db"
    warehouse = tmp_path / "demo" / "warehouse"
    written = spark_session.write_spark_defaults(
        tmp_path / "spark-defaults.conf", f"sqlite:///{catalog_db}", warehouse, template=TEMPLATE
    )
    text = written.read_text()
    assert "{{" not in "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    conf = spark_session.parse_spark_defaults(text)

    jars = conf["spark.jars"].split(",")
    assert spark_session.find_iceberg_runtime_jar() in jars
    # the runtime of the installed pyspark's line (3.5.9 -> iceberg-spark-runtime-3.5_2.12-<iceberg>.jar)
    line = _installed_line()
    assert any(Path(j).name.startswith(f"iceberg-spark-runtime-{line.suffix}-{line.iceberg}") for j in jars)
    assert any(Path(j).name.startswith("sqlite-jdbc-") for j in jars) or os.environ.get("CONSISTENT_JDBC_JARS")
    assert all(Path(j).is_file() for j in jars)
    assert "spark.jars.packages" not in conf  # everything is local
    assert conf["spark.sql.extensions"].split(",") == [
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "io.consistentcatalog.spark.ConsistentSqlExtensions",  # the consistent catalog's CALL parser
    ]
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    # the consistent catalog over the same catalog database, with its jar (built by make setup)
    assert conf["spark.sql.catalog.lake_consistent"] == "io.consistentcatalog.spark.ConsistentSparkCatalog"
    assert conf["spark.sql.catalog.lake_consistent.uri"] == f"jdbc:sqlite:{catalog_db}"
    assert conf["spark.sql.catalog.lake_consistent.plain-catalog"] == "lake"
    assert any(Path(j).name.startswith(current_line().plugin_artifact + "-") for j in jars)
    assert conf["spark.sql.catalog.lake.type"] == "jdbc"
    assert conf["spark.sql.catalog.lake.uri"] == f"jdbc:sqlite:{catalog_db}"
    assert conf["spark.sql.catalog.lake.warehouse"] == f"file://{warehouse}"
    assert conf["spark.sql.catalog.lake.jdbc.init-catalog-tables"] == "false"
    assert conf["spark.sql.catalog.lake.cache-enabled"] == "false"
    assert "spark.sql.catalog.lake.jdbc.user" not in conf
    # Every setting build_session uses is in the file, with the same value.
    expected = spark_session.spark_conf(f"sqlite:///{catalog_db}", warehouse)
    assert {k: conf.get(k) for k in expected} == expected
    # The catalog database exists (created by pyiceberg), so stock spark-sql can open it.
    assert catalog_db.is_file()


def test_rendered_spark_defaults_for_postgres(tmp_path: Path) -> None:
    written = spark_session.write_spark_defaults(
        tmp_path / "spark-defaults.conf",
        "postgresql+psycopg2://iceberg:s%40cret@db.example:5432/lake",
        "s3://bucket/warehouse/",
        name="pg",
        template=TEMPLATE,
    )
    conf = spark_session.parse_spark_defaults(written.read_text())
    assert conf["spark.sql.catalog.pg.uri"] == "jdbc:postgresql://db.example:5432/lake"
    assert conf["spark.sql.catalog.pg.jdbc.user"] == "iceberg"
    assert conf["spark.sql.catalog.pg.jdbc.password"] == "s@cret"
    assert conf["spark.sql.catalog.pg.warehouse"] == "s3://bucket/warehouse"
    assert conf["spark.sql.catalog.pg.jdbc.init-catalog-tables"] == "true"
    assert "spark.sql.catalog.lake.uri" not in conf
    assert stat.S_IMODE(written.stat().st_mode) == 0o600  # it holds a password


@pytest.mark.parametrize(
    ("uri", "jdbc"),
    [
        ("sqlite:////abs/path/catalog.db", "jdbc:sqlite:/abs/path/catalog.db"),
        ("jdbc:sqlite:/abs/path/catalog.db", "jdbc:sqlite:/abs/path/catalog.db"),
        ("/abs/path/catalog.db", "jdbc:sqlite:/abs/path/catalog.db"),
        ("postgresql+psycopg2://u:p@h:5433/db", "jdbc:postgresql://h:5433/db"),
        ("postgresql://u@h/db?sslmode=require", "jdbc:postgresql://h/db?sslmode=require"),
    ],
)
def test_catalog_uri_conversion(uri: str, jdbc: str) -> None:
    assert spark_session.spark_conf(uri, "/wh")["spark.sql.catalog.lake.uri"] == jdbc


def test_in_memory_sqlite_is_refused() -> None:
    from consistent_catalog.exceptions import CatalogConfigError

    with pytest.raises(CatalogConfigError, match="file"):
        spark_session.spark_conf("sqlite:///:memory:", "/wh")


def test_falls_back_to_maven_packages_without_local_jars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_session, "find_iceberg_runtime_jar", lambda: None)
    monkeypatch.setenv("CONSISTENT_JDBC_JARS", "")
    conf = spark_session.spark_conf("sqlite:////abs/catalog.db", "/wh")
    # Only our own plugin jar stays local (the wheel carries it; Maven coordinates after `mvn install` only).
    local = [j for j in conf.get("spark.jars", "").split(",") if j]
    assert local == ([] if spark_session.find_plugin_jar() is None else [spark_session.find_plugin_jar()])
    assert "spark.jars" not in spark_session.spark_conf("sqlite:////abs/catalog.db", "/wh", consistent=False)
    packages = conf["spark.jars.packages"].split(",")
    line = _installed_line()
    assert f"org.apache.iceberg:iceberg-spark-runtime-{line.line}_{line.scala}:{line.iceberg}" in packages
    assert any(p.startswith("org.xerial:sqlite-jdbc:") for p in packages)


def test_outside_a_checkout_the_shipped_template_gives_a_working_spark_sql(tmp_path: Path) -> None:
    """Issue #23.9: a pip user's ``spark-conf`` (run outside a checkout) renders the template shipped in the
    package; stock spark-sql runs with it and leaves no Derby metastore in the working directory."""
    import subprocess
    import sys

    shipped = spark_session.builtin_template()
    assert shipped == TEMPLATE.read_text(encoding="utf-8")  # the checkout's template is a link to it: one file
    assert TEMPLATE.is_symlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    binaries = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{binaries}{os.pathsep}{os.environ.get('PATH', '')}", "PYSPARK_PYTHON": sys.executable}
    render = subprocess.run(
        [str(binaries / "consistent-catalog"), "spark-conf", "--write", "spark-defaults.conf",
         "--catalog-uri", f"sqlite:///{elsewhere}/catalog.db", "--warehouse", str(elsewhere / "warehouse")],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert render.returncode == 0, render.stderr
    conf = spark_session.parse_spark_defaults((elsewhere / "spark-defaults.conf").read_text(encoding="utf-8"))
    assert conf["spark.sql.defaultCatalog"] == "lake" and conf["spark.master"] == "local[2]"
    assert conf["spark.hadoop.javax.jdo.option.ConnectionURL"].startswith("jdbc:derby:memory:")
    assert conf["spark.sql.catalog.lake_consistent.plain-catalog"] == "lake"
    run = subprocess.run([str(binaries / "spark-sql"), "--properties-file", "spark-defaults.conf", "-S", "-e",
                          "CREATE NAMESPACE lake.shop; SHOW NAMESPACES IN lake"], cwd=elsewhere, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    # the namespace created, and nothing else: no header, no "Response code" line after the DDL (issue 34, item 5)
    assert [line.strip() for line in run.stdout.splitlines() if line.strip()] == ["shop"], run.stdout
    assert not (elsewhere / "metastore_db").exists() and not (elsewhere / "derby.log").exists()

    without = subprocess.run(
        [str(binaries / "consistent-catalog"), "spark-conf", "--catalog-uri", f"sqlite:///{elsewhere}/catalog.db",
         "--warehouse", str(elsewhere / "warehouse")],
        cwd=elsewhere, env={**env, "CONSISTENT_PLUGIN_JAR": str(elsewhere / "missing.jar")},
        capture_output=True, text=True, timeout=120)
    assert without.returncode == 0
    assert not [k for k in spark_session.parse_spark_defaults(without.stdout) if k.startswith("spark.sql.catalog.lake_consistent")]
    assert "CONSISTENT_PLUGIN_JAR" in without.stderr and len(without.stderr.strip().splitlines()) == 1


def test_a_pyspark_ingest_and_a_sql_transform_job_report_their_runs(lake: Lake, ol_env: Path, monkeypatch) -> None:
    """Issue 34, item 7, from PySpark: ``ingest_dataframe`` is a run of ``ingest:demo.words`` and a SparkEpochJob's
    SQL transform is its run's ``sql`` job facet; every event validated against the spec, values against pyiceberg."""
    from pyiceberg.types import LongType

    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe
    from tests.harness.openlineage import Collector, validate

    lake.catalog.create_table("demo.ol_counts", Schema(NestedField(1, "word", StringType(), required=False),
                                                       NestedField(2, "cnt", LongType(), required=False)))
    transform = "SELECT word, count(*) AS cnt FROM words GROUP BY word"
    with Collector() as collector:
        monkeypatch.setenv("OPENLINEAGE_URL", collector.url)
        cc = ConsistentCatalog(lake.catalog)
        landed = ingest_dataframe(cc, lake.spark.createDataFrame([("spark",)], "word string"), "demo.words",
                                  key="pyspark-batch-1")
        with SparkEpochJob(cc, lake.spark, "ol-count", sources=["demo.words"], sinks=["demo.ol_counts"],
                           transform=transform, mode="overwrite") as job:
            job.run_epoch()
        events = collector.wait_for(4)
    for event in events:
        validate(event)
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        ("ingest:demo.words", "START"), ("ingest:demo.words", "COMPLETE"), ("ol-count", "START"), ("ol-count", "COMPLETE")]
    head = lake.catalog.load_table("demo.words").metadata.snapshot_by_name("main")
    assert events[1]["run"]["facets"]["consistentCatalog_ingest"]["snapshot"] == head.snapshot_id == landed.snapshot_id
    assert events[1]["run"]["facets"]["consistentCatalog_ingest"]["key"] == "pyspark-batch-1"
    for event in events[2:]:
        assert event["job"]["facets"]["sql"]["query"] == transform and event["job"]["facets"]["sql"]["dialect"] == "spark"
