"""The independent reader of the crash-injection lake: what the lake must look like, computed without the project.

Catalog rows are read with ``sqlite3``, metadata JSON is parsed with ``json``, barriers are recomputed
here from protocol §3, and rows are scanned with DuckDB's ``iceberg_scan``; the project's resolver is
only consulted to be cross-checked against that computation.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.crash.common import COLUMNS, COPY, COUNTS, CUT_GROUPS, HISTOGRAM, JOBS, SINKS, WORDS, catalog_db

_DATA_COUNTERS = ("added-data-files", "deleted-data-files", "added-delete-files", "removed-delete-files",
                  "added-records", "deleted-records")


def local_path(location: str) -> str:
    """A local file location as a path: ``file:///x`` (pyiceberg) and ``file:/x`` (Hadoop, a REST server)."""
    if location.startswith("file://"):
        return location[len("file://"):]
    return location.removeprefix("file:")


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
        with open(local_path(location), encoding="utf-8") as handle:
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
        """Protocol §3, written again from the text: (snapshot id, effective barrier) oldest first.

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
    # only SELECTs (for a REST lake the file belongs to the server); not mode=ro: that cannot open a WAL database
    # whose -shm file another process must first create
    connection = sqlite3.connect(catalog_db(directory), timeout=60)
    try:
        rows = connection.execute(
            'SELECT "table_namespace", "table_name", "metadata_location" FROM "iceberg_tables"'
            " WHERE \"catalog_name\" = 'lake'"
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
            f"SELECT {columns} FROM iceberg_scan(?, snapshot_from_id => {int(snapshot_id)})", [local_path(location)]
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
    """The three invariants of protocol §7, recomputed from raw rows."""
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


def cut_problems(tables: Mapping[str, TableMeta], ids: Mapping[str, int | None], rows: RowReader,
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
        findings.violations += cut_problems(tables, ids, rows, where)
        findings.cuts_checked += 1
        if cross_check:
            findings.violations += _resolver_disagreements(tables, group, barrier, ids, where)
    return findings


def _resolver_disagreements(tables: Mapping[str, TableMeta], group: Iterable[str], barrier: int,
                            ids: Mapping[str, int | None], where: str) -> list[str]:
    from pyiceberg.table import StaticTable

    from consistent_catalog.loading import table_state
    from consistent_catalog.resolver import resolve

    states = [table_state(n, StaticTable.from_metadata(tables[n].location).metadata) for n in group]
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
    4. protocol §7 at every barrier of count_histogram's main, each table at its own ``snap(X, B)``;
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
                                                      f"protocol §7 at count_histogram barrier {epoch.barrier}")
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

