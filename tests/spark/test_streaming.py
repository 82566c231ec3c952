"""Structured Streaming (issue #14): streaming roots, streaming epoch jobs, the streaming FLIP demo, kill -9.

In-process tests share one local[2] SparkSession; Spark's file source reads JSON files the tests
write. What landed is read back with plain pyiceberg (snapshot summaries, scans at snapshot ids).
The kill tests run ``tests/harness/streaming_worker.py`` as separate Spark applications and SIGKILL
them (JVM included) at chosen points and at random; ``streaming_worker.check_lake`` is the
independent reader (row counts per Spark batch id from Spark's own checkpoint logs, no row twice,
none lost, derived tables exactly their recorded inputs, each barrier published once).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.exceptions import OwnershipError
from consistent_catalog.util.time import now_ms
from tests.harness import streaming_worker as sw
from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA, spark_on_sqlite

pytestmark = pytest.mark.spark

VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-streaming")
    for catalog, spark in spark_on_sqlite(root, "test-streaming"):
        yield root, catalog, spark


@pytest.fixture
def ns(env, request):
    """A fresh namespace, input directory and checkpoint directory per test (one session serves the module)."""
    root, catalog, spark = env
    name = "st_" + request.node.name.split("[")[0].replace("test_", "")[:40]
    catalog.create_namespace(name)
    base = root / name
    (base / "in").mkdir(parents=True)
    return name, base


def write_json(directory: Path, name: str, rows: list[dict]) -> None:
    temporary = directory / f".{name}.tmp"
    temporary.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    temporary.rename(directory / name)


def main_chain(table):
    out, snapshot = [], table.metadata.snapshot_by_name("main")
    while snapshot is not None:
        out.append(snapshot)
        snapshot = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return out[::-1]


def summaries(catalog, table) -> list[dict]:
    return [dict(s.summary.additional_properties) | {"id": s.snapshot_id} for s in main_chain(catalog.load_table(table))]


def rows(catalog, table, snapshot_id=None) -> list[dict]:
    loaded = catalog.load_table(table)
    if snapshot_id is None:
        head = loaded.metadata.snapshot_by_name("main")
        if head is None:
            return []
        snapshot_id = head.snapshot_id
    return loaded.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


def wait_for(condition, timeout=120.0, every=0.3, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# --- streaming roots ------------------------------------------------------------------------------------


def test_each_micro_batch_lands_once_as_one_tagged_snapshot(env, ns):
    from consistent_catalog.spark.streaming import start_root_stream

    root, catalog, spark = env
    name, base = ns
    table = f"{name}.words"
    catalog.create_table(table, schema=WORDS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    write_json(base / "in", "a.json", [{"word": "a"}, {"word": "b"}])
    before = now_ms()
    query = start_root_stream(spark.readStream.schema("word string").json(str(base / "in")), cc, table,
                              checkpoint_location=str(base / "chk"), trigger=0.2, idle_after=None)
    try:
        query.processAllAvailable()
        write_json(base / "in", "b.json", [{"word": "c"}])
        query.processAllAvailable()
        # a replay of batch 0 (what Spark does after a crash before its commit log): skipped
        replay = spark.createDataFrame([("a",), ("b",)], "word string")
        query.writer(replay, 0)
    finally:
        query.stop()
    tagged = [s for s in summaries(catalog, table) if P.INGEST_KEY in s]
    assert [s[P.INGEST_KEY] for s in tagged] == [f"{query.id}/0", f"{query.id}/1"]
    assert [int(s["added-records"]) for s in tagged] == [2, 1]
    barriers = [int(s[P.BARRIER]) for s in tagged]
    assert before <= barriers[0] < barriers[1] <= now_ms()  # processing time, increasing
    assert query.batches[-1].skipped and query.batches[-1].snapshot_id == tagged[0]["id"]
    assert Counter(r["word"] for r in rows(catalog, table)) == {"a": 1, "b": 1, "c": 1}


def test_event_time_barriers_follow_the_watermark_and_late_rows_never_reopen_a_barrier(env, ns):
    from consistent_catalog.spark.streaming import start_root_stream

    root, catalog, spark = env
    name, base = ns
    table = f"{name}.words"
    catalog.create_table(table, schema=WORDS_SCHEMA)  # the event time is not a column of the table
    cc = ConsistentCatalog(catalog)
    t0 = (now_ms() - 3600_000) // 1000 * 1000
    stream = spark.readStream.schema("word string, ts timestamp").json(str(base / "in"))
    query = start_root_stream(stream, cc, table, checkpoint_location=str(base / "chk"), trigger=0.2,
                              event_time_column="ts", watermark_delay="2 seconds", idle_after=None)
    try:
        write_json(base / "in", "1.json", [{"word": "a", "ts": iso(t0 + 4000)}, {"word": "b", "ts": iso(t0 + 10_000)}])
        query.processAllAvailable()
        first = summaries(catalog, table)[-1]
        assert int(first[P.BARRIER]) == t0 + 8000  # max event time - delay
        frozen = rows(catalog, table, first["id"])

        write_json(base / "in", "2.json", [{"word": "late", "ts": iso(t0 + 1000)}])  # behind the watermark
        query.processAllAvailable()
        late = summaries(catalog, table)[-1]
        assert int(late[P.BARRIER]) == t0 + 8001  # lands one above the completed barrier (protocol §3.2)
        # Spark's own watermark for this batch is the barrier the first batch got
        assert query.lastProgress["eventTime"]["watermark"] == iso(t0 + 8000)

        write_json(base / "in", "3.json", [{"word": "c", "ts": iso(t0 + 20_000)}])
        query.processAllAvailable()
        assert int(summaries(catalog, table)[-1][P.BARRIER]) == t0 + 18_000
    finally:
        query.stop()
    # what barrier t0+8000 holds never changed: snap(words, t0+8000) is still the first batch
    state = cc.store.state(table)
    assert state.branch().snap_at(t0 + 8000)[0] == first["id"]
    assert rows(catalog, table, state.branch().snap_at(t0 + 8000)[0]) == frozen
    assert cc.resolve([table], as_of=t0 + 8000).tables[table].snapshot_id == first["id"]
    assert Counter(r["word"] for r in rows(catalog, table)) == {"a": 1, "b": 1, "late": 1, "c": 1}


def test_an_idle_stream_keeps_the_dag_moving(env, ns):
    from consistent_catalog.spark.job import SparkEpochJob
    from consistent_catalog.spark.streaming import start_root_stream, start_streaming_job

    root, catalog, spark = env
    name, base = ns
    words, counts = f"{name}.words", f"{name}.word_counts"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    write_json(base / "in", "1.json", [{"word": "a"}])
    roots = start_root_stream(spark.readStream.schema("word string").json(str(base / "in")), cc, words,
                              checkpoint_location=str(base / "chk-root"), trigger=0.3, idle_after="1s")
    job = SparkEpochJob(cc, spark, f"{name}-count", sources=[words], sinks=[counts],
                        transform="SELECT word, count(*) AS cnt FROM words GROUP BY word", mode="overwrite")
    jobs = start_streaming_job(job, checkpoint_location=str(base / "chk-job"), trigger=0.5)
    try:
        landed = wait_for(lambda: roots.batches and roots.batches[0].barrier, what="the first batch")
        # no new rows: the root's watermark follows the clock, the job publishes watermark-only epochs
        moved = wait_for(lambda: (cc.store.state(counts).watermark() or 0) > landed + 1000 and
                         cc.store.state(counts).watermark(), timeout=60, what="the sink's watermark to move")
        assert roots.writer.idle_advances and cc.store.state(words).head() == roots.batches[0].snapshot_id
        assert any(a == "watermark" for r in jobs.results for a in r.actions.values())
        assert now_ms() - cc.resolve([words, counts]).barrier < 15_000  # the cut keeps up with the clock
        # data arriving after the idle advance lands above it (late), and flows downstream
        write_json(base / "in", "2.json", [{"word": "a"}, {"word": "b"}])
        wait_for(lambda: len(roots.batches) == 2, what="the second batch")
        assert roots.batches[1].barrier > moved
        wait_for(lambda: {r["word"]: r["cnt"] for r in cc.read([words, counts]).to_arrow(counts).to_pylist()}
                 == {"a": 2, "b": 1}, what="the counts to include the late batch")
    finally:
        jobs.stop()
        roots.stop()


# --- the native sink: toTable("lake_consistent.ns.root"), no Python in the path ------------------------


def native(stream, base, table, trigger="0.2 seconds", **options):
    """``stream`` written to ``table`` through the plugin's streaming sink, options as ``writeStream.option``."""
    writer = stream.writeStream.option("checkpointLocation", str(base / "chk")).trigger(processingTime=trigger)
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.toTable(f"lake_consistent.{table}")


