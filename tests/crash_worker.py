"""Crash injection for SPEC 5: run real epoch jobs as processes, SIGKILL them, resume them, check.

Two halves live in this file.

**The worker** (run as a process; stdlib-only imports at module level so the driver can import it)::

    python tests/crash_worker.py --dir D --job word-count|count-histogram|copy|all [--epochs N]
                                 [--crash-at POINT | --pause-at POINT] [--crash-after-epochs K]
                                 [--crash-at-commit N [--commit-side before|after]]

opens the SQLite catalog at ``D``, registers its job(s) with ``takeover=True`` (a restarted
instance takes over from the killed one) and runs epochs until caught up. ``all`` runs the three
jobs in one process, in DAG order. Crash points are installed by monkeypatching inside this
process only (never in ``src/``):

- ``before-stage``: entry of ``EpochJob.stage``;
- ``during-stage``: inside a catalog commit of ``stage``, after the new metadata file is written
  and before the catalog row is swapped (the commit never happens);
- ``after-stage``: ``stage`` returned, ``publish`` not called yet;
- ``during-publish``: inside the publish commit, metadata file written, catalog row not swapped;
- ``after-publish``: ``publish`` returned, before the next epoch / unregistration.

``--crash-at`` kills the process there with a real ``kill -9`` of itself. ``--crash-at-commit N``
kills it at its N-th catalog commit, after the new metadata file is written (``before`` the swap)
or right after the swap (``after``). ``--pause-at`` stops it at a point with SIGSTOP instead, so
the driver can let a second instance take over and then wake the first one up as a zombie. The
worker prints one marker line per step (``STARTED``, ``PHASE``, ``COMMIT``, ``EPOCH``, ``CRASH``,
``PAUSED``, ``FENCED``, ``DONE``) and exits 0 when caught up, ``EXIT_FENCED`` when the catalog
refused it as a zombie (FencedError).

**The driver** (importable; used by ``tests/test_crash_recovery.py`` and
``bench/bench_reliability.py``): builds the FLIP-276 lake plus an append-mode copy of the root,
ingests root epochs between (and during) worker runs, kills workers at chosen points, after
random delays and at random commits, restarts them until they finish, and checks everything with
an *independent reader*: catalog rows read with ``sqlite3``, metadata JSON parsed here with ``json``, barriers
recomputed here from SPEC 3, rows scanned with DuckDB's ``iceberg_scan`` — the project's resolver
is only consulted to be cross-checked against that computation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORDS, COUNTS, HISTOGRAM, COPY = "demo.words", "demo.word_counts", "demo.count_histogram", "demo.words_copy"
TABLES = (WORDS, COUNTS, HISTOGRAM, COPY)
JOBS: dict[str, tuple[str, str, str]] = {
    # job id: (source, sink, write mode)
    "word-count": (WORDS, COUNTS, "overwrite"),
    "count-histogram": (COUNTS, HISTOGRAM, "overwrite"),
    "copy": (WORDS, COPY, "append"),
}
JOB_CHOICES = (*JOBS, "all")
SINKS = frozenset(sink for _, sink, _ in JOBS.values())
CRASH_POINTS = ("before-stage", "during-stage", "after-stage", "during-publish", "after-publish")
COLUMNS = {WORDS: ("word",), COUNTS: ("word", "cnt"), HISTOGRAM: ("cnt", "words"), COPY: ("word",)}
# Cuts the independent reader computes itself with SPEC 4's T* = min W(X): the FLIP chain, its first
# link, and the append-only copy. Siblings (word_counts next to words_copy) are not mixed in these:
# their jobs choose different epoch boundaries, so T* of a sibling set may be a barrier one of them
# skipped, and the project's resolver then picks an older barrier at which all are complete.
CUT_GROUPS = ((WORDS, COUNTS), (WORDS, COUNTS, HISTOGRAM), (WORDS, COPY))
# The project's resolver is also asked for the cut over all four tables (siblings included), and that
# cut is checked on raw rows too.
READ_GROUPS = (*CUT_GROUPS, TABLES)
BASE_BARRIER = 1_700_000_000_000
BARRIER_STEP = 1_000
ROWS_PER_EPOCH = 12
EXIT_FENCED = 3
WORKER = Path(__file__).resolve()


def _emit(*parts: object) -> None:
    print(" ".join(str(p) for p in parts), flush=True)


def open_catalog(directory: str | Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    root = Path(directory).resolve()
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    return SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")


# ------------------------------------------------------------------------------------------------
# The worker
# ------------------------------------------------------------------------------------------------
def copy_increment(ctx: Any) -> Any:
    """The append-mode job: rows appended to the root since the previous epoch, unchanged."""
    return ctx.read_increment(WORDS)


class _Injector:
    """Kills (or stops) this process at one named point of the epoch, once armed."""

    def __init__(self, point: str | None, *, pause: bool, after_epochs: int, commit: int | None = None,
                 commit_side: str = "before") -> None:
        self.point = point
        self.pause = pause
        self.after_epochs = after_epochs
        self.epochs = 0
        self.fired = False
        self.inside: str | None = None  # "stage" / "publish" while inside those calls
        self.commit_target = commit
        self.commit_side = commit_side
        self.commits = 0  # catalog commits begun by this process

    def hit_commit(self, side: str, detail: object) -> None:
        """Kill at the target commit: after its metadata file is written (before) or once it is swapped in (after)."""
        if self.commit_target == self.commits and side == self.commit_side and not self.fired:
            self.fired = True
            _emit("CRASH", f"commit-{side}", self.commits, detail)
            os.kill(os.getpid(), signal.SIGKILL)

    def hit(self, point: str, job: str, detail: object = "") -> None:
        if point != self.point or self.fired or self.epochs <= self.after_epochs:
            return
        self.fired = True
        if self.pause:
            _emit("PAUSED", point, job, detail)
            os.kill(os.getpid(), signal.SIGSTOP)
            _emit("RESUMED", point, job)
        else:
            _emit("CRASH", point, job, detail)
            os.kill(os.getpid(), signal.SIGKILL)

    def install(self, epoch_job_class: Any, catalog: Any) -> None:
        injector = self
        run_epoch, stage, publish = epoch_job_class.run_epoch, epoch_job_class.stage, epoch_job_class.publish

        def patched_run_epoch(job: Any) -> Any:
            injector.epochs += 1
            _emit("PHASE", "plan", job.job)
            return run_epoch(job)

        def patched_stage(job: Any, sink: str, plan: Any, data: Any) -> Any:
            _emit("PHASE", "stage", job.job, plan.barrier)
            injector.hit("before-stage", job.job)
            injector.inside = "stage"
            try:
                staged = stage(job, sink, plan, data)
            finally:
                injector.inside = None
            _emit("PHASE", "staged", job.job, plan.barrier, staged.head)
            injector.hit("after-stage", job.job, staged.head)
            return staged

        def patched_publish(job: Any, sink: str, plan: Any, main_head: Any, staged_head: Any) -> Any:
            _emit("PHASE", "publish", job.job, plan.barrier)
            injector.inside = "publish"
            try:
                head = publish(job, sink, plan, main_head, staged_head)
            finally:
                injector.inside = None
            _emit("PHASE", "published", job.job, plan.barrier, head)
            injector.hit("after-publish", job.job, head)
            return head

        write_metadata = catalog._write_metadata  # a staticmethod; the instance attribute shadows it

        def patched_write_metadata(metadata: Any, io: Any, metadata_path: str) -> None:
            write_metadata(metadata, io, metadata_path)
            # the new metadata file exists; the catalog row still points at the old one
            injector.hit_commit("before", metadata_path)
            if injector.inside is not None:
                injector.hit(f"during-{injector.inside}", "-", metadata_path)

        commit_table = catalog.commit_table

        def patched_commit_table(table: Any, requirements: Any, updates: Any) -> Any:
            injector.commits += 1
            response = commit_table(table, requirements, updates)
            _emit("COMMIT", injector.commits, ".".join(table.name()))
            injector.hit_commit("after", response.metadata_location)
            return response

        epoch_job_class.run_epoch = patched_run_epoch
        epoch_job_class.stage = patched_stage
        epoch_job_class.publish = patched_publish
        catalog._write_metadata = patched_write_metadata
        catalog.commit_table = patched_commit_table


def worker_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run epoch jobs of the crash-injection lake (see module docstring).")
    parser.add_argument("--dir", required=True, help="lake directory: catalog.db and warehouse/")
    parser.add_argument("--job", required=True, choices=JOB_CHOICES)
    parser.add_argument("--epochs", type=int, default=100, help="at most this many epochs per job")
    point = parser.add_mutually_exclusive_group()
    point.add_argument("--crash-at", choices=CRASH_POINTS, help="SIGKILL this process there")
    point.add_argument("--pause-at", choices=CRASH_POINTS, help="SIGSTOP this process there (zombie tests)")
    parser.add_argument("--crash-after-epochs", type=int, default=0, help="arm the point only after K epochs began")
    parser.add_argument("--crash-at-commit", type=int, metavar="N",
                        help="SIGKILL this process at its N-th catalog commit (see --commit-side)")
    parser.add_argument("--commit-side", choices=("before", "after"), default="before",
                        help="before: metadata file written, catalog row not swapped; after: commit done")
    args = parser.parse_args(argv)

    from consistent_catalog import ConsistentCatalog, FencedError
    from consistent_catalog.demo import count_words, histogram
    from consistent_catalog.epoch import EpochJob

    _emit("STARTED", os.getpid())  # imports done: from here on every instant is worth a kill

    transforms = {"word-count": count_words, "count-histogram": histogram, "copy": copy_increment}
    cc = ConsistentCatalog(open_catalog(args.dir))
    _Injector(args.crash_at or args.pause_at, pause=args.pause_at is not None, after_epochs=args.crash_after_epochs,
              commit=args.crash_at_commit, commit_side=args.commit_side).install(EpochJob, cc.catalog)
    names = list(JOBS) if args.job == "all" else [args.job]
    jobs = []
    for name in names:
        source, sink, mode = JOBS[name]
        jobs.append(cc.job(name, sources=[source], sinks=[sink], transform=transforms[name], mode=mode, takeover=True))
    try:
        for job in jobs:
            _emit("PHASE", "register", job.job)
            job.register()
        for job in jobs:
            for result in job.run_until_caught_up(max_epochs=args.epochs):
                for sink, action in result.actions.items():
                    _emit("EPOCH", job.job, result.barrier, sink, action, result.snapshots.get(sink))
        _emit("PHASE", "unregister", "-")
        for job in jobs:
            job.unregister()
    except FencedError as exc:
        _emit("FENCED", " ".join(str(exc).split()))
        return EXIT_FENCED
    _emit("DONE")
    return 0


# ------------------------------------------------------------------------------------------------
# The independent reader: sqlite3 + metadata JSON + SPEC 3 recomputed here + DuckDB scans
# ------------------------------------------------------------------------------------------------
_DATA_COUNTERS = ("added-data-files", "deleted-data-files", "added-delete-files", "removed-delete-files",
                  "added-records", "deleted-records")


def _local_path(location: str) -> str:
    return location.removeprefix("file://")


@dataclass(frozen=True)
class TableMeta:
    """One table's metadata file, parsed with ``json`` and nothing else."""

    name: str
    location: str
    snapshots: Mapping[int, Mapping[str, Any]]
    refs: Mapping[str, int]
    properties: Mapping[str, str]
    root: bool

    @classmethod
    def load(cls, name: str, location: str) -> TableMeta:
        with open(_local_path(location), encoding="utf-8") as handle:
            meta = json.load(handle)
        snapshots = {s["snapshot-id"]: s for s in meta.get("snapshots", [])}
        refs = {k: v["snapshot-id"] for k, v in meta.get("refs", {}).items()}
        properties = meta.get("properties", {})
        return cls(name, location, snapshots, refs, properties, root=name not in SINKS)

    def chain(self, ref: str = "main") -> list[Mapping[str, Any]]:
        """The ref's ancestry, oldest first."""
        out = []
        current = self.refs.get(ref)
        while current is not None:
            snapshot = self.snapshots[current]
            out.append(snapshot)
            current = snapshot.get("parent-snapshot-id")
        return out[::-1]

    def barriers(self, ref: str = "main") -> list[tuple[int, int | None]]:
        """SPEC 3, written again from the text: (snapshot id, effective barrier) oldest first.

        Untagged snapshots of a derived table (the job's empty genesis) inherit their parent's
        barrier; ``published_epochs`` reports any of them that changed data.
        """
        cache: dict[str, list[tuple[int, int | None]]] = self.__dict__.setdefault("_barrier_cache", {})
        if ref not in cache:
            cache[ref] = self._barriers(ref)
        return cache[ref]

    def _barriers(self, ref: str) -> list[tuple[int, int | None]]:
        out: list[tuple[int, int | None]] = []
        previous: int | None = None
        for snapshot in self.chain(ref):
            summary = snapshot.get("summary", {})
            raw = summary.get("consistent.barrier")
            if summary.get("operation") == "replace" and previous is not None:
                effective: int | None = previous
            elif raw is None and not self.root:
                effective = previous  # genesis; a data-changing one is reported by published_epochs()
            else:
                value = int(raw) if raw is not None else int(snapshot["timestamp-ms"])
                effective = value if previous is None or value >= previous else previous + 1
            out.append((snapshot["snapshot-id"], effective))
            previous = effective
        return out

    def snap(self, barrier: int, ref: str = "main") -> int | None:
        """snap(X, T): the newest snapshot of the ref with effective barrier <= T (None: empty at T)."""
        found = None
        for snapshot_id, effective in self.barriers(ref):
            if effective is not None and effective <= barrier:
                found = snapshot_id
        return found

    def watermark(self) -> int | None:
        chain = self.barriers()
        head = chain[-1][1] if chain else None
        prop = self.properties.get("consistent.watermark")
        values = [v for v in (head, int(prop) if prop is not None else None) if v is not None]
        return max(values) if values else None


