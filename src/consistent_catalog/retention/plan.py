"""The expiry planner (pure): which snapshots each table keeps, and why (protocol §9)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from consistent_catalog import properties as P
from consistent_catalog.barrier import branch_barriers
from consistent_catalog.exceptions import ConsistentCatalogError
from consistent_catalog.lineage import LineageGraph
from consistent_catalog.resolver import Cut, resolve
from consistent_catalog.retention.policy import RetentionPolicy
from consistent_catalog.retention.refs import RefInfo
from consistent_catalog.state import TableState
from consistent_catalog.util.time import fmt_ms


@dataclass(frozen=True)
class TableExpiry:
    """What expiry does to one table, and why each kept snapshot stays."""

    table: str
    snapshots: int
    """Snapshots before expiry."""
    expire: tuple[int, ...]
    keep: Mapping[int, tuple[str, ...]]
    """Snapshot id -> why it stays."""
    drop_tags: Mapping[str, int]
    """``consistent-`` tags whose ref age has passed -> the snapshot they pointed at."""
    refs: Mapping[str, int]
    """Every ref as planned (the fence ref among them): the commit requires these."""
    history_start: int | None
    """Oldest snapshot of main's retained ancestry (None: main has no snapshot)."""
    timestamps: Mapping[int, int] = field(default_factory=dict, repr=False)
    barriers: Mapping[int, int | None] = field(default_factory=dict, repr=False)
    drop_previous: bool = False
    """The table's previous generation is no longer read (protocol §6.10 step 7): ``consistent-previous`` and
    ``consistent.previous`` are removed in the same commit."""

    @property
    def changes(self) -> bool:
        return bool(self.expire or self.drop_tags or self.drop_previous)

    @property
    def held_by(self) -> tuple[str, ...]:
        """Why main's history cannot start later: the reasons the oldest retained snapshot stays."""
        return () if self.history_start is None else self.keep.get(self.history_start, ())

    def to_json(self, *, details: bool = True) -> dict[str, Any]:
        start = self.history_start
        out: dict[str, Any] = {
            "snapshots": self.snapshots,
            "expire": list(self.expire),
            "kept": len(self.keep),
            "drop_tags": dict(self.drop_tags),
            "drop_previous": self.drop_previous,
            "history_start": None
            if start is None
            else {
                "snapshot_id": start,
                "barrier": self.barriers.get(start),
                "timestamp_ms": self.timestamps.get(start),
                "reasons": list(self.held_by),
            },
        }
        if details:
            out["keep"] = [{"snapshot_id": s, "reasons": list(r)} for s, r in self.keep.items()]
        return out


@dataclass(frozen=True)
class ExpiryPlan:
    now: int
    tables: Mapping[str, TableExpiry]
    cuts: Mapping[str, Cut]
    """Component (its first table, sorted) -> the latest repeatable-read cut that expiry preserves."""
    skipped: Mapping[str, str]
    """Tables left untouched, with the reason (their component's cut cannot be resolved)."""

    @property
    def changes(self) -> bool:
        return any(t.changes for t in self.tables.values())

    def to_json(self, *, details: bool = True) -> dict[str, Any]:
        return {
            "now": self.now,
            "tables": {name: t.to_json(details=details) for name, t in self.tables.items()},
            "cuts": {name: cut.to_json() for name, cut in self.cuts.items()},
            "skipped": dict(self.skipped),
        }


