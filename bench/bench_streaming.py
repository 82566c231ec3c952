"""Benchmark: Structured Streaming (issue #14) — freshness of the streaming pipeline, and the sink's overhead.

Not a test. Two parts (``--part freshness|overhead|both``):

**(a) freshness.** Runs ``consistent-catalog demo --streaming --dir D --epochs N --rows-per-epoch K
--interval 1 [--engine pyiceberg] --output json`` as a subprocess: one Spark application (local[2]) with a file-source
streaming root into ``demo.words`` and the streaming jobs ``word-count`` and ``count-histogram``,
all at a 1 s trigger, while a feeder writes one JSON file of K words per second. A thread of this
script opens the same SQLite catalog with pyiceberg and, every ``--sample-every`` seconds, records
now − W(demo.count_histogram) (``ConsistentCatalog.status``). Samples count from the demo's line
"...; streaming the other N ..." (the pipeline is warm: the first cut exists) until N × interval later (the
last file written); catch-up, report and shutdown are excluded. The demo's own samples (now − the
cut's barrier, read by the demo in-process every second while files are fed) are reported beside,
and the anatomy: per root barrier in that window, when ``main`` of each table moved onto it; and, from Spark's event
log (the demo's session writes one to a temporary folder: ``PYSPARK_SUBMIT_ARGS`` turns it on), per query the
medians of its micro-batches' progress ``durationMs`` parts (``latestOffset`` includes a ``consistent.waitFor``
wait, ``queryPlanning`` the changes stream's nested job, ``addBatch`` the batch's job and the sink's commit) and of
the Spark jobs each ran. The script says which path the demo took: all three hops native (plain streaming queries
through ``lake_consistent``), or which of them Python drives.

**(b) overhead.** One Spark session; the same streaming query — ``rate-micro-batch`` with
``--rows`` rows per micro-batch, projected to (id, word, bucket, amount) — written two ways:

- ``plain``: Iceberg's own streaming sink, ``writeStream.format("iceberg").outputMode("append")
  .toTable("lake.bench.plain")`` (Iceberg records the query id and epoch id in each snapshot);
- ``ours``: ``start_root_stream(...)`` into ``bench.ours`` (processing-time barriers; each batch a
  keyed ingest: the key check, Spark's staged write-audit-publish append, one fenced publish commit);
- with ``--event-time`` also ``ours+et``: the same with ``event_time_column`` (one more pass over the
  batch for its maximum event time; the batch is cached for it).

Contenders run in alternating blocks (the order flips each round): each block starts the query
from its checkpoint at ``processingTime=0``, lets it run ``--batches`` micro-batches and stops it;
the first batch of each block (query start, caches) is discarded. Per micro-batch the query's own
progress gives ``triggerExecution`` (everything: offsets log, the batch, commit log) and
``addBatch`` (the sink). Reported: medians and p90 per contender and the ratios ours/plain.
At the end the row counts of both tables are checked with pyiceberg.

Usage:
    python -m bench.bench_streaming [--part both] [--files 60] [--words 200] [--sample-every 0.5] [--engine spark]
                                    [--rows 100000] [--rounds 6] [--batches 4] [--event-time] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import DEMO_TABLES, DelaySampler, barrier_snapshots, demo_catalog, describe, load, quantile

HIST = DEMO_TABLES[2]


# --- (a) freshness ------------------------------------------------------------------------------------


def anatomy(root: Path, since_ms: float, until_ms: float) -> dict[str, list[float]]:
    """Per root barrier B in the window: seconds after B at which ``main`` of each table moved onto the snapshot
    carrying B (the snapshot log's time of the publish; for the root, of the ingest's publish)."""
    catalog = demo_catalog(root)
    out: dict[str, list[float]] = {}
    for table in DEMO_TABLES:
        newest, published = barrier_snapshots(catalog, table, published_only=True)
        out[table] = [(published[s.snapshot_id] - barrier) / 1000 for barrier, s in sorted(newest.items())
                      if s.snapshot_id in published and since_ms <= barrier <= until_ms]
    catalog.engine.dispose()
    return out


PARTS = ("latestOffset", "walCommit", "queryPlanning", "addBatch", "commitOffsets", "triggerExecution")


def progress_parts(event_logs: Path, since: float, until: float) -> dict[str, dict[str, Any]]:
    """Per streaming query of the demo: the micro-batches with input that started in the window (wall seconds), the
    median of each ``durationMs`` part (s) and the median number of Spark jobs a batch ran, from the event log."""
    batches: dict[str, list[dict[str, float]]] = {}
    jobs: dict[tuple[str, str], int] = {}
    names: dict[str, str] = {}
    for path in sorted(event_logs.rglob("*")):
        if not path.is_file() or not path.name.startswith(("events_", "local-", "app-")):
            continue
        for line in path.open(encoding="utf-8"):
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                props = event.get("Properties") or {}
                query, batch = props.get("sql.streaming.queryId"), props.get("streaming.sql.batchId")
                if query and batch is not None:
                    jobs[(query, batch)] = jobs.get((query, batch), 0) + 1
            elif kind.endswith("QueryProgressEvent"):
                progress = event["progress"]
                started = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
                rows = sum(source.get("numInputRows") or 0 for source in progress["sources"])
                if rows and since <= started <= until:
                    names[progress["id"]] = progress["name"]
                    parts = {k: progress["durationMs"].get(k, 0) / 1000 for k in PARTS}
                    parts["jobs"] = float(jobs.get((progress["id"], str(progress["batchId"])), 0))
                    batches.setdefault(progress["name"], []).append(parts)
    return {name: {"batches": len(rows), **{k: statistics.median(r[k] for r in rows) for k in (*PARTS, "jobs")}}
            for name, rows in batches.items()}


def freshness(args: argparse.Namespace) -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="bench-streaming-")
    root = Path(tmp) / "demo"
    event_logs = Path(tmp) / "events"
    event_logs.mkdir()
    env = dict(os.environ)
    env["PYSPARK_SUBMIT_ARGS"] = (f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir={event_logs.as_uri()} "
                                  "--conf spark.eventLog.compress=false pyspark-shell")
    exe = shutil.which("consistent-catalog", path=str(Path(sys.executable).parent)) or "consistent-catalog"
    command = [exe, "demo", "--streaming", "--dir", str(root), "--epochs", str(args.files),
               "--rows-per-epoch", str(args.words), "--interval", "1", "--engine", args.engine, "--output", "json"]
    load_start = load()
    print(f"running {shlex.join(command)}; load {load_start}", file=sys.stderr)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
    sampler = DelaySampler(root, args.sample_every, [HIST])
    chunks: list[str] = []
    assert proc.stdout is not None and proc.stderr is not None
    stdout = proc.stdout
    reader = threading.Thread(target=lambda: chunks.append(stdout.read()), daemon=True)
    reader.start()
    feeding_from = None
    loads: list[float] = []
    tail: list[str] = []
    path: list[str] = []
    for raw in proc.stderr:
        line = raw.rstrip("\n")
        tail = (tail + [line])[-40:]
        if "run through lake_consistent" in line or "Python-driven" in line or "runs as a Python" in line:
            path.append(line)  # the demo's own word for the path it took
            print(f"[load {load()}] {line}", file=sys.stderr)
        elif "streaming the other" in line and feeding_from is None:  # the demo's line once the warm-up cut exists
            feeding_from = time.time()
            sampler.start()
            print(f"[load {load()}] {line}", file=sys.stderr)
        elif line.startswith(("cut at", "end-to-end", "protocol")):
            loads.append(os.getloadavg()[0])
            print(f"[load {load()}] {line}", file=sys.stderr)
    proc.wait()
    reader.join()
    sampler.stop.set()
    if sampler.ident is not None:
        sampler.join()
    steps = anatomy(root, feeding_from * 1000, (feeding_from + args.files) * 1000) if feeding_from else {}
    parts = progress_parts(event_logs, feeding_from, feeding_from + args.files) if feeding_from else {}
    shutil.rmtree(tmp, ignore_errors=True)
    if proc.returncode != 0 or feeding_from is None:
        print("\n".join(tail), file=sys.stderr)
        raise SystemExit(f"the streaming demo failed (exit {proc.returncode})")
    report = json.loads(chunks[0])
    until = feeding_from + args.files - 1  # the warm-up file is written before the line; the rest 1/s
    independent = sampler.delays(HIST, feeding_from, until)
    own = [d / 1000 for d in report["delays_ms"]]
    return {"command": shlex.join(command).replace(str(root), "D"), "independent": independent, "demo": own,
            "violations": report["violations"], "cuts_checked": report["cuts_checked"], "anatomy": steps,
            "progress": parts, "path": path,
            "load": (load_start, load()), "load_1m_during": loads, "sampler_errors": sampler.errors[:3]}


# --- (b) overhead -------------------------------------------------------------------------------------


CONTENDERS = ("plain", "ours")


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType
    from pyspark.sql import functions as F

    from consistent_catalog import ConsistentCatalog
    from consistent_catalog.spark.session import build_session
    from consistent_catalog.spark.streaming import start_root_stream

    tmp = Path(tempfile.mkdtemp(prefix="bench-streaming-overhead-"))
    (tmp / "warehouse").mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp}/catalog.db", warehouse=f"file://{tmp}/warehouse")
    catalog.create_namespace("bench")
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "word", StringType(), required=False),
                    NestedField(3, "bucket", IntegerType(), required=False),
                    NestedField(4, "amount", DoubleType(), required=False))
    contenders = CONTENDERS + (("ours+et",) if args.event_time else ())
    tables = {"plain": "bench.plain", "ours": "bench.ours", "ours+et": "bench.ours_et"}
    for name in contenders:
        catalog.create_table(tables[name], schema=schema)
    cc = ConsistentCatalog(catalog)
    spark = build_session(f"sqlite:///{tmp}/catalog.db", tmp / "warehouse", app_name="bench-streaming-overhead")
    start_ts = (time.time() - 3600) * 1000

    def source(name: str) -> Any:
        # each contender its own source (own offsets), the same rows per batch
        ticks = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", args.rows)
                 .option("numPartitions", 2).option("startTimestamp", int(start_ts)).option("advanceMillisPerBatch", 1000)
                 .load())
        return ticks.select(
            F.col("value").alias("id"),
            F.concat(F.lit("w"), (F.col("value") % 1000).cast("string")).alias("word"),
            (F.col("value") % 97).cast("int").alias("bucket"),
            (F.col("value") * 0.5).alias("amount"),
            F.col("timestamp").alias("ts"),
        )

    def start(name: str) -> Any:
        checkpoint = str(tmp / "chk" / name)
        if name == "plain":
            return (source(name).drop("ts").writeStream.format("iceberg").outputMode("append")
                    .trigger(processingTime="0 seconds").option("checkpointLocation", checkpoint)
                    .toTable(f"lake.{tables[name]}"))
        extra = {"event_time_column": "ts", "persist": args.et_persist} if name == "ours+et" else {}
        stream = source(name) if name == "ours+et" else source(name).drop("ts")
        return start_root_stream(stream, cc, tables[name], checkpoint_location=checkpoint, trigger="0 seconds",
                                 idle_after=None, **extra)

    timings: dict[str, dict[str, list[float]]] = {n: {"trigger": [], "addBatch": []} for n in contenders}
    batches: dict[str, int] = dict.fromkeys(contenders, 0)
    load_start = load()
    for round_ in range(args.rounds):
        order = contenders if round_ % 2 == 0 else contenders[::-1]
        for name in order:
            query = start(name)
            seen: set[int] = set()
            deadline = time.monotonic() + 600
            while len(seen) < args.batches and time.monotonic() < deadline:
                time.sleep(0.2)
                for progress in query.recentProgress:
                    if progress["numInputRows"] and progress["batchId"] not in seen:
                        seen.add(progress["batchId"])
                        if len(seen) > 1:  # the block's first batch carries the query start: discarded
                            timings[name]["trigger"].append(progress["durationMs"]["triggerExecution"] / 1000)
                            timings[name]["addBatch"].append(progress["durationMs"]["addBatch"] / 1000)
            query.stop()
            batches[name] += len(seen)
            print(f"round {round_ + 1}/{args.rounds} {name}: {len(seen)} batches; load {load()}", file=sys.stderr)
    ids = {n: catalog.load_table(tables[n]).scan(selected_fields=("id",)).to_arrow()["id"] for n in contenders}
    counts = {n: len(v) for n, v in ids.items()}
    distinct = {n: len(set(v.to_pylist())) for n, v in ids.items()}
    spark.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    # every row once (a batch that ran past the last progress seen may have landed too: whole batches)
    expected = {n: distinct[n] if distinct[n] % args.rows == 0 and distinct[n] >= batches[n] * args.rows else -1
                for n in contenders}
    medians = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in timings.items()}
    p90 = {n: {k: quantile(v, 0.9) for k, v in t.items()} for n, t in timings.items()}
    return {"timings": timings, "medians": medians, "p90": p90, "counts": counts, "expected": expected,
            "ratios": {n: medians[n]["trigger"] / medians["plain"]["trigger"] for n in contenders if n != "plain"},
            "load": (load_start, load())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("freshness", "overhead", "both"), default="both")
    parser.add_argument("--files", type=int, default=60, help="(a) files fed, one per second")
    parser.add_argument("--words", type=int, default=200, help="(a) words per file")
    parser.add_argument("--sample-every", type=float, default=0.5, help="(a) seconds between independent samples")
    parser.add_argument("--engine", choices=("spark", "pyiceberg"), default="spark",
                        help="(a) the jobs' transforms: Spark SQL, or pyarrow (each job still a streaming query)")
    parser.add_argument("--rows", type=int, default=100_000, help="(b) rows per micro-batch")
    parser.add_argument("--rounds", type=int, default=6, help="(b) alternating rounds")
    parser.add_argument("--batches", type=int, default=4, help="(b) micro-batches per block (the first is discarded)")
    parser.add_argument("--event-time", action="store_true", help="(b) also measure the sink with event-time barriers")
    parser.add_argument("--et-persist", action="store_true", help="(b) cache event-time batches (RootStreamWriter persist=)")
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown section for BENCHMARKS.md")
    args = parser.parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "bench.bench_streaming", *(argv if argv is not None else sys.argv[1:])])
    if args.part in ("freshness", "both"):
        result = freshness(args)
        print(f"(a) freshness, now - W({HIST}) at a 1 s trigger, {args.words} words/s:")
        print(f"    independent sampler: {describe(result['independent'])}")
        print(f"    demo's own samples : {describe(result['demo'])}")
        for line in result["path"]:
            print(f"    path: {line}")
        for table, values in result["anatomy"].items():
            print(f"    {table:22} on main after its barrier: {describe(values)}")
        for name, parts in result["progress"].items():
            print(f"    {name:16} {parts['batches']} batches with input, medians: "
                  + ", ".join(f"{k} {parts[k]:.3f}s" for k in PARTS) + f", Spark jobs {parts['jobs']:g}")
        print(f"    violations {result['violations']} at {result['cuts_checked']} cuts; load {result['load'][0]} -> "
              f"{result['load'][1]}; 1-min load during the run: {describe(result['load_1m_during'], '')}")
        if args.markdown:
            ind, own = result["independent"], result["demo"]
            print("\n| sampler | samples | median | p95 | max |\n|---|---:|---:|---:|---:|")
            for label, values in (("independent, W(count_histogram)", ind), ("demo, cut barrier", own)):
                if values:
                    print(f"| {label} | {len(values)} | {statistics.median(values):.2f} s | "
                          f"{quantile(values, 0.95):.2f} s | {max(values):.2f} s |")
            print("\n| table | epochs | on `main` after its barrier (median) | p95 |\n|---|---:|---:|---:|")
            for table, values in result["anatomy"].items():
                if values:
                    print(f"| {table} | {len(values)} | {statistics.median(values):.2f} s | {quantile(values, 0.95):.2f} s |")
            if result["progress"]:
                print("\n| query | batches with input | " + " | ".join(PARTS) + " | Spark jobs |\n|---|---:|"
                      + "---:|" * (len(PARTS) + 1))
                for name, parts in result["progress"].items():
                    print(f"| {name} | {parts['batches']} | " + " | ".join(f"{parts[k]:.3f} s" for k in PARTS)
                          + f" | {parts['jobs']:g} |")
            print(f"\nCommand: `{command}` (demo: `consistent-catalog {result['command'].split(' ', 1)[1]}`); load {result['load'][0]} → {result['load'][1]}.")
    if args.part in ("overhead", "both"):
        result = overhead(args)
        print(f"(b) overhead per micro-batch at {args.rows} rows, {args.rounds} rounds x {args.batches} batches:")
        for name, medians in result["medians"].items():
            print(f"    {name:8} trigger median {medians['trigger']:.3f}s (p90 {result['p90'][name]['trigger']:.3f}s), "
                  f"addBatch median {medians['addBatch']:.3f}s; {len(result['timings'][name]['trigger'])} batches")
        for name, ratio in result["ratios"].items():
            print(f"    {name}/plain = {ratio:.3f}")
        print(f"    rows {result['counts']} (expected {result['expected']}); load {result['load'][0]} -> {result['load'][1]}")
        if result["counts"] != result["expected"]:
            print("    ROW COUNTS DIFFER", file=sys.stderr)
            return 1
        if args.markdown:
            print("\n| sink | batches | per micro-batch (median) | p90 | sink part (addBatch) | ratio to plain |")
            print("|---|---:|---:|---:|---:|---:|")
            for name, medians in result["medians"].items():
                ratio = "1" if name == "plain" else f"{result['ratios'][name]:.3f}"
                print(f"| {name} | {len(result['timings'][name]['trigger'])} | {medians['trigger']:.3f} s | "
                      f"{result['p90'][name]['trigger']:.3f} s | {medians['addBatch']:.3f} s | {ratio} |")
            print(f"\nCommand: `{command}`; load {result['load'][0]} → {result['load'][1]}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
