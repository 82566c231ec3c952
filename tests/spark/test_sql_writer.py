"""Spark SQL and DataFrame writes through ``lake_consistent`` are epochs and ingests (protocol §5.9, issue 19).

What each statement prints on the driver's stderr is checked where the driver is a process of its own
(``spark-sql``: test_sql_pipeline.py, test_sql_writer_crash.py); here the JVM shares the test's stderr.

One PySpark session (local[2]) over one SQLite catalog for the module; each test works in its own
namespace. Everything the plugin writes is read back with pyiceberg (snapshot summaries, refs, table
properties) and recounted from the sources at the input snapshots the epoch recorded, never from the
plugin's own answers. Crashes, zombies and mixed Python/JVM writers: test_sql_writer_crash.py and
test_sql_writer_mixed.py; the FLIP pipeline as a SQL file: test_sql_pipeline.py.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from hashlib import sha256
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.exceptions import StrandedDataError

pytestmark = [pytest.mark.spark, pytest.mark.integration]

WORDS = Schema(NestedField(1, "word", StringType(), required=False))
COUNTS = Schema(NestedField(1, "word", StringType(), required=False), NestedField(2, "cnt", LongType(), required=False))
COUNT_WORDS = "SELECT word, count(*) AS cnt FROM lake_consistent.{ns}.words GROUP BY word"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ConsistentCatalog, Any]]:
    from consistent_catalog.spark import build_session

    root = tmp_path_factory.mktemp("sql-writer")
    catalog = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    spark = build_session(f"sqlite:///{root}/catalog.db", str(root / "warehouse"), app_name="test-sql-writer")
    yield ConsistentCatalog(catalog), spark
    spark.stop()


@pytest.fixture
def ns(env: tuple[ConsistentCatalog, Any], request: pytest.FixtureRequest) -> str:
    cc, spark = env
    name = "w_" + request.node.name.replace("test_", "")[:40].replace("[", "_").replace("]", "").replace("-", "_")
    cc.catalog.create_namespace(name)
    cc.catalog.create_table(f"{name}.words", schema=WORDS)
    cc.catalog.create_table(f"{name}.word_counts", schema=COUNTS)
    for key in ("job", "takeover", "lease", "ingestKey", "eventTimeColumn", "rebuild", "version", "ingestFromLake"):
        spark.conf.unset(f"spark.sql.consistent.{key}")
    return name


def sql(spark: Any, statement: str) -> list[Any]:
    return spark.sql(statement).collect()


def error_of(spark: Any, statement: str) -> str:
    with pytest.raises(Exception) as caught:
        spark.sql(statement).collect()
    return str(caught.value).strip().splitlines()[0]


def main_chain(cc: ConsistentCatalog, table: str) -> list[Any]:
    """The snapshots of ``table``'s main branch, oldest first (pyiceberg)."""
    loaded = cc.catalog.load_table(table)
    current = loaded.metadata.snapshot_by_name("main")
    chain = []
    while current is not None:
        chain.append(current)
        current = loaded.metadata.snapshot_by_id(current.parent_snapshot_id) if current.parent_snapshot_id else None
    return chain[::-1]


def summary(snapshot: Any) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties)


def recount_words(cc: ConsistentCatalog, table: str, snapshot_id: int | None) -> dict[str, int]:
    """word -> count of ``table`` at ``snapshot_id`` (pyiceberg), the independent answer to COUNT_WORDS."""
    if snapshot_id is None:
        return {}
    rows = cc.catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow()
    return dict(Counter(rows["word"].to_pylist()))


def counts_at_head(cc: ConsistentCatalog, table: str) -> dict[str, int]:
    rows = cc.catalog.load_table(table).scan().to_arrow()
    return dict(zip(rows["word"].to_pylist(), rows["cnt"].to_pylist()))


def epoch_snapshots(cc: ConsistentCatalog, table: str) -> list[dict[str, str]]:
    """Summaries of the snapshots on main that an epoch wrote (they carry an attempt id)."""
    return [summary(s) for s in main_chain(cc, table) if P.ATTEMPT in summary(s)]


def data_files(table: Any) -> set[str]:
    """The data files under ``table``'s data folder (also those no snapshot references), read from the file system."""
    return {str(p) for p in Path(table.location().removeprefix("file:"), "data").rglob("*.parquet")}


@contextmanager
def iceberg_write_log(spark: Any) -> Iterator[Any]:
    """What Iceberg's ``SparkWrite`` logs at WARN and above while the block runs (a log4j2 appender on its logger in the
    driver, whatever the session's log level); the text is the yielded ``StringWriter``'s ``toString()``."""
    jvm = spark._jvm
    log4j = jvm.org.apache.logging.log4j
    name = "org.apache.iceberg.spark.source.SparkWrite"
    writer = jvm.java.io.StringWriter()
    appender = log4j.core.appender.WriterAppender.createAppender(None, None, writer, "issue-42-sparkwrite", False, True)
    appender.start()
    log4j.core.config.Configurator.setLevel(name, log4j.Level.WARN)
    logger = log4j.LogManager.getLogger(name)
    logger.addAppender(appender)
    try:
        yield writer
    finally:
        logger.removeAppender(appender)
        appender.stop()
        log4j.core.config.Configurator.setLevel(name, log4j.Level.ERROR)


def ingest(cc: ConsistentCatalog, ns: str, *words: str) -> int:
    return cc.ingest(f"{ns}.words", pa.table({"word": list(words)}, schema=pa.schema([pa.field("word", pa.string())]))).barrier


