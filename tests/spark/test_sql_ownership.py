"""A sink belongs to its job, and a job's definition is part of its lineage (issue 29, protocol §6.1-§6.2, §6.9,
§6.10) through the JVM plugin ``lake_consistent``: Spark SQL, DataFrame writes and streaming queries.

One PySpark session (local[2]) over one SQLite catalog for the module; each test works in its own namespace.
Everything the plugin writes is read back with pyiceberg (table properties, refs, snapshot summaries, metadata
locations) and recomputed from the sources at the snapshots an epoch recorded, never from the plugin's answers.
What the plugin prints on the driver's stderr is read from a file the JVM's ``System.err`` is pointed at.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P

pytestmark = [pytest.mark.spark, pytest.mark.integration]

WORDS = Schema(NestedField(1, "word", StringType(), required=False))
COUNTS = Schema(NestedField(1, "word", StringType(), required=False), NestedField(2, "cnt", LongType(), required=False))
HIST = Schema(NestedField(1, "cnt", LongType(), required=False), NestedField(2, "words", LongType(), required=False))
COUNT = "INSERT OVERWRITE lake_consistent.{ns}.word_counts SELECT word, count(*) AS cnt FROM lake_consistent.{ns}.words GROUP BY word"
HISTOGRAM = ("INSERT OVERWRITE lake_consistent.{ns}.hist SELECT cnt, count(*) AS words FROM lake_consistent.{ns}.word_counts "
             "GROUP BY cnt")
SETTINGS = ("job", "takeover", "lease", "ingestKey", "eventTimeColumn", "rebuild", "version")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ConsistentCatalog, Any, Path]]:
    from consistent_catalog.spark import build_session

    root = tmp_path_factory.mktemp("sql-ownership")
    catalog = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    spark = build_session(f"sqlite:///{root}/catalog.db", str(root / "warehouse"), app_name="test-sql-ownership")
    jvm = spark._jvm
    jvm.System.setErr(jvm.java.io.PrintStream(jvm.java.io.FileOutputStream(str(root / "stderr.log"), True), True, "UTF-8"))
    yield ConsistentCatalog(catalog), spark, root
    for query in spark.streams.active:
        query.stop()
    spark.stop()


@pytest.fixture
def ns(env: Any, request: pytest.FixtureRequest) -> str:
    cc, spark, _ = env
    name = "o_" + request.node.name.replace("test_", "")[:40]
    cc.catalog.create_namespace(name)
    cc.catalog.create_table(f"{name}.words", schema=WORDS)
    cc.catalog.create_table(f"{name}.word_counts", schema=COUNTS)
    for key in SETTINGS:
        spark.conf.unset(f"spark.sql.consistent.{key}")
    return name


def sql(spark: Any, statement: str) -> list[Any]:
    return spark.sql(statement).collect()


def error_of(spark: Any, statement: str) -> str:
    with pytest.raises(Exception) as caught:
        spark.sql(statement).collect()
    return str(caught.value).strip().splitlines()[0]


def ingest(cc: ConsistentCatalog, table: str, *words: str) -> int:
    schema = pa.schema([pa.field("word", pa.string())])
    return cc.ingest(table, pa.table({"word": list(words)}, schema=schema)).barrier


def as_job(spark: Any, job: str) -> None:
    sql(spark, f"SET spark.sql.consistent.job={job}")


def properties(cc: ConsistentCatalog, table: str) -> dict[str, str]:
    return dict(cc.catalog.load_table(table).metadata.properties)


def metadata_location(cc: ConsistentCatalog, table: str) -> str:
    return cc.catalog.load_table(table).metadata_location


def main_chain(cc: ConsistentCatalog, table: str) -> list[Any]:
    loaded = cc.catalog.load_table(table)
    current = loaded.metadata.snapshot_by_name("main")
    chain = []
    while current is not None:
        chain.append(current)
        current = loaded.metadata.snapshot_by_id(current.parent_snapshot_id) if current.parent_snapshot_id else None
    return chain[::-1]


def epochs(cc: ConsistentCatalog, table: str) -> list[dict[str, str]]:
    """Summaries of main's snapshots an epoch staged (they carry an attempt id), oldest first, with their ids."""
    return [dict(s.summary.additional_properties) | {"id": str(s.snapshot_id)} for s in main_chain(cc, table)
            if P.ATTEMPT in s.summary.additional_properties]


