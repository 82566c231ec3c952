"""Revisions against a catalog (docs/protocol.md §8): roll a table and everything downstream back to a barrier.

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
        if step.watermark is not None:  # keeps barriers an earlier floor raised (protocol §3.6)
            properties.update(state.watermark_properties(step.watermark, head=step.to_snapshot))
        else:
            removals = [k for k in (P.WATERMARK, P.WATERMARK_SNAPSHOT) if k in state.properties]
            if removals:
                updates.append(RemovePropertiesUpdate(removals=removals))
        updates.append(SetPropertiesUpdate(updates=properties))
        expected_refs = {b: state.head(b) for b in (P.MAIN_BRANCH, P.STAGED_BRANCH)}
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
