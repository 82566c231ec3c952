"""Reading the changes of a table between two barriers (docs/protocol.md §5.10) with pyiceberg.

``consistent_catalog.changelog`` decides the range and computes the difference; this module loads the
table once and reads as few data files as the range allows: none, the appended files, the files added
and removed between the two snapshots, or (merge-on-read deletes) both snapshots whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from consistent_catalog.barrier import BarrierLike
from consistent_catalog.changelog import INSERT, ChangeRange, check_key, difference, plan_changes, with_change_columns
from consistent_catalog.read import empty_read
from consistent_catalog.util.identifiers import normalize_identifier

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import FileScanTask, Table

    from consistent_catalog.commit import TableStore


def read_changes(
    store: TableStore,
    table: str,
    from_barrier: BarrierLike,
    to_barrier: BarrierLike | None = None,
    *,
    key: Sequence[str] | str | None = None,
) -> pa.Table:
    """``changes(table, T₁, T₂)`` as Arrow: the table's columns plus ``_change_type`` and ``_barrier`` (§5.10)."""
    return read_change_range(store, table, from_barrier, to_barrier, key=key)[1]


def read_change_range(
    store: TableStore,
    table: str,
    from_barrier: BarrierLike,
    to_barrier: BarrierLike | None = None,
    *,
    key: Sequence[str] | str | None = None,
) -> tuple[ChangeRange, pa.Table, str]:
    """The range, its change rows, and which read produced them (``none``, ``appends``, ``files``, ``snapshots``)."""
    name = normalize_identifier(table)
    loaded = store.load(name)
    iceberg = loaded.table
    found = plan_changes(loaded.state, from_barrier, to_barrier)
    columns = [field.name for field in iceberg.schema().fields]
    if key is not None:
        keys = check_key([key] if isinstance(key, str) else list(key), columns, name)
    else:
        schema = iceberg.schema()
        keys = tuple(schema.find_column_name(i) or "" for i in schema.identifier_field_ids)
    shape = empty_read(iceberg).schema

    if found.read == "none" or found.to_snapshot_id is None:
        return found, with_change_columns(shape.empty_table(), [], found.barrier), "none"
    if found.read == "appends":
        added = iceberg.incremental_append_scan(
            from_snapshot_id_exclusive=found.from_snapshot_id, to_snapshot_id_inclusive=found.to_snapshot_id
        ).to_arrow()
        return found, with_change_columns(_shaped(added, shape), INSERT, found.barrier), "appends"

    swapped = _files_swapped(iceberg, found.from_snapshot_id, found.to_snapshot_id)
    if swapped is not None:
        how = "files"  # copy-on-write: only the files the range removed and added; the others cancel
        old_tasks, new_tasks = swapped
    else:
        how = "snapshots"  # merge-on-read: a file's rows depend on delete files, so read both sides whole
        new_tasks = _tasks(iceberg, found.to_snapshot_id)
        old_tasks = [] if found.from_snapshot_id is None else _tasks(iceberg, found.from_snapshot_id)
    old = _shaped(_read(iceberg, old_tasks), shape)
    new = _shaped(_read(iceberg, new_tasks), shape)
    return found, difference(old, new, keys, barrier=found.barrier), how


def _files_swapped(table: Table, start: int | None, end: int) -> tuple[list[FileScanTask], list[FileScanTask]] | None:
    """The data files live at ``start`` but not at ``end`` and the other way round, from the manifests the snapshots
    in (start, end] wrote (their own ADDED and DELETED entries), as scan tasks; None when delete files are live at
    ``start`` or added in the range (merge-on-read), or the range is not one line of ``main``'s ancestry."""
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
    from pyiceberg.table import FileScanTask

    metadata = table.metadata
    chain = []
    current: int | None = end
    while current is not None and current != start:
        snapshot = metadata.snapshot_by_id(current)
        if snapshot is None:
            return None
        chain.append(snapshot)
        current = snapshot.parent_snapshot_id
    if current != start:
        return None
    first = None if start is None else metadata.snapshot_by_id(start)
    if first is not None and (first.summary is None or first.summary.get("total-delete-files") != "0"):
        return None  # deletes live at the start (or unknown): its files' rows are not the files' whole content
    added: dict[str, Any] = {}
    removed: dict[str, Any] = {}
    for snapshot in reversed(chain):  # oldest first: a file added and removed within the range cancels
        for manifest in snapshot.manifests(table.io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            if manifest.content != ManifestContent.DATA:
                return None
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                if entry.snapshot_id != snapshot.snapshot_id:
                    continue  # an existing file carried into a rewritten manifest
                path = entry.data_file.file_path
                if entry.status == ManifestEntryStatus.ADDED:
                    if removed.pop(path, None) is None:
                        added[path] = entry.data_file
                elif entry.status == ManifestEntryStatus.DELETED:
                    if added.pop(path, None) is None:
                        removed[path] = entry.data_file
    return [FileScanTask(f) for f in removed.values()], [FileScanTask(f) for f in added.values()]


def _tasks(table: Table, snapshot_id: int) -> list[FileScanTask]:
    return list(table.scan(snapshot_id=snapshot_id).plan_files())


def _read(table: Table, tasks: Iterable[FileScanTask]) -> pa.Table:
    """The rows of ``tasks`` in the table's current schema (older files projected by field id)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    return ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(list(tasks))


def _shaped(rows: pa.Table, shape: pa.Schema) -> pa.Table:
    """``rows`` with the column types of ``shape`` (pyiceberg returns ``large_string`` for empty reads)."""
    if rows.schema.equals(shape, check_metadata=False):
        return rows
    import pyarrow as pa

    return pa.Table.from_arrays([rows.column(f.name).cast(f.type) for f in shape], schema=shape)