def fence_reason(cc: ConsistentCatalog, table: str) -> str | None:
    loaded = cc.catalog.load_table(table)
    fence = loaded.metadata.snapshot_by_name(P.FENCE_BRANCH)
    return None if fence is None else fence.summary.additional_properties.get(P.FENCE_REASON)


def rows_at(cc: ConsistentCatalog, table: str, snapshot_id: int | None) -> list[dict[str, Any]]:
    if snapshot_id is None:
        return []
    return cc.catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


def words_at(cc: ConsistentCatalog, ns: str, epoch: dict[str, str]) -> Counter[str]:
    """The words the epoch read: ``ns.words`` at the input snapshot it recorded (pyiceberg)."""
    read = json.loads(epoch[P.SOURCES])[f"{ns}.words"]
    return Counter(r["word"] for r in rows_at(cc, f"{ns}.words", read))


def release(cc: ConsistentCatalog, table: str) -> None:
    """What the application's normal exit does to its sinks (unregistration): the lease removed, the owner kept."""
    loaded = cc.catalog.load_table(table)
    with loaded.transaction() as tx:
        tx.remove_properties(P.LEASE_HOLDER, P.LEASE_UNTIL)


class Stderr:
    """The driver's stderr lines the plugin printed since the last call (the JVM's System.err goes to a file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def readouterr(self) -> list[str]:
        data = self.path.read_bytes() if self.path.exists() else b""
        new, self.offset = data[self.offset:], len(data)
        return [line for line in new.decode("utf-8").splitlines() if line.startswith("[lake_consistent]")]


@pytest.fixture
def capfd(env: Any) -> Stderr:
    return Stderr(env[2] / "stderr.log")


def plugin_lines(capfd: Stderr) -> list[str]:
    return capfd.readouterr()


# --- ownership (§6.1, §6.2, §6.9) -------------------------------------------------------------------------------
def test_a_typod_or_foreign_job_name_never_takes_a_table_away(env: Any, ns: str) -> None:
    cc, spark, _ = env
    ingest(cc, f"{ns}.words", "a", "b", "a")
    as_job(spark, "cust-totals")
    sql(spark, COUNT.format(ns=ns))
    sink = f"{ns}.word_counts"
    owned = properties(cc, sink)
    assert owned[P.JOB] == "cust-totals"
    release(cc, sink)  # its application exited normally: no lease, still the owner
    before, released = metadata_location(cc, sink), properties(cc, sink)
    assert released[P.JOB] == "cust-totals" and P.LEASE_HOLDER not in released

    ingest(cc, f"{ns}.words", "c")
    as_job(spark, "cust-total")  # a typo
    line = error_of(spark, COUNT.format(ns=ns))
    assert "CONSISTENT_WRITE.OWNERSHIP" in line and "owned by job 'cust-totals' (no instance running)" in line
    assert "SET spark.sql.consistent.job=cust-totals" in line
    assert f"CALL lake_consistent.system.reassign(table => '{sink}', job => 'cust-total')" in line
    assert metadata_location(cc, sink) == before and properties(cc, sink) == released  # lineage unchanged

    # another job, that reads the table: refused too (it would read its own output, or take the table over)
    cc.catalog.create_table(f"{ns}.letters", schema=COUNTS)
    as_job(spark, "letter-totals")
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.letters SELECT word, cnt FROM lake_consistent.{sink}")
    line = error_of(spark, COUNT.format(ns=ns))
    assert "CONSISTENT_WRITE.OWNERSHIP" in line or "CONSISTENT_WRITE.CYCLE" in line, line
    assert metadata_location(cc, sink) == before and properties(cc, sink) == released

    # the owner itself writes it again (same name, a new instance: no takeover needed without a lease)
    as_job(spark, "cust-totals")
    sql(spark, COUNT.format(ns=ns))
    assert properties(cc, sink)[P.JOB] == "cust-totals"
    assert Counter({"a": 2, "b": 1, "c": 1}) == {r["word"]: r["cnt"] for r in cc.catalog.load_table(sink).scan().to_arrow().to_pylist()}


def test_a_live_owner_is_refused_too_and_reassign_hands_the_table_over(env: Any, ns: str) -> None:
    cc, spark, _ = env
    sink = f"{ns}.word_counts"
    ingest(cc, f"{ns}.words", "a", "b")
    as_job(spark, "wc")
    sql(spark, COUNT.format(ns=ns))
    as_job(spark, "wc2")
    line = error_of(spark, COUNT.format(ns=ns))
    assert "owned by job 'wc' (its instance " in line and "holds a lease until" in line, line
    # where the holder runs, for an operator deciding on a takeover: this JVM (protocol §2.2)
    info = json.loads(properties(cc, sink)[P.LEASE_HOLDER_INFO])
    app = spark.sparkContext.applicationId
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    assert info["app"] == app and info["pid"] == pid and info["host"] and info["since"] <= time.time() * 1000
    assert f"(host {info['host']}, pid {pid}, Spark application {app}, since " in line, line

    line = error_of(spark, f"CALL lake_consistent.system.reassign(table => '{sink}', job => 'wc2')")
    assert "CONSISTENT_WRITE.OWNERSHIP" in line and "takeover => true" in line, line
    line = error_of(spark, f"CALL lake_consistent.system.reassign(table => '{ns}.words', job => 'wc2')")
    assert "is a root" in line, line

    rows = sql(spark, f"CALL lake_consistent.system.reassign(table => '{sink}', job => 'wc2', takeover => true)")
    assert [tuple(r) for r in rows] == [(sink, "wc", "wc2", True)]
    props = properties(cc, sink)
    assert props[P.JOB] == "wc2" and P.LEASE_HOLDER not in props and P.LEASE_UNTIL not in props
    assert P.LEASE_HOLDER_INFO not in props
    assert fence_reason(cc, sink) == "reassign"
    before = metadata_location(cc, sink)
    rows = sql(spark, f"CALL lake_consistent.system.reassign(table => '{sink}', job => 'wc2')")
    assert [tuple(r) for r in rows] == [(sink, "wc2", "wc2", False)] and metadata_location(cc, sink) == before

    ingest(cc, f"{ns}.words", "c")
    sql(spark, COUNT.format(ns=ns))  # as wc2 now, its first epoch on the table: the same definition, no revision
    assert properties(cc, sink)[P.JOB] == "wc2"
    last = epochs(cc, sink)[-1]
    assert last[P.JOB] == "wc2" and {r["word"]: r["cnt"] for r in rows_at(cc, sink, int(last["id"]))} == dict(words_at(cc, ns, last))
    as_job(spark, "wc")
    assert "owned by job 'wc2'" in error_of(spark, COUNT.format(ns=ns))


def dead_pid() -> int:
    """The pid of a process of this host that was killed (kill -9) and reaped: it exists no more."""
    process = subprocess.Popen(["sleep", "60"])
    process.kill()
    process.wait(10)
    return process.pid


def test_a_lease_of_a_killed_process_on_this_host_is_called_gone_and_the_takeover_named(env: Any, ns: str) -> None:
    """Issue 42.8: the sink's lease names (``consistent.lease-holder-info``) a process of this host that is gone, as a
    spark-sql killed with -9 leaves it: the refusal says so and names the takeover, instead of "another live
    instance"; a holder whose process runs is still called live."""
    cc, spark, _ = env
    sink = f"{ns}.word_counts"
    ingest(cc, f"{ns}.words", "a", "b")
    as_job(spark, "wc")
    sql(spark, COUNT.format(ns=ns))
    until = int(time.time() * 1000) + 300_000

    def leased_to(pid: int) -> None:
        loaded = cc.catalog.load_table(sink)
        with loaded.transaction() as tx:
            tx.set_properties({P.LEASE_HOLDER: "0badc0ffee00", P.LEASE_UNTIL: str(until), P.LEASE_HOLDER_INFO: json.dumps(
                {"host": socket.gethostname(), "pid": pid, "since": until - 400_000}, separators=(",", ":"))})

    gone = dead_pid()
    leased_to(gone)
    ingest(cc, f"{ns}.words", "c")
    before = metadata_location(cc, sink)
    line = error_of(spark, COUNT.format(ns=ns))
    assert "CONSISTENT_WRITE.OWNERSHIP" in line and f"its process pid {gone} on this host is gone" in line, line
    assert "SET spark.sql.consistent.takeover=true" in line and "another live instance" not in line, line
    assert metadata_location(cc, sink) == before
    leased_to(os.getpid())  # a process that runs: live, as before
    line = error_of(spark, COUNT.format(ns=ns))
    assert "another live instance 0badc0ffee00" in line and " is gone" not in line, line
    leased_to(gone)
    sql(spark, "SET spark.sql.consistent.takeover=true")
    sql(spark, COUNT.format(ns=ns))
    assert properties(cc, sink)[P.LEASE_HOLDER] != "0badc0ffee00"
    last = epochs(cc, sink)[-1]
    assert {r["word"]: r["cnt"] for r in rows_at(cc, sink, int(last["id"]))} == dict(words_at(cc, ns, last))


