"""Consistent cuts over a set of tables (docs/protocol.md §4). Pure: takes TableStates, returns a Cut."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from consistent_catalog import properties as P
from consistent_catalog.barrier import PLAUSIBLE_MIN_MS, BarrierLike, to_barrier
from consistent_catalog.completeness import Completeness
from consistent_catalog.exceptions import (
    ConsistentCatalogError,
    InvalidBarrierError,
    InvalidInputError,
    NoWatermarkError,
    ResolutionError,
    StrandedDataError,
)
from consistent_catalog.state import TableState
from consistent_catalog.util.time import fmt_barrier, fmt_ms

Level = Literal["repeatable-read", "read-committed", "read-uncommitted"]
LEVELS: tuple[str, ...] = get_args(Level)
DEFAULT_LEVEL: Level = "repeatable-read"


def check_level(level: str) -> Level:
    if level not in LEVELS:
        raise InvalidInputError(f"unknown isolation level {level!r}; use one of {', '.join(LEVELS)}")
    return level  # type: ignore[return-value]


@dataclass(frozen=True)
class TableCut:
    """One table's part of a cut: the snapshot to read (None when the table is empty at the cut)."""

    table: str
    snapshot_id: int | None
    barrier: int | None
    branch: str
    revision: int = 0
    generation: str = "current"
    """``current``, or ``previous`` when the cut read the table's previous generation (protocol §4.8)."""

    def to_json(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "barrier": self.barrier}


@dataclass(frozen=True)
class Cut:
    """Snapshot ids that all reflect the same root data (the same barrier)."""

    level: Level
    barrier: int | None
    tables: Mapping[str, TableCut]

    def __getitem__(self, table: str) -> TableCut:
        return self.tables[table]

    @property
    def snapshot_ids(self) -> dict[str, int | None]:
        return {name: t.snapshot_id for name, t in self.tables.items()}

    @property
    def revisions(self) -> dict[str, int]:
        """``consistent.revision`` of each table: a changed value means a revision rolled it back."""
        return {name: t.revision for name, t in self.tables.items()}

    def to_json(self) -> dict[str, Any]:
        """The JSON object of protocol §4, exactly."""
        return {"level": self.level, "barrier": self.barrier, "tables": {n: t.to_json() for n, t in self.tables.items()}}


def _branch_for(state: TableState, level: Level) -> str:
    return P.MAIN_BRANCH if level == "repeatable-read" else state.newest_branch()


def no_watermark_error(state: TableState, known: Mapping[str, TableState] | None = None) -> NoWatermarkError:
    """Why ``state`` has no watermark, naming the root or job that holds it back (``table`` of the error) and
    what to do."""
    known = known or {}
    if state.is_root:
        return NoWatermarkError(
            f"{state.identifier} is an empty root table with no {P.WATERMARK}, so it blocks every consistent cut "
            "that includes it; ingest into it, or advance its watermark",
            table=state.identifier,
            root=True,
        )
    for source in state.sources:
        upstream = known.get(source)
        if upstream is not None and upstream.watermark() is None:
            cause = no_watermark_error(upstream, known)
            return NoWatermarkError(
                f"{state.identifier} has no published epoch yet because its source {source} has none: {cause}",
                table=cause.table,
                root=cause.root,
            )
    job = state.job or state.last_writer
    if job is not None and state.lease_holder is None:  # registered once; its run ended before its first epoch
        return NoWatermarkError(
            f"{state.identifier} is the derived table of job {job}, which registered but has not published an epoch "
            "and has no running instance (it stopped, failed or was killed before its first epoch), so it blocks "
            "every consistent cut that includes it; start the job again (if it failed, fix what failed first)",
            table=state.identifier,
        )
    return NoWatermarkError(
        f"{state.identifier} has no published epoch yet, so it blocks every consistent cut that includes it; its job "
        f"{job or '(none registered)'} has not published an epoch — start it (restart a crashed instance with "
        "takeover=True); the status of the table shows its sources' progress",
        table=state.identifier,
    )


def cut_barrier(
    states: Iterable[TableState], level: Level = DEFAULT_LEVEL, known: Mapping[str, TableState] | None = None
) -> int:
    """``T* = min over Q of W(X)`` on the branch the level reads; raises NoWatermarkError for a blocking table."""
    barrier: int | None = None
    for state in states:
        w = state.watermark(_branch_for(state, level))
        if w is None:
            raise no_watermark_error(state, known)
        barrier = w if barrier is None else min(barrier, w)
    if barrier is None:
        raise InvalidInputError("a cut needs at least one table")
    return barrier