def read_lake(directory: str | Path) -> dict[str, TableMeta]:
    """Every table's current metadata, from one read of the catalog's SQLite rows."""
    connection = sqlite3.connect(f"{Path(directory).resolve()}/catalog.db", timeout=60)
    try:
        rows = connection.execute(
            "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables WHERE catalog_name = 'lake'"
        ).fetchall()
    finally:
        connection.close()
    return {f"{ns}.{name}": TableMeta.load(f"{ns}.{name}", location) for ns, name, location in rows}


_EXTENSIONS_LOCK = threading.Lock()
_EXTENSIONS_INSTALLED = False


class RowReader:
    """Rows of a table at a snapshot, scanned by DuckDB (one connection per thread, results cached).

    Snapshots are immutable, so (table, snapshot id) is a sound cache key.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._cache: dict[tuple[str, int], Counter[tuple[Any, ...]]] = {}
        self._lock = threading.Lock()
        self.scans = 0

    def _connection(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            import duckdb
            import duckdb_extensions

            global _EXTENSIONS_INSTALLED
            connection = duckdb.connect()
            with _EXTENSIONS_LOCK:
                if not _EXTENSIONS_INSTALLED:
                    for name in ("avro", "iceberg"):  # offline: the wheels carry the extension files
                        duckdb_extensions.import_extension(name, con=connection)
                    _EXTENSIONS_INSTALLED = True
            connection.execute("LOAD avro")
            connection.execute("LOAD iceberg")
            self._local.connection = connection
        return connection

    def rows(self, table: str, location: str, snapshot_id: int | None) -> Counter[tuple[Any, ...]]:
        if snapshot_id is None:
            return Counter()
        key = (table, snapshot_id)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        columns = ", ".join(COLUMNS[table])
        result = self._connection().execute(
            f"SELECT {columns} FROM iceberg_scan(?, snapshot_from_id => {int(snapshot_id)})", [_local_path(location)]
        ).fetchall()
        rows = Counter(tuple(r) for r in result)
        with self._lock:
            self._cache[key] = rows
            self.scans += 1
        return rows


def word_count_problems(words: Counter, counts: Counter, where: str) -> list[str]:
    """word_counts must be exactly Counter(words): one row per word, nothing lost or doubled."""
    expected = Counter(w for (w,), n in words.items() for _ in range(n))
    per_word: dict[str, int] = {}
    problems = []
    for (word, cnt), n in counts.items():
        if n != 1 or word in per_word:
            problems.append(f"{where}: word_counts holds word {word!r} more than once")
        per_word[word] = cnt
    if per_word != dict(expected) and not problems:
        diff = {w: (per_word.get(w), expected.get(w)) for w in set(per_word) | set(expected)
                if per_word.get(w) != expected.get(w)}
        problems.append(f"{where}: word_counts != Counter(words) for {len(diff)} words, e.g. "
                        f"{dict(list(diff.items())[:3])} (found, expected)")
    return problems


def spec7_problems(words: Counter, counts: Counter, hist: Counter, where: str) -> list[str]:
    """The three invariants of SPEC 7, recomputed from raw rows."""
    problems = []
    total_words = sum(words.values())
    sum_cnt = sum(cnt * n for (_, cnt), n in counts.items())
    if sum_cnt != total_words:
        problems.append(f"{where}: sum(word_counts.cnt)={sum_cnt} != count(words)={total_words}")
    count_rows = sum(counts.values())
    sum_hist = sum(w * n for (_, w), n in hist.items())
    if sum_hist != count_rows:
        problems.append(f"{where}: sum(count_histogram.words)={sum_hist} != count(word_counts)={count_rows}")
    expected = Counter(cnt for (_, cnt), n in counts.items() for _ in range(n))
    if Counter({(c, w): 1 for c, w in expected.items()}) != hist:
        problems.append(f"{where}: count_histogram {sorted(hist.elements())} is not the histogram of word_counts "
                        f"{sorted(expected.items())}")
    return problems


@dataclass
class Findings:
    """What one check found; counters add up across checks."""

    violations: list[str] = field(default_factory=list)
    duplicated: int = 0
    lost: int = 0
    epochs_checked: int = 0
    cuts_checked: int = 0

    def add(self, other: Findings) -> None:
        self.violations += other.violations
        self.duplicated += other.duplicated
        self.lost += other.lost
        self.epochs_checked += other.epochs_checked
        self.cuts_checked += other.cuts_checked


def _cut_problems(tables: Mapping[str, TableMeta], ids: Mapping[str, int | None], rows: RowReader,
                  where: str) -> list[str]:
    data = {name: rows.rows(name, tables[name].location, ids[name]) for name in ids}
    problems = []
    if COUNTS in data:
        problems += word_count_problems(data[WORDS], data[COUNTS], where)
    if HISTOGRAM in data:
        problems += spec7_problems(data[WORDS], data[COUNTS], data[HISTOGRAM], where)
    if COPY in data and WORDS in data and data[COPY] != data[WORDS]:
        problems.append(f"{where}: words_copy ({sum(data[COPY].values())} rows) != words "
                        f"({sum(data[WORDS].values())} rows) as multisets")
    return problems


def check_latest_cuts(tables: Mapping[str, TableMeta], rows: RowReader, *, cross_check: bool = True) -> Findings:
    """The latest repeatable-read cut of each cut group, computed here, checked on raw rows.

    With ``cross_check`` the project's resolver is run on the very same metadata files and must
    agree with this computation (barrier and every snapshot id).
    """
    findings = Findings()
    for group in CUT_GROUPS:
        marks = {name: tables[name].watermark() for name in group if name in tables}
        if len(marks) < len(group) or any(m is None for m in marks.values()):
            continue  # a table without watermark blocks the cut (nothing to read yet)
        barrier = min(m for m in marks.values() if m is not None)
        ids = {name: tables[name].snap(barrier) for name in group}
        where = f"latest repeatable-read cut {'+'.join(n.split('.')[1] for n in group)} at {barrier}"
        findings.violations += _cut_problems(tables, ids, rows, where)
        findings.cuts_checked += 1
        if cross_check:
            findings.violations += _resolver_disagreements(tables, group, barrier, ids, where)
    return findings


def _resolver_disagreements(tables: Mapping[str, TableMeta], group: Iterable[str], barrier: int,
                            ids: Mapping[str, int | None], where: str) -> list[str]:
    from pyiceberg.table import StaticTable

    from consistent_catalog.resolver import resolve
    from consistent_catalog.state import TableState

    states = [TableState.from_metadata(n, StaticTable.from_metadata(tables[n].location).metadata) for n in group]
    cut = resolve(states)
    theirs = {n: cut[n].snapshot_id for n in group}
    if cut.barrier != barrier or theirs != dict(ids):
        return [f"{where}: the project's resolver says barrier {cut.barrier} {theirs}, "
                f"the independent reader {barrier} {dict(ids)}"]
    return []


@dataclass(frozen=True)
class Epoch:
    """Consecutive snapshots of a derived table's main carrying the same ``consistent.barrier``."""

    barrier: int
    snapshot_ids: tuple[int, ...]
    attempts: frozenset[str | None]
    jobs: frozenset[str | None]
    sources: tuple[str | None, ...]


