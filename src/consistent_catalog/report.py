"""Status and history reports (freshness, ownership, per-snapshot barriers). Pure over TableStates."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from consistent_catalog import properties as P
from consistent_catalog.barrier import ancestry
from consistent_catalog.exceptions import ConsistentCatalogError
from consistent_catalog.state import TableState, parse_summary_sources


@dataclass(frozen=True)
class TableStatus:
    table: str
    role: str
    """``root`` or ``derived``."""
    job: str | None
    """The job that writes the table: the lease holder's, or (no lease held) the job of its last epoch."""
    lease: str
    """``live``, ``expired`` (zombie suspect), or ``none`` (no instance holds the table)."""
    lease_until: int | None
    watermark: int | None
    staged_barrier: int | None
    delay_ms: int | None
    """End-to-end delay: now - W(X)."""
    own_delay_ms: int | None
    """The job's own delay: W(slowest source) - W(X)."""
    slowest_source: str | None
    bottleneck_job: str | None
    """The job with the largest own delay on this table's slowest path back to a root (None: no lag)."""
    revision: int
    snapshots: int
    error: str | None = None
    untracked_since: int | None = None
    """The snapshot from which the table is untracked (written outside its job), if any."""
    untracked_by: str | None = None
    """Who wrote it, from its summary (engine, app id), when known."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HistoryEntry:
    snapshot_id: int
    branch: str
    barrier: int | None
    raw_barrier: int | None
    job: str | None
    sources: dict[str, int | None]
    committed_at_ms: int
    operation: str
    added_records: int
    deleted_records: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def status(states: Mapping[str, TableState], tables: Iterable[str], *, now: int) -> list[TableStatus]:
    """One row per table in ``tables``; ``states`` also holds their upstream tables (delays, bottleneck).

    End-to-end delay is ``now - W(X)``; a job's own delay is ``W(slowest source) - W(X)``; the
    bottleneck of X is the job with the largest own delay on X's slowest path back to a root.
    """
    marks: dict[str, int | None] = {}
    errors: dict[str, str] = {}
    for name, state in states.items():
        try:
            marks[name] = state.watermark()
        except ConsistentCatalogError as exc:
            marks[name], errors[name] = None, str(exc)

    def slowest_source(state: TableState) -> tuple[str | None, int | None]:
        known = {s: marks[s] for s in state.sources if marks.get(s) is not None}
        if not known:
            return None, None
        slowest = min(known, key=lambda s: known[s])  # type: ignore[arg-type,return-value]
        w = marks.get(state.identifier)
        return slowest, None if w is None else known[slowest] - w  # type: ignore[operator]

    def bottleneck(name: str) -> tuple[str | None, int | None]:
        best: tuple[str | None, int | None] = (None, None)
        seen: set[str] = set()
        current: str | None = name
        while current is not None and current in states and current not in seen:
            seen.add(current)
            state = states[current]
            source, own = slowest_source(state)
            if own is not None and own > 0 and (best[1] is None or own > best[1]):
                best = (state.job or state.last_writer, own)
            current = source
        return best

    rows = []
    for name in tables:
        state = states[name]
        w = marks.get(name)
        staged = None
        if name not in errors and state.staged_ahead:
            try:
                staged = state.branch(P.STAGED_BRANCH).head_barrier
            except ConsistentCatalogError as exc:
                errors[name] = str(exc)
        if state.job is None:
            lease = "none"
        elif state.lease_until is not None and state.lease_until > now:
            lease = "live"
        else:
            lease = "expired"
        slowest, own = slowest_source(state)
        job, _ = bottleneck(name)
        untracked = None
        if name not in errors and state.head() is not None:
            untracked = state.branch().untracked
            if untracked is not None:
                errors[name] = str(state.branch().untracked_error(state.untracked_writer(), state.watermark()))
        rows.append(
            TableStatus(
                table=name,
                role="root" if state.is_root else "derived",
                job=state.job or state.last_writer,
                lease=lease,
                lease_until=state.lease_until,
                watermark=w,
                staged_barrier=staged,
                delay_ms=None if w is None else now - w,
                own_delay_ms=own,
                slowest_source=slowest,
                bottleneck_job=job,
                revision=state.revision,
                snapshots=len(state.snapshots),
                error=errors.get(name),
                untracked_since=untracked,
                untracked_by=state.untracked_writer() if untracked is not None else None,
            )
        )
    return rows


def _count(summary: Mapping[str, str], key: str) -> int:
    value = summary.get(key, "0")
    return int(value) if value.isdigit() else 0


def history(state: TableState) -> list[HistoryEntry]:
    """The newest branch's ancestry, newest first, with each snapshot's effective barrier."""
    branch = state.newest_branch()
    main_ids = {r.snapshot_id for r in ancestry(state.head(), state.snapshots)[0]}
    barriers = state.branch(branch)
    effective = dict(zip(barriers.snapshot_ids, barriers.barriers))
    entries = []
    for record in reversed(ancestry(state.head(branch), state.snapshots)[0]):
        entries.append(
            HistoryEntry(
                snapshot_id=record.snapshot_id,
                branch=P.MAIN_BRANCH if record.snapshot_id in main_ids else branch,
                barrier=effective.get(record.snapshot_id),
                raw_barrier=record.barrier,
                job=record.job,
                sources=parse_summary_sources(record.summary.get(P.SOURCES), where=f"{state.identifier} snapshot {record.snapshot_id}"),
                committed_at_ms=record.timestamp_ms,
                operation=record.operation,
                added_records=_count(record.summary, "added-records"),
                deleted_records=_count(record.summary, "deleted-records"),
            )
        )
    return entries


@dataclass(frozen=True)
class EpochEntry:
    """One epoch of a table: the snapshots one staging attempt committed, and when it was published."""

    barrier: int | None
    job: str | None
    sources: dict[str, int | None]
    snapshot_ids: list[int]
    branch: str
    staged_at_ms: int
    """Commit time of the epoch's first snapshot on the staged branch."""
    published_at_ms: int | None
    """When main moved to the epoch (Iceberg's snapshot log); None while only staged."""
    publish_ms: int | None
    """published_at - staged_at: how long the epoch stayed staged."""
    latency_ms: int | None
    """published_at - barrier: how far behind its data the epoch became visible at repeatable-read."""
    added_records: int
    deleted_records: int
    total_records: int | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def epochs(state: TableState) -> list[EpochEntry]:
    """The newest branch's history grouped into epochs (snapshots of one barrier and attempt), newest first."""
    branch = state.newest_branch()
    chain = ancestry(state.head(branch), state.snapshots)[0]
    main_ids = {r.snapshot_id for r in ancestry(state.head(), state.snapshots)[0]}
    published = {snapshot_id: ts for ts, snapshot_id in state.main_log}
    barriers = state.branch(branch)
    effective = dict(zip(barriers.snapshot_ids, barriers.barriers))
    groups: list[list[Any]] = []
    for record in chain:
        key = (record.barrier, record.summary.get(P.ATTEMPT), record.job)
        if groups and groups[-1][0] == key and record.barrier is not None:
            groups[-1][1].append(record)
        else:
            groups.append([key, [record]])
    entries = []
    for (raw_barrier, _, _), records in groups:
        if raw_barrier is None and not any(r.changes_data for r in records):
            continue  # a genesis snapshot: no epoch
        first, last = records[0], records[-1]
        on_main = last.snapshot_id in main_ids
        published_at = published.get(last.snapshot_id) if on_main else None
        if on_main and published_at is None:  # expired from the snapshot log: the commit time bounds it
            published_at = last.timestamp_ms
        barrier = effective.get(last.snapshot_id)
        total = last.summary.get("total-records", "")
        entries.append(
            EpochEntry(
                barrier=barrier,
                job=last.job,
                sources=state.recorded_inputs(last.snapshot_id),
                snapshot_ids=[r.snapshot_id for r in records],
                branch=P.MAIN_BRANCH if on_main else branch,
                staged_at_ms=first.timestamp_ms,
                published_at_ms=published_at,
                publish_ms=None if published_at is None else published_at - first.timestamp_ms,
                latency_ms=None if published_at is None or barrier is None else published_at - barrier,
                added_records=sum(_count(r.summary, "added-records") for r in records),
                deleted_records=sum(_count(r.summary, "deleted-records") for r in records),
                total_records=int(total) if total.isdigit() else None,
            )
        )
    entries.reverse()
    return entries

