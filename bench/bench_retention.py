"""Benchmark: publish latency and metadata growth over thousands of epochs, with cut-aware expiry on and off.

Not a test. Builds two throw-away SQLite ``SqlCatalog``s, each holding the FLIP pipeline
(``bench.words`` -> job ``word-count`` -> ``bench.word_counts`` -> job ``count-histogram`` ->
``bench.count_histogram``), and runs ``--epochs`` epochs on both in lockstep (epoch k on arm A, then
epoch k on arm B, alternating which arm goes first), so machine load hits both arms alike:

- **expiry on**: every ``--expire-every`` epochs ``cc.retention.expire`` runs over all
  tables with ``older_than=0`` (keep only what the latest cut, the recorded inputs, staged epochs
  and branch heads need) -- the most a pipeline can save;
- **expiry off**: nothing is ever expired.

Each epoch is the real protocol apart from the data files: the root gets one snapshot tagged with
the epoch's barrier (an append summary with realistic counters); each job runs the real planner
(``EpochJob.plan``: loads its sinks and their upstream closure, ``plan_epoch``), stages one snapshot
on ``consistent-staged`` carrying the real summary keys (``EpochJob.summary_properties``: barrier,
job, sources, attempt) in one fenced catalog commit, and then publishes with the real, timed
``EpochJob.publish`` (one fenced ``commit_table`` moving ``main``, renewing the lease). Snapshots
carry no data files (their manifest lists do not exist; nothing here opens them), so the cost
measured is what metadata growth does to the catalog commits.

Reported: publish latency (both jobs' publishes, median and p90 over a window of epochs) at the
start and the end of the run, the ratio end/start per arm; the whole epoch's latency (plan + stage
+ publish + ingest) likewise; metadata.json size of each table at checkpoints; the expiry runs'
own cost; and the bytes our summary keys add to each snapshot in metadata.json (from the real
file: each snapshot's summary serialized with and without the ``consistent.*`` keys), plus the bytes
of a ``consistent-`` tag per table.

Usage:
    python -m bench.bench_retention [--epochs 2000] [--expire-every 10] [--window 20] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field

import pyiceberg
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate
from pyiceberg.types import LongType, NestedField, StringType

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.commit import refs_at
from consistent_catalog.epoch import EpochJob
from consistent_catalog.retention import RetentionPolicy
from consistent_catalog.util.time import now_ms

NS = "bench"
WORDS, COUNTS, HIST = f"{NS}.words", f"{NS}.word_counts", f"{NS}.count_histogram"
TABLES = (WORDS, COUNTS, HIST)
BASE_BARRIER = 1_700_000_000_000
STEP_MS = 60_000
SCHEMAS = {
    WORDS: Schema(NestedField(1, "word", StringType(), required=False)),
    COUNTS: Schema(NestedField(1, "word", StringType(), required=False), NestedField(2, "cnt", LongType(), required=False)),
    HIST: Schema(NestedField(1, "cnt", LongType(), required=False), NestedField(2, "words", LongType(), required=False)),
}


def counters(k: int, rows: int = 1000) -> dict[str, str]:
    """The summary counters pyiceberg writes for an append of one data file (keeps metadata realistic in size)."""
    return {
        "added-data-files": "1",
        "added-records": str(rows),
        "added-files-size": str(rows * 9),
        "changed-partition-count": "1",
        "total-records": str(rows * (k + 1)),
        "total-files-size": str(rows * 9 * (k + 1)),
        "total-data-files": str(k + 1),
        "total-delete-files": "0",
        "total-position-deletes": "0",
        "total-equality-deletes": "0",
    }


@dataclass
class Arm:
    name: str
    expiry: bool
    directory: str
    catalog: SqlCatalog
    cc: ConsistentCatalog
    jobs: list[EpochJob]
    publish_by_job: dict[str, list[float]] = field(default_factory=dict)
    epoch_ms: list[float] = field(default_factory=list)
    ingest_ms: list[float] = field(default_factory=list)
    expiry_ms: list[float] = field(default_factory=list)
    sizes: dict[int, dict[str, int]] = field(default_factory=dict)
    snapshots: dict[int, dict[str, int]] = field(default_factory=dict)


def make_arm(name: str, expiry: bool, directory: str) -> Arm:
    catalog = SqlCatalog(name, uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/wh")
    catalog.create_namespace(NS)
    for table, schema in SCHEMAS.items():
        catalog.create_table(table, schema)
    cc = ConsistentCatalog(catalog)
    jobs = [
        cc.job("word-count", sources=[WORDS], sinks=[COUNTS]),
        cc.job("count-histogram", sources=[COUNTS], sinks=[HIST]),
    ]
    for job in jobs:
        job.register()
    return Arm(name, expiry, directory, catalog, cc, jobs, publish_by_job={j.job: [] for j in jobs})


def add_snapshot(catalog: SqlCatalog, table_name: str, props: dict[str, str], *, branch: str,
                 requirements: tuple = ()) -> int:
    """One catalog commit adding a snapshot (no data files) on ``branch``, child of main's head."""
    table = catalog.load_table(table_name)
    metadata = table.metadata
    head = metadata.snapshot_by_name(P.MAIN_BRANCH)
    k = len(metadata.snapshots)
    sid = random.getrandbits(62) + 1
    snapshot = Snapshot(
        snapshot_id=sid,
        parent_snapshot_id=None if head is None else head.snapshot_id,
        sequence_number=metadata.last_sequence_number + 1,
        timestamp_ms=now_ms(),
        manifest_list=f"{metadata.location}/metadata/snap-{sid}-missing.avro",
        summary=Summary(Operation.APPEND, **counters(k), **props),
        schema_id=0,
    )
    updates = (
        AddSnapshotUpdate(snapshot=snapshot),
        SetSnapshotRefUpdate(ref_name=branch, type=SnapshotRefType.BRANCH, snapshot_id=sid),
    )
    catalog.commit_table(table, requirements, updates)
    return sid


