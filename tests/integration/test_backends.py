"""Beyond one machine: PostgreSQL as the catalog, S3 (moto) as storage, a multi-process Spark cluster, and
DuckDB as the independent reader that checks protocol §7.

Servers (``tests/harness/servers.py``: PostgreSQL via initdb/pg_ctl, moto's S3 server) are started by the
session fixtures of ``tests/conftest.py`` on 127.0.0.1 and stopped at the end. Expected results are recomputed from raw rows that DuckDB
and plain pyiceberg read at the cut's snapshot ids, never from the project's own reader.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog.demo import COUNTS, TABLES, WORDS, ensure_tables, epoch_words, run_demo
from consistent_catalog.duckdb_reader import read_cut_duckdb
from consistent_catalog.exceptions import OwnershipError
from tests.harness.cluster import CLUSTER_MASTER
from tests.harness.concurrent import open_cc, run_concurrent_pipeline, sink_names
from tests.harness.flip import check_cut_with_duckdb, pyiceberg_rows, rows
from tests.harness.servers import PostgresServer, find_s3a_jars, postgres_sql_catalog, s3a_conf

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def make_catalog(request, backend: str, storage: str, tmp_path: Path):
    """A pyiceberg SqlCatalog on ``backend`` (sqlite|postgres) with its warehouse on ``storage`` (local|s3), or
    (``rest``, local only: the server writes metadata through Hadoop, which has no S3A here) a RestCatalog of
    its own on the session's REST server."""
    from pyiceberg.catalog.sql import SqlCatalog

    if backend == "rest":
        assert storage == "local", "the test REST server has no S3 file system"
        from tests.conftest import rest_catalog

        return rest_catalog(request.getfixturevalue("rest_server"), tmp_path)

    properties: dict[str, str] = {}
    warehouse: str | Path = tmp_path / "warehouse"
    if storage == "s3":
        s3 = request.getfixturevalue("s3_server")
        properties = s3.properties()
        warehouse = f"s3://{s3.create_bucket()}/warehouse"
    if backend == "postgres":
        catalog = postgres_sql_catalog(request.getfixturevalue("postgres_server"), warehouse, **properties)
        request.addfinalizer(catalog.engine.dispose)
        return catalog
    if isinstance(warehouse, Path):
        warehouse.mkdir(parents=True)
        warehouse = f"file://{warehouse}"
    return SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=warehouse, **properties)


# --- pyiceberg pipelines on every catalog x storage ---------------------------------------------------


@pytest.mark.parametrize(("backend", "storage"),
                         [("sqlite", "s3"), ("postgres", "local"), ("postgres", "s3"), ("rest", "local")])
def test_flip_pipeline_on_each_catalog_and_storage(request, tmp_path, backend, storage):
    catalog = make_catalog(request, backend, storage, tmp_path)
    cc = ConsistentCatalog(catalog)
    checked = []

    def after_each_epoch(read, epoch):  # the demo's final read (epoch 4) is checked below
        if epoch < 4:
            check_cut_with_duckdb(cc, read.cut)
            checked.append(epoch)

    # protocol §7's pipeline: the demo with its pyiceberg jobs, in this catalog and storage
    run_demo(cc=cc, engine="pyiceberg", epochs=4, rows_per_epoch=200, on_cut=after_each_epoch, echo=lambda _: None)
    assert len(checked) == 3  # a cut over all three tables exists from the second epoch on
    final = cc.resolve(TABLES)
    check_cut_with_duckdb(cc, final)
    assert sum(c for _, c in pyiceberg_rows(cc, COUNTS, final[COUNTS].snapshot_id)) == 4 * 200
    data_file = next(iter(catalog.load_table(WORDS).scan().plan_files())).file.file_path
    assert data_file.startswith("s3://" if storage == "s3" else "file://"), data_file


