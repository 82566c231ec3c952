"""Benchmark: update output mode vs complete output mode (issue 32; protocol §5.7) — a streaming aggregate over
``--keys`` N distinct keys written to a derived table of ``lake_consistent``, where each micro-batch after the first
changes ``--changed`` of the keys.

Not a test. One local[2] Spark session (``build_session``, the plugin jar of the checkout as it is: this script never
builds it). Per size N a namespace ``bench_<N>`` and, per *case* (how the changed keys and the sink's files lie):

- ``random``: the changed keys are drawn at random from all N; the sinks are unpartitioned, so the aggregate's hash
  shuffle spreads every range of keys over every data file (Spark's layout for a streaming aggregate);
- ``clustered``: the changed keys are one contiguous range (the next one each batch); the sinks are partitioned by
  ``truncate(key, W)`` (``--partition-width`` W), so each data file holds keys of one range of W.

Each case has two contenders, the same query with only the output mode differing::

    spark.readStream.table("lake_consistent.bench_1m.events_<case>_<mode>")
         .groupBy("key").agg(count(lit(1)).alias("n"), sum("amount").alias("total"))
         .writeStream.outputMode("complete" | "update").option("consistent.job", ...)
         .option("checkpointLocation", <its own>).trigger(processingTime=...)
         .toTable("lake_consistent.bench_1m.totals_<case>_<mode>")

into a derived table ``(key bigint NOT NULL, n bigint, total bigint)`` with identifier field ``key``. Each contender
reads a root of its own (``events_<case>_<mode>``: ``key bigint NOT NULL, amount bigint``), fed the same batches by
``ConsistentCatalog.ingest`` (a barrier-tagged pyiceberg append, keyed), so no two queries ever run a batch at the same
time on the shared cores: batch 0 holds each of the N keys once, each later batch one row for each changed key. Per
batch the contenders take turns (the order rotates with the batch): ingest into the contender's root, wait until its
sink's ``main`` has the epoch that read that root snapshot (pyiceberg), then take the micro-batch's progress. The four
queries run throughout (a processing-time trigger; an idle trigger is one catalog read).

Per micro-batch, from Spark's progress (``query.recentProgress``): ``triggerExecution`` (the whole micro-batch) and
``addBatch`` (running it: the aggregate, the state store, the sink's write and commit); from the driver's log the
sink's commit (Spark's ``StreamingWrite.commit``: for update mode the key merge, protocol §5.7: reading the sink's
files that may hold a changed key and rewriting those that do, then the one overwrite commit); from the epoch's
snapshot summaries (pyiceberg) the data files and records it added and deleted. Batch 0 (the first, all N keys, the
query's start) is reported apart. Reported per size and case: median and p90 per mode, the ratio update / complete of
the medians and of each batch's pair; across sizes, how each mode's median grows from the smaller table to the larger.

Checked at the end (not timed), with pyiceberg and pyarrow, independently of Spark and the plugin: each contender's
sink head equals the aggregate recounted from its root (pyarrow ``group_by``), both sinks of a case hold the same rows,
no key twice, and every ingest of a root was published by exactly one epoch of its sink.

Times move by +-30 % on the shared 2 cores: read the per-batch ratios and the load average.

Usage:
    python -m bench.bench_streaming_update [--keys 1000000,200000] [--changed 0.01 | 10000] [--batches 6]
                                           [--cases random,clustered] [--partition-width 50000] [--trigger 0.5]
                                           [--driver-memory 3g] [--state-store hdfs|rocksdb] [--merge-mode copy-on-write|merge-on-read]
                                           [--markdown] [--json] [--save FILE] [--dir D]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bench_sql_writer import _git_commit, _spark_version, ms, size_label, spread, stop_jvm
from bench.bench_streaming_sink import CommitLog
from bench.common import load
from consistent_catalog.properties import BARRIER, SOURCES

KEYS_DEFAULT = "1000000,200000"
MODES = ("complete", "update")
CASES = ("random", "clustered")
STATE_STORES = {
    "hdfs": {},
    "rocksdb": {"spark.sql.streaming.stateStore.providerClass":
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"},
}
SUMMARY_FIGURES = ("added-data-files", "deleted-data-files", "added-records", "deleted-records")


# --- data -----------------------------------------------------------------------------------------------------
def changed_count(keys: int, changed: float) -> int:
    """``--changed``: a fraction of the keys (< 1) or a number of keys (>= 1)."""
    count = round(keys * changed) if changed < 1 else int(changed)
    if not 1 <= count <= keys:
        raise ValueError(f"--changed {changed} gives {count} keys of {keys}: it must give 1 to {keys}")
    return count


def batch_rows(keys: int, changed: int, case: str, number: int, seed: int) -> Any:
    """The root's rows of batch ``number``: batch 0 every key once, each later one a row per changed key."""
    import numpy as np
    import pyarrow as pa

    if number == 0:
        key = np.arange(keys, dtype=np.int64)
        amount = key % 1000
    else:
        if case == "random":
            key = np.sort(np.random.default_rng(seed * 1_000_003 + number).choice(keys, changed, replace=False))
        else:  # the next contiguous range, wrapping round
            start = ((number - 1) * changed) % (keys - changed + 1)
            key = np.arange(start, start + changed, dtype=np.int64)
        amount = np.full(len(key), number, dtype=np.int64)
    schema = pa.schema([pa.field("key", pa.int64(), nullable=False), pa.field("amount", pa.int64(), nullable=False)])
    return pa.table({"key": key.astype(np.int64), "amount": amount.astype(np.int64)}, schema=schema)


