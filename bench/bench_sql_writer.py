"""Benchmark: an epoch written by a Spark SQL ``INSERT OVERWRITE`` through ``lake_consistent`` (protocol §5.9)
vs. the same statement through the plain Iceberg catalog ``lake`` (issue 19).

Not a test. One local[2] Spark session (``build_session`` + the plugin jar) holds, for each catalog setup, the
plain catalog and the consistent one over the same catalog database:

- ``sqlite``: ``lake`` / ``lake_consistent`` over a throw-away SQLite catalog file (JDBC);
- ``rest``: ``rest`` / ``rest_consistent`` over the project's REST server (``tests/harness/rest_server.py``,
  a JVM of its own on the same cores, a JdbcCatalog on SQLite behind it; no added latency).

For every setup and every ``--rows`` size, a namespace ``bench_<size>`` with a root ``words(word string)`` and
two sinks of the same schema ``(word string, cnt bigint)``: ``word_counts`` (the job ``word-count-<size>``'s)
and ``plain_counts`` (a plain table nobody registers). The two statements timed::

    INSERT OVERWRITE lake_consistent.bench_1m.word_counts
      SELECT word, count(*) AS cnt FROM lake_consistent.bench_1m.words GROUP BY word      -- consistent
    INSERT OVERWRITE lake.bench_1m.plain_counts
      SELECT word, count(*) AS cnt FROM lake.bench_1m.words GROUP BY word                 -- plain

with ``spark.sql.consistent.job=word-count-<size>`` set once per size (the plain catalog ignores it). The
consistent statement is one epoch: the statement's cut resolution, the plan from metadata (loads of the sink
and the sources' closure), the reset of ``consistent-staged`` when needed, Spark's write onto it (fenced
commit), verification and the fenced publish commit. The plain one is Iceberg's overwrite commit.

Per size:

1. the tables are created and ``rows`` words (the demo's Zipf-like vocabulary of 200 words,
   ``consistent_catalog.demo.epoch_words``; ``--vocabulary N`` for another) ingested into the root with
   ``ConsistentCatalog.ingest`` (pyiceberg, not timed);
2. ``--warmup`` + ``--repeat`` rounds. Each round ingests ``--batch-rows`` new words (not timed, the same input
   for both sides; the first round reads the initial load), then times the two statements in alternating
   order (consistent first in even rounds), then the consistent statement again with no new input
   (``done``: parse, cut resolution, the plan, then Spark runs an empty write job; nothing is committed), then
   parses and analyses each statement without running it (``analysis``: for the consistent one, its cut
   resolution and the epoch's plan; after the statements, so that it warms no cache they use). The first
   round registers the job (lists and loads every table for the cycle check, one commit): warm-up rounds are
   dropped and there is at least one;
3. after every round (not timed) both sinks are read back with pyiceberg and must hold the same rows, whose
   counts add up to the root's rows; the consistent sink's ``main`` must have moved in the epoch and not in the
   ``done`` re-run; new ``*.metadata.json`` files are counted (commits per statement) and Spark jobs;
4. registration, timed once per sink on ``--registrations`` new sinks of the same statement (new jobs), in the
   warm session on the same data. A statement registers its job when it is analysed, so: analysing the first
   statement on the new sink (registration + the plan) minus analysing it again (the plan); the statement
   then runs, not timed, and must publish.

Reported per setup and size: median and p90 (min/max) per side, the ratio of medians consistent/plain (target
<= 1.05 at 1M rows) with the median of the per-round ratios and the order-balanced ratio, the fixed cost per
epoch (median consistent - median plain, and the median of the per-round differences; read at 1k rows), and
where the consistent statement's time goes: analysis vs execution of each side, the ``done`` re-run, the
plugin's own split of the statement's cut resolution (``ConsistentSparkCatalog.lastResolutionTimings``),
commits, registration.

Diagnostics (they perturb the timing; run them apart from the figures):

- ``--count-requests``: the rest setup's Spark requests go through a counting proxy (``tests/harness/proxy.py``
  without delay): requests per statement by kind (list, load, commit, metrics report);
- ``--jfr FILE``: a Java Flight Recording of the driver JVM (profile settings, every wait recorded, whole
  stacks) during the timed rounds and registrations of the last setup and size, started and dumped from Python
  through ``jdk.jfr.Recording``; printed per kind of statement: the statement thread's samples (running) by
  the outermost plugin frame and by plugin/Iceberg method, and its waits by site.

Times move by +-30 % on the shared 2 cores: compare the per-round figures and report the load average.

Usage:
    python -m bench.bench_sql_writer [--rows 1000000,1000] [--repeat 30] [--warmup 6] [--batch-rows N]
                                     [--registrations 3] [--setups sqlite,rest] [--rest-rows SIZES]
                                     [--vocabulary 200] [--json] [--count-requests] [--jfr FILE] [--dir D]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shlex
import shutil
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

from bench.common import load, quantile

ROWS_DEFAULT = "1000000,1000"
STATEMENT = "INSERT OVERWRITE {catalog}.{ns}.{sink} SELECT word, count(*) AS cnt FROM {catalog}.{ns}.words GROUP BY word"


# --- formatting -----------------------------------------------------------------------------------
def ms(seconds: float | None) -> str:
    """Seconds as readable milliseconds: ``1,234 ms``, ``87.5 ms``."""
    if seconds is None:
        return "—"
    value = seconds * 1000
    return f"{value:,.0f} ms" if abs(value) >= 100 else f"{value:.1f} ms"


def signed_ms(seconds: float) -> str:
    """``+23.0 ms``, ``−4.6 ms``."""
    return ("−" if seconds < 0 else "+") + ms(abs(seconds))


def size_label(rows: int) -> str:
    for unit, div in (("m", 1_000_000), ("k", 1_000)):
        if rows >= div and rows % div == 0:
            return f"{rows // div}{unit}"
    return str(rows)


def spread(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "median": statistics.median(values), "p90": quantile(values, 0.9),
            "min": min(values), "max": max(values)}


# --- setups ---------------------------------------------------------------------------------------
@dataclass
class Setup:
    """One catalog configured twice in the session: ``plain`` (Iceberg's SparkCatalog) and ``consistent``."""

    label: str
    plain: str
    catalog: Any  # pyiceberg catalog over the same tables
    conf: dict[str, str]
    closers: list[Callable[[], None]] = field(default_factory=list)
    proxy: Any = None  # the rest setup's counting proxy (--count-requests)

    @property
    def consistent(self) -> str:
        return f"{self.plain}_consistent"


def sqlite_setup(work: Path) -> Setup:
    from pyiceberg.catalog.sql import SqlCatalog
    from tests.harness.spark_plugin import plugin_conf

    root = work / "sqlite"
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{root}/catalog.db"
    catalog = SqlCatalog("lake", uri=uri, warehouse=f"file://{root}/warehouse")  # creates the database first
    setup = Setup("sqlite", "lake", catalog, plugin_conf(uri, root / "warehouse"))
    setup.closers.append(catalog.engine.dispose)
    return setup


def rest_setup(work: Path, count_requests: bool = False) -> Setup:
    from tests.harness.rest_server import RestCatalogServer
    from tests.harness.spark_plugin import plugin_conf

    root = work / "rest"
    server = RestCatalogServer(root / "server").start()
    warehouse = f"file://{root}/warehouse"
    uri = server.uri
    proxy = None
    if count_requests:  # Spark's requests through a counting proxy (pyiceberg's go to the server directly)
        proxy = CountingProxy(server.port).start()  # type: ignore[arg-type]
        uri = proxy.uri
    setup = Setup("rest", "rest", server.catalog(warehouse=warehouse),
                  plugin_conf(uri, warehouse, name="rest", consistent="rest_consistent"))
    setup.proxy = proxy
    if proxy is not None:
        setup.closers.append(proxy.stop)
    setup.closers.append(server.stop)
    return setup


def CountingProxy(target_port: int) -> Any:  # noqa: N802 - imports the harness lazily
    """``tests/harness/request_counts.py``'s proxy: Spark's REST requests counted by kind (``requests``)."""
    from tests.harness.request_counts import CountingProxy as Counting

    return Counting(target_port)


def merged_conf(setups: list[Setup]) -> dict[str, str]:
    conf: dict[str, str] = {}
    jars: list[str] = []
    for setup in setups:
        for jar in setup.conf.get("spark.jars", "").split(","):
            if jar and jar not in jars:
                jars.append(jar)
        conf.update(setup.conf)
    conf["spark.jars"] = ",".join(jars)
    return conf


# --- one size on one setup ----------------------------------------------------------------------------
class Lake:
    """The namespace of one size on one setup, seen from pyiceberg (setup, ingests, checks; never timed)."""

    def __init__(self, setup: Setup, rows: int, vocabulary: int) -> None:
        from consistent_catalog import ConsistentCatalog
        from consistent_catalog.demo import SCHEMAS

        self.setup, self.rows, self.vocabulary = setup, rows, vocabulary
        self.ns = f"bench_{size_label(rows)}"
        self.job = f"word-count-{size_label(rows)}"
        self.catalog = setup.catalog
        self.cc = ConsistentCatalog(self.catalog)
        self.catalog.create_namespace(self.ns)
        self.catalog.create_table(f"{self.ns}.words", schema=SCHEMAS["demo.words"])
        for sink in ("word_counts", "plain_counts"):
            self.catalog.create_table(f"{self.ns}.{sink}", schema=SCHEMAS["demo.word_counts"])
        self.ingested = 0
        self.seed = 0

    def add_sink(self, sink: str) -> str:
        from consistent_catalog.demo import SCHEMAS

        self.catalog.create_table(f"{self.ns}.{sink}", schema=SCHEMAS["demo.word_counts"])
        return sink

    def statement(self, side: str) -> str:
        if side == "consistent":
            return STATEMENT.format(catalog=self.setup.consistent, ns=self.ns, sink="word_counts")
        return STATEMENT.format(catalog=self.setup.plain, ns=self.ns, sink="plain_counts")

    def ingest(self, rows: int) -> None:
        self.cc.ingest(f"{self.ns}.words", words(self.seed, rows, self.vocabulary))
        self.seed += 1
        self.ingested += rows

    def tables_in_catalog(self) -> int:
        return sum(len(self.catalog.list_tables(ns)) for ns in self.catalog.list_namespaces())

    def main_head(self, sink: str) -> int | None:
        snapshot = self.catalog.load_table(f"{self.ns}.{sink}").current_snapshot()
        return None if snapshot is None else snapshot.snapshot_id

    def metadata_files(self, sink: str) -> int:
        location = self.catalog.load_table(f"{self.ns}.{sink}").metadata.location
        path = Path(location.removeprefix("file://")) / "metadata"
        return sum(1 for p in path.iterdir() if p.name.endswith(".metadata.json"))

    def check_sinks(self) -> str | None:
        """Both sinks hold the same (word, cnt) rows, adding up to the root's rows; None when they do."""
        tables = {}
        for sink in ("word_counts", "plain_counts"):
            data = self.catalog.load_table(f"{self.ns}.{sink}").scan().to_arrow()
            tables[sink] = sorted(zip(data["word"].to_pylist(), data["cnt"].to_pylist()))
        total = sum(c for _, c in tables["plain_counts"])
        if tables["word_counts"] != tables["plain_counts"]:
            return f"{self.ns}: word_counts and plain_counts differ ({len(tables['word_counts'])} vs " \
                   f"{len(tables['plain_counts'])} words)"
        if total != self.ingested:
            return f"{self.ns}: the counts add up to {total}, the root holds {self.ingested} rows"
        return None


def words(seed: int, rows: int, vocabulary: int) -> Any:
    """``rows`` words: the demo's (``consistent_catalog.demo.epoch_words``, 200 words, Zipf-like) or, for another
    vocabulary size, ``w0000000``... drawn with the same 1/rank weights."""
    from consistent_catalog.demo import VOCABULARY, epoch_words

    if vocabulary == len(VOCABULARY):
        return epoch_words(seed, rows)
    import random

    import pyarrow as pa

    rng = random.Random(seed)
    names = [f"w{i:07d}" for i in range(vocabulary)]
    weights = [1 / (i + 1) for i in range(vocabulary)]
    return pa.table({"word": rng.choices(names, weights=weights, k=rows)}, schema=pa.schema([pa.field("word", pa.string())]))


class Timer:
    """Times one statement; notes the interval for the JFR summary and the REST requests it sent."""

    def __init__(self, spark: Any, setup: Setup, jfr: Flight | None) -> None:
        self.spark, self.setup, self.jfr = spark, setup, jfr

    def __call__(self, statement: str, label: str | None = None) -> tuple[float, dict[str, int]]:
        """Seconds the statement took; what it sent (REST requests by kind, ``spark jobs``), counted outside the timing."""
        proxy = self.setup.proxy
        before = Counter(proxy.requests) if proxy is not None else Counter()
        jobs = self.last_job()
        opened = time.time()
        started = time.perf_counter()
        self.spark.sql(statement)
        elapsed = time.perf_counter() - started
        if label is not None and self.jfr is not None and self.jfr.recording is not None:
            self.jfr.intervals.append((label, opened, time.time()))
        sent = dict(proxy.requests - before) if proxy is not None else {}
        sent["spark jobs"] = self.last_job() - jobs
        return elapsed, sent

    def analysis(self, statement: str) -> tuple[float, dict[str, int]]:
        """Seconds to parse and analyse the statement only (no optimisation, no execution, nothing committed): for
        a write through the consistent catalog that is its cut resolution and the epoch's plan. And its requests."""
        jss, jvm = self.spark._jsparkSession, self.spark._jvm  # noqa: SLF001
        proxy = self.setup.proxy
        before = Counter(proxy.requests) if proxy is not None else Counter()
        started = time.perf_counter()
        plan = jss.sessionState().sqlParser().parsePlan(statement)
        tracker = jvm.org.apache.spark.sql.catalyst.QueryPlanningTracker(jvm.scala.Option.empty())
        jss.sessionState().analyzer().executeAndCheck(plan, tracker)
        elapsed = time.perf_counter() - started
        return elapsed, dict(proxy.requests - before) if proxy is not None else {}

    def last_job(self) -> int:
        """The highest Spark job id so far (-1: none); ids are handed out in sequence."""
        return max(self.spark.sparkContext.statusTracker().getJobIdsForGroup(), default=-1)


def resolution_timings(spark: Any, catalog: str) -> dict[str, float]:
    """The plugin's split of the last cut resolution of ``catalog`` (seconds)."""
    t = spark._jsparkSession.sessionState().catalogManager().catalog(catalog).lastResolutionTimings()  # noqa: SLF001
    return {"list": t.listNanos() / 1e9, "load": t.loadNanos() / 1e9, "state": t.stateNanos() / 1e9,
            "resolve": t.resolveNanos() / 1e9}


SINKS = (("consistent", "word_counts"), ("plain", "plain_counts"))


def run_size(spark: Any, setup: Setup, rows: int, args: argparse.Namespace, jfr: Flight | None = None) -> dict[str, Any]:
    lake = Lake(setup, rows, args.vocabulary)
    tag = f"[{setup.label} {size_label(rows)}]"
    batch = args.batch_rows if args.batch_rows is not None else max(1, rows // 1000)
    statements = {"consistent": lake.statement("consistent"), "plain": lake.statement("plain")}
    timer = Timer(spark, setup, jfr)
    spark.sql(f"SET spark.sql.consistent.job={lake.job}")

    started = time.perf_counter()
    lake.ingest(rows)
    initial_ingest = time.perf_counter() - started
    rounds: list[dict[str, Any]] = []
    problems: list[str] = []
    for i in range(args.warmup + args.repeat):
        if i > 0:
            lake.ingest(batch)
        if jfr is not None and i == args.warmup:
            jfr.start()
        order = ("consistent", "plain") if i % 2 == 0 else ("plain", "consistent")
        head_before = lake.main_head("word_counts")
        files = {side: lake.metadata_files(sink) for side, sink in SINKS}
        measured: dict[str, Any] = {"round": i, "first": order[0], "warmup": i < args.warmup, "load": load(),
                                    "requests": {}}
        for side in order:
            measured[side], measured["requests"][side] = timer(statements[side], side)
            if side == "consistent":
                measured["resolution"] = resolution_timings(spark, setup.consistent)
        head_after = lake.main_head("word_counts")
        measured["commits"] = {side: lake.metadata_files(sink) - files[side] for side, sink in SINKS}
        measured["done"], measured["requests"]["done"] = timer(statements["consistent"], "done")
        measured["done_resolution"] = resolution_timings(spark, setup.consistent)
        measured["analysis"] = {}
        for side in order:
            measured["analysis"][side], measured["requests"][f"analysis {side}"] = timer.analysis(statements[side])
        if head_after == head_before:
            problems.append(f"round {i}: the consistent epoch did not move word_counts' main")
        if lake.main_head("word_counts") != head_after:
            problems.append(f"round {i}: the done re-run moved word_counts' main")
        problem = lake.check_sinks()
        if problem:
            problems.append(f"round {i}: {problem}")
        rounds.append(measured)
        print(f"{tag} round {i}{' (warm-up)' if i < args.warmup else ''} first={order[0]}: "
              f"consistent {ms(measured['consistent'])} plain {ms(measured['plain'])} done {ms(measured['done'])} | "
              f"commits {measured['commits']['consistent']}/{measured['commits']['plain']} | load {measured['load']}",
              file=sys.stderr)
    # Registration, in the warm session on the same data: new sinks of the same statement (new jobs). Registration
    # happens when the statement is analysed, so: analysing the first statement on the sink (registration + plan)
    # minus analysing it again (the plan alone); the statement then runs (not timed) and must publish.
    registrations = []
    for k in range(args.registrations):
        sink = lake.add_sink(f"word_counts_reg{k}")
        spark.sql(f"SET spark.sql.consistent.job={lake.job}-reg{k}")
        statement = STATEMENT.format(catalog=setup.consistent, ns=lake.ns, sink=sink)
        if jfr is not None and jfr.recording is not None:
            opened = time.time()
        first, first_requests = timer.analysis(statement)
        if jfr is not None and jfr.recording is not None:
            jfr.intervals.append(("registering analysis", opened, time.time()))
        then, then_requests = timer.analysis(statement)
        timer(statement)
        if lake.main_head(sink) is None:
            problems.append(f"the first statement on {sink} published nothing")
        registrations.append({"analysis_registering": first, "analysis_again": then, "registration": first - then,
                              "requests_registering": first_requests, "requests_again": then_requests,
                              "tables_in_catalog": lake.tables_in_catalog()})
        print(f"{tag} analysis of the first statement on {sink} {ms(first)}, again {ms(then)}: registration ~ "
              f"{ms(first - then)} ({registrations[-1]['tables_in_catalog']} tables in the catalog)", file=sys.stderr)
    if jfr is not None:
        jfr.stop()
    return summarize(setup.label, rows, batch, lake, rounds, registrations, initial_ingest, problems)


def typical_requests(samples: list[dict[str, int]]) -> dict[str, int]:
    """The most common request counts per kind of a set of statements (empty without the counting proxy)."""
    kinds = sorted({k for sample in samples for k in sample})
    return {k: Counter(sample.get(k, 0) for sample in samples).most_common(1)[0][0] for k in kinds}


def summarize(label: str, rows: int, batch: int, lake: Lake, rounds: list[dict[str, Any]],
              registrations: list[dict[str, Any]], initial_ingest: float, problems: list[str]) -> dict[str, Any]:
    kept = [r for r in rounds if not r["warmup"]]
    c = [r["consistent"] for r in kept]
    p = [r["plain"] for r in kept]
    d = [r["done"] for r in kept]
    paired = [r["consistent"] / r["plain"] for r in kept]
    diffs = [r["consistent"] - r["plain"] for r in kept]
    by_order: dict[str, float | None] = {}
    for who in ("consistent", "plain"):
        ratios = [r["consistent"] / r["plain"] for r in kept if r["first"] == who]
        by_order[who] = statistics.median(ratios) if ratios else None
    first_c, first_p = by_order["consistent"], by_order["plain"]
    balanced = (first_c * first_p) ** 0.5 if first_c is not None and first_p is not None else None
    rest = [r["consistent"] - r["done"] for r in kept]
    # the statement right after the ingest tends to be slower: medians of each side by its position in the round
    position = {f"{side} {pos}": statistics.median(vals) if (vals := [r[side] for r in kept
                                                                       if (r["first"] == side) == (pos == "first")])
                else None for side in ("consistent", "plain") for pos in ("first", "second")}
    analysis = {s: spread([r["analysis"][s] for r in kept]) for s in ("consistent", "plain")}
    analysis_diff = spread([r["analysis"]["consistent"] - r["analysis"]["plain"] for r in kept])
    execution = {s: spread([r[s] - r["analysis"][s] for r in kept]) for s in ("consistent", "plain")}
    execution_diff = spread([(r["consistent"] - r["analysis"]["consistent"]) - (r["plain"] - r["analysis"]["plain"])
                             for r in kept])
    resolution = {k: statistics.median(r["resolution"][k] for r in kept) for k in kept[0]["resolution"]}
    done_resolution = {k: statistics.median(r["done_resolution"][k] for r in kept) for k in kept[0]["done_resolution"]}
    commits = {s: Counter(r["commits"][s] for r in kept).most_common(1)[0][0] for s in ("consistent", "plain")}
    requests = {s: typical_requests([r["requests"][s] for r in kept])
                for s in ("consistent", "plain", "done", "analysis consistent", "analysis plain")}
    if registrations:
        requests["registering analysis"] = typical_requests([g["requests_registering"] for g in registrations])
    registration = {
        "registration": statistics.median(g["registration"] for g in registrations) if registrations else None,
        "samples": registrations,
        "first_statement_of_size": rounds[0]["consistent"],
    }
    return {
        "setup": label, "rows": rows, "batch_rows": batch, "namespace": lake.ns, "job": lake.job,
        "rounds_measured": len(kept), "rounds_warmup": len(rounds) - len(kept),
        "root_rows_at_end": lake.ingested,
        "consistent": spread(c), "plain": spread(p), "done": spread(d),
        "ratio_of_medians": statistics.median(c) / statistics.median(p),
        "paired_ratio": spread(paired), "order_balanced_ratio": balanced, "paired_ratio_by_first": by_order,
        "fixed_cost": statistics.median(c) - statistics.median(p), "paired_difference": spread(diffs),
        "epoch_minus_done": spread(rest), "by_position": position,
        "analysis": analysis, "analysis_difference": analysis_diff,
        "execution": execution, "execution_difference": execution_diff,
        "resolution_in_epoch": resolution, "resolution_in_done": done_resolution,
        "commits_per_statement": commits, "requests_per_statement": requests,
        "registration": registration,
        "initial_ingest": initial_ingest,
        "rounds": rounds, "problems": problems,
    }


# --- JFR --------------------------------------------------------------------------------------------
class Flight:
    """A JFR recording of the driver JVM, started and dumped through py4j; the timed statements note their
    intervals (label, start, end) so that their samples can be told apart."""

    def __init__(self, spark: Any, path: Path) -> None:
        self.spark, self.path = spark, path
        self.intervals: list[tuple[str, float, float]] = []
        self.recording: Any = None

    def start(self) -> None:
        jvm = self.spark._jvm  # noqa: SLF001
        config = jvm.jdk.jfr.Configuration.getConfiguration("profile")
        self.recording = jvm.jdk.jfr.Recording(config)
        for event in WAIT_EVENTS:  # every wait, not only those over the profile's 10-20 ms thresholds
            self.recording.enable(event).withThreshold(jvm.java.time.Duration.ofNanos(0)).withStackTrace()
        self.recording.start()

    def stop(self) -> None:
        if self.recording is None:
            return
        jvm = self.spark._jvm  # noqa: SLF001
        self.recording.stop()
        self.recording.dump(jvm.java.io.File(str(self.path)).toPath())
        self.recording.close()
        self.recording = None


#: Events of a thread waiting (parked, in Object.wait, asleep, blocked on a monitor or a socket), with durations.
WAIT_EVENTS = ("jdk.ThreadPark", "jdk.JavaMonitorWait", "jdk.ThreadSleep", "jdk.JavaMonitorEnter", "jdk.SocketRead")
#: The frame at the bottom of the thread that runs Python's calls (statements, analyses) in the driver.
STATEMENT_THREAD = ("py4j.ClientServerConnection.run", "py4j.GatewayConnection.run")
#: A thread with none of these frames on its stack is idle (waiting for work), whatever the interval.
WORKING_FRAMES = ("org.apache.spark.", "org.apache.iceberg.", "io.consistentcatalog.", "org.apache.hadoop.", "org.sqlite.")
#: JFR's sampling periods in the "profile" settings: Java code every 10 ms, native code every 20 ms.
JFR_PERIOD_MS = {"jdk.ExecutionSample": 10, "jdk.NativeMethodSample": 20}


def jfr_summary(path: Path, intervals: list[tuple[str, float, float]], top: int = 20) -> dict[str, Any]:
    """Samples of the statement's thread (the py4j thread running Python's call) and of the task threads, per kind of
    statement (consistent epoch, plain, ``done``), as estimated ms per statement (count x sampling period):
    the statement thread's by the outermost plugin frame on its stack and inclusively by plugin and Iceberg
    method. Waiting (for Spark's tasks, on a lock) is not sampled: this is the thread's own work and its
    native calls (SQLite, sockets, files)."""
    from datetime import datetime

    jfr = shutil.which("jfr") or str(Path(os.path.realpath(shutil.which("java") or "java")).parent / "jfr")
    out = subprocess.run([jfr, "print", "--json", "--stack-depth", "1024", "--events",
                          ",".join((*JFR_PERIOD_MS, *WAIT_EVENTS)), str(path)],
                         capture_output=True, text=True, check=True).stdout
    events = json.loads(out)["recording"]["events"]
    counts = Counter(label for label, _, _ in intervals)
    ordered = sorted(intervals, key=lambda i: i[1])

    def label_at(start: str) -> str | None:
        t = datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp()
        for label, a, b in ordered:
            if a <= t <= b:
                return label
        return None

    per: dict[str, dict[str, Any]] = {
        label: {"statements": n, "statement_thread_ms": 0.0, "task_threads_ms": 0.0, "waits_ms": 0.0,
                "by_plugin_entry": Counter(), "inclusive": Counter(), "leaf": Counter(), "waits": Counter()}
        for label, n in counts.items()
    }
    for event in events:
        values = event["values"]
        label = label_at(values["startTime"])
        if label is None:
            continue
        bucket = per[label]
        frames = [(f["method"]["type"]["name"] + "." + f["method"]["name"]).replace("/", ".")
                  for f in (values.get("stackTrace") or {}).get("frames") or []]
        thread = (values.get("sampledThread") or values.get("eventThread") or {}).get("javaName") or ""
        if not any(f.startswith(WORKING_FRAMES) for f in frames):
            continue  # an idle thread (a py4j connection waiting for Python's next call, a pool waiting for work)
        if event["type"] in WAIT_EVENTS:
            if not any(f.startswith(STATEMENT_THREAD) for f in frames):
                continue
            waited = _iso_seconds(values["duration"]) * 1000
            bucket["waits_ms"] += waited
            bucket["waits"][f"{event['type'].removeprefix('jdk.')} in {_wait_site(frames)}"] += waited
            continue
        weight = JFR_PERIOD_MS[event["type"]]
        if thread.startswith("Executor task launch"):
            bucket["task_threads_ms"] += weight
            continue
        if not any(f.startswith(STATEMENT_THREAD) for f in frames):
            continue
        bucket["statement_thread_ms"] += weight
        bucket["leaf"][frames[0]] += weight
        ours = [f for f in frames if f.startswith("io.consistentcatalog.")]
        bucket["by_plugin_entry"][ours[-1] if ours else "(no plugin frame: Spark, Iceberg)"] += weight
        for name in set(frames):
            if name.startswith(("io.consistentcatalog.", "org.apache.iceberg.")) and "$$Lambda" not in name:
                bucket["inclusive"][name] += weight
    result = {}
    for label, bucket in per.items():
        n = bucket["statements"]
        result[label] = {
            "statements": n, "statement_thread_ms": bucket["statement_thread_ms"] / n,
            "task_threads_ms": bucket["task_threads_ms"] / n, "waits_ms": bucket["waits_ms"] / n,
            **{k: [(name, v / n) for name, v in bucket[k].most_common(top)]
               for k in ("by_plugin_entry", "inclusive", "leaf", "waits")},
        }
    return result


def _iso_seconds(duration: str) -> float:
    """``PT0.0245S``, ``PT1M2.5S`` -> seconds."""
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?", duration)
    if match is None:
        return 0.0
    hours, minutes, seconds = match.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0)


def _wait_site(frames: list[str]) -> str:
    """Where a wait happened: the innermost frame of the plugin, Iceberg or Spark (not the JDK's or Scala's),
    with the plugin's outermost frame when the plugin is on the stack."""
    site = next((f for f in frames if f.startswith(("io.consistentcatalog.", "org.apache.iceberg.", "org.apache.spark.",
                                                     "org.sqlite.", "py4j."))), frames[0] if frames else "?")
    ours = [f for f in frames if f.startswith("io.consistentcatalog.")]
    return site + (f" (under {ours[-1]})" if ours and ours[-1] != site else "")


# --- report -------------------------------------------------------------------------------------------
def report(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Command: `{meta['command']}` — {meta['repeat']} measured rounds after {meta['warmup']} warm-up rounds per "
        f"size, {meta['vocabulary']:,} distinct words; one local[2] session (Spark {meta['spark']}); load average "
        f"(1/5/15 min) {meta['load_start']} at start, {meta['load_end']} at end; {meta['cores']} cores; "
        f"{meta['minutes']:.1f} min; commit {meta.get('commit', '?')}.",
        "",
        "| catalog | source rows | plain: median (p90) | consistent: median (p90) | consistent / plain | "
        "per-round ratio: median (min–max) | fixed cost per epoch: c − p (per-round median) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        pr = r["paired_ratio"]
        lines.append(
            f"| {r['setup']} | {r['rows']:,} | {ms(r['plain']['median'])} ({ms(r['plain']['p90'])}) | "
            f"{ms(r['consistent']['median'])} ({ms(r['consistent']['p90'])}) | **{r['ratio_of_medians']:.3f}×** | "
            f"{pr['median']:.3f}× ({pr['min']:.3f}–{pr['max']:.3f}) | **{ms(r['fixed_cost'])}** "
            f"({ms(r['paired_difference']['median'])}) |"
        )
    lines += [
        "",
        "Where the consistent statement's time goes (medians; c = consistent, p = plain): *analysis* = parsing and "
        "analysing the statement only (for c: the statement's cut resolution and the epoch's plan), run after the "
        "round; *execution* = statement − analysis (for c: the reset of `consistent-staged` when needed, Spark's "
        "write, the fenced staged commit, verify, the fenced publish); `done` = the statement again with no new "
        "input (analysis, then an empty write job, nothing committed); registration = analysing the first "
        "statement on a new sink (registration + plan) − analysing it again.",
        "",
        "| catalog | source rows | analysis c / p (per-round c − p) | execution c / p (per-round c − p) | `done` re-run: "
        "median (p90) | cut resolution in the epoch: list / load / resolve | commits c / p | registration: median "
        "(min–max) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        res, reg, an, ex = r["resolution_in_epoch"], r["registration"], r["analysis"], r["execution"]
        samples = [g["registration"] for g in reg["samples"]]
        reg_text = f"{ms(reg['registration'])} ({ms(min(samples))}–{ms(max(samples))}, n={len(samples)})" if samples else "—"
        lines.append(
            f"| {r['setup']} | {r['rows']:,} | {ms(an['consistent']['median'])} / {ms(an['plain']['median'])} "
            f"({signed_ms(r['analysis_difference']['median'])}) | {ms(ex['consistent']['median'])} / "
            f"{ms(ex['plain']['median'])} ({signed_ms(r['execution_difference']['median'])}) | "
            f"{ms(r['done']['median'])} ({ms(r['done']['p90'])}) | "
            f"{ms(res['list'])} / {ms(res['load'])} / {ms(res['resolve'])} | "
            f"{r['commits_per_statement']['consistent']} / {r['commits_per_statement']['plain']} | {reg_text} |"
        )
    lines.append("")
    for r in results:
        bo = r["paired_ratio_by_first"]
        lines.append(
            f"- {r['setup']} {r['rows']:,} rows: consistent {ms(r['consistent']['min'])}–{ms(r['consistent']['max'])}, "
            f"plain {ms(r['plain']['min'])}–{ms(r['plain']['max'])}; per-round ratio with consistent first "
            f"{bo['consistent']:.3f}×, plain first {bo['plain']:.3f}× (order-balanced {r['order_balanced_ratio']:.3f}×); "
            f"by position in the round, first: c {ms(r['by_position']['consistent first'])} / p "
            f"{ms(r['by_position']['plain first'])}, second: c {ms(r['by_position']['consistent second'])} / p "
            f"{ms(r['by_position']['plain second'])}; "
            f"root at the end {r['root_rows_at_end']:,} rows (+{r['batch_rows']:,} per round); sinks compared after "
            "every round: " + ("equal, every epoch published, no `done` re-run committed." if not r["problems"]
                               else "PROBLEMS: " + "; ".join(r["problems"][:5]))
        )
    for r in results:
        requests = {k: v for k, v in r["requests_per_statement"].items() if v}
        if requests:
            lines.append(f"- {r['setup']} {r['rows']:,} rows, per statement (typical; REST requests with --count-requests): "
                         + "; ".join(f"{k}: " + ", ".join(f"{n} {kind}" for kind, n in v.items() if n)
                                     + (f" (REST: {total})" if (total := sum(n for kind, n in v.items()
                                                                                 if kind != "spark jobs")) else "")
                                     for k, v in requests.items()))
    if meta.get("jfr"):
        j = meta["jfr"]
        lines += ["", f"JFR ({j['path']}, {j['setup']} {j['rows']:,} rows): running (samples x "
                  "sampling period) and waiting (every wait JFR recorded on the statement thread), per statement:", ""]
        for label in ("consistent", "plain", "done", "registering analysis"):
            if label not in j["labels"]:
                continue
            b = j["labels"][label]
            lines.append(f"  {label} ({b['statements']} statements): statement thread running {b['statement_thread_ms']:.1f} ms, "
                         f"waiting {b['waits_ms']:.1f} ms; task threads running {b['task_threads_ms']:.1f} ms")
        for label in ("consistent", "plain", "done", "registering analysis"):
            if label not in j["labels"]:
                continue
            b = j["labels"][label]
            lines += ["", f"  {label}, statement thread by the outermost plugin frame:"]
            lines += [f"    {value:7.1f} ms  {name}" for name, value in b["by_plugin_entry"]]
            lines += [f"  {label}, inclusive (plugin and Iceberg methods):"]
            lines += [f"    {value:7.1f} ms  {name}" for name, value in b["inclusive"]]
            lines += [f"  {label}, statement thread waiting, by site:"]
            lines += [f"    {value:7.1f} ms  {name}" for name, value in b["waits"]]
        lines += ["", "  consistent, leaf frames:"]
        lines += [f"    {value:7.1f} ms  {name}" for name, value in j["labels"].get("consistent", {}).get("leaf", [])[:12]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=ROWS_DEFAULT, help="source sizes, comma-separated (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=30, help="measured rounds per size (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=6, help="rounds run first and dropped (default %(default)s)")
    parser.add_argument("--batch-rows", type=int, default=None,
                        help="rows ingested into the root before each round (default: rows/1000, at least 1)")
    parser.add_argument("--vocabulary", type=int, default=200,
                        help="distinct words in the source (default %(default)s, the demo's; the sink gets one row each)")
    parser.add_argument("--setups", default="sqlite,rest", help="catalog setups, comma-separated: sqlite, rest")
    parser.add_argument("--rest-rows", default=None,
                        help="sizes for the rest setup (default: the --rows sizes)")
    parser.add_argument("--registrations", type=int, default=3,
                        help="sinks registered after the rounds to time registration (default %(default)s)")
    parser.add_argument("--count-requests", action="store_true",
                        help="send the rest setup's Spark requests through a counting proxy (adds its latency)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    parser.add_argument("--jfr", type=Path, help="record a JFR of the last setup and size's timed rounds here")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    if args.repeat < 2 or args.warmup < 1:
        parser.error("--repeat must be >= 2 (both orders) and --warmup >= 1 (the first round registers the job)")
    sizes = [int(s.replace("_", "")) for s in args.rows.split(",") if s]
    rest_sizes = sizes if args.rest_rows is None else [int(s.replace("_", "")) for s in args.rest_rows.split(",") if s]
    labels = [s.strip() for s in args.setups.split(",") if s.strip()]
    if not set(labels) <= {"sqlite", "rest"}:
        parser.error("--setups takes sqlite and/or rest")

    from consistent_catalog.spark.session import build_session

    tmp = None
    if args.dir:
        work = args.dir.resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bench-sql-writer-")
        work = Path(tmp.name)
    began = time.monotonic()
    load_start = load()
    commit = _git_commit()  # at the start: the plugin jar is built from this checkout when the setups are made
    setups: list[Setup] = []
    spark = None
    results: list[dict[str, Any]] = []
    flight = None
    try:
        for label in labels:
            setups.append(sqlite_setup(work) if label == "sqlite" else rest_setup(work, args.count_requests))
        started = time.perf_counter()
        conf = merged_conf(setups)
        if args.jfr is not None:  # whole stacks: Spark's run 100+ frames deep (JFR keeps 64 by default)
            conf["spark.driver.extraJavaOptions"] = "-XX:FlightRecorderOptions:stackdepth=1024"
        spark = build_session(*_session_target(setups[0], work), name=setups[0].plain, app_name="bench-sql-writer",
                              master="local[2]", extra_conf=conf)
        print(f"spark session up in {time.perf_counter() - started:.1f}s; load {load()}", file=sys.stderr)
        plan = [(setup, rows) for setup in setups for rows in (rest_sizes if setup.label == "rest" else sizes)]
        for n, (setup, rows) in enumerate(plan):
            if args.jfr is not None and n == len(plan) - 1:
                flight = Flight(spark, args.jfr.resolve())
            results.append(run_size(spark, setup, rows, args, jfr=flight))
    finally:
        if spark is not None:
            stop_jvm(spark)
        for setup in setups:
            for close in setup.closers:
                close()
        if tmp is not None:
            tmp.cleanup()

    meta: dict[str, Any] = {
        "command": "python -m bench.bench_sql_writer " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "repeat": args.repeat, "warmup": args.warmup, "vocabulary": args.vocabulary, "load_start": load_start, "load_end": load(),
        "cores": os.cpu_count(), "python": platform.python_version(), "minutes": (time.monotonic() - began) / 60,
        "spark": _spark_version(), "commit": commit,
    }
    if flight is not None:
        meta["jfr"] = {"path": str(args.jfr), "setup": results[-1]["setup"], "rows": results[-1]["rows"],
                       "labels": jfr_summary(args.jfr.resolve(), flight.intervals)}
    if args.json:
        print(json.dumps({"meta": meta, "results": results}, indent=2, default=str))
    else:
        print(report(results, meta))
    return 0 if not any(r["problems"] for r in results) else 1


def stop_jvm(spark: Any) -> None:
    """Stop the session and its driver JVM (the one pyspark started for us) while the catalogs still exist: its
    shutdown hook unregisters the jobs the plugin registered (protocol §5.9)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway  # noqa: SLF001
    spark.stop()
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    with contextlib.suppress(Exception):
        gateway.shutdown()
    if proc.stdin is not None:
        proc.stdin.close()  # PythonGatewayServer exits when its stdin closes
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        print(f"the driver JVM {proc.pid} did not exit within 60 s; left to end with this process", file=sys.stderr)
    SparkContext._gateway = SparkContext._jvm = None  # noqa: SLF001


def _session_target(setup: Setup, work: Path) -> tuple[str, Any]:
    """What ``build_session`` gets for its default catalog ``lake`` (every setting is overridden by the setups' conf)."""
    if setup.label == "sqlite":
        return f"sqlite:///{work}/sqlite/catalog.db", work / "sqlite" / "warehouse"
    return setup.conf["spark.sql.catalog.rest.uri"], setup.conf.get("spark.sql.catalog.rest.warehouse")


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _spark_version() -> str:
    try:
        import pyspark

        return pyspark.__version__
    except ImportError:  # pragma: no cover
        return "?"


if __name__ == "__main__":
    raise SystemExit(main())
