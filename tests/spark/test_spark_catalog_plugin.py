"""Spark SQL reads consistent cuts by catalog configuration alone (issue #12): the ``lake_consistent`` plugin.

One lake, one PySpark session and one ``spark-sql`` run for the whole module (a 2-core machine). The
FLIP demo pipeline (``consistent-catalog demo``, pyiceberg jobs) runs as a separate process while
(a) and (b) sample; afterwards the lake stands still for (c) and (d).

(a) ``spark-sql --properties-file <conf> -e "SELECT ..."``: every sampled statement returns the rows
    of words, word_counts and count_histogram, recounted here in Python: sum(cnt) = count(words), every
    word's count matches, the histogram is the histogram of the counts; later statements never see
    fewer words (a later cut is never older). The DELETE at the end is refused with a one-line error.
(b) the same from PySpark (``spark.sql``, and ``spark.table`` per table under refresh=manual, whose
    snapshot ids, from ``CALL ... current_cut``, are read again with pyiceberg: an independent reader).
(c) the plugin serves exactly ``ConsistentCatalog.resolve`` at repeatable-read, read-committed (a
    staged epoch), as-of (ms and ISO), a reader pin and a retained-cut tag; VERSION AS OF and selector
    names pass through; errors are one-line AnalysisExceptions naming the table and the way out.
(d) every write through the consistent catalog that is not an epoch or an ingest (protocol §5.9: DDL,
    row-level changes, overwriting a root, writing a branch) is refused and changes nothing; epochs and
    ingests themselves are tests/spark/test_sql_writer.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import COUNTS, HISTOGRAM, SCHEMAS, TABLES, WORDS
from consistent_catalog.loading import table_state
from consistent_catalog.state import encode_summary_sources
from tests.harness.spark_plugin import CONSISTENT, plugin_conf, write_properties

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EPOCHS = 300  # more than the sampling needs: the demo is stopped after (b)
ROWS_PER_EPOCH = 25

UNION = """
SELECT '{tag}' AS q, 'W' AS k, word AS v, CAST(NULL AS BIGINT) AS n FROM lake_consistent.demo.words
UNION ALL SELECT '{tag}', 'C', word, cnt FROM lake_consistent.demo.word_counts
UNION ALL SELECT '{tag}', 'H', CAST(cnt AS STRING), words FROM lake_consistent.demo.count_histogram
""".strip()


# --- the independent recount ----------------------------------------------------------------------------
def recount(rows: Iterable[tuple[Any, ...]]) -> tuple[int, list[str]]:
    """(words, problems) of one statement's rows (kind, value, n): the FLIP-276 invariants, counted here."""
    words: Counter[str] = Counter()
    counts: dict[str, int] = {}
    histogram: dict[int, int] = {}
    for kind, value, n in rows:
        if kind == "W":
            words[value] += 1
        elif kind == "C":
            counts[value] = int(n)
        elif kind == "H":
            histogram[int(value)] = int(n)
    problems = []
    if sum(counts.values()) != sum(words.values()):
        problems.append(f"sum(word_counts.cnt)={sum(counts.values())} != count(words)={sum(words.values())}")
    if counts != dict(words):
        wrong = sorted(w for w in set(counts) | set(words) if counts.get(w) != words.get(w))[:5]
        problems.append(f"word_counts differs from a recount of words for {wrong}")
    if dict(Counter(counts.values())) != histogram:
        problems.append("count_histogram is not the histogram of word_counts")
    return sum(words.values()), problems


# --- the lake, the pipeline process and the Spark session --------------------------------------------------
@dataclass
class Lake:
    root: Path
    uri: str
    warehouse: Path
    properties: Path
    conf: dict[str, str]
    cc: ConsistentCatalog
    demo: subprocess.Popen[bytes]
    spark: Any

    def words_snapshots(self) -> int:
        return len(self.cc.load_table(WORDS).metadata.snapshots)

    def sql(self, text: str) -> list[Any]:
        return self.spark.sql(text).collect()

    def stop_demo(self) -> None:
        if self.demo.poll() is None:
            os.killpg(self.demo.pid, signal.SIGTERM)
            try:
                self.demo.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.demo.pid, signal.SIGKILL)
                self.demo.wait(timeout=30)


