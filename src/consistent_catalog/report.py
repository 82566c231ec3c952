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
    lease: str
    """``live``, ``expired`` (zombie suspect), or ``none``."""
    lease_until: int | None
    watermark: int | None
    staged_barrier: int | None
    delay_ms: int | None
    """End-to-end delay: now - W(X)."""
    own_delay_ms: int | None
    """The job's own delay: W(slowest source) - W(X)."""
    slowest_source: str | None
    revision: int
    snapshots: int
    error: str | None = None

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


def _safe_watermark(state: TableState | None, branch: str = P.MAIN_BRANCH) -> int | None:
    if state is None:
        return None
    try:
        return state.watermark(branch)
    except ConsistentCatalogError:
        return None


def status(states: Mapping[str, TableState], tables: Iterable[str], *, now: int) -> list[TableStatus]:
    """One row per table in ``tables``; ``states`` also holds their sources (for the own delay)."""
    rows = []
    for name in tables:
        state = states[name]
        error = None
        try:
            w = state.watermark()
            staged = state.branch(P.STAGED_BRANCH).head_barrier if state.staged_ahead else None
        except ConsistentCatalogError as exc:
            w, staged, error = None, None, str(exc)
        if state.job is None:
            lease = "none"
        elif state.lease_until is not None and state.lease_until > now:
            lease = "live"
        else:
            lease = "expired"
        slowest, own = None, None
        if state.sources:
            marks = {s: _safe_watermark(states.get(s)) for s in state.sources}
            known = {s: m for s, m in marks.items() if m is not None}
            if known:
                slowest = min(known, key=lambda s: known[s])
                own = known[slowest] - w if w is not None else None
        rows.append(
            TableStatus(
                table=name,
                role="root" if state.is_root else "derived",
                job=state.job,
                lease=lease,
                lease_until=state.lease_until,
                watermark=w,
                staged_barrier=staged,
                delay_ms=None if w is None else now - w,
                own_delay_ms=own,
                slowest_source=slowest,
                revision=state.revision,
                snapshots=len(state.snapshots),
                error=error,
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
        where = f"{record.snapshot_id}"
        entries.append(
            HistoryEntry(
                snapshot_id=record.snapshot_id,
                branch=P.MAIN_BRANCH if record.snapshot_id in main_ids else branch,
                barrier=effective.get(record.snapshot_id),
                raw_barrier=record.barrier,
                job=record.job,
                sources=parse_summary_sources(record.summary.get(P.SOURCES), where=f"snapshot {where}"),
                committed_at_ms=record.timestamp_ms,
                operation=record.operation,
                added_records=_count(record.summary, "added-records"),
                deleted_records=_count(record.summary, "deleted-records"),
            )
        )
    return entries