def test_native_sink_lands_each_micro_batch_once_as_one_keyed_ingest(env, ns):
    root, catalog, spark = env
    name, base = ns
    table = f"{name}.words"
    catalog.create_table(table, schema=WORDS_SCHEMA)
    write_json(base / "in", "a.json", [{"word": "a"}, {"word": "b"}])
    before = now_ms()
    query = native(spark.readStream.schema("word string").json(str(base / "in")), base, table)
    try:
        query.processAllAvailable()
        write_json(base / "in", "b.json", [{"word": "c"}])
        query.processAllAvailable()
    finally:
        query.stop()
    checkpoint_id = json.loads((base / "chk" / "metadata").read_text())["id"]
    tagged = [s for s in summaries(catalog, table) if P.INGEST_KEY in s]
    assert [s[P.INGEST_KEY] for s in tagged] == [f"{checkpoint_id}/0", f"{checkpoint_id}/1"]  # the Python writer's keys
    assert [int(s["added-records"]) for s in tagged] == [2, 1]
    barriers = [int(s[P.BARRIER]) for s in tagged]
    assert before <= barriers[0] < barriers[1] <= now_ms()  # processing time, increasing
    assert Counter(r["word"] for r in rows(catalog, table)) == {"a": 1, "b": 1, "c": 1}
    assert ConsistentCatalog(catalog).resolve([table]).tables[table].snapshot_id == tagged[-1]["id"]

    # a restart of the same checkpoint goes on with the next batch id, nothing replayed twice
    write_json(base / "in", "c.json", [{"word": "d"}])
    again = native(spark.readStream.schema("word string").json(str(base / "in")), base, table)
    try:
        again.processAllAvailable()
    finally:
        again.stop()
    assert again.id == query.id
    assert [s[P.INGEST_KEY] for s in summaries(catalog, table) if P.INGEST_KEY in s][-1] == f"{checkpoint_id}/2"
    assert Counter(r["word"] for r in rows(catalog, table)) == {"a": 1, "b": 1, "c": 1, "d": 1}


def test_native_sink_event_time_barriers_and_late_rows_never_reopen_a_barrier(env, ns):
    import pyarrow as pa

    root, catalog, spark = env
    name, base = ns
    table = f"{name}.events"
    catalog.create_table(table, schema=pa.schema([pa.field("word", pa.string()), pa.field("ts", pa.timestamp("us"))]))
    cc = ConsistentCatalog(catalog)
    t0 = (now_ms() - 3600_000) // 1000 * 1000
    stream = spark.readStream.schema("word string, ts timestamp").json(str(base / "in"))
    write_json(base / "in", "1.json", [{"word": "a", "ts": iso(t0 + 4000)}, {"word": "b", "ts": iso(t0 + 10_000)}])
    query = native(stream, base, table, **{"consistent.eventTimeColumn": "ts", "consistent.eventTimeDelay": "2s"})
    try:
        query.processAllAvailable()
        first = summaries(catalog, table)[-1]
        assert int(first[P.BARRIER]) == t0 + 8000  # max event time - delay
        frozen = rows(catalog, table, first["id"])
        write_json(base / "in", "2.json", [{"word": "late", "ts": iso(t0 + 1000)}])  # behind the watermark
        query.processAllAvailable()
        assert int(summaries(catalog, table)[-1][P.BARRIER]) == t0 + 8001  # one above the completed barrier (§3.2)
        write_json(base / "in", "3.json", [{"word": "c", "ts": iso(t0 + 20_000)}])
        query.processAllAvailable()
        assert int(summaries(catalog, table)[-1][P.BARRIER]) == t0 + 18_000
    finally:
        query.stop()
    assert cc.resolve([table], as_of=t0 + 8000).tables[table].snapshot_id == first["id"]
    assert rows(catalog, table, first["id"]) == frozen
    assert Counter(r["word"] for r in rows(catalog, table)) == {"a": 1, "b": 1, "late": 1, "c": 1}