def test_a_job_reading_its_own_output_over_two_statements_is_a_cycle(env: Any, ns: str) -> None:
    cc, spark, _ = env
    cc.catalog.create_table(f"{ns}.hist", schema=HIST)
    ingest(cc, f"{ns}.words", "a", "b", "a")
    as_job(spark, "both")
    sql(spark, COUNT.format(ns=ns))
    before = properties(cc, f"{ns}.hist"), metadata_location(cc, f"{ns}.hist")
    line = error_of(spark, HISTOGRAM.format(ns=ns))
    assert "CONSISTENT_WRITE.CYCLE" in line and "would read its own output" in line, line
    assert (properties(cc, f"{ns}.hist"), metadata_location(cc, f"{ns}.hist")) == before
    as_job(spark, "hist")  # the second step as a job of its own
    sql(spark, HISTOGRAM.format(ns=ns))
    assert properties(cc, f"{ns}.hist")[P.JOB] == "hist"


# --- definitions (§6.10) ------------------------------------------------------------------------------------------
def test_an_unchanged_statement_stays_done_without_any_commit(env: Any, ns: str, capfd: Stderr) -> None:
    cc, spark, _ = env
    sink = f"{ns}.word_counts"
    ingest(cc, f"{ns}.words", "a", "b", "a")
    as_job(spark, "wc")
    sql(spark, COUNT.format(ns=ns))
    definition = epochs(cc, sink)[-1][P.DEFINITION]
    assert definition.startswith("sql:") and len(definition) == 4 + 16
    before = metadata_location(cc, sink)
    capfd.readouterr()
    sql(spark, "-- the same statement, laid out otherwise\n  " + COUNT.format(ns=ns).replace(" GROUP", "\n\tGROUP") + " ;")
    assert metadata_location(cc, sink) == before
    assert any("done: the sink already holds it" in line for line in plugin_lines(capfd))