# --- derived sinks: epochs ------------------------------------------------------------------------------------
def test_insert_overwrite_is_an_epoch_exactly_once(env: Any, ns: str) -> None:
    cc, spark = env
    statement = f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}"
    first = ingest(cc, ns, "a", "b", "a")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, statement)
    table = cc.catalog.load_table(f"{ns}.word_counts")
    props = table.metadata.properties
    assert props[P.JOB] == "word-count" and json.loads(props[P.SOURCES]) == [f"{ns}.words"]
    assert props[P.LEASE_HOLDER] and int(props[P.LEASE_UNTIL]) > first
    epochs = epoch_snapshots(cc, f"{ns}.word_counts")
    assert [int(e[P.BARRIER]) for e in epochs] == [first]
    inputs = json.loads(epochs[-1][P.SOURCES])
    assert set(inputs) == {f"{ns}.words"}
    assert counts_at_head(cc, f"{ns}.word_counts") == recount_words(cc, f"{ns}.words", inputs[f"{ns}.words"]) == {"a": 2, "b": 1}

    # the same statement again: the sink already holds the plan's barrier, nothing changes, and it says so; the
    # files Spark's tasks wrote for it are deleted, without Iceberg's "Skipping cleanup of written files" (issue 42.8)
    log = table.metadata.metadata_log
    files = data_files(table)
    with iceberg_write_log(spark) as warnings:
        sql(spark, statement)
    assert cc.catalog.load_table(f"{ns}.word_counts").metadata.metadata_log == log
    assert data_files(table) == files
    assert "Skipping cleanup" not in warnings.toString(), warnings.toString()

    # an idle root moved on: inputs unchanged, the watermark alone is published (no query, no snapshot)
    cc.advance_watermark(f"{ns}.words", first + 1000)
    sql(spark, statement)
    after = cc.catalog.load_table(f"{ns}.word_counts")
    assert after.metadata.properties[P.WATERMARK] == str(first + 1000)
    assert len(epoch_snapshots(cc, f"{ns}.word_counts")) == 1

    # new words: a new epoch at their barrier, computed from exactly the input it records
    second = ingest(cc, ns, "c", "a")
    sql(spark, statement)
    epochs = epoch_snapshots(cc, f"{ns}.word_counts")
    assert [int(e[P.BARRIER]) for e in epochs][-1] == second and len({e[P.ATTEMPT] for e in epochs}) == len(epochs)
    source = json.loads(epochs[-1][P.SOURCES])[f"{ns}.words"]
    assert counts_at_head(cc, f"{ns}.word_counts") == recount_words(cc, f"{ns}.words", source) == {"a": 3, "b": 1, "c": 1}
    assert cc.status([f"{ns}.word_counts"])[0].watermark == second

    # what the four statements did, as the session's recent_results() returns it (issue 42, item 6), against pyiceberg
    results = [r.asDict() for r in sql(spark, "CALL lake_consistent.system.recent_results()")[-4:]]
    published = [s for s in main_chain(cc, f"{ns}.word_counts") if P.ATTEMPT in summary(s)]
    assert [(r["table"], r["job"], r["action"], r["barrier"]) for r in results] == [
        (f"{ns}.word_counts", "word-count", "published", first), (f"{ns}.word_counts", "word-count", "done", first),
        (f"{ns}.word_counts", "word-count", "watermark", first + 1000),
        (f"{ns}.word_counts", "word-count", "published", second)], results
    assert [r["snapshot_id"] for r in results] == [published[0].snapshot_id, None, published[0].snapshot_id,
                                                   published[1].snapshot_id]
    assert [r["rows"] for r in results] == [2, 0, 0, 3]  # pyiceberg's rows of each epoch above: {a, b}, {a, b, c}
    assert [r["attempt"] for r in results] == [summary(published[0])[P.ATTEMPT], None, None,
                                               summary(published[1])[P.ATTEMPT]]
    assert [r["statement"] for r in results] == list(range(results[0]["statement"], results[0]["statement"] + 4))
    assert all(r["line"].startswith("[lake_consistent] word-count: ") for r in results)


def test_the_epoch_reads_its_inputs_not_the_readers_cut(env: Any, ns: str) -> None:
    """The statement's source read is replaced by snap(source, T), whatever cut a read would be served."""
    from pyspark.sql.functions import lit

    cc, spark = env
    ingest(cc, ns, "a")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}")
    # a reader's repeatable-read cut of the component is held back by word_counts; the epoch must read past it
    later = ingest(cc, ns, "b", "b")
    cut = cc.resolve([f"{ns}.words", f"{ns}.word_counts"])
    assert cut.barrier < later
    frame = spark.sql(COUNT_WORDS.format(ns=ns))  # a DataFrame analysed now, written after more input
    also = ingest(cc, ns, "c")
    frame.writeTo(f"lake_consistent.{ns}.word_counts").overwrite(lit(True))
    epochs = epoch_snapshots(cc, f"{ns}.word_counts")
    assert int(epochs[-1][P.BARRIER]) == also
    assert counts_at_head(cc, f"{ns}.word_counts") == {"a": 1, "b": 2, "c": 1}


def test_an_idle_source_keeps_the_epochs_moving(env: Any, ns: str) -> None:
    """A root declared idle (set_idle) is advanced to now minus its allowance before the statement plans, as the
    Python jobs do (protocol §5.6): with no new words the sink's watermark still follows the clock."""
    from consistent_catalog.util.time import now_ms

    cc, spark = env
    first = ingest(cc, ns, "a")
    cc.set_idle(f"{ns}.words", 1_000)
    sql(spark, "SET spark.sql.consistent.job=word-count")
    statement = f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}"
    sql(spark, statement)
    while now_ms() < first + 1_500:  # the clock must pass the allowance for the root to move
        time.sleep(0.1)
    before = now_ms()
    sql(spark, statement)
    words = cc.catalog.load_table(f"{ns}.words").metadata
    advanced = int(words.properties[P.WATERMARK])
    assert advanced > first and advanced >= before - 1_000  # the root was advanced to now - 1 s
    counts = cc.catalog.load_table(f"{ns}.word_counts").metadata
    assert int(counts.properties[P.WATERMARK]) == advanced  # the sink followed with a watermark-only epoch
    assert len(epoch_snapshots(cc, f"{ns}.word_counts")) == 1 and counts_at_head(cc, f"{ns}.word_counts") == {"a": 1}


def test_insert_into_appends_each_epochs_output(env: Any, ns: str) -> None:
    cc, spark = env
    cc.catalog.create_table(f"{ns}.word_log", schema=WORDS)
    sql(spark, "SET spark.sql.consistent.job=word-log")
    statement = f"INSERT INTO lake_consistent.{ns}.word_log SELECT upper(word) AS word FROM lake_consistent.{ns}.words"
    ingest(cc, ns, "a", "b")
    sql(spark, statement)
    ingest(cc, ns, "c")
    sql(spark, statement)
    rows = cc.catalog.load_table(f"{ns}.word_log").scan().to_arrow()["word"].to_pylist()
    assert Counter(rows) == Counter(["A", "B", "A", "B", "C"])  # append mode: each epoch adds its full output
    assert len(epoch_snapshots(cc, f"{ns}.word_log")) == 2


