"""Changes of a table between two barriers (docs/protocol.md §5.10): the range, and the net difference.

Pure: ``plan_changes`` takes a ``TableState`` and returns which snapshots bound the range and how little
of the data must be read; ``difference`` takes the two sides' rows as Arrow tables and returns the change
rows. Nothing here touches a catalog or a file (``consistent_catalog.changelog_read`` does the reading).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from consistent_catalog import properties as P
from consistent_catalog.barrier import BarrierLike, implausible, to_barrier
from consistent_catalog.exceptions import (
    HistoryExpiredError,
    InvalidBarrierError,
    InvalidInputError,
    NoWatermarkError,
)
from consistent_catalog.state import TableState
from consistent_catalog.util.time import fmt_barrier

if TYPE_CHECKING:
    import pyarrow as pa

CHANGE_TYPE = "_change_type"
"""The column naming the kind of change (Iceberg's changelog name)."""
BARRIER_COLUMN = "_barrier"
"""The column holding the barrier of the change: ``b(snap(t, T₂))``."""
INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER = "INSERT", "DELETE", "UPDATE_BEFORE", "UPDATE_AFTER"

ChangeRead = Literal["none", "appends", "files", "snapshots"]
"""How little of the data a range needs (§5.10): nothing, the appended files, the files added and removed
between the two snapshots (``files``; decided by the reader, which sees delete files), both snapshots whole."""


@dataclass(frozen=True)
class ChangeRange:
    """The range ``(snap(t, T₁), snap(t, T₂)]`` of ``main`` whose changes a read returns."""

    table: str
    from_barrier: int
    to_barrier: int
    from_snapshot_id: int | None
    """``snap(t, T₁)``; None when the table was empty at ``T₁``."""
    to_snapshot_id: int | None
    """``snap(t, T₂)``; None when the table was empty at ``T₂`` (then nothing changed)."""
    barrier: int | None
    """``b(snap(t, T₂))``: the value of every change row's ``_barrier``."""
    read: ChangeRead
    """``none`` (same data), ``appends`` (only appends in between), else ``snapshots`` (the reader may narrow it
    to the files added and removed when neither snapshot has delete files)."""


def plan_changes(state: TableState, from_barrier: BarrierLike, to_barrier: BarrierLike | None = None) -> ChangeRange:
    """The range of ``changes(t, T₁, T₂)`` on ``main`` (protocol §5.10); ``to_barrier`` None is ``W(t)``.

    Raises InvalidBarrierError for ``T₁ > T₂`` or ``T₂ > W(t)``, NoWatermarkError for a table without a
    watermark, HistoryExpiredError when ``snap(t, T₁)`` was expired (naming the oldest retained barrier).
    """
    name = state.identifier
    first = to_barrier_checked(from_barrier, "from_barrier")
    done = state.watermark()
    if done is None:
        raise NoWatermarkError(
            f"{name} has no watermark yet: nothing is complete, so it has no changes to read — ingest into it "
            "(a root) or run its job (a derived table) first",
            table=name,
            root=state.is_root,
        )
    last = done if to_barrier is None else to_barrier_checked(to_barrier, "to_barrier")
    if last > done:
        raise InvalidBarrierError(
            f"{name}: changes up to barrier {fmt_barrier(last)} are not final yet, its watermark is "
            f"{fmt_barrier(done)} ({done}) — read changes up to {done}, or wait until the table is complete at "
            f"{last} (cc.wait_for([...], barrier={last}))",
            table=name,
            barrier=done,
        )
    if first > last:
        raise InvalidBarrierError(
            f"{name}: from_barrier {first} lies after to_barrier {last}; changes run forward — give "
            "from_barrier <= to_barrier",
            table=name,
        )
    oldest_barrier = state.first_barrier()
    why = implausible(first)
    if why is not None and oldest_barrier is not None and first < oldest_barrier and not implausible(oldest_barrier):
        # an int in seconds (text never gets here: the grammar refuses it) would read the whole table as inserts
        raise InvalidBarrierError(
            f"{name}: from_barrier {first} is before the table's first barrier {fmt_barrier(oldest_barrier)}, and "
            f"{why}",
            table=name,
        )
    history = state.branch(P.MAIN_BRANCH)
    try:
        start = history.snap_at(first)
    except HistoryExpiredError as exc:
        oldest = exc.barrier
        raise HistoryExpiredError(
            f"{name}: its state at from_barrier {fmt_barrier(first)} was expired by retention (its retained "
            f"history starts at barrier {oldest}), so the changes since then cannot be computed — read the "
            f"changes from {oldest} on, or read the table whole as of {last} and continue with changes from "
            f"{last}; keep a barrier you will read changes from with a pin or a retained cut",
            table=name,
            barrier=oldest,
        ) from None
    end = history.snap_at(last)
    from_id = start[0] if start else None
    to_id, barrier = (end[0], end[1]) if end else (None, None)
    if history.same_data(from_id, to_id):
        read: ChangeRead = "none"
    elif _appends_only(state, from_id, to_id):
        read = "appends"
    else:
        read = "snapshots"
    return ChangeRange(name, first, last, from_id, to_id, barrier, read)


def to_barrier_checked(value: BarrierLike, what: str) -> int:
    try:
        return to_barrier(value)
    except InvalidBarrierError as exc:
        raise InvalidBarrierError(f"{what}: {exc}") from None


def _appends_only(state: TableState, start: int | None, end: int | None) -> bool:
    """Whether every data-changing snapshot in (start, end] is an append (compactions change no data)."""
    current = end
    while current is not None and current != start:
        record = state.snapshots.get(current)
        if record is None:
            return False  # history cut short before start: not provable
        if record.changes_data and record.operation not in ("append", "replace"):
            return False
        current = record.parent_id
    return current == start


def check_key(key: Sequence[str], columns: Sequence[str], table: str) -> tuple[str, ...]:
    """The declared key, every column of it checked against the table's columns."""
    if isinstance(key, str):
        key = [key]
    missing = [k for k in key if k not in columns]
    if missing or not key:
        raise InvalidInputError(
            f"{table}: key {list(key)} names no column {missing or ''} of the table; its columns are "
            f"{', '.join(columns)} — declare a key of those columns, or none for the difference of whole rows",
            table=table,
        )
    return tuple(dict.fromkeys(key))


def _frozen(value: object) -> Hashable:
    """A hashable stand-in that compares like the value: lists, structs and maps frozen, NaN equal to NaN."""
    if isinstance(value, float) and math.isnan(value):
        return ("__nan__",)
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value  # type: ignore[return-value]


def _rows(table: pa.Table) -> list[tuple[Hashable, ...]]:
    columns = [[_frozen(v) for v in column.to_pylist()] for column in table.columns]
    if not columns:
        return [()] * table.num_rows
    return list(zip(*columns))


def difference(old: pa.Table, new: pa.Table, key: Iterable[str] = (), *, barrier: int | None = None) -> pa.Table:
    """The change rows that turn ``old`` into ``new`` (protocol §5.10 steps 1-3), with ``_change_type`` and ``_barrier``.

    ``old`` and ``new`` hold the same columns. With ``key``, a key value with exactly one net deletion and one
    net insertion is an update (``UPDATE_BEFORE`` then ``UPDATE_AFTER``); without, the multiset difference of
    whole rows. Order: deletes, update pairs, inserts.
    """
    import pyarrow as pa

    both = pa.concat_tables([old, new], promote_options="permissive")
    netted = _net_grouped(both, old.num_rows)
    changed, signs = netted if netted is not None else _net_rows(both, old.num_rows)
    deleted = [i for i, sign in enumerate(signs) if sign < 0]
    inserted = [i for i, sign in enumerate(signs) if sign > 0]

    pairs: list[tuple[int, int]] = []
    key = list(key)
    if key and deleted and inserted:  # only the net rows are paired: usually few
        keys = _rows(changed.select(key))
        by_key: dict[tuple[Hashable, ...], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for index in deleted:
            by_key[keys[index]][0].append(index)
        for index in inserted:
            by_key[keys[index]][1].append(index)
        pairs = [(gone[0], came[0]) for gone, came in by_key.values() if len(gone) == 1 and len(came) == 1]
        paired = {i for pair in pairs for i in pair}
        deleted = [i for i in deleted if i not in paired]
        inserted = [i for i in inserted if i not in paired]

    order = deleted + [i for pair in pairs for i in pair] + inserted
    kinds = [DELETE] * len(deleted) + [UPDATE_BEFORE, UPDATE_AFTER] * len(pairs) + [INSERT] * len(inserted)
    return with_change_columns(changed.take(pa.array(order, pa.int64())), kinds, barrier)


def _net_grouped(both: pa.Table, old_rows: int) -> tuple[pa.Table, list[int]] | None:
    """Step 1 vectorised: the rows of ``both`` (the first ``old_rows`` old, the rest new) with a net count, each
    occurrence once, and its sign; None when a column's type cannot be grouped by Arrow (lists, structs, maps)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = both.column_names
    if not columns:
        return None
    sign = "__consistent_sign"
    signs = pa.array([-1] * old_rows + [1] * (both.num_rows - old_rows), pa.int64())
    try:
        grouped = both.append_column(sign, signs).group_by(columns, use_threads=False).aggregate([(sign, "sum")])
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
        return None
    grouped = grouped.filter(pc.not_equal(grouped[f"{sign}_sum"], 0))
    counts = grouped[f"{sign}_sum"].to_pylist()  # the net rows: usually few
    repeat = [index for index, count in enumerate(counts) for _ in range(abs(count))]
    return grouped.select(columns).take(pa.array(repeat, pa.int64())), [1 if counts[i] > 0 else -1 for i in repeat]


def _net_rows(both: pa.Table, old_rows: int) -> tuple[pa.Table, list[int]]:
    """Step 1 row by row (any column type): what ``_net_grouped`` returns."""
    import pyarrow as pa

    rows = _rows(both)
    net: Counter[tuple[Hashable, ...]] = Counter(rows[old_rows:])
    net.subtract(rows[:old_rows])
    deleted = _take(rows[:old_rows], {row: -count for row, count in net.items() if count < 0}, offset=0)
    inserted = _take(rows[old_rows:], {row: count for row, count in net.items() if count > 0}, offset=old_rows)
    return both.take(pa.array(deleted + inserted, pa.int64())), [-1] * len(deleted) + [1] * len(inserted)


def _take(rows: list[tuple[Hashable, ...]], wanted: dict[tuple[Hashable, ...], int], *, offset: int) -> list[int]:
    """Indices (plus ``offset``) of the first ``wanted[row]`` occurrences of each wanted row."""
    found: list[int] = []
    if not wanted:
        return found
    for index, row in enumerate(rows):
        left = wanted.get(row)
        if left:
            found.append(index + offset)
            wanted[row] = left - 1
    return found


def with_change_columns(rows: pa.Table, kinds: Sequence[str] | str, barrier: int | None) -> pa.Table:
    """``rows`` with ``_change_type`` (one kind for all, or one per row) and ``_barrier`` appended."""
    import pyarrow as pa

    count = rows.num_rows
    kinds = [kinds] * count if isinstance(kinds, str) else list(kinds)
    rows = rows.append_column(pa.field(CHANGE_TYPE, pa.string(), nullable=False), pa.array(kinds, pa.string()))
    return rows.append_column(pa.field(BARRIER_COLUMN, pa.int64()), pa.array([barrier] * count, pa.int64()))