def run_epoch(arm: Arm, k: int) -> None:
    barrier = BASE_BARRIER + k * STEP_MS
    started = time.perf_counter()
    add_snapshot(arm.catalog, WORDS, {P.BARRIER: str(barrier)}, branch=P.MAIN_BRANCH)
    arm.ingest_ms.append((time.perf_counter() - started) * 1000)
    for job in arm.jobs:
        plan = job.plan()
        (sink,) = job.sinks
        sink_plan = plan.sinks[sink]
        if sink_plan.action != "stage":
            raise SystemExit(f"{arm.name}: epoch {k}: {job.job} planned {sink_plan.action}, expected stage")
        lease = job.lease
        assert lease is not None
        staged = add_snapshot(
            arm.catalog, sink, job.summary_properties(plan), branch=P.STAGED_BRANCH,
            requirements=tuple(refs_at({P.FENCE_BRANCH: sink_plan.fence, P.MAIN_BRANCH: sink_plan.main_head,
                                        P.STAGED_BRANCH: sink_plan.staged_head})),
        )
        t0 = time.perf_counter()
        job.publish(sink, plan, sink_plan.main_head, staged)
        arm.publish_by_job[job.job].append((time.perf_counter() - t0) * 1000)
    arm.epoch_ms.append((time.perf_counter() - started) * 1000)


def checkpoint(arm: Arm, k: int) -> None:
    sizes, counts = {}, {}
    for table in TABLES:
        loaded = arm.catalog.load_table(table)
        sizes[table] = os.path.getsize(loaded.metadata_location.removeprefix("file://"))
        counts[table] = len(loaded.metadata.snapshots)
    arm.sizes[k] = sizes
    arm.snapshots[k] = counts