def published_epochs(table: TableMeta) -> tuple[list[Epoch], list[str]]:
    """Group main's ancestry into epochs by raw barrier; untagged snapshots must change no data."""
    epochs: list[Epoch] = []
    problems: list[str] = []
    group: list[Mapping[str, Any]] = []

    def close() -> None:
        if group:
            summaries = [s.get("summary", {}) for s in group]
            epochs.append(Epoch(int(summaries[0]["consistent.barrier"]), tuple(s["snapshot-id"] for s in group),
                                frozenset(x.get("consistent.attempt") for x in summaries),
                                frozenset(x.get("consistent.job") for x in summaries),
                                tuple(x.get("consistent.sources") for x in summaries)))
            group.clear()

    for snapshot in table.chain():
        summary = snapshot.get("summary", {})
        raw = summary.get("consistent.barrier")
        if raw is None:
            close()
            if any(summary.get(k, "0") != "0" for k in _DATA_COUNTERS):
                problems.append(f"{table.name}: snapshot {snapshot['snapshot-id']} on main changed data "
                                "without a barrier")
            continue
        if group and group[0]["summary"]["consistent.barrier"] != raw:
            close()
        group.append(snapshot)
    close()
    return epochs, problems


def _classify_delta(found: Counter, expected: Counter) -> str:
    """How the rows an append epoch added compare with the rows it should have added."""
    if found == expected:
        return "ok"
    if all(found[k] >= n for k, n in expected.items()):
        return "duplicated"  # everything is there, some rows more than once
    if all(expected[k] >= n for k, n in found.items()):
        return "lost"
    return "different"


