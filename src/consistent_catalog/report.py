"""Status and history reports (freshness, ownership, per-snapshot barriers). Pure over TableStates."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from consistent_catalog import properties as P
from consistent_catalog.barrier import BarrierLike, ancestry, to_barrier
from consistent_catalog.exceptions import (
    ConsistentCatalogError,
    InvalidBarrierError,
    InvalidInputError,
    StrandedDataError,
)
from consistent_catalog.resolver import PROBABLY_SECONDS, Cut, resolve, unwritable_metadata
from consistent_catalog.state import TableState, parse_summary_sources
from consistent_catalog.util.time import fmt_barrier, fmt_duration, fmt_ms


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
    generation: dict[str, Any] | None = None
    """The table's generations (protocol §6.10, §10.2): ``previous_snapshot``, ``previous_watermark``, ``read_by``
    (tables downstream still reading the previous one), ``staged`` (why a staged regeneration recomputes it); None
    without a previous generation or a staged regeneration."""

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
    regenerate: str | None = None
    """``consistent.regenerate``: the snapshot belongs to an epoch that started a new generation, and why."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Bottleneck(NamedTuple):
    """Where a table's slowest path back to a root lags most (protocol §6.7)."""

    job: str | None
    """The job with the largest positive own delay on the path; None when no job lags."""
    table: str | None
    """That job's sink on the path; with no lagging job, the table the path ends at (a root)."""
    delay_ms: int | None
    """The job's own delay; for a root at the end, ``now - W(root)`` (None without a watermark)."""


def watermarks(states: Mapping[str, TableState]) -> tuple[dict[str, int | None], dict[str, str]]:
    """``W(X)`` of every table (None where it cannot be computed) and, for those, why."""
    marks: dict[str, int | None] = {}
    errors: dict[str, str] = {}
    for name, state in states.items():
        try:
            marks[name] = state.watermark()
        except ConsistentCatalogError as exc:
            marks[name], errors[name] = None, str(exc)
    return marks, errors


def slowest_source(state: TableState, marks: Mapping[str, int | None]) -> tuple[str | None, int | None]:
    """The source of ``state`` with the smallest watermark, and the job's own delay ``W(that source) - W(X)``."""
    known = {s: marks[s] for s in state.sources if marks.get(s) is not None}
    if not known:
        return None, None
    slowest = min(known, key=lambda s: known[s])  # type: ignore[arg-type,return-value]
    w = marks.get(state.identifier)
    return slowest, None if w is None else known[slowest] - w  # type: ignore[operator]


def bottleneck(
    states: Mapping[str, TableState],
    marks: Mapping[str, int | None],
    name: str,
    *,
    now: int,
    slowest: dict[str, tuple[str | None, int | None]] | None = None,
) -> Bottleneck:
    """The bottleneck of ``name``: follow the slowest source back to a root, keep the largest own delay.

    ``slowest``: each table's ``slowest_source``, filled as the walk meets them (``status`` shares one over all its
    tables: their paths back to the roots overlap)."""
    best = Bottleneck(None, None, None)
    seen: set[str] = set()
    current: str | None = name
    last = name
    known = {} if slowest is None else slowest
    while current is not None and current in states and current not in seen:
        seen.add(current)
        last = current
        state = states[current]
        found = known.get(current)
        if found is None:
            found = known[current] = slowest_source(state, marks)
        source, own = found
        if own is not None and own > 0 and (best.delay_ms is None or own > best.delay_ms):
            best = Bottleneck(state.job or state.last_writer, current, own)
        current = source
    if best.job is not None:
        return best
    end = marks.get(last)
    return Bottleneck(None, last, None if end is None else now - end)


def status(states: Mapping[str, TableState], tables: Iterable[str], *, now: int) -> list[TableStatus]:
    """One row per table in ``tables``; ``states`` also holds their upstream tables (delays, bottleneck).

    End-to-end delay is ``now - W(X)``; a job's own delay is ``W(slowest source) - W(X)``; the
    bottleneck of X is the job with the largest own delay on X's slowest path back to a root.
    """
    marks, errors = watermarks(states)
    unwritable = _unwritable(states)  # a table's own cut can be stranded only above one of these (§4.3 step 5)
    slowest_of: dict[str, tuple[str | None, int | None]] = {}
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
        if state.job is None or state.lease_until is None:  # no owner, or its instance released the lease
            lease = "none"
        elif state.lease_until is not None and state.lease_until > now:
            lease = "live"
        else:
            lease = "expired"
        job = bottleneck(states, marks, name, now=now, slowest=slowest_of).job
        slowest, own = slowest_of[name]
        untracked = None
        if name not in errors and state.head() is not None:
            untracked = state.branch().untracked
            if untracked is not None:
                errors[name] = str(state.branch().untracked_error(state.untracked_writer(), state.watermark()))
        if name not in errors and w is not None and unwritable and unwritable & {s.identifier for s in upstream_of(states, name)}:
            stranded = stranded_data(states, name)
            if stranded is not None:
                errors[name] = str(stranded)
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
                generation=generation(states, state),
            )
        )
    return rows


