"""A table's changes read as a stream (issue 32; protocol §5.7, §5.10): ``readStream.option("consistent.read",
"changes")`` on a table of ``lake_consistent`` gives, per micro-batch from barrier T1 to T2, the rows that turn
``snap(t, T1)`` into ``snap(t, T2)``, whatever the epochs did (overwrite, append, merge).

One local[2] session serves the module. The derived tables are written by Spark SQL epochs through
``lake_consistent`` (INSERT OVERWRITE, INSERT INTO, MERGE INTO) over a root fed by ``cc.ingest``; one streaming
query reads the root as appends and the derived tables as changes (one of them twice: with a declared key and as
whole rows), consumed by ``foreachBatch``. Every expectation comes from pyiceberg: ``snap(t, T)`` recounted from
the barrier tags along ``main``, both sides scanned whole, compared as multisets with the micro-batch's changes
applied; the micro-batches' barriers are Spark's own record of the query's offsets (``<checkpoint>/offsets``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from tests.harness.lake import spark_on_sqlite

pytestmark = [pytest.mark.spark, pytest.mark.integration]

WORDS = Schema(NestedField(1, "word", StringType(), required=False))
COUNTS = Schema(NestedField(1, "word", StringType(), required=False), NestedField(2, "cnt", LongType(), required=False))
KEYED = Schema(NestedField(1, "word", StringType(), required=True), NestedField(2, "cnt", LongType(), required=False),
               identifier_field_ids=[1])
WORD = pa.schema([pa.field("word", pa.string())])


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-streaming-changes")
    for catalog, spark in spark_on_sqlite(root, "test-streaming-changes"):
        yield root, ConsistentCatalog(catalog), spark


def snap_id(table: Any, barrier: int | None) -> int | None:
    """snap(t, T) recounted: the newest snapshot of main's ancestry whose barrier tag is <= T (None: empty)."""
    if barrier is None:
        return None
    chain, current = [], table.metadata.current_snapshot_id
    while current is not None:
        snapshot = table.metadata.snapshot_by_id(current)
        chain.append(snapshot)
        current = snapshot.parent_snapshot_id
    found = None
    for snapshot in reversed(chain):
        tag = snapshot.summary.additional_properties.get(P.BARRIER)
        if tag is not None and int(tag) <= barrier:
            found = snapshot
    return None if found is None else found.snapshot_id


def content(table: Any, barrier: int | None, columns: list[str]) -> Counter:
    snapshot_id = snap_id(table, barrier)
    if snapshot_id is None:
        return Counter()
    return Counter(tuple(r[c] for c in columns) for r in table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())


def applied(old: Counter, changes: list[dict], columns: list[str]) -> Counter:
    result = Counter(old)
    for change in changes:
        row = tuple(change[c] for c in columns)
        if change["_change_type"] in ("DELETE", "UPDATE_BEFORE"):
            assert result[row] > 0, f"{change} deletes a row snap(t, T1) does not hold"
            result[row] -= 1
        else:
            assert change["_change_type"] in ("INSERT", "UPDATE_AFTER"), change
            result[row] += 1
    return +result


def offsets(checkpoint: Path) -> dict[int, list[dict]]:
    """Spark's record of the query's micro-batches: batch id -> each source's end offset (barrier, snapshot)."""
    out = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().splitlines()
            out[int(path.name)] = [json.loads(line) for line in lines[2:]]
    return out


def committed(checkpoint: Path) -> set[int]:
    folder = checkpoint / "commits"
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


def sql(spark: Any, statement: str) -> None:
    spark.sql(statement).collect()