def check_lake(directory: str | Path, rows: RowReader, *, caught_up: Iterable[str] = ()) -> Findings:
    """Every published epoch of every derived table, every barrier's cut, and the latest cuts.

    1. each barrier once: on main, the snapshots carrying a barrier are contiguous, come from one
       staging attempt of the table's job, and barriers strictly increase from epoch to epoch;
    2. same inputs: an epoch's ``consistent.sources`` is ``snap(source, B)`` computed here;
    3. nothing lost or doubled: at each epoch's barrier the sink's rows are exactly what its
       source's rows at ``snap(source, B)`` imply (Counter(words), the histogram, the same multiset);
       for the append-mode copy each epoch's delta equals the root's delta over the same range;
    4. SPEC 7 at every barrier of count_histogram's main, each table at its own ``snap(X, B)``;
    5. the latest repeatable-read cuts (and the project's resolver agrees on them);
    6. for the jobs in ``caught_up`` (they just finished): W(sink) == W(source).
    """
    tables = read_lake(directory)
    findings = Findings()
    for job, (source_name, sink_name, _) in JOBS.items():
        sink, source = tables.get(sink_name), tables.get(source_name)
        if sink is None or source is None:
            continue
        epochs, problems = published_epochs(sink)
        findings.violations += problems
        seen: set[int] = set()
        previous_barrier: int | None = None
        previous_rows: tuple[Counter, Counter] = (Counter(), Counter())
        for epoch in epochs:
            where = f"{sink_name} epoch at barrier {epoch.barrier}"
            findings.epochs_checked += 1
            if epoch.barrier in seen:
                findings.duplicated += 1
                findings.violations.append(f"{where}: barrier published twice on main (not contiguous)")
            elif previous_barrier is not None and epoch.barrier < previous_barrier:
                findings.violations.append(f"{where}: barrier went back from {previous_barrier}")
            seen.add(epoch.barrier)
            previous_barrier = epoch.barrier
            if len(epoch.attempts) != 1 or None in epoch.attempts:
                findings.duplicated += 1
                findings.violations.append(f"{where}: {len(epoch.snapshot_ids)} snapshots from staging attempts "
                                           f"{sorted(map(str, epoch.attempts))}: one epoch published as several")
            if epoch.jobs != {job}:
                findings.violations.append(f"{where}: written by {sorted(map(str, epoch.jobs))}, not {job!r}")
            expected_inputs = {source_name: source.snap(epoch.barrier)}
            recorded = {json.dumps(json.loads(s), sort_keys=True) if s else None for s in epoch.sources}
            if recorded != {json.dumps(expected_inputs, sort_keys=True)}:
                findings.violations.append(f"{where}: consistent.sources {sorted(map(str, recorded))} != "
                                           f"snap(source, B) {expected_inputs}")
            source_rows = rows.rows(source_name, source.location, expected_inputs[source_name])
            sink_rows = rows.rows(sink_name, sink.location, epoch.snapshot_ids[-1])
            if sink_name == COUNTS:
                findings.violations += word_count_problems(source_rows, sink_rows, where)
            elif sink_name == HISTOGRAM:
                words_at = rows.rows(WORDS, tables[WORDS].location, tables[WORDS].snap(epoch.barrier))
                findings.violations += spec7_problems(words_at, source_rows, sink_rows,
                                                      f"SPEC 7 at count_histogram barrier {epoch.barrier}")
            else:
                verdict = _classify_delta(sink_rows - previous_rows[1], source_rows - previous_rows[0])
                if verdict == "duplicated":
                    findings.duplicated += 1
                elif verdict == "lost":
                    findings.lost += 1
                if verdict != "ok":
                    findings.violations.append(f"{where}: rows appended in this epoch are {verdict} compared "
                                               f"with the words ingested over the same barrier range")
                previous_rows = (source_rows, sink_rows)
        if sink_name == COPY and sink.watermark() is not None:
            # a watermark-only epoch after the last data epoch must not have skipped rows
            mark = sink.watermark()
            assert mark is not None
            source_rows = rows.rows(WORDS, source.location, source.snap(mark))
            sink_rows = rows.rows(COPY, sink.location, sink.snap(mark))
            if sink_rows != source_rows:
                verdict = _classify_delta(sink_rows - previous_rows[1], source_rows - previous_rows[0])
                findings.lost += verdict == "lost"
                findings.duplicated += verdict == "duplicated"
                findings.violations.append(f"{sink_name} at its watermark {mark}: rows {verdict} "
                                           f"({sum(sink_rows.values())} rows, words has {sum(source_rows.values())})")
        if job in caught_up and sink.watermark() != source.watermark():
            findings.violations.append(f"{job} finished but W({sink_name})={sink.watermark()} != "
                                       f"W({source_name})={source.watermark()}")
    findings.add(check_latest_cuts(tables, rows))
    return findings