def _wait_for_pipeline(cc: ConsistentCatalog, demo: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    """Until count_histogram has published an epoch (before that every cut of the three tables is blocked)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert demo.poll() is None, f"the demo pipeline stopped early:\n{log.read_text()[-3000:]}"
        try:
            if table_state(HISTOGRAM, cc.load_table(HISTOGRAM).metadata).watermark() is not None:
                return
        except Exception:  # noqa: BLE001 - the tables are still being created
            pass
        time.sleep(0.5)
    raise AssertionError(f"count_histogram published nothing within {timeout}s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterable[Lake]:
    from consistent_catalog.spark.session import build_session

    root = tmp_path_factory.mktemp("plugin-lake")
    uri = f"sqlite:///{root}/catalog.db"
    warehouse = root / "warehouse"
    conf = plugin_conf(uri, warehouse)  # builds jvm/spark-plugin and its jar
    properties = write_properties(root / "spark-defaults.conf", conf)
    log = root / "demo.log"
    with log.open("wb") as out:
        demo = subprocess.Popen(
            [str(BIN / "consistent-catalog"), "demo", "--dir", str(root), "--epochs", str(EPOCHS), "--interval", "1",
             "--rows-per-epoch", str(ROWS_PER_EPOCH), "--engine", "pyiceberg"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=root,
        )
    cc = ConsistentCatalog(SqlCatalog("lake", uri=uri, warehouse=f"file://{warehouse}"))
    spark = None
    try:
        _wait_for_pipeline(cc, demo, log)
        spark = build_session(uri, warehouse, app_name="consistent-catalog-plugin", extra_conf=conf)
        yield Lake(root, uri, warehouse, properties, conf, cc, demo, spark)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(timeout=30)
        if spark is not None:
            spark.stop()


def _statement_rows(stdout: str) -> dict[str, list[tuple[str, str, str | None]]]:
    found: dict[str, list[tuple[str, str, str | None]]] = {}
    for line in stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[1] in ("W", "C", "H"):
            found.setdefault(parts[0], []).append((parts[1], parts[2], None if parts[3] == "NULL" else parts[3]))
    return found


# --- (a) spark-sql while the pipeline runs -------------------------------------------------------------------
def test_spark_sql_reads_consistent_cuts_while_the_pipeline_runs(lake: Lake) -> None:
    statements = [UNION.format(tag=f"s{i}") for i in range(4)]
    script = ";\n".join(statements) + ";\nDELETE FROM lake_consistent.demo.words WHERE word = 'refused';\n"
    before = lake.words_snapshots()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [str(BIN / "spark-sql"), "--properties-file", str(lake.properties), "-S", "-e", script],
        capture_output=True, text=True, timeout=600, env=env, cwd=lake.root,
    )
    after = lake.words_snapshots()
    rows = _statement_rows(result.stdout)
    assert sorted(rows) == [f"s{i}" for i in range(4)], (
        f"spark-sql returned rows for {sorted(rows)}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    )
    sizes = []
    for tag in sorted(rows):
        count, problems = recount(r for r in rows[tag])
        assert not problems, f"statement {tag}: {problems}"
        sizes.append(count)
    assert sizes == sorted(sizes), f"a later statement read an older cut: count(words) per statement {sizes}"
    assert after > before, "the pipeline did not commit while spark-sql was reading (the demo stopped too early)"
    # the refused write: a one-line Spark SQL error naming the table and the way out, and no exit status 0
    assert result.returncode != 0
    error = next((line for line in result.stderr.splitlines() if "CONSISTENT_WRITE.REFUSED" in line), None)
    assert error is not None, result.stderr[-3000:]
    assert "lake_consistent.demo.words" in error and "epochs" in error and "revise" in error


# --- (b) PySpark while the pipeline runs --------------------------------------------------------------------
def _snapshot_rows(cc: ConsistentCatalog, table: str, snapshot_id: int | None) -> pa.Table:
    loaded = cc.load_table(table)
    if snapshot_id is None:
        return loaded.schema().as_arrow().empty_table()
    return loaded.scan(snapshot_id=snapshot_id).to_arrow()


def _cut(lake: Lake, table: str = WORDS) -> dict[str, Any]:
    return {row["table"]: row.asDict() for row in lake.sql(f"CALL lake_consistent.system.current_cut('{table}')")}


def test_pyspark_reads_consistent_cuts_while_the_pipeline_runs(lake: Lake) -> None:
    before = lake.words_snapshots()
    sizes = []
    for i in range(3):  # one statement per sample: its own cut
        rows = [(r["k"], r["v"], r["n"]) for r in lake.sql(UNION.format(tag=f"p{i}"))]
        count, problems = recount(rows)
        assert not problems, f"spark.sql sample {i}: {problems}"
        sizes.append(count)
    for _ in range(2):  # spark.table(...) per table: separate statements, each its own (never older) cut
        sizes.append(lake.spark.table(f"{CONSISTENT}.{WORDS}").count())
    assert sizes == sorted(sizes), f"a later statement read an older cut: {sizes}"

    # refresh=manual: one cut held across separate DataFrames and actions, while the pipeline commits
    lake.spark.conf.set("spark.sql.consistent.refresh", "manual")
    try:
        lake.sql("CALL lake_consistent.system.refresh_cut()")
        frames = {}
        for table in TABLES:
            frames[table] = lake.spark.table(f"{CONSISTENT}.{table}")
            time.sleep(1.2)  # the pipeline publishes meanwhile
        cut = _cut(lake)
        words = [(r["word"],) for r in frames[WORDS].collect()]
        counts = [(r["word"], r["cnt"]) for r in frames[COUNTS].collect()]
        hist = [(r["cnt"], r["words"]) for r in frames[HISTOGRAM].collect()]
        rows = [("W", w, None) for (w,) in words] + [("C", w, c) for w, c in counts] + [("H", str(c), n) for c, n in hist]
        _, problems = recount(rows)
        assert not problems, f"the held cut {cut}: {problems}"
        # an independent reader (pyiceberg) at the snapshot ids the catalog reports for the held cut
        assert len({row["cut_barrier"] for row in cut.values()}) == 1
        assert all(row["status"] == "ok" for row in cut.values()), cut
        assert _snapshot_rows(lake.cc, WORDS, cut[WORDS]["snapshot_id"]).num_rows == len(words)
        expected_counts = _snapshot_rows(lake.cc, COUNTS, cut[COUNTS]["snapshot_id"])
        assert sorted(zip(expected_counts["word"].to_pylist(), expected_counts["cnt"].to_pylist())) == sorted(counts)
        # SET spark.sql.consistent.cut=latest: the next load takes a new cut, never older
        time.sleep(1.2)
        lake.sql("SET spark.sql.consistent.cut=latest")
        newer = lake.spark.table(f"{CONSISTENT}.{WORDS}").count()
        refreshed = _cut(lake)
        assert refreshed[WORDS]["cut_barrier"] >= cut[WORDS]["cut_barrier"]
        assert newer >= len(words)
    finally:
        lake.spark.conf.unset("spark.sql.consistent.refresh")
    assert lake.words_snapshots() > before, "the pipeline did not commit while PySpark was reading"
    lake.stop_demo()


# --- (c) the same answers as the Python resolver ----------------------------------------------------------------
def _stage_epoch(lake: Lake) -> int:
    """New words, and an epoch of both jobs staged on consistent-staged and not published (a killed job)."""
    cc = lake.cc
    barrier = cc.ingest(WORDS, pa.table({"word": ["zz-staged", "w000"]}, schema=SCHEMAS[WORDS])).barrier
    words = cc.load_table(WORDS).metadata.snapshot_by_name("main").snapshot_id
    all_words = Counter(_snapshot_rows(cc, WORDS, words)["word"].to_pylist())
    staged = {}
    for sink, source, source_id, data in (
        (COUNTS, WORDS, words, pa.table({"word": list(all_words), "cnt": list(all_words.values())}, schema=SCHEMAS[COUNTS])),
        (HISTOGRAM, COUNTS, None, None),
    ):
        if sink == HISTOGRAM:
            hist = Counter(all_words.values())
            data = pa.table({"cnt": list(hist), "words": list(hist.values())}, schema=SCHEMAS[HISTOGRAM])
            source_id = staged[COUNTS]
        table = cc.load_table(sink)
        head = table.metadata.snapshot_by_name("main").snapshot_id
        from pyiceberg.table.refs import SnapshotRefType
        from pyiceberg.table.update import SetSnapshotRefUpdate

        cc.catalog.commit_table(
            table, (), (SetSnapshotRefUpdate(ref_name=P.STAGED_BRANCH, type=SnapshotRefType.BRANCH, snapshot_id=head),)
        )
        props = {P.BARRIER: str(barrier), P.JOB: table.metadata.properties[P.JOB],
                 P.SOURCES: encode_summary_sources({source: source_id}), P.ATTEMPT: "staged-by-test"}
        cc.load_table(sink).overwrite(data, snapshot_properties=props, branch=P.STAGED_BRANCH)
        staged[sink] = cc.load_table(sink).metadata.snapshot_by_name(P.STAGED_BRANCH).snapshot_id
    return barrier


def _count(lake: Lake, table: str) -> int:
    return lake.sql(f"SELECT count(*) AS n FROM {CONSISTENT}.{table}")[0]["n"]


def _expect(lake: Lake, cut: Any) -> None:
    """The plugin serves ``cut`` (a ConsistentCatalog.resolve answer): the same ids, and the same rows."""
    served = _cut(lake)
    assert {t: served[t]["snapshot_id"] for t in TABLES} == {t: cut[t].snapshot_id for t in TABLES}, (served, cut)
    assert {served[t]["cut_barrier"] for t in TABLES} == {cut.barrier}
    for table in TABLES:
        assert _count(lake, table) == _snapshot_rows(lake.cc, table, cut[table].snapshot_id).num_rows, table


def test_levels_and_as_of_serve_what_the_python_resolver_resolves(lake: Lake) -> None:
    lake.stop_demo()
    _expect(lake, lake.cc.resolve(TABLES))
    staged_barrier = _stage_epoch(lake)
    latest = lake.cc.resolve(TABLES)
    committed = lake.cc.resolve(TABLES, "read-committed")
    assert committed.barrier == staged_barrier and committed[COUNTS].branch == P.STAGED_BRANCH
    assert latest.barrier < staged_barrier
    _expect(lake, latest)
    lake.sql("SET spark.sql.consistent.level=read-committed")
    try:
        _expect(lake, committed)
        assert lake.sql("SELECT count(*) AS n FROM lake_consistent.demo.word_counts WHERE word = 'zz-staged'")[0]["n"] == 1
    finally:
        lake.sql("RESET spark.sql.consistent.level")
    assert lake.sql("SELECT count(*) AS n FROM lake_consistent.demo.word_counts WHERE word = 'zz-staged'")[0]["n"] == 0

    history = [e.barrier for e in lake.cc.epochs(HISTOGRAM) if e.barrier is not None]
    for barrier in sorted(history)[:: max(1, len(history) // 3)][:3]:
        for as_of in (barrier, datetime.fromtimestamp(barrier / 1000, tz=timezone.utc).isoformat()):
            lake.sql(f"SET spark.sql.consistent.asOf={as_of}")
            try:
                _expect(lake, lake.cc.resolve(TABLES, as_of=barrier))
            finally:
                lake.sql("RESET spark.sql.consistent.asOf")
    _expect(lake, latest)  # back to the newest cut after a historical one


def test_pins_and_retained_tags_are_read_as_tagged(lake: Lake) -> None:
    pins = lake.cc.pins
    pinned = pins.pin(TABLES, ttl="1h")
    try:
        lake.cc.ingest(WORDS, pa.table({"word": ["after-the-pin"]}, schema=SCHEMAS[WORDS]))
        lake.sql(f"SET spark.sql.consistent.tag={pinned.tag}")
        try:
            served = _cut(lake)
            assert {t: served[t]["snapshot_id"] for t in pinned.tables} == dict(pinned.tables)
            for table in pinned.tables:
                assert _count(lake, table) == _snapshot_rows(lake.cc, table, pinned.tables[table]).num_rows
        finally:
            lake.sql("RESET spark.sql.consistent.tag")
    finally:
        pinned.release()
    from consistent_catalog.retention import RetentionPolicy

    retained = [r for r in lake.cc.retention.retain(TABLES, RetentionPolicy(hourly=2)) if r.tables]
    assert retained, "retain tagged nothing"
    lake.sql(f"SET spark.sql.consistent.tag={retained[0].tag}")
    try:
        served = _cut(lake)
        assert {t: served[t]["snapshot_id"] for t in retained[0].tables} == dict(retained[0].tables)
    finally:
        lake.sql("RESET spark.sql.consistent.tag")
    lake.sql("SET spark.sql.consistent.tag=consistent-pin-nosuchpin")
    try:
        with pytest.raises(Exception, match=r"CONSISTENT_CUT\.INVALID_SETTING.*carries no tag consistent-pin-nosuchpin"):
            _count(lake, WORDS)
    finally:
        lake.sql("RESET spark.sql.consistent.tag")


def test_version_as_of_and_selectors_pass_through(lake: Lake) -> None:
    snapshots = lake.cc.load_table(WORDS).metadata.snapshots
    first = snapshots[0].snapshot_id
    expected = _snapshot_rows(lake.cc, WORDS, first).num_rows
    assert lake.sql(f"SELECT count(*) AS n FROM lake_consistent.demo.words VERSION AS OF {first}")[0]["n"] == expected
    assert lake.sql(f"SELECT count(*) AS n FROM lake_consistent.demo.words.snapshot_id_{first}")[0]["n"] == expected
    staged = lake.cc.load_table(COUNTS).metadata.snapshot_by_name(P.STAGED_BRANCH).snapshot_id
    n = _snapshot_rows(lake.cc, COUNTS, staged).num_rows
    assert lake.sql("SELECT count(*) AS n FROM lake_consistent.demo.word_counts VERSION AS OF 'consistent-staged'")[0]["n"] == n
    assert lake.sql("SELECT count(*) AS n FROM lake_consistent.demo.word_counts.`branch_consistent-staged`")[0]["n"] == n
    assert lake.sql("SELECT count(*) AS n FROM lake_consistent.demo.words.snapshots")[0]["n"] == len(snapshots)


def test_loading_one_table_after_the_other_serves_the_same_cuts(lake: Lake) -> None:
    """``load-threads=1`` (the tables of a component loaded one after the other on the querying thread)
    and the default (loaded on several threads) serve the same cuts; a bad value is refused."""
    lake.stop_demo()
    prefix = f"spark.sql.catalog.{CONSISTENT}"
    for name, threads in (("lake_consistent_seq", "1"), ("lake_consistent_bad", "0")):
        for key, value in lake.conf.items():
            if key == prefix or key.startswith(prefix + "."):
                lake.spark.conf.set(f"spark.sql.catalog.{name}" + key[len(prefix):], value)
        lake.spark.conf.set(f"spark.sql.catalog.{name}.plain-catalog", "lake")
        lake.spark.conf.set(f"spark.sql.catalog.{name}.load-threads", threads)
    for level in ("repeatable-read", "read-committed"):
        lake.sql(f"SET spark.sql.consistent.level={level}")
        try:
            for table in TABLES:
                rows = {name: {r["table"]: r.asDict() for r in lake.sql(f"CALL {name}.system.current_cut('{table}')")}
                        for name in (CONSISTENT, "lake_consistent_seq")}
                assert rows[CONSISTENT] == rows["lake_consistent_seq"], (level, table, rows)
            assert _count(lake, WORDS) == lake.sql(f"SELECT count(*) AS n FROM lake_consistent_seq.{WORDS}")[0]["n"]
        finally:
            lake.sql("RESET spark.sql.consistent.level")
    with pytest.raises(Exception, match="load-threads=0 is not a positive number of threads"):
        lake.sql(f"SELECT * FROM lake_consistent_bad.{WORDS}")


def _error(lake: Lake, sql: str) -> str:
    with pytest.raises(Exception) as caught:  # pyspark.errors.AnalysisException
        lake.sql(sql)
    message = str(caught.value).strip().splitlines()[0]
    assert type(caught.value).__name__ == "AnalysisException", f"{type(caught.value).__name__}: {message}"
    return message


def test_errors_are_one_line_and_name_the_table_and_the_way_out(lake: Lake) -> None:
    lake.cc.catalog.create_namespace("other")
    lake.cc.catalog.create_table("other.empty_root", schema=SCHEMAS[WORDS])
    message = _error(lake, "SELECT * FROM lake_consistent.other.empty_root")
    assert message.startswith("[CONSISTENT_CUT.NO_WATERMARK] lake_consistent.other.empty_root has no consistent cut")
    assert "advance-watermark other.empty_root" in message and "use lake.other.empty_root" in message

    lake.sql("SET spark.sql.consistent.asOf=1999-01-01T00:00:00Z")
    try:
        message = _error(lake, "SELECT * FROM lake_consistent.demo.words")
        assert message.startswith("[CONSISTENT_CUT.INVALID_SETTING]") and "before the first barrier" in message
    finally:
        lake.sql("RESET spark.sql.consistent.asOf")
    lake.sql("SET spark.sql.consistent.level=serializable")
    try:
        message = _error(lake, "SELECT * FROM lake_consistent.demo.words")
        assert "spark.sql.consistent.level=serializable" in message and "repeatable-read" in message
    finally:
        lake.sql("RESET spark.sql.consistent.level")

    # a foreign write to a derived table: it (and what derives from it) has no cut; its sources still do
    lake.cc.load_table(COUNTS).append(pa.table({"word": ["foreign"], "cnt": [1]}, schema=SCHEMAS[COUNTS]))
    message = _error(lake, "SELECT * FROM lake_consistent.demo.word_counts")
    assert message.startswith("[CONSISTENT_CUT.UNTRACKED_WRITE] lake_consistent.demo.word_counts has no consistent cut")
    assert "revise demo.word_counts" in message and "use lake.demo.word_counts" in message
    message = _error(lake, "SELECT * FROM lake_consistent.demo.count_histogram")
    assert "UNTRACKED_WRITE" in message and "because of demo.word_counts" in message
    assert _count(lake, WORDS) == _snapshot_rows(lake.cc, WORDS, lake.cc.resolve([WORDS])[WORDS].snapshot_id).num_rows


# --- (d) writes refused ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sql", "error_class"),
    [
        ("INSERT OVERWRITE lake_consistent.demo.words SELECT 'x'", "CONSISTENT_WRITE.REFUSED"),
        ("DELETE FROM lake_consistent.demo.words WHERE word = 'w000'", "CONSISTENT_WRITE.REFUSED"),
        ("UPDATE lake_consistent.demo.words SET word = 'x' WHERE word = 'w000'", "CONSISTENT_WRITE.REFUSED"),
        ("MERGE INTO lake_consistent.demo.words t USING (SELECT 'x' AS word) s ON t.word = s.word "
         "WHEN NOT MATCHED THEN INSERT *", "CONSISTENT_WRITE.REFUSED"),
        ("INSERT INTO lake_consistent.demo.word_counts SELECT word, 1 FROM lake_consistent.demo.words",
         "CONSISTENT_WRITE.REFUSED"),
        ("ALTER TABLE lake_consistent.demo.words SET TBLPROPERTIES ('a' = 'b')", "CONSISTENT_CUT.READ_ONLY"),
        ("DROP TABLE lake_consistent.demo.words", "CONSISTENT_CUT.READ_ONLY"),
        ("CREATE TABLE lake_consistent.demo.new_table (a INT)", "CONSISTENT_CUT.READ_ONLY"),
        ("CALL lake_consistent.system.expire_snapshots(table => 'demo.words')", "CONSISTENT_CUT.READ_ONLY"),
        ("INSERT INTO lake_consistent.demo.words.branch_main VALUES ('x')", "CONSISTENT_CUT.READ_ONLY"),
        ("CREATE NAMESPACE lake_consistent.more", "CONSISTENT_CUT.READ_ONLY"),
    ],
)
def test_writes_that_are_not_epochs_or_ingests_are_refused(lake: Lake, sql: str, error_class: str) -> None:
    before = {t: lake.cc.load_table(t).metadata.metadata_log for t in (WORDS, COUNTS)}
    message = _error(lake, sql)
    assert message.startswith(f"[{error_class}] lake_consistent"), message
    if error_class == "CONSISTENT_CUT.READ_ONLY":
        assert "plain catalog lake" in message and "epochs and ingests" in message, message
    else:  # names the table and what it takes instead
        assert "lake_consistent.demo." in message and ("epoch" in message or "ingest" in message), message
    assert {t: lake.cc.load_table(t).metadata.metadata_log for t in (WORDS, COUNTS)} == before
    assert ("more",) not in lake.cc.catalog.list_namespaces()


# --- (e) what a new user hit (issue #23): revisions, the component rule, settings, messages ---------------------
XS = pa.schema([pa.field("x", pa.int64())])


def _pipeline(cc: ConsistentCatalog, names: list[str], start: int) -> list[Any]:
    """A chain names[0] -> names[1] -> ... of copy jobs (pyiceberg), its root fed twice and every job run once."""
    namespace = names[0].split(".")[0]
    cc.catalog.create_namespace(namespace)
    for name in names:
        cc.catalog.create_table(name, schema=XS)
    jobs = []
    for source, sink in zip(names, names[1:]):
        job = cc.job(f"copy-{sink}", sources=[source], sinks=[sink], mode="overwrite", version="copy-1",
                     transform=lambda ctx, s=source: ctx.read(s))
        job.register()
        jobs.append(job)
    for i, barrier in enumerate((start, start + 1_000)):
        cc.ingest(names[0], pa.table({"x": [i]}, schema=XS), barrier=barrier, key=f"k{i}")
    for job in jobs:
        job.run_until_caught_up()
    return jobs


def test_a_table_that_joined_after_the_session_read_its_component_is_refused_not_served_latest(lake: Lake) -> None:
    """A job joins two components: its sink d is complete only at the other component's older barrier, so the
    fresh cut of the joined component is older than the cut this session served. The session keeps serving the
    earlier cut (a cut never goes back), and d, which that cut does not hold, is refused with the reason, not
    served as it is now."""
    now = int(time.time() * 1000)
    _pipeline(lake.cc, ["mono1.r", "mono1.a"], now - 30_000)
    _pipeline(lake.cc, ["mono2.r", "mono2.a"], now - 90_000)
    assert _count(lake, "mono1.a") == 2  # the session's cut of mono1: barrier now - 29 s
    served = _cut(lake, "mono1.a")["mono1.a"]["snapshot_id"]
    lake.cc.catalog.create_table("mono1.d", schema=XS)
    join = lake.cc.job("copy-mono1.d", sources=["mono1.a", "mono2.a"], sinks=["mono1.d"], mode="overwrite",
                       transform=lambda ctx: pa.concat_tables([ctx.read("mono1.a"), ctx.read("mono2.a")]))
    with join:
        assert join.run_epoch().barrier == now - 89_000  # complete only where mono2 is
    assert lake.cc.resolve(["mono1.a"], component=True).barrier == now - 89_000  # the fresh cut is older
    assert _cut(lake, "mono1.a")["mono1.a"]["snapshot_id"] == served  # never older: the earlier cut again
    message = _error(lake, "SELECT count(*) FROM lake_consistent.mono1.d")
    assert message.startswith("[CONSISTENT_CUT.NO_COMPLETE_BARRIER] lake_consistent.mono1.d has no consistent cut")
    assert f"joined the pipeline after this session read it at barrier {now - 29_000}" in message
    assert "use lake.mono1.d" in message


def test_a_revision_unblocks_a_session_that_saw_the_foreign_write(lake: Lake) -> None:
    """Issue #23.1: the session read the table, a foreign write untracked it while its root moved on (the session
    then read the root at a newer barrier), the advised revise fixed it: the same session reads again — a
    revision legitimately moves the cut back (protocol §8) — and so does refresh=manual after refresh_cut()."""
    now = int(time.time() * 1000)
    _pipeline(lake.cc, ["rev.r", "rev.d"], now - 60_000)
    complete = now - 59_000
    assert _count(lake, "rev.d") == 2
    lake.sql("INSERT INTO lake.rev.d VALUES (99)")  # a Spark job writing outside the table's job
    message = _error(lake, "SELECT * FROM lake_consistent.rev.d")
    assert message.startswith("[CONSISTENT_CUT.UNTRACKED_WRITE] lake_consistent.rev.d has no consistent cut")
    assert f"SET spark.sql.consistent.asOf={complete}" in message
    assert f"consistent-catalog revise rev.d --to-barrier {complete}" in message
    assert "--as-of" not in message and "Error]" not in message  # Spark settings, no Python class names
    app = lake.spark.sparkContext.applicationId
    assert message.count(app) == 1, message  # Spark records its app id twice; the writer is named once
    lake.cc.ingest("rev.r", pa.table({"x": [2]}, schema=XS), barrier=now - 30_000, key="k2")
    assert _count(lake, "rev.r") == 3  # the root alone moves on while rev.d is left out
    lake.cc.revise("rev.d", complete)  # what the message advises
    assert sorted(r["x"] for r in lake.sql("SELECT x FROM lake_consistent.rev.d")) == [0, 1]
    assert _count(lake, "rev.r") == 2  # the component's cut went back with the revision, once

    lake.sql("SET spark.sql.consistent.refresh=manual")
    try:
        assert _count(lake, "rev.d") == 2
        lake.sql("INSERT INTO lake.rev.d VALUES (98)")
        lake.sql("CALL lake_consistent.system.refresh_cut()")
        assert _error(lake, "SELECT * FROM lake_consistent.rev.d").startswith("[CONSISTENT_CUT.UNTRACKED_WRITE]")
        lake.cc.revise("rev.d", complete)
        lake.sql("CALL lake_consistent.system.refresh_cut()")
        assert _count(lake, "rev.d") == 2
    finally:
        lake.sql("RESET spark.sql.consistent.refresh")


def test_the_component_cut_is_what_resolve_component_answers(lake: Lake) -> None:
    """Issue #23.2: with a table downstream lagging, the plugin serves the component cut; `resolve --component`
    (CLI and Python) answers the same, plain `resolve` the newer cut of the table and its upstream."""
    now = int(time.time() * 1000)
    _pipeline(lake.cc, ["lag.r", "lag.a", "lag.b"], now - 60_000)
    lake.cc.ingest("lag.r", pa.table({"x": [2]}, schema=XS), barrier=now - 30_000, key="k2")
    first = lake.cc.job("copy-lag.a", sources=["lag.r"], sinks=["lag.a"], mode="overwrite", takeover=True,
                        version="copy-1", transform=lambda ctx: ctx.read("lag.r"))  # the copy job's one definition
    with first:
        first.run_until_caught_up()  # lag.b's job does not run: it lags one barrier behind
    plain = lake.cc.resolve(["lag.r"])
    component = lake.cc.resolve(["lag.r"], component=True)
    assert plain.barrier == now - 30_000 and component.barrier == now - 59_000
    served = _cut(lake, "lag.r")
    assert set(served) == {"lag.r", "lag.a", "lag.b"}
    assert served["lag.r"]["snapshot_id"] == component["lag.r"].snapshot_id
    assert served["lag.r"]["cut_barrier"] == component.barrier
    assert _count(lake, "lag.r") == _snapshot_rows(lake.cc, "lag.r", component["lag.r"].snapshot_id).num_rows == 2
    env = {**os.environ, "PYICEBERG_CATALOG__LAKE__URI": lake.uri,
           "PYICEBERG_CATALOG__LAKE__WAREHOUSE": f"file://{lake.warehouse}"}
    cli = [str(BIN / "consistent-catalog"), "-c", "lake", "-o", "json", "resolve", "lag.r"]
    answers = [json.loads(subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout)
               for args in (cli, [*cli, "--component"])]
    assert [a["barrier"] for a in answers] == [plain.barrier, component.barrier]
    # no argument: every table of the catalog, each at its component's cut, in named columns
    frame = lake.spark.sql("CALL lake_consistent.system.current_cut()")
    assert frame.columns == ["table", "snapshot_id", "barrier", "branch", "cut_barrier", "level", "status"]
    everything = {r["table"]: r.asDict() for r in frame.collect()}
    assert {"lag.r", "lag.a", "lag.b", "rev.r", "rev.d", *TABLES} <= set(everything)
    assert everything["lag.b"]["cut_barrier"] == component.barrier


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("levle", "read-committed", "spark.sql.consistent.levle is not a setting of the consistent catalog; the "
                                    "settings are spark.sql.consistent.level, "),
        ("level", "serializable", "repeatable-read, read-committed, read-uncommitted"),
        ("refresh", "auto", "use statement"),
        ("asOf", "2030-01-01T00:00:00Z", "lies in the future"),
        # protocol §3.8: a barrier in seconds is refused naming its milliseconds
        ("asOf", "1700000000", "in seconds 1700000000 would be 1700000000000 (2023-11-14 22:13:20.000Z)"),
        ("cut", "soon", "spark.sql.consistent.cut=latest takes a new cut"),
    ],
)
def test_a_bad_setting_is_refused_at_the_statement_that_reads_it(lake: Lake, key: str, value: str, says: str) -> None:
    """Issue #23.3: a typo in a key, a bad value or a future asOf is refused, naming what is valid."""
    lake.spark.conf.set(f"spark.sql.consistent.{key}", value)
    try:
        for statement in (f"SELECT * FROM lake_consistent.{WORDS}", f"DESCRIBE TABLE lake_consistent.{WORDS}"):
            message = _error(lake, statement)
            assert message.startswith("[CONSISTENT_CUT.INVALID_SETTING]") and says in message, message
    finally:
        lake.spark.conf.unset(f"spark.sql.consistent.{key}")
    assert _count(lake, WORDS) > 0


def test_a_missing_tag_names_the_commands_that_list_tags(lake: Lake) -> None:
    lake.sql("SET spark.sql.consistent.tag=consistent-nope")
    try:
        message = _error(lake, f"SELECT * FROM lake_consistent.{WORDS}")
    finally:
        lake.sql("RESET spark.sql.consistent.tag")
    assert "`consistent-catalog pins`" in message and "`consistent-catalog retain --list`" in message
    assert "retained," not in message and "Error]" not in message


def test_a_misspelled_table_is_one_line(lake: Lake) -> None:
    """Issue #23.4: not Spark's plan dump; ``tableExists`` still answers (no error) for tools that ask first."""
    message = _error(lake, "SELECT * FROM lake_consistent.demo.nope")
    assert message == ("[CONSISTENT_CUT.TABLE_NOT_FOUND] lake_consistent.demo.nope does not exist; check the name — "
                       "SHOW TABLES IN lake_consistent.demo lists the tables there")
    assert lake.spark.catalog.tableExists("lake_consistent.demo.nope") is False
    assert lake.spark.catalog.tableExists(f"lake_consistent.{WORDS}") is True