def test_an_epoch_whose_output_is_empty_still_records_its_barrier(env: Any, ns: str) -> None:
    cc, spark = env
    barrier = ingest(cc, ns, "a")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.word_counts SELECT word, count(*) AS cnt "
               f"FROM lake_consistent.{ns}.words WHERE word = 'nothing' GROUP BY word")
    epochs = epoch_snapshots(cc, f"{ns}.word_counts")
    assert [int(e[P.BARRIER]) for e in epochs] == [barrier]
    assert cc.catalog.load_table(f"{ns}.word_counts").scan().to_arrow().num_rows == 0
    assert cc.status([f"{ns}.word_counts"])[0].watermark == barrier


def test_dynamic_partition_overwrite_through_the_dataframe_api(env: Any, ns: str) -> None:
    cc, spark = env
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="word"))
    cc.catalog.create_table(f"{ns}.by_word", schema=COUNTS, partition_spec=spec)
    sql(spark, "SET spark.sql.consistent.job=by-word")
    # the two writes compute different partitions of one definition: a declared version says so (without it,
    # the second query is a changed definition, which revises the table first: protocol §6.10)
    sql(spark, "SET spark.sql.consistent.version=1")
    try:
        ingest(cc, ns, "a", "b", "a")
        spark.sql(COUNT_WORDS.format(ns=ns)).writeTo(f"lake_consistent.{ns}.by_word").overwritePartitions()
        ingest(cc, ns, "b")
        spark.sql(f"{COUNT_WORDS.format(ns=ns)} HAVING word = 'b'").writeTo(f"lake_consistent.{ns}.by_word").overwritePartitions()
    finally:
        sql(spark, "RESET spark.sql.consistent.version")
    assert counts_at_head(cc, f"{ns}.by_word") == {"a": 2, "b": 2}
    assert len(epoch_snapshots(cc, f"{ns}.by_word")) == 2
    assert {e[P.DEFINITION] for e in epoch_snapshots(cc, f"{ns}.by_word")} == {"version:" + sha256(b"1").hexdigest()[:16]}


def test_a_job_over_two_sources_never_mixes_barriers(env: Any, ns: str) -> None:
    """Two roots, one ahead of the other: the epoch is at the newest barrier where both are complete, and each
    source is read exactly at its snapshot there."""
    cc, spark = env
    cc.catalog.create_table(f"{ns}.other", schema=WORDS)
    cc.catalog.create_table(f"{ns}.joined", schema=COUNTS)
    ingest(cc, ns, "a")
    low = cc.ingest(f"{ns}.other", pa.table({"word": ["a"]})).barrier
    ahead = ingest(cc, ns, "a", "b")  # words is ahead of other
    sql(spark, "SET spark.sql.consistent.job=joiner")
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.joined SELECT w.word, count(*) AS cnt FROM "
               f"lake_consistent.{ns}.words w JOIN lake_consistent.{ns}.other o ON w.word = o.word GROUP BY w.word")
    epoch = epoch_snapshots(cc, f"{ns}.joined")[-1]
    assert low < ahead and int(epoch[P.BARRIER]) == low
    inputs = json.loads(epoch[P.SOURCES])
    words_then = recount_words(cc, f"{ns}.words", inputs[f"{ns}.words"])
    assert words_then == {"a": 1}  # the words snapshot at T, not the newer one
    assert counts_at_head(cc, f"{ns}.joined") == {"a": 1}


def test_a_change_of_sources_registers_again(env: Any, ns: str) -> None:
    cc, spark = env
    cc.catalog.create_table(f"{ns}.other", schema=WORDS)
    ingest(cc, ns, "a")
    cc.ingest(f"{ns}.other", pa.table({"word": ["z"]}))
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}")
    registered = cc.catalog.load_table(f"{ns}.word_counts").metadata
    fence = registered.refs[P.FENCE_BRANCH].snapshot_id
    fence_file = Path(registered.snapshot_by_id(fence).manifest_list.removeprefix("file:"))
    assert fence_file.exists()
    union = (f"INSERT OVERWRITE lake_consistent.{ns}.word_counts SELECT word, count(*) AS cnt FROM (SELECT word FROM "
             f"lake_consistent.{ns}.words UNION ALL SELECT word FROM lake_consistent.{ns}.other) GROUP BY word")
    sql(spark, union)
    table = cc.catalog.load_table(f"{ns}.word_counts")
    assert json.loads(table.metadata.properties[P.SOURCES]) == sorted([f"{ns}.other", f"{ns}.words"])
    assert table.metadata.refs[P.FENCE_BRANCH].snapshot_id != fence  # registration took the fence again
    assert table.metadata.snapshot_by_id(fence) is None and not fence_file.exists()  # the retired fence went with it
    # min W of the sources is still words' barrier, which the sink holds: done; once words moves on, the epoch
    # is at other's barrier, where words still holds only "a"
    assert counts_at_head(cc, f"{ns}.word_counts") == {"a": 1}
    other = cc.status([f"{ns}.other"])[0].watermark
    ingest(cc, ns, "b")
    sql(spark, union)
    assert int(epoch_snapshots(cc, f"{ns}.word_counts")[-1][P.BARRIER]) == other
    assert counts_at_head(cc, f"{ns}.word_counts") == {"a": 1, "z": 1}


def test_a_second_hop_in_the_same_session(env: Any, ns: str) -> None:
    cc, spark = env
    cc.catalog.create_table(
        f"{ns}.histogram", schema=Schema(NestedField(1, "cnt", LongType(), required=False),
                                         NestedField(2, "words", LongType(), required=False)))
    barrier = ingest(cc, ns, "a", "b", "a", "c")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}")
    sql(spark, "SET spark.sql.consistent.job=count-histogram")
    # written with a common table expression, as dbt compiles a model: its tables are the epoch's sources (Spark 4.1
    # keeps the expression's definition in the analysed write where 3.5 inlines it)
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.histogram WITH c AS (SELECT cnt FROM "
               f"lake_consistent.{ns}.word_counts) SELECT cnt, count(*) AS words FROM c GROUP BY cnt")
    rows = cc.catalog.load_table(f"{ns}.histogram").scan().to_arrow()
    assert dict(zip(rows["cnt"].to_pylist(), rows["words"].to_pylist())) == {2: 1, 1: 2}
    read = cc.read([f"{ns}.words", f"{ns}.word_counts", f"{ns}.histogram"])
    assert read.cut.barrier == barrier


