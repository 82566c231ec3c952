"""Benchmark: resolving consistent cuts vs. pyiceberg merely loading the same tables (issue #11).

Not a test. One run builds throw-away catalogs and reports every row side by side, each measured in
one process with the variants interleaved (the order rotates every repetition):

  (a) load     ``[catalog.load_table(t) for t in tables]``: pyiceberg's bare sequential load
  (o) old      what ``cc.resolve`` did before issue #11: ``load_table`` + ``TableState.from_metadata``
               per table, one after another, then the resolver
  (b) cold     ``cc.resolve(tables)`` by a new ``ConsistentCatalog`` with an empty state cache (one
               catalog query, concurrent reads through pyiceberg's FileIO, the lean decoder, the resolver)
  (w) warm     ``cc.resolve(tables)`` again in the same process, nothing changed (the cache answers)
  (1) one      the same after one of the tables changed (a table property set: a new metadata file)

Setups (rows):

  sqlite       SqlCatalog on SQLite, warehouse on local disk: ``--tables`` x each of ``--snapshots``
  wide         the same with ``--wide-tables`` tables x ``--wide-snapshots`` (linear growth in tables)
  rest demo    FLIP-276's three tables (``run_demo``, 6 epochs of 1,000 words, pyiceberg jobs) in a REST
               catalog: the project's REST server (tests/harness/rest_server.py), on this machine
  rest         ``--tables`` x ``--rest-snapshots`` in that REST catalog, asked directly
  rest+Nms     the same tables through ``tests/harness/proxy.py``, which delays every request by
               ``--rest-latency-ms`` (a catalog that far away); pyiceberg's load and ours pay it alike
  pg+s3        SqlCatalog on PostgreSQL, warehouse in S3 (moto, in a process of its own, every request
               delayed by ``--latency-ms``: ``bench/latency_s3.py``, a WSGI middleware in front of moto, so
               pyiceberg's load and ours pay the same latency per request): ``--tables`` x ``--s3-snapshots``

History is generated cheaply: each table gets ONE catalog commit that adds N snapshots chained by
parent id (increasing timestamps and sequence numbers, tagged with ``consistent.barrier`` and, on
derived tables, ``consistent.job`` / ``consistent.sources``) and points ``main`` at the last one.
The snapshots carry no data files; their manifest lists do not exist (loading metadata never reads
them). Tables 0..9 are roots (no job keys; even-numbered roots tag event-time barriers, odd ones
rely on system time ``timestamp-ms``); every other table is derived from two lower-numbered tables
and carries the ``consistent.job`` / ``consistent.sources`` table properties. Before timing, the cut
is checked against the barrier and snapshot ids the generator expects.

It also times the JSON decoders on one metadata file (pyiceberg's pydantic parse, ``json``,
``orjson`` if installed, msgspec typed as ``consistent_catalog.metadata`` uses it).

Usage:
    python -m bench.bench_resolve [--tables 100] [--snapshots 1000] [--wide-tables 1000] [--wide-snapshots 100]
                                  [--s3-snapshots 1000] [--latency-ms 20] [--readers 16] [--repeat 5]
                                  [--rest-snapshots 1000] [--rest-latency-ms 20] [--no-rest | --only-rest]
                                  [--no-s3] [--markdown] [--profile] [--keep-gc]
    python -m bench.bench_resolve --legacy [--snapshots 100,250,500,1000] ...   (the table of the first benchmark)
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
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, SetPropertiesUpdate, SetSnapshotRefUpdate
from pyiceberg.types import LongType, NestedField, StringType

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.loading import table_state
from consistent_catalog.resolver import resolve

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


#: levels of derived tables: table i >= N_ROOTS is on level ((i // N_ROOTS) - 1) % MAX_LEVEL + 1, so the DAG
#: stays 9 levels deep however many tables there are (with 100 tables: level i // N_ROOTS, as always)
MAX_LEVEL = 9


def level_of(i: int) -> int:
    return 0 if i < N_ROOTS else ((i // N_ROOTS) - 1) % MAX_LEVEL + 1


def sources_of(i: int) -> list[str]:
    """Direct sources of table i (a DAG: always lower-numbered tables); empty for roots.

    The table N_ROOTS below (one level up) and the root i % N_ROOTS; on level 1 that is one root.
    """
    level = level_of(i)
    if level == 0:
        return []
    if level == 1:
        return [table_name(i % N_ROOTS)]
    return sorted({table_name(i - N_ROOTS), table_name(i % N_ROOTS)})


def lag_ms(i: int) -> int:
    """How far table i's newest barrier is behind the newest root data: one epoch per level of the DAG.

    Every table has an epoch at every grid barrier up to its newest, as a pipeline whose jobs keep up
    (each a little behind its sources) has; derived tables record as inputs their sources' snapshots
    at the epoch's barrier, so each table is complete at its epochs.
    """
    return level_of(i) * STEP_MS


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
    catalog: Catalog
    tables: list[str]
    expected_barrier: int
    expected_heads: dict[str, int]
    n_snapshots: int
    build_seconds: float
    metadata_bytes: int


def build(directory: str, n_tables: int, n_snapshots: int, catalog: SqlCatalog | None = None) -> Fixture:
    """``n_tables`` tables of ``n_snapshots`` snapshots in ``catalog`` (default: SQLite in ``directory``)."""
    started = time.perf_counter()
    if catalog is None:
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
                        manifest_list=f"{table.location()}/metadata/snap-{sid}-missing.avro",
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
        metadata_bytes += len(table.io.new_input(response.metadata_location))
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

    def full() -> object:  # cold: a state cache of its own, empty
        from consistent_catalog.loading import StateCache

        cc.store.loader.cache = StateCache()
        return cc.resolve(tables)

    def pure() -> object:
        return resolve([table_state(name, tbl.metadata) for name, tbl in zip(tables, loaded)])

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
        resolve([table_state(name, tbl.metadata) for name, tbl in zip(fixture.tables, loaded)])
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


# --- issue #11: cold, warm and one-changed resolution against the bare load ----------------------------
@dataclass
class Row:
    setup: str
    tables: int
    snapshots: int
    kib_per_table: float
    runs: dict[str, list[float]]
    load_averages: list[float]
    requests: dict[str, int]
    build_seconds: float
    answers_alone: list[float] | None = None
    """REST: the tables' loadTable answers alone, all at once, not decoded (the server's share of a cold resolve)."""


VARIANTS = ("load", "old", "cold", "warm", "one")
LABELS = {"load": "a", "old": "o", "cold": "b", "warm": "w", "one": "1"}


def old_resolve(catalog: SqlCatalog, tables: list[str]) -> object:
    """``cc.resolve`` before issue #11: a pyiceberg load and ``from_metadata`` per table, one after another."""
    states = [table_state(name, catalog.load_table(name).metadata) for name in tables]
    return resolve(states, upstream=states)


