"""Hand-built snapshots and TableStates for the pure tests (no catalog, no I/O).

One set of builders for every test that needs metadata written out by hand: the barrier, resolver,
completeness, epoch-planning, lineage, report and retention-planning tests and the pipeline simulation.
Each builder writes the summary keys and counters a real writer would (an ingest adds rows, an epoch of
a job records its barrier, job, inputs and attempt, a genesis is the empty untagged append ``EpochJob``
commits on an empty sink), so tests state only what matters to them. ``EVERYTHING`` is the retention
policy that the expiry tests, pure and on catalogs, share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from consistent_catalog import properties as P
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.retention.policy import RetentionPolicy
from consistent_catalog.state import TableState, encode_summary_sources, encode_table_sources

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
MAIN = P.MAIN_BRANCH
STAGED = P.STAGED_BRANCH
EMPTY_TOTALS = {"total-records": "0", "total-data-files": "0", "total-delete-files": "0"}
"""What pyiceberg writes on a snapshot of an empty table."""


def snapshot(
    snapshot_id: int,
    parent: int | None = None,
    ts: int = 0,
    *,
    barrier: int | str | None = None,
    op: str = "append",
    job: str | None = None,
    sources: Mapping[str, int | None] | None = None,
    summary: Mapping[str, str] | None = None,
) -> SnapshotRecord:
    """Any snapshot: ``barrier``, ``job`` and ``sources`` become ``consistent.*`` summary keys on top of ``summary``."""
    values = dict(summary or {})
    if barrier is not None:
        values[P.BARRIER] = str(barrier)
    if job is not None:
        values[P.JOB] = job
    if sources is not None:
        values[P.SOURCES] = encode_summary_sources(sources)
    return SnapshotRecord(snapshot_id, parent, ts, op, values)


def ingest(
    snapshot_id: int, parent: int | None, barrier: int, *, ts: int | None = None, added: int = 1, total: int = 1
) -> SnapshotRecord:
    """A root's append tagged with ``barrier`` (as ``ConsistentCatalog.ingest`` writes it); ``ts`` defaults to barrier + 5."""
    counters = {"added-records": str(added), "total-records": str(total)}
    return snapshot(snapshot_id, parent, barrier + 5 if ts is None else ts, barrier=barrier, summary=counters)


def epoch(
    snapshot_id: int,
    parent: int | None,
    barrier: int,
    *,
    job: str,
    sources: Mapping[str, int | None],
    ts: int | None = None,
    added: int = 1,
    total: int = 1,
    attempt: str | None = None,
) -> SnapshotRecord:
    """A snapshot of one epoch of ``job`` at ``barrier`` that read ``sources``; ``ts`` defaults to barrier + 1000.

    ``attempt``: the staging attempt's ``consistent.attempt`` (left out when None).
    """
    summary = {"added-data-files": "1", "added-records": str(added), "total-records": str(total)}
    if attempt is not None:
        summary[P.ATTEMPT] = attempt
    return snapshot(
        snapshot_id, parent, barrier + 1000 if ts is None else ts, barrier=barrier, job=job, sources=sources,
        summary=summary,
    )


def genesis(
    snapshot_id: int, *, job: str, parent: int | None = None, ts: int = 0, totals: Mapping[str, str] = EMPTY_TOTALS
) -> SnapshotRecord:
    """The untagged empty append ``EpochJob`` commits on an empty sink before its first epoch."""
    return snapshot(snapshot_id, parent, ts, job=job, summary=totals)


def compaction(snapshot_id: int, parent: int, ts: int, *, total: int = 1) -> SnapshotRecord:
    """A ``replace`` snapshot (rewritten files, same rows) without any ``consistent.*`` key."""
    counters = {"added-data-files": "1", "deleted-data-files": "3", "total-records": str(total)}
    return snapshot(snapshot_id, parent, ts, op="replace", summary=counters)


def derived_properties(job: str, *sources: str) -> dict[str, str]:
    """The table properties a registered job writes on its sink."""
    return {P.JOB: job, P.SOURCES: encode_table_sources(list(sources))}


def table_state(
    identifier: str,
    records: Iterable[SnapshotRecord],
    branches: Mapping[str, int] | None = None,
    properties: Mapping[str, str] | None = None,
    *,
    head: int | None = None,
    main_log: tuple[tuple[int, int], ...] = (),
) -> TableState:
    """A TableState from its snapshots; ``head`` is a shortcut for ``branches={"main": head}``."""
    refs = dict(branches or {})
    if head is not None:
        refs[MAIN] = head
    return TableState(identifier, {r.snapshot_id: r for r in records}, refs, dict(properties or {}), main_log=main_log)


def root_state(name: str, barriers: list[int], watermark: int | None = None) -> TableState:
    """A root with one ingest per barrier: snapshot ids 1, 2, ... (one row each), committed at their barrier."""
    records = [ingest(i + 1, i or None, b, ts=b, total=i + 1) for i, b in enumerate(barriers)]
    props = {} if watermark is None else {P.WATERMARK: str(watermark)}
    return table_state(name, records, {MAIN: len(barriers)} if barriers else {}, props)


def derived_state(
    name: str, sources: list[str], epochs: list[tuple[int, Mapping[str, int | None]]], first_id: int, *, job: str
) -> TableState:
    """A derived table: a genesis at ``first_id``, then one snapshot per (barrier, inputs) epoch on main."""
    records = [genesis(first_id, job=job, ts=T0)]
    for i, (barrier, inputs) in enumerate(epochs, start=1):
        records.append(epoch(first_id + i, first_id + i - 1, barrier, job=job, sources=inputs, ts=T0, total=i))
    return table_state(name, records, {MAIN: first_id + len(epochs)}, derived_properties(job, *sources))


EVERYTHING = RetentionPolicy(older_than=0)
"""A retention policy under which every snapshot is old enough to expire: expiry keeps only what something needs."""