# --- one contender ---------------------------------------------------------------------------------------------
@dataclass
class Contender:
    case: str
    mode: str
    root: str
    sink: str
    job: str
    checkpoint: Path
    query: Any = None
    seen_batch: int = -1
    head: int | None = None  # the sink's main head after its last epoch

    @property
    def label(self) -> str:
        return f"{self.case}/{self.mode}"


def create_tables(catalog: Any, ns: str, case: str, mode: str, width: int,
                  merge_mode: str = "copy-on-write") -> tuple[str, str]:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import TruncateTransform
    from pyiceberg.types import LongType, NestedField

    root, sink = f"{ns}.events_{case}_{mode}", f"{ns}.totals_{case}_{mode}"
    catalog.create_table(root, schema=Schema(NestedField(1, "key", LongType(), required=True),
                                             NestedField(2, "amount", LongType(), required=True)))
    schema = Schema(NestedField(1, "key", LongType(), required=True), NestedField(2, "n", LongType(), required=False),
                    NestedField(3, "total", LongType(), required=False), identifier_field_ids=[1])
    properties = {"write.merge.mode": merge_mode} if mode == "update" else {}  # update mode's merge (protocol §5.7)
    if case == "clustered":
        spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=TruncateTransform(width),
                                            name="key_range"))
        # Spark gets each batch's rows in hash order: one open file per partition and task
        catalog.create_table(sink, schema=schema, partition_spec=spec,
                             properties={"write.spark.fanout.enabled": "true", **properties})
    else:
        catalog.create_table(sink, schema=schema, properties=properties)
    return root, sink


def start(spark: Any, c: Contender, trigger: float) -> Any:
    from pyspark.sql import functions as F

    frame = (spark.readStream.table(f"lake_consistent.{c.root}").groupBy("key")
             .agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("total")))
    return (frame.writeStream.outputMode(c.mode).option("checkpointLocation", str(c.checkpoint))
            .option("consistent.job", c.job).trigger(processingTime=f"{trigger} seconds")
            .toTable(f"lake_consistent.{c.sink}"))