def test_merge_into_by_keys_is_an_epoch(env: Any, ns: str) -> None:
    """MERGE INTO merges the new counts into the previous epoch's output (on the staged branch), by key."""
    cc, spark = env
    cc.catalog.create_table(f"{ns}.latest", schema=COUNTS)
    merge = (f"MERGE INTO lake_consistent.{ns}.latest t USING ({COUNT_WORDS.format(ns=ns)}) s ON t.word = s.word "
             "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    ingest(cc, ns, "a", "b", "a")
    sql(spark, "SET spark.sql.consistent.job=latest")
    sql(spark, merge)
    log = cc.catalog.load_table(f"{ns}.latest").metadata.metadata_log
    sql(spark, merge)  # done: nothing changes
    assert cc.catalog.load_table(f"{ns}.latest").metadata.metadata_log == log
    second = ingest(cc, ns, "c", "a")
    sql(spark, merge)
    epochs = epoch_snapshots(cc, f"{ns}.latest")
    assert [int(e[P.BARRIER]) for e in epochs][-1] == second and len(epochs) == 2
    source = json.loads(epochs[-1][P.SOURCES])[f"{ns}.words"]
    assert counts_at_head(cc, f"{ns}.latest") == recount_words(cc, f"{ns}.words", source) == {"a": 3, "b": 1, "c": 1}
    message = error_of(spark, f"MERGE INTO lake_consistent.{ns}.latest t USING (SELECT 'z' AS word, 9L AS cnt) s "
                              "ON t.word = s.word WHEN NOT MATCHED THEN INSERT *")
    assert message.startswith("[CONSISTENT_WRITE.REFUSED]") and "reads no table" in message


def test_save_as_table_in_append_mode_is_an_epoch(env: Any, ns: str) -> None:
    cc, spark = env
    cc.catalog.create_table(f"{ns}.word_log", schema=WORDS)
    ingest(cc, ns, "a", "b")
    sql(spark, "SET spark.sql.consistent.job=word-log")
    spark.table(f"lake_consistent.{ns}.words").write.mode("append").saveAsTable(f"lake_consistent.{ns}.word_log")
    assert len(epoch_snapshots(cc, f"{ns}.word_log")) == 1
    assert Counter(cc.catalog.load_table(f"{ns}.word_log").scan().to_arrow()["word"].to_pylist()) == {"a": 1, "b": 1}


# --- refusals ------------------------------------------------------------------------------------------------
def test_refusals_name_the_problem_and_the_way_out(env: Any, ns: str) -> None:
    cc, spark = env
    ingest(cc, ns, "a")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}")
    before = cc.catalog.load_table(f"{ns}.word_counts").metadata.metadata_log
    cases = {
        f"INSERT OVERWRITE lake_consistent.{ns}.word_counts SELECT word, count(*) AS cnt FROM lake.{ns}.words GROUP BY word":
            ("CONSISTENT_WRITE.REFUSED", f"reads lake.{ns}.words"),
        f"INSERT OVERWRITE lake_consistent.{ns}.word_counts VALUES ('q', 1)": ("CONSISTENT_WRITE.REFUSED", "reads no table"),
        f"INSERT OVERWRITE lake_consistent.{ns}.word_counts SELECT word, cnt FROM lake_consistent.{ns}.word_counts":
            ("CONSISTENT_WRITE.CYCLE", "cannot be its own source"),
        # the job left set, into the root words: a root holding ingests never becomes a job's sink (before the cycle)
        f"INSERT INTO lake_consistent.{ns}.words SELECT word FROM lake_consistent.{ns}.word_counts":
            ("CONSISTENT_WRITE.REFUSED", f"{ns}.words is a root: it holds rows ingested outside any job"),
        f"INSERT OVERWRITE lake_consistent.{ns}.word_counts SELECT word, count(*) AS cnt "
        f"FROM lake_consistent.{ns}.words VERSION AS OF {main_chain(cc, f'{ns}.words')[-1].snapshot_id} GROUP BY word":
            ("CONSISTENT_WRITE.REFUSED", "a branch, tag or version"),
    }
    for statement, (error_class, text) in cases.items():
        message = error_of(spark, statement)
        assert message.startswith(f"[{error_class}]") and text in message, (statement, message)
    sql(spark, "RESET spark.sql.consistent.job")
    message = error_of(spark, f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}")
    assert message.startswith("[CONSISTENT_WRITE.REFUSED]") and "SET spark.sql.consistent.job=word-count" in message
    for bad, text in (("takeover=maybe", "not true or false"), ("lease=soon", "not a duration"),
                      ("jobb=word-count", "not a setting")):
        sql(spark, f"SET spark.sql.consistent.{bad}")
        message = error_of(spark, f"INSERT INTO lake_consistent.{ns}.words VALUES ('x')")
        assert message.startswith("[CONSISTENT_CUT.INVALID_SETTING]") and text in message, message
        spark.conf.unset(f"spark.sql.consistent.{bad.split('=')[0]}")
    assert "did you mean spark.sql.consistent.job?" in message, message  # the misspelt setting's nearest name
    with pytest.raises(Exception) as caught:  # a batch write's consistent.* option (a typo, or a stream's): named
        spark.createDataFrame([("x",)], "word string").writeTo(f"lake_consistent.{ns}.words") \
            .option("consistent.jb", "word-count").append()
    message = str(caught.value).strip().splitlines()[0]
    assert message.startswith("[CONSISTENT_WRITE.INVALID_OPTION] option consistent.jb"), message
    assert "did you mean SET spark.sql.consistent.job=...?" in message, message
    assert cc.catalog.load_table(f"{ns}.word_counts").metadata.metadata_log == before


