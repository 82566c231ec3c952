"""Benchmark: freshness of the Spark demo, now - W(demo.count_histogram), at a fixed epoch interval.

Not a test. Runs ``consistent-catalog demo --dir D --epochs N --rows-per-epoch K --interval S
--output json`` (the Spark engine, the default) on a fresh directory as a subprocess, and measures
the end-to-end delay of ``demo.count_histogram`` two ways:

* **demo samples**: the demo's own ``delays_ms`` (stdout JSON): ``now - cut barrier`` over all three
  tables, read right after each epoch's jobs ran (the cut barrier is W(count_histogram), the slowest
  table). The first epoch has no cut yet, so N epochs give N - 1 samples. These are taken at the
  best moment of each cycle (just after the jobs ran), so they understate the typical delay.
* **time-weighted**: a thread of this script opens the same SQLite catalog with pyiceberg and, every
  ``--sample-every`` seconds, records ``ConsistentCatalog.status(...)[i].delay_ms`` (= now - W(X)) of
  all three tables. Samples on a regular clock weight every moment equally; only those between
  the demo's first epoch with a cut and its last epoch line are kept (the demo's final catch-up,
  report and Spark shutdown are excluded).

The demo's progress lines (stderr) are timestamped on arrival, which gives each epoch's wall time
and, from ``ingested barrier B`` (B is taken just before the ingest write), the time from the ingest
to the end of that epoch's jobs and consistent read.

Usage:
    python -m bench.bench_freshness [--epochs 32] [--rows 1000] [--interval 5] [--sample-every 1] [--markdown]
                                    [--dir D]
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import DEMO_TABLES, DelaySampler, barrier_snapshots, demo_catalog, describe, load, quantile

TABLES = DEMO_TABLES
EPOCH_LINE = re.compile(r"^epoch (\d+)/(\d+): ingested barrier (\d+)(?:, consistent cut at (\d+))?")


def summary(values_s: list[float]) -> str:
    return describe(values_s, mean=True)


def timeline(root: Path) -> dict[int, dict[str, float]]:
    """Per ingest barrier B, seconds after B at which each step committed, from the tables' metadata.

    ``words committed`` is the root snapshot's timestamp; for each derived table, ``staged`` is the
    timestamp of its newest snapshot tagged ``consistent.barrier = B`` and ``published`` the
    snapshot-log entry of ``main`` moving onto it (pyiceberg stamps the publish commit's wall time).
    """
    catalog = demo_catalog(root)
    steps: dict[int, dict[str, float]] = {}
    for table, short in zip(TABLES, ("words", "word_counts", "count_histogram")):
        newest, published = barrier_snapshots(catalog, table)
        for barrier, snap in newest.items():
            row = steps.setdefault(barrier, {})
            if short == "words":
                row["words committed"] = (snap.timestamp_ms - barrier) / 1000
            else:
                row[f"{short} staged"] = (snap.timestamp_ms - barrier) / 1000
                if snap.snapshot_id in published:
                    row[f"{short} published"] = (published[snap.snapshot_id] - barrier) / 1000
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=32, help="demo epochs (the first has no cut yet)")
    parser.add_argument("--rows", type=int, default=1000, help="words per epoch (--rows-per-epoch)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between ingest epochs")
    parser.add_argument("--sample-every", type=float, default=1.0, help="seconds between independent samples")
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown section for BENCHMARKS.md")
    parser.add_argument("--dir", help="demo directory (must not exist; default: a temporary one, removed)")
    args = parser.parse_args(argv)

    tmp = None
    if args.dir:
        root = Path(args.dir).resolve()
        if root.exists():
            parser.error(f"{root} exists; the benchmark needs a fresh demo directory")
    else:
        tmp = tempfile.mkdtemp(prefix="bench-freshness-")
        root = Path(tmp) / "demo"
    exe = shutil.which("consistent-catalog", path=str(Path(sys.executable).parent)) or "consistent-catalog"
    demo_cmd = [exe, "demo", "--dir", str(root), "--epochs", str(args.epochs), "--rows-per-epoch", str(args.rows),
                "--interval", str(args.interval), "--output", "json"]
    load_start = load()
    print(f"running {shlex.join(demo_cmd)}; load {load_start}", file=sys.stderr)
    started = time.time()
    proc = subprocess.Popen(demo_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    sampler = DelaySampler(root, args.sample_every, TABLES)
    lines: list[tuple[float, str]] = []
    other_stderr: list[str] = []
    stdout_chunks: list[str] = []
    assert proc.stdout is not None
    stdout = proc.stdout
    reader = threading.Thread(target=lambda: stdout_chunks.append(stdout.read()), daemon=True)
    reader.start()
    assert proc.stderr is not None
    for raw in proc.stderr:
        now = time.time()
        line = raw.rstrip("\n")
        if EPOCH_LINE.match(line):
            lines.append((now, line))
            print(f"[{now - started:7.1f}s load {load()}] {line}", file=sys.stderr)
            if not sampler.is_alive() and sampler.ident is None:
                sampler.start()  # the catalog and the demo tables exist now
        else:
            other_stderr.append(line)
    proc.wait()
    reader.join()
    sampler.stop.set()
    if sampler.ident is not None:
        sampler.join()
    load_end = load()
    if proc.returncode != 0:
        print("\n".join(other_stderr[-30:]), file=sys.stderr)
        print(f"demo failed with exit code {proc.returncode}", file=sys.stderr)
        return 1
    report = json.loads(stdout_chunks[0])
    steps = timeline(root)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)

    # the demo's own samples
    demo_s = [d / 1000 for d in report["delays_ms"]]
    # epochs: wall time between progress lines, and ingest-start -> end of the epoch's read
    parsed = [(t, EPOCH_LINE.match(line)) for t, line in lines]
    barriers = [int(m.group(3)) / 1000 for _, m in parsed if m]  # taken just before each ingest write
    period = [b - a for a, b in zip(barriers, barriers[1:])]  # ingest start to ingest start
    ingest_to_line = [t - int(m.group(3)) / 1000 for t, m in parsed if m]
    # processing time of epochs 2.. (the first one warms the JVM up), with and without count-histogram
    numbers = [int(m.group(1)) if m else 0 for _, m in parsed]
    busy_hist = [d for k, d in zip(numbers, ingest_to_line) if k > 1 and k % 2 == 0]
    busy_plain = [d for k, d in zip(numbers, ingest_to_line) if k > 1 and k % 2 == 1]
    with_cut = [t for t, m in parsed if m and m.group(4)]
    window = (with_cut[0], parsed[-1][0]) if with_cut else (0.0, 0.0)
    kept = [(t, d, cost) for t, d, cost in sampler.samples if window[0] <= t <= window[1]]
    per_table = {x: [d[x] / 1000 for _, d, _ in kept if d.get(x) is not None] for x in TABLES}
    hist_s = per_table["demo.count_histogram"]
    sample_cost = [c for _, _, c in kept]
    # printed epoch k (1-based) is the demo's epoch k - 1; count-histogram runs when that is odd (k even)
    cut_epochs = [int(m.group(1)) for _, m in parsed if m and m.group(4)]
    assert len(cut_epochs) == len(demo_s), (cut_epochs, demo_s)
    odd = [d for k, d in zip(cut_epochs, demo_s) if k % 2 == 0]  # histogram ran in this epoch
    even = [d for k, d in zip(cut_epochs, demo_s) if k % 2 == 1]

    command = "python -m bench.bench_freshness " + shlex.join(argv if argv is not None else sys.argv[1:])
    print(f"demo: {args.epochs} epochs x {args.rows} words, interval {args.interval}s, "
          f"wall {time.time() - started:.0f}s, "
          f"cuts checked {report['cuts_checked']}, violations {len(report['violations'])}; "
          f"load start {load_start} end {load_end}")
    print(f"demo samples (delays_ms)            : {summary(demo_s)}")
    print(f"  after epochs where histogram ran  : {summary(odd)}" if odd else "")
    print(f"  after epochs where it did not     : {summary(even)}" if even else "")
    if hist_s:
        print(f"time-weighted, every {args.sample_every:g}s           : {summary(hist_s)}")
        for x in TABLES:
            if per_table[x]:
                print(f"  now - W({x:21}): median {statistics.median(per_table[x]):.2f}s "
                      f"p95 {quantile(per_table[x], 0.95):.2f}s")
        print(f"  sampler: {len(kept)} samples kept of {len(sampler.samples)}, median cost "
              f"{statistics.median(sample_cost) * 1000:.0f} ms, {len(sampler.errors)} errors")
    # medians over the epochs 3.. in which count-histogram ran (the first epochs warm the JVM up)
    full = [steps[int(b * 1000)] for b in barriers[2:] if "count_histogram published" in steps.get(int(b * 1000), {})]
    step_names = ["words committed", "word_counts staged", "word_counts published", "count_histogram staged",
                  "count_histogram published"]
    step_medians = {k: statistics.median(r[k] for r in full if k in r) for k in step_names if any(k in r for r in full)}
    overran = sum(p > args.interval + 0.25 for p in period)
    print(f"ingest-to-ingest period: median {statistics.median(period):.2f}s max {max(period):.2f}s, "
          f"{overran} of {len(period)} over the interval (+0.25s)")
    print(f"ingest start -> end of epoch (ingest + jobs + read + check): first epoch {ingest_to_line[0]:.2f}s; "
          f"later, with count-histogram median {statistics.median(busy_hist):.2f}s (max {max(busy_hist):.2f}s), "
          f"word-count only median {statistics.median(busy_plain):.2f}s (max {max(busy_plain):.2f}s)")
    print(f"after the ingest barrier B, over {len(full)} epochs where both jobs ran (medians): "
          + ", ".join(f"{k} +{v:.2f}s" for k, v in step_medians.items()))
    if sampler.errors:
        print("sampler errors (first 3): " + " | ".join(sampler.errors[:3]))

    if args.markdown:
        md = [
            f"Command: `{command}` (runs `consistent-catalog demo --dir <fresh tmp dir> --epochs {args.epochs} "
            f"--rows-per-epoch {args.rows} --interval {args.interval:g} --output json`, Spark engine); "
            f"wall {time.time() - started:.0f} s; load average (1/5/15 min) {load_start} at start, {load_end} at end.",
            "",
            "| delay of demo.count_histogram | n | median | p95 | min | max |",
            "|---|---|---|---|---|---|",
        ]

        def row(label: str, values: list[float]) -> str:
            return (f"| {label} | {len(values)} | **{statistics.median(values):.2f} s** | "
                    f"**{quantile(values, 0.95):.2f} s** | "
                    f"{min(values):.2f} s | {max(values):.2f} s |")

        md.append(row("demo `delays_ms` (after each epoch)", demo_s))
        if odd:
            md.append(row("— after epochs where count-histogram ran", odd))
        if even:
            md.append(row("— after epochs where it did not", even))
        if hist_s:
            md.append(row(f"time-weighted (pyiceberg every {args.sample_every:g} s)", hist_s))
            for x in TABLES[:2]:
                md.append(row(f"— for comparison, now − W({x})", per_table[x]))
        md += [
            "",
            f"- ingest-to-ingest period median {statistics.median(period):.2f} s (max {max(period):.2f} s); "
            f"{overran} of {len(period)} periods overran the {args.interval:g} s interval by more than 0.25 s.",
            f"- an epoch's work, from its ingest barrier (taken just before the ingest write) to the end of its "
            f"jobs, consistent read and invariant check: first epoch (JVM warm-up) {ingest_to_line[0]:.2f} s; "
            f"later epochs median {statistics.median(busy_hist):.2f} s (max {max(busy_hist):.2f} s) when both jobs "
            f"ran, {statistics.median(busy_plain):.2f} s (max {max(busy_plain):.2f} s) when only word-count ran.",
            f"- where an epoch's time goes (metadata timestamps, medians over the {len(full)} epochs from the third "
            f"on in which both jobs ran), seconds after the ingest barrier B: "
            + ", ".join(f"{k} +{v:.2f}" for k, v in step_medians.items()) + ".",
            f"- cuts checked {report['cuts_checked']}, protocol §7 violations {len(report['violations'])}; "
            f"sampler kept {len(kept)} samples, median cost "
            f"{statistics.median(sample_cost) * 1000 if sample_cost else 0:.0f} ms "
            f"each, {len(sampler.errors)} errors.",
        ]
        print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