def test_s3_warehouse_holds_the_files(request, tmp_path):
    """The metadata and data really are objects in the bucket (read back with boto3, not pyiceberg)."""
    s3 = request.getfixturevalue("s3_server")
    catalog = make_catalog(request, "postgres", "s3", tmp_path)
    cc = ConsistentCatalog(catalog)
    ensure_tables(cc)
    ingested = cc.ingest(WORDS, epoch_words(0, 10), barrier=1_000)
    bucket = catalog.properties["warehouse"].split("/")[2]
    keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket)["Contents"]]
    location = catalog.load_table(WORDS).metadata_location
    assert location.startswith(f"s3://{bucket}/warehouse/demo/words/metadata/")
    assert location.split(f"s3://{bucket}/", 1)[1] in keys
    assert any(k.startswith("warehouse/demo/words/data/") and k.endswith(".parquet") for k in keys), keys
    summary = catalog.load_table(WORDS).metadata.snapshot_by_id(ingested.snapshot_id).summary
    assert summary["consistent.barrier"] == "1000"


# --- processes racing on PostgreSQL (and on a REST catalog) ------------------------------------------


def _register(uri: str | dict, warehouse: str | None, job: str, start, results) -> None:
    """``uri``: a SQL catalog's URI (with ``warehouse``), or catalog properties (``catalog_spec``)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from tests.harness.lake import open_catalog

    catalog = open_catalog(uri) if isinstance(uri, dict) else SqlCatalog("lake", uri=uri, warehouse=warehouse)
    cc = ConsistentCatalog(catalog)
    start.wait()
    try:
        cc.register_job(job, [WORDS], [COUNTS])
        results.put((job, "won"))
    except OwnershipError as exc:
        results.put((job, f"refused: {exc}"))
    except Exception as exc:  # anything else is a bug the test reports
        results.put((job, f"error: {exc!r}"))


def _registration_race(catalog, args) -> None:
    """4 processes register a job on the same sink at once (``_register(*args, job, ...)``): exactly one wins."""
    ctx = mp.get_context("spawn")
    contenders = 4
    start, results = ctx.Barrier(contenders), ctx.Queue()
    procs = [ctx.Process(target=_register, args=(*args, f"job-{i}", start, results)) for i in range(contenders)]
    for p in procs:
        p.start()
    outcomes = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    assert sorted(o.split(":")[0] for o in outcomes.values()) == ["refused"] * (contenders - 1) + ["won"], outcomes
    winner = next(j for j, o in outcomes.items() if o == "won")
    assert catalog.load_table(COUNTS).metadata.properties["consistent.job"] == winner


def test_registration_race_on_postgres_has_exactly_one_winner(postgres_server, tmp_path):
    catalog = postgres_sql_catalog(postgres_server, tmp_path / "warehouse")
    ensure_tables(ConsistentCatalog(catalog))
    _registration_race(catalog, (catalog.properties["uri"], catalog.properties["warehouse"]))
    catalog.engine.dispose()


def test_registration_race_on_rest_has_exactly_one_winner(rest_server, tmp_path):
    from tests.conftest import rest_catalog
    from tests.harness.lake import catalog_spec

    catalog = rest_catalog(rest_server, tmp_path)
    ensure_tables(ConsistentCatalog(catalog))
    spec = catalog_spec(catalog)
    assert spec["type"] == "rest" and spec["uri"] == rest_server.uri
    _registration_race(catalog, (spec, None))


def test_concurrent_jobs_ingesters_and_readers_on_rest(rest_server, tmp_path):
    """The PostgreSQL scenario below on a REST catalog: 2 ingesters, 4 jobs, 2 readers, each a process with
    its own RestCatalog client, all committing through the one server."""
    from tests.conftest import rest_catalog
    from tests.harness.lake import catalog_spec

    spec = catalog_spec(rest_catalog(rest_server, tmp_path))
    result = run_concurrent_pipeline(spec, jobs=4, ingesters=2, epochs=5, rows_per_epoch=100, readers=2)
    failures = [r for r in result["reports"] if r[3] is not None]
    assert failures == [], failures
    cc = open_cc(spec)
    sinks = sink_names(4)
    cut = cc.resolve([WORDS, *sinks])
    words = pyiceberg_rows(cc, WORDS, cut[WORDS].snapshot_id)
    assert len(words) == 2 * 5 * 100
    expected = sorted(Counter(w for (w,) in words).items())
    for sink in sinks:
        assert pyiceberg_rows(cc, sink, cut[sink].snapshot_id) == expected
    # the server's own catalog database holds every table (read with sqlite3, not through the server)
    import sqlite3

    with sqlite3.connect(rest_server.sqlite_path(spec["warehouse"])) as db:
        names = {f"{ns}.{t}" for ns, t in db.execute('SELECT "table_namespace", "table_name" FROM "iceberg_tables"')}
    assert names == {WORDS, *sinks}


def test_concurrent_jobs_ingesters_and_readers_on_postgres(postgres_server, tmp_path):
    catalog = postgres_sql_catalog(postgres_server, tmp_path / "warehouse")
    catalog_args = (catalog.properties["uri"], catalog.properties["warehouse"], {})
    catalog.engine.dispose()
    result = run_concurrent_pipeline(catalog_args, jobs=4, ingesters=2, epochs=5, rows_per_epoch=100, readers=2)
    failures = [r for r in result["reports"] if r[3] is not None]
    assert failures == [], failures  # no ingest, epoch or read failed; no reader saw an inconsistent cut
    assert all(r[2] > 0 for r in result["reports"]), result["reports"]
    cc = open_cc(catalog_args)
    sinks = sink_names(4)
    cut = cc.resolve([WORDS, *sinks])
    words = pyiceberg_rows(cc, WORDS, cut[WORDS].snapshot_id)
    assert len(words) == 2 * 5 * 100  # every ingest landed despite the contention
    expected = sorted(Counter(w for (w,) in words).items())
    for sink in sinks:  # every job caught up with all of it
        assert pyiceberg_rows(cc, sink, cut[sink].snapshot_id) == expected
    duck = read_cut_duckdb(cc, cut)
    assert all(rows(duck[t]) == pyiceberg_rows(cc, t, cut[t].snapshot_id) for t in cut.tables)
    cc.catalog.engine.dispose()


# --- Spark on PostgreSQL ------------------------------------------------------------------------------


@pytest.mark.spark
def test_spark_and_pyiceberg_share_a_postgres_catalog(postgres_server, tmp_path):
    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe
    from consistent_catalog.spark.session import build_session, spark_conf

    catalog = postgres_sql_catalog(postgres_server, tmp_path / "warehouse")
    uri = catalog.properties["uri"]
    conf = spark_conf(uri, tmp_path / "warehouse")
    assert conf["spark.sql.catalog.lake.uri"] == f"jdbc:postgresql://127.0.0.1:{postgres_server.port}/{uri.rsplit('/', 1)[1]}"
    assert conf["spark.sql.catalog.lake.jdbc.user"] == "postgres"
    assert any(Path(j).name.startswith("postgresql-") for j in conf["spark.jars"].split(",")), conf["spark.jars"]
    cc = ConsistentCatalog(catalog)
    ensure_tables(cc)
    spark = build_session(uri, tmp_path / "warehouse", app_name="test-backends-postgres")
    try:
        # Spark writes a root epoch and runs the job; pyiceberg reads both back from the same PostgreSQL rows.
        first = ingest_dataframe(cc, spark.createDataFrame([("a",), ("b",), ("a",)], "word string"), WORDS,
                                 barrier=1_000)
        counter = SparkEpochJob(cc, spark, "word-count", sources=[WORDS], sinks=[COUNTS],
                                transform="SELECT word, count(*) AS cnt FROM words GROUP BY word", mode="overwrite")
        with counter:
            assert counter.run_epoch().actions == {COUNTS: "published"}
            # pyiceberg commits to the same catalog; Spark's next epoch sees it at once (no table cache).
            second = cc.ingest(WORDS, pa.table({"word": ["b", "c"]}), barrier=2_000)
            assert counter.run_epoch().barrier == 2_000
        table = catalog.load_table(COUNTS)
        head = table.metadata.snapshot_by_name("main")
        assert head.summary["consistent.barrier"] == "2000" and head.summary["consistent.job"] == "word-count"
        assert json.loads(head.summary["consistent.sources"]) == {WORDS: second.snapshot_id}
        assert pyiceberg_rows(cc, COUNTS, head.snapshot_id) == [("a", 2), ("b", 2), ("c", 1)]
        cut = cc.resolve([WORDS, COUNTS], as_of=1_000)
        assert cut[WORDS].snapshot_id == first.snapshot_id
        spark_rows = spark.read.format("iceberg").option("versionAsOf", str(cut[COUNTS].snapshot_id)).load(
            f"lake.{COUNTS}").collect()
        assert sorted(tuple(r) for r in spark_rows) == [("a", 2), ("b", 1)]
        duck = read_cut_duckdb(cc, cut)
        assert rows(duck[COUNTS]) == [("a", 2), ("b", 1)]
        # Spark listed the tables from PostgreSQL, not from a SQLite file
        assert {r.tableName for r in spark.sql("SHOW TABLES IN lake.demo").collect()} >= {"words", "word_counts"}
    finally:
        spark.stop()
        catalog.engine.dispose()


# --- the FLIP pipeline on a multi-process Spark cluster over PostgreSQL + S3 --------------------------

@pytest.mark.spark
@pytest.mark.slow
def test_flip_pipeline_on_a_spark_cluster_over_postgres_and_s3(postgres_server, s3_server, tmp_path):
    if find_s3a_jars() is None:
        pytest.fail("the S3A jars are missing under build/jvm/spark-<line>/lib/s3; run scripts/setup.sh (make setup)")
    bucket = s3_server.create_bucket()
    catalog = postgres_sql_catalog(postgres_server, f"s3://{bucket}/warehouse", **s3_server.properties())
    args = {"uri": catalog.properties["uri"], "warehouse": catalog.properties["warehouse"],
            "s3": s3_server.properties(), "epochs": 4, "rows": 300}
    proc = subprocess.run([sys.executable, "-m", "tests.harness.cluster", json.dumps(args)], cwd=REPO,
                          capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])

    # a real multi-process cluster: two executor JVMs, neither of them the driver's
    assert report["master"] == CLUSTER_MASTER
    assert len(report["jvms"]["executors"]) == 2 and report["jvms"]["driver"] not in report["jvms"]["executors"]
    assert report["checked"] == 3 and len(report["cuts"]) == 3

    cc = ConsistentCatalog(catalog)
    # Spark wrote the data files through S3A into the bucket, and the epochs carry the contract keys
    counts = catalog.load_table(COUNTS)
    assert all(t.file.file_path.startswith(f"s3://{bucket}/") for t in counts.scan().plan_files())
    assert counts.metadata.snapshot_by_name("main").summary["consistent.job"] == "word-count"
    # protocol §7 through DuckDB (over S3, its own reader) at every cut the pipeline saw, and at the final one
    for cut_json in report["cuts"]:
        cut = cc.resolve(TABLES, as_of=cut_json["barrier"])
        assert {t: p["snapshot_id"] for t, p in cut_json["tables"].items()} == cut.snapshot_ids
        check_cut_with_duckdb(cc, cut)
    final = cc.resolve(TABLES)
    check_cut_with_duckdb(cc, final)
    assert len(pyiceberg_rows(cc, WORDS, final[WORDS].snapshot_id)) == 4 * 300
    catalog.engine.dispose()


def test_postgres_server_is_loopback_only_and_stops(tmp_path):
    """The fixture's server: bound to 127.0.0.1, data in a throwaway directory that is gone after stop."""
    import psycopg2

    with PostgresServer.start() as server:
        con = psycopg2.connect(host="127.0.0.1", port=server.port, user="postgres", dbname="postgres")
        with con.cursor() as cur:
            cur.execute("SHOW listen_addresses")
            assert cur.fetchone()[0] == "127.0.0.1"
        con.close()
        data_dir = server.data_dir
        assert (data_dir / "PG_VERSION").is_file()
    assert not data_dir.exists()
    with pytest.raises(psycopg2.OperationalError):
        psycopg2.connect(host="127.0.0.1", port=server.port, user="postgres", dbname="postgres", connect_timeout=2)


