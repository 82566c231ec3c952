"""FLIP-276's three-table pipeline as Structured Streaming queries (``consistent-catalog demo --streaming``).

One Spark application (local[2]) runs three streaming queries over the demo's tables (protocol §7):

- a **streaming root**: Spark's file source watches ``DIR/streaming/incoming``; each micro-batch of
  JSON files (``{"word": "w017"}`` per line) lands in ``demo.words`` as one snapshot, exactly once;
- **word-count** and **count-histogram** as **streaming epoch jobs**, one epoch per trigger.

A feeder thread writes a file of words every ``interval`` seconds; a sampler reads the
repeatable-read cut over the three tables every ``sample_every`` seconds while it runs and checks
protocol §7's invariants at each one (``check``; once per distinct cut: the same snapshot ids
hold the same rows). Checkpoints live in ``DIR/streaming/checkpoints``,
so a second run on the same directory resumes (files already ingested are not ingested again).

This module sits with the engines and so cannot import ``consistent_catalog.demo`` (the layer
above): the invariant check is passed in (the CLI passes ``demo.check_invariants``) and the three
tables are declared again here with the same names, columns and SQL.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from consistent_catalog.catalog import ConsistentCatalog
from consistent_catalog.epoch import EpochContext, EpochJob
from consistent_catalog.exceptions import ConsistentCatalogError, InvalidInputError, TableNotFoundError
from consistent_catalog.read import ConsistentRead
from consistent_catalog.report import TableStatus
from consistent_catalog.spark.job import SparkEpochJob
from consistent_catalog.spark.streaming import StreamingQueryHandle, start_root_stream, start_streaming_job, trigger_ms
from consistent_catalog.util.time import fmt_barrier, now_ms

WORDS, COUNTS, HISTOGRAM = "demo.words", "demo.word_counts", "demo.count_histogram"
TABLES = (WORDS, COUNTS, HISTOGRAM)
COLUMNS = {WORDS: "word string", COUNTS: "word string, cnt bigint", HISTOGRAM: "cnt bigint, words bigint"}
WORD_COUNT_SQL = "SELECT word, count(*) AS cnt FROM words GROUP BY word"
HISTOGRAM_SQL = "SELECT cnt, count(*) AS words FROM word_counts GROUP BY cnt"
VOCABULARY = [f"w{i:03d}" for i in range(200)]

Check = Callable[[ConsistentRead], "list[str]"]


def file_words(index: int, rows: int) -> list[str]:
    """Deterministic words of the ``index``-th file (Zipf-like, so counts differ)."""
    rng = random.Random(index)
    weights = [1 / (i + 1) for i in range(len(VOCABULARY))]
    return rng.choices(VOCABULARY, weights=weights, k=rows)


def write_words_file(directory: Path, index: int, words: list[str]) -> Path:
    """Write one JSON-lines file atomically: a hidden temporary name (the file source skips those), then a rename."""
    target = directory / f"words-{index:06d}.json"
    temporary = directory / f".words-{index:06d}.json.tmp"
    temporary.write_text("".join(json.dumps({"word": w}) + "\n" for w in words), encoding="utf-8")
    os.replace(temporary, target)
    return target


def fed_rows(directory: Path) -> tuple[int, int]:
    """(files, lines) already in the watched directory."""
    files = sorted(directory.glob("words-*.json"))
    return len(files), sum(sum(1 for _ in f.open(encoding="utf-8")) for f in files)


def ensure_streaming_tables(cc: ConsistentCatalog, spark: Any, spark_catalog: str, *, keyed: bool = False) -> None:
    """The three tables, created through Spark when missing (same columns as ``consistent-catalog demo``).

    ``keyed`` (the native pipeline): ``count_histogram`` is keyed by ``cnt`` (``NOT NULL``, its identifier field),
    which the native ``count-histogram`` query merges each micro-batch into (update output mode, protocol §5.7),
    and ``word_counts.cnt``, a count, is ``NOT NULL`` too, so the key the query groups by cannot be null.
    """
    if ("demo",) not in cc.catalog.list_namespaces():
        cc.catalog.create_namespace("demo")
    for name, columns in COLUMNS.items():
        try:
            cc.load_table(name)
        except TableNotFoundError:
            if keyed and name in (COUNTS, HISTOGRAM):
                columns = columns.replace("cnt bigint", "cnt bigint NOT NULL")
            spark.sql(f"CREATE TABLE IF NOT EXISTS {spark_catalog}.{name} ({columns}) USING iceberg")
            if keyed and name == HISTOGRAM:
                spark.sql(f"ALTER TABLE {spark_catalog}.{name} SET IDENTIFIER FIELDS cnt")


def native_histogram_fits(cc: ConsistentCatalog) -> bool:
    """Whether ``count_histogram`` is keyed by ``cnt`` and ``word_counts.cnt`` is ``NOT NULL`` (``keyed`` tables
    above; tables an older demo made are neither)."""
    histogram, counts = cc.load_table(HISTOGRAM).schema(), cc.load_table(COUNTS).schema()
    return ([histogram.find_column_name(i) for i in histogram.identifier_field_ids] == ["cnt"]
            and counts.find_field("cnt").required)


#: Shuffle partitions of the native pipeline's stateful queries (word-count, count-histogram): their state is at most
#: the vocabulary's 200 words, so one partition holds it; two would double each micro-batch's state-store tasks and
#: commits and the files each epoch writes (and count-histogram's merge then rewrites), on a machine whose two cores
#: the three queries share. Spark keeps a query's number in its checkpoint: a query resumed from an older checkpoint
#: keeps the number it started with.
STATE_PARTITIONS = 1


@contextmanager
def state_partitions(spark: Any, partitions: int = STATE_PARTITIONS) -> Iterator[None]:
    """``spark.sql.shuffle.partitions`` at ``partitions`` while streaming queries are started in this block (a query
    takes a copy of the session's settings when it starts), the session's own value again after it."""
    key = "spark.sql.shuffle.partitions"
    before = spark.conf.get(key)
    spark.conf.set(key, str(partitions))
    try:
        yield
    finally:
        spark.conf.set(key, before)


def start_native_histogram(spark: Any, consistent: str, *, checkpoint: str, trigger: str, wait_ms: int,
                           source: str = COUNTS, sink: str = HISTOGRAM) -> Any:
    """``count-histogram`` as a plain streaming query: ``word_counts``' changes (protocol §5.10) counted by ``cnt``
    with a sign (+1 for a row that appears, -1 for one that goes), in update output mode, so each micro-batch
    merges the buckets whose count changed into ``count_histogram`` and deletes those back at 0 words.
    ``source``/``sink``: the two tables (``word_counts``-like ``word, cnt NOT NULL``; ``count_histogram``-like,
    keyed by ``cnt``) when not the demo's (the streaming kill tests' worker, tests/harness/streaming_worker.py). Its aggregation state has ``STATE_PARTITIONS`` partitions."""
    from pyspark.sql import functions as F

    sign = F.when(F.col("_change_type").isin("INSERT", "UPDATE_AFTER"), 1).otherwise(-1)
    histogram = (spark.readStream.option("consistent.read", "changes").option("consistent.waitFor", f"{wait_ms}ms")
                 .table(f"{consistent}.{source}").groupBy("cnt").agg(F.sum(sign).alias("words")))
    with state_partitions(spark):
        return (histogram.writeStream.queryName("count-histogram").outputMode("update")
                .option("consistent.job", "count-histogram").option("consistent.deleteWhere", "words = 0")
                .option("checkpointLocation", checkpoint).trigger(processingTime=trigger)
                .toTable(f"{consistent}.{sink}"))


def run_streaming_demo(
    directory: str | Path,
    *,
    check: Check,
    cc: ConsistentCatalog | None = None,
    spark: Any = None,
    files: int = 20,
    rows_per_file: int = 200,
    interval: float = 1.0,
    trigger: str = "1 second",
    sample_every: float = 1.0,
    catch_up_timeout: float = 300.0,
    takeover: bool = False,
    spark_catalog: str | None = None,
    on_cut: Callable[[ConsistentRead], Any] | None = None,
    echo: Callable[[str], Any] = print,
    transforms: Mapping[str, Callable[[EpochContext], Any]] | None = None,
    native: bool = False,
) -> dict[str, Any]:
    """Feed ``files`` files of ``rows_per_file`` words, one per ``interval`` s, through the streaming pipeline.

    Samples and checks a cut every ``sample_every`` s while it runs, waits until every word fed is
    in a consistent cut over the three tables (at most ``catch_up_timeout`` s), stops the queries
    (the jobs unregister) and returns the demo's report: ``{"cut", "cuts_checked", "violations",
    "delays_ms"}`` (protocol §10.8; ``delays_ms``: now minus the cut's barrier at each sample taken
    while files were being fed). The catalog is ``cc`` or a SQLite catalog under ``directory``; the
    session is ``spark`` or a local[2] one over the same catalog (stopped at the end), whose Iceberg
    catalog is named ``spark_catalog`` (default: the catalog's name). ``transforms`` (job id ->
    pyarrow transform, ``"word-count"`` and ``"count-histogram"``): run the jobs as pyiceberg
    ``EpochJob``s, still each driven by its own streaming query (the CLI's ``--engine pyiceberg``);
    by default they are ``SparkEpochJob``s with the SQL above.

    ``native``: the three hops are plain streaming queries through the plugin's consistent catalog, no Python in
    their path (protocol §5.7): the root (``toTable("<catalog>_consistent.demo.words")``), ``word-count``
    (``readStream.table(...).groupBy("word").count()`` in complete mode with the option ``consistent.job``) and
    ``count-histogram`` (``word_counts``' changes counted by ``cnt`` with a sign, in update mode with
    ``consistent.deleteWhere``: ``start_native_histogram``), the two aggregations with ``STATE_PARTITIONS`` shuffle
    partitions. ``count-histogram`` stays a Python streaming job when
    ``count_histogram`` has no identifier field ``cnt`` (a table an older demo made).
    """
    root = Path(directory).resolve()
    if cc is None:
        cc = _open_catalog(root)
    spark_catalog = spark_catalog or cc.name
    own_session = spark is None
    if own_session:
        spark = _session(cc)
    incoming = root / "streaming" / "incoming"
    checkpoints = root / "streaming" / "checkpoints"
    incoming.mkdir(parents=True, exist_ok=True)
    checkpoints.mkdir(parents=True, exist_ok=True)
    violations: list[str] = []
    delays: list[int] = []
    cuts_checked = 0
    queries: list[StreamingQueryHandle] = []
    try:
        ensure_streaming_tables(cc, spark, spark_catalog, keyed=native)
        words_stream = spark.readStream.schema(COLUMNS[WORDS]).json(str(incoming))
        consistent = f"{spark_catalog}_consistent"
        if native:
            queries.append(words_stream.writeStream.queryName("words")
                           .option("checkpointLocation", str(checkpoints / "native-words"))
                           .trigger(processingTime=trigger).toTable(f"{consistent}.{WORDS}"))
        else:
            queries.append(start_root_stream(words_stream, cc, WORDS, checkpoint_location=str(checkpoints / "words"),
                                             trigger=trigger, spark_catalog=spark_catalog))
        # a trigger that finds no new barrier waits most of its interval for one, as the Python jobs do
        wait_ms = int((trigger_ms(trigger) or 0) * 0.8)
        native_histogram = native and native_histogram_fits(cc)
        if native and not native_histogram:
            echo(f"{HISTOGRAM} is not keyed by cnt NOT NULL (an earlier demo made the tables): count-histogram runs as a "
                 "Python streaming job; a new --dir runs it natively")
        for job_id, source, sink, sql in (("word-count", WORDS, COUNTS, WORD_COUNT_SQL),
                                          ("count-histogram", COUNTS, HISTOGRAM, HISTOGRAM_SQL)):
            job: EpochJob
            if native_histogram and job_id == "count-histogram":
                queries.append(start_native_histogram(spark, consistent, checkpoint=str(checkpoints / f"native-{job_id}"),
                                                      trigger=trigger, wait_ms=wait_ms))
                continue
            if native and job_id == "word-count":
                counts = (spark.readStream.option("consistent.waitFor", f"{wait_ms}ms").table(f"{consistent}.{WORDS}")
                          .groupBy("word").count().withColumnRenamed("count", "cnt"))
                with state_partitions(spark):
                    queries.append(counts.writeStream.queryName(job_id).outputMode("complete")
                                   .option("consistent.job", job_id)
                                   .option("checkpointLocation", str(checkpoints / f"native-{job_id}"))
                                   .trigger(processingTime=trigger).toTable(f"{consistent}.{COUNTS}"))
                continue
            if transforms is not None:
                job = EpochJob(cc, job_id, sources=[source], sinks=[sink], transform=transforms[job_id],
                               mode="overwrite", takeover=takeover)
            else:
                job = SparkEpochJob(cc, spark, job_id, sources=[source], sinks=[sink], transform=sql,
                                    mode="overwrite", takeover=takeover, spark_catalog=spark_catalog)
            queries.append(start_streaming_job(job, checkpoint_location=str(checkpoints / job_id), trigger=trigger,
                                               spark=spark))
        first, _ = fed_rows(incoming)
        total = files
        if files > 0:  # warm-up: the first file, then wait for the first cut (JVM, first commits), then stream
            write_words_file(incoming, first, file_words(first, rows_per_file))
            first, files = first + 1, files - 1
        _wait_for_cut(cc, queries, catch_up_timeout)
        feeding = threading.Event()
        feeding.set()

        def feed() -> None:
            try:
                for index in range(first, first + files):
                    started = time.monotonic()
                    write_words_file(incoming, index, file_words(index, rows_per_file))
                    time.sleep(max(0.0, interval - (time.monotonic() - started)))
            finally:
                feeding.clear()

        feeder = threading.Thread(target=feed, name="demo-feeder", daemon=True)
        feeder.start()
        echo(f"the first of {total} files warmed the queries up ({', '.join(q.name for q in queries)}, trigger "
             f"{trigger}); streaming the other {files}, {rows_per_file} words each, into {incoming}, one every "
             f"{interval:g}s")
        last_barrier: int | None = None
        checked: dict[tuple[Any, ...], list[str]] = {}  # a cut's snapshot ids -> its violations (checked once)
        read: ConsistentRead | None = None
        deadline: float | None = None
        while True:
            time.sleep(sample_every)
            _check_running(queries)
            try:
                read = cc.read(TABLES)
            except ConsistentCatalogError:  # no cut yet: a table has no watermark (its job has not published)
                read = None
            if read is not None and read.cut.barrier is not None:
                ids = tuple(part.snapshot_id for part in read.cut.tables.values())
                if ids not in checked:  # the same snapshots hold the same rows: no need to read them again
                    checked[ids] = check(read)
                    violations += checked[ids]
                    cuts_checked += 1
                    if on_cut is not None:
                        on_cut(read)
                if feeding.is_set():
                    delays.append(now_ms() - read.cut.barrier)
                if read.cut.barrier != last_barrier:
                    last_barrier = read.cut.barrier
                    echo(f"cut at {fmt_barrier(read.cut.barrier)}: {_rows(read, WORDS)} words, "
                         f"{(now_ms() - read.cut.barrier) / 1000:.1f}s behind, invariants "
                         f"{'OK' if not checked[ids] else 'VIOLATED: ' + '; '.join(checked[ids])}")
            if feeding.is_set():
                continue
            deadline = deadline or time.monotonic() + catch_up_timeout
            _, lines = fed_rows(incoming)
            if read is not None and _rows(read, WORDS) == lines:
                break
            if time.monotonic() > deadline:
                raise InvalidInputError(f"the pipeline did not catch up with the {lines} words fed within "
                                        f"{catch_up_timeout:g}s; `consistent-catalog status` shows where it stands")
        for query in reversed(queries):
            query.stop()
        final = cc.read(TABLES)
        problems = check(final)
        violations += problems
        cuts_checked += 1
        for row in _released_status(cc, RELEASE_TIMEOUT_S):
            echo(f"  {row.table:22} {row.role:8} job={row.job or '-':16} lease={row.lease:8} "
                 f"watermark={fmt_barrier(row.watermark)}")
        if delays:
            echo(f"end-to-end delay (now - cut barrier), sampled every {sample_every:g}s while files were fed: median "
                 f"{statistics.median(delays) / 1000:.1f}s, max {max(delays) / 1000:.1f}s over {len(delays)} samples "
                 "(the cut lines above show each new cut once)")
        echo(f"protocol §7 invariants at {cuts_checked} distinct cuts (each checked once, the final one included): "
             f"{'OK' if not violations else 'VIOLATED: ' + '; '.join(violations)}")
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
        if own_session:
            spark.stop()
    return {"cut": final.cut.to_json(), "cuts_checked": cuts_checked, "violations": violations, "delays_ms": delays}


RELEASE_TIMEOUT_S = 15.0
"""How long the summary waits for the stopped queries' leases to be released."""


def _released_status(cc: ConsistentCatalog, timeout: float) -> list[TableStatus]:
    """``cc.status(TABLES)`` once the stopped queries released their sinks: the plugin unregisters a native query's
    job from Spark's listener thread, just after ``stop()`` returned, so a status read at once still shows its lease
    live. After ``timeout`` seconds: as it is (a lease still live then is one to look at)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = cc.status(TABLES)
        if all(row.lease != "live" for row in rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def _rows(read: ConsistentRead, table: str) -> int:
    """Rows of ``table`` in the cut, from its snapshot's summary (a scan only if the summary lacks the count)."""
    snapshot_id = read.cut.tables[table].snapshot_id
    if snapshot_id is None:
        return 0
    snapshot = read.table(table).metadata.snapshot_by_id(snapshot_id)
    total = snapshot.summary.additional_properties.get("total-records") if snapshot and snapshot.summary else None
    return int(total) if total is not None else read.to_arrow(table).num_rows


def _check_running(queries: list[StreamingQueryHandle]) -> None:
    for query in queries:
        if not query.isActive:
            raise InvalidInputError(f"streaming query {query.name} stopped: {query.exception()}")


def _wait_for_cut(cc: ConsistentCatalog, queries: list[StreamingQueryHandle], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _check_running(queries)
        try:
            cc.resolve(TABLES)
            return
        except ConsistentCatalogError:
            time.sleep(0.5)
    raise InvalidInputError(f"no consistent cut over {', '.join(TABLES)} within {timeout:g}s of starting the queries")


def _open_catalog(root: Path) -> ConsistentCatalog:
    from pyiceberg.catalog.sql import SqlCatalog

    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    return ConsistentCatalog(SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse"))


def _session(cc: ConsistentCatalog) -> Any:
    from consistent_catalog.spark.session import build_session

    properties = cc.catalog.properties
    if "uri" not in properties or "warehouse" not in properties:
        raise InvalidInputError(f"the streaming demo needs a SQL catalog with a uri and a warehouse; {cc.name!r} has neither")
    return build_session(properties["uri"], properties["warehouse"], name=cc.name, app_name="flip-streaming-demo")