def test_a_forgotten_job_is_refused_and_the_fix_reads_every_order(env: Any, ns: str) -> None:
    """Issue 42, item 1 as the user met it: orders ingested through lake_consistent, then a total per customer written
    into a new table with no job. Refused (it would make by_customer a root without lineage), naming both ways out;
    the job set, the same overwrite is an epoch, and a new session reads every order and totals that agree with a
    recount (pyiceberg). With the on-purpose setting the same INSERT is an ingest. Item 5: a job left set, then an
    INSERT INTO a root, is told to RESET it; an overwrite of a new table with no job, that the job makes it its sink."""
    cc, spark = env
    orders = Schema(NestedField(1, "customer", StringType(), required=False), NestedField(2, "amount", LongType(), required=False))
    totals = Schema(NestedField(1, "customer", StringType(), required=False), NestedField(2, "total", LongType(), required=False))
    for table, schema in (("orders", orders), ("by_customer", totals), ("copied", totals), ("fresh", totals)):
        cc.catalog.create_table(f"{ns}.{table}", schema=schema)
    sql(spark, f"INSERT INTO lake_consistent.{ns}.orders VALUES ('ann', 5), ('bob', 7), ('ann', 3)")
    query = f"SELECT customer, sum(amount) AS total FROM lake_consistent.{ns}.orders GROUP BY customer"
    message = error_of(spark, f"INSERT INTO lake_consistent.{ns}.by_customer {query}")
    assert message.startswith(f"[CONSISTENT_WRITE.REFUSED] lake_consistent.{ns}.by_customer is a new, empty table"), message
    assert f"reads lake_consistent.{ns}.orders with no job set" in message, message
    assert "SET spark.sql.consistent.job=<job>" in message and "SET spark.sql.consistent.ingestFromLake=true" in message
    refused = cc.catalog.load_table(f"{ns}.by_customer")
    assert refused.metadata.snapshots == [] and P.JOB not in refused.metadata.properties  # nothing written, no role
    # item 5: an overwrite of a new table with no job names the setting that makes it the job's sink
    message = error_of(spark, f"INSERT OVERWRITE lake_consistent.{ns}.fresh {query}")
    assert message.startswith(f"[CONSISTENT_WRITE.REFUSED] lake_consistent.{ns}.fresh is a new, empty table"), message
    assert "SET spark.sql.consistent.job=<job> makes this table that job's sink" in message, message
    with pytest.raises(Exception) as caught:  # a DataFrame write is held to the same rule as the INSERT
        spark.table(f"lake_consistent.{ns}.orders").selectExpr("customer", "amount AS total") \
            .writeTo(f"lake_consistent.{ns}.fresh").append()
    message = str(caught.value).strip().splitlines()[0]
    assert f"fresh is a new, empty table (no job, no ingest yet) and the statement reads lake_consistent.{ns}.orders" \
        in message, message

    sql(spark, "SET spark.sql.consistent.job=by-customer")
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.by_customer {query}")
    props = cc.catalog.load_table(f"{ns}.by_customer").metadata.properties
    assert props[P.JOB] == "by-customer" and json.loads(props[P.SOURCES]) == [f"{ns}.orders"]
    # item 5: the job left set, an INSERT INTO the root orders (reading nothing) is told to RESET it
    message = error_of(spark, f"INSERT INTO lake_consistent.{ns}.orders VALUES ('cy', 1)")
    assert message.startswith(f"[CONSISTENT_WRITE.REFUSED] lake_consistent.{ns}.orders is a root (it holds ingests, "
                              "no job): RESET spark.sql.consistent.job to ingest into it"), message
    message = error_of(spark, f"INSERT INTO lake_consistent.{ns}.fresh VALUES ('cy', 1)")  # and into a new table
    assert message.startswith(f"[CONSISTENT_WRITE.REFUSED] lake_consistent.{ns}.fresh is a new, empty table"), message
    assert message.endswith("RESET spark.sql.consistent.job to ingest into it as a root"), message
    sql(spark, "RESET spark.sql.consistent.job")
    message = error_of(spark, f"INSERT INTO lake_consistent.{ns}.orders SELECT customer, total FROM "
                              f"lake_consistent.{ns}.by_customer")  # into a root that holds ingests: a new table
    assert message.startswith(f"[CONSISTENT_WRITE.REFUSED] lake_consistent.{ns}.orders is a root (it holds ingests, "
                              f"no job) and the statement reads lake_consistent.{ns}.by_customer"), message
    assert "SET spark.sql.consistent.job=<job> and write a new table" in message, message

    recount = cc.catalog.load_table(f"{ns}.orders").scan().to_arrow()
    expected: dict[str, int] = {}
    for customer, amount in zip(recount["customer"].to_pylist(), recount["amount"].to_pylist()):
        expected[customer] = expected.get(customer, 0) + amount
    fresh = spark.newSession()  # a new session: a cut of its own, no settings
    assert fresh.sql(f"SELECT count(*) FROM lake_consistent.{ns}.orders").collect()[0][0] == recount.num_rows == 3
    read = {r["customer"]: r["total"] for r in fresh.sql(f"SELECT * FROM lake_consistent.{ns}.by_customer").collect()}
    assert read == expected == {"ann": 8, "bob": 7}

    # said on purpose: the same INSERT is an ingest (a root with a barrier, no job, no sources)
    sql(spark, "SET spark.sql.consistent.ingestFromLake=true")
    sql(spark, f"INSERT INTO lake_consistent.{ns}.copied {query}")
    sql(spark, "RESET spark.sql.consistent.ingestFromLake")
    copied = cc.catalog.load_table(f"{ns}.copied")
    assert P.JOB not in copied.metadata.properties and P.SOURCES not in copied.metadata.properties
    assert P.BARRIER in summary(main_chain(cc, f"{ns}.copied")[-1])
    rows = copied.scan().to_arrow()
    assert dict(zip(rows["customer"].to_pylist(), rows["total"].to_pylist())) == expected
    # an ingest that reads only its own root (new rows by anti-join) is an ingest, not a forgotten job
    sql(spark, f"INSERT INTO lake_consistent.{ns}.orders SELECT * FROM VALUES ('dee', 4), ('ann', 5) AS v(customer, amount) "
               f"WHERE customer NOT IN (SELECT customer FROM lake_consistent.{ns}.orders)")
    landed = cc.catalog.load_table(f"{ns}.orders").scan().to_arrow()
    assert sorted(landed["customer"].to_pylist()) == ["ann", "ann", "bob", "dee"]


