"""Benchmark: the Spark epoch job's protocol overhead vs. plain Spark Iceberg appends.

Not a test. In a throw-away SQLite catalog it creates a root table ``bench.src`` and two sinks of the
same schema, ``bench.sink_plain`` and ``bench.sink_ours``. Every epoch:

1. ``--rows`` new rows (``spark.range`` -> id, word = 'w' || id % 1000, bucket = id % 97,
   amount = id * 0.5) are appended once to the root with ``ingest_dataframe`` (not timed in the
   comparison), so both contenders read exactly the same input snapshot;
2. **plain**: plain Spark reads the rows the new root snapshot appended (Iceberg incremental read,
   ``start-snapshot-id``/``end-snapshot-id``), applies the transform (``SELECT * FROM src``) and
   ``df.writeTo("lake.bench.sink_plain").append()``;
3. **ours**: a ``SparkEpochJob`` (mode ``append``, ``incremental=True``, the same SQL transform)
   runs ``run_epoch()``: plan from metadata, stage on ``consistent-staged``, verify, publish.

Plain and ours alternate which one goes first from epoch to epoch (to cancel drift and cache
effects); the first epoch is a warm-up and is discarded. Ours' steps are timed by wrapping the job's
methods on the instance: ``plan`` (metadata loads), ``transform`` (building the incremental
DataFrame: one more metadata load for the append-only check plus Spark's analysis),
``prepare`` (``prepare_staged_branch``: a metadata load; a branch reset commit only when needed),
``spark write`` (the Spark append to the branch, what is left of ``stage``), ``verify`` (metadata
load checking the staged snapshots), ``publish`` (metadata load + one fenced catalog commit).

At the end both sinks are recounted with pyiceberg (row count and sum of ``id``) and must agree.

Usage:
    python -m bench.bench_spark_overhead [--rows 1000000] [--epochs 12] [--interval 0] [--markdown] [--dir D]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType

from bench.common import load
from consistent_catalog import ConsistentCatalog

SRC, PLAIN, OURS = "bench.src", "bench.sink_plain", "bench.sink_ours"
TRANSFORM = "SELECT id, word, bucket, amount FROM src"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "word", StringType(), required=False),
    NestedField(3, "bucket", IntegerType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
)
STEPS = ("plan", "transform", "prepare", "spark write", "verify", "publish")


def epoch_frame(spark: Any, epoch: int, rows: int) -> Any:
    from pyspark.sql import functions as F

    return spark.range(epoch * rows, (epoch + 1) * rows).select(
        F.col("id"),
        F.concat(F.lit("w"), (F.col("id") % 1000).cast("string")).alias("word"),
        (F.col("id") % 97).cast("int").alias("bucket"),
        (F.col("id") * 0.5).alias("amount"),
    )


def instrument(job: Any, timings: dict[str, float]) -> None:
    """Wrap the job's step methods on the instance so each call adds its wall time to ``timings``."""

    def wrap(name: str, key: str) -> None:
        original: Callable[..., Any] = getattr(job, name)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                timings[key] += time.perf_counter() - started

        setattr(job, name, timed)

    wrap("plan", "plan")
    wrap("run_transform", "transform")
    wrap("prepare_staged_branch", "prepare")
    wrap("_verify_staged", "verify")
    wrap("stage", "stage (total)")
    wrap("publish", "publish")


def run_plain(spark: Any, start: int | None, end: int) -> None:
    reader = spark.read.format("iceberg")
    if start is None:
        reader = reader.option("snapshot-id", str(end))
    else:
        reader = reader.option("start-snapshot-id", str(start)).option("end-snapshot-id", str(end))
    reader.load(f"lake.{SRC}").createOrReplaceTempView("src")
    spark.sql(TRANSFORM).writeTo(f"lake.{PLAIN}").append()