def latest_cut(component: Iterable[str], states: Mapping[str, TableState]) -> tuple[Cut | None, dict[str, str]]:
    """The latest repeatable-read cut over a component's tables that can take part in one.

    Tables that are empty without a watermark (they block every cut that includes them), and tables
    that cannot be resolved (untracked writes, malformed metadata) together with everything downstream
    of them, are left out and returned as ``blocked`` (expiry keeps all their snapshots). When no cut
    exists at all, the whole component is blocked.
    """
    present = sorted(t for t in component if t in states)
    blocked: dict[str, str] = {}
    for name in present:
        state = states[name]
        try:
            untracked = state.branch().untracked if state.head() is not None else None
            if untracked is not None:  # its latest cut cannot be resolved (protocol §3.3)
                blocked[name] = f"untracked since snapshot {untracked} (written outside its job)"
            elif state.watermark() is None:
                blocked[name] = "empty without a watermark: no cut includes it yet"
        except ConsistentCatalogError as exc:
            blocked[name] = f"cannot be resolved: {exc}"
    changed = True
    while changed:  # a table derived from a blocked table cannot be in the cut either
        changed = False
        for name in present:
            if name not in blocked:
                bad = [s for s in states[name].sources if s in blocked]
                if bad:
                    blocked[name] = f"derived from {bad[0]}, which is left out of the cut"
                    changed = True
    members = [states[n] for n in present if n not in blocked]
    if not members:
        return None, blocked
    try:
        cut = resolve(members, "repeatable-read", upstream=[states[n] for n in present])
    except ConsistentCatalogError as exc:
        return None, {**blocked, **{m.identifier: f"the component's latest cut cannot be resolved: {exc}" for m in members}}
    return cut, blocked


def previous_in_use(states: Mapping[str, TableState]) -> set[str]:
    """The tables whose previous generation (``consistent-previous``) some table still reads (protocol §6.10 step 7):
    a table derived from it whose ``main`` head records an input of it at that generation's head or before (or reads
    it empty), or whose own previous generation is in use."""
    derived: dict[str, list[TableState]] = {}
    for state in states.values():
        try:
            for source in state.sources:
                derived.setdefault(source, []).append(state)
        except ConsistentCatalogError:
            continue
    in_use: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, state in states.items():
            previous = state.head(P.PREVIOUS_BRANCH)
            if previous is None or name in in_use:
                continue
            for reader in derived.get(name, ()):
                if reader.identifier in in_use or reader.reads_previous_generation(state):
                    in_use.add(name)
                    changed = True
                    break
    return in_use


def _add(needs: dict[int, list[str]], snapshot_id: int, reason: str) -> None:
    """Record why a snapshot stays: every distinct reason (JSON carries them all; text shows the first few)."""
    reasons = needs.setdefault(snapshot_id, [])
    if reason not in reasons:
        reasons.append(reason)


def _history_chain(state: TableState, branch: str) -> list[int]:
    """Snapshot ids of ``branch``'s retained ancestry, oldest first."""
    return list(state.branch(branch).snapshot_ids) if state.head(branch) is not None else []


def _reproduces(state: TableState, removed: set[int], branches: Sequence[str]) -> bool:
    """Whether every retained snapshot of ``branches`` keeps its effective barrier once ``removed`` are gone."""
    kept = {sid: record for sid, record in state.snapshots.items() if sid not in removed}
    for branch in branches:
        head = state.head(branch)
        if head is None:
            continue
        before = state.branch(branch)
        old = dict(zip(before.snapshot_ids, before.barriers))
        after = branch_barriers(
            state.identifier,
            branch,
            head,
            kept,
            is_root=state.is_root,
            floor=state.floor,
            overrides=state.barrier_overrides,
        )
        if (after.untracked is None) != (before.untracked is None):
            return False
        if any(old.get(sid) != barrier for sid, barrier in zip(after.snapshot_ids, after.barriers)):
            return False
    return True


def _inherits_inputs(state: TableState, snapshot_id: int) -> bool:
    """A derived table's snapshot that takes its recorded inputs from its parent (compaction, empty commit)."""
    record = state.snapshots[snapshot_id]
    return not state.is_root and P.SOURCES not in record.summary and not record.changes_data