def touch(catalog: SqlCatalog, name: str, value: int) -> None:
    """Change one table: a property set is a commit, so a new metadata file (not timed)."""
    table = catalog.load_table(name)
    catalog.commit_table(table, requirements=(), updates=(SetPropertiesUpdate(updates={"bench.touched": str(value)}),))


def measure_all(fixture: Fixture, setup: str, repeat: int, keep_gc: bool, readers: int, s3: object = None) -> Row:
    from consistent_catalog.loading import StateCache

    catalog, tables = fixture.catalog, fixture.tables

    def fresh() -> ConsistentCatalog:
        cc = ConsistentCatalog(catalog)
        cc.store.loader.cache = StateCache()
        cc.store.loader.readers = readers
        return cc

    warm_cc = fresh()
    warm_cc.resolve(tables)  # fills its cache
    expected = warm_cc.resolve(tables)
    fns: dict[str, Callable[[], object]] = {
        "load": lambda: [catalog.load_table(t) for t in tables],
        "old": lambda: old_resolve(catalog, tables),
        "cold": lambda: fresh().resolve(tables),
        "warm": lambda: warm_cc.resolve(tables),
        "one": lambda: warm_cc.resolve(tables),
    }
    runs: dict[str, list[float]] = {key: [] for key in VARIANTS}
    loads: list[float] = []
    for key in ("load", "cold"):
        timed(fns[key], keep_gc)  # warm-up: imports, SQLAlchemy statement cache, OS page cache
    for r in range(repeat):
        loads.append(os.getloadavg()[0])
        for key in VARIANTS[r % 5 :] + VARIANTS[: r % 5]:  # rotate the order so no variant always runs first
            if key == "one":
                touch(catalog, tables[(r * 37 + 11) % len(tables)], r)
            runs[key].append(timed(fns[key], keep_gc))
    loads.append(os.getloadavg()[0])
    if fresh().resolve(tables).snapshot_ids != expected.snapshot_ids:
        raise SystemExit("sanity check failed: the cut changed while timing")
    requests: dict[str, int] = {}
    if s3 is not None:  # requests to the object store per variant (one untimed run each)
        for key in ("load", "old", "cold", "warm"):
            s3.requests(reset=True)  # type: ignore[attr-defined]
            fns[key]()
            requests[key] = s3.requests()  # type: ignore[attr-defined]
    return Row(setup, len(tables), fixture.n_snapshots, fixture.metadata_bytes / len(tables) / 1024, runs, loads, requests,
               fixture.build_seconds)