def test_a_sink_with_data_written_outside_any_job_is_refused(env: Any, ns: str) -> None:
    cc, spark = env
    cc.catalog.load_table(f"{ns}.word_counts").append(pa.table({"word": ["x"], "cnt": [1]}, schema=COUNTS.as_arrow()))
    ingest(cc, ns, "a")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    message = error_of(spark, f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}")
    assert "must start empty" in message and "RESET spark.sql.consistent.job" in message, message
    assert P.JOB not in cc.catalog.load_table(f"{ns}.word_counts").metadata.properties


def test_a_root_holding_ingests_never_becomes_a_jobs_sink(env: Any, ns: str) -> None:
    """Issue 42 item 1: rows ingested into a table (here by INSERT INTO with no job) keep it a root; a job set
    afterwards is refused with the table's role and the ways out, never answered ``done``, and every reader still
    reads every row of its source."""
    cc, spark = env
    ingest(cc, ns, "a", "b", "a")
    sql(spark, f"INSERT INTO lake_consistent.{ns}.word_counts VALUES ('a', 2), ('b', 1)")  # an ingest: a root
    before = cc.catalog.load_table(f"{ns}.word_counts").metadata.metadata_log
    sql(spark, "SET spark.sql.consistent.job=word-count")
    message = error_of(spark, f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}")
    assert message.startswith("[CONSISTENT_WRITE.REFUSED]"), message
    assert f"{ns}.word_counts is a root: it holds rows ingested outside any job" in message, message
    assert "write job 'word-count' into a new table" in message and "RESET spark.sql.consistent.job" in message
    after = cc.catalog.load_table(f"{ns}.word_counts").metadata
    assert after.metadata_log == before and P.JOB not in after.properties and P.SOURCES not in after.properties
    fresh = spark.newSession()  # a new session resolves its own cut
    words = cc.catalog.load_table(f"{ns}.words").scan().to_arrow().num_rows
    assert fresh.sql(f"SELECT count(*) FROM lake_consistent.{ns}.words").collect()[0][0] == words == 3


def test_a_root_turned_derived_is_named_and_its_sources_stay_readable(env: Any, ns: str) -> None:
    """Issue 42 item 1, a lake already in the state the defect left (a job registered on a root that held ingests, as
    an earlier version allowed): readers get the source's rows, not an empty cut; the table is refused with
    STRANDED_DATA naming the revision; after that revision and one epoch every reader agrees with a recount."""
    cc, spark = env
    ingest(cc, ns, "a", "b", "a")
    cc.ingest(f"{ns}.word_counts", pa.table({"word": ["a"], "cnt": [9]}, schema=COUNTS.as_arrow()))
    with cc.catalog.load_table(f"{ns}.word_counts").transaction() as tx:  # what the registration used to commit
        tx.set_properties({P.JOB: "word-count", P.SOURCES: json.dumps([f"{ns}.words"])})
    reader = spark.newSession()
    words = cc.catalog.load_table(f"{ns}.words").scan().to_arrow().num_rows
    assert reader.sql(f"SELECT count(*) FROM lake_consistent.{ns}.words").collect()[0][0] == words == 3
    cut = {r["table"]: r.asDict() for r in reader.sql(f"CALL lake_consistent.system.current_cut('{ns}.words')").collect()}
    assert cut[f"{ns}.words"]["snapshot_id"] == main_chain(cc, f"{ns}.words")[-1].snapshot_id
    status = cut[f"{ns}.word_counts"]["status"]
    assert "STRANDED_DATA" in status and "revise" in status and f"{ns}.word_counts" in status, status
    with pytest.raises(Exception) as refused:
        reader.sql(f"SELECT * FROM lake_consistent.{ns}.word_counts").collect()
    first = str(refused.value).strip().splitlines()[0]
    assert "[CONSISTENT_CUT.STRANDED_DATA]" in first and "--mode full" in first, first
    row = cc.status([f"{ns}.word_counts"])[0]
    assert row.error is not None and "ingested while it was a root" in row.error
    with pytest.raises(StrandedDataError) as stranded:  # the library names the same table and the barrier to revise to
        cc.resolve([f"{ns}.word_counts"])
    assert stranded.value.table == f"{ns}.word_counts" and f"--to-barrier {stranded.value.barrier}" in first
    # the way out the error names: revise in mode full (empties it), then the job rebuilds it
    cc.revise(f"{ns}.word_counts", stranded.value.barrier, mode="full")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}")
    epochs = epoch_snapshots(cc, f"{ns}.word_counts")
    source = json.loads(epochs[-1][P.SOURCES])[f"{ns}.words"]
    assert counts_at_head(cc, f"{ns}.word_counts") == recount_words(cc, f"{ns}.words", source) == {"a": 2, "b": 1}
    later = spark.newSession()
    rows = dict(later.sql(f"SELECT word, cnt FROM lake_consistent.{ns}.word_counts").collect())
    assert rows == {"a": 2, "b": 1} and cc.status([f"{ns}.word_counts"])[0].error is None


def test_explain_publishes_nothing(env: Any, ns: str) -> None:
    cc, spark = env
    ingest(cc, ns, "a")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    spark.sql(f"EXPLAIN INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}").collect()
    assert epoch_snapshots(cc, f"{ns}.word_counts") == []