# ------------------------------------------------------------------------------------------------
# The driver
# ------------------------------------------------------------------------------------------------
class HarnessError(AssertionError):
    """A worker failed in a way no crash explains (a traceback, a timeout)."""


@dataclass
class WorkerRun:
    job: str
    returncode: int
    lines: list[str]
    seconds: float
    """From the worker's first step (imports and catalog open done) to its DONE line (or its exit)."""

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def fenced(self) -> bool:
        return self.returncode == EXIT_FENCED

    @property
    def done(self) -> bool:
        return self.returncode == 0

    def marker(self, kind: str) -> list[str] | None:
        for line in self.lines:
            if line.split(" ", 1)[0] == kind:
                return line.split()
        return None

    @property
    def phase(self) -> str:
        """The last step the worker began (where a random kill landed)."""
        phases = [line.split()[1] for line in self.lines if line.startswith("PHASE ")]
        return phases[-1] if phases else "startup"

    @property
    def commits(self) -> int:
        return sum(1 for line in self.lines if line.startswith("COMMIT "))

    def epochs(self) -> list[tuple[str, int, str]]:
        """(job, barrier, action) of every epoch that did work."""
        out = []
        for line in self.lines:
            parts = line.split()
            if parts and parts[0] == "EPOCH" and parts[4] != "done":
                out.append((parts[1], int(parts[2]), parts[4]))
        return out

    def describe(self) -> str:
        tail = "\n    ".join(self.lines[-25:])
        return f"worker {self.job} exited {self.returncode} after {self.seconds:.1f}s:\n    {tail}"


def run_worker(
    directory: str | Path,
    job: str,
    *,
    crash_at: str | None = None,
    pause_at: str | None = None,
    crash_after_epochs: int = 0,
    crash_at_commit: tuple[int, str] | None = None,
    kill_after: float | None = None,
    during: tuple[float, Callable[[], Any]] | None = None,
    on_paused: Callable[[], Any] | None = None,
    timeout: float = 180.0,
) -> WorkerRun:
    """Run one worker process. ``kill_after``: SIGKILL it that many seconds after its first step began.

    ``during=(t, fn)`` calls ``fn`` in this process ``t`` seconds after that
    (e.g. ingest while the job runs). ``on_paused`` runs when a ``pause_at`` worker stopped itself;
    the worker is woken up (SIGCONT) afterwards.
    """
    argv = [sys.executable, str(WORKER), "--dir", str(directory), "--job", job]
    if crash_at:
        argv += ["--crash-at", crash_at]
    if pause_at:
        argv += ["--pause-at", pause_at]
    if crash_after_epochs:
        argv += ["--crash-after-epochs", str(crash_after_epochs)]
    if crash_at_commit:
        argv += ["--crash-at-commit", str(crash_at_commit[0]), "--commit-side", crash_at_commit[1]]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    output = _LinePump(proc)
    started = time.monotonic()
    try:
        while (first := output.next_line(timeout)) is not None and not first.startswith("PHASE"):
            pass  # the clock starts when the worker begins its first step (imports and catalog open done)
        started = time.monotonic()
        if first is not None:
            if during is not None and (kill_after is None or during[0] < kill_after):
                _wait(proc, during[0])
                during[1]()
            if kill_after is not None:
                _wait(proc, max(0.0, kill_after - (time.monotonic() - started)))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
            if pause_at is not None:
                while (line := output.next_line(timeout)) is not None:
                    if line.startswith("PAUSED"):
                        _wait_stopped(proc.pid)
                        try:
                            if on_paused is not None:
                                on_paused()
                        finally:
                            proc.send_signal(signal.SIGCONT)
                        break
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise HarnessError(f"worker {job} timed out after {timeout}s:\n" + "\n".join(output.all()[-30:])) from None
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    lines = output.all()
    seconds = (output.done_at or time.monotonic()) - started
    return WorkerRun(job, proc.returncode, lines, seconds)