def spark_cut(spark: Any, table: str) -> dict[str, int | None]:
    """Table -> snapshot id of the component cut ``lake_consistent`` serves after a statement read ``table``."""
    sql(spark, f"SELECT count(*) FROM lake_consistent.{table}")
    return {r["table"]: r["snapshot_id"] for r in sql(spark, f"CALL lake_consistent.system.current_cut('{table}')")}


def spark_rows(spark: Any, table: str) -> dict[Any, Any]:
    """What one statement through ``lake_consistent`` reads of a two-column table, as a dict."""
    return {r[0]: r[1] for r in sql(spark, f"SELECT * FROM lake_consistent.{table}")}


def test_an_edited_statement_regenerates_beside_the_serving_generation(env: Any, ns: str, capfd: Stderr) -> None:
    """Protocol §6.10, §4.8 over a chain words -> word_counts -> hist: an edited statement that does not analyse or
    fails at run time leaves every cut on the old generation; the one that runs switches word_counts in one commit
    (consistent-previous kept), and until hist's job ran over it, cuts of {word_counts, hist} read both old."""
    cc, spark, _ = env
    sink, hist = f"{ns}.word_counts", f"{ns}.hist"
    cc.catalog.create_table(hist, schema=HIST)
    ingest(cc, f"{ns}.words", "a", "b", "a", "c")
    as_job(spark, "wc")
    sql(spark, COUNT.format(ns=ns))
    as_job(spark, "hist")
    sql(spark, HISTOGRAM.format(ns=ns))
    old = epochs(cc, sink)[-1]
    old_head, old_hist_head = main_chain(cc, sink)[-1].snapshot_id, main_chain(cc, hist)[-1].snapshot_id
    old_props = properties(cc, sink)
    old_rows = {r["word"]: r["cnt"] for r in rows_at(cc, sink, old_head)}
    old_hist_rows = {r["cnt"]: r["words"] for r in rows_at(cc, hist, old_hist_head)}
    assert old_rows == dict(words_at(cc, ns, old)) and old_hist_rows == dict(Counter(old_rows.values()))

    def serves_the_old_generation() -> None:
        assert main_chain(cc, sink)[-1].snapshot_id == old_head
        props = properties(cc, sink)
        assert all(props.get(k) == old_props.get(k) for k in (P.WATERMARK, P.WATERMARK_SNAPSHOT, P.REVISION)), props
        assert P.PREVIOUS not in props
        assert spark_cut(spark, hist) == {f"{ns}.words": int(json.loads(old[P.SOURCES])[f"{ns}.words"]),
                                          sink: old_head, hist: old_hist_head}
        assert spark_rows(spark, sink) == old_rows and spark_rows(spark, hist) == old_hist_rows
        assert cc.resolve([sink, hist]).tables[sink].snapshot_id == old_head  # never NoWatermarkError
        assert [row.error for row in cc.status([sink, hist])] == [None, None]

    as_job(spark, "wc")
    # (a) a new statement that does not analyse: the error, nothing committed
    before = metadata_location(cc, sink)
    assert "UNRESOLVED_COLUMN" in error_of(spark, COUNT.format(ns=ns).replace("count(*)", "count(nosuch)"))
    assert metadata_location(cc, sink) == before
    serves_the_old_generation()
    # (b) one that fails at run time, after its staged write deleted every row on consistent-staged: main untouched
    failing = COUNT.format(ns=ns).replace("count(*) AS cnt", "IF(word = 'a', CAST(raise_error('bad row') AS BIGINT), "
                                                              "count(*)) AS cnt")
    as_job(spark, "wc")
    with pytest.raises(Exception, match="bad row"):
        sql(spark, failing)
    serves_the_old_generation()

    # (c) the edited statement that runs: the new generation, switched in one commit
    edited = COUNT.format(ns=ns).replace("GROUP BY word", "WHERE word <> 'c' GROUP BY word")
    as_job(spark, "wc")
    capfd.readouterr()
    sql(spark, edited)
    lines = plugin_lines(capfd)
    epoch = epochs(cc, sink)[-1]
    assert epoch[P.DEFINITION] != old[P.DEFINITION] and epoch[P.BARRIER] == old[P.BARRIER]
    assert epoch.get(P.REGENERATE) == "definition", epoch
    then, now = old[P.DEFINITION].split(":")[1], epoch[P.DEFINITION].split(":")[1]
    assert any(f"wc: {sink} definition changed (sql {then} -> {now}): new generation at barrier " in line
               and ", published (" in line for line in lines), lines
    new_head = int(epoch["id"])
    new_rows = {r["word"]: r["cnt"] for r in rows_at(cc, sink, new_head)}
    assert new_rows == {w: n for w, n in words_at(cc, ns, epoch).items() if w != "c"}
    props = properties(cc, sink)
    loaded = cc.catalog.load_table(sink)
    assert loaded.metadata.snapshot_by_name(P.PREVIOUS_BRANCH).snapshot_id == old_head
    assert json.loads(props[P.PREVIOUS]) == {"snapshot": old_head, "watermark": int(old_props[P.WATERMARK])
                                              if P.WATERMARK in old_props else None,
                                              "watermark-snapshot": int(old_props[P.WATERMARK_SNAPSHOT])
                                              if P.WATERMARK_SNAPSHOT in old_props else None}
    assert props[P.REVISION] == "1" and props[P.WATERMARK] == old[P.BARRIER]
    assert props[P.WATERMARK_SNAPSHOT] == str(new_head)
    # every snapshot of the new generation is this attempt's, tagged; the first deletes the old rows
    chain = main_chain(cc, sink)
    ids = [s.snapshot_id for s in chain]
    staged = chain[ids.index(old_head) + 1:]
    assert {s.summary.additional_properties[P.ATTEMPT] for s in staged} == {epoch[P.ATTEMPT]}
    assert {s.summary.additional_properties[P.REGENERATE] for s in staged} == {"definition"}
    assert rows_at(cc, sink, staged[0].snapshot_id) == []
    assert P.PREVIOUS_BRANCH not in cc.catalog.load_table(hist).metadata.refs

    # hist has not run over the new generation: the cut of {word_counts, hist} is the old generation of both
    old_cut = {f"{ns}.words": int(json.loads(old[P.SOURCES])[f"{ns}.words"]), sink: old_head,
                                    hist: old_hist_head}
    assert spark_cut(spark, hist) == old_cut
    assert {t: c.snapshot_id for t, c in cc.resolve([sink, hist]).tables.items()} == {sink: old_head, hist: old_hist_head}
    assert [row.error for row in cc.status([sink, hist])] == [None, None]
    assert spark_rows(spark, sink) == old_rows and spark_rows(spark, hist) == old_hist_rows
    assert {r[0]: r[1] for r in sql(spark, f"SELECT c.cnt, h.words FROM lake_consistent.{sink} c JOIN "
                                           f"lake_consistent.{hist} h ON c.cnt = h.cnt")} == {
        n: old_hist_rows[n] for n in old_rows.values()}

    # hist's job regenerates over the switched source (upstream), then both are new
    as_job(spark, "hist")
    capfd.readouterr()
    sql(spark, HISTOGRAM.format(ns=ns))
    assert any(f"hist: {hist} source {sink} switched generations: new generation at barrier " in line
               for line in plugin_lines(capfd))
    rebuilt = epochs(cc, hist)[-1]
    assert rebuilt.get(P.REGENERATE) == "upstream" and json.loads(rebuilt[P.SOURCES])[sink] == new_head
    new_hist_rows = {r["cnt"]: r["words"] for r in rows_at(cc, hist, int(rebuilt["id"]))}
    assert new_hist_rows == dict(Counter(new_rows.values()))
    assert properties(cc, hist)[P.REVISION] == "1"
    assert cc.catalog.load_table(hist).metadata.snapshot_by_name(P.PREVIOUS_BRANCH).snapshot_id == old_hist_head
    cut = spark_cut(spark, hist)
    assert cut[sink] == new_head and cut[hist] == int(rebuilt["id"])
    assert spark_rows(spark, sink) == new_rows and spark_rows(spark, hist) == new_hist_rows
    # and the edited statement run again is done
    before = metadata_location(cc, sink)
    as_job(spark, "wc")
    sql(spark, edited)
    assert metadata_location(cc, sink) == before