# --- roots: ingests ----------------------------------------------------------------------------------------------
def test_insert_into_a_root_is_an_ingest_and_a_key_lands_once(env: Any, ns: str) -> None:
    cc, spark = env
    first = ingest(cc, ns, "a")
    cc.advance_watermark(f"{ns}.words", first + 60_000)  # W ahead of the clock's next reading: the ingest lands above it
    sql(spark, f"INSERT INTO lake_consistent.{ns}.words VALUES ('b'), ('c')")
    chain = main_chain(cc, f"{ns}.words")
    assert int(summary(chain[-1])[P.BARRIER]) == first + 60_001
    sql(spark, "SET spark.sql.consistent.ingestKey=batch-7")
    sql(spark, f"INSERT INTO lake_consistent.{ns}.words VALUES ('k')")
    sql(spark, f"INSERT INTO lake_consistent.{ns}.words VALUES ('k')")
    words = cc.catalog.load_table(f"{ns}.words").scan().to_arrow()["word"].to_pylist()
    assert Counter(words) == Counter(["a", "b", "c", "k"])
    keyed = [s for s in main_chain(cc, f"{ns}.words") if summary(s).get(P.INGEST_KEY) == "batch-7"]
    assert len(keyed) == 1
    landed, skipped = [r.asDict() for r in sql(spark, "CALL lake_consistent.system.recent_results()")[-2:]]
    assert (landed["action"], landed["job"], landed["snapshot_id"], landed["rows"]) == ("ingest", None, keyed[0].snapshot_id, 1)
    assert landed["barrier"] == int(summary(keyed[0])[P.BARRIER])
    assert (skipped["action"], skipped["barrier"], skipped["snapshot_id"], skipped["rows"]) == (
        "skip", None, keyed[0].snapshot_id, 0)
    message = error_of(spark, f"INSERT OVERWRITE lake_consistent.{ns}.words SELECT 'x'")
    assert message.startswith("[CONSISTENT_WRITE.REFUSED]") and "an ingest appends rows" in message


def test_an_event_time_column_sets_the_ingests_barrier(env: Any, ns: str) -> None:
    """With spark.sql.consistent.eventTimeColumn the barrier is the latest event time written (read from the data
    files' upper bounds), raised above W; event times beyond the clock-skew allowance are refused, nothing written."""
    from pyiceberg.types import TimestamptzType

    cc, spark = env
    cc.catalog.create_table(f"{ns}.events", schema=Schema(NestedField(1, "word", StringType(), required=False),
                                                         NestedField(2, "ts", TimestamptzType(), required=False)))
    sql(spark, "SET spark.sql.consistent.eventTimeColumn=ts")
    sql(spark, f"INSERT INTO lake_consistent.{ns}.events VALUES ('a', TIMESTAMP '2026-01-01 00:00:05 UTC'), "
               "('b', TIMESTAMP '2026-01-01 00:00:09.250 UTC'), ('c', TIMESTAMP '2026-01-01 00:00:01 UTC')")
    chain = main_chain(cc, f"{ns}.events")
    latest = 1767225609250  # 2026-01-01T00:00:09.250Z
    assert int(summary(chain[-1])[P.BARRIER]) == latest
    sql(spark, f"INSERT INTO lake_consistent.{ns}.events VALUES ('late', TIMESTAMP '2026-01-01 00:00:02 UTC')")
    assert int(summary(main_chain(cc, f"{ns}.events")[-1])[P.BARRIER]) == latest + 1  # late: raised above W
    log = cc.catalog.load_table(f"{ns}.events").metadata.metadata_log
    with pytest.raises(Exception, match=r"lies in the future"):
        sql(spark, f"INSERT INTO lake_consistent.{ns}.events VALUES ('x', TIMESTAMP '2999-01-01 00:00:00 UTC')")
    assert cc.catalog.load_table(f"{ns}.events").metadata.metadata_log == log
    message = error_of(spark, f"INSERT INTO lake_consistent.{ns}.words VALUES ('x')")  # words has no ts column
    assert message.startswith("[CONSISTENT_CUT.INVALID_SETTING] spark.sql.consistent.eventTimeColumn=ts"), message
    spark.conf.unset("spark.sql.consistent.eventTimeColumn")


def test_a_dataframe_append_to_a_root_is_an_ingest(env: Any, ns: str) -> None:
    cc, spark = env
    spark.createDataFrame([("a",), ("b",)], "word string").writeTo(f"lake_consistent.{ns}.words").append()
    chain = main_chain(cc, f"{ns}.words")
    assert len(chain) == 1 and P.BARRIER in summary(chain[0])
    assert cc.status([f"{ns}.words"])[0].watermark == int(summary(chain[0])[P.BARRIER])



# --- changes between barriers (protocol §5.10) ----------------------------------------------------------------
def raw_snap(cc: ConsistentCatalog, table: str, barrier: int) -> int | None:
    """snap(t, T) recounted from pyiceberg: the newest snapshot of main whose barrier (the summary's, else on a root
    its commit time; raw barriers rise in this test) is <= T; a derived table's untagged genesis holds nothing."""
    found = None
    for snapshot in main_chain(cc, table):
        tags = summary(snapshot)
        raw = int(tags[P.BARRIER]) if P.BARRIER in tags else (snapshot.timestamp_ms if table.endswith(".words") else None)
        if raw is not None and raw <= barrier:
            found = snapshot.snapshot_id
    return found


def rows_at(cc: ConsistentCatalog, table: str, barrier: int) -> list[tuple]:
    snapshot_id = raw_snap(cc, table, barrier)
    if snapshot_id is None:
        return []
    return [tuple(r.values()) for r in cc.catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow().to_pylist()]


def expected_changes(old: list[tuple], new: list[tuple], keyed: bool) -> Counter:
    """The §5.10 rows recounted: net multiset difference; with a (unique, first-column) key, changed keys as pairs."""
    inserted, deleted = Counter(new) - Counter(old), Counter(old) - Counter(new)
    expected = Counter({(*r, "INSERT"): n for r, n in inserted.items()}) + Counter({(*r, "DELETE"): n for r, n in deleted.items()})
    if keyed:
        for gone in [r for r in deleted if sum(1 for d in deleted if d[0] == r[0]) == 1]:
            came = [r for r in inserted if r[0] == gone[0]]
            if len(came) == 1:
                del expected[(*gone, "DELETE")], expected[(*came[0], "INSERT")]
                expected[(*gone, "UPDATE_BEFORE")] += 1
                expected[(*came[0], "UPDATE_AFTER")] += 1
    return expected