def verify(arm: Arm, epochs: int) -> None:
    """Sanity: the latest cut is at the last epoch's barrier on every table, and the heads carry the keys."""
    cut = arm.cc.resolve(TABLES)
    expected = BASE_BARRIER + (epochs - 1) * STEP_MS
    if cut.barrier != expected:
        raise SystemExit(f"{arm.name}: cut barrier {cut.barrier} != last epoch's barrier {expected}")
    for table in TABLES:
        head = arm.catalog.load_table(table).metadata.snapshot_by_name(P.MAIN_BRANCH)
        if cut[table].snapshot_id != head.snapshot_id:
            raise SystemExit(f"{arm.name}: {table}: cut snapshot is not main's head")


def key_bytes(arm: Arm) -> dict[str, tuple[float, int, int]]:
    """Per table: (mean, max, count) of the bytes the consistent.* summary keys take in metadata.json."""
    out = {}
    for table in TABLES:
        location = arm.catalog.load_table(table).metadata_location.removeprefix("file://")
        with open(location) as fh:
            document = json.load(fh)
        extra = []
        for snapshot in document["snapshots"]:
            summary = snapshot["summary"]
            ours = {k: v for k, v in summary.items() if k.startswith(P.PREFIX)}
            if not ours:
                continue
            rest = {k: v for k, v in summary.items() if not k.startswith(P.PREFIX)}
            extra.append(len(json.dumps(summary, separators=(",", ":"))) - len(json.dumps(rest, separators=(",", ":"))))
        out[table] = (statistics.mean(extra) if extra else 0.0, max(extra, default=0), len(extra))
    return out


def tag_bytes() -> int:
    """Bytes one consistent- tag (with a ref age) adds to a table's refs in metadata.json."""
    ref = {"consistent-daily-20261122": {"snapshot-id": 2**62, "type": "tag", "max-ref-age-ms": 604_800_000}}
    return len(json.dumps(ref, separators=(",", ":"))) - 2 + 1  # without the braces, with a separating comma