def plan_table(
    state: TableState,
    refs: Mapping[str, RefInfo],
    needs: Mapping[int, Sequence[str]],
    policy: RetentionPolicy,
    now: int,
    *,
    drop_previous: bool = False,
) -> tuple[TableExpiry, list[int]]:
    """Plan one table; returns the plan and the retained history (main and staged) whose inputs the sources must keep.

    ``needs`` are snapshots other tables or the latest cut require, with reasons.
    """
    keep: dict[int, list[str]] = {sid: list(reasons) for sid, reasons in needs.items() if sid in state.snapshots}
    threshold = now - policy.max_age_ms(state)
    main = _history_chain(state, P.MAIN_BRANCH)
    position = {sid: i for i, sid in enumerate(main)}
    snapshots = state.snapshots

    drop_tags: dict[str, int] = {}
    for ref in refs.values():
        record = snapshots.get(ref.snapshot_id)
        if ref.name == P.PREVIOUS_BRANCH and drop_previous:
            continue  # removed in this commit: its snapshots expire by the rules that follow
        if not ref.is_tag:
            _add(keep, ref.snapshot_id, f"head of branch {ref.name}")
            continue
        expires = ref.expires_at(record.timestamp_ms) if record is not None else None
        if ref.managed and expires is not None and expires < now:
            drop_tags[ref.name] = ref.snapshot_id
        else:
            until = f" (until {fmt_ms(expires, precision='s')})" if expires is not None else ""
            _add(keep, ref.snapshot_id, f"tag {ref.name}{until}")

    start = len(main) - 1 if main else 0
    if main:
        start = min(start, max(0, len(main) - policy.min_snapshots(state)))
        for sid in needs:  # the cut and recorded inputs need history; tags and other heads only their snapshot
            if sid in position:
                start = min(start, position[sid])
        for i, sid in enumerate(main):
            if snapshots[sid].timestamp_ms >= threshold:
                start = min(start, i)
                break
        # recorded inputs inherited from an older snapshot, and barriers that depend on older snapshots,
        # must not change: extend the retained history backwards until both hold
        staged_ahead = [P.STAGED_BRANCH] if state.staged_ahead else []
        while True:
            while start > 0 and _inherits_inputs(state, main[start]):
                _add(keep, main[start - 1], f"snapshot {main[start]} inherits its epoch inputs from it")
                start -= 1
            removed = set(main[:start])
            if start == 0 or _reproduces(state, removed, [P.MAIN_BRANCH, *staged_ahead]):
                break
            _add(keep, main[start - 1], f"barrier continuity: snapshot {main[start]}'s barrier depends on it")
            start -= 1
        for i, sid in enumerate(main[start:], start):
            if sid in keep:
                continue
            if i >= len(main) - policy.min_snapshots(state):
                _add(keep, sid, f"one of the newest {policy.min_snapshots(state)} snapshot(s) of main")
            elif snapshots[sid].timestamp_ms >= threshold:
                _add(keep, sid, f"newer than the expiry threshold {fmt_ms(threshold, precision='s')}")
            else:
                _add(keep, sid, "main's history between the oldest needed snapshot and the head")
    history = list(main[start:]) if main else []

    # other branches: a staged epoch (and any foreign branch) keeps what it adds on top of main
    on_main = set(history)
    for name, ref in refs.items():
        if ref.is_tag or name == P.MAIN_BRANCH or (name == P.PREVIOUS_BRANCH and drop_previous):
            continue
        current: int | None = ref.snapshot_id
        while current is not None and current in snapshots and current not in on_main and current not in position:
            _add(keep, current, "staged epoch ahead of main" if name == P.STAGED_BRANCH and state.staged_ahead
                 else f"on branch {name}")
            if name == P.STAGED_BRANCH and state.staged_ahead:  # read-committed cuts read it
                history.append(current)
            current = snapshots[current].parent_id

    for sid, record in snapshots.items():
        # a fence snapshot holds no data and no history: only the fence ref's head stays (kept above)
        if sid not in keep and record.timestamp_ms >= threshold and P.FENCE_REASON not in record.summary:
            _add(keep, sid, f"newer than the expiry threshold {fmt_ms(threshold, precision='s')}")

    expire = tuple(sid for sid in snapshots if sid not in keep)
    main_barriers = state.branch(P.MAIN_BRANCH) if main else None
    barriers: dict[int, int | None] = {}
    if main_barriers is not None:
        barriers = dict(zip(main_barriers.snapshot_ids, main_barriers.barriers))
    plan = TableExpiry(
        table=state.identifier,
        snapshots=len(snapshots),
        expire=expire,
        keep={sid: tuple(reasons) for sid, reasons in sorted(keep.items(), key=lambda kv: snapshots[kv[0]].timestamp_ms)},
        drop_tags=drop_tags,
        refs={name: ref.snapshot_id for name, ref in refs.items()},
        history_start=main[start] if main else None,
        timestamps={sid: snapshots[sid].timestamp_ms for sid in keep},
        barriers={sid: barriers.get(sid) for sid in keep},
        drop_previous=drop_previous,
    )
    return plan, history


