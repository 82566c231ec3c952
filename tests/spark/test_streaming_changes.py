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
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

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


def epoch_written_tables(cc: Any, spark: Any, ns: str, *, log_where: str) -> Callable[..., int]:
    """Three tables derived from ``ns.words`` (which must exist) by Spark SQL epochs through ``lake_consistent``:
    ``counts`` by INSERT OVERWRITE (no identifier fields), ``log`` by INSERT INTO (the words ``log_where`` keeps) and
    ``latest`` by MERGE INTO (keyed). Returns ``round_of(*words)``: ingests the words, runs the three epochs, returns
    the ingest's barrier."""
    cc.catalog.create_table(f"{ns}.counts", schema=COUNTS)
    cc.catalog.create_table(f"{ns}.log", schema=WORDS)
    cc.catalog.create_table(f"{ns}.latest", schema=KEYED)
    counts_sql = f"SELECT word, count(*) AS cnt FROM lake_consistent.{ns}.words GROUP BY word"
    epochs = [
        ("counts", f"INSERT OVERWRITE lake_consistent.{ns}.counts {counts_sql}"),
        ("log", f"INSERT INTO lake_consistent.{ns}.log SELECT word FROM lake_consistent.{ns}.words WHERE {log_where}"),
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

    return round_of


def test_changes_stream_turns_each_barrier_into_the_next_across_overwrite_append_merge_and_a_restart(env):
    root, cc, spark = env
    from pyspark.sql import functions as F

    ns = "chg"
    cc.catalog.create_namespace(ns)
    cc.catalog.create_table(f"{ns}.words", schema=WORDS)
    round_of = epoch_written_tables(cc, spark, ns, log_where="word = 'a'")

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


def expected_changes(old: Counter, new: Counter, key: int | None) -> Counter:
    """§5.10's rows recounted from the two contents: the net multiset difference as (row, kind); with a key (the
    index of a column), a key value with exactly one row deleted and one inserted becomes an update pair."""
    inserted, deleted = new - old, old - new
    out = Counter({(row, "INSERT"): n for row, n in inserted.items()}) + Counter({(row, "DELETE"): n for row, n in deleted.items()})
    if key is not None:
        for gone in [r for r, n in deleted.items() if n == 1]:
            came = [r for r in inserted if r[key] == gone[key]]
            if sum(1 for r in deleted if r[key] == gone[key]) == 1 and len(came) == 1 and inserted[came[0]] == 1:
                del out[(gone, "DELETE")], out[(came[0], "INSERT")]
                out[(gone, "UPDATE_BEFORE")] += 1
                out[(came[0], "UPDATE_AFTER")] += 1
    return out


NO_EXTENSIONS = """
from consistent_catalog.spark.session import build_session
spark = build_session("sqlite:///{root}/catalog.db", "{root}/warehouse", app_name="no-extensions",
                      extra_conf={{"spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"}})
try:
    spark.read.option("consistent.read", "changes").option("consistent.fromBarrier", "0").table("{table}").collect()
    print("read without a refusal")
except Exception as e:
    print(str(e).strip().splitlines()[0])
spark.stop()
"""


def failure(action: Any) -> str:
    with pytest.raises(Exception) as caught:
        action()
    return str(caught.value).strip().splitlines()[0]


def test_batch_read_option_gives_the_changes_between_two_barriers(env, request):
    """``spark.read.option("consistent.read", "changes")`` with ``consistent.fromBarrier`` / ``toBarrier`` / ``key``
    (protocol §5.10), and SQL's ``WITH (...)`` options on the table's name: the rows recounted from pyiceberg's
    snapshots at both barriers, the same rows as ``CALL create_changes_view``'s view, and the refusals."""
    root, cc, spark = env
    ns = "bchg"
    cc.catalog.create_namespace(ns)
    cc.catalog.create_table(f"{ns}.words", schema=WORDS)
    # a session without the catalog's SQL extensions refuses the option (its own JVM: extensions are fixed per
    # process), started now so that it runs alongside this one
    bare = subprocess.Popen([sys.executable, "-c", NO_EXTENSIONS.format(root=str(root), table=f"lake_consistent.{ns}.words")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    request.addfinalizer(lambda: bare.poll() is None and bare.kill())
    round_of = epoch_written_tables(cc, spark, ns, log_where="word <> 'b'")

    first, second = round_of("a", "b", "a"), round_of("a", "c")  # counts: a 2 -> 3, c new

    def read(table: str, low: int, high: int | None = None, key: str | None = None) -> Any:
        reader = spark.read.option("consistent.read", "changes").option("consistent.fromBarrier", low)
        if high is not None:
            reader = reader.option("consistent.toBarrier", str(high))
        if key is not None:
            reader = reader.option("consistent.key", key)
        return reader.table(f"lake_consistent.{table}")

    # (table, columns, the key option, the key pyiceberg pairs by: the option's or the identifier field's)
    sources = [(f"{ns}.words", ["word"], None, None), (f"{ns}.counts", ["word", "cnt"], "word", 0),
               (f"{ns}.counts", ["word", "cnt"], None, None), (f"{ns}.log", ["word"], None, None),
               (f"{ns}.latest", ["word", "cnt"], None, 0)]
    kinds, rows_of = {}, {}
    for name, columns, key, pair_by in sources:
        table = cc.catalog.load_table(name)
        assert cc.status([name])[0].watermark == second  # toBarrier left out: W(t)
        for low, high in [(first, second), (first - 1, None)]:
            frame = read(name, low, high, key)
            assert frame.columns == [*columns, "_change_type", "_barrier"]
            rows = [r.asDict() for r in frame.collect()]
            old, new = content(table, low, columns), content(table, second if high is None else high, columns)
            got = Counter((tuple(r[c] for c in columns), r["_change_type"]) for r in rows)
            assert got == expected_changes(old, new, pair_by), (name, key, low, high)
            assert applied(old, rows, columns) == new, (name, key, low, high)
            if rows:
                tag = table.metadata.snapshot_by_id(snap_id(table, second if high is None else high)).summary
                assert {r["_barrier"] for r in rows} == {int(tag.additional_properties[P.BARRIER])}, (name, low, high)
            kinds[(name, key, low)] = Counter(r["_change_type"] for r in rows)
            rows_of[(name, key, low)] = Counter(tuple(r.values()) for r in rows)
        # the procedure's view of the first range: the same rows, _barrier included
        keyed = f", key => array('{key}')" if key else ""
        sql(spark, f"CALL lake_consistent.system.create_changes_view(table => '{name}', from_barrier => {first}, "
                   f"to_barrier => {second}{keyed}, changes_view => 'bchg_view')")
        assert Counter(tuple(r) for r in spark.table("bchg_view").collect()) == rows_of[(name, key, first)], name
    # the overwrite that rewrote counts with one count changed (a: 2 -> 3) and one new (c): an update pair and an
    # insert with the key, a DELETE and two INSERTs without; the merge pairs by its identifier field; the append
    # epoch's rows are inserts
    assert kinds[(f"{ns}.counts", "word", first)] == Counter({"UPDATE_BEFORE": 1, "UPDATE_AFTER": 1, "INSERT": 1})
    assert kinds[(f"{ns}.counts", None, first)] == Counter({"DELETE": 1, "INSERT": 2})
    assert kinds[(f"{ns}.latest", None, first)] == Counter({"UPDATE_BEFORE": 1, "UPDATE_AFTER": 1, "INSERT": 1})
    assert set(kinds[(f"{ns}.log", None, first)]) == {"INSERT"}

    # SQL: the same read by WITH options on the table's name (Spark 4's grammar; 3.5 has no options on a table's name);
    # * is the changes' columns
    if not spark.version.startswith("3."):
        options = f"WITH ('consistent.read' = 'changes', 'consistent.fromBarrier' = '{first}', 'consistent.toBarrier' = '{second}')"
        frame = spark.sql(f"SELECT * FROM lake_consistent.{ns}.counts {options} AS c WHERE c.cnt > 0")
        assert frame.columns == ["word", "cnt", "_change_type", "_barrier"]
        assert Counter(tuple(r) for r in frame.collect()) == rows_of[(f"{ns}.counts", None, first)]
        assert Counter(r[0] for r in spark.sql(f"SELECT _change_type FROM lake_consistent.{ns}.latest {options}").collect()) == \
            kinds[(f"{ns}.latest", None, first)]

    # refusals, each naming the option and the way out
    counts = f"lake_consistent.{ns}.counts"
    message = failure(lambda: spark.read.option("consistent.read", "changes").table(counts))
    assert message.startswith("[CONSISTENT_READ.INVALID_RANGE]") and "consistent.fromBarrier" in message, message
    message = failure(lambda: read(f"{ns}.counts", first, second + 10_000))
    assert message.startswith("[CONSISTENT_READ.INVALID_RANGE]") and f"its watermark is {second}" in message, message
    message = failure(lambda: read(f"{ns}.counts", second, first))
    assert message.startswith("[CONSISTENT_READ.INVALID_RANGE]"), message
    message = failure(lambda: spark.read.option("consistent.read", "changes").option("consistent.fromBarrier", "yesterday").table(counts))
    assert message.startswith("[CONSISTENT_READ.INVALID_OPTION]") and "consistent.fromBarrier is 'yesterday'" in message, message
    # the user's trap (issue 42.2): fromBarrier in seconds once read the whole table as INSERTs; it is refused naming
    # its milliseconds, by the option and by the procedure; an ISO-8601 time reads the same rows as its milliseconds
    seconds = first // 1000
    for refused in (lambda: read(f"{ns}.counts", seconds).collect(),
                    lambda: sql(spark, f"CALL lake_consistent.system.create_changes_view(table => '{ns}.counts', "
                                       f"from_barrier => {seconds})")):
        message = failure(refused)
        assert message.startswith("[CONSISTENT_READ.INVALID_") and ("fromBarrier" in message or "from_barrier" in message), \
            message
        assert f"in seconds {seconds} would be {seconds * 1000} (" in message, message
    iso = datetime.fromtimestamp(first / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert Counter(tuple(r) for r in read(f"{ns}.counts", iso, second).collect()) == rows_of[(f"{ns}.counts", None, first)]
    sql(spark, f"CALL lake_consistent.system.create_changes_view(table => '{ns}.counts', from_barrier => '{iso}', "
               f"to_barrier => '{second}', changes_view => 'bchg_iso')")
    assert Counter(tuple(r) for r in spark.table("bchg_iso").collect()) == rows_of[(f"{ns}.counts", None, first)]
    message = failure(lambda: read(f"{ns}.counts", first, key="nope"))
    assert message.startswith("[CONSISTENT_READ.INVALID_KEY]") and "word, cnt" in message, message
    message = failure(lambda: spark.read.option("consistent.read", "everything").option("consistent.fromBarrier", first).table(counts))
    assert message.startswith("[CONSISTENT_READ.INVALID_OPTION]") and "'everything'" in message, message
    message = failure(lambda: spark.read.option("consistent.fromBarrier", first).table(counts))
    assert message.startswith("[CONSISTENT_READ.INVALID_OPTION]") and "without consistent.read=changes" in message, message
    out, _ = bare.communicate(timeout=300)
    message = out.strip().splitlines()[-1] if out.strip() else f"no output (exit {bare.returncode})"
    assert message.startswith("[CONSISTENT_READ.NO_EXTENSIONS]") and "ConsistentSqlExtensions" in message, message


@pytest.mark.parametrize("read", ["changes", "appends"])
def test_a_stream_keeps_its_columns_ignores_an_added_one_and_fails_on_a_dropped_one(env, read):
    """Issue 47: a stream's columns, of its changes or of its appends, are the ones its query was analysed with; a
    column added while it runs (here first, so that a read with the table's current columns would shift every value)
    is not read until the query restarts; a dropped one fails the query with a typed one-line error naming the column
    and the way out (restart), after which the restarted query reads the table's current columns."""
    root, cc, spark = env
    from pyspark.errors import StreamingQueryException

    ns = f"schg_{read}"
    cc.catalog.create_namespace(ns)
    table = f"{ns}.words"
    cc.catalog.create_table(table, schema=COUNTS)  # word, cnt
    checkpoint = root / f"chk-schema-{read}"
    seen: dict[int, list[dict]] = {}
    # what the stream adds to the table's columns: a change type and a barrier per row, or nothing
    extra = {"_change_type", "_barrier"} if read == "changes" else set()

    def collect(batch, batch_id):
        seen[batch_id] = [r.asDict() for r in batch.collect()]

    def start(trigger):
        reader = spark.readStream.option("consistent.read", "changes") if read == "changes" else spark.readStream
        writer = reader.table(f"lake_consistent.{table}").writeStream.foreachBatch(collect)
        writer = writer.option("checkpointLocation", str(checkpoint))
        return (writer.trigger(availableNow=True) if trigger is None else writer.trigger(processingTime=trigger)).start()

    def landed(barrier: int) -> bool:
        done = offsets(checkpoint) if (checkpoint / "offsets").exists() else {}
        last = max(committed(checkpoint), default=None)
        return last is not None and last in done and all(o["barrier"] == barrier for o in done[last])

    def wait(query: Any, barrier: int) -> None:
        deadline = time.monotonic() + 120
        while not landed(barrier):
            assert query.isActive, f"the stream failed before barrier {barrier}: {query.exception()}"
            assert time.monotonic() < deadline, f"the stream did not reach barrier {barrier}: {offsets(checkpoint)}"
            time.sleep(0.2)

    insert = ("INSERT",) if read == "changes" else ()  # the first rows of a table, as its changes or appends

    def shown(row: dict, *columns: str) -> tuple:
        return tuple(row[c] for c in columns) + insert

    first = cc.ingest(table, pa.table({"word": ["a", "b"], "cnt": [1, 2]})).barrier
    query = start("0.2 seconds")
    try:
        wait(query, first)
        with cc.catalog.load_table(table).update_schema() as update:
            update.add_column("added", StringType())
        with cc.catalog.load_table(table).update_schema() as update:
            update.move_first("added")  # the table's columns are now added, word, cnt
        second = cc.ingest(table, pa.table({"added": ["new"], "word": ["c"], "cnt": [3]})).barrier
        wait(query, second)
        assert query.isActive
        with cc.catalog.load_table(table).update_schema() as update:
            update.delete_column("cnt")
        cc.ingest(table, pa.table({"added": ["x"], "word": ["d"]}))
        with pytest.raises(StreamingQueryException) as failed:
            query.awaitTermination(120)
    finally:
        query.stop()
    batches = [seen[b] for b in sorted(seen)]
    # the added column never reached the running query: each batch has the analysed columns, with pyiceberg's rows
    assert [sorted(shown(r, "word", "cnt") for r in rows) for rows in batches] == [
        [("a", 1, *insert), ("b", 2, *insert)], [("c", 3, *insert)]]
    assert all(set(r) == {"word", "cnt"} | extra for rows in batches for r in rows)
    text = str(failed.value)
    message = text[text.index("[CONSISTENT_READ.SCHEMA_CHANGED]"):].splitlines()[0]
    assert message.startswith(f"[CONSISTENT_READ.SCHEMA_CHANGED] lake_consistent.{table}: column 'cnt' was dropped")
    assert "restart the query" in message and len(message) < 400, message  # one line, naming the way out
    # the way out: restarted from its checkpoint, the query reads the table's current columns from where it stopped
    seen.clear()
    with cc.catalog.load_table(table).update_schema() as update:  # after the newest snapshot: not at the restart's cut
        update.add_column("later", StringType())
    again = start(None)
    assert again.awaitTermination(120) is not False
    rows = [r for b in sorted(seen) for r in seen[b]]
    current = cc.catalog.load_table(table).scan().to_arrow().to_pylist()
    assert [shown(r, "word", "added") for r in rows] == [shown(r, "word", "added") for r in current if r["word"] == "d"]
    assert all(set(r) == {"added", "word"} | extra for r in rows)
