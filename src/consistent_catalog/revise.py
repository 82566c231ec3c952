"""Revisions against a catalog (docs/protocol.md §8): roll a table and everything downstream back to a barrier; and
abandoning a new generation (§6.10 step 6): return a table and everything downstream to the generation before.

``revision.plan_step`` decides, purely, what each table becomes; this module commits it, one fenced
commit per table, upstream first, re-planning a table whose job or ingest committed meanwhile.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update import (
    RemovePropertiesUpdate,
    RemoveSnapshotRefUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
)

from consistent_catalog import properties as P
from consistent_catalog.barrier import BarrierLike, to_barrier
from consistent_catalog.commit import RetryPolicy, TableStore, TakeFence, refs_at
from consistent_catalog.exceptions import FencedError, InvalidBarrierError, InvalidInputError
from consistent_catalog.revision import MODES, RevisionMode, RevisionResult, RevisionStep, affected_tables, plan_step
from consistent_catalog.state import TableState
from consistent_catalog.util.identifiers import normalize_identifier
from consistent_catalog.util.time import fmt_barrier, fmt_duration, now_ms


def revise(
    store: TableStore, table: str, barrier: BarrierLike, *, mode: RevisionMode = "incremental", retries: int = 10
) -> RevisionResult:
    """Roll ``table`` and everything downstream back to their state at ``barrier`` and bump ``consistent.revision``.

    ``incremental``: derived tables return to ``snap(X, T)`` with watermark T, so their jobs replay
    from T. ``full``: derived tables are emptied and their jobs rebuild them from scratch. A root
    (the revised table itself) is always rolled back. Staged epochs are discarded. Running jobs
    see their next publish refused (main moved) and re-plan. A barrier beyond now plus the table's
    clock-skew allowance is refused (InvalidBarrierError): nothing has happened after it to roll back.
    """
    if mode not in MODES:
        raise InvalidInputError(f"revision mode {mode!r} is not one of {', '.join(MODES)}")
    value = to_barrier(barrier)
    name = normalize_identifier(table)
    state = store.state(name)  # TableNotFoundError naming it
    ahead = value - now_ms()
    if ahead > state.clock_skew_ms:
        raise InvalidBarrierError(
            f"{name}: revision barrier {fmt_barrier(value)} lies {fmt_duration(ahead)} in the future; a revision "
            "rolls tables back to a barrier that has passed, so nothing would change — give a barrier at or before now"
        )
    graph = store.lineage([name])
    policy = RetryPolicy(retries)
    steps = tuple(_revise_table(store, t, value, mode, policy) for t in affected_tables(graph, name))
    return RevisionResult(name, value, mode, steps)


def _revise_table(store: TableStore, name: str, barrier: int, mode: str, policy: RetryPolicy) -> RevisionStep:
    for _ in policy.attempts():
        table, state = store.load(name)
        step = plan_step(state, barrier, mode)
        if step.action == "unchanged":
            return step  # nothing to roll back: no commit, no revision bump
        updates: list[Any] = []
        for branch in (P.MAIN_BRANCH, P.STAGED_BRANCH):
            if step.to_snapshot is not None:
                updates.append(SetSnapshotRefUpdate(ref_name=branch, type=SnapshotRefType.BRANCH, snapshot_id=step.to_snapshot))
            elif branch in state.branches:
                updates.append(RemoveSnapshotRefUpdate(ref_name=branch))
        properties = {P.REVISION: str(step.revision)}
        removals = [P.PREVIOUS] if P.PREVIOUS in state.properties else []  # no previous generation is read after it
        if P.PREVIOUS_BRANCH in state.branches:
            updates.append(RemoveSnapshotRefUpdate(ref_name=P.PREVIOUS_BRANCH))
        if step.watermark is not None:  # keeps barriers an earlier floor raised (protocol §3.6)
            properties.update(state.watermark_properties(step.watermark, head=step.to_snapshot))
        else:
            removals += [k for k in (P.WATERMARK, P.WATERMARK_SNAPSHOT) if k in state.properties]
        if removals:
            updates.append(RemovePropertiesUpdate(removals=removals))
        updates.append(SetPropertiesUpdate(updates=properties))
        expected_refs = {b: state.head(b) for b in (P.MAIN_BRANCH, P.STAGED_BRANCH, P.PREVIOUS_BRANCH)}
        try:
            store.commit(
                table,
                refs_at(expected_refs),
                updates,
                what=f"revising to barrier {fmt_barrier(barrier)}",
                take_fence=TakeFence.keeping_holder(table.metadata, "revise", state.head(P.FENCE_BRANCH)),
            )
            return step
        except FencedError:
            continue  # a job or ingest committed meanwhile: plan this table again
    raise FencedError(f"{name}: revision to barrier {fmt_barrier(barrier)} kept conflicting with other commits; retry it")


def abandon_generation(store: TableStore, table: str, *, retries: int = 10) -> RevisionResult:
    """Return ``table`` and every table downstream of it to the generation before (protocol §6.10 step 6).

    Per table, upstream first, one fenced commit: a staged regeneration is discarded, and a table with a previous
    generation (``consistent-previous``) gets it back on ``main`` with its watermark, its revision bumped, the branch
    and ``consistent.previous`` removed. Tables with neither are ``unchanged``; ``table`` with neither is refused. The
    job's definition must be reverted as well: run again with the new one, it regenerates again.
    """
    name = normalize_identifier(table)
    state = store.state(name)  # TableNotFoundError naming it
    if _abandon_step(state) is None:
        raise InvalidInputError(
            f"{name} has no new generation to abandon: no {P.PREVIOUS_BRANCH} branch and no staged regeneration (a new "
            "definition that failed never replaced the serving generation, which cuts still read); fix or revert the "
            "definition and run the job"
        )
    graph = store.lineage([name])
    policy = RetryPolicy(retries)
    steps = tuple(_abandon_table(store, t, policy) for t in affected_tables(graph, name))
    return RevisionResult(name, None, "abandon", steps)


def _abandon_step(state: TableState) -> RevisionStep | None:
    """What abandoning does to ``state`` (None: it has no new generation, published or staged)."""
    main = state.head()
    previous = state.head(P.PREVIOUS_BRANCH)
    if previous is not None:
        record = state.previous_record or {}
        return RevisionStep(state.identifier, "abandoned", main, previous, record.get("watermark"), state.revision + 1)
    staged = state.head(P.STAGED_BRANCH)
    record = state.snapshots.get(staged) if staged is not None and state.staged_ahead else None
    if record is not None and record.summary.get(P.REGENERATE) is not None:
        return RevisionStep(state.identifier, "abandoned", main, main, state.watermark_property, state.revision)
    return None


def _abandon_table(store: TableStore, name: str, policy: RetryPolicy) -> RevisionStep:
    for _ in policy.attempts():
        table, state = store.load(name)
        step = _abandon_step(state)
        if step is None:
            current = state.head()
            return RevisionStep(name, "unchanged", current, current, state.watermark_property, state.revision)
        target = step.to_snapshot
        assert target is not None
        updates: list[Any] = [
            SetSnapshotRefUpdate(ref_name=branch, type=SnapshotRefType.BRANCH, snapshot_id=target)
            for branch in ((P.MAIN_BRANCH, P.STAGED_BRANCH) if target != state.head() else (P.STAGED_BRANCH,))
        ]
        if P.PREVIOUS_BRANCH in state.branches:
            record = state.previous_record or {}
            updates.append(RemoveSnapshotRefUpdate(ref_name=P.PREVIOUS_BRANCH))
            restored = {P.REVISION: str(step.revision)}
            removals = [P.PREVIOUS]
            for key, value in ((P.WATERMARK, record.get("watermark")), (P.WATERMARK_SNAPSHOT, record.get("watermark-snapshot"))):
                if value is not None:
                    restored[key] = str(value)
                elif key in state.properties:
                    removals.append(key)
            updates += [RemovePropertiesUpdate(removals=removals), SetPropertiesUpdate(updates=restored)]
        try:
            store.commit(
                table,
                refs_at({b: state.head(b) for b in (P.MAIN_BRANCH, P.STAGED_BRANCH, P.PREVIOUS_BRANCH)}),
                updates,
                what="abandoning the new generation",
                take_fence=TakeFence.keeping_holder(table.metadata, "revise", state.head(P.FENCE_BRANCH)),
            )
            return step
        except FencedError:
            continue  # a job committed meanwhile: plan this table again
    raise FencedError(f"{name}: abandoning its new generation kept conflicting with other commits; retry it")