def test_rebuild_true_regenerates_whatever_the_definition(env: Any, ns: str, capfd: Stderr) -> None:
    cc, spark, _ = env
    sink = f"{ns}.word_counts"
    ingest(cc, f"{ns}.words", "a")
    as_job(spark, "wc")
    sql(spark, COUNT.format(ns=ns))
    first = epochs(cc, sink)[-1]
    sql(spark, "SET spark.sql.consistent.rebuild=true")
    capfd.readouterr()
    try:
        sql(spark, COUNT.format(ns=ns))
    finally:
        sql(spark, "RESET spark.sql.consistent.rebuild")
    assert any("rebuild requested: new generation at barrier" in line for line in plugin_lines(capfd))
    again = epochs(cc, sink)
    assert again[-1]["id"] != first["id"] and again[-1][P.DEFINITION] == first[P.DEFINITION]
    assert again[-1][P.REGENERATE] == "rebuild" and again[-1][P.BARRIER] == first[P.BARRIER]
    assert properties(cc, sink)[P.REVISION] == "1"
    assert cc.catalog.load_table(sink).metadata.snapshot_by_name(P.PREVIOUS_BRANCH).snapshot_id == int(first["id"])


def test_a_column_added_to_the_sink_and_the_statement_is_filled(env: Any, ns: str, capfd: Stderr) -> None:
    cc, spark, _ = env
    sink = f"{ns}.word_counts"
    ingest(cc, f"{ns}.words", "a", "bb", "a")
    as_job(spark, "wc")
    sql(spark, COUNT.format(ns=ns))
    with cc.catalog.load_table(sink).update_schema() as update:
        update.add_column("len", LongType())
    capfd.readouterr()
    sql(spark, f"INSERT OVERWRITE lake_consistent.{sink} SELECT word, count(*) AS cnt, CAST(length(word) AS BIGINT) AS len "
               f"FROM lake_consistent.{ns}.words GROUP BY word")
    assert any("definition changed (sql " in line and "new generation at barrier" in line for line in plugin_lines(capfd))
    epoch = epochs(cc, sink)[-1]
    got = {r["word"]: (r["cnt"], r["len"]) for r in rows_at(cc, sink, int(epoch["id"]))}
    assert got == {w: (n, len(w)) for w, n in words_at(cc, ns, epoch).items()}


