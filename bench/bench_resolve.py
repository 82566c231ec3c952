"""Benchmark: resolving a consistent cut vs. pyiceberg merely loading the same tables.

Not a test. Builds, in a temporary directory, a SQLite-backed pyiceberg ``SqlCatalog`` with
``--tables`` tables of ``N`` snapshots each (for every N of ``--snapshots``), then times, per N,
the median over ``--repeat`` repetitions of

  (a) load   ``[catalog.load_table(t) for t in tables]``                      (bare pyiceberg)
  (b) cc     ``ConsistentCatalog(catalog).resolve(tables)``                    (load + resolution)
  (c) pure   ``resolve([TableState.from_metadata(t, tbl.metadata) ...])``      (resolution alone,
             over tables already loaded)

and prints (b)/(a) and (c)/(a) as a percentage overhead plus per-snapshot costs, which should stay
flat as N grows if resolution is linear in the number of snapshots.

History is generated cheaply: each table gets ONE catalog commit that adds N snapshots chained by
parent id (increasing timestamps and sequence numbers, tagged with ``consistent.barrier`` and, on
derived tables, ``consistent.job`` / ``consistent.sources``) and points ``main`` at the last one.
The snapshots carry no data files; their manifest lists do not exist (loading metadata never reads
them). Tables 0..9 are roots (no job keys; even-numbered roots tag event-time barriers, odd ones
rely on system time ``timestamp-ms``); every other table is derived from two lower-numbered tables
and carries the ``consistent.job`` / ``consistent.sources`` table properties.

Usage:
    python -m bench.bench_resolve [--tables 100] [--snapshots 100,250,500,1000] [--repeat 5] [--markdown]
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pyiceberg
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, SetPropertiesUpdate, SetSnapshotRefUpdate
from pyiceberg.types import LongType, NestedField, StringType

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.resolver import resolve
from consistent_catalog.state import TableState

NAMESPACE = "bench"
N_ROOTS = 10
BASE_MS = 1_700_000_000_000
STEP_MS = 60_000  # one epoch a minute
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "word", StringType(), required=False),
)


def table_name(i: int) -> str:
    return f"{NAMESPACE}.t{i:03d}"


def sources_of(i: int) -> list[str]:
    """Direct sources of table i (a DAG: always lower-numbered tables); empty for roots."""
    if i < N_ROOTS:
        return []
    return sorted({table_name(i - N_ROOTS), table_name(i % N_ROOTS)})


def lag_ms(i: int) -> int:
    """How far table i's newest barrier is behind the newest root data: one epoch per level of the DAG.

    Every table has an epoch at every grid barrier up to its newest, as a pipeline whose jobs keep up
    (each a little behind its sources) has; derived tables record as inputs their sources' snapshots
    at the epoch's barrier, so each table is complete at its epochs.
    """
    return (i // N_ROOTS) * STEP_MS


def snapshot_id(i: int, k: int) -> int:
    return (i + 1) * 10_000_000 + k


def summary_props(rows: int, k: int) -> dict[str, str]:
    """The counters pyiceberg/Spark write on an append of one data file (keeps metadata realistic in size)."""
    return {
        "added-data-files": "1",
        "added-records": str(rows),
        "added-files-size": str(rows * 12),
        "changed-partition-count": "1",
        "total-records": str(rows * (k + 1)),
        "total-files-size": str(rows * 12 * (k + 1)),
        "total-data-files": str(k + 1),
        "total-delete-files": "0",
        "total-position-deletes": "0",
        "total-equality-deletes": "0",
    }


def input_at(history: list[tuple[int, int]], barrier: int) -> int | None:
    """The source's newest snapshot with barrier <= ``barrier`` (what its job read at that epoch)."""
    index = bisect.bisect_right(history, (barrier, float("inf"))) - 1
    return history[index][1] if index >= 0 else None


@dataclass
class Fixture:
    catalog: SqlCatalog
    tables: list[str]
    expected_barrier: int
    expected_heads: dict[str, int]
    n_snapshots: int
    build_seconds: float
    metadata_bytes: int