def recount(catalog: SqlCatalog, table: str) -> tuple[int, int]:
    data = catalog.load_table(table).scan(selected_fields=("id",)).to_arrow()
    return data.num_rows, int(pc.sum(data["id"]).as_py() or 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="new root rows per epoch")
    parser.add_argument("--epochs", type=int, default=12, help="epochs, the first one is a discarded warm-up")
    parser.add_argument("--interval", type=float, default=0.0, help="seconds to pause between epochs")
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown section for BENCHMARKS.md")
    parser.add_argument("--dir", help="keep the catalog here (default: a temporary directory, removed)")
    args = parser.parse_args(argv)
    if args.epochs < 3:
        parser.error("--epochs must be >= 3 (the first is a warm-up; both orders must occur)")

    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe
    from consistent_catalog.spark.session import build_session

    tmp = None
    if args.dir:
        root = Path(args.dir).resolve()
        root.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bench-spark-overhead-")
        root = Path(tmp.name)
    (root / "warehouse").mkdir(exist_ok=True)
    load_start = load()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("bench")
    for name in (SRC, PLAIN, OURS):
        catalog.create_table(name, schema=SCHEMA)
    cc = ConsistentCatalog(catalog)
    started = time.perf_counter()
    spark = build_session(f"sqlite:///{root}/catalog.db", root / "warehouse", app_name="bench-spark-overhead")
    print(f"spark session up in {time.perf_counter() - started:.1f}s; load {load()}", file=sys.stderr)

    job = SparkEpochJob(cc, spark, "bench-append", sources=[SRC], sinks=[OURS], transform=TRANSFORM,
                        mode="append", incremental=True)
    step_times: list[dict[str, float]] = []
    current: dict[str, float] = defaultdict(float)
    instrument(job, current)
    job.register()

    plain_s: list[float] = []
    ours_s: list[float] = []
    ingest_s: list[float] = []
    loads: list[str] = []
    previous: int | None = None
    try:
        for epoch in range(args.epochs):
            t0 = time.perf_counter()
            ingested = ingest_dataframe(cc, epoch_frame(spark, epoch, args.rows), SRC)
            ingest_s.append(time.perf_counter() - t0)

            def plain() -> float:
                t = time.perf_counter()
                run_plain(spark, previous, ingested.snapshot_id)  # noqa: B023  (called at once)
                return time.perf_counter() - t

            def ours() -> float:
                current.clear()
                t = time.perf_counter()
                result = job.run_epoch()
                elapsed = time.perf_counter() - t
                assert result.actions == {OURS: "published"}, result
                assert result.rows[OURS] == args.rows, result
                step_times.append(dict(current))
                return elapsed

            order = (plain, ours) if epoch % 2 == 0 else (ours, plain)
            measured = {f.__name__: f() for f in order}
            plain_s.append(measured["plain"])
            ours_s.append(measured["ours"])
            loads.append(load())
            previous = ingested.snapshot_id
            steps = step_times[-1]
            write = steps["stage (total)"] - steps["prepare"] - steps["verify"]
            print(
                f"epoch {epoch}{' (warm-up)' if epoch == 0 else ''}: first={order[0].__name__} "
                f"ingest {ingest_s[-1]:.2f}s plain {plain_s[-1]:.2f}s ours {ours_s[-1]:.2f}s "
                f"ratio {ours_s[-1] / plain_s[-1]:.3f} | plan {steps['plan']:.3f} transform {steps['transform']:.3f} "
                f"prepare {steps['prepare']:.3f} write {write:.3f} verify {steps['verify']:.3f} "
                f"publish {steps['publish']:.3f} | load {loads[-1]}",
                file=sys.stderr,
            )
            time.sleep(args.interval)
    finally:
        job.unregister()
        spark.stop()

    plain_rows, plain_sum = recount(catalog, PLAIN)
    ours_rows, ours_sum = recount(catalog, OURS)
    expected = args.rows * args.epochs
    same = plain_rows == ours_rows == expected and plain_sum == ours_sum
    load_end = load()
    if tmp is not None:
        tmp.cleanup()

    m_plain, m_ours = plain_s[1:], ours_s[1:]
    paired = [o / p for o, p in zip(m_ours, m_plain)]
    med_plain, med_ours = statistics.median(m_plain), statistics.median(m_ours)
    ratio = med_ours / med_plain
    breakdown: dict[str, float] = {}
    for key in ("plan", "transform", "prepare", "verify", "publish"):
        breakdown[key] = statistics.median(s[key] for s in step_times[1:])
    breakdown["spark write"] = statistics.median(
        s["stage (total)"] - s["prepare"] - s["verify"] for s in step_times[1:]
    )
    extra = statistics.median(o - p for o, p in zip(m_ours, m_plain))
    totals = sum(m_ours) / sum(m_plain)
    # whichever runs first after the ingest tends to be slower: the median paired ratio of each order,
    # combined by geometric mean, cancels that position effect
    by_order = {
        first: statistics.median(r for i, r in enumerate(paired, start=1) if (i % 2 == 0) == (first == "plain"))
        for first in ("plain", "ours")
    }
    balanced = (by_order["plain"] * by_order["ours"]) ** 0.5
    protocol = sum(breakdown[k] for k in ("plan", "prepare", "verify", "publish"))

    command = "python -m bench.bench_spark_overhead " + shlex.join(argv if argv is not None else sys.argv[1:])
    print(f"rows/epoch {args.rows}, epochs {args.epochs} (first discarded), load start {load_start} end {load_end}")
    print(f"plain Spark append : median {med_plain:.3f}s  (min {min(m_plain):.3f}, max {max(m_plain):.3f})")
    print(f"SparkEpochJob      : median {med_ours:.3f}s  (min {min(m_ours):.3f}, max {max(m_ours):.3f})")
    print(f"ratio of medians   : {ratio:.3f}   median paired ratio {statistics.median(paired):.3f} "
          f"(range {min(paired):.3f}-{max(paired):.3f})   median extra {extra:+.3f}s/epoch")
    print(f"ratio of totals    : {totals:.3f}   order-balanced paired ratio {balanced:.3f} "
          f"(plain first {by_order['plain']:.3f}, ours first {by_order['ours']:.3f})")
    print("ours, median per step: " + ", ".join(f"{k} {v:.3f}s" for k, v in breakdown.items())
          + f"; metadata-only steps (plan+prepare+verify+publish) {protocol:.3f}s")
    print(f"recount: plain {plain_rows} rows (sum id {plain_sum}), ours {ours_rows} rows (sum id {ours_sum}), "
          f"expected {expected}: {'OK' if same else 'MISMATCH'}")

    if args.markdown:
        lines = [
            f"Command: `{command}` — {args.rows:,} rows/epoch, {args.epochs} epochs, first discarded; "
            f"load average (1/5/15 min) {load_start} at start, {load_end} at end; "
            f"{platform.python_version()}, {os.cpu_count()} cores.",
            "",
            "| epoch | first | plain (s) | ours (s) | ours/plain | plan | transform | prepare | spark write | verify "
            "| publish | load 1/5/15 |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for i in range(args.epochs):
            s = step_times[i]
            write = s["stage (total)"] - s["prepare"] - s["verify"]
            lines.append(
                f"| {i}{' (warm-up)' if i == 0 else ''} | {'plain' if i % 2 == 0 else 'ours'} | {plain_s[i]:.2f} | "
                f"{ours_s[i]:.2f} | {ours_s[i] / plain_s[i]:.3f} | {s['plan']:.3f} | {s['transform']:.3f} | "
                f"{s['prepare']:.3f} | {write:.2f} | {s['verify']:.3f} | {s['publish']:.3f} | {loads[i]} |"
            )
        lines += [
            "",
            f"- median plain **{med_plain:.2f} s**, median ours **{med_ours:.2f} s**: ratio of medians "
            f"**{ratio:.3f}** (median of paired ratios {statistics.median(paired):.3f}, range "
            f"{min(paired):.3f}–{max(paired):.3f}); median extra {extra * 1000:+.0f} ms per epoch.",
            f"- ratio of total times **{totals:.3f}**; order-balanced paired ratio **{balanced:.3f}** (geometric mean "
            f"of the median paired ratio when plain ran first, {by_order['plain']:.3f}, and when ours ran first, "
            f"{by_order['ours']:.3f}).",
            "- ours, median per step: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in breakdown.items())
            + f"; metadata-only steps {protocol * 1000:.0f} ms.",
            f"- recount with pyiceberg: plain {plain_rows:,} rows, ours {ours_rows:,} rows, sum(id) "
            f"{'equal' if plain_sum == ours_sum else 'DIFFERENT'} ({'OK' if same else 'MISMATCH'}).",
        ]
        print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
