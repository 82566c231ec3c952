"""Benchmark: the plugin's native streaming sink (issue 24) — a micro-batch landed by
``writeStream.toTable("lake_consistent.<ns>.root_consistent")`` (one keyed ingest per batch) vs. the same query
written by ``toTable("lake.<ns>.root_plain")`` (Iceberg's own streaming sink).

Not a test. One local[2] Spark session (``build_session``: the plain catalog and the consistent one over the same
catalog database, the plugin jar of the checkout (``build/jvm/spark-<line>/``) as it is — this script never builds it). Per
``--rows`` size N, a namespace ``bench_<size>`` with three root tables created identically by pyiceberg
(``id bigint, word string, bucket int, amount double``, no properties) and an input directory. The query, the same
for every contender except its sink::

    spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", F).parquet(<input directory>)
         .writeStream.option("checkpointLocation", <its own>).trigger(availableNow=True)
         .toTable("lake_consistent.bench_1m.root_consistent")      # consistent: the plugin's sink
         .toTable("lake.bench_1m.root_plain")                      # plain: Iceberg's SparkWrite streaming append
         .toTable("lake.bench_1m.root_plain2")                     # plain2: the same again, the A/A control
         .format("noop").start()                                   # noop: the same query, rows dropped

Why files: a micro-batch of exactly N rows, deterministically, and a query that stops by itself after them
(``Trigger.AvailableNow`` with ``maxFilesPerTrigger``), so no batch is ever interrupted by a stop. Before each
round the script writes K batches' worth of Parquet files (F files of N/F rows per batch, F = 2 so that both
cores write; ids continue from the last round; pyarrow, not timed) into the shared input directory; each
contender's query, with its own checkpoint, then reads exactly those K batches. Each round runs ``noop`` first
(it reads the same files, so no sink finds them colder), then ``plain``, ``consistent`` and ``plain2`` in the next
of their orders (all six permutations in turn, so each pair runs in both orders alike; without the control plain
and consistent alternate, plain first in even rounds). The first ``--warmup`` rounds are dropped, and the first
micro-batch of every block (it carries the query's start) is reported apart. ``plain2`` / ``plain`` measures what
two identical sinks differ by in the same run: the noise floor the consistent / plain ratio has to be read against
(``--no-control`` leaves it out).

Per micro-batch, Spark's own progress (``query.recentProgress``): ``triggerExecution`` (the whole micro-batch: the
offsets log, planning, the batch, the commit log) and ``addBatch`` (running the batch: reading the files, writing
the data files and the sink's commit). Reported per size: median and p90 per contender, the ratio of medians
consistent / plain (target <= 1.05 at 100k and 1M rows), the median of the per-round ratios (min-max) and the
order-balanced ratio, the fixed cost per batch (median consistent - median plain; read it at 1k rows), the sink's
own part ``addBatch - noop's addBatch`` and its ratio, the phases of the batch (planning, Spark's logs, the file
listing, the rest) and, timed at the end of each size, what one catalog load of the sink table costs in the same JVM
(Iceberg's ``loadTable`` through py4j): the consistent sink loads the table more often than Iceberg's (its write
builder, the ingest's key check, the fenced commit), so this is the unit its fixed cost is made of.

The sink's commit is timed from the driver's own log: the session starts with a log4j2 configuration of this script
(``-Dlog4j2.configurationFile``, the console as Spark's default) that also writes, with epoch milliseconds, Spark's
write node's "is committing" / "committed" lines around ``StreamingWrite.commit`` and Iceberg's ``SparkWrite``
"Committed in N ms" (its ``SnapshotProducer.commit``) to a file: so the consistent commit's extra time splits into
the fenced catalog commit (inside Iceberg's snapshot commit) and the ingest's own work around it.

Checked after every block (not timed), from the tables' metadata read with pyiceberg: each of the block's batches
of the consistent query landed exactly once, on ``main``, as a snapshot whose summary carries the key
``<query id>/<batch id>`` (``consistent.ingest-key``), a ``consistent.barrier`` above the previous batch's and
``added-records`` = N; each batch of the plain query once, with Iceberg's ``spark.sql.streaming.queryId`` /
``epochId`` and N records; every block ran K batches of N rows. At the end: ``total-records`` of both heads.

``--catalog rest``: the same through the project's REST server (``tests/harness/rest_server.py``, a JVM of its own
on the same cores); with ``--count-requests`` Spark's requests go through a counting proxy (``tests/harness/proxy.py``
without delay) and the report gives the catalog round trips per micro-batch by kind (a diagnostic: the proxy adds
its own latency; run it apart from the figures).

Times move by +-30 % on the shared 2 cores: compare the per-round ratios and report the load average.

Usage:
    python -m bench.bench_streaming_sink [--rows 1000000,100000,1000] [--rounds R] [--warmup W] [--batches K]
                                         [--files-per-batch 2] [--no-noop] [--catalog sqlite|rest]
                                         [--count-requests] [--quick] [--json] [--save FILE] [--dir D]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_sql_writer import (
    CountingProxy,
    _git_commit,
    _spark_version,
    ms,
    signed_ms,
    size_label,
    spread,
    stop_jvm,
)
from bench.common import load
from consistent_catalog.properties import BARRIER, INGEST_KEY

ROWS_DEFAULT = "1000000,100000,1000"
QUICK_ROWS = "20000,1000"
#: Rounds, warm-up rounds and micro-batches per block by rows per batch (the first batch of a block is set apart):
#: 12 measured 1M-row batches per sink, 24 of 100k rows, 40 of 1k rows.
PLAN_BY_SIZE = ((1_000_000, (4, 1, 4)), (100_000, (6, 1, 5)), (0, (8, 1, 6)))
QUICK_PLAN = (2, 1, 3)
SPARK_SCHEMA = "id BIGINT, word STRING, bucket INT, amount DOUBLE"
VOCABULARY = 1000
ICEBERG_QUERY_ID = "spark.sql.streaming.queryId"
ICEBERG_EPOCH_ID = "spark.sql.streaming.epochId"
SINKS = ("plain", "consistent")
#: The A/A control: a second plain sink (its own table and checkpoint), whose ratio to ``plain`` is the noise floor.
CONTROL = "plain2"
ORDER = ("noop", "plain", "consistent", CONTROL)
DURATIONS = ("triggerExecution", "addBatch", "walCommit", "commitOffsets", "latestOffset", "queryPlanning", "getBatch")


# --- setups ---------------------------------------------------------------------------------------
@dataclass
class Setup:
    """The catalog both sinks' tables live in: ``plain`` (Iceberg's SparkCatalog) and ``<plain>_consistent`` in Spark,
    ``catalog`` (pyiceberg) for creating and checking the tables."""

    label: str
    plain: str
    catalog: Any
    uri: str  # what the Spark session gets (the counting proxy's, with --count-requests)
    warehouse: Any
    closers: list[Callable[[], None]] = field(default_factory=list)
    proxy: Any = None

    @property
    def consistent(self) -> str:
        return f"{self.plain}_consistent"


def sqlite_setup(work: Path) -> Setup:
    from pyiceberg.catalog.sql import SqlCatalog

    (work / "warehouse").mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{work}/catalog.db"
    catalog = SqlCatalog("lake", uri=uri, warehouse=f"file://{work}/warehouse")  # creates the database before Spark
    return Setup("sqlite", "lake", catalog, uri, work / "warehouse", closers=[catalog.engine.dispose])


def rest_setup(work: Path, count_requests: bool) -> Setup:
    from tests.harness.rest_server import RestCatalogServer

    server = RestCatalogServer(work / "server").start()
    warehouse = f"file://{work}/warehouse"
    setup = Setup("rest", "rest", server.catalog(warehouse=warehouse), server.uri, warehouse, closers=[server.stop])
    if count_requests:  # Spark's requests only: pyiceberg's checks go to the server directly
        setup.proxy = CountingProxy(server.port).start()  # type: ignore[arg-type]
        setup.uri = setup.proxy.uri
        setup.closers.insert(0, setup.proxy.stop)
    return setup


# --- input ----------------------------------------------------------------------------------------
class Input:
    """The shared input directory of one size: Parquet files of consecutive ids, ``files_per_batch`` per batch."""

    def __init__(self, directory: Path, rows: int, files_per_batch: int) -> None:
        self.directory, self.rows, self.files_per_batch = directory, rows, files_per_batch
        directory.mkdir(parents=True, exist_ok=True)
        self.batches = 0
        self.files = 0

    def add(self, batches: int) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        words = pa.array([f"w{i}" for i in range(VOCABULARY)])
        base, extra = divmod(self.rows, self.files_per_batch)
        for _ in range(batches):
            first = self.batches * self.rows
            for part in range(self.files_per_batch):
                n = base + (extra if part == self.files_per_batch - 1 else 0)
                ids = np.arange(first, first + n, dtype=np.int64)
                first += n
                table = pa.table({
                    "id": ids,
                    "word": pa.DictionaryArray.from_arrays(pa.array((ids % VOCABULARY).astype(np.int32)), words)
                    .dictionary_decode(),
                    "bucket": (ids % 97).astype(np.int32),
                    "amount": ids * 0.5,
                })
                name = f"part-{self.files:06d}.parquet"
                hidden = self.directory / f".{name}.tmp"  # Spark's file source skips names starting with a dot
                pq.write_table(table, hidden)
                hidden.rename(self.directory / name)
                self.files += 1
            self.batches += 1


# --- the sink's commit, from the driver's log ----------------------------------------------------------
#: Spark's write node logs "Data source write support MicroBatchWrite[epoch: N, writer: W] is committing." and
#: "... committed." around the sink's commit (V2TableWriteExec.writeWithV2), Iceberg's SparkWrite "Committed in N ms"
#: around its snapshot commit; the script's log4j2 configuration sends just these, with epoch milliseconds, to a file.
LOG4J2 = """status = error
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
appender.commits.type = File
appender.commits.name = commits
appender.commits.fileName = {path}
appender.commits.layout.type = PatternLayout
appender.commits.layout.pattern = %d{UNIX_MILLIS}|%t|%c{1}|%m%n
logger.write.name = org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec
logger.write.level = info
logger.write.additivity = false
logger.write.appenderRef.commits.ref = commits
logger.iceberg.name = org.apache.iceberg.spark.source.SparkWrite
logger.iceberg.level = info
logger.iceberg.additivity = false
logger.iceberg.appenderRef.commits.ref = commits
"""
COMMIT_LINE = re.compile(r"MicroBatchWrite\[epoch: (\d+), writer: .*\] (is committing|committed)\.$")
ICEBERG_COMMITTED = re.compile(r"^Committed in (\d+) ms$")


class CommitLog:
    """The driver's log of sink commits (``LOG4J2``): per micro-batch of a block, how long the sink's commit took
    (Spark calling ``StreamingWrite.commit``: for the consistent sink the whole keyed ingest, for the plain one
    Iceberg's streaming commit) and, inside it, Iceberg's snapshot commit (``SnapshotProducer.commit``: for the
    consistent sink, the fenced catalog commit)."""

    def __init__(self, work: Path) -> None:
        self.path = work / "commits.log"
        self.config = work / "log4j2-bench.properties"
        self.config.write_text(LOG4J2.replace("{path}", str(self.path)), encoding="utf-8")
        self.offset = 0

    def java_option(self) -> str:
        return f"-Dlog4j2.configurationFile=file:{self.config}"

    def read_block(self) -> dict[int, dict[str, float]]:
        """{batch id: {"commit": s, "snapshot_commit": s}} of the lines written since the last call."""
        if not self.path.exists():
            return {}
        with open(self.path, encoding="utf-8") as f:
            f.seek(self.offset)
            text = f.read()
            self.offset = f.tell()
        out: dict[int, dict[str, float]] = {}
        open_commits: dict[str, tuple[int, int]] = {}  # thread -> (batch, start ms)
        for line in text.splitlines():
            parts = line.split("|", 3)
            if len(parts) != 4 or not parts[0].isdigit():
                continue
            at, thread, _, message = int(parts[0]), parts[1], parts[2], parts[3]
            if (match := COMMIT_LINE.search(message)) is not None:
                batch = int(match.group(1))
                if match.group(2) == "is committing":
                    open_commits[thread] = (batch, at)
                elif thread in open_commits and open_commits[thread][0] == batch:
                    out.setdefault(batch, {})["commit"] = (at - open_commits.pop(thread)[1]) / 1000
            elif (match := ICEBERG_COMMITTED.match(message)) is not None and thread in open_commits:
                out.setdefault(open_commits[thread][0], {})["snapshot_commit"] = int(match.group(1)) / 1000
        return out


# --- one size ---------------------------------------------------------------------------------------
class Size:
    """One size's namespace, tables, input and checkpoints; starts the contenders' queries and checks what landed."""

    def __init__(self, spark: Any, setup: Setup, work: Path, rows: int, files_per_batch: int,
                 commit_log: CommitLog | None = None, control: bool = True) -> None:
        from pyiceberg.schema import Schema
        from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType

        self.spark, self.setup, self.rows, self.commit_log = spark, setup, rows, commit_log
        self.ns = f"bench_{size_label(rows)}"
        self.work = work / self.ns
        self.input = Input(self.work / "in", rows, files_per_batch)
        schema = Schema(NestedField(1, "id", LongType(), required=False),
                        NestedField(2, "word", StringType(), required=False),
                        NestedField(3, "bucket", IntegerType(), required=False),
                        NestedField(4, "amount", DoubleType(), required=False))
        setup.catalog.create_namespace(self.ns)
        self.sinks = SINKS + ((CONTROL,) if control else ())
        self.tables = {sink: f"{self.ns}.root_{sink}" for sink in self.sinks}
        for table in self.tables.values():
            setup.catalog.create_table(table, schema=schema)
        self.batches_landed = dict.fromkeys(self.sinks, 0)
        self.last_barrier: int | None = None
        self.query_ids: dict[str, str] = {}

    def target(self, contender: str) -> str:
        if contender == "consistent":
            return f"{self.setup.consistent}.{self.tables['consistent']}"
        return f"{self.setup.plain}.{self.tables[contender]}"

    def start(self, contender: str) -> Any:
        stream = (self.spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", self.input.files_per_batch)
                  .parquet(str(self.input.directory)))
        writer = (stream.writeStream.option("checkpointLocation", str(self.work / "chk" / contender))
                  .trigger(availableNow=True))
        if contender == "noop":
            return writer.format("noop").start()
        return writer.toTable(self.target(contender))

    def check(self, contender: str, query_id: str, batch_ids: list[int]) -> list[str]:
        """What the block's batches left in the table, read with pyiceberg: each batch once, on main, N records, and
        for the consistent sink its key and a rising barrier."""
        if contender == "noop":
            return []
        metadata = self.setup.catalog.load_table(self.tables[contender]).metadata
        main = _main_chain(metadata)
        problems = []
        if contender == "consistent":
            everywhere = Counter(s.summary.additional_properties.get(INGEST_KEY) for s in metadata.snapshots
                                 if s.summary is not None)
            on_main = {s.summary.additional_properties.get(INGEST_KEY): s for s in main}
            for batch in batch_ids:
                key = f"{query_id}/{batch}"
                snapshot = on_main.get(key)
                if everywhere[key] != 1 or snapshot is None:
                    problems.append(f"{self.ns} consistent batch {batch}: key {key} in {everywhere[key]} snapshots, "
                                    f"{'not ' if snapshot is None else ''}on main")
                    continue
                summary = snapshot.summary.additional_properties
                if int(summary.get("added-records", -1)) != self.rows:
                    problems.append(f"{self.ns} consistent batch {batch}: {summary.get('added-records')} records")
                barrier = int(summary[BARRIER]) if BARRIER in summary else None
                if barrier is None or (self.last_barrier is not None and barrier <= self.last_barrier):
                    problems.append(f"{self.ns} consistent batch {batch}: barrier {barrier} after {self.last_barrier}")
                self.last_barrier = barrier
        else:
            epochs = Counter((s.summary.additional_properties.get(ICEBERG_QUERY_ID),
                              s.summary.additional_properties.get(ICEBERG_EPOCH_ID)) for s in main)
            records = {s.summary.additional_properties.get(ICEBERG_EPOCH_ID): s.summary.additional_properties.get(
                "added-records") for s in main if s.summary.additional_properties.get(ICEBERG_QUERY_ID) == query_id}
            for batch in batch_ids:
                if epochs[(query_id, str(batch))] != 1:
                    problems.append(f"{self.ns} {contender} batch {batch}: in {epochs[(query_id, str(batch))]} snapshots "
                                    "on main")
                elif int(records[str(batch)]) != self.rows:
                    problems.append(f"{self.ns} {contender} batch {batch}: {records[str(batch)]} records")
        self.batches_landed[contender] += len(batch_ids)
        return problems

    def check_totals(self) -> tuple[dict[str, Any], list[str]]:
        """Every sink's head's ``total-records`` against the batches landed; snapshots and keyed ones per table."""
        problems, out = [], {}
        for sink in self.sinks:
            metadata = self.setup.catalog.load_table(self.tables[sink]).metadata
            head = metadata.current_snapshot()
            total = int(head.summary.additional_properties.get("total-records", -1)) if head is not None else 0
            keyed = sum(1 for s in metadata.snapshots if s.summary is not None
                        and INGEST_KEY in s.summary.additional_properties)
            out[sink] = {"snapshots": len(metadata.snapshots), "keyed": keyed, "total_records": total}
            if total != self.batches_landed[sink] * self.rows:
                problems.append(f"{self.ns} {sink}: total-records {total}, expected "
                                f"{self.batches_landed[sink]} x {self.rows}")
        if out["consistent"]["keyed"] != self.batches_landed["consistent"]:
            problems.append(f"{self.ns}: {out['consistent']['keyed']} keyed snapshots for "
                            f"{self.batches_landed['consistent']} batches")
        return out, problems


def _main_chain(metadata: Any) -> list[Any]:
    out, snapshot = [], metadata.snapshot_by_name("main")
    while snapshot is not None:
        out.append(snapshot)
        snapshot = metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return out[::-1]


def plan_for(rows: int, args: argparse.Namespace) -> tuple[int, int, int]:
    """(rounds, warm-up rounds, batches per block) for a size: the defaults by size, overridden by the options."""
    rounds, warmup, batches = QUICK_PLAN if args.quick else next(p for floor, p in PLAN_BY_SIZE if rows >= floor)
    return (args.rounds or rounds, args.warmup if args.warmup is not None else warmup, args.batches or batches)


def timings(progress: dict[str, Any]) -> dict[str, Any]:
    """One micro-batch's durations from its progress (seconds); ``other`` = the part of ``triggerExecution`` in none
    of the named phases (building the batch's plan from the new offsets, the source's commit, the progress itself)."""
    out = {"batch_id": progress["batchId"], "rows": progress["numInputRows"],
           **{k: progress["durationMs"].get(k, 0) / 1000 for k in DURATIONS}}
    out["other"] = out["triggerExecution"] - sum(out[k] for k in DURATIONS if k != "triggerExecution")
    return out


def gc_seconds(spark: Any) -> float:
    """The driver JVM's garbage-collection time so far (every collector; in local mode the tasks run there too)."""
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()  # noqa: SLF001
    return sum(max(0, bean.getCollectionTime()) for bean in beans) / 1000


def run_block(size: Size, contender: str, batches: int) -> dict[str, Any]:
    """Starts the contender's query, waits until it has run the ``batches`` waiting for it and ended by itself."""
    proxy = size.setup.proxy
    before = Counter(proxy.requests) if proxy is not None else Counter()
    gc_before = gc_seconds(size.spark)
    started = time.perf_counter()
    query = size.start(contender)
    after_start = Counter(proxy.requests) if proxy is not None else Counter()
    if not query.awaitTermination(900):
        query.stop()
        raise SystemExit(f"{size.ns} {contender}: the query did not end within 900 s")
    wall = time.perf_counter() - started
    gc = gc_seconds(size.spark) - gc_before
    if query.exception() is not None:
        raise SystemExit(f"{size.ns} {contender}: the query failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    commits = size.commit_log.read_block() if size.commit_log is not None else {}
    block = {
        "query_id": query.id, "wall": wall, "gc": gc,
        "batches": [{**timings(p), **commits.get(p["batchId"], {})} for p in progress],
        "start_requests": dict(after_start - before),
        "batch_requests": dict(Counter(proxy.requests) - after_start) if proxy is not None else {},
    }
    if len(progress) != batches or any(p["numInputRows"] != size.rows for p in progress):
        block["problem"] = (f"{size.ns} {contender}: {len(progress)} batches of "
                            f"{sorted({p['numInputRows'] for p in progress})} rows, expected {batches} of {size.rows}")
    return block


def run_size(spark: Any, setup: Setup, work: Path, rows: int, args: argparse.Namespace,
             commit_log: CommitLog | None = None) -> dict[str, Any]:
    rounds, warmup, batches = plan_for(rows, args)
    size = Size(spark, setup, work, rows, args.files_per_batch, commit_log, control=not args.no_control)
    contenders = size.sinks if args.no_noop else ("noop", *size.sinks)
    orders = list(itertools.permutations(size.sinks))  # each pair of sinks in both orders alike
    tag = f"[{setup.label} {size_label(rows)}]"
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    walls: dict[str, list[float]] = {c: [] for c in contenders}
    gcs: dict[str, list[float]] = {c: [] for c in contenders}
    requests: dict[str, list[dict[str, Any]]] = {c: [] for c in SINKS}
    for r in range(warmup + rounds):
        size.input.add(batches)
        sinks = orders[r % len(orders)]
        first = min(SINKS, key=sinks.index)  # of plain and consistent, the one that ran first
        order = (("noop",) if "noop" in contenders else ()) + sinks
        line = []
        for position, contender in enumerate(order):
            block = run_block(size, contender, batches)
            if "problem" in block:
                problems.append(f"round {r}: {block['problem']}")
            problems += [f"round {r}: {p}" for p in size.check(contender, block["query_id"],
                                                                [b["batch_id"] for b in block["batches"]])]
            for i, b in enumerate(block["batches"]):
                records.append({**b, "round": r, "contender": contender, "first_in_block": i == 0,
                                "warmup": r < warmup, "sink_first": first, "position": position})
            if r >= warmup:
                walls[contender].append(block["wall"])
                gcs[contender].append(block["gc"] / max(1, len(block["batches"])))
                if contender in SINKS and setup.proxy is not None:
                    requests[contender].append({"start": block["start_requests"], "block": block["batch_requests"],
                                                "batches": len(block["batches"])})
            steady = [b["triggerExecution"] for b in block["batches"][1:]]
            line.append(f"{contender} {ms(statistics.median(steady)) if steady else '—'}")
        print(f"{tag} round {r}{' (warm-up)' if r < warmup else ''}: " + ", ".join(line) +
              f" per batch (median, first batch left out) | load {load()}", file=sys.stderr)
    totals, total_problems = size.check_totals()
    problems += total_problems
    totals["load_ms"] = time_loads(spark, setup.plain, size.tables["consistent"])
    totals["gc_per_batch"] = {c: statistics.median(v) for c, v in gcs.items() if v}
    return summarize(setup.label, rows, (rounds, warmup, batches), records, walls, requests, totals, problems)


def time_loads(spark: Any, catalog: str, table: str, repeat: int = 21) -> float:
    """Milliseconds one catalog load of ``table`` takes in the session's JVM (Iceberg's ``Catalog.loadTable`` of the
    plain catalog: the pointer read, the metadata JSON read and parsed), called through py4j, the median of
    ``repeat`` minus the median py4j round trip: what each extra load of the consistent sink costs."""
    jvm = spark._jvm  # noqa: SLF001
    iceberg = spark._jsparkSession.sessionState().catalogManager().catalog(catalog).icebergCatalog()  # noqa: SLF001
    ident = jvm.org.apache.iceberg.catalog.TableIdentifier.parse(table)
    iceberg.loadTable(ident)
    loads, trips = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        iceberg.loadTable(ident)
        loads.append(time.perf_counter() - started)
        started = time.perf_counter()
        ident.name()  # one py4j round trip, nothing else
        trips.append(time.perf_counter() - started)
    return (statistics.median(loads) - statistics.median(trips)) * 1000


# --- summary ----------------------------------------------------------------------------------------
def summarize(label: str, rows: int, plan: tuple[int, int, int], records: list[dict[str, Any]],
              walls: dict[str, list[float]], requests: dict[str, list[dict[str, Any]]], totals: dict[str, Any],
              problems: list[str]) -> dict[str, Any]:
    measured = [x for x in records if not x["warmup"]]
    steady = [x for x in measured if not x["first_in_block"]]
    contenders = sorted({x["contender"] for x in records}, key=ORDER.index)

    def values(contender: str, key: str, among: list[dict[str, Any]] = steady) -> list[float]:
        return [x[key] for x in among if x["contender"] == contender]

    med = {c: {k: statistics.median(values(c, k)) for k in (*DURATIONS, "other")} for c in contenders}
    out: dict[str, Any] = {
        "setup": label, "rows": rows, "rounds": plan[0], "warmup": plan[1], "batches_per_block": plan[2],
        "steady": {c: {k: spread(values(c, k)) for k in ("triggerExecution", "addBatch")} for c in contenders},
        "medians": med,
        "first_batch": {c: spread(values(c, "triggerExecution", [x for x in measured if x["first_in_block"]]))
                        for c in contenders},
        "block_wall": {c: spread(w) for c, w in walls.items() if w},
        "totals": totals, "problems": problems, "records": records,
    }
    for key in ("triggerExecution", "addBatch"):
        c, p = med["consistent"][key], med["plain"][key]
        per_round, diffs, by_first = [], [], {"plain": [], "consistent": []}
        for r in sorted({x["round"] for x in steady}):
            in_round = [x for x in steady if x["round"] == r]
            rc, rp = statistics.median(values("consistent", key, in_round)), statistics.median(values("plain", key, in_round))
            per_round.append(rc / rp)
            diffs.append(rc - rp)
            by_first[in_round[0]["sink_first"]].append(rc / rp)
        first_medians = {who: statistics.median(v) for who, v in by_first.items() if v}
        control = None
        if CONTROL in med:
            rounds = sorted({x["round"] for x in steady})
            pairs = [(statistics.median(values(CONTROL, key, [x for x in steady if x["round"] == r])),
                      statistics.median(values("plain", key, [x for x in steady if x["round"] == r]))) for r in rounds]
            control = {"ratio_of_medians": med[CONTROL][key] / p, "per_round_ratio": spread([a / b for a, b in pairs]),
                       "per_round_difference": spread([a - b for a, b in pairs])}
        out[key] = {
            "control": control,
            "ratio_of_medians": c / p, "per_round_ratio": spread(per_round), "fixed_cost": c - p,
            "per_round_difference": spread(diffs), "ratio_by_first": first_medians,
            "order_balanced": (first_medians["plain"] * first_medians["consistent"]) ** 0.5
            if len(first_medians) == 2 else None,
        }
    out["commit"] = {}
    sinks = [c for c in contenders if c != "noop"]
    for key in ("commit", "snapshot_commit"):
        got = {c: [x[key] for x in steady if x["contender"] == c and key in x] for c in sinks}
        if not all(got.values()):
            continue
        diffs: dict[str, list[float]] = {c: [] for c in sinks if c != "plain"}
        for r in sorted({x["round"] for x in steady}):
            pair = {c: [x[key] for x in steady if x["round"] == r and x["contender"] == c and key in x] for c in sinks}
            if all(pair.values()):
                for c in diffs:
                    diffs[c].append(statistics.median(pair[c]) - statistics.median(pair["plain"]))
        out["commit"][key] = {**{c: spread(v) for c, v in got.items()},
                              "per_round_difference": spread(diffs["consistent"]),
                              **({"control_difference": spread(diffs[CONTROL])} if CONTROL in diffs else {})}
    if "noop" in med:
        n = med["noop"]["addBatch"]
        out["sink_part"] = {s: med[s]["addBatch"] - n for s in SINKS}
        plain_part = out["sink_part"]["plain"]
        out["sink_part"]["ratio"] = out["sink_part"]["consistent"] / plain_part if plain_part > 0 else None
    out["requests_per_batch"] = {s: per_batch_requests(v) for s, v in requests.items() if v}
    return out


def per_batch_requests(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Requests per micro-batch by kind (the blocks' requests after the query started / its batches), and the
    query start's (``toTable``'s table load)."""
    kinds = sorted({k for b in blocks for k in (*b["block"], *b["start"])})
    batches = sum(b["batches"] for b in blocks)
    return {"per_batch": {k: sum(b["block"].get(k, 0) for b in blocks) / batches for k in kinds},
            "start": {k: statistics.median(b["start"].get(k, 0) for b in blocks) for k in kinds}}


# --- report -------------------------------------------------------------------------------------------
def _control(control: dict[str, Any] | None) -> str:
    if control is None:
        return "—"
    pr = control["per_round_ratio"]
    return f"{control['ratio_of_medians']:.3f}× ({pr['median']:.3f}×, {pr['min']:.3f}–{pr['max']:.3f})"


def report(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Command: `{meta['command']}` — one local[2] session (Spark {meta['spark']}), catalog {meta['catalog']}; "
        f"load average (1/5/15 min) {meta['load_start']} at start, {meta['load_end']} at end; {meta['cores']} cores; "
        f"{meta['minutes']:.1f} min; commit {meta['commit']}; plugin jar {meta['jar']}.",
        "",
        "Per micro-batch (Spark's `triggerExecution`; the first batch of each block and the warm-up rounds left out):",
        "",
        "| rows per batch | batches per sink | plain: median (p90) | consistent: median (p90) | consistent / plain | "
        "per-round ratio: median (min–max) | order-balanced | fixed cost per batch: c − p (per-round median) | "
        "A/A control: plain 2 / plain (per-round median, min–max) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        t, s = r["triggerExecution"], r["steady"]
        pr = t["per_round_ratio"]
        balanced = f"{t['order_balanced']:.3f}×" if t["order_balanced"] else "—"
        lines.append(
            f"| {r['rows']:,} | {s['consistent']['triggerExecution']['n']} | {ms(s['plain']['triggerExecution']['median'])} "
            f"({ms(s['plain']['triggerExecution']['p90'])}) | {ms(s['consistent']['triggerExecution']['median'])} "
            f"({ms(s['consistent']['triggerExecution']['p90'])}) | **{t['ratio_of_medians']:.3f}×** | "
            f"{pr['median']:.3f}× ({pr['min']:.3f}–{pr['max']:.3f}) | {balanced} | **{signed_ms(t['fixed_cost'])}** "
            f"({signed_ms(t['per_round_difference']['median'])}) | {_control(t['control'])} |"
        )
    lines += [
        "",
        "Where a micro-batch's time goes (medians): `addBatch` = running the batch (reading the files, writing the data "
        "files, the sink's commit); noop = the same query with its rows dropped, so addBatch − noop is the sink's own "
        "part; planning = `queryPlanning` (the optimizer builds the sink's write here); logs = Spark's offsets and "
        "commit logs (`walCommit` + `commitOffsets`); listing = `latestOffset` (the file source lists its directory); "
        "other = `triggerExecution` minus the named phases; first = the first batch after each query start; one "
        "catalog load = Iceberg's `loadTable` of the consistent sink's table in the same JVM at the end (py4j round "
        "trip subtracted): the price of each extra load; GC = the driver JVM's collection time during a block / its "
        "batches (median over the blocks; the tasks run in that JVM).",
        "",
        "| rows per batch | addBatch: noop / plain / consistent | addBatch c / p | addBatch c − p (per-round) | "
        "sink's part p / c (ratio) | planning p / c | logs p / c | listing p / c | other p / c | first batch p / c | "
        "GC per batch p / c | one catalog load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        a, m = r["addBatch"], r["medians"]
        noop = ms(m["noop"]["addBatch"]) if "noop" in m else "—"
        part = r.get("sink_part")
        part_text = (f"{ms(part['plain'])} / {ms(part['consistent'])} ({part['ratio']:.3f}×)"
                     if part and part["ratio"] is not None else "—")
        logs = {s: m[s]["walCommit"] + m[s]["commitOffsets"] for s in SINKS}
        lines.append(
            f"| {r['rows']:,} | {noop} / {ms(m['plain']['addBatch'])} / {ms(m['consistent']['addBatch'])} | "
            f"{a['ratio_of_medians']:.3f}× | {signed_ms(a['fixed_cost'])} ({signed_ms(a['per_round_difference']['median'])}) | "
            f"{part_text} | {ms(m['plain']['queryPlanning'])} / {ms(m['consistent']['queryPlanning'])} | "
            f"{ms(logs['plain'])} / {ms(logs['consistent'])} | {ms(m['plain']['latestOffset'])} / "
            f"{ms(m['consistent']['latestOffset'])} | {ms(m['plain']['other'])} / {ms(m['consistent']['other'])} | "
            f"{ms(r['first_batch']['plain']['median'])} / {ms(r['first_batch']['consistent']['median'])} | "
            f"{ms(r['totals']['gc_per_batch']['plain'])} / {ms(r['totals']['gc_per_batch']['consistent'])} | "
            f"{r['totals']['load_ms']:.1f} ms |"
        )
    if all(r["commit"] for r in results):
        lines += [
            "",
            "The sink's commit, from the driver's log (Spark's write node around `StreamingWrite.commit`; inside it "
            "Iceberg's `SnapshotProducer.commit`, for the consistent sink the fenced catalog commit); the rest of the "
            "consistent commit is the ingest's own work (the table loaded for the key check, the barrier, the state "
            "after the commit):",
            "",
            "| rows per batch | sink's commit: plain / consistent, median (p90) | c − p (per-round median) | "
            "Iceberg's snapshot commit: plain / consistent | consistent: commit − snapshot commit | "
            "A/A: plain 2 − plain (per-round median) |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for r in results:
            c, sc = r["commit"]["commit"], r["commit"].get("snapshot_commit")
            snap = f"{ms(sc['plain']['median'])} / {ms(sc['consistent']['median'])}" if sc else "—"
            rest = ms(c["consistent"]["median"] - sc["consistent"]["median"]) if sc else "—"
            lines.append(
                f"| {r['rows']:,} | {ms(c['plain']['median'])} ({ms(c['plain']['p90'])}) / "
                f"{ms(c['consistent']['median'])} ({ms(c['consistent']['p90'])}) | "
                f"{signed_ms(c['consistent']['median'] - c['plain']['median'])} "
                f"({signed_ms(c['per_round_difference']['median'])}) | {snap} | {rest} | "
                + (f"{signed_ms(c[CONTROL]['median'] - c['plain']['median'])} "
                   f"({signed_ms(c['control_difference']['median'])})" if CONTROL in c else "—") + " |"
            )
    lines.append("")
    for r in results:
        t, s = r["triggerExecution"], r["steady"]
        by = t["ratio_by_first"]
        lines.append(
            f"- {r['rows']:,} rows: {r['rounds']} rounds × {r['batches_per_block']} batches after {r['warmup']} warm-up "
            f"round(s); consistent {ms(s['consistent']['triggerExecution']['min'])}–"
            f"{ms(s['consistent']['triggerExecution']['max'])}, plain {ms(s['plain']['triggerExecution']['min'])}–"
            f"{ms(s['plain']['triggerExecution']['max'])}; per-round ratio with plain first "
            f"{by.get('plain', float('nan')):.3f}×, consistent first {by.get('consistent', float('nan')):.3f}×; "
            f"at the end: {r['totals']['plain']['snapshots']} / {r['totals']['consistent']['snapshots']} snapshots "
            f"(plain / consistent), {r['totals']['consistent']['keyed']} keyed; checks: "
            + ("every consistent batch landed once on main with its key, a rising barrier and N records; every plain "
               "batch once with its epoch id; every block K batches of N rows; total-records as expected."
               if not r["problems"] else "PROBLEMS: " + "; ".join(r["problems"][:6]))
        )
    for r in results:
        for sink, req in r["requests_per_batch"].items():
            per = ", ".join(f"{v:g} {k}" for k, v in req["per_batch"].items() if v)
            start = ", ".join(f"{v:g} {k}" for k, v in req["start"].items() if v)
            lines.append(f"- {r['rows']:,} rows, {sink}: REST requests per micro-batch {per} "
                         f"(total {sum(req['per_batch'].values()):g}); at the query's start {start}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=None, help=f"rows per micro-batch, comma-separated (default {ROWS_DEFAULT}; "
                        f"--quick: {QUICK_ROWS})")
    parser.add_argument("--rounds", type=int, default=None, help="measured rounds per size (default: by size, 4 / 6 / 8)")
    parser.add_argument("--warmup", type=int, default=None, help="rounds run first and dropped (default 1)")
    parser.add_argument("--batches", type=int, default=None,
                        help="micro-batches per block, the first set apart (default: by size, 4-6)")
    parser.add_argument("--files-per-batch", type=int, default=2, help="input files per micro-batch (default 2: one "
                        "task per core)")
    parser.add_argument("--no-noop", action="store_true", help="leave out the noop contender (no sink's-part figure)")
    parser.add_argument("--no-control", action="store_true",
                        help="leave out the A/A control (a second plain sink; its ratio to plain is the run's noise floor)")
    parser.add_argument("--catalog", choices=("sqlite", "rest"), default="sqlite")
    parser.add_argument("--count-requests", action="store_true",
                        help="with --catalog rest: count Spark's catalog requests per micro-batch (adds the proxy's latency)")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK_ROWS} rows, 2 rounds of 3 batches")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of the tables")
    parser.add_argument("--save", type=Path, help="also write the results (every micro-batch) as JSON to this file")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in (args.rows or (QUICK_ROWS if args.quick else ROWS_DEFAULT)).split(",") if s]
    if args.count_requests and args.catalog != "rest":
        parser.error("--count-requests counts REST requests: add --catalog rest")
    for rows in sizes:
        rounds, _, batches = plan_for(rows, args)
        if rounds < 2 or batches < 2 or rows < args.files_per_batch:
            parser.error("every size needs >= 2 rounds (both orders), >= 2 batches per block (the first is set apart) "
                         "and at least one row per input file")

    from consistent_catalog.spark.session import build_session, find_plugin_jar

    jar = find_plugin_jar()
    if jar is None:
        raise SystemExit("the plugin jar is missing (build/jvm/spark-<line>/lake-consistent-spark-*.jar): build it with `make setup` first")
    tmp = None
    if args.dir:
        work = args.dir.resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bench-streaming-sink-")
        work = Path(tmp.name)
    began = time.monotonic()
    load_start = load()
    commit = _git_commit()
    jar_stat = os.stat(jar)
    jar_digest = hashlib.sha256(Path(jar).read_bytes()).hexdigest()[:12]
    dirty_jvm = _dirty("jvm")
    setup: Setup | None = None
    spark = None
    results: list[dict[str, Any]] = []
    try:
        setup = sqlite_setup(work) if args.catalog == "sqlite" else rest_setup(work, args.count_requests)
        started = time.perf_counter()
        commit_log = CommitLog(work)
        spark = build_session(setup.uri, setup.warehouse, name=setup.plain, app_name="bench-streaming-sink",
                              master="local[2]", extra_conf={"spark.driver.extraJavaOptions": commit_log.java_option()})
        print(f"spark session up in {time.perf_counter() - started:.1f}s; load {load()}", file=sys.stderr)
        for rows in sizes:
            results.append(run_size(spark, setup, work, rows, args, commit_log))
    finally:
        if spark is not None:
            stop_jvm(spark)
        if setup is not None:
            for close in setup.closers:
                close()
        if tmp is not None:
            tmp.cleanup()
    meta = {
        "command": shlex.join([".venv/bin/python", "-m", "bench.bench_streaming_sink",
                               *(argv if argv is not None else sys.argv[1:])]),
        "catalog": args.catalog, "load_start": load_start, "load_end": load(), "cores": os.cpu_count(),
        "minutes": (time.monotonic() - began) / 60, "spark": _spark_version(), "commit": commit,
        "jar": f"{Path(jar).name} built {time.strftime('%Y-%m-%d %H:%M', time.gmtime(jar_stat.st_mtime))} UTC, "
               f"sha256 {jar_digest}" + (f" ({dirty_jvm} uncommitted files under jvm/ when the run started)"
                                         if dirty_jvm else ""),
    }
    if args.save is not None:
        args.save.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str), encoding="utf-8")
    if args.json:
        print(json.dumps({"meta": meta, "results": results}, indent=2, default=str))
    else:
        print(report(results, meta))
    return 0 if not any(r["problems"] for r in results) else 1


def _dirty(path: str) -> int:
    """Files under ``path`` with uncommitted changes (the plugin jar may have been built from them)."""
    try:
        return len(subprocess.run(["git", "status", "--porcelain", "--", path], capture_output=True, text=True,
                                  check=True, cwd=Path(__file__).resolve().parents[1]).stdout.splitlines())
    except (OSError, subprocess.CalledProcessError):
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
