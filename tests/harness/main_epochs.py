"""What a table's ``main`` branch holds, read from its Iceberg metadata alone (pyiceberg): an independent reader of
the protocol's summary keys (protocol §2.1), for exactly-once checks and for recounts at a barrier.

``main_epochs(metadata)`` groups the snapshots of main's history (oldest first) by ``consistent.barrier``;
``exactly_once_problems`` says where a sink's main breaks "every epoch exactly once": a barrier published twice
(two separate runs of it), a barrier staged by more than one attempt, a snapshot without a barrier after the
genesis; ``snapshot_at(metadata, T)`` is ``snap(X, T)`` (protocol §3.4) on main.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

BARRIER, ATTEMPT, JOB = "consistent.barrier", "consistent.attempt", "consistent.job"


def _summary(snapshot: Snapshot) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties) if snapshot.summary is not None else {}


def main_history(metadata: TableMetadata) -> list[Snapshot]:
    """main's snapshots, oldest first (following parent ids from main's head)."""
    head = metadata.snapshot_by_name("main")
    chain: list[Snapshot] = []
    while head is not None:
        chain.append(head)
        head = None if head.parent_snapshot_id is None else metadata.snapshot_by_id(head.parent_snapshot_id)
    return chain[::-1]


@dataclass(frozen=True)
class MainEpoch:
    """One run of consecutive main snapshots with the same barrier."""

    barrier: int
    attempts: frozenset[str]
    jobs: frozenset[str]
    snapshot_ids: tuple[int, ...]  # oldest first

    @property
    def head(self) -> int:
        return self.snapshot_ids[-1]


def main_epochs(metadata: TableMetadata) -> tuple[list[MainEpoch], list[int]]:
    """(epochs, snapshots without a barrier) of main, oldest first; the genesis (the first snapshot, empty and
    without a barrier) is neither."""
    epochs: list[MainEpoch] = []
    untagged: list[int] = []
    for position, snapshot in enumerate(main_history(metadata)):
        summary = _summary(snapshot)
        if BARRIER not in summary:
            if not (position == 0 and summary.get("total-records", "0") == "0"):
                untagged.append(snapshot.snapshot_id)
            continue
        barrier = int(summary[BARRIER])
        attempt = frozenset({summary[ATTEMPT]} if ATTEMPT in summary else set())
        job = frozenset({summary[JOB]} if JOB in summary else set())
        if epochs and epochs[-1].barrier == barrier:
            last = epochs[-1]
            epochs[-1] = MainEpoch(barrier, last.attempts | attempt, last.jobs | job,
                                   (*last.snapshot_ids, snapshot.snapshot_id))
        else:
            epochs.append(MainEpoch(barrier, attempt, job, (snapshot.snapshot_id,)))
    return epochs, untagged


def exactly_once_problems(name: str, metadata: TableMetadata) -> list[str]:
    """Where a sink's main is not "every epoch exactly once" (empty when it is)."""
    epochs, untagged = main_epochs(metadata)
    problems = [f"{name}: snapshot {s} on main carries no barrier" for s in untagged]
    barriers = [e.barrier for e in epochs]
    if barriers != sorted(set(barriers)):
        problems.append(f"{name}: barriers on main are not strictly increasing (one published twice?): {barriers}")
    for epoch in epochs:
        if len(epoch.attempts) != 1:
            problems.append(f"{name}: barrier {epoch.barrier} on main was written by attempts {sorted(epoch.attempts)}")
    return problems


def snapshot_at(metadata: TableMetadata, barrier: int) -> int | None:
    """``snap(X, T)`` on main: the newest snapshot whose barrier is at most ``barrier`` (None: none is)."""
    found = None
    for snapshot in main_history(metadata):
        own = _summary(snapshot).get(BARRIER)
        if own is not None and int(own) <= barrier:
            found = snapshot.snapshot_id
    return found
