"""Spark pipelines: epoch-tagged PySpark jobs, consistent reads in Spark and Spark SQL, the FLIP demo.

Results are checked by reading the snapshots back with plain pyiceberg (summaries, scans at
snapshot ids) and recomputing in Python, not through the project's Spark reader.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from tests.harness.lake import COUNTS_SCHEMA, HIST_SCHEMA, WORDS_SCHEMA, sqlite_catalog

pytestmark = pytest.mark.spark

WORDS, COUNTS, HIST = "demo.words", "demo.word_counts", "demo.count_histogram"
COUNT_SQL = "SELECT word, count(*) AS cnt FROM words GROUP BY word"
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from consistent_catalog.spark.session import build_session

    root = tmp_path_factory.mktemp("spark-pipeline")
    catalog = sqlite_catalog(root)
    catalog.create_namespace("demo")
    spark = build_session(f"sqlite:///{root}/catalog.db", root / "warehouse", app_name="test-spark-pipeline")
    yield root, catalog, spark
    spark.stop()


@pytest.fixture
def tables(env, request):
    """Fresh FLIP tables (unique namespace per test: one Spark session serves the module)."""
    root, catalog, spark = env
    name, _, param = request.node.name.partition("[")
    namespace = "t_" + name.replace("test_", "")[:40] + ("_" + "".join(c if c.isalnum() else "_" for c in param)[:12]
                                                        if param else "")
    catalog.create_namespace(namespace)
    names = {k: f"{namespace}.{k}" for k in ("words", "word_counts", "count_histogram", "left", "right")}
    catalog.create_table(names["words"], schema=WORDS_SCHEMA)
    catalog.create_table(names["left"], schema=WORDS_SCHEMA)
    catalog.create_table(names["right"], schema=WORDS_SCHEMA)
    catalog.create_table(names["word_counts"], schema=COUNTS_SCHEMA)
    catalog.create_table(names["count_histogram"], schema=HIST_SCHEMA)
    return names


def df(spark, *words):
    return spark.createDataFrame([(w,) for w in words], "word string")


def rows(catalog, table, snapshot_id):
    if snapshot_id is None:
        return []
    return catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


def head(catalog, table, branch="main"):
    snap = catalog.load_table(table).metadata.snapshot_by_name(branch)
    return None if snap is None else snap.snapshot_id


def test_spark_job_tags_snapshots_and_counts_correctly(env, tables):
    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    words, counts = tables["words"], tables["word_counts"]
    ingested = ingest_dataframe(cc, df(spark, "a", "b", "a"), words, barrier=5_000)
    assert catalog.load_table(words).metadata.snapshot_by_id(ingested.snapshot_id).summary[P.BARRIER] == "5000"
    job = SparkEpochJob(cc, spark, "count", sources=[words], sinks=[counts],
                        transform=COUNT_SQL.replace("words", words.split(".")[1]), mode="overwrite")
    with job:
        result = job.run_epoch()
    assert result.actions == {counts: "published"} and result.barrier == 5_000
    snap = catalog.load_table(counts).metadata.snapshot_by_id(head(catalog, counts))
    assert snap.summary[P.BARRIER] == "5000" and snap.summary[P.JOB] == "count"
    assert json.loads(snap.summary[P.SOURCES]) == {words: ingested.snapshot_id}
    assert {r["word"]: r["cnt"] for r in rows(catalog, counts, snap.snapshot_id)} == {"a": 2, "b": 1}


def test_two_roots_at_different_progress_align_at_the_same_barrier(env, tables):
    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    left, right, sink = tables["left"], tables["right"], tables["word_counts"]
    ingest_dataframe(cc, df(spark, "l1"), left, barrier=100)
    ingest_dataframe(cc, df(spark, "l2", "l2"), left, barrier=300)  # left is ahead
    ingest_dataframe(cc, df(spark, "r1"), right, barrier=200)

    def union(ctx):
        both = ctx.read(left).unionByName(ctx.read(right))
        return both.groupBy("word").count().withColumnRenamed("count", "cnt")

    with SparkEpochJob(cc, spark, "union", sources=[left, right], sinks=[sink], transform=union, mode="overwrite") as job:
        first = job.run_epoch()
        assert first.barrier == 200
        assert sorted(r["word"] for r in rows(catalog, sink, head(catalog, sink))) == ["l1", "r1"]
        ingest_dataframe(cc, df(spark, "r2"), right, barrier=400)
        second = job.run_epoch()
    assert second.barrier == 300  # now the left root is the slower one
    assert {r["word"]: r["cnt"] for r in rows(catalog, sink, head(catalog, sink))} == {"l1": 1, "l2": 2, "r1": 1}
    # the inputs recorded are the snapshots at T of each root, read back with pyiceberg
    recorded = json.loads(catalog.load_table(sink).metadata.snapshot_by_id(head(catalog, sink)).summary[P.SOURCES])
    left_snaps = catalog.load_table(left).snapshots()
    right_snaps = catalog.load_table(right).snapshots()
    assert recorded == {left: left_snaps[1].snapshot_id, right: right_snaps[0].snapshot_id}


def test_incremental_and_full_modes_give_the_same_table(env, tables):
    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    words, full, incremental = tables["words"], tables["word_counts"], tables["count_histogram"]
    # full: recount everything each epoch (overwrite); incremental: count only new rows and merge by key
    catalog.drop_table(incremental)
    catalog.create_table(incremental, schema=COUNTS_SCHEMA)
    view = words.split(".")[1]
    full_job = SparkEpochJob(cc, spark, "full", sources=[words], sinks=[full],
                             transform=f"SELECT word, count(*) AS cnt FROM {view} GROUP BY word", mode="overwrite")

    def add_counts(ctx):
        new = ctx.read_increment(words).groupBy("word").count().withColumnRenamed("count", "new")
        old = ctx.read_sink(incremental)
        merged = new.join(old, on="word", how="left").selectExpr("word", "new + coalesce(cnt, 0) AS cnt")
        return merged

    inc_job = SparkEpochJob(cc, spark, "incremental", sources=[words], sinks=[incremental], transform=add_counts,
                            mode="merge", keys=["word"])
    batches = [["a", "b"], ["a", "c", "c"], [], ["b", "d"]]
    with full_job, inc_job:
        for i, batch in enumerate(batches):
            if batch:
                ingest_dataframe(cc, df(spark, *batch), words, barrier=(i + 1) * 1000)
            else:
                cc.advance_watermark(words, (i + 1) * 1000)
            full_job.run_epoch()
            inc_job.run_epoch()
            a = {r["word"]: r["cnt"] for r in rows(catalog, full, head(catalog, full))}
            b = {r["word"]: r["cnt"] for r in rows(catalog, incremental, head(catalog, incremental))}
            expected = Counter(w for batch_ in batches[: i + 1] for w in batch_)
            assert a == b == dict(expected), i
    assert cc.resolve([words, full, incremental]).barrier == 4000


def test_read_committed_sees_a_staged_epoch_repeatable_read_does_not(env, tables):
    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe, read_cut

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    words, counts = tables["words"], tables["word_counts"]
    sql = COUNT_SQL.replace("words", words.split(".")[1])
    ingest_dataframe(cc, df(spark, "a"), words, barrier=1_000)
    job = SparkEpochJob(cc, spark, "count", sources=[words], sinks=[counts], transform=sql, mode="overwrite")
    job.register()
    job.run_epoch()
    published = head(catalog, counts)
    ingest_dataframe(cc, df(spark, "a", "b"), words, barrier=2_000)
    plan = job.plan()
    staged = job.stage(counts, plan, job.run_transform(plan)[counts])  # killed before publish
    assert head(catalog, counts) == published and head(catalog, counts, P.STAGED_BRANCH) == staged.head

    rr = read_cut(cc, spark, [words, counts])
    rc = read_cut(cc, spark, [words, counts], level="read-committed")
    assert rr.cut.barrier == 1_000 and rr.cut[counts].snapshot_id == published
    assert rc.cut.barrier == 2_000 and rc.cut[counts].snapshot_id == staged.head
    assert {r["word"]: r["cnt"] for r in rr[counts].collect()} == {"a": 1}
    assert {r["word"]: r["cnt"] for r in rc[counts].collect()} == {"a": 2, "b": 1}
    assert rr[words].count() == 1 and rc[words].count() == 3

    # a restarted instance publishes the staged epoch exactly once, without recomputing it
    restarted = SparkEpochJob(cc, spark, "count", sources=[words], sinks=[counts], transform=sql, mode="overwrite",
                              takeover=True)
    with restarted:
        assert restarted.run_epoch().actions == {counts: "republished"}
        assert restarted.run_epoch().actions == {counts: "done"}
    assert head(catalog, counts) == staged.head
    tagged = [s.summary.get(P.BARRIER) for s in catalog.load_table(counts).snapshots() if s.summary.get(P.BARRIER)]
    assert tagged == ["1000", "2000"]


def test_views_and_sql_for_a_cut(env, tables):
    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe, read_cut
    from consistent_catalog.sql import cut_to_spark_sql

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    words, counts = tables["words"], tables["word_counts"]
    ingest_dataframe(cc, df(spark, "x", "y", "x"), words, barrier=10)
    with SparkEpochJob(cc, spark, "count", sources=[words], sinks=[counts],
                       transform=COUNT_SQL.replace("words", words.split(".")[1]), mode="overwrite") as job:
        job.run_epoch()
    ingest_dataframe(cc, df(spark, "z"), words, barrier=20)  # beyond the cut
    sc = read_cut(cc, spark, [words, counts], register_views=True)
    assert spark.sql("SELECT sum(cnt) AS s FROM word_counts").first()["s"] == spark.sql("SELECT count(*) AS c FROM words").first()["c"] == 3
    for statement in cut_to_spark_sql(sc.cut):
        if not statement.startswith("--"):
            spark.sql(statement.rstrip(";"))
    assert spark.sql("SELECT count(*) AS c FROM words").first()["c"] == 3


def test_event_time_barrier_from_a_column(env, tables):
    from datetime import datetime, timezone

    from consistent_catalog.spark.job import ingest_dataframe

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    frame = spark.createDataFrame(
        [("a", datetime(2024, 1, 1, 12, 0, tzinfo=timezone.utc)), ("b", datetime(2024, 1, 1, 12, 5, tzinfo=timezone.utc))],
        "word string, at timestamp",
    )
    words = tables["words"]
    catalog.create_table(words + "_ev", schema=pa.schema([("word", pa.string()), ("at", pa.timestamp("us", tz="UTC"))]))
    result = ingest_dataframe(cc, frame, words + "_ev", event_time_column="at")
    expected = int(datetime(2024, 1, 1, 12, 5, tzinfo=timezone.utc).timestamp() * 1000)
    assert result.barrier == expected
    assert catalog.load_table(words + "_ev").metadata.snapshot_by_id(result.snapshot_id).summary[P.BARRIER] == str(expected)


def test_a_keyless_ingest_asserts_main_and_the_fence_like_every_ingest(env, tables, monkeypatch):
    """Issue 35: the keyless PySpark ingest publishes its staged rows with the fence and main asserted (as the keyed one,
    pyiceberg's and the plugin's): an idle advance (it takes the fence) and another ingest (it moves main) landing while
    Spark writes make it plan again, so its barrier never falls at or below a watermark readers were given."""
    from consistent_catalog.spark import job as spark_job

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    words = tables["words"]
    spark_job.ingest_dataframe(cc, df(spark, "a"), words, barrier=1_000)
    staged = spark_job._stage_with_wap
    meanwhile = [lambda: cc.advance_watermark(words, 5_000), lambda: cc.ingest(words, pa.table({"word": ["x"]}), barrier=7_000)]
    attempts = []

    def stage_then_interfere(*args, **kwargs):
        found = staged(*args, **kwargs)
        attempts.append(dict(args[4]))  # the summary keys this attempt was planned with
        if meanwhile:
            meanwhile.pop(0)()
        return found

    monkeypatch.setattr(spark_job, "_stage_with_wap", stage_then_interfere)
    result = spark_job.ingest_dataframe(cc, df(spark, "b"), words, barrier=2_000)
    # planned three times: at 2000, after the advance to 5000 (5001), after the ingest at 7000 (7001)
    assert [a[P.BARRIER] for a in attempts] == ["2000", "5001", "7001"]
    table = catalog.load_table(words)
    assert table.metadata.current_snapshot_id == result.snapshot_id and result.barrier == 7_001
    assert table.metadata.snapshot_by_id(result.snapshot_id).summary[P.BARRIER] == "7001"
    assert sorted(r["word"] for r in table.scan().to_arrow().to_pylist()) == ["a", "b", "x"]  # the refused stagings never reached main


def test_spark_sql_shell_reads_the_cut(env, tables, tmp_path):
    from consistent_catalog.spark.job import ingest_dataframe
    from consistent_catalog.spark.session import write_spark_defaults

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    words = tables["words"]
    t0 = 1_700_000_000_000  # a plausible time: the CLI's --as-of refuses one in seconds (protocol §3.8)
    ingest_dataframe(cc, df(spark, "p", "q"), words, barrier=t0 + 100)
    ingest_dataframe(cc, df(spark, "r"), words, barrier=t0 + 200)
    conf = tmp_path / "spark-defaults.conf"
    write_spark_defaults(conf, f"sqlite:///{root}/catalog.db", root / "warehouse")
    environment = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
                   "PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{root}/catalog.db",
                   "PYICEBERG_CATALOG__LAKE__WAREHOUSE": f"file://{root}/warehouse"}
    sql = subprocess.run([str(VENV_BIN / "consistent-catalog"), "-c", "lake", "resolve", words, "--as-of", str(t0 + 150),
                          "--sql"],
                         env=environment, capture_output=True, text=True, check=True).stdout
    script = tmp_path / "cut.sql"
    script.write_text(sql + "SELECT count(*) FROM words;\n")
    out = subprocess.run([str(VENV_BIN / "spark-sql"), "--properties-file", str(conf), "-S", "-f", str(script)],
                         env=environment, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    first = catalog.load_table(words).snapshots()[0].snapshot_id
    expected = len(rows(catalog, words, first))
    assert out.stdout.strip().splitlines()[-1].strip() == str(expected) == "2"


@pytest.mark.slow
def test_flip_invariants_at_every_cut_during_a_running_demo(tmp_path):
    """Run the Spark demo as a separate process and sample repeatable-read cuts while it runs."""
    directory = tmp_path / "demo"
    proc = subprocess.Popen(
        [str(VENV_BIN / "consistent-catalog"), "demo", "--dir", str(directory), "--epochs", "8", "--rows-per-epoch", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    seen: dict[int, dict[str, int | None]] = {}
    deadline = time.monotonic() + 600
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            if not (directory / "catalog.db").exists():
                continue
            try:
                cc = ConsistentCatalog(sqlite_catalog(directory))
                cut = cc.resolve([WORDS, COUNTS, HIST])
            except Exception:  # tables not created yet, or no cut yet (histogram empty)
                continue
            seen.setdefault(cut.barrier, cut.snapshot_ids)
        output = proc.communicate(timeout=max(1, deadline - time.monotonic()))[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    assert "protocol §7 invariants" in output and "OK" in output
    catalog = sqlite_catalog(directory)
    final = ConsistentCatalog(catalog).resolve([WORDS, COUNTS, HIST])
    seen.setdefault(final.barrier, final.snapshot_ids)
    assert len(seen) >= 3, seen
    for barrier, ids in seen.items():
        w = rows(catalog, WORDS, ids[WORDS])
        c = rows(catalog, COUNTS, ids[COUNTS])
        h = rows(catalog, HIST, ids[HIST])
        assert {r["word"]: r["cnt"] for r in c} == dict(Counter(r["word"] for r in w)), barrier
        assert sum(r["cnt"] for r in c) == len(w)
        assert {r["cnt"]: r["words"] for r in h} == dict(Counter(r["cnt"] for r in c)), barrier
        assert sum(r["words"] for r in h) == len(c)
    assert len(rows(catalog, WORDS, final.snapshot_ids[WORDS])) == 8 * 300


@pytest.mark.parametrize("name", ["back`tick", 'we"ird it\'s'])
def test_odd_identifiers_in_spark_sql(env, name):
    from consistent_catalog.spark.job import SparkEpochJob, read_cut
    from consistent_catalog.sql import cut_to_spark_sql
    from consistent_catalog.util.identifiers import quote_identifier

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    namespace = "odd_" + str(abs(hash(name)) % 10_000)
    catalog.create_namespace(namespace)
    catalog.create_table((namespace, name), schema=WORDS_SCHEMA)
    catalog.create_table((namespace, name + "_counts"), schema=COUNTS_SCHEMA)
    source, sink = f"{namespace}.{name}", f"{namespace}.{name}_counts"
    cc.ingest(source, pa.table({"word": ["a", "a", "b"]}, schema=WORDS_SCHEMA), barrier=10)
    sql = f"SELECT word, count(*) AS cnt FROM {quote_identifier(name)} GROUP BY word"
    with SparkEpochJob(cc, spark, "odd", sources=[source], sinks=[sink], transform=sql, mode="overwrite") as job:
        assert job.run_epoch().actions == {sink: "published"}
    assert {r["word"]: r["cnt"] for r in rows(catalog, sink, head(catalog, sink))} == {"a": 2, "b": 1}
    cut = read_cut(cc, spark, [source, sink], register_views=True)
    assert spark.sql(f"SELECT count(*) AS c FROM {quote_identifier(name)}").first()["c"] == 3
    for statement in cut_to_spark_sql(cut.cut):
        if not statement.startswith("--"):
            spark.sql(statement.rstrip(";"))
    assert spark.sql(f"SELECT sum(cnt) AS s FROM {quote_identifier(name + '_counts')}").first()["s"] == 3


@pytest.mark.parametrize("mode", ["merge", "append"])
def test_a_spark_job_with_a_new_definition_replaces_its_output_beside_the_old_one(env, tables, mode):
    """Protocol §6.10 with SparkEpochJob: an edited SQL transform (upper-cased words) in merge and append mode. A new
    definition that fails at analysis changes nothing; the rerun regenerates: the sink holds the new output only (no
    row of the old generation merged or appended beside it), and the cut with the table downstream reads the old
    generation until that table's job followed."""
    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    words, counts, hist = tables["words"], tables["word_counts"], tables["count_histogram"]
    ingest_dataframe(cc, df(spark, "a", "b", "a", "B"), words, barrier=5_000)
    options = {"keys": ["word"]} if mode == "merge" else {}
    upper_sql = "SELECT upper(word) AS word, count(*) AS cnt FROM words GROUP BY upper(word)"

    def counter(sql):
        return SparkEpochJob(cc, spark, "wc", sources=[words], sinks=[counts], transform=sql, mode=mode,
                             takeover=True, **options)

    def histogram():
        return SparkEpochJob(cc, spark, "hist", sources=[counts], sinks=[hist], transform=(
            "SELECT cnt, count(*) AS words FROM word_counts GROUP BY cnt"), mode="overwrite", takeover=True)

    with counter(COUNT_SQL) as job:
        assert job.run_epoch().actions == {counts: "published"}
    with histogram() as job:
        assert job.run_epoch().actions == {hist: "published"}
    before = cc.resolve([words, counts, hist])
    with counter("SELECT word, count(*) AS cnt FROM words GROUP BY wrod") as job, pytest.raises(Exception, match="wrod"):
        job.run_epoch()
    assert cc.resolve([words, counts, hist]) == before

    class Stop(BaseException):
        """The driver dies after Spark staged the new generation, before the publish."""

    stopped = counter(upper_sql)
    stopped.register()
    stopped.publish = lambda *a, **k: (_ for _ in ()).throw(Stop())
    with pytest.raises(Stop):
        stopped.run_epoch()
    assert cc.resolve([words, counts, hist]) == before
    (row,) = cc.status([counts])
    assert row.generation["staged"] == "definition" and row.staged_barrier == before.barrier
    staged = head(catalog, counts, P.STAGED_BRANCH)
    with counter(upper_sql) as job:  # the staged new generation is published as it is
        result = job.run_epoch()
        assert result.actions == {counts: "regenerated"} and result.snapshots[counts] == staged
    assert {r["word"]: r["cnt"] for r in rows(catalog, counts, head(catalog, counts))} == {"A": 2, "B": 2}
    meanwhile = cc.resolve([words, counts, hist])
    assert meanwhile.snapshot_ids == before.snapshot_ids  # the old generation, with the table downstream
    assert {r["word"]: r["cnt"] for r in rows(catalog, counts, meanwhile[counts].snapshot_id)} == {"a": 2, "b": 1, "B": 1}
    with histogram() as job:
        assert job.run_epoch().actions == {hist: "regenerated"}
    after = cc.resolve([words, counts, hist])
    assert {r["cnt"]: r["words"] for r in rows(catalog, hist, after[hist].snapshot_id)} == {2: 2}
    assert {r["word"]: r["cnt"] for r in rows(catalog, counts, after[counts].snapshot_id)} == {"A": 2, "B": 2}