class _LinePump:
    """Reads a process's output lines on a thread, so waiting for a marker never blocks a kill."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._lines: list[str] = []
        self._condition = threading.Condition()
        self._eof = False
        self._consumed = 0
        self.done_at: float | None = None
        self._thread = threading.Thread(target=self._pump, args=(proc,), name="worker-output", daemon=True)
        self._thread.start()

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._condition:
                self._lines.append(line.rstrip("\n"))
                if line.startswith("DONE"):
                    self.done_at = time.monotonic()
                self._condition.notify_all()
        proc.stdout.close()
        with self._condition:
            self._eof = True
            self._condition.notify_all()

    def next_line(self, timeout: float) -> str | None:
        """The next line not returned yet; None at end of output."""
        with self._condition:
            if not self._condition.wait_for(lambda: self._consumed < len(self._lines) or self._eof, timeout):
                raise subprocess.TimeoutExpired("worker", timeout)
            if self._consumed < len(self._lines):
                self._consumed += 1
                return self._lines[self._consumed - 1]
            return None

    def all(self) -> list[str]:
        self._thread.join(timeout=30)
        with self._condition:
            return list(self._lines)


def _wait(proc: subprocess.Popen[str], seconds: float) -> None:
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass


def _wait_stopped(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
        if state in ("T", "t"):
            return
        time.sleep(0.005)
    raise HarnessError(f"worker {pid} announced a pause but did not stop")


@dataclass
class Report:
    """What a scenario did and found (adds up across scenarios)."""

    kills: Counter[str] = field(default_factory=Counter)
    """Kills that landed, by chosen point or ``random@<phase the worker was in>``."""
    kills_missed: int = 0
    """Random kills whose timer fired after the worker had already finished (not counted as kills)."""
    pauses: int = 0
    fenced: int = 0
    """Zombie instances whose writes the catalog refused (FencedError, exit EXIT_FENCED)."""
    runs: int = 0
    resumes: int = 0
    """Clean runs of a job that had been killed (or paused and taken over) before."""
    republished: int = 0
    """Staged epochs found after a crash and published as they were (SPEC 5.4)."""
    republish_expected: int = 0
    """Resumes that re-planned the barrier of a staged epoch a killed run left (so had to republish it)."""
    conflicts: int = 0
    """Epochs a worker abandoned and re-planned because main moved under them (none expected here)."""
    ingests: int = 0
    idle_advances: int = 0
    """Root watermarks advanced with no new rows (jobs then publish watermark-only epochs)."""
    checks: int = 0
    findings: Findings = field(default_factory=Findings)
    reader_cuts: int = 0
    reader_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total_kills(self) -> int:
        return sum(self.kills.values())

    @property
    def violations(self) -> list[str]:
        return self.findings.violations

    def add(self, other: Report) -> None:
        self.kills.update(other.kills)
        for name in ("kills_missed", "pauses", "fenced", "runs", "resumes", "republished", "republish_expected",
                     "conflicts", "ingests",
                     "idle_advances", "checks", "reader_cuts", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.findings.add(other.findings)
        self.reader_errors += other.reader_errors

    def summary(self) -> str:
        return (f"{self.total_kills} kills {dict(self.kills)}, {self.kills_missed} missed, {self.pauses} pauses, "
                f"{self.fenced} fenced, {self.runs} runs, {self.resumes} resumes, {self.republished} republished "
                f"({self.republish_expected} expected), {self.conflicts} conflicts, {self.ingests} ingests, "
                f"{self.idle_advances} idle advances, "
                f"{self.checks} full checks, {self.findings.epochs_checked} epoch and "
                f"{self.findings.cuts_checked + self.reader_cuts} cut checks, {len(self.violations)} violations, "
                f"{self.findings.duplicated} duplicated, {self.findings.lost} lost, "
                f"{len(self.reader_errors)} reader errors, {self.seconds:.1f}s")


class CutReader(threading.Thread):
    """Reads repeatable-read cuts in a loop while workers are being killed, and checks them.

    Each round checks (a) the latest cuts computed by the independent reader and (b) the cuts the
    project's own API hands a live reader (``cc.read``, at repeatable-read and, over the chain and
    the copy, at read-committed, where staged epochs left behind by killed workers are read), all on
    raw rows scanned by DuckDB.
    """

    def __init__(self, directory: Path, rows: RowReader, interval: float = 0.25) -> None:
        super().__init__(name="cut-reader", daemon=True)
        self.directory = directory
        self.rows = rows
        self.interval = interval
        self.stop_event = threading.Event()
        self.findings = Findings()
        self.errors: list[str] = []

    def run(self) -> None:
        from consistent_catalog import ConsistentCatalog, exceptions

        # no cut exists yet (a table without watermark; no barrier at which all tables are complete)
        no_cut = tuple(getattr(exceptions, name) for name in ("NoWatermarkError", "ResolutionError")
                       if hasattr(exceptions, name))

        try:
            cc = ConsistentCatalog(open_catalog(self.directory))
        except Exception as exc:  # noqa: BLE001 - reported, never raised in a thread
            self.errors.append(f"opening the catalog: {exc!r}")
            return
        pause = self.interval
        while not self.stop_event.wait(pause):
            started = time.monotonic()
            try:
                self.findings.add(check_latest_cuts(read_lake(self.directory), self.rows, cross_check=False))
                for level, groups in (("repeatable-read", READ_GROUPS), ("read-committed", CUT_GROUPS)):
                    for group in groups:
                        try:
                            read = cc.read(group, level=level)
                        except no_cut:
                            continue
                        tables = {n: TableMeta.load(n, read.table(n).metadata_location) for n in group}
                        ids = {n: read.cut[n].snapshot_id for n in group}
                        self.findings.violations += _cut_problems(
                            tables, ids, self.rows, f"cc.read({'+'.join(n.split('.')[1] for n in group)}, {level}) "
                                                    f"at {read.cut.barrier}")
                        self.findings.cuts_checked += 1
            except Exception as exc:  # noqa: BLE001 - reported, never raised in a thread
                self.errors.append(repr(exc))
                if len(self.errors) > 20:
                    return
            # at most about half of one core: the workers being killed need the CPU more
            pause = max(self.interval, time.monotonic() - started)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=60)


class Harness:
    """One lake, its workers, its reader thread and the running report.

    >>> with Harness(tmp_path) as h:          # doctest: +SKIP
    ...     h.ingest(); h.run("word-count", crash_at="after-stage"); h.run_clean("word-count"); h.check()
    """

    def __init__(self, directory: str | Path, *, reader: bool = True, reader_interval: float = 0.25,
                 rows_per_epoch: int = ROWS_PER_EPOCH) -> None:
        from consistent_catalog import ConsistentCatalog

        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cc = ConsistentCatalog(open_catalog(self.directory))
        self.rows_per_epoch = rows_per_epoch
        self.rows = RowReader()
        self.report = Report()
        self.pending: set[str] = set()  # jobs killed and not yet resumed
        self.staged_left: dict[str, int] = {}  # sink -> barrier of the staged epoch a killed run left
        self.durations: dict[str, float] = {}
        self.commits: dict[str, int] = {}  # catalog commits of a recent clean run, per job
        self.clock = BASE_BARRIER  # the barrier of the latest root epoch (ingest or idle watermark)
        self._started = time.monotonic()
        self._create_tables()
        self.reader = CutReader(self.directory, self.rows, reader_interval) if reader else None

    def _create_tables(self) -> None:
        import pyarrow as pa

        from consistent_catalog.demo import SCHEMAS

        catalog = self.cc.catalog
        if ("demo",) not in catalog.list_namespaces():
            catalog.create_namespace("demo")
        schemas = {**SCHEMAS, COPY: pa.schema([pa.field("word", pa.string())])}
        existing = {".".join(t) for t in catalog.list_tables("demo")}
        for name in TABLES:
            if name not in existing:
                catalog.create_table(name, schema=schemas[name])

    def __enter__(self) -> Harness:
        if self.reader is not None:
            self.reader.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> Report:
        if self.reader is not None and self.reader.is_alive():
            self.reader.stop()
        if self.reader is not None:
            self.report.findings.add(Findings(violations=self.reader.findings.violations))
            self.report.reader_cuts = self.reader.findings.cuts_checked
            self.report.reader_errors = list(self.reader.errors)
            self.reader = None
        self.report.seconds = time.monotonic() - self._started
        return self.report

    # --- actions ------------------------------------------------------------------------------
    def ingest(self) -> int:
        """Append one deterministic epoch of words to the root at the next barrier."""
        from consistent_catalog.demo import epoch_words

        index = self.report.ingests
        self.clock += BARRIER_STEP
        result = self.cc.ingest(WORDS, epoch_words(index, self.rows_per_epoch), barrier=self.clock)
        self.report.ingests += 1
        return result.barrier

    def advance_root_watermark(self) -> int:
        """The root stays idle for a while: declare it complete up to the next barrier (no new rows)."""
        self.clock += BARRIER_STEP
        self.report.idle_advances += 1
        return self.cc.advance_watermark(WORDS, self.clock)

    def run(self, job: str, **options: Any) -> WorkerRun:
        """Run a worker; raise HarnessError unless it finished, was killed, or was fenced."""
        run = run_worker(self.directory, job, **options)
        self.report.runs += 1
        jobs = set(JOBS) if job == "all" else {job}
        if run.killed and run.marker("DONE") is not None:
            run.returncode = 0  # the kill hit the interpreter's shutdown after the work was done: a miss
        if run.killed:
            point = options.get("crash_at")
            if point is not None:
                crash = run.marker("CRASH")
                if crash is None or crash[1] != point:
                    raise HarnessError(f"expected a crash at {point}; {run.describe()}")
                self.report.kills[point] += 1
            elif options.get("crash_at_commit") is not None:
                crash = run.marker("CRASH")
                if crash is None:
                    raise HarnessError(f"expected a crash at a commit; {run.describe()}")
                self.report.kills[f"{crash[1]}@{run.phase}"] += 1
            else:
                self.report.kills[f"timer@{run.phase}"] += 1
            self.pending |= jobs
            self.staged_left = self._staged_ahead()
        elif run.fenced:
            self.report.fenced += 1
        elif run.done:
            if options.get("kill_after") is not None or options.get("crash_at_commit") is not None:
                self.report.kills_missed += 1
            if options.get("crash_at") is not None:
                raise HarnessError(f"the crash point {options['crash_at']} was never reached; {run.describe()}")
            self.report.resumes += len(self.pending & jobs)
            self.pending -= jobs
            self.report.republished += sum(1 for _, _, action in run.epochs() if action == "republished")
            self.report.conflicts += sum(1 for _, _, action in run.epochs() if action == "conflict")
            self._check_republished(run, jobs)
            previous = self.durations.get(job)
            self.durations[job] = run.seconds if previous is None else 0.7 * previous + 0.3 * run.seconds
            self.commits[job] = max(run.commits, self.commits.get(job, 0) // 2)
        else:
            raise HarnessError(run.describe())
        return run

    def _staged_ahead(self) -> dict[str, int]:
        """Sinks whose ``consistent-staged`` holds an unpublished epoch, with that epoch's barrier."""
        found = {}
        for name, table in read_lake(self.directory).items():
            staged, main = table.refs.get("consistent-staged"), table.refs.get("main")
            if staged is None or staged == main:
                continue
            if main is not None and main not in {s["snapshot-id"] for s in table.chain("consistent-staged")}:
                continue
            barrier = table.snapshots[staged].get("summary", {}).get("consistent.barrier")
            if barrier is not None:
                found[name] = int(barrier)
        return found

    def _check_republished(self, run: WorkerRun, jobs: set[str]) -> None:
        """SPEC 5.4: a staged epoch left by a killed instance, re-planned at the same barrier (hence the
        same inputs), must be published as it is, not recomputed."""
        for job, barrier, action in run.epochs():
            sink = JOBS[job][1]
            if action == "conflict":  # main moved under the epoch: it re-plans, nothing was decided
                continue
            if self.staged_left.get(sink) == barrier:
                self.report.republish_expected += 1
                if action != "republished":
                    self.violation(f"{sink}: the epoch staged at barrier {barrier} by a killed instance was "
                                   f"re-planned at the same barrier but {action}, not published as it was (SPEC 5.4)")
        for job in jobs:
            self.staged_left.pop(JOBS[job][1], None)

    def run_clean(self, job: str, **options: Any) -> WorkerRun:
        run = self.run(job, **options)
        if not run.done:
            raise HarnessError(f"expected a clean run; {run.describe()}")
        return run

    def check(self, *, caught_up: Iterable[str] = ()) -> Findings:
        found = check_lake(self.directory, self.rows, caught_up=caught_up)
        self.report.findings.add(found)
        self.report.checks += 1
        return found

    def violation(self, message: str) -> None:
        self.report.findings.violations.append(message)