def build(directory: str, n_tables: int, n_snapshots: int) -> Fixture:
    started = time.perf_counter()
    catalog = SqlCatalog("bench", uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/wh")
    catalog.create_namespace(NAMESPACE)
    names = [table_name(i) for i in range(n_tables)]
    last_barriers: dict[str, int] = {}
    heads: dict[str, int] = {}
    history: dict[str, list[tuple[int, int]]] = {}  # table -> [(barrier, snapshot id)], oldest first
    metadata_bytes = 0
    for i, name in enumerate(names):
        sources = sources_of(i)
        properties = {}
        if sources:
            properties = {P.JOB: f"job-{i:03d}", P.SOURCES: json.dumps(sources, separators=(",", ":"))}
        table = catalog.create_table(name, SCHEMA)
        updates: list = [SetPropertiesUpdate(updates=properties)] if properties else []
        parent: int | None = None
        uses_system_time = i < N_ROOTS and i % 2 == 1
        newest = BASE_MS + n_snapshots * STEP_MS - lag_ms(i)
        barrier = newest
        for k in range(n_snapshots):
            sid = snapshot_id(i, k)
            barrier = newest - (n_snapshots - 1 - k) * STEP_MS
            props = summary_props(100 + (k % 17), k)
            timestamp = barrier + 5_000 + (i % 13)  # commit time: a little after the data's barrier
            if uses_system_time:
                barrier = timestamp  # raw(s) = timestamp-ms on an untagged root
            else:
                props[P.BARRIER] = str(barrier)
            if sources:
                props[P.JOB] = f"job-{i:03d}"
                props[P.SOURCES] = json.dumps({s: input_at(history[s], barrier) for s in sources}, separators=(",", ":"))
            history.setdefault(name, []).append((barrier, sid))
            updates.append(
                AddSnapshotUpdate(
                    snapshot=Snapshot(
                        snapshot_id=sid,
                        parent_snapshot_id=parent,
                        sequence_number=k + 1,
                        timestamp_ms=timestamp,
                        manifest_list=f"file://{directory}/wh/bench/t{i:03d}/metadata/snap-{sid}-missing.avro",
                        summary=Summary(Operation.APPEND, **props),
                        schema_id=0,
                    )
                )
            )
            parent = sid
        assert parent is not None
        updates.append(
            SetSnapshotRefUpdate(ref_name=P.MAIN_BRANCH, type=SnapshotRefType.BRANCH, snapshot_id=parent)
        )
        response = catalog.commit_table(table, requirements=(), updates=tuple(updates))
        metadata_bytes += os.path.getsize(response.metadata_location.removeprefix("file://"))
        last_barriers[name] = barrier
        heads[name] = parent
    expected = min(last_barriers.values())
    # snap(X, T*) is the newest snapshot with b <= T*; barriers are STEP_MS apart.
    expected_heads = {}
    for name in names:
        behind = -(-(last_barriers[name] - expected) // STEP_MS)  # ceil
        expected_heads[name] = heads[name] - behind
    return Fixture(
        catalog, names, expected, expected_heads, n_snapshots, time.perf_counter() - started, metadata_bytes
    )


def check(fixture: Fixture) -> None:
    """Sanity: the generated tables load, and the cut is min of the last barriers written."""
    cut = ConsistentCatalog(fixture.catalog).resolve(fixture.tables)
    if cut.barrier != fixture.expected_barrier:
        raise SystemExit(f"sanity check failed: cut barrier {cut.barrier} != expected {fixture.expected_barrier}")
    got = cut.snapshot_ids
    wrong = {t: (got[t], s) for t, s in fixture.expected_heads.items() if got[t] != s}
    if wrong:
        sample = dict(list(wrong.items())[:3])
        raise SystemExit(f"sanity check failed: snapshot ids (got, expected) differ for {sample}")
    for name in fixture.tables[:3] + fixture.tables[-2:]:
        if len(fixture.catalog.load_table(name).metadata.snapshots) != fixture.n_snapshots:
            raise SystemExit(f"sanity check failed: {name} does not hold {fixture.n_snapshots} snapshots")


def timed(fn: Callable[[], object], keep_gc: bool = False) -> float:
    """Wall time of one call. Like ``timeit``, the cyclic GC is off while timing (unless ``keep_gc``):
    with it on, full collections traverse every live pyiceberg object, so the variant that keeps the
    most loaded metadata alive is charged for the others' garbage and results swing by 2x."""
    gc.collect()
    if not keep_gc:
        gc.disable()
    try:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started
    finally:
        gc.enable()


@dataclass
class Result:
    n: int
    load: list[float]
    cc: list[float]
    pure: list[float]
    build_seconds: float
    metadata_bytes: int


def measure(fixture: Fixture, repeat: int, keep_gc: bool = False) -> Result:
    catalog, tables = fixture.catalog, fixture.tables
    cc = ConsistentCatalog(catalog)
    loaded = [catalog.load_table(t) for t in tables]

    def bare() -> object:
        return [catalog.load_table(t) for t in tables]

    def full() -> object:
        return cc.resolve(tables)

    def pure() -> object:
        return resolve([TableState.from_metadata(name, tbl.metadata) for name, tbl in zip(tables, loaded)])

    runs: dict[str, list[float]] = {"load": [], "cc": [], "pure": []}
    fns = {"load": bare, "cc": full, "pure": pure}
    order = ["load", "cc", "pure"]
    timed(bare, keep_gc)  # warm-up: imports, SQLAlchemy statement cache, OS page cache
    timed(full, keep_gc)
    for r in range(repeat):
        for key in order[r % 3 :] + order[: r % 3]:  # rotate the order so no variant always runs first
            runs[key].append(timed(fns[key], keep_gc))
    return Result(
        fixture.n_snapshots, runs["load"], runs["cc"], runs["pure"], fixture.build_seconds, fixture.metadata_bytes
    )


def profile_pure(fixture: Fixture, repeat: int) -> None:
    import cProfile
    import pstats

    loaded = [fixture.catalog.load_table(t) for t in fixture.tables]
    profiler = cProfile.Profile()
    gc.collect()
    gc.disable()
    profiler.enable()
    for _ in range(repeat):
        resolve([TableState.from_metadata(name, tbl.metadata) for name, tbl in zip(fixture.tables, loaded)])
    profiler.disable()
    gc.enable()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    print(
        f"cProfile of the pure part (c), {len(fixture.tables)} tables x {fixture.n_snapshots} snapshots, "
        f"{repeat} runs"
    )
    stats.sort_stats("tottime").print_stats(15)
    stats.sort_stats("cumulative").print_stats(15)


def med(values: list[float]) -> float:
    return statistics.median(values)


def report(results: list[Result], n_tables: int, repeat: int, command: str, markdown: bool, keep_gc: bool) -> str:
    lines: list[str] = []
    if markdown:
        lines += [
            f"Command: `{command}`",
            "",
            f"Environment: Python {platform.python_version()}, pyiceberg {pyiceberg.__version__}, "
            f"{os.cpu_count()} cores, SQLite SqlCatalog on local disk; {n_tables} tables; "
            f"median of {repeat} repetitions (min–max in brackets); "
            f"cyclic GC {'on' if keep_gc else 'off'} while timing.",
            "",
            "Overheads are ratios of the medians; in brackets the median of the per-repetition ratios "
            "(each repetition runs (a), (b), (c) back to back, so this pairs measurements taken under the same load).",
            "",
            "| snapshots/table | metadata/table | (a) bare load | (b) `cc.resolve` | (c) pure part "
            "| (b)/(a) − 1 | (c)/(a) | (a) µs/snapshot | (c) µs/snapshot |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
    else:
        lines += [
            f"{n_tables} tables, median of {repeat} repetitions (min-max), "
            f"GC {'on' if keep_gc else 'off'} while timing",
            f"{'snap/tbl':>8} {'KiB/tbl':>8} {'(a) load s':>20} {'(b) cc.resolve s':>20} {'(c) pure s':>20} "
            f"{'b/a-1 (paired)':>16} {'c/a (paired)':>16} {'a us/snap':>9} {'c us/snap':>9}",
        ]
    for r in results:
        a, b, c = med(r.load), med(r.cc), med(r.pure)
        snaps = n_tables * r.n
        cells = (
            f"{r.metadata_bytes / n_tables / 1024:.0f} KiB",
            f"{a:.3f} s ({min(r.load):.3f}–{max(r.load):.3f})",
            f"{b:.3f} s ({min(r.cc):.3f}–{max(r.cc):.3f})",
            f"{c:.3f} s ({min(r.pure):.3f}–{max(r.pure):.3f})",
            f"{(b / a - 1) * 100:+.1f} % ({(med([y / x for x, y in zip(r.load, r.cc)]) - 1) * 100:+.1f})",
            f"{c / a * 100:.1f} % ({med([y / x for x, y in zip(r.load, r.pure)]) * 100:.1f})",
            f"{a / snaps * 1e6:.1f}",
            f"{c / snaps * 1e6:.2f}",
        )
        if markdown:
            lines.append(f"| {r.n} | " + " | ".join(cells) + " |")
        else:
            lines.append(
                f"{r.n:>8} {cells[0]:>8} {cells[1]:>20} {cells[2]:>20} {cells[3]:>20} "
                f"{cells[4]:>16} {cells[5]:>16} {cells[6]:>9} {cells[7]:>9}"
            )
    lines.append("")
    lines.append(
        "build (one-time, not timed above): "
        + ", ".join(f"N={r.n}: {r.build_seconds:.1f} s" for r in results)
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--snapshots", default="100,250,500,1000", help="comma-separated snapshots per table")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table for BENCHMARKS.md")
    parser.add_argument("--profile", action="store_true",
                        help="instead of timing, cProfile the pure part (c) at the largest N; print the top functions")
    parser.add_argument("--keep-gc", action="store_true", help="leave the cyclic GC on while timing (noisier)")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.snapshots.split(",") if x.strip()]
    if args.tables <= N_ROOTS or min(counts) < 2 or args.repeat < 1:
        parser.error(f"need --tables > {N_ROOTS}, at least 2 snapshots per table and --repeat >= 1")
    command = "python -m bench.bench_resolve " + shlex.join(sys.argv[1:] if argv is None else argv)
    warnings.simplefilter("ignore")
    results = []
    for n in counts:
        with tempfile.TemporaryDirectory(prefix=f"bench-resolve-{n}-") as directory:
            fixture = build(directory, args.tables, n)
            check(fixture)
            if args.profile:
                if n == max(counts):
                    profile_pure(fixture, args.repeat)
                fixture.catalog.engine.dispose()
                continue
            print(f"N={n}: built {args.tables} tables in {fixture.build_seconds:.1f} s, cut verified; timing...",
                  file=sys.stderr, flush=True)
            results.append(measure(fixture, args.repeat, args.keep_gc))
            fixture.catalog.engine.dispose()
    if args.profile:
        return 0
    print(report(results, args.tables, args.repeat, command.strip(), args.markdown, args.keep_gc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