def test_native_sink_idle_query_advances_the_root_until_it_stops(env, ns):
    root, catalog, spark = env
    name, base = ns
    table = f"{name}.words"
    catalog.create_table(table, schema=WORDS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    write_json(base / "in", "1.json", [{"word": "a"}])
    query = native(spark.readStream.schema("word string").json(str(base / "in")), base, table, trigger="0.3 seconds",
                   **{"consistent.idleAfter": "1s"})
    try:
        query.processAllAvailable()
        landed = int(summaries(catalog, table)[-1][P.BARRIER])
        head = cc.store.state(table).head()
        moved = wait_for(lambda: (cc.store.state(table).watermark() or 0) > landed + 1000
                         and cc.store.state(table).watermark(), timeout=60, what="the idle root's watermark to move")
        assert moved <= now_ms() and cc.store.state(table).head() == head  # no data written, only the watermark
        write_json(base / "in", "2.json", [{"word": "b"}])  # data after the advance lands above it
        query.processAllAvailable()
        assert int(summaries(catalog, table)[-1][P.BARRIER]) > moved
    finally:
        query.stop()
    stopped = cc.store.state(table).watermark()
    time.sleep(2.5)  # longer than the idle allowance: a stopped query no longer moves its root
    assert cc.store.state(table).watermark() == stopped


def test_native_sink_refuses_with_the_way_out(env, ns):
    root, catalog, spark = env
    name, base = ns
    words, counts = f"{name}.words", f"{name}.word_counts"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    cc.register_job(f"{name}-count", [words], [counts])
    write_json(base / "in", "1.json", [{"word": "a"}])
    stream = spark.readStream.schema("word string").json(str(base / "in"))
    attempts = iter(range(100))

    def failure(frame, mode="append", table=words, **options):
        writer = frame.writeStream.outputMode(mode).option("checkpointLocation", str(base / f"chk{next(attempts)}"))
        for key, value in options.items():
            writer = writer.option(key, value)
        query = writer.toTable(f"lake_consistent.{table}")
        try:
            with pytest.raises(Exception) as raised:
                query.processAllAvailable()
        finally:
            query.stop()
        return " ".join(str(raised.value).split())

    message = failure(stream.selectExpr("word", "1L AS cnt"), table=counts)
    assert "CONSISTENT_WRITE.REFUSED" in message and f"{counts} is derived (owned by job '{name}-count'" in message
    assert f"set the write option consistent.job={name}-count" in message
    message = failure(stream.groupBy("word").count().selectExpr("word"), mode="complete")
    assert "CONSISTENT_WRITE.REFUSED" in message and "complete output mode" in message and "append mode" in message
    import pyarrow as pa

    # issue 42: a stream of a table of lake_consistent into a new table with no job is refused, both ways out named
    # (at its first micro-batch, so its source has a barrier: before one a query runs no batch, issue 47)
    source = f"{name}.source"
    catalog.create_table(source, schema=WORDS_SCHEMA)
    cc.ingest(source, pa.table({"word": ["x", "y"]}))
    catalog.create_table(f"{name}.copied", schema=WORDS_SCHEMA)
    message = failure(spark.readStream.table(f"lake_consistent.{source}"), table=f"{name}.copied")
    assert f"[CONSISTENT_WRITE.REFUSED] lake_consistent.{name}.copied is a new, empty table" in message, message
    assert f"reads lake_consistent.{source} with no job" in message and "consistent.job=<job>" in message
    assert "consistent.ingestFromLake=true" in message
    assert rows(catalog, f"{name}.copied") == [] and not summaries(catalog, f"{name}.copied")  # refused: nothing landed
    # said on purpose, the same kind of query is an ingest of the rows it reads
    copy = (spark.readStream.table(f"lake_consistent.{source}").writeStream.option("checkpointLocation", str(base / "chk-copy"))
            .option("consistent.ingestFromLake", "true").trigger(availableNow=True).toTable(f"lake_consistent.{name}.copied"))
    copy.awaitTermination(120)
    assert copy.exception() is None
    assert Counter(r["word"] for r in rows(catalog, f"{name}.copied")) == {"x": 1, "y": 1}
    assert P.INGEST_KEY in summaries(catalog, f"{name}.copied")[-1]
    assert P.SOURCES not in catalog.load_table(f"{name}.copied").metadata.properties
    # item 7: a misspelt write option is named with the nearest one, a misspelt read option when the query is defined
    message = failure(stream, **{"consistent.jb": "count"})
    assert "[CONSISTENT_WRITE.INVALID_OPTION] option consistent.jb" in message and "did you mean consistent.job?" in message
    with pytest.raises(Exception) as misspelt:
        spark.readStream.option("consistent.waitFr", "1s").table(f"lake_consistent.{words}")
    assert str(misspelt.value).startswith("[CONSISTENT_READ.INVALID_OPTION] option consistent.waitFr"), misspelt.value
    assert "did you mean consistent.waitFor?" in str(misspelt.value)
    message = failure(stream, **{"consistent.eventTimeDelay": "2s"})
    assert "consistent.eventTimeDelay=2s needs consistent.eventTimeColumn" in message
    with pytest.raises(Exception, match="consistent.waitFor=5 is not a duration with a unit"):
        spark.readStream.option("consistent.waitFor", "5").table(f"lake_consistent.{words}").writeStream \
            .option("checkpointLocation", str(base / "chk-wait")).format("noop").start().processAllAvailable()
    message = failure(stream, **{"consistent.idleAfter": "5"})
    assert "consistent.idleAfter=5 is not a duration with a unit" in message
    message = failure(stream, **{"consistent.eventTimeColumn": "nope"})
    assert "has no such column" in message
    assert summaries(catalog, words) == []  # nothing landed


# --- native streaming epoch jobs: readStream.table(...) ... toTable(derived), option consistent.job ----------


def native_job(frame, base, table, job, mode="append", trigger="0.3 seconds", checkpoint="chk-job", version=None):
    """``frame`` written to ``table`` as the epochs of ``job`` (``trigger`` None: availableNow; ``version``: the
    declared ``consistent.version``)."""
    writer = (frame.writeStream.outputMode(mode).option("checkpointLocation", str(base / checkpoint))
              .option("consistent.job", job))
    if version is not None:
        writer = writer.option("consistent.version", version)
    writer = writer.trigger(availableNow=True) if trigger is None else writer.trigger(processingTime=trigger)
    return writer.toTable(f"lake_consistent.{table}")


def published_epochs(catalog, table) -> list[dict]:
    """main's snapshots that an epoch published (barrier and recorded inputs), oldest first, from pyiceberg."""
    return [s for s in summaries(catalog, table) if P.SOURCES in s and P.BARRIER in s]


def test_native_streaming_jobs_commit_each_micro_batch_as_the_epoch_of_its_sources_barrier(env, ns):
    root, catalog, spark = env
    name, base = ns
    words, counts, copy = f"{name}.words", f"{name}.word_counts", f"{name}.words_copy"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    catalog.create_table(copy, schema=WORDS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    write_json(base / "in", "1.json", [{"word": w} for w in "a b a".split()])
    roots = native(spark.readStream.schema("word string").json(str(base / "in")), base, words, trigger="0.3 seconds")
    waiting = spark.readStream.option("consistent.waitFor", "200ms")  # a trigger without a new barrier waits for one
    counting = native_job(waiting.table(f"lake_consistent.{words}").groupBy("word").count()
                          .withColumnRenamed("count", "cnt"), base, counts, f"{name}-count", mode="complete")
    copying = native_job(spark.readStream.table(f"lake_consistent.{words}"), base, copy, f"{name}-copy",
                         checkpoint="chk-copy")
    try:
        wait_for(lambda: cc.store.state(counts).watermark() and cc.store.state(copy).watermark(), what="first epochs")
        properties = catalog.load_table(counts).metadata.properties
        assert properties[P.JOB] == f"{name}-count" and properties[P.LEASE_HOLDER]  # registered while it runs
        write_json(base / "in", "2.json", [{"word": w} for w in "b c".split()])
        head = wait_for(lambda: len(summaries(catalog, words)) == 2 and summaries(catalog, words)[-1]["id"], what="batch 2")
        wait_for(lambda: json.loads(published_epochs(catalog, counts)[-1][P.SOURCES])[words] == head
                 and json.loads(published_epochs(catalog, copy)[-1][P.SOURCES])[words] == head, what="the epochs of batch 2")
    finally:
        for query in (counting, copying, roots):
            query.stop()
    for table in (counts, copy):
        epochs = published_epochs(catalog, table)
        assert len({e[P.BARRIER] for e in epochs}) == len(epochs) >= 2  # one epoch per barrier
        for epoch in epochs:  # each epoch is exactly its recorded input (recounted with pyiceberg)
            read = json.loads(epoch[P.SOURCES])[words]
            source = Counter(r["word"] for r in rows(catalog, words, read))
            # the input is snap(words, barrier): the newest snapshot of words at or below the epoch's barrier
            assert cc.store.state(words).branch().snap_at(int(epoch[P.BARRIER]))[0] == read
            if table == counts:
                assert {r["word"]: r["cnt"] for r in rows(catalog, counts, epoch["id"])} == dict(source)
            else:
                assert Counter(r["word"] for r in rows(catalog, copy, epoch["id"])) == source  # appends, none twice
    for table in (counts, copy):  # unregistered when the query stopped (Spark's listener bus tells it afterwards)
        wait_for(lambda t=table: P.LEASE_HOLDER not in catalog.load_table(t).metadata.properties, timeout=30,
                 what=f"{table} to be unregistered")
    final = cc.read([words, counts, copy])
    assert {r["word"]: r["cnt"] for r in final.to_arrow(counts).to_pylist()} == {"a": 2, "b": 2, "c": 1}
    assert Counter(r["word"] for r in final.to_arrow(copy).to_pylist()) == Counter("a b a b c".split())

    # the append job from another checkpoint would append from its own start: refused, the sink unchanged
    from pyspark.errors import StreamingQueryException

    write_json(base / "in", "3.json", [{"word": "d"}])
    landing = native(spark.readStream.schema("word string").json(str(base / "in")), base, words, trigger="0.3 seconds")
    landing.processAllAvailable()
    landing.stop()
    before = summaries(catalog, copy)[-1]["id"]
    elsewhere = native_job(spark.readStream.table(f"lake_consistent.{words}"), base, copy, f"{name}-copy",
                           checkpoint="chk-copy-2", trigger=None)
    with pytest.raises(StreamingQueryException, match=r"this checkpoint does not continue the sink's epochs"):
        elsewhere.awaitTermination(120)
    assert summaries(catalog, copy)[-1]["id"] == before

    # a new version (issue 43): a new generation, whose first micro-batch must hold the whole output — from its old
    # checkpoint (which continues from its last offsets) refused before anything is committed, the rows still served
    restarted = native_job(spark.readStream.table(f"lake_consistent.{words}"), base, copy, f"{name}-copy",
                           checkpoint="chk-copy", trigger=None, version="2")
    with pytest.raises(StreamingQueryException, match=r"new generation is computed from each source whole.*new checkpoint"):
        restarted.awaitTermination(120)
    table = catalog.load_table(copy)
    assert table.metadata.snapshot_by_name("main").snapshot_id == int(before)
    assert P.REVISION not in table.metadata.properties and "consistent-previous" not in table.metadata.refs
    # from a new checkpoint: the batch reads words whole, its one commit replaces every row, the publish switches
    fresh = native_job(spark.readStream.table(f"lake_consistent.{words}"), base, copy, f"{name}-copy",
                       checkpoint="chk-copy-3", trigger=None, version="2")
    fresh.awaitTermination(120)
    table = catalog.load_table(copy)
    head = table.metadata.snapshot_by_name("main")
    summary = head.summary.additional_properties
    assert summary["consistent.regenerate"] == "definition" and head.parent_snapshot_id == int(before)
    assert table.metadata.properties[P.REVISION] == "1"
    assert table.metadata.refs["consistent-previous"].snapshot_id == int(before)
    read = json.loads(summary[P.SOURCES])[words]
    assert Counter(r["word"] for r in rows(catalog, copy, head.snapshot_id)) == Counter(
        r["word"] for r in rows(catalog, words, read)) == Counter("a b a b c d".split())


def batches(checkpoint: Path, log: str) -> list[int]:
    """The batch ids in a query's checkpoint log (``offsets`` or ``commits``), from Spark's own files."""
    folder = checkpoint / log
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


def land(spark, base, table):
    """The JSON files of ``base/in`` not landed yet, into the root ``table`` by the native sink, once (availableNow)."""
    (spark.readStream.schema("word string").json(str(base / "in")).writeStream
     .option("checkpointLocation", str(base / "chk")).trigger(availableNow=True)
     .toTable(f"lake_consistent.{table}").awaitTermination(120))


def test_a_native_job_started_before_its_source_has_a_barrier_runs_no_empty_batch(env, ns):
    root, catalog, spark = env
    name, base = ns
    words, copy = f"{name}.words", f"{name}.words_copy"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(copy, schema=WORDS_SCHEMA)
    query = native_job(spark.readStream.table(f"lake_consistent.{words}"), base, copy, f"{name}-copy",
                       trigger="0.2 seconds")
    try:
        wait_for(lambda: query.lastProgress, timeout=60, what="the first trigger")
        time.sleep(1.0)  # five more triggers
        assert batches(base / "chk-job", "offsets") == []  # triggers ran, none found an offset: no batch 0
        assert published_epochs(catalog, copy) == [] and rows(catalog, copy) == []
        write_json(base / "in", "1.json", [{"word": "a"}, {"word": "b"}])
        land(spark, base, words)
        head = summaries(catalog, words)[-1]
        epoch = wait_for(lambda: published_epochs(catalog, copy), what="the first epoch")[0]
    finally:
        query.stop()
    assert batches(base / "chk-job", "offsets")[0] == 0  # batch 0 is the first barrier's, with its rows
    assert epoch[P.BARRIER] == head[P.BARRIER] and json.loads(epoch[P.SOURCES]) == {words: head["id"]}
    assert Counter(r["word"] for r in rows(catalog, copy, epoch["id"])) == Counter("ab")
    # availableNow before any barrier: the run ends at once, with nothing
    catalog.create_table(f"{name}.empty", schema=WORDS_SCHEMA)
    catalog.create_table(f"{name}.empty_copy", schema=WORDS_SCHEMA)
    once = native_job(spark.readStream.table(f"lake_consistent.{name}.empty"), base, f"{name}.empty_copy",
                      f"{name}-empty", checkpoint="chk-empty", trigger=None)
    assert once.awaitTermination(120) is not False
    assert batches(base / "chk-empty", "offsets") == [] and published_epochs(catalog, f"{name}.empty_copy") == []


def test_a_restarted_available_now_native_job_ends_at_the_barrier_its_source_had_when_it_started(env, ns):
    root, catalog, spark = env
    name, base = ns
    words, copy = f"{name}.words", f"{name}.words_copy"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(copy, schema=WORDS_SCHEMA)
    checkpoint = base / "chk-job"

    def run_job():
        query = native_job(spark.readStream.table(f"lake_consistent.{words}"), base, copy, f"{name}-copy", trigger=None)
        assert query.awaitTermination(120) is not False
        return query

    for i, words_in in enumerate(["a b", "c d e"]):
        write_json(base / "in", f"{i}.json", [{"word": w} for w in words_in.split()])
        land(spark, base, words)
        run_job()
    assert batches(checkpoint, "commits") == [0, 1]
    # a crash after batch 1's epoch landed and before Spark logged its commit: batch 1 is pending
    for leftover in ("1", ".1.crc"):
        (checkpoint / "commits" / leftover).unlink(missing_ok=True)
    # the root moves on twice before the job runs again
    for i, words_in in enumerate(["f", "g h"], start=2):
        write_json(base / "in", f"{i}.json", [{"word": w} for w in words_in.split()])
        land(spark, base, words)
    run_job()
    # the pending batch replayed (its epoch is done), then the run went on to the root's barrier at its start
    assert batches(checkpoint, "commits") == [0, 1, 2]
    root_head = summaries(catalog, words)[-1]
    last = published_epochs(catalog, copy)[-1]
    assert last[P.BARRIER] == root_head[P.BARRIER] and json.loads(last[P.SOURCES]) == {words: root_head["id"]}
    landed = [s for s in summaries(catalog, words) if P.BARRIER in s]
    assert len(landed) == 4 and [e[P.BARRIER] for e in published_epochs(catalog, copy)] == [
        landed[0][P.BARRIER], landed[1][P.BARRIER], root_head[P.BARRIER]]
    # recounted with pyiceberg: the copy holds every row of the root, once
    assert Counter(r["word"] for r in rows(catalog, copy)) == Counter(r["word"] for r in rows(catalog, words)) \
        == Counter("a b c d e f g h".split())


def east_ahead_of_west(env, ns, *tables):
    """Roots ``east`` and ``west`` (plus empty ``tables``) in the test's namespace, fed at different barriers: east
    e1 at t0+100 and e2, e3 at t0+300, west w1 at t0+200; returns the catalog, a DataFrame maker and t0."""
    from consistent_catalog.spark.job import ingest_dataframe

    root, catalog, spark = env
    name, base = ns
    east, west = f"{name}.east", f"{name}.west"
    for table in (east, west, *tables):
        catalog.create_table(table, schema=WORDS_SCHEMA)
    cc = ConsistentCatalog(catalog)

    def frame(*words):
        return spark.createDataFrame([(w,) for w in words], "word string")

    t0 = now_ms() - 600_000
    ingest_dataframe(cc, frame("e1"), east, barrier=t0 + 100)
    ingest_dataframe(cc, frame("e2", "e3"), east, barrier=t0 + 300)  # east runs ahead of west
    ingest_dataframe(cc, frame("w1"), west, barrier=t0 + 200)
    return cc, frame, t0


def test_a_native_job_over_two_sources_never_mixes_their_barriers(env, ns):
    import pyarrow as pa

    from consistent_catalog.spark.job import ingest_dataframe

    root, catalog, spark = env
    name, base = ns
    east, west, both, joined = f"{name}.east", f"{name}.west", f"{name}.both", f"{name}.joined"
    cc, frame, t0 = east_ahead_of_west(env, ns, both)
    catalog.create_table(joined, schema=pa.schema([pa.field("left", pa.string()), pa.field("right", pa.string())]))
    union = spark.readStream.table(f"lake_consistent.{east}").unionByName(spark.readStream.table(f"lake_consistent.{west}"))
    query = native_job(union, base, both, f"{name}-union")
    # a stream-stream join on the word's number: its output so far is the join of everything both sides hold
    left = spark.readStream.table(f"lake_consistent.{east}").selectExpr("word AS left", "substr(word, 2) AS k")
    right = spark.readStream.table(f"lake_consistent.{west}").selectExpr("word AS right", "substr(word, 2) AS k")
    join = native_job(left.join(right, "k").select("left", "right"), base, joined, f"{name}-join", checkpoint="chk-join")
    try:
        wait_for(lambda: cc.store.state(both).watermark() == t0 + 200 and cc.store.state(joined).watermark() == t0 + 200,
                 what="the epochs both sources are complete at")
        ingest_dataframe(cc, frame("w2"), west, barrier=t0 + 400)
        wait_for(lambda: cc.store.state(both).watermark() == t0 + 300 and cc.store.state(joined).watermark() == t0 + 300,
                 what="the epochs at east's barrier")
        ingest_dataframe(cc, frame("e4"), east, barrier=t0 + 500)
        wait_for(lambda: cc.store.state(both).watermark() == t0 + 400 and cc.store.state(joined).watermark() == t0 + 400,
                 what="the epochs at west's barrier")
    finally:
        query.stop()
        join.stop()
    for epoch in published_epochs(catalog, joined):  # each epoch: the join of both sources at its barrier, exactly
        recorded = json.loads(epoch[P.SOURCES])
        sides = {source: [r["word"] for r in rows(catalog, source, recorded[source])] for source in (east, west)}
        expected = Counter((a, b) for a in sides[east] for b in sides[west] if a[1:] == b[1:])
        assert Counter((r["left"], r["right"]) for r in rows(catalog, joined, epoch["id"])) == expected
    assert {(r["left"], r["right"]) for r in rows(catalog, joined)} == {("e1", "w1"), ("e2", "w2")}
    epochs = published_epochs(catalog, both)
    assert [int(e[P.BARRIER]) for e in epochs] == [t0 + 200, t0 + 300, t0 + 400]
    for epoch in epochs:  # every epoch holds both sources exactly at its own barrier, never a mix
        recorded = json.loads(epoch[P.SOURCES])
        expected = Counter()
        for source in (east, west):
            snap = cc.store.state(source).branch().snap_at(int(epoch[P.BARRIER]))
            assert recorded[source] == snap[0]
            expected += Counter(r["word"] for r in rows(catalog, source, snap[0]))
        assert Counter(r["word"] for r in rows(catalog, both, epoch["id"])) == expected


def test_a_native_job_keeps_moving_with_an_idle_source_and_refuses_a_rewritten_source(env, ns):
    import pyarrow as pa
    from pyspark.errors import StreamingQueryException

    root, catalog, spark = env
    name, base = ns
    words, counts, hist = f"{name}.words", f"{name}.word_counts", f"{name}.histogram"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    cc.ingest(words, pa.table({"word": ["a", "b"]}), barrier=now_ms() - 60_000)
    cc.set_idle(words, "1s")  # an idle source: every job reading it advances its watermark (protocol §5.6)
    query = native_job(spark.readStream.table(f"lake_consistent.{words}").groupBy("word").count()
                       .withColumnRenamed("count", "cnt"), base, counts, f"{name}-count", mode="complete")
    try:
        first = wait_for(lambda: cc.store.state(counts).watermark(), what="the first epoch")
        wait_for(lambda: (cc.store.state(counts).watermark() or 0) > first + 1000, timeout=60,
                 what="watermark epochs while the source is idle")
        assert cc.store.state(words).head() == summaries(catalog, words)[0]["id"]  # no data, only watermarks
    finally:
        query.stop()
    # every micro-batch wrote the whole result; the watermark epochs dropped theirs: no file is left unreferenced
    table = catalog.load_table(counts)
    referenced = {f.file_path for s in table.snapshots() for task in table.scan(snapshot_id=s.snapshot_id).plan_files()
                  for f in [task.file]}
    written = {str(p) for p in Path(urlparse(table.location()).path, "data").rglob("*.parquet")}
    assert {urlparse(p).path for p in referenced} == written
    # A table whose epochs rewrite it is refused when the stream starts (issue 34, item 3; issue 35 moved it from the
    # definition, whose load no longer tells a stream from a batch read), naming the epoch's job and rewriting
    # snapshot, before any micro-batch; one whose job has not run yet is streamed: its first micro-batch reads it
    # whole, and the first rewrite after it ends the stream.

    def count_words(ctx):
        return ctx.read(words).group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])

    recounts = f"{name}.recounts"
    catalog.create_table(recounts, schema=COUNTS_SCHEMA)
    catalog.create_table(hist, schema=pa.schema([("cnt", pa.int64()), ("words", pa.int64())]))
    recount = cc.job(f"{name}-recount", sources=[words], sinks=[recounts], transform=count_words, mode="overwrite")
    with recount:  # registered: recounts is derived, with no epoch yet
        reading = native_job(spark.readStream.table(f"lake_consistent.{recounts}").groupBy("cnt").count()
                             .withColumnRenamed("count", "words"), base, hist, f"{name}-hist", mode="complete",
                             checkpoint="chk-hist")
        try:
            recount.run_epoch()
            wait_for(lambda: published_epochs(catalog, hist), what="the first epoch of a whole first read")
            assert {r["cnt"]: r["words"] for r in rows(catalog, hist)} == {1: 2}
            cc.ingest(words, pa.table({"word": ["a"]}))
            recount.run_epoch()  # recounts rewritten: {a: 2, b: 1}
            with pytest.raises(StreamingQueryException, match=r"CONSISTENT_READ.NOT_INCREMENTAL.*rewrites rows"):
                reading.awaitTermination(120)
        finally:
            reading.stop()
    assert len(published_epochs(catalog, hist)) == 1
    for table, job in ((counts, f"{name}-count"), (recounts, f"{name}-recount")):  # complete mode; an overwrite job
        chain = main_chain(catalog.load_table(table))
        rewrite = [s for s in chain if s.summary.operation.value not in ("append", "replace")][-1]
        with pytest.raises(Exception) as refused:  # refused when the query is defined (issue 42, item 7): no query
            spark.readStream.table(f"lake_consistent.{table}")
        message = str(refused.value)
        assert message.startswith(f"[CONSISTENT_READ.NOT_INCREMENTAL] lake_consistent.{table}: its job {job} rewrites")
        assert "\n" not in message.strip() and len(message.replace(table, "t").replace(job, "j")) < 400, message  # one line, one way out
        assert f"committed snapshot {rewrite.snapshot_id} as {rewrite.summary.operation.value}" in message
        assert f'spark.readStream.option("consistent.read", "changes").table("lake_consistent.{table}")' in message
        assert rewrite.summary.additional_properties[P.BARRIER] in message