def upstream_of(job: str) -> list[str]:
    return ["word-count"] if job == "count-histogram" else []


# What the resumed instance must do after a crash at each point, with no new input (SPEC 5.4).
RESUME_ACTION = {
    "before-stage": "published",
    "during-stage": "published",
    "after-stage": "republished",
    "during-publish": "republished",
    "after-publish": None,  # the epoch was published: nothing left to do
}


def chosen_point_scenario(directory: str | Path, job: str, point: str, *, reader: bool = True) -> Report:
    """Kill ``job`` at ``point``, resume it (same inputs: the staged epoch must be published as it is).

    Where the crash leaves a staged epoch behind (after-stage, during-publish) a second round kills
    it there again, ingests new root data and resumes: the stale staged epoch must be discarded and
    the epoch recomputed at the new barrier, with nothing lost and nothing doubled.
    """
    with Harness(directory, reader=reader) as h:
        h.ingest()
        for upstream in upstream_of(job):
            h.run_clean(upstream)
        crashed = h.run(job, crash_at=point)
        h.check()
        if point in ("during-stage", "during-publish"):
            _check_orphaned_metadata(h, crashed, point)
        resumed = h.run_clean(job)
        actions = [action for name, _, action in resumed.epochs() if name == job]
        expected = RESUME_ACTION[point]
        if (actions[:1] or [None])[0] != expected:
            h.violation(f"{job} killed {point}: the resumed instance did {actions or 'nothing'}, expected "
                        f"{expected or 'nothing'} (SPEC 5.4)")
        h.check(caught_up=[job, *upstream_of(job)])
        if point in ("after-stage", "during-publish"):
            h.ingest()
            for upstream in upstream_of(job):
                h.run_clean(upstream)
            h.run(job, crash_at=point)
            barrier = h.ingest()
            for upstream in upstream_of(job):
                h.run_clean(upstream)
            resumed = h.run_clean(job)
            actions = [(b, action) for name, b, action in resumed.epochs() if name == job]
            if actions != [(barrier, "published")]:
                h.violation(f"{job} killed {point}, then new input: the resumed instance did {actions}, expected "
                            f"one epoch published at {barrier} (the stale staged epoch discarded)")
            h.check(caught_up=[job, *upstream_of(job)])
    return h.report