def resolve(
    states: Iterable[TableState],
    level: str = DEFAULT_LEVEL,
    as_of: BarrierLike | None = None,
    *,
    upstream: Iterable[TableState] = (),
) -> Cut:
    """Compute the consistent cut of protocol §4 at ``level``, optionally no later than ``as_of``.

    The barrier is the newest one at or below ``min W(X)`` (and ``as_of``) at which every table is
    complete (see ``completeness``); ``upstream`` are the states of the tables' transitive sources
    that are not themselves in the cut, needed to check that. At read-uncommitted there is no common
    barrier: each table is read at its newest state (at or before ``as_of``) and the barrier is None.
    """
    checked = check_level(level)
    states = list(states)
    limit = None if as_of is None else to_barrier(as_of)
    if limit is not None:
        check_as_of(states, limit)
    if checked == "read-uncommitted":
        tables = {}
        for state in states:
            branch = state.newest_branch()
            history = state.branch(branch)
            if limit is None and history.untracked is not None:  # dirty reads include the foreign write
                tables[state.identifier] = TableCut(state.identifier, history.head_id, None, branch, state.revision)
                continue
            if limit is None:
                head = history.head_barrier
                point = None if history.head_id is None or head is None else (history.head_id, head)
            else:
                point = history.snap_at(limit)
            tables[state.identifier] = _table_cut(state, branch, point)
        return Cut(checked, None, tables)

    closure = list(upstream)
    found: Cut | None = None
    try:
        found = _search(states, checked, limit, closure)
    except ConsistentCatalogError as exc:
        error = exc
    previous = _previous_views([*states, *closure])  # §4.8: a second search with every switch undone
    older: Cut | None = None
    if previous:
        try:
            older = _search([previous.get(s.identifier, s) for s in states], checked, limit,
                            [previous.get(s.identifier, s) for s in closure])
        except ConsistentCatalogError:
            pass
    if older is None or (found is not None and (found.barrier or 0) >= (older.barrier or 0)):
        if found is None:
            raise error
        return found
    return Cut(older.level, older.barrier, {
        name: dataclasses.replace(cut, generation="previous") if name in previous else cut
        for name, cut in older.tables.items()
    })


def _previous_views(states: Iterable[TableState]) -> dict[str, TableState]:
    """The previous view (protocol §4.8) of every table among ``states`` that has one."""
    views = {}
    for state in states:
        try:
            view = state.previous_view()
        except ConsistentCatalogError:  # a malformed record: the table is read as it is
            continue
        if view is not None:
            views[state.identifier] = view
    return views


def _search(states: list[TableState], checked: Level, limit: int | None, upstream: Iterable[TableState]) -> Cut:
    """The search of protocol §4.3 over one set of histories (the tables as they are, or their previous views)."""
    for state in states:  # an untracked write: only cuts from before it resolve
        branch = _branch_for(state, checked)
        history = state.branch(branch)
        tracked_until = state.watermark(branch)  # W: the tracked head, or a watermark set on top of it
        if history.untracked is not None and (limit is None or tracked_until is None or limit > tracked_until):
            raise history.untracked_error(state.untracked_writer(branch), tracked_until)

    known = {s.identifier: s for s in upstream}
    known.update((s.identifier, s) for s in states)
    upper = cut_barrier(states, checked, known)
    if limit is not None:
        upper = min(upper, limit)
    completeness = Completeness(known, lambda state: _branch_for(state, checked))
    barrier = completeness.latest([s.identifier for s in states], upper)
    if barrier is None:
        raise ResolutionError(
            f"no barrier at or below {fmt_barrier(upper)} has every table of the cut complete "
            f"({', '.join(s.identifier for s in states)}); run their jobs"
            + (", or resolve as of a later barrier" if limit is not None else ""),
            barrier=limit,
        )
    stranded = stranded_error(states, known, upper, barrier, lambda state: _branch_for(state, checked))
    if stranded is not None:
        raise stranded
    tables = {}
    for state in states:
        branch = _branch_for(state, checked)
        tables[state.identifier] = _table_cut(state, branch, state.branch(branch).snap_at(barrier))
    return Cut(checked, barrier, tables)


def _holds_data(state: TableState, branch: str, barrier: int) -> tuple[int, int] | None:
    """``snap(X, barrier)`` when the table holds rows there (a data-changing snapshot at or before it), else None."""
    history = state.branch(branch)
    point = history.snap_at(barrier)
    if point is None or history.same_data(None, point[0]):
        return None
    return point