# --- streaming epoch jobs -------------------------------------------------------------------------------


def test_a_streaming_job_aligns_sources_reads_exact_increments_and_renews_its_lease(env, ns):
    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe
    from consistent_catalog.spark.streaming import start_streaming_job

    root, catalog, spark = env
    name, base = ns
    left, right, sink = f"{name}.east", f"{name}.west", f"{name}.both"
    cc, frame, t0 = east_ahead_of_west(env, ns, sink)
    job = SparkEpochJob(cc, spark, f"{name}-union", sources=[left, right], sinks=[sink], mode="append",
                        incremental=True, transform="SELECT word FROM east UNION ALL SELECT word FROM west",
                        lease_ms=4000)
    query = start_streaming_job(job, checkpoint_location=str(base / "chk"), trigger=0.5)
    try:
        first = wait_for(lambda: [r for r in query.results if r.did_work], what="the first epoch")[0]
        assert first.barrier == t0 + 200  # aligned at the barrier both sources are complete at
        head = summaries(catalog, sink)[-1]
        recorded = json.loads(head[P.SOURCES])
        left_snaps = [s["id"] for s in summaries(catalog, left)]
        assert recorded == {left: left_snaps[0], right: summaries(catalog, right)[0]["id"]}
        assert sorted(r["word"] for r in rows(catalog, sink)) == ["e1", "w1"]

        ingest_dataframe(cc, frame("w2"), right, barrier=t0 + 400)
        wait_for(lambda: cc.store.state(sink).watermark() == t0 + 300, what="the epoch at the left's barrier")
        ingest_dataframe(cc, frame("e4"), left, barrier=t0 + 500)
        wait_for(lambda: cc.store.state(sink).watermark() == t0 + 400, what="the epoch at the right's barrier")
        # each epoch appended exactly the rows new since the previous one: nothing doubled, nothing lost
        assert Counter(r["word"] for r in rows(catalog, sink)) == Counter(["e1", "w1", "e2", "e3", "w2"])
        # idle now (nothing new): the lease is renewed anyway, it never lapses
        renewed = int(catalog.load_table(sink).metadata.properties[P.LEASE_UNTIL])
        time.sleep(5)  # longer than the lease
        later = int(catalog.load_table(sink).metadata.properties[P.LEASE_UNTIL])
        assert later > renewed and later > now_ms()
        assert not [r for r in query.results[-5:] if r.did_work]
        assert query.lastProgress is not None and query.isActive
    finally:
        query.stop()
    properties = catalog.load_table(sink).metadata.properties
    assert P.JOB in properties and P.LEASE_HOLDER not in properties  # the lease released on stop(), the owner kept