def generation(states: Mapping[str, TableState], state: TableState) -> dict[str, Any] | None:
    """A table's generations as ``status`` shows them (protocol §10.2), or None when it has only the serving one."""
    previous = state.head(P.PREVIOUS_BRANCH)
    staged_head = state.head(P.STAGED_BRANCH) if state.staged_ahead else None
    staged_record = state.snapshots.get(staged_head) if staged_head is not None else None
    staged = staged_record.summary.get(P.REGENERATE) if staged_record is not None else None
    if previous is None and staged is None:
        return None
    read_by = []
    if previous is not None:
        for other in states.values():
            try:
                sources = other.sources
            except ConsistentCatalogError:
                continue
            if state.identifier not in sources:
                continue
            if other.reads_previous_generation(state):
                read_by.append(other.identifier)
    try:
        record = state.previous_record or {}
    except ConsistentCatalogError:
        record = {}
    previous_watermark = None
    if previous is not None:
        view = state.previous_view()
        try:
            previous_watermark = view.watermark() if view is not None else None
        except ConsistentCatalogError:
            previous_watermark = record.get("watermark")
    return {
        "previous_snapshot": previous,
        "previous_watermark": previous_watermark,
        "read_by": sorted(read_by),
        "staged": staged,
    }


def _unwritable(states: Mapping[str, TableState]) -> set[str]:
    """The tables whose metadata no job could have written (``resolver.unwritable_metadata``), each checked once."""
    found = set()
    for name, state in states.items():
        try:
            if unwritable_metadata(state, states) is not None:
                found.add(name)
        except ConsistentCatalogError:
            continue
    return found


def upstream_of(states: Mapping[str, TableState], name: str) -> list[TableState]:
    """``name`` and every table of ``states`` it derives from, transitively."""
    found: dict[str, TableState] = {}
    pending = [name]
    while pending:
        current = pending.pop()
        state = states.get(current)
        if state is None or current in found:
            continue
        found[current] = state
        try:
            pending.extend(state.sources)
        except ConsistentCatalogError:
            continue
    return list(found.values())


def stranded_data(states: Mapping[str, TableState], name: str) -> StrandedDataError | None:
    """Why the cut of ``name`` alone is refused as stranded data (protocol §4.3 step 5), else None (other errors of
    the cut are the status' watermark and untracked columns, or the resolver's to report)."""
    try:
        resolve([states[name]], upstream=upstream_of(states, name))
    except StrandedDataError as exc:
        return exc
    except ConsistentCatalogError:
        return None
    return None


# --- freshness of a cut (protocol §6.7) -----------------------------------------------------------------
#: How far ahead of now a barrier may be waited for when no timeout bounds the wait.
UNBOUNDED_WAIT_AHEAD_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class FreshnessTarget:
    """When a cut is fresh enough: its barrier at least ``barrier``, or its delay at most ``fresher_than_ms``."""

    barrier: int | None = None
    fresher_than_ms: int | None = None

    def __post_init__(self) -> None:
        if (self.barrier is None) == (self.fresher_than_ms is None):
            raise InvalidInputError(
                "give exactly one freshness target: a barrier the cut must reach, or a delay it must be within "
                "(fresher_than)"
            )
        if self.fresher_than_ms is not None and self.fresher_than_ms < 0:
            raise InvalidInputError(f"fresher_than {self.fresher_than_ms} ms is negative; give a positive age such as 5m")
        if self.barrier is not None and self.barrier < PROBABLY_SECONDS:
            raise InvalidBarrierError(
                f"barrier {self.barrier} ({fmt_ms(self.barrier)}) would be met by any cut: barriers are milliseconds — "
                f"in seconds {self.barrier} would be {self.barrier * 1000} ({fmt_ms(self.barrier * 1000)})"
            )

    @classmethod
    def of(cls, *, barrier: BarrierLike | None = None, fresher_than_ms: int | None = None) -> FreshnessTarget:
        return cls(None if barrier is None else to_barrier(barrier), fresher_than_ms)

    def reached(self, cut_barrier: int | None, now: int) -> bool:
        if cut_barrier is None:
            return False
        if self.barrier is not None:
            return cut_barrier >= self.barrier
        return now - cut_barrier <= self.fresher_than_ms  # type: ignore[operator]

    def check_reachable(self, now: int, timeout_ms: int | None) -> None:
        """Refuse a barrier no cut can reach before the wait ends: root barriers lie at most the default
        clock-skew allowance ahead of now (protocol §5.6), so beyond the deadline plus that it never comes."""
        if self.barrier is None:
            return
        if timeout_ms is None:
            limit, why = now + UNBOUNDED_WAIT_AHEAD_MS, "more than a day ahead with no timeout (a mistyped date would wait for ever)"
        else:
            limit = now + timeout_ms + P.DEFAULT_CLOCK_SKEW_MS
            why = (f"beyond the timeout ({fmt_duration(timeout_ms)}) plus the clock-skew allowance "
                   f"({fmt_duration(P.DEFAULT_CLOCK_SKEW_MS)}), so no cut can reach it in time")
        if self.barrier > limit:
            raise InvalidBarrierError(
                f"barrier {fmt_barrier(self.barrier)} lies {fmt_duration(self.barrier - now)} in the future, {why}; "
                "wait for an earlier barrier, or give a longer timeout"
            )

    def describe(self) -> str:
        if self.barrier is not None:
            return f"barrier >= {fmt_barrier(self.barrier)}"
        return f"delay <= {fmt_duration(self.fresher_than_ms)}"

    def to_json(self) -> dict[str, Any]:
        return {"barrier": self.barrier, "fresher_than_ms": self.fresher_than_ms}