def test_spark_conf_examples_carry_the_tested_settings():
    """spark-conf/*.example hold every setting the backend tests run with (values where they are not <...>)."""
    from consistent_catalog.spark.session import parse_spark_defaults, spark_conf

    def example(name: str) -> dict[str, str]:
        return parse_spark_defaults((REPO / "spark-conf" / name).read_text(encoding="utf-8"))

    tested = {**spark_conf("postgresql+psycopg2://u:p@db:5432/lake", "s3://bucket/warehouse"),
              **s3a_conf("http://127.0.0.1:9000", "key", "secret")}
    tested.pop("spark.jars.packages", None)
    written = example("postgres-s3.conf.example")
    assert sorted(set(tested) - set(written)) == []
    differing = {k: (written[k], v) for k, v in tested.items() if "<" not in written[k] and written[k] != v}
    assert {k for k in differing if k not in ("spark.jars",)} == set(), differing
    for jar in ("iceberg-spark-runtime-4.1_2.13-1.12.0.jar", "postgresql-42.7.14.jar", "hadoop-aws-3.4.2.jar",
                "bundle-2.29.52.jar", "lake-consistent-spark-4.1_2.13-0.1.0.jar"):  # the default line's (4.1)
        assert jar in written["spark.jars"]
    cluster = example("standalone-cluster.conf.example")
    for key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath", "spark.executor.memory",
                "spark.executor.cores"):
        assert key in cluster
    assert cluster["spark.master"].startswith("spark://127.0.0.1:")