def main_chain(metadata: Any) -> list[Any]:
    out, snapshot = [], metadata.snapshot_by_name("main")
    while snapshot is not None:
        out.append(snapshot)
        snapshot = metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return out[::-1]


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def step(spark: Any, catalog: Any, cc: Any, c: Contender, data: Any, number: int, commit_log: CommitLog | None,
         timeout: float) -> dict[str, Any]:
    """Ingests ``data`` into the contender's root and waits for its epoch; the micro-batch's figures."""
    read = cc.ingest(c.root, data, key=f"batch-{number}").snapshot_id

    def published() -> list[Any] | None:
        if c.query.exception() is not None:
            raise SystemExit(f"{c.label}: the query failed: {c.query.exception()}")
        chain = main_chain(catalog.load_table(c.sink).metadata)
        ids = [s.snapshot_id for s in chain]
        new = chain[ids.index(c.head) + 1:] if c.head in ids else chain
        for snapshot in new:
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            if SOURCES in summary and json.loads(summary[SOURCES]).get(c.root) == read:
                return new
        return None

    new = wait_for(published, timeout, f"{c.label}: the epoch of batch {number}")
    c.head = new[-1].snapshot_id

    def progress() -> dict[str, Any] | None:
        done = [p for p in c.query.recentProgress if p["numInputRows"] and p["batchId"] > c.seen_batch]
        return done[-1] if done else None

    p = wait_for(progress, 60, f"{c.label}: the progress of batch {number}")
    c.seen_batch = p["batchId"]
    commits = commit_log.read_block() if commit_log is not None else {}
    files = {k: sum(int((s.summary.additional_properties if s.summary else {}).get(k, 0)) for s in new)
             for k in SUMMARY_FIGURES}
    head = new[-1].summary.additional_properties if new[-1].summary else {}
    return {
        "case": c.case, "mode": c.mode, "number": number, "batch_id": p["batchId"], "rows": p["numInputRows"],
        "triggerExecution": p["durationMs"].get("triggerExecution", 0) / 1000,
        "addBatch": p["durationMs"].get("addBatch", 0) / 1000,
        "commit": commits.get(p["batchId"], {}).get("commit"),
        "snapshots": len(new), "operation": [s.summary.operation.value for s in new if s.summary],
        "barrier": head.get(BARRIER), **files,
        "total-data-files": int(head.get("total-data-files", 0)), "total-records": int(head.get("total-records", 0)),
    }


# --- checks ------------------------------------------------------------------------------------------------------
def verify(catalog: Any, contenders: list[Contender], batches: int) -> list[str]:
    """Each sink's head vs the aggregate recounted from its root (pyarrow), the two sinks of a case alike, no key
    twice, and one epoch per ingest of the root."""
    import pyarrow as pa

    problems: list[str] = []
    heads: dict[str, dict[str, Any]] = {}
    for c in contenders:
        root = catalog.load_table(c.root).scan().to_arrow()
        expected = (root.group_by("key").aggregate([("amount", "count"), ("amount", "sum")])
                    .rename_columns(["key", "n", "total"]).sort_by("key"))
        got = catalog.load_table(c.sink).scan().to_arrow().select(["key", "n", "total"]).sort_by("key")
        if len(pa.compute.unique(got["key"])) != got.num_rows:
            problems.append(f"{c.label}: {got.num_rows - len(pa.compute.unique(got['key']))} keys twice in {c.sink}")
        if not got.cast(expected.schema).equals(expected):
            problems.append(f"{c.label}: {c.sink} ({got.num_rows} rows) differs from the recount over {c.root} "
                            f"({expected.num_rows} keys)")
        ingests = [s.snapshot_id for s in main_chain(catalog.load_table(c.root).metadata)]
        barriers: dict[int, set[str]] = {}  # root snapshot read -> the barriers of the epochs that read it
        for s in main_chain(catalog.load_table(c.sink).metadata):
            summary = s.summary.additional_properties if s.summary is not None else {}
            if SOURCES in summary:
                barriers.setdefault(json.loads(summary[SOURCES])[c.root], set()).add(summary.get(BARRIER, ""))
        if sorted(barriers) != sorted(ingests) or len(ingests) != batches:
            problems.append(f"{c.label}: {len(ingests)} ingests into {c.root}, epochs read {len(barriers)} of them")
        if any(len(b) != 1 for b in barriers.values()):
            problems.append(f"{c.label}: a root snapshot read by more than one epoch of {c.sink}")
        heads.setdefault(c.case, {})[c.mode] = got
    for case, by_mode in heads.items():
        if len(by_mode) == 2 and not by_mode["complete"].equals(by_mode["update"]):
            problems.append(f"{case}: the complete and update sinks differ")
    return problems