def stranded_error(
    states: Sequence[TableState],
    known: Mapping[str, TableState],
    upper: int,
    barrier: int,
    branch_of: Callable[[TableState], str],
) -> StrandedDataError | None:
    """Protocol §4.3 step 5: the cut found (``barrier``) lies below ``upper`` because of a derived table whose metadata
    no job could have written, and it would read a table of the cut that holds rows at ``upper`` as empty, or that
    derived table is itself in the cut. The error names the table that holds the cut back (``table``), why, and the
    barrier to revise it to (``barrier``); None when no table of the cut is stranded (a table only lags)."""
    if barrier >= upper:
        return None
    for state in states:
        branch = branch_of(state)
        held = _holds_data(state, branch, upper)
        if held is None or state.branch(branch).snap_at(barrier) is not None:
            continue
        culprit, why = None, None
        seen: set[str] = set()
        for candidate in [state, *states]:  # the stranded table's upstream first, then its siblings in the cut
            culprit, why = _holding_back(candidate, known, branch_of, seen)
            if culprit is not None:
                break
        if culprit is not None and why is not None:
            return _stranded(culprit, why, upper, f"a cut would read {state.identifier} as empty")
    for state in states:
        why = unwritable_metadata(state, known, branch_of)
        if why is not None:
            return _stranded(state, why, upper, f"a cut of {state.identifier} would lie before its sources' data")
    return None  # a table lags: the cut lies before the data until its job catches up, as §4.3 defines it


def _stranded(culprit: TableState, why: str, upper: int, effect: str) -> StrandedDataError:
    first = culprit.first_barrier()
    revise_to = (upper if first is None else first) - 1
    return StrandedDataError(
        f"{culprit.identifier} holds every consistent cut with it back: {why}; {effect} — revise {culprit.identifier} "
        f"to barrier {revise_to} (mode full) to empty it, then run its job {culprit.owner or '(none registered)'} to "
        "rebuild it",
        table=culprit.identifier,
        barrier=revise_to,
    )


def _holding_back(
    state: TableState, known: Mapping[str, TableState], branch_of: Callable[[TableState], str], seen: set[str]
) -> tuple[TableState | None, str | None]:
    """The table among ``state`` and its upstream tables (the most upstream first) with ``unwritable_metadata``, and
    why."""
    if state.identifier in seen:
        return None, None
    seen.add(state.identifier)
    for source in state.sources:
        upstream = known.get(source)
        if upstream is not None:
            found = _holding_back(upstream, known, branch_of, seen)
            if found[0] is not None:
                return found
    why = unwritable_metadata(state, known, branch_of)
    return (None, None) if why is None else (state, why)


def unwritable_metadata(
    state: TableState, known: Mapping[str, TableState], branch_of: Callable[[TableState], str] = lambda s: P.MAIN_BRANCH
) -> str | None:
    """Why the derived table ``state`` has metadata no job could have written (None: it has not): rows ingested into
    it while it was a root (a data-changing snapshot with a barrier but neither ``consistent.job`` nor
    ``consistent.sources``), or, before any epoch, a watermark beyond a source's (an epoch's barrier is at most its
    sources' watermarks, §5.1)."""
    if state.is_root:
        return None
    branch = branch_of(state)
    sources = state.sources  # unreadable lineage raises here, whatever the history holds
    epochs, ingested = state.epoch_writes(branch)
    if ingested is not None:
        snapshot_id, barrier = ingested
        return (
            f"it holds rows ingested while it was a root, before job {state.owner or '(none)'} registered on it "
            f"(snapshot {snapshot_id}, barrier {fmt_barrier(barrier)}): no epoch computed them from "
            f"{', '.join(sources)}"
        )
    if epochs:
        return None  # the watermark is then an epoch's, bounded by its sources' (§5.1)
    mark = state.watermark(branch)
    for source in sources:
        upstream = known.get(source)
        source_mark = None if upstream is None else upstream.watermark(branch_of(upstream))
        if mark is not None and source_mark is not None and mark > source_mark:
            return (
                f"it is complete up to {fmt_barrier(mark)} by a watermark set before any epoch, beyond its source "
                f"{source} ({fmt_barrier(source_mark)}), which no epoch can publish"
            )
    return None