def test_spark_conf_for_a_rest_catalog():
    """A REST URI gives ``type=rest`` for the plain and the consistent catalog, no JDBC settings or drivers, and
    the template renders to the same settings; spark-conf/rest.conf.example holds them all."""
    from consistent_catalog.spark.session import (
        find_plugin_jar,
        parse_spark_defaults,
        render_spark_defaults,
        spark_conf,
    )

    conf = spark_conf("http://rest.example:8181/", "analytics")
    assert conf["spark.sql.catalog.lake.type"] == "rest"
    assert conf["spark.sql.catalog.lake.uri"] == "http://rest.example:8181"
    assert conf["spark.sql.catalog.lake.warehouse"] == "analytics"  # a warehouse name is sent as it is
    assert conf["spark.sql.catalog.lake.cache-enabled"] == "false"
    assert not any(".jdbc." in k for k in conf), conf
    assert not any("jdbc" in j or "postgresql" in j for j in conf.get("spark.jars", "").split(","))
    assert "sqlite" not in conf.get("spark.jars.packages", "") and "postgresql" not in conf.get("spark.jars.packages", "")
    assert spark_conf("https://r.example", None).get("spark.sql.catalog.lake.warehouse") is None
    assert spark_conf("http://r:1", "/data/w")["spark.sql.catalog.lake.warehouse"] == "file:///data/w"
    assert spark_conf("http://r:1", "s3://b/w/")["spark.sql.catalog.lake.warehouse"] == "s3://b/w/"
    if find_plugin_jar() is not None:
        shared = {k.split("lake.", 1)[1]: v for k, v in conf.items() if k.startswith("spark.sql.catalog.lake.")}
        consistent = {k.split("lake_consistent.", 1)[1]: v for k, v in conf.items()
                      if k.startswith("spark.sql.catalog.lake_consistent.")}
        assert consistent == {**shared, "plain-catalog": "lake"}

    rendered = parse_spark_defaults(render_spark_defaults(
        (REPO / "spark-conf" / "spark-defaults.conf.template").read_text(encoding="utf-8"),
        "http://rest.example:8181", "analytics"))
    assert {k: rendered.get(k) for k in conf} == conf
    assert not any(".jdbc." in k for k in rendered if k.startswith("spark.sql.catalog.")), rendered

    example = parse_spark_defaults((REPO / "spark-conf" / "rest.conf.example").read_text(encoding="utf-8"))
    tested = spark_conf("http://127.0.0.1:8181", "file:///tmp/warehouse")
    assert sorted(set(tested) - set(example)) == []
    assert {k for k, v in tested.items() if "<" not in example[k] and example[k] != v} <= {"spark.jars"}
    assert not any(".jdbc." in k for k in example)