def test_a_schema_change_alone_regenerates(env: Any, ns: str, capfd: Stderr) -> None:
    cc, spark, _ = env
    sink = f"{ns}.word_counts"
    ingest(cc, f"{ns}.words", "a")
    sql(spark, "SET spark.sql.consistent.version=7")  # a declared version: the statement's text does not count
    as_job(spark, "wc")
    sql(spark, COUNT.format(ns=ns))
    assert epochs(cc, sink)[-1][P.DEFINITION].startswith("version:")
    with cc.catalog.load_table(sink).update_schema() as update:
        update.add_column("note", StringType())
    capfd.readouterr()
    sql(spark, f"INSERT OVERWRITE lake_consistent.{sink} SELECT word, count(*) AS cnt, 'x' AS note "
               f"FROM lake_consistent.{ns}.words GROUP BY word")
    assert any("schema changed (schema 0 -> 1): new generation at barrier" in line for line in plugin_lines(capfd))
    assert [r["note"] for r in cc.catalog.load_table(sink).scan().to_arrow().to_pylist()] == ["x"]


def test_a_dataframe_write_is_fingerprinted_by_its_plan(env: Any, ns: str) -> None:
    cc, spark, _ = env
    sink = f"{ns}.word_counts"
    ingest(cc, f"{ns}.words", "a", "b", "a")
    as_job(spark, "wc")

    def frame(column: str = "word") -> Any:
        return spark.table(f"lake_consistent.{ns}.words").groupBy(column).count().withColumnRenamed("count", "cnt")

    frame().writeTo(f"lake_consistent.{sink}").overwritePartitions()
    definition = epochs(cc, sink)[-1][P.DEFINITION]
    assert definition.startswith("plan:")
    before = metadata_location(cc, sink)
    frame().writeTo(f"lake_consistent.{sink}").overwritePartitions()  # a new DataFrame, the same query: done
    assert metadata_location(cc, sink) == before
    from pyspark.sql import functions as F

    spark.table(f"lake_consistent.{ns}.words").where(F.col("word") != "b").groupBy("word").count() \
        .withColumnRenamed("count", "cnt").writeTo(f"lake_consistent.{sink}").overwritePartitions()
    epoch = epochs(cc, sink)[-1]
    assert epoch[P.DEFINITION] != definition and properties(cc, sink)[P.REVISION] == "1"
    assert {r["word"]: r["cnt"] for r in rows_at(cc, sink, int(epoch["id"]))} == {"a": 2}


