"""Every pyiceberg internal consistent-catalog relies on, in one place.

pyiceberg is pinned to a minor range (``>=0.12,<0.13``); these are the places where we go past its
public API, each with the reason and the assumption it makes. ``tests/catalog/test_pyiceberg_contract.py``
asserts every assumption against the installed pyiceberg, so an upgrade that breaks one fails that
test, by name, instead of corrupting a table. Nothing here runs at import time: the one registration
(``remove_snapshots_keeping_parents``) happens on first use.

1. ``summary_parts``: a snapshot summary's properties from pydantic's private dict (the public
   ``additional_properties`` property costs ~2 µs per snapshot on the resolution hot path) and the
   operation's ``_value_`` (``Enum.value`` goes through a descriptor). Falls back to the public API.
2. ``commit_transaction_once``: commits a pyiceberg ``Transaction`` with extra requirements, once,
   without pyiceberg's commit-retry path. That path (0.12) treats a failed requirement as a
   concurrent update, drops every ``assert-ref-snapshot-id``, rebuilds the snapshot and re-validates
   it, so a fenced-out writer sees ``ValidationException`` instead of ``FencedError`` (or, with a
   fence expressed as a ref assertion, would silently lose the fence). ``Transaction._stage`` also
   keeps only the first requirement of each type; sending the list ourselves keeps every one.
3. ``remove_snapshots_keeping_parents``: ``remove-snapshots`` applied the way Java Iceberg applies
   it (children keep their parent id); pyiceberg 0.12 nulls the parent id of a removed snapshot's
   children, which would make the oldest retained snapshot look like the table's first one.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import (
    AssertTableUUID,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
    RemoveStatisticsUpdate,
    TableRequirement,
    ValidatableTableRequirement,
)

if TYPE_CHECKING:
    from pyiceberg.table import Transaction
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Summary

__all__ = [
    "ValidatableTableRequirement",
    "commit_transaction_once",
    "remove_snapshots_keeping_parents",
    "summary_parts",
]


# --- 1. the summary fast path ------------------------------------------------------------------
def summary_parts(summary: Summary) -> tuple[str, Mapping[str, str]]:
    """(operation, summary properties) of a pyiceberg ``Summary``, equal to the public properties."""
    try:
        properties = summary.__pydantic_private__["_additional_properties"]
    except (AttributeError, KeyError, TypeError):
        properties = summary.additional_properties
    operation = summary.operation
    return operation._value_ if isinstance(operation, Operation) else str(operation), properties


# --- 2. one commit, exactly the requirements intended --------------------------------------------
def transaction_requirements(tx: Transaction, extra: Sequence[TableRequirement] = ()) -> tuple[TableRequirement, ...]:
    """The requirement list ``commit_transaction_once`` sends: the writer's own, ``extra``, the table's uuid."""
    return (*tx._requirements, *extra, AssertTableUUID(uuid=tx.table_metadata.table_uuid))


def commit_transaction_once(tx: Transaction, extra: Sequence[TableRequirement] = ()) -> bool:
    """Commit ``tx`` with ``extra`` requirements in one catalog commit; False when it had nothing to commit.

    Raises whatever the catalog raises (``CommitFailedException`` when a requirement fails); the
    files written for the transaction are then deleted, as pyiceberg does after a failed commit.
    """
    producers = list(tx._snapshot_producers)
    if not tx._updates:
        for producer in producers:
            producer._clean_all_uncommitted()
        return False
    table = tx._table
    try:
        table.catalog.commit_table(table, transaction_requirements(tx, extra), tx._updates)
    except BaseException:
        for producer in producers:
            producer._clean_all_uncommitted()
        raise
    for producer in producers:
        producer._cleanup_uncommitted()
    tx._updates, tx._requirements, tx._snapshot_producers = (), (), []
    return True


# --- 3. remove-snapshots the Java way ---------------------------------------------------------------
class RemoveSnapshotsKeepingParents(RemoveSnapshotsUpdate):
    """``remove-snapshots``, serialised exactly like it, applied so that children keep their parent id.

    REST servers apply it their own way, which for Java is this one; with the dangling id kept,
    resolution knows the history was cut short and reports a barrier before it as expired history.
    """


def remove_snapshots_keeping_parents(snapshot_ids: Iterable[int]) -> RemoveSnapshotsKeepingParents:
    _register_remove_snapshots_keeping_parents()
    return RemoveSnapshotsKeepingParents(snapshot_ids=list(snapshot_ids))


@functools.cache
def _register_remove_snapshots_keeping_parents() -> None:
    from pyiceberg.table.update import _apply_table_update, _TableMetadataUpdateContext

    @_apply_table_update.register(RemoveSnapshotsKeepingParents)
    def _apply(
        update: RemoveSnapshotsKeepingParents, base_metadata: TableMetadata, context: _TableMetadataUpdateContext
    ) -> TableMetadata:
        # idempotent: a snapshot that a concurrent expiry removed already is simply gone
        removed = set(update.snapshot_ids) & {s.snapshot_id for s in base_metadata.snapshots}
        metadata = base_metadata
        for name, ref in base_metadata.refs.items():
            if ref.snapshot_id in removed:
                metadata = _apply_table_update(RemoveSnapshotRefUpdate(ref_name=name), metadata, context)
        for statistics in base_metadata.statistics:
            if statistics.snapshot_id in removed:
                metadata = _apply_table_update(RemoveStatisticsUpdate(snapshot_id=statistics.snapshot_id), metadata, context)
        context.add_update(update)
        return metadata.model_copy(
            update={
                "snapshots": [s for s in metadata.snapshots if s.snapshot_id not in removed],
                "snapshot_log": [e for e in metadata.snapshot_log if e.snapshot_id not in removed],
            }
        )