def decoders(fixture: Fixture, repeat: int) -> dict[str, float]:
    """Median ms to decode one metadata file of the fixture into a state, per JSON library."""
    import msgspec  # noqa: F401 - the one consistent_catalog.metadata uses

    from consistent_catalog.barrier import SnapshotRecord
    from consistent_catalog.metadata import decode_state
    from consistent_catalog.state import TableState as State

    name = fixture.tables[-1]
    table = fixture.catalog.load_table(name)
    with table.io.new_input(table.metadata_location).open() as stream:
        data = stream.read()

    def from_dict(document: dict) -> State:  # the same state from a generic JSON decoder's dicts
        make = tuple.__new__
        snapshots = {}
        for s in document.get("snapshots", []):
            summary = dict(s.get("summary") or {"operation": "append"})
            operation = summary.pop("operation")
            snapshots[s["snapshot-id"]] = make(
                SnapshotRecord, (s["snapshot-id"], s.get("parent-snapshot-id"), s["timestamp-ms"], operation, summary)
            )
        refs = document.get("refs", {})
        branches = {k: v["snapshot-id"] for k, v in refs.items() if v["type"] == "branch"}
        tags = {k: v["snapshot-id"] for k, v in refs.items() if v["type"] == "tag"}
        log = tuple((e["timestamp-ms"], e["snapshot-id"]) for e in document.get("snapshot-log", []))
        return State(name, snapshots, branches, document.get("properties", {}), tags, log)

    from pyiceberg.table.metadata import TableMetadataUtil

    fns: dict[str, Callable[[], object]] = {
        "pyiceberg (pydantic) + from_metadata": lambda: State.from_metadata(name, TableMetadataUtil.parse_raw(data)),
        "json (stdlib)": lambda: from_dict(json.loads(data)),
        "msgspec, typed (consistent_catalog.metadata)": lambda: decode_state(name, data),
    }
    try:
        import orjson

        fns["orjson"] = lambda: from_dict(orjson.loads(data))
    except ImportError:
        pass
    reference = fns["pyiceberg (pydantic) + from_metadata"]()
    for key, fn in fns.items():
        if fn() != reference:
            raise SystemExit(f"decoder {key} gives another state")
    times: dict[str, list[float]] = {key: [] for key in fns}
    for _ in range(max(repeat, 5)):
        for key, fn in fns.items():  # ten decodes back to back per sample (GC off, as in every timing here)
            times[key].append(timed(lambda fn=fn: [fn() for _ in range(10)]) / 10)
    return {key: med(values) * 1000 for key, values in times.items()}


def profile_cold(fixture: Fixture, repeat: int, readers: int) -> None:
    import cProfile
    import pstats

    from consistent_catalog.loading import StateCache

    profiler = cProfile.Profile()
    gc.collect()
    gc.disable()
    profiler.enable()
    for _ in range(repeat):
        cc = ConsistentCatalog(fixture.catalog)
        cc.store.loader.cache = StateCache()
        cc.store.loader.readers = readers
        cc.resolve(fixture.tables)
    profiler.disable()
    gc.enable()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    print(f"cProfile of the cold resolution (b), {len(fixture.tables)} tables x {fixture.n_snapshots} snapshots, "
          f"{repeat} runs (main thread only: reads run on pool threads)")
    stats.sort_stats("tottime").print_stats(15)
    stats.sort_stats("cumulative").print_stats(20)


def fmt_s(values: list[float]) -> str:
    return f"{med(values):.3f} s" if med(values) >= 0.1 else f"{med(values) * 1000:.1f} ms"


def paired(row: Row, key: str, base: str = "load") -> float:
    """Median of the per-repetition ratios key/base (measured back to back, under the same load)."""
    return med([x / y for x, y in zip(row.runs[key], row.runs[base])])