def test_an_epoch_that_read_an_empty_source_before_its_first_data_warns(env: Any, ns: str, capfd: Stderr) -> None:
    cc, spark, _ = env
    cc.catalog.create_table(f"{ns}.orders", schema=WORDS)
    cc.catalog.create_table(f"{ns}.joined", schema=COUNTS)
    first = ingest(cc, f"{ns}.words", "a")
    cc.advance_watermark(f"{ns}.orders", first)  # orders complete (empty) at the first barrier ...
    time.sleep(0.01)
    ingest(cc, f"{ns}.orders", "a")  # ... and its first data comes later, while words lags behind
    as_job(spark, "joiner")
    capfd.readouterr()
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.joined SELECT w.word, count(o.word) AS cnt FROM "
               f"lake_consistent.{ns}.words w LEFT JOIN lake_consistent.{ns}.orders o ON w.word = o.word GROUP BY w.word")
    lines = plugin_lines(capfd)
    warnings = [line for line in lines if line.startswith("[lake_consistent] warning: joiner: ")]
    assert len(warnings) == 1, lines
    assert f"read {ns}.orders empty at barrier" in warnings[0]
    assert f"consistent-catalog advance-watermark {ns}.words now" in warnings[0]



def test_a_lagging_derived_source_is_named_with_the_job_that_writes_it(env: Any, ns: str, capfd: Stderr) -> None:
    """§6.10 from the JVM: a derived source behind the empty one is brought forward by an epoch of its job (its
    watermark cannot be advanced by hand): the warning names that job, not ``advance-watermark``."""
    cc, spark, _ = env
    cc.catalog.create_table(f"{ns}.orders", schema=WORDS)
    cc.catalog.create_table(f"{ns}.joined", schema=COUNTS)
    ingest(cc, f"{ns}.words", "a")
    as_job(spark, "counter")
    sql(spark, COUNT.format(ns=ns))
    time.sleep(0.01)
    ingest(cc, f"{ns}.orders", "a")  # the first data of orders comes after word_counts' watermark
    as_job(spark, "joiner")
    capfd.readouterr()
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.joined SELECT c.word, count(o.word) AS cnt FROM "
               f"lake_consistent.{ns}.word_counts c LEFT JOIN lake_consistent.{ns}.orders o ON c.word = o.word "
               f"GROUP BY c.word")
    warnings = [line for line in plugin_lines(capfd) if line.startswith("[lake_consistent] warning: joiner: ")]
    assert len(warnings) == 1, warnings
    assert f"read {ns}.orders empty at barrier" in warnings[0]
    assert f"(an epoch of job counter, which writes {ns}.word_counts)" in warnings[0], warnings[0]
    assert "advance-watermark" not in warnings[0]