def window(values: list[float], center: int, width: int) -> list[float]:
    lo = max(0, center - width // 2)
    return values[lo:lo + width]


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def fmt_kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


def report(arms: list[Arm], args: argparse.Namespace, command: str, seconds: float, load: tuple[float, float]) -> str:
    early, late = 10, args.epochs
    md = args.markdown
    lines = []
    if md:
        lines += [
            f"Command: `{command}`",
            "",
            f"Environment: Python {platform.python_version()}, pyiceberg {pyiceberg.__version__}, {os.cpu_count()} cores, "
            f"SQLite SqlCatalog on local disk; both arms in one process, in lockstep; {args.epochs} epochs; "
            f"expiry every {args.expire_every} epochs on the 'on' arm; wall time {seconds / 60:.1f} min; "
            f"load average {load[0]:.1f} at the start, {load[1]:.1f} at the end.",
            "",
            f"Publish latency = one `EpochJob.publish` (fenced commit moving main). Median (p90) over the "
            f"{args.window} epochs around epoch {early} and the last {args.window} epochs.",
            "",
            f"| arm | job | publish @ epoch {early} | publish @ epoch {late} | growth | whole epoch @ {early} | "
            f"whole epoch @ {late} | growth |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
    for arm in arms:
        for job, values in arm.publish_by_job.items():
            a = window(values, early, args.window)
            b = values[-args.window:]
            ea, eb = window(arm.epoch_ms, early, args.window), arm.epoch_ms[-args.window:]
            cells = [
                f"{statistics.median(a):.1f} ms ({p90(a):.1f})",
                f"{statistics.median(b):.1f} ms ({p90(b):.1f})",
                f"{statistics.median(b) / statistics.median(a):.2f}x",
                f"{statistics.median(ea):.0f} ms",
                f"{statistics.median(eb):.0f} ms",
                f"{statistics.median(eb) / statistics.median(ea):.2f}x",
            ]
            if md:
                lines.append(f"| expiry {arm.name} | {job} | " + " | ".join(cells) + " |")
            else:
                lines.append(f"expiry {arm.name:3} {job:16} " + "  ".join(cells))
    lines.append("")
    points = sorted(arms[0].sizes)
    if md:
        lines += [
            "metadata.json size (and snapshots held) per table over the run:",
            "",
            "| epoch | " + " | ".join(f"{t.split('.')[1]} off | {t.split('.')[1]} on" for t in TABLES) + " |",
            "|---:|" + "---:|" * (2 * len(TABLES)),
        ]
    for k in points:
        cells = []
        for table in TABLES:
            for arm in sorted(arms, key=lambda a: a.expiry):
                cells.append(f"{fmt_kib(arm.sizes[k][table])} ({arm.snapshots[k][table]})")
        lines.append(f"| {k} | " + " | ".join(cells) + " |" if md else f"epoch {k:5}: " + "  ".join(cells))
    lines.append("")
    on = next(a for a in arms if a.expiry)
    if on.expiry_ms:
        lines.append(
            f"Expiry runs (all three tables, plan + 3 fenced commits): {len(on.expiry_ms)} runs, median "
            f"{statistics.median(on.expiry_ms):.0f} ms, p90 {p90(on.expiry_ms):.0f} ms, max {max(on.expiry_ms):.0f} ms; "
            f"amortized {sum(on.expiry_ms) / args.epochs:.1f} ms per epoch."
        )
    off = next(a for a in arms if not a.expiry)
    ingest_a, ingest_b = window(off.ingest_ms, early, args.window), off.ingest_ms[-args.window:]
    ingest_c, ingest_d = window(on.ingest_ms, early, args.window), on.ingest_ms[-args.window:]
    lines.append(
        f"Root ingest commit (context): expiry off {statistics.median(ingest_a):.1f} -> {statistics.median(ingest_b):.1f} ms, "
        f"expiry on {statistics.median(ingest_c):.1f} -> {statistics.median(ingest_d):.1f} ms."
    )
    lines.append("")
    per_key = key_bytes(off)
    lines.append(
        "Bytes our summary keys add per snapshot in metadata.json (expiry-off arm, every snapshot; mean / max): "
        + "; ".join(f"{t}: {m:.0f} / {x} B over {n} snapshots" for t, (m, x, n) in per_key.items())
        + f". A consistent- tag with a ref age adds {tag_bytes()} B per table it is on."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2000)
    parser.add_argument("--expire-every", type=int, default=10)
    parser.add_argument("--window", type=int, default=20, help="epochs per latency window")
    parser.add_argument("--checkpoints", default="10,100,250,500,1000,1500,2000")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    if args.epochs < 2 * args.window or args.expire_every < 1:
        parser.error("need --epochs >= 2 * --window and --expire-every >= 1")
    command = "python -m bench.bench_retention " + shlex.join(sys.argv[1:] if argv is None else argv)
    warnings.simplefilter("ignore")
    checkpoints = sorted({int(x) for x in args.checkpoints.split(",") if x.strip() and int(x) <= args.epochs} | {args.epochs})
    load_start = os.getloadavg()[0]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-ret-off-") as d_off, tempfile.TemporaryDirectory(prefix="bench-ret-on-") as d_on:
        arms = [make_arm("off", False, d_off), make_arm("on", True, d_on)]
        policy = RetentionPolicy(older_than=0)
        for k in range(args.epochs):
            for arm in (arms if k % 2 == 0 else arms[::-1]):
                run_epoch(arm, k)
                if arm.expiry and (k + 1) % args.expire_every == 0:
                    t0 = time.perf_counter()
                    arm.cc.retention.expire(None, policy)
                    arm.expiry_ms.append((time.perf_counter() - t0) * 1000)
            if k + 1 in checkpoints:
                for arm in arms:
                    checkpoint(arm, k + 1)
                print(f"epoch {k + 1}: " + ", ".join(
                    f"{a.name}: {fmt_kib(a.sizes[k + 1][COUNTS])} word_counts metadata, last publish "
                    f"{a.publish_by_job['word-count'][-1]:.0f} ms" for a in arms), file=sys.stderr, flush=True)
        for arm in arms:
            verify(arm, args.epochs)
        seconds = time.perf_counter() - started
        print(report(arms, args, command.strip(), seconds, (load_start, os.getloadavg()[0])))
        for arm in arms:
            arm.catalog.engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