def report_all(rows: list[Row], decoded: dict[str, float], repeat: int, command: str, readers: int,
               latency_ms: float, markdown: bool, keep_gc: bool) -> str:
    lines: list[str] = []
    header = ("| setup | tables × snapshots | metadata/table | (a) bare load | (o) old `cc.resolve` | (b) cold | (w) warm "
              "| (1) one changed | (b)/(a) | (w)/(a) | (1)−(w) in tables' worth of (b) | (1)−(w) in tables' worth of (a) "
              "| (o)/(a) | load avg |")
    if markdown:
        lines += [
            f"Command: `{command}`",
            "",
            f"Environment: Python {platform.python_version()}, pyiceberg {pyiceberg.__version__}, {os.cpu_count()} cores "
            f"(shared); median of {repeat} repetitions (variants interleaved, order rotated); cyclic GC "
            f"{'on' if keep_gc else 'off'} while timing; {readers} reader threads"
            + "".join(f"; {r.setup}: {latency_ms:g} ms per S3 request" for r in rows if r.setup == "pg+s3")
            + "".join(f"; {r.setup}: every request held by tests/harness/proxy.py" for r in rows if r.setup.startswith("rest+"))
            + ".",
            "",
            "Ratios are medians of the per-repetition ratios (each repetition runs every variant back to back). "
            "'(1)−(w) in tables' worth of (b)' / '(a)': the extra cost of one changed table, in units of (b)/tables "
            "(1.0 = exactly one table's share of a cold resolution) and of (a)/tables (one table's bare pyiceberg load).",
            "",
            header,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
    else:
        lines.append(header)
    for row in rows:
        extra = med(row.runs["one"]) - med(row.runs["warm"])
        share = extra / (med(row.runs["cold"]) / row.tables)
        share_of_load = extra / (med(row.runs["load"]) / row.tables)
        cells = [
            row.setup, f"{row.tables} × {row.snapshots}", f"{row.kib_per_table:.0f} KiB",
            fmt_s(row.runs["load"]), fmt_s(row.runs["old"]), fmt_s(row.runs["cold"]), fmt_s(row.runs["warm"]),
            fmt_s(row.runs["one"]), f"{paired(row, 'cold'):.3f}", f"{paired(row, 'warm'):.4f}", f"{share:.1f}", f"{share_of_load:.2f}",
            f"{paired(row, 'old'):.2f}", f"{min(row.load_averages):.1f}–{max(row.load_averages):.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    wide = next((r for r in rows if r.setup == "wide"), None)
    small = next((r for r in rows if wide is not None and r.setup == "sqlite" and r.snapshots == wide.snapshots), None)
    if small is not None and wide is not None:
        factor = wide.tables / small.tables
        lines.append(
            f"Linear growth: {wide.tables} × {wide.snapshots} vs {small.tables} × {small.snapshots} ({factor:g}× the tables): "
            f"(b) cold {med(wide.runs['cold']) / med(small.runs['cold']):.1f}×, (w) warm "
            f"{med(wide.runs['warm']) / med(small.runs['warm']):.1f}×, (a) bare load "
            f"{med(wide.runs['load']) / med(small.runs['load']):.1f}×."
        )
    for row in rows:
        if row.answers_alone:
            lines.append(
                f"{row.setup}: the {row.tables} loadTable answers alone, all at once, nothing decoded (the server's "
                f"share of (b)): {fmt_s(row.answers_alone)} = {med(row.answers_alone) / med(row.runs['load']):.3f}× (a)"
            )
        if row.requests:
            lines.append(
                f"{row.setup} requests to S3 per run: " + ", ".join(f"({LABELS[k]}) {k} {v}" for k, v in row.requests.items())
            )
    lines.append("")
    if decoded:
        lines.append("Decoding one metadata file into a table state (" + ", ".join(f"{k}: {v:.1f} ms" for k, v in decoded.items()) + ").")
    lines.append("")
    lines.append("build (one-time, not timed above): " + ", ".join(f"{r.setup} {r.tables}×{r.snapshots}: {r.build_seconds:.0f} s" for r in rows))
    return "\n".join(lines)


def pg_s3_fixture(pg: object, s3: object, directory: str, n_tables: int, n_snapshots: int) -> Fixture:
    import uuid

    bucket = s3.create_bucket(f"bench-{uuid.uuid4().hex[:12]}")  # type: ignore[attr-defined]
    catalog = SqlCatalog("bench", uri=pg.uri(pg.create_database()), warehouse=f"s3://{bucket}/wh",  # type: ignore[attr-defined]
                         **s3.properties())  # type: ignore[attr-defined]
    return build(directory, n_tables, n_snapshots, catalog)


def register_copies(fixture: Fixture, catalog: Catalog) -> None:
    """Register in ``catalog`` a copy of each fixture table's metadata file without its metadata log.

    Java's TableMetadata refuses a table whose newest snapshot is more than a minute older than an entry of
    its metadata log (the table's creation, now), and its metadata builder such a history in a commit; the
    generated grid is in 2023. A registered table has no metadata log: the copy is the same table as Java
    accepts it (snapshots, refs, properties, snapshot log unchanged), and later commits work.
    """
    catalog.create_namespace(NAMESPACE)
    for name in fixture.tables:
        table = fixture.catalog.load_table(name)
        with table.io.new_input(table.metadata_location).open() as stream:
            document = json.loads(stream.read())
        document["metadata-log"] = []
        copy = table.metadata_location.replace(".metadata.json", "-served.metadata.json")
        with table.io.new_output(copy).create() as stream:
            stream.write(json.dumps(document).encode())
        catalog.register_table(name, copy)
    fixture.catalog.engine.dispose()


def answers_alone(catalog: Catalog, tables: list[str], repeat: int, keep_gc: bool) -> list[float]:
    """Seconds to fetch every table's full loadTable answer at once (16 connections), decoding nothing."""
    from concurrent.futures import ThreadPoolExecutor

    from consistent_catalog import _pyiceberg
    from consistent_catalog.loading import REST_CONNECTIONS

    _pyiceberg.widen_rest_connections(catalog, REST_CONNECTIONS)
    with ThreadPoolExecutor(REST_CONNECTIONS) as pool:
        def fetch() -> object:
            return list(pool.map(lambda name: _pyiceberg.rest_load_table(catalog, name, None), tables))

        fetch()  # warm-up
        return [timed(fetch, keep_gc) for _ in range(repeat)]


def rest_rows(args: argparse.Namespace) -> list[Row]:
    """The REST rows: the demo's three tables, then ``--tables`` x ``--rest-snapshots`` directly and behind the proxy."""
    import dataclasses

    from pyiceberg.catalog import load_catalog
    from tests.harness.proxy import DelayProxy
    from tests.harness.rest_server import RestCatalogServer

    from consistent_catalog.demo import run_demo
    from consistent_catalog.loading import SHARED_CACHE

    far = f"rest+{args.rest_latency_ms:g}ms"
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-resolve-rest-") as directory:
        fixture = build(directory, args.tables, args.rest_snapshots)
        with RestCatalogServer(f"{directory}/server") as server, \
                DelayProxy(server.port, delay_ms=args.rest_latency_ms) as proxy:  # type: ignore[arg-type]
            register_copies(fixture, server.catalog("bench"))  # the server's own database (no foreign lock)
            started = time.perf_counter()
            demo = server.catalog("bench", warehouse="demo")
            run_demo(cc=ConsistentCatalog(demo), engine="pyiceberg", epochs=6, rows_per_epoch=1000,
                     echo=lambda *a, **k: None)
            flip = ["demo.words", "demo.word_counts", "demo.count_histogram"]
            demo_fixture = Fixture(demo, flip, 0, {}, len(demo.load_table(flip[0]).metadata.snapshots),
                                   time.perf_counter() - started, 0)
            print("rest demo: built; timing...", file=sys.stderr, flush=True)
            SHARED_CACHE.clear()
            rows.append(measure_all(demo_fixture, "rest demo", args.repeat, args.keep_gc, args.readers))
            for setup, catalog in (("rest", server.catalog("bench")),
                                   (far, load_catalog("bench", type="rest", uri=proxy.uri))):
                served = dataclasses.replace(fixture, catalog=catalog)
                check(served)
                answers = answers_alone(catalog, fixture.tables, args.repeat, args.keep_gc)
                print(f"{setup} {args.tables}x{args.rest_snapshots}: built in {fixture.build_seconds:.0f} s, cut "
                      "verified; timing...", file=sys.stderr, flush=True)
                SHARED_CACHE.clear()
                rows.append(dataclasses.replace(measure_all(served, setup, args.repeat, args.keep_gc, args.readers),
                                                answers_alone=answers))
                print(report_all(rows[-1:], {}, args.repeat, "", args.readers, args.latency_ms, False, args.keep_gc)
                      .splitlines()[1], file=sys.stderr, flush=True)
    return rows


def run_suite(args: argparse.Namespace, command: str) -> int:
    from consistent_catalog.loading import SHARED_CACHE

    plan: list[tuple[str, int, int]] = [] if args.only_rest else [("sqlite", args.tables, n) for n in args.counts]
    if args.wide_tables and not args.only_rest:
        if args.wide_snapshots not in args.counts:
            plan.append(("sqlite", args.tables, args.wide_snapshots))
        plan.append(("wide", args.wide_tables, args.wide_snapshots))
    if not args.no_s3 and not args.only_rest:
        plan.append(("pg+s3", args.tables, args.s3_snapshots))
    rows: list[Row] = []
    decoded: dict[str, float] = {}
    pg = s3 = None
    try:
        for setup, n_tables, n in plan:
            with tempfile.TemporaryDirectory(prefix=f"bench-resolve-{setup}-") as directory:
                if setup == "pg+s3":
                    from tests.harness.servers import PostgresServer, free_port

                    from bench.latency_s3 import LatencyS3

                    pg = PostgresServer.start()
                    s3 = LatencyS3.start(free_port())
                    fixture = pg_s3_fixture(pg, s3, directory, n_tables, n)
                    s3.set_latency(args.latency_ms)
                else:
                    fixture = build(directory, n_tables, n)
                check(fixture)
                SHARED_CACHE.clear()
                if args.profile:
                    if setup == "sqlite" and n == max(args.counts):
                        profile_cold(fixture, args.repeat, args.readers)
                    fixture.catalog.engine.dispose()
                    continue
                print(f"{setup} {n_tables}x{n}: built in {fixture.build_seconds:.0f} s, cut verified; timing...",
                      file=sys.stderr, flush=True)
                if setup == "sqlite" and n == max(args.counts) and not decoded:
                    decoded = decoders(fixture, args.repeat)
                rows.append(measure_all(fixture, setup, args.repeat, args.keep_gc, args.readers, s3 if setup == "pg+s3" else None))
                print(report_all(rows[-1:], {}, args.repeat, command, args.readers, args.latency_ms, False, args.keep_gc)
                      .splitlines()[1], file=sys.stderr, flush=True)
                fixture.catalog.engine.dispose()
        if not args.no_rest:
            rows.extend(rest_rows(args))
    finally:
        if s3 is not None:
            s3.stop()
        if pg is not None:
            pg.stop()
    if not args.profile:
        print(report_all(rows, decoded, args.repeat, command, args.readers, args.latency_ms, args.markdown, args.keep_gc))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--snapshots", default=None,
                        help="comma-separated snapshots per table (default 1000; with --legacy 100,250,500,1000)")
    parser.add_argument("--wide-tables", type=int, default=1000, help="the linear-growth row (0: none)")
    parser.add_argument("--wide-snapshots", type=int, default=100)
    parser.add_argument("--s3-snapshots", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=20, help="delay of every S3 request in the pg+s3 row")
    parser.add_argument("--readers", type=int, default=16, help="threads reading metadata files")
    parser.add_argument("--no-s3", action="store_true", help="leave out the PostgreSQL + S3 row")
    parser.add_argument("--rest-snapshots", type=int, default=1000, help="snapshots per table in the REST rows")
    parser.add_argument("--rest-latency-ms", type=float, default=20, help="delay of every request in the far REST row")
    rest = parser.add_mutually_exclusive_group()
    rest.add_argument("--no-rest", action="store_true", help="leave out the REST rows")
    rest.add_argument("--only-rest", action="store_true", help="only the REST rows")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table for BENCHMARKS.md")
    parser.add_argument("--profile", action="store_true",
                        help="instead of timing, cProfile (b) (with --legacy: the pure part (c)) at the largest N")
    parser.add_argument("--keep-gc", action="store_true", help="leave the cyclic GC on while timing (noisier)")
    parser.add_argument("--legacy", action="store_true",
                        help="the first benchmark's table: (a) bare load, (b) cold cc.resolve, (c) the pure part")
    args = parser.parse_args(argv)
    args.counts = [int(x) for x in (args.snapshots or ("100,250,500,1000" if args.legacy else "1000")).split(",") if x.strip()]
    if args.tables <= N_ROOTS or min(args.counts) < 2 or args.repeat < 1:
        parser.error(f"need --tables > {N_ROOTS}, at least 2 snapshots per table and --repeat >= 1")
    command = ".venv/bin/python -m bench.bench_resolve " + shlex.join(sys.argv[1:] if argv is None else argv)
    warnings.simplefilter("ignore")
    if not args.legacy:
        return run_suite(args, command.strip())
    counts = args.counts
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