def test_stop_restart_with_another_trigger_and_take_over_from_the_own_checkpoint(env, ns):
    from consistent_catalog.spark.job import SparkEpochJob
    from consistent_catalog.spark.streaming import CheckpointInstances, start_root_stream, start_streaming_job

    root, catalog, spark = env
    name, base = ns
    words, counts = f"{name}.words", f"{name}.word_counts"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    stream = spark.readStream.schema("word string").json(str(base / "in"))
    sql = "SELECT word, count(*) AS cnt FROM words GROUP BY word"

    def job():
        return SparkEpochJob(cc, spark, f"{name}-count", sources=[words], sinks=[counts], transform=sql, mode="overwrite")

    write_json(base / "in", "1.json", [{"word": "a"}])
    first = start_root_stream(stream, cc, words, checkpoint_location=str(base / "chk-root"), trigger=0.3,
                              idle_after=None)
    first.processAllAvailable()
    first.stop()
    counting = start_streaming_job(job(), checkpoint_location=str(base / "chk-job"), trigger=0.4)
    wait_for(lambda: cc.store.state(counts).watermark() == first.batches[0].barrier, what="the first epoch")
    counting.stop()
    assert P.LEASE_HOLDER not in catalog.load_table(counts).metadata.properties

    # restart both with another trigger: the root once over what is new, the job as often as it likes
    write_json(base / "in", "2.json", [{"word": "b"}, {"word": "a"}])
    second = start_root_stream(stream, cc, words, checkpoint_location=str(base / "chk-root"),
                               trigger={"availableNow": True}, idle_after=None)
    second.awaitTermination(120)
    assert second.id == first.id and [b.batch_id for b in second.batches] == [1]  # same query, next batch
    once = start_streaming_job(job(), checkpoint_location=str(base / "chk-job"), trigger={"availableNow": True})
    assert once.awaitTermination(120) is not False and not once.isActive
    # one epoch did the work (a micro-batch the stop left unfinished may be replayed first: a no-op)
    assert [r.actions[counts] for r in once.results if r.did_work] == ["published"]
    assert {r["word"]: r["cnt"] for r in rows(catalog, counts)} == {"a": 2, "b": 1}
    assert P.LEASE_HOLDER not in catalog.load_table(counts).metadata.properties  # released when it ended

    # a crashed run of this checkpoint still holds a live lease: a restart from it takes over ...
    dead = "0123456789ab"
    CheckpointInstances(spark, str(base / "chk-job")).write([dead])
    cc.register_job(f"{name}-count", [words], [counts], instance=dead)
    resumed = start_streaming_job(job(), checkpoint_location=str(base / "chk-job"), trigger=0.5)
    assert resumed.lease.instance != dead
    resumed.stop()
    # ... another deployment (another checkpoint) is refused while that lease lives
    cc.register_job(f"{name}-count", [words], [counts], instance=dead)
    with pytest.raises(OwnershipError):
        start_streaming_job(job(), checkpoint_location=str(base / "elsewhere"), trigger=0.5)
    assert catalog.load_table(counts).metadata.properties[P.LEASE_HOLDER] == dead


