"""Reading the changes of a table between two barriers (docs/protocol.md §5.10) with pyiceberg.

``consistent_catalog.changelog`` decides the range and computes the difference; this module loads the
table once and reads as few data files as the range allows: none, the appended files, the files added
and removed between the two snapshots, or (merge-on-read deletes) both snapshots whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

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

    new_tasks = _tasks(iceberg, found.to_snapshot_id)
    old_tasks = [] if found.from_snapshot_id is None else _tasks(iceberg, found.from_snapshot_id)
    if any(task.delete_files for task in (*old_tasks, *new_tasks)):
        how = "snapshots"  # merge-on-read: a file's rows depend on delete files, so read both sides whole
    else:
        how = "files"  # copy-on-write: the files live at both snapshots cancel in the difference
        old_paths = {task.file.file_path for task in old_tasks}
        new_paths = {task.file.file_path for task in new_tasks}
        old_tasks = [task for task in old_tasks if task.file.file_path not in new_paths]
        new_tasks = [task for task in new_tasks if task.file.file_path not in old_paths]
    old = _shaped(_read(iceberg, old_tasks), shape)
    new = _shaped(_read(iceberg, new_tasks), shape)
    return found, difference(old, new, keys, barrier=found.barrier), how


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