# --- one size ----------------------------------------------------------------------------------------------------
def run_size(spark: Any, catalog: Any, work: Path, keys: int, args: argparse.Namespace,
             commit_log: CommitLog | None = None) -> dict[str, Any]:
    from consistent_catalog import ConsistentCatalog

    changed = changed_count(keys, args.changed)
    ns = f"bench_{size_label(keys)}"
    catalog.create_namespace(ns)
    cc = ConsistentCatalog(catalog)
    contenders = []
    for case in args.cases:
        for mode in MODES:
            root, sink = create_tables(catalog, ns, case, mode, args.partition_width, args.merge_mode)
            contenders.append(Contender(case, mode, root, sink, f"{ns}-{case}-{mode}", work / ns / f"chk-{case}-{mode}"))
    records: list[dict[str, Any]] = []
    tag = f"[{size_label(keys)}]"
    try:
        for c in contenders:
            c.query = start(spark, c, args.trigger)
        for number in range(args.batches + 1):
            data = {case: batch_rows(keys, changed, case, number, args.seed) for case in args.cases}
            shift = number % len(contenders)
            order = contenders[shift:] + contenders[:shift]
            line = []
            for position, c in enumerate(order):
                record = step(spark, catalog, cc, c, data[c.case], number, commit_log, args.timeout)
                records.append({**record, "position": position})
                line.append(f"{c.label} {ms(record['triggerExecution'])}")
            print(f"{tag} batch {number}: " + ", ".join(line) + f" | load {load()}", file=sys.stderr)
    finally:
        for c in contenders:
            if c.query is not None:
                c.query.stop()
    problems = verify(catalog, contenders, args.batches + 1)
    return summarize(keys, changed, records, problems, args)


def summarize(keys: int, changed: int, records: list[dict[str, Any]], problems: list[str],
              args: argparse.Namespace) -> dict[str, Any]:
    steady = [r for r in records if r["number"] > 0]
    out: dict[str, Any] = {"keys": keys, "changed": changed, "batches": args.batches, "cases": {}, "problems": problems,
                           "records": records}
    for case in args.cases:
        entry: dict[str, Any] = {}
        for mode in MODES:
            mine = [r for r in steady if r["case"] == case and r["mode"] == mode]
            first = [r for r in records if r["case"] == case and r["mode"] == mode and r["number"] == 0]
            entry[mode] = {
                **{k: spread([r[k] for r in mine]) for k in ("triggerExecution", "addBatch")},
                "commit": spread([r["commit"] for r in mine]) if all(r["commit"] is not None for r in mine) else None,
                "files": {k: statistics.median([r[k] for r in mine]) for k in (*SUMMARY_FIGURES, "total-data-files")},
                "first": first[0] if first else None,
            }
        pairs = {}
        for key in ("triggerExecution", "addBatch"):
            by_number = {(r["number"], r["mode"]): r[key] for r in steady if r["case"] == case}
            per_batch = [by_number[(n, "update")] / by_number[(n, "complete")]
                         for n in range(1, args.batches + 1) if (n, "complete") in by_number and (n, "update") in by_number]
            pairs[key] = {"ratio": entry["update"][key]["median"] / entry["complete"][key]["median"],
                          "per_batch": spread(per_batch)}
        entry["ratio"] = pairs
        out["cases"][case] = entry
    return out