@dataclass(frozen=True)
class Freshness:
    """One measurement of the freshness of the repeatable-read cut of ``tables`` against a target (§6.7)."""

    tables: tuple[str, ...]
    target: FreshnessTarget
    fresh: bool
    barrier: int | None
    """The cut's barrier T*; None while no cut resolves (``error`` says why)."""
    now: int
    lagging_table: str | None
    """The table of ``tables`` with the smallest watermark."""
    bottleneck_job: str | None
    bottleneck_table: str | None
    bottleneck_delay_ms: int | None
    error: str | None
    cut: Cut | None
    waited_ms: int = 0
    polls: int = 1

    @property
    def delay_ms(self) -> int | None:
        return None if self.barrier is None else self.now - self.barrier

    def to_json(self) -> dict[str, Any]:
        """The JSON object of protocol §10.9, exactly."""
        return {
            "fresh": self.fresh, "tables": list(self.tables), "target": self.target.to_json(),
            "barrier": self.barrier, "now": self.now, "delay_ms": self.delay_ms,
            "lagging_table": self.lagging_table, "bottleneck_job": self.bottleneck_job,
            "bottleneck_table": self.bottleneck_table, "bottleneck_delay_ms": self.bottleneck_delay_ms,
            "error": self.error, "waited_ms": self.waited_ms, "polls": self.polls,
            "cut": None if self.cut is None else self.cut.to_json(),
        }

    def describe(self) -> str:
        """One line: the barrier and its time, the delay readable and in ms, the target, the bottleneck."""
        if self.barrier is None:
            where = f"no cut resolves yet ({self.error})"
        else:
            where = f"barrier {fmt_barrier(self.barrier)}, delay {fmt_duration(self.delay_ms)} ({self.delay_ms} ms)"
        parts = [f"{where}; wanted {self.target.describe()}"]
        if not self.fresh:
            parts.append(self.describe_bottleneck())
        return "; ".join(parts)

    def describe_bottleneck(self) -> str:
        lag = "" if self.bottleneck_delay_ms is None else f", {fmt_duration(self.bottleneck_delay_ms)}"
        if self.bottleneck_job is not None:
            return f"bottleneck: job {self.bottleneck_job} writing {self.bottleneck_table}{lag} behind its sources"
        if self.bottleneck_table is not None:
            return f"bottleneck: root {self.bottleneck_table}{lag} behind now (its ingests or watermark)"
        return "no bottleneck found"


def freshness(
    states: Mapping[str, TableState],
    tables: Iterable[str],
    cut: Cut | None,
    target: FreshnessTarget,
    *,
    now: int,
    error: ConsistentCatalogError | None = None,
) -> Freshness:
    """Measure the cut of ``tables`` (``states`` holds them and their upstream tables) against ``target``.

    ``cut`` is None when it cannot resolve yet, with ``error`` saying why; the table that error names
    (where the block starts) is then the bottleneck.
    """
    names = tuple(tables)
    marks, _ = watermarks(states)
    known = [n for n in names if marks.get(n) is not None]
    if cut is not None and known:
        lagging: str | None = min(known, key=lambda n: marks[n])  # type: ignore[arg-type,return-value]
    else:  # a table without a watermark holds the cut back
        lagging = next((n for n in names if marks.get(n) is None), names[0] if names else None)
    blocked = getattr(error, "table", None)
    start = blocked if blocked in states else lagging
    if start is None:
        found = Bottleneck(None, None, None)
    elif marks.get(start) is None and not states[start].is_root:  # its job has not published yet
        found = Bottleneck(states[start].job or states[start].last_writer, start, None)
    else:
        found = bottleneck(states, marks, start, now=now)
    barrier = None if cut is None else cut.barrier
    return Freshness(
        tables=names, target=target, fresh=cut is not None and target.reached(barrier, now), barrier=barrier,
        now=now, lagging_table=lagging, bottleneck_job=found.job, bottleneck_table=found.table,
        bottleneck_delay_ms=found.delay_ms, error=None if error is None else str(error), cut=cut,
    )


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
                regenerate=record.summary.get(P.REGENERATE),
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
    regenerate: str | None = None
    """``consistent.regenerate`` of the epoch: it started a new generation (protocol §6.10), and why."""

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
                regenerate=last.summary.get(P.REGENERATE),
            )
        )
    entries.reverse()
    return entries