def plan_expiry(
    states: Mapping[str, TableState],
    refs: Mapping[str, Mapping[str, RefInfo]],
    targets: Iterable[str],
    policy: RetentionPolicy,
    now: int,
) -> ExpiryPlan:
    """Which snapshots of ``targets`` to expire, and why every other one stays. Pure.

    ``states`` must hold every table of the targets' lineage components (``refs`` their refs with
    ages). Tables are planned downstream first, so that each source learns which of its snapshots
    the history of the tables derived from it recorded as epoch inputs. A downstream table that is
    not expired in this run is planned all the same (but not committed): its sources keep the inputs
    of the history it *would* retain under the same policy, so historical cuts within that window
    stay resolvable without one unexpired table pinning its sources' whole history. Tables whose
    cut cannot be resolved keep their whole history, and so do their inputs.
    """
    targets = list(dict.fromkeys(t for t in targets if t in states))
    graph = LineageGraph.from_states(states.values())
    needs: dict[str, dict[int, list[str]]] = {name: {} for name in states}
    cuts: dict[str, Cut] = {}
    blocked: dict[str, str] = {}
    scope: set[str] = set()
    for component in graph.components(targets):
        scope |= component
        cut, left_out = latest_cut(component, states)
        blocked.update(left_out)
        if cut is None:
            continue
        cuts[min(cut.tables)] = cut
        for name, table_cut in cut.tables.items():
            if table_cut.snapshot_id is not None:
                _add(needs[name], table_cut.snapshot_id, f"latest repeatable-read cut (barrier {cut.barrier})")

    in_use = previous_in_use(states)
    for name in scope:
        previous = states[name].head(P.PREVIOUS_BRANCH) if name in states else None
        if previous is not None and name in in_use:  # its history too: the previous view walks back from it
            _add(needs[name], previous, f"head of {P.PREVIOUS_BRANCH}, still read by the tables derived from it")

    plans: dict[str, TableExpiry] = {}
    for name in reversed(graph.topological(scope)):
        state = states.get(name)
        if state is None:
            continue
        if name in blocked:  # left out of the cut: everything stays, and so does every input it recorded
            history = [*_history_chain(state, P.MAIN_BRANCH)]
            history += [s for s in _history_chain(state, P.STAGED_BRANCH) if s not in set(history)]
        else:
            table_plan, history = plan_table(
                state, refs.get(name, {}), needs[name], policy, now,
                drop_previous=state.head(P.PREVIOUS_BRANCH) is not None and name not in in_use,
            )
            plans[name] = table_plan
        for snapshot_id in history:
            for source, input_id in state.recorded_inputs(snapshot_id).items():
                if input_id is not None and source in needs:
                    _add(needs[source], input_id, f"inputs of {name} snapshot {snapshot_id}")
    wanted = set(targets)
    ordered = {t: table_plan for t, table_plan in plans.items() if t in wanted}  # downstream first: commit order
    return ExpiryPlan(now, ordered, cuts, {t: reason for t, reason in blocked.items() if t in targets})