def test_the_streaming_flip_demo_holds_its_invariants_at_every_sampled_cut(env, tmp_path):
    from consistent_catalog.demo import TABLES, check_invariants
    from consistent_catalog.spark.streaming_demo import run_streaming_demo

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    cuts, said = [], []
    report = run_streaming_demo(tmp_path, check=check_invariants, cc=cc, spark=spark, files=6, rows_per_file=50,
                                interval=0.7, sample_every=0.5, on_cut=lambda read: cuts.append(read.cut.barrier),
                                echo=said.append)
    # issue 42.8: the summary shows the leases as the stopped queries left them (released), not a live one
    summary = [line for line in said if "lease=" in line]
    assert len(summary) == len(TABLES) and not any("lease=live" in line for line in summary), said
    assert report["violations"] == [] and report["cuts_checked"] == len(cuts) + 1 >= 3
    assert cuts == sorted(cuts)  # repeatable-read cuts never go back
    final = cc.read(TABLES)
    assert final.to_arrow("demo.words").num_rows == 300 and check_invariants(final) == []
    assert all(s.lease == "none" for s in cc.status(TABLES))  # the streaming jobs released their sinks


@pytest.mark.slow
def test_demo_streaming_command(tmp_path):
    result = subprocess.run(
        [str(VENV_BIN / "consistent-catalog"), "demo", "--streaming", "--dir", str(tmp_path), "--epochs", "5",
         "--rows-per-epoch", "40", "--output", "json"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["violations"] == [] and report["cuts_checked"] >= 2
    assert "protocol §7 invariants" in result.stderr
    assert "words, word-count and count-histogram run through lake_consistent (no Python in their path)" in result.stderr
    # issue #23.6: what was fed and how the figures were sampled, said as it is
    assert "the first of 5 files warmed the queries up" in result.stderr and "streaming the other 4" in result.stderr
    assert f"invariants at {report['cuts_checked']} distinct cuts" in result.stderr
    # issue 42.8: the summary after the native queries stopped shows their sinks released, not lease=live
    summary = [line for line in result.stderr.splitlines() if " lease=" in line]
    assert len(summary) == 3 and not any("lease=live" in line for line in summary), summary
    if report["delays_ms"]:
        assert f"over {len(report['delays_ms'])} samples" in result.stderr and "sampled every" in result.stderr


# --- kill -9 ------------------------------------------------------------------------------------------


def kill_and_resume(directory: Path, plan: list[dict], kills: Counter) -> list[sw.WorkerRun]:
    """Run the worker once per entry of ``plan`` (each should die), checking the lake after each kill."""
    runs = []
    for options in plan:
        run = sw.run_worker(directory, feed_every=0.8, stay=True, **options)
        runs.append(run)
        assert run.killed or run.done, run.describe()
        if run.killed:
            kills[options.get("crash_at") or "random"] += 1
        findings = sw.check_lake(directory, complete=False)
        assert findings["problems"] == [], (options, findings, run.describe())
    return runs


def random_kills(rng: random.Random, count: int, low: float, high: float) -> list[dict]:
    """``count`` kills at random instants, one in each of ``count`` equal slices of ``low``-``high`` seconds after the
    worker's queries started (stratified: few kills still reach both the first micro-batches and later ones)."""
    width = (high - low) / count
    return [{"kill_after": rng.uniform(low + i * width, low + (i + 1) * width)} for i in range(count)]


def finish(directory: Path, **options) -> dict:
    run = sw.run_worker(directory, **options)
    assert run.done, run.describe()
    findings = sw.check_lake(directory, complete=True)
    assert findings["problems"] == [], findings
    return findings


def test_sigkill_at_chosen_points_is_exactly_once(tmp_path):
    sw.create_lake(tmp_path)
    for index in range(2):
        sw.feed(tmp_path, index)
    kills: Counter = Counter()
    plan = [{"crash_at": point} for point in sw.POINTS]
    runs = kill_and_resume(tmp_path, plan, kills)
    assert kills == {point: 1 for point in sw.POINTS}, [r.describe() for r in runs if not r.killed]
    # the restart after a kill between the commit and Spark's checkpoint replayed that batch, and skipped it
    after_commit = sw.POINTS.index("root-after-commit")
    key = runs[after_commit].marker("CRASH")[0][2]
    assert ["BATCH", key, "skipped"] == runs[after_commit + 1].marker("BATCH")[0][:3]
    findings = finish(tmp_path)
    assert findings["rows"] == findings["rows_fed"] and findings["batches_landed"] >= 3


@pytest.mark.slow
@pytest.mark.stress
def test_sigkill_at_random_moments_is_exactly_once(tmp_path):
    sw.create_lake(tmp_path)
    sw.feed(tmp_path, 0)
    # Every phase the writer has a crash point for is killed in test_sigkill_at_chosen_points_is_exactly_once (all 6
    # POINTS, asserted there); these kills are for the instants between them (Spark's offsets, file-source and commit
    # logs, a job's read and plan). One kill in each third of the 0.5-12 s window after the queries run: early kills
    # land in the first micro-batches and the jobs' first epochs, late ones after several, on every run.
    kills: Counter = Counter()
    kill_and_resume(tmp_path, random_kills(random.Random(14), 3, 0.5, 12.0), kills)
    assert kills["random"] >= 2  # (with the 6 chosen points: 8 and more kills in all)
    findings = finish(tmp_path)
    assert findings["rows"] == findings["rows_fed"]


ROOT_POINTS = ("root-before-commit", "root-after-commit")


def test_native_root_sigkill_at_its_failpoints_and_at_random_is_exactly_once(tmp_path):
    """The events root through the JVM sink (``--native-root``): SIGKILL of driver and JVM before a batch's commit,
    between the commit and Spark's commit log (each twice: the first and a later batch), and at random moments."""
    sw.create_lake(tmp_path)
    sw.feed(tmp_path, 0)
    plan = [{"crash_at": point, "crash_after": after} for point in ROOT_POINTS for after in (0, 2)]
    plan += random_kills(random.Random(24), 2, 0.5, 8.0)  # one in the first and one in the second half of 0.5-8 s
    kills: Counter = Counter()
    runs = kill_and_resume(tmp_path, [{**options, "native_root": True} for options in plan], kills)
    assert sum(kills.values()) >= 5, [r.describe() for r in runs if not r.killed]
    assert kills["root-before-commit"] == 2 and kills["root-after-commit"] == 2
    for run in runs[:4]:
        assert any(line.startswith("[failpoint] ") for line in run.lines), run.describe()
    # a kill after the commit left a batch landed that Spark had not committed; the next run replayed it and skipped
    # it (check_lake: no batch id twice, every committed batch landed once with its files' rows)
    findings = finish(tmp_path, native_root=True)
    assert findings["rows"] == findings["rows_fed"] and findings["batches_landed"] >= 4


def test_the_native_three_hop_pipeline_survives_sigkill_at_every_failpoint_and_at_random(tmp_path):
    """Root, copy, word-count and count-histogram (word_counts' changes counted by cnt, update output mode with
    ``consistent.deleteWhere``: FLIP's third hop) as plain streaming queries through lake_consistent (``--native``):
    SIGKILL of driver and JVM at each of the plugin's failpoints (a root batch before its commit and before Spark's
    commit log, at a later batch: the first ones are killed in test_native_root_sigkill_at_its_failpoints_...; an
    epoch of word-count and one of count-histogram before staging, staged but not published, published but not in
    Spark's commit log, each point at one job's first epoch and at the other's later one), and at random moments;
    each restart resumes from the checkpoints and takes over from the instance they recorded.
    check_lake after every kill: no row twice or lost, each barrier published once, every histogram epoch the recount
    of snap(word_counts, its barrier) with no bucket at 0."""
    sw.create_lake(tmp_path, native=True)
    sw.feed(tmp_path, 0)
    plan: list[dict] = [{"crash_at": point, "crash_after": 1} for point in ROOT_POINTS]
    job_points = [point for point in sw.NATIVE_POINTS if point.startswith("job-")]
    plan += [{"crash_at": point, "crash_job": job, "crash_after": (index + turn) % 2}
             for index, point in enumerate(job_points) for turn, job in enumerate(("word-count", "count-histogram"))]
    # the random kills are for the instants between the failpoints: one in each half of 1-9 s after the queries run
    plan += random_kills(random.Random(2026), 2, 1.0, 9.0)
    kills: Counter = Counter()
    runs = kill_and_resume(tmp_path, [{**options, "native": True} for options in plan], kills)
    for options, run in zip(plan, runs):
        if "crash_at" in options:  # the kill landed in the commit path of the table the point was aimed at
            sink = sw.EVENTS if options["crash_at"].startswith("root-") else sw.NATIVE_JOBS[options["crash_job"]]
            point = sw.NATIVE_POINTS[options["crash_at"]]
            assert run.killed and any(line.startswith(f"[failpoint] {point} pid ") and line.endswith(f" table {sink}")
                                      for line in run.lines), (options, run.describe())
    failpoint_kills = sum(kills[point] for point in sw.NATIVE_POINTS)
    assert failpoint_kills == 2 + 2 * len(job_points) and kills["random"] >= 1, kills
    findings = finish(tmp_path, native=True)
    assert findings["rows"] == findings["rows_fed"] and findings["epochs"][sw.HISTOGRAM] >= 4, findings