def test_create_changes_view_reads_the_changes_between_two_barriers(env: Any, ns: str) -> None:
    cc, spark = env
    # MERGE epochs do not run on Spark 4.1 yet (test_merge_into_by_keys_is_an_epoch): there the merged table is left out
    merges = not spark.version.startswith("4.1.")
    cc.catalog.create_table(f"{ns}.latest", schema=COUNTS)
    cc.catalog.create_table(f"{ns}.word_log", schema=WORDS)
    cc.catalog.load_table(f"{ns}.words").transaction().set_properties({"write.delete.mode": "merge-on-read"}).commit_transaction()
    statements = [
        ("word-count", f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {COUNT_WORDS.format(ns=ns)}"),
        ("latest", f"MERGE INTO lake_consistent.{ns}.latest t USING ({COUNT_WORDS.format(ns=ns)}) s "
                   "ON t.word = s.word WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"),
        ("word-log", f"INSERT INTO lake_consistent.{ns}.word_log SELECT word FROM lake_consistent.{ns}.words"),
    ]
    tables = [(f"{ns}.words", None), (f"{ns}.word_counts", "word"), (f"{ns}.latest", "word"), (f"{ns}.word_log", None)]
    if not merges:
        statements = [s for s in statements if s[0] != "latest"]
        tables = [t for t in tables if t[0] != f"{ns}.latest"]

    def epochs() -> None:  # an overwrite, a merge and an append epoch of the root's newest barrier
        for job, statement in statements:
            sql(spark, f"SET spark.sql.consistent.job={job}")
            sql(spark, statement)

    first = ingest(cc, ns, "a", "b", "a")
    epochs()
    second = ingest(cc, ns, "c", "a", "d")
    epochs()
    sql(spark, f"DELETE FROM lake.{ns}.words WHERE word = 'c'")  # a plain writer on a root: merge-on-read deletes
    third = cc.status([f"{ns}.words"])[0].watermark
    epochs()
    assert any(task.delete_files for task in cc.catalog.load_table(f"{ns}.words").scan().plan_files())

    reads = {}
    pairs = [(first, second), (second, second), (second, third), (first - 1, third)]
    for table, key in tables:
        for low, high in pairs:
            keyed = f", key => array('{key}')" if key else ""
            (row,) = sql(spark, f"CALL lake_consistent.system.create_changes_view(table => '{table}', from_barrier => "
                                f"{low}, to_barrier => {high}{keyed}, changes_view => 'cv')")
            got = Counter(tuple(r) for r in spark.sql("SELECT * FROM cv").drop("_barrier").collect())
            old, new = rows_at(cc, table, low), rows_at(cc, table, high)
            assert got == expected_changes(old, new, key is not None), (table, low, high, row.read)
            assert (row.from_snapshot_id, row.to_snapshot_id) == (raw_snap(cc, table, low), raw_snap(cc, table, high))
            assert {r[0] for r in spark.sql("SELECT DISTINCT _barrier FROM cv").collect()} <= {row.barrier}
            # Python's read of the same range, checked the same way
            py = Counter(tuple(r.values())[:-1] for r in cc.changes(table, low, high, key=key).to_pylist())
            assert py == got, (table, low, high)
            reads[(table, low, high)] = row.read
    assert reads[(f"{ns}.word_log", first, second)] == "appends"
    assert reads[(f"{ns}.word_counts", first, second)] == "changelog"
    assert reads[(f"{ns}.words", second, third)] == "snapshots"
    assert reads[(f"{ns}.word_counts", second, second)] == "none"
    if merges:
        assert reads[(f"{ns}.latest", second, second)] == "none"
    # the overwrite epoch rewrote the table; its changes are the counts that moved, paired by the key
    sql(spark, f"CALL lake_consistent.system.create_changes_view(table => '{ns}.word_counts', from_barrier => {first}, "
               f"to_barrier => {second}, key => array('word'))")
    assert Counter(tuple(r) for r in spark.sql(f"SELECT word, cnt, _change_type FROM {ns}_word_counts_changes").collect()) == {
        ("a", 2, "UPDATE_BEFORE"): 1, ("a", 3, "UPDATE_AFTER"): 1, ("c", 1, "INSERT"): 1, ("d", 1, "INSERT"): 1}

    # without a declared key, the table's identifier fields pair the updates
    with cc.catalog.load_table(f"{ns}.word_counts").update_schema(allow_incompatible_changes=True) as update:
        update.update_column("word", required=True)
        update.set_identifier_fields("word")
    (row,) = sql(spark, f"CALL lake_consistent.system.create_changes_view(table => '{ns}.word_counts', from_barrier => "
                        f"{second}, to_barrier => {third})")
    assert Counter(tuple(r) for r in spark.sql(f"SELECT * FROM {row.changes_view}").collect()) == {
        ("c", 1, "DELETE", row.barrier): 1}
    (row,) = sql(spark, f"CALL lake_consistent.system.create_changes_view(table => '{ns}.word_counts', from_barrier => "
                        f"{first}, to_barrier => {second})")
    assert Counter(tuple(r)[2] for r in spark.sql(f"SELECT * FROM {row.changes_view}").collect()) == {
        "UPDATE_BEFORE": 1, "UPDATE_AFTER": 1, "INSERT": 2}

    call = f"CALL lake_consistent.system.create_changes_view(table => '{ns}.word_counts', from_barrier => "
    message = error_of(spark, call + f"{second}, to_barrier => {first})")
    assert message.startswith("[CONSISTENT_READ.INVALID_RANGE]") and "lies after to_barrier" in message, message
    message = error_of(spark, call + f"{first}, to_barrier => {third + 10_000})")
    assert message.startswith("[CONSISTENT_READ.INVALID_RANGE]") and f"its watermark is {third}" in message, message
    message = error_of(spark, call + f"{first}, key => array('nope'))")
    assert message.startswith("[CONSISTENT_READ.INVALID_KEY]") and "word, cnt" in message, message
    message = error_of(spark, f"CALL lake_consistent.system.create_changes_view(table => '{ns}.nope', from_barrier => 0)")
    assert message.startswith("[CONSISTENT_READ.TABLE_NOT_FOUND]"), message
    from consistent_catalog.retention import RetentionPolicy

    cc.retention.expire([f"{ns}.words"], RetentionPolicy(older_than=0, keep_last=1), now=third + 3_600_000)
    oldest = cc.history(f"{ns}.words")[-1].barrier
    assert oldest > first
    message = error_of(spark, f"CALL lake_consistent.system.create_changes_view(table => '{ns}.words', from_barrier => {first})")
    assert message.startswith("[CONSISTENT_READ.HISTORY_EXPIRED]") and f"read the changes from {oldest} on" in message, message