def component(table: str, states: Mapping[str, TableState]) -> list[str]:
    """The weakly connected lineage component of ``table`` among ``states``, sorted (upstream, downstream
    and siblings; a table whose ``consistent.sources`` cannot be parsed has no edges)."""
    undirected: dict[str, set[str]] = {}
    for state in states.values():
        try:
            sources = state.sources
        except ConsistentCatalogError:
            continue
        for source in sources:
            undirected.setdefault(state.identifier, set()).add(source)
            undirected.setdefault(source, set()).add(state.identifier)
    found, stack = {table}, [table]
    while stack:
        for following in undirected.get(stack.pop(), ()):
            if following not in found:
                found.add(following)
                stack.append(following)
    return sorted(found)


@dataclass(frozen=True)
class ComponentCut:
    """The cut of a lineage component (protocol §4.7): one cut for every table that can take part, and the
    tables left out with the error that keeps each out."""

    cut: Cut | None
    blocked: Mapping[str, ConsistentCatalogError]


def component_cut(
    table: str,
    states: Mapping[str, TableState],
    level: str = DEFAULT_LEVEL,
    as_of: BarrierLike | None = None,
    *,
    members: Sequence[str] | None = None,
) -> ComponentCut:
    """The cut of ``table``'s lineage component, as the Spark plugin serves it (protocol §4.7).

    ``resolve`` over the whole component when that resolves. Otherwise every table that cannot be
    resolved on its own (no watermark, untracked write, expired history, malformed metadata, no complete
    barrier) is left out together with every table derived from it, and the rest (the members) are
    resolved together; when that fails too, every member is left out with its error. A bad level or
    as-of is the caller's error and is raised. ``states`` must hold every table of the catalog that the
    component can reach (a component is closed upstream and downstream). ``members``: ``component(table, states)``
    when the caller computed it already.
    """
    checked = check_level(level)
    if as_of is not None:
        to_barrier(as_of)
    present = [n for n in (component(table, states) if members is None else members) if n in states]
    known = [states[n] for n in present]
    blocked: dict[str, ConsistentCatalogError] = {}
    if not present:
        return ComponentCut(None, blocked)
    try:
        return ComponentCut(resolve(known, checked, as_of, upstream=known), blocked)
    except InvalidInputError:
        raise
    except ConsistentCatalogError:
        pass
    for name in present:
        try:
            resolve([states[name]], checked, as_of, upstream=known)
        except InvalidInputError:
            pass
        except ConsistentCatalogError as exc:
            blocked[name] = exc
    changed = True
    while changed:  # a table derived from a left-out table cannot be in the cut either
        changed = False
        for name in present:
            if name in blocked:
                continue
            bad = [s for s in states[name].sources if s in blocked]
            if bad:
                blocked[name] = blocked[bad[0]]
                changed = True
    members = [states[n] for n in present if n not in blocked]
    if not members:
        return ComponentCut(None, blocked)
    try:
        return ComponentCut(resolve(members, checked, as_of, upstream=known), blocked)
    except ConsistentCatalogError as exc:
        return ComponentCut(None, {**blocked, **{m.identifier: exc for m in members}})


#: Barriers below this (1973-03-03 in milliseconds) are seconds far more often than they are real (protocol §3.8).
PROBABLY_SECONDS = PLAUSIBLE_MIN_MS


def check_as_of(states: Iterable[TableState], as_of: int) -> None:
    """Refuse an ``as_of`` before the first barrier of every table of the cut: such a cut holds nothing.

    Usually a barrier in seconds instead of milliseconds; a cut of empty tables would read as "no
    rows" everywhere. Tables whose history was expired are left to ``HistoryExpiredError``.
    """
    firsts: list[int] = []
    for state in states:
        if state.head() is not None and state.branch().truncated:
            return
        first = state.first_barrier()
        if first is not None:  # a table with no barrier yet (empty, maybe with a watermark) says nothing
            firsts.append(first)
    if firsts and as_of < min(firsts):
        hint = ""
        if as_of < PROBABLY_SECONDS:
            hint = f"; barriers are milliseconds — in seconds {as_of} would be {as_of * 1000} ({fmt_ms(as_of * 1000)})"
        raise InvalidBarrierError(
            f"as-of {as_of} ({fmt_ms(as_of)}) is before the first barrier of every table of the cut (the earliest is "
            f"{min(firsts)}, {fmt_ms(min(firsts))}): the cut would hold no data{hint}"
        )


def _table_cut(state: TableState, branch: str, point: tuple[int, int] | None) -> TableCut:
    if point is None:
        return TableCut(state.identifier, None, None, branch, state.revision)
    return TableCut(state.identifier, point[0], point[1], branch, state.revision)
