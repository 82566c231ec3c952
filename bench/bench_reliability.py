"""Benchmark: crash injection — how many kills, what was found.

Not a test (it asserts nothing; ``tests/integration/test_crash_recovery.py`` does). Runs the
crash-injection scenarios of ``tests/harness/crash`` in throw-away directories:

  1. chosen points: every job (word-count, count-histogram, copy) killed with ``kill -9`` before,
     during and after staging and during and after publishing, then resumed (twice, with new input
     in between, where the crash leaves a staged epoch behind); and every job killed inside the
     commit of a watermark-only epoch (idle root);
  2. a sweep: all three jobs in one process killed at each of its catalog commits in turn, inside
     the commit (metadata file written, catalog row not swapped) and right after it;
  3. zombies: every job stopped (SIGSTOP) at each of those points, taken over by a new instance
     that publishes newer input, then woken up — its writes must be refused (fencing);
  4. random: ``--kills`` kills at random instants and at random catalog commits of randomly chosen
     jobs, with root epochs ingested between and during runs, each killed job resumed later.

Every resume is followed by a full check with the independent reader (SQLite + metadata JSON +
DuckDB scans), and a reader thread checks repeatable-read cuts throughout. Prints a summary table
and the kills by point; ``--markdown`` prints them as Markdown for BENCHMARKS.md.

Usage:
    python -m bench.bench_reliability [--kills 100] [--seed 1] [--skip-chosen] [--skip-sweep] [--skip-zombies]
                                      [--markdown] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.harness.crash.common import CRASH_POINTS, JOBS
from tests.harness.crash.driver import Report
from tests.harness.crash.scenarios import (
    chosen_point_scenario,
    commit_sweep_scenario,
    idle_root_scenario,
    random_kill_scenario,
    zombie_scenario,
)

COLUMNS = ("scenario", "kills", "pauses", "runs", "resumes", "republished (expected)", "fencing refusals",
           "invariant violations", "epochs duplicated", "epochs lost", "epoch checks", "cut checks",
           "reader errors", "time")


def row(name: str, report: Report) -> list[str]:
    return [name, str(report.total_kills), str(report.pauses), str(report.runs), str(report.resumes),
            f"{report.republished} ({report.republish_expected})", str(report.fenced), str(len(report.violations)),
            str(report.findings.duplicated), str(report.findings.lost), str(report.findings.epochs_checked),
            str(report.findings.cuts_checked + report.reader_cuts), str(len(report.reader_errors)),
            f"{report.seconds:.0f} s"]


def table(header: list[str] | tuple[str, ...], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        rule = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"
        lines = ["| " + " | ".join(header) + " |", rule]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join(fmt.format(*r) for r in [list(header), *rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100, help="random kills to land (default 100)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the random choices (the kill instants also depend on timing)")
    parser.add_argument("--skip-chosen", action="store_true")
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--skip-zombies", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--keep", type=Path, help="keep the lakes under this directory (default: a temp dir, removed)")
    args = parser.parse_args()

    started = time.monotonic()
    reports: dict[str, Report] = {}
    violations: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-reliability-") as tmp:
        base = args.keep or Path(tmp)
        if not args.skip_chosen:
            chosen = Report()
            for job in JOBS:
                for point in CRASH_POINTS:
                    report = chosen_point_scenario(base / f"chosen-{job}-{point}", job, point)
                    violations += report.violations + report.reader_errors
                    chosen.add(report)
                    print(f"chosen {job:15} {point:15} {report.summary()}", file=sys.stderr)
            reports["chosen points (5 points × 3 jobs)"] = chosen
            idle = Report()
            for job in JOBS:
                report = idle_root_scenario(base / f"idle-{job}", job)
                violations += report.violations + report.reader_errors
                idle.add(report)
                print(f"idle   {job:15} during-publish  {report.summary()}", file=sys.stderr)
            reports["watermark-only publish (idle root) × 3 jobs"] = idle
        if not args.skip_sweep:
            report = commit_sweep_scenario(base / "sweep")
            violations += report.violations + report.reader_errors
            print(f"sweep  {report.summary()}", file=sys.stderr)
            reports["every commit of an `all` run, inside and after"] = report
        if not args.skip_zombies:
            zombies = Report()
            for job in JOBS:
                for point in CRASH_POINTS:
                    report = zombie_scenario(base / f"zombie-{job}-{point}", job, point)
                    violations += report.violations + report.reader_errors
                    zombies.add(report)
                    print(f"zombie {job:15} {point:15} {report.summary()}", file=sys.stderr)
            reports["zombies (SIGSTOP, takeover, SIGCONT)"] = zombies
        if args.kills > 0:
            report = random_kill_scenario(base / "random", args.kills, seed=args.seed)
            violations += report.violations + report.reader_errors
            print(f"random {report.summary()}", file=sys.stderr)
            reports[f"random (seed {args.seed})"] = report
    total = Report()
    for report in reports.values():
        total.add(report)
    elapsed = time.monotonic() - started

    command = "python -m bench.bench_reliability " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    load = os.getloadavg()
    print(f"Command: `{command.strip()}`")
    print(f"Environment: Python {platform.python_version()}, {os.cpu_count()} cores, SQLite SqlCatalog on local disk; "
          f"load average at the end {load[0]:.1f}; wall time {elapsed:.0f} s.\n")
    rows = [row(name, r) for name, r in reports.items()] + [row("**total**" if args.markdown else "total", total)]
    print(table(COLUMNS, rows, args.markdown))
    print()
    by_point: Counter[str] = Counter()
    for report in reports.values():
        by_point.update(report.kills)
    print(table(("kill landed at", "kills"), [[k, str(v)] for k, v in sorted(by_point.items())], args.markdown))
    print()
    if violations:
        print(f"{len(violations)} violations / reader errors:")
        for v in violations[:50]:
            print(f"- {v}")
    else:
        print("No invariant violation, no duplicated or lost epoch, no reader error.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