def idle_root_scenario(directory: str | Path, job: str, point: str = "during-publish", *,
                       reader: bool = True) -> Report:
    """The root stays idle (its watermark advances, no rows): ``job`` publishes a watermark-only epoch.

    Killed at ``point`` of that publish, the resumed instance must publish the watermark (once),
    and the table must be complete at the new barrier without a new snapshot.
    """
    with Harness(directory, reader=reader) as h:
        h.ingest()
        for upstream in upstream_of(job):
            h.run_clean(upstream)
        h.run_clean(job)
        barrier = h.advance_root_watermark()
        for upstream in upstream_of(job):
            h.run_clean(upstream)
        crashed = h.run(job, crash_at=point)
        h.check()
        if point == "during-publish":
            _check_orphaned_metadata(h, crashed, point)
        resumed = h.run_clean(job)
        actions = [(b, action) for name, b, action in resumed.epochs() if name == job]
        expected = [(barrier, "watermark")] if point == "during-publish" else []
        if actions != expected:
            h.violation(f"{job} killed {point} of a watermark-only epoch: the resumed instance did {actions}, "
                        f"expected {expected}")
        source, sink, _ = JOBS[job]
        tables = read_lake(h.directory)
        if tables[sink].watermark() != barrier:
            h.violation(f"{sink}: W={tables[sink].watermark()} after the idle epoch, expected {barrier}")
        h.check(caught_up=[job, *upstream_of(job)])
    return h.report


def _check_orphaned_metadata(h: Harness, run: WorkerRun, point: str) -> None:
    """A crash inside a commit: the new metadata file exists, the catalog never pointed at it."""
    crash = run.marker("CRASH")
    assert crash is not None
    written = _local_path(crash[3])
    current = {_local_path(t.location) for t in read_lake(h.directory).values()}
    if not Path(written).exists():
        h.violation(f"{point}: the crash was meant to follow the metadata write, but {written} does not exist")
    if written in current:
        h.violation(f"{point}: the catalog points at {written}, written by an instance killed before its commit")


def zombie_scenario(directory: str | Path, job: str, point: str, *, reader: bool = True) -> Report:
    """Stop ``job`` at ``point``; a second instance takes over and finishes; the first one wakes up.

    The woken instance (a zombie) must be refused by the catalog (FencedError) and change nothing.
    """
    with Harness(directory, reader=reader) as h:
        h.ingest()
        for upstream in upstream_of(job):
            h.run_clean(upstream)

        def take_over() -> None:
            h.report.pauses += 1
            h.ingest()  # the successor sees new input, so it must not publish the zombie's staged epoch blindly
            for upstream in upstream_of(job):
                h.run_clean(upstream)
            h.pending.add(job)
            h.run_clean(job)

        zombie = h.run(job, pause_at=point, on_paused=take_over)
        if not zombie.fenced:
            h.violation(f"{job} paused {point} and woken after a takeover was not fenced: {zombie.describe()}")
        h.check(caught_up=[job, *upstream_of(job)])
    return h.report


def commit_sweep_scenario(directory: str | Path, *, job: str = "all", sides: Iterable[str] = ("before", "after"),
                          reader: bool = True) -> Report:
    """Kill ``job`` at every catalog commit of a run in turn, inside it and right after it.

    Each round ingests one root epoch, kills the worker at its k-th commit (registration, staging,
    publishing, unregistration of each job), checks, resumes it with the same input and checks
    again; a staged epoch left behind must be published as it is. The sweep of a side ends when
    the worker makes fewer than k commits (that run counts as a missed kill).
    """
    with Harness(directory, reader=reader) as h:
        h.ingest()
        h.run_clean(job)  # genesis snapshots and staged branches exist: sweep the steady state
        for side in sides:
            commit = 1
            while True:
                h.ingest()
                if not h.run(job, crash_at_commit=(commit, side)).killed:
                    break
                h.check()
                h.run_clean(job)
                h.check(caught_up=JOBS if job == "all" else [job])
                commit += 1
    return h.report


def random_kill_scenario(directory: str | Path, kills: int, *, seed: int, reader: bool = True,
                         max_runs: int | None = None) -> Report:
    """SIGKILL workers after random delays until ``kills`` kills landed; ingest between and during runs.

    Jobs are picked at random (often all three in one process), so the tables lag each other by
    different amounts; a killed job is sometimes resumed at once, sometimes only after more input
    arrived. After every resume the whole lake is checked; at the end everything is run to
    completion and checked as caught up.
    """
    rng = random.Random(seed)
    choices = ("all", "all", "word-count", "count-histogram", "copy")
    with Harness(directory, reader=reader) as h:
        h.ingest()
        for job in choices[1:]:  # calibrate: how long a run of each job takes here and now
            h.run_clean(job)
        limit = max_runs if max_runs is not None else 6 * kills + 10
        while h.report.total_kills < kills:
            if h.report.runs >= limit:
                raise HarnessError(f"only {h.report.total_kills} of {kills} kills landed in {limit} runs")
            roll = rng.random()
            if roll < 0.6:
                h.ingest()
            elif roll < 0.7:
                h.advance_root_watermark()
            job = rng.choice(choices)
            pending = set(h.pending)
            if rng.random() < 0.5:
                # a timer: anywhere from registration to unregistration, uniform over a typical run
                delay = rng.uniform(0.0, 1.1 * h.durations.get(job, 1.0))
                during = (rng.uniform(0.0, delay), h.ingest) if rng.random() < 0.25 else None
                run = h.run(job, kill_after=delay, during=during)
            else:
                # a commit boundary: inside a random catalog commit (file written, not swapped) or right after it
                commit = (rng.randint(1, max(1, h.commits.get(job, 1) + 1)), rng.choice(("before", "after")))
                run = h.run(job, crash_at_commit=commit)
            if run.done and pending & (set(JOBS) if job == "all" else {job}):
                h.check()
        h.run_clean("all")
        h.check(caught_up=JOBS)
    return h.report


if __name__ == "__main__":
    sys.exit(worker_main())