# --- streaming -----------------------------------------------------------------------------------------------------
def streaming_job(spark: Any, frame: Any, table: str, job: str, checkpoint: Path, **options: str) -> Any:
    writer = (frame.writeStream.outputMode("complete").option("checkpointLocation", str(checkpoint))
              .option("consistent.job", job).trigger(availableNow=True))
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.toTable(f"lake_consistent.{table}")


def test_streaming_foreign_job_refused_and_an_edited_query_regenerates(env: Any, ns: str) -> None:
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F

    cc, spark, root = env
    sink = f"{ns}.word_counts"
    ingest(cc, f"{ns}.words", "a", "b", "a")

    def counting(where: str | None = None) -> Any:
        stream = spark.readStream.table(f"lake_consistent.{ns}.words")
        if where:
            stream = stream.where(where)
        return stream.groupBy("word").count().withColumnRenamed("count", "cnt")

    query = streaming_job(spark, counting(), sink, "wc", root / ns / "chk-1")
    query.awaitTermination(120)
    first = epochs(cc, sink)[-1]
    assert first[P.DEFINITION].startswith("plan:")
    deadline = time.monotonic() + 30  # unregistered when the query ended: the owner stays
    while P.LEASE_HOLDER in properties(cc, sink) and time.monotonic() < deadline:
        time.sleep(0.2)
    props = properties(cc, sink)
    assert props[P.JOB] == "wc" and P.LEASE_HOLDER not in props
    before = metadata_location(cc, sink)

    foreign = streaming_job(spark, counting(), sink, "wc-typo", root / ns / "chk-typo")
    with pytest.raises(StreamingQueryException, match=r"owned by job 'wc'.*consistent\.job=wc"):
        foreign.awaitTermination(120)
    assert metadata_location(cc, sink) == before and properties(cc, sink) == props

    # the same query restarted from its checkpoint with new input: an ordinary epoch, no revision
    ingest(cc, f"{ns}.words", "c")
    query = streaming_job(spark, counting(), sink, "wc", root / ns / "chk-1")
    query.awaitTermination(120)
    again = epochs(cc, sink)
    assert P.REVISION not in properties(cc, sink) and again[-1][P.DEFINITION] == first[P.DEFINITION]
    assert len(again) >= 2

    # a new version whose first micro-batch fails: the sink keeps serving its rows, nothing committed
    served, before = again[-1], properties(cc, sink)
    served_rows = {r["word"]: r["cnt"] for r in rows_at(cc, sink, int(served["id"]))}
    failing = counting().withColumn("cnt", F.expr("IF(word = 'b', CAST(raise_error('bad row') AS BIGINT), cnt)"))
    query = streaming_job(spark, failing, sink, "wc", root / ns / "chk-fail", **{"consistent.version": "2"})
    with pytest.raises(StreamingQueryException, match="bad row"):
        query.awaitTermination(120)
    after = properties(cc, sink)  # its registration took the lease again; main and the watermark are as they were
    assert main_chain(cc, sink)[-1].snapshot_id == int(served["id"]) and P.PREVIOUS_BRANCH not in cc.catalog.load_table(
        sink).metadata.refs
    assert all(after.get(k) == before.get(k) for k in (P.WATERMARK, P.WATERMARK_SNAPSHOT, P.REVISION, P.PREVIOUS)), after
    assert {r[0]: r[1] for r in sql(spark, f"SELECT * FROM lake_consistent.{sink}")} == served_rows

    # an edited query (a new checkpoint): a new generation, switched in by its first micro-batch's publish
    query = streaming_job(spark, counting("word <> 'a'"), sink, "wc", root / ns / "chk-2")
    query.awaitTermination(120)
    epoch = epochs(cc, sink)[-1]
    props = properties(cc, sink)
    assert props[P.REVISION] == "1" and epoch[P.REGENERATE] == "definition"
    assert cc.catalog.load_table(sink).metadata.snapshot_by_name(P.PREVIOUS_BRANCH).snapshot_id == int(served["id"])
    assert epoch[P.DEFINITION] != first[P.DEFINITION]
    expected = {w: n for w, n in words_at(cc, ns, epoch).items() if w != "a"}
    assert {r["word"]: r["cnt"] for r in rows_at(cc, sink, int(epoch["id"]))} == expected
    assert {r[0]: r[1] for r in sql(spark, f"SELECT * FROM lake_consistent.{sink}")} == expected
