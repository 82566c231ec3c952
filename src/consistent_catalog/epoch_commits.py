"""The metadata commits of an epoch (docs/protocol.md §5.2-§5.3), pure: what each commit requires and changes.

``EpochJob`` (``consistent_catalog.epoch``) sends exactly these; the JVM plugin's
``core/EpochCommits.java`` builds the same, and the conformance corpus (``tests/conformance``)
compares both in Iceberg's REST JSON. Requirements come in the order they are sent: the fence as
planned first, then the refs the commit builds on; the table uuid is added by ``TableStore`` when it
sends. A commit that adds a snapshot (the genesis; the staged data write's own) takes it from the
caller: creating one writes its manifest list, which is I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetPropertiesUpdate, SetSnapshotRefUpdate

from consistent_catalog import properties as P
from consistent_catalog.commit import refs_at
from consistent_catalog.epoch_plan import EpochPlan, SinkPlan
from consistent_catalog.state import TableState, encode_summary_sources
from consistent_catalog.util.time import fmt_barrier

if TYPE_CHECKING:
    from pyiceberg.table.snapshots import Snapshot

__all__ = ["Commit", "branch_ref", "fenced", "genesis", "genesis_updates", "publish", "reset", "staged_write", "summary"]


@dataclass(frozen=True)
class Commit:
    """One catalog commit of an epoch: its requirements (without the table uuid) and its updates."""

    what: str
    """What the commit does, for messages (``"publishing barrier ..."``)."""
    requirements: tuple[AssertRefSnapshotId, ...]
    updates: tuple[Any, ...]


def branch_ref(name: str, snapshot_id: int) -> SetSnapshotRefUpdate:
    """Point branch ``name`` at ``snapshot_id`` (creating it when absent)."""
    return SetSnapshotRefUpdate(ref_name=name, type=SnapshotRefType.BRANCH, snapshot_id=snapshot_id)


def fenced(fence: int | None, refs: Mapping[str, int | None]) -> tuple[AssertRefSnapshotId, ...]:
    """What every commit of an epoch requires (protocol §6.3): the fence ref as planned, then ``refs`` in order."""
    return tuple(refs_at({P.FENCE_BRANCH: fence, **refs}))


def genesis_updates(snapshot: Snapshot) -> tuple[Any, ...]:
    """Add the empty ``snapshot`` and make it ``main``'s head: an empty sink's first snapshot (Iceberg branches need
    one). Registration sends these in its own commit (protocol §6.1), an epoch after a revision emptied the sink."""
    return AddSnapshotUpdate(snapshot=snapshot), branch_ref(P.MAIN_BRANCH, snapshot.snapshot_id)


def genesis(plan: SinkPlan, snapshot: Snapshot) -> Commit:
    """§5.2 step 1: the genesis ``snapshot`` of a sink without ``main`` (a revision emptied it); main must be absent."""
    return Commit("creating the genesis snapshot", fenced(plan.fence, {P.MAIN_BRANCH: None}), genesis_updates(snapshot))


def reset(plan: SinkPlan, base: int, staged: int | None) -> Commit:
    """§5.2 step 2: point ``consistent-staged`` (now at ``staged``) at main's head ``base``, discarding a stale epoch."""
    return Commit(
        "resetting the staged branch",
        fenced(plan.fence, {P.MAIN_BRANCH: base, P.STAGED_BRANCH: staged}),
        (branch_ref(P.STAGED_BRANCH, base),),
    )


def staged_write(plan: SinkPlan, base: int) -> tuple[AssertRefSnapshotId, ...]:
    """§5.2 step 3: what the staged data write requires (its updates are the writer's: the snapshot and its ref)."""
    return fenced(plan.fence, {P.STAGED_BRANCH: base, P.MAIN_BRANCH: base})


def summary(plan: EpochPlan, job: str, attempt: str, regenerate: str | None = None) -> dict[str, str]:
    """The summary keys every snapshot of one staging attempt carries (protocol §2.1): the definition's
    fingerprint only when the job knows it, ``consistent.regenerate`` on a new generation's epoch (§6.10)."""
    keys = {
        P.BARRIER: str(plan.barrier),
        P.JOB: job,
        P.SOURCES: encode_summary_sources(plan.inputs),
        P.ATTEMPT: attempt,
    }
    if plan.definition is not None:
        keys[P.DEFINITION] = plan.definition
    if regenerate is not None:
        keys[P.REGENERATE] = regenerate
    return keys


def publish(
    plan: EpochPlan, sink: str, state: TableState, main_head: int | None, staged_head: int | None, *, lease_until: int
) -> Commit:
    """§5.3: ``main`` to the staged head (``staged_head`` given), or the watermark to T on ``main_head``
    (``state``: the sink as read before publishing), and the lease renewed to ``lease_until``. A new generation's
    publish is its switch (§6.10 step 3)."""
    refs: dict[str, int | None] = {P.MAIN_BRANCH: main_head}
    updates: list[Any] = []
    if plan.sinks[sink].action == "regenerate" and staged_head is not None:
        assert plan.barrier is not None
        previous = state.head(P.PREVIOUS_BRANCH)
        refs[P.STAGED_BRANCH] = staged_head
        refs[P.PREVIOUS_BRANCH] = previous
        updates.append(branch_ref(P.MAIN_BRANCH, staged_head))
        properties = {
            P.LEASE_UNTIL: str(lease_until),
            P.REVISION: str(state.revision + 1),
            # overrides for main's history as it is (§3.6); the new floor starts at the staged head
            **state.watermark_properties(plan.barrier, main_head),
            P.WATERMARK_SNAPSHOT: str(staged_head),
        }
        if previous is None and main_head is not None:
            updates.append(branch_ref(P.PREVIOUS_BRANCH, main_head))
            properties.update(state.previous_properties())
        updates.append(SetPropertiesUpdate(updates=properties))
    elif staged_head is not None:
        refs[P.STAGED_BRANCH] = staged_head
        updates.append(branch_ref(P.MAIN_BRANCH, staged_head))
        updates.append(SetPropertiesUpdate(updates={P.LEASE_UNTIL: str(lease_until)}))
    else:
        assert plan.barrier is not None
        updates.append(SetPropertiesUpdate(updates={P.LEASE_UNTIL: str(lease_until), **state.watermark_properties(plan.barrier)}))
    return Commit(f"publishing barrier {fmt_barrier(plan.barrier)}", fenced(plan.sinks[sink].fence, refs), tuple(updates))