def test_changes_stream_turns_each_barrier_into_the_next_across_overwrite_append_merge_and_a_restart(env):
    root, cc, spark = env
    from pyspark.sql import functions as F

    ns = "chg"
    cc.catalog.create_namespace(ns)
    cc.catalog.create_table(f"{ns}.words", schema=WORDS)
    cc.catalog.create_table(f"{ns}.counts", schema=COUNTS)  # overwrite epochs, no identifier fields
    cc.catalog.create_table(f"{ns}.log", schema=WORDS)  # append epochs
    cc.catalog.create_table(f"{ns}.latest", schema=KEYED)  # merge epochs, keyed by its identifier field
    counts_sql = f"SELECT word, count(*) AS cnt FROM lake_consistent.{ns}.words GROUP BY word"
    epochs = [
        ("counts", f"INSERT OVERWRITE lake_consistent.{ns}.counts {counts_sql}"),
        ("log", f"INSERT INTO lake_consistent.{ns}.log SELECT word FROM lake_consistent.{ns}.words WHERE word = 'a'"),
        ("latest", f"MERGE INTO lake_consistent.{ns}.latest t USING ({counts_sql}) s ON t.word = s.word "
                   "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"),
    ]

    def round_of(*words: str) -> int:
        barrier = cc.ingest(f"{ns}.words", pa.table({"word": list(words)}, schema=WORD)).barrier
        for job, statement in epochs:
            spark.conf.set("spark.sql.consistent.job", f"{ns}-{job}")
            sql(spark, statement)
        spark.conf.unset("spark.sql.consistent.job")
        return barrier

    # the plain stream of a table its epochs rewrite is still refused, and names the read of changes as the way out
    first = round_of("a", "b", "a")
    with pytest.raises(Exception) as refused:
        query = (spark.readStream.table(f"lake_consistent.{ns}.counts").writeStream.format("memory")
                 .queryName("chg_plain").option("checkpointLocation", str(root / "plain")).start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()
    assert "[CONSISTENT_READ.NOT_INCREMENTAL]" in str(refused.value) and '"consistent.read", "changes"' in str(refused.value)

    # sources, in the order Spark records their offsets: (table, columns, key option)
    sources = [(f"{ns}.words", ["word"], None), (f"{ns}.counts", ["word", "cnt"], "word"),
               (f"{ns}.counts", ["word", "cnt"], None), (f"{ns}.log", ["word"], None),
               (f"{ns}.latest", ["word", "cnt"], None)]
    seen: dict[int, list[dict]] = {}
    checkpoint = root / "chk"
    runs: list[str] = []

    def start():
        frames = []
        for index, (table, columns, key) in enumerate(sources):
            reader = spark.readStream.option("consistent.waitFor", "200ms")
            if index > 0:
                reader = reader.option("consistent.read", "changes")
            if key:
                reader = reader.option("consistent.key", key)
            frame = reader.table(f"lake_consistent.{table}")
            if index == 0:
                frame = frame.withColumn("_change_type", F.lit("INSERT")).withColumn("_barrier", F.lit(None).cast("long"))
            frames.append(frame.select(F.lit(index).alias("source"), F.to_json(F.struct(*columns)).alias("row"),
                                       "_change_type", "_barrier"))
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame)

        def collect(batch, batch_id):
            rows = [r.asDict() for r in batch.collect()]
            assert batch_id not in seen, f"micro-batch {batch_id} delivered twice"
            seen[batch_id] = rows

        started = (union.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
                   .trigger(processingTime="0.3 seconds").start())
        runs.append(str(started.runId))  # Spark's job group of the run's jobs
        return started

    def caught_up(barrier: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = offsets(checkpoint) if (checkpoint / "offsets").exists() else {}
            last = max(committed(checkpoint), default=None)
            if last is not None and last in done and all(o["barrier"] == barrier for o in done[last]):
                return
            time.sleep(0.2)
        raise AssertionError(f"the stream did not reach barrier {barrier} in {timeout}s: {offsets(checkpoint)}")

    query = start()
    try:
        caught_up(first)
        second = round_of("a")  # counts: the whole table rewritten with one row changed (a: 2 -> 3)
        caught_up(second)
    finally:
        query.stop()
    third = round_of("c", "b")  # lands while the query is stopped: the restart takes it from the checkpoint
    query = start()
    try:
        caught_up(third)
    finally:
        query.stop()

    # every micro-batch: all sources end at one barrier; the changes turn snap(t, T1) into snap(t, T2)
    recorded = offsets(checkpoint)
    assert sorted(seen) == sorted(recorded) == list(range(len(recorded)))
    tables = {name: cc.catalog.load_table(name) for name, _, _ in sources}
    previous: list[dict] = [{"barrier": None, "snapshot": None}] * len(sources)
    kinds: dict[tuple[int, int], Counter] = {}
    most_jobs = 0  # a micro-batch: foreachBatch's collect, and the nested query of each changes source that moved
    for batch_id in sorted(recorded):
        ends = recorded[batch_id]
        most_jobs += 1 + sum(1 for i in range(1, len(sources)) if ends[i]["snapshot"] != previous[i]["snapshot"])
        assert len({o["barrier"] for o in ends}) == 1, f"micro-batch {batch_id} mixes barriers: {ends}"
        for index, (name, columns, _) in enumerate(sources):
            table, t1, t2 = tables[name], previous[index]["barrier"], ends[index]["barrier"]
            assert ends[index]["snapshot"] == snap_id(table, t2), (batch_id, name)
            changes = [json.loads(r["row"]) | {"_change_type": r["_change_type"], "_barrier": r["_barrier"]}
                       for r in seen[batch_id] if r["source"] == index]
            assert applied(content(table, t1, columns), changes, columns) == content(table, t2, columns), (batch_id, name)
            if index > 0 and changes:
                tag = int(table.metadata.snapshot_by_id(snap_id(table, t2)).summary.additional_properties[P.BARRIER])
                assert {c["_barrier"] for c in changes} == {tag}, (batch_id, name)
            kinds[(index, t2)] = Counter(c["_change_type"] for c in changes)
        previous = ends
    assert {o["barrier"] for ends in recorded.values() for o in ends} >= {first, second, third}
    # Spark asks a micro-batch's scan for its partitions once per copy of the scan node: the changes of a range are
    # still computed once, not once per ask (which ran 91 jobs here, six times the count below; now 25)
    tracker = spark.sparkContext.statusTracker()
    jobs = sum(len(tracker.getJobIdsForGroup(run)) for run in runs)
    assert 0 < jobs <= 2 * most_jobs, (jobs, most_jobs)
    # the overwrite that rewrote counts with one row changed: one UPDATE pair with a key, one DELETE + INSERT without
    assert kinds[(1, second)] == Counter({"UPDATE_BEFORE": 1, "UPDATE_AFTER": 1})
    assert kinds[(2, second)] == Counter({"DELETE": 1, "INSERT": 1})
    assert kinds[(4, second)] == Counter({"UPDATE_BEFORE": 1, "UPDATE_AFTER": 1})  # the merge, keyed by its table
    assert set(kinds[(3, second)]) == {"INSERT"}  # the append epoch: its rows, inserted