# --- report ------------------------------------------------------------------------------------------------------
def report(results: list[dict[str, Any]], meta: dict[str, Any], markdown: bool) -> str:
    lines = [f"`{meta['command']}`", "",
             f"Spark {meta['spark']}, commit {meta['commit']}, {meta['jar']}, state store {meta.get('state_store', 'hdfs')}; "
             f"{meta['cores']} cores, load "
             f"{meta['load_start']} at the start, {meta['load_end']} at the end; {meta['minutes']:.1f} min.", ""]
    lines += ["| keys | changed / batch | case | mode | triggerExecution median (p90) | addBatch median (p90) | "
              "sink commit median | data files replaced / added / total after (median) | records deleted / added (median) | "
              "batch 0 (all keys) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for case, entry in r["cases"].items():
            for mode in MODES:
                m = entry[mode]
                f = m["files"]
                first = m["first"]
                lines.append(
                    f"| {r['keys']:,} | {r['changed']:,} | {case} | {mode} | {ms(m['triggerExecution']['median'])} "
                    f"({ms(m['triggerExecution']['p90'])}) | {ms(m['addBatch']['median'])} ({ms(m['addBatch']['p90'])})"
                    f" | {ms(m['commit']['median']) if m['commit'] else '—'} | {f['deleted-data-files']:g} / "
                    f"{f['added-data-files']:g} / {f['total-data-files']:g} | {f['deleted-records']:,.0f} / "
                    f"{f['added-records']:,.0f} | {ms(first['triggerExecution']) if first else '—'} |")
    lines += ["", "| keys | case | update / complete, triggerExecution: of medians (per batch median, min-max) | "
              "addBatch: of medians (per batch) |", "|---|---|---|---|"]
    for r in results:
        for case, entry in r["cases"].items():
            t, a = entry["ratio"]["triggerExecution"], entry["ratio"]["addBatch"]
            lines.append(f"| {r['keys']:,} | {case} | {t['ratio']:.3f}× ({t['per_batch']['median']:.3f}×, "
                         f"{t['per_batch']['min']:.3f}–{t['per_batch']['max']:.3f}) | {a['ratio']:.3f}× "
                         f"({a['per_batch']['median']:.3f}×) |")
    for r in results:
        cols = [(case, mode) for case in r["cases"] for mode in MODES]
        lines += ["", f"Per micro-batch at {r['keys']:,} keys, triggerExecution / the sink's commit "
                  "(batch 0: all keys, the query's start):", "",
                  "| batch | " + " | ".join(f"{case} {mode}" for case, mode in cols) + " |",
                  "|---|" + "---|" * len(cols)]
        by = {(x["case"], x["mode"], x["number"]): x for x in r["records"]}
        for number in sorted({x["number"] for x in r["records"]}):
            cells = [f"{ms(by[(c, m, number)]['triggerExecution'])} / {ms(by[(c, m, number)]['commit'])}"
                     if (c, m, number) in by else "—" for c, m in cols]
            lines.append(f"| {number} | " + " | ".join(cells) + " |")
    if len(results) > 1:
        big, small = max(results, key=lambda r: r["keys"]), min(results, key=lambda r: r["keys"])
        lines += ["", f"Growth from {small['keys']:,} to {big['keys']:,} keys ({big['keys'] / small['keys']:.1f}× the "
                  f"table, {big['changed'] / small['changed']:.1f}× the changed keys), median triggerExecution:"]
        for case in big["cases"]:
            if case not in small["cases"]:
                continue
            parts = [f"{mode} {ms(small['cases'][case][mode]['triggerExecution']['median'])} → "
                     f"{ms(big['cases'][case][mode]['triggerExecution']['median'])} "
                     f"({big['cases'][case][mode]['triggerExecution']['median'] / small['cases'][case][mode]['triggerExecution']['median']:.2f}×)"
                     for mode in MODES]
            lines.append(f"- {case}: " + "; ".join(parts))
    problems = [p for r in results for p in r["problems"]]
    lines += ["", "Checks (pyiceberg + pyarrow, at the end): " + (
        "each sink equals the aggregate recounted from its root, the complete and update sinks of each case hold the "
        "same rows, no key twice, every ingest published by one epoch." if not problems
        else "PROBLEMS: " + "; ".join(problems[:8]))]
    text = "\n".join(lines)
    return text if markdown else text.replace("| ", "").replace(" |", "  ")


def main(argv: list[str] | None = None, *, spark: Any = None, catalog: Any = None) -> int:
    """The command line; a test may pass its own ``spark`` session and pyiceberg ``catalog`` (the same catalog
    database, ``lake_consistent`` configured) with ``--dir`` for the checkpoints."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default=KEYS_DEFAULT, help=f"distinct keys, comma-separated sizes (default {KEYS_DEFAULT})")
    parser.add_argument("--changed", type=float, default=0.01,
                        help="keys changed per batch after the first: a fraction (< 1, default 0.01) or a count")
    parser.add_argument("--batches", type=int, default=6, help="batches after the first (all keys) per contender")
    parser.add_argument("--cases", default=",".join(CASES), help="random, clustered or both (default)")
    parser.add_argument("--partition-width", type=int, default=50_000,
                        help="clustered case: the sinks are partitioned by truncate(key, W) (default 50000)")
    parser.add_argument("--trigger", type=float, default=0.5, help="processing-time trigger, seconds (default 0.5)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for one epoch (default 600)")
    parser.add_argument("--driver-memory", default="3g", help="the session's driver heap (default 3g: four queries "
                        "keep their aggregate's state, N keys each, in the driver's JVM)")
    parser.add_argument("--state-store", choices=("hdfs", "rocksdb"), default="hdfs",
                        help="Spark's state store of the aggregate (default hdfs, Spark's default: each batch copies the "
                        "state's map, O(keys); rocksdb: O(changed keys))")
    parser.add_argument("--merge-mode", choices=("copy-on-write", "merge-on-read"), default="copy-on-write",
                        help="the update-mode sinks' write.merge.mode: rewrite the files holding a batch's keys, or "
                             "delete their rows by position (default copy-on-write)")
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--markdown", action="store_true", help="print the report as Markdown tables")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead")
    parser.add_argument("--save", type=Path, help="also write the results (every micro-batch) as JSON to this file")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed)")
    parser.add_argument("--report", type=Path, metavar="FILE",
                        help="print the report of the results saved (--save) by an earlier run, and nothing else")
    args = parser.parse_args(argv)
    if args.report is not None:
        saved = json.loads(args.report.read_text(encoding="utf-8"))
        print(report(saved["results"], saved["meta"], args.markdown))
        return 0
    sizes = [int(s.replace("_", "")) for s in args.keys.split(",") if s]
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if not args.cases or any(c not in CASES for c in args.cases):
        parser.error(f"--cases takes {', '.join(CASES)}")
    if args.batches < 1:
        parser.error("--batches must be >= 1 (batch 0, all keys, is reported apart)")
    for keys in sizes:
        try:
            changed_count(keys, args.changed)
        except ValueError as exc:
            parser.error(str(exc))
    if (spark is None) != (catalog is None) or (spark is not None and args.dir is None):
        raise ValueError("pass spark and catalog together, with --dir")

    began = time.monotonic()
    load_start = load()
    tmp = None
    if args.dir:
        work = args.dir.resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bench-streaming-update-")
        work = Path(tmp.name)
    jar_note = "the caller's session"
    commit_log = None
    own = spark is None
    results: list[dict[str, Any]] = []
    try:
        if own:
            from pyiceberg.catalog.sql import SqlCatalog

            from consistent_catalog.spark.session import build_session, find_plugin_jar

            jar = find_plugin_jar()
            if jar is None:
                raise SystemExit("the plugin jar is missing (build/jvm/spark-<line>/lake-consistent-spark-*.jar): "
                                 "build it with `make setup` first")
            jar_note = (f"{Path(jar).name} built "
                        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(os.stat(jar).st_mtime))} UTC")
            (work / "warehouse").mkdir(parents=True, exist_ok=True)
            uri = f"sqlite:///{work}/catalog.db"
            catalog = SqlCatalog("lake", uri=uri, warehouse=f"file://{work}/warehouse")
            commit_log = CommitLog(work)
            spark = build_session(uri, work / "warehouse", app_name="bench-streaming-update", master="local[2]",
                                  extra_conf={"spark.driver.extraJavaOptions": commit_log.java_option(),
                                              "spark.driver.memory": args.driver_memory, **STATE_STORES[args.state_store]})
            print(f"spark session up; load {load()}", file=sys.stderr)
        for keys in sizes:
            results.append(run_size(spark, catalog, work, keys, args, commit_log))
    finally:
        if own and spark is not None:
            stop_jvm(spark)
            catalog.engine.dispose()
        if tmp is not None:
            tmp.cleanup()
    meta = {
        "command": shlex.join([".venv/bin/python", "-m", "bench.bench_streaming_update",
                               *(argv if argv is not None else sys.argv[1:])]),
        "state_store": args.state_store if own else "the caller's session's", "merge_mode": args.merge_mode, "load_start": load_start, "load_end": load(), "cores": os.cpu_count(),
        "minutes": (time.monotonic() - began) / 60, "spark": _spark_version(), "commit": _git_commit(), "jar": jar_note,
    }
    if args.save is not None:
        args.save.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str), encoding="utf-8")
    if args.json:
        print(json.dumps({"meta": meta, "results": results}, indent=2, default=str))
    else:
        print(report(results, meta, args.markdown))
    return 0 if not any(r["problems"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
