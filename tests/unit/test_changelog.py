"""The pure difference of protocol §5.10 (``consistent_catalog.changelog.difference``), property-tested.

The expectation is recounted here with ``collections.Counter``: applying the changes to the old rows gives the
new rows exactly, the changes are the net multiset difference (nothing that both sides hold), and with a key
that is unique on both sides every key whose row changed is exactly one UPDATE_BEFORE/UPDATE_AFTER pair.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from consistent_catalog.changelog import difference

SCHEMA = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.string()), pa.field("x", pa.float64())])
ROW = st.tuples(st.integers(0, 4) | st.none(), st.sampled_from(["a", "b", None]), st.sampled_from([0.5, float("nan"), None]))


def table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)


def norm(row: tuple) -> tuple:
    return tuple("nan" if isinstance(v, float) and v != v else v for v in row)


def changes_of(result: pa.Table) -> list[tuple[tuple, str]]:
    return [(norm((r["k"], r["v"], r["x"])), r["_change_type"]) for r in result.to_pylist()]


@settings(max_examples=200, deadline=None)
@given(st.lists(ROW, max_size=12), st.lists(ROW, max_size=12), st.booleans())
def test_the_changes_turn_old_into_new_and_are_the_net_difference(old: list[tuple], new: list[tuple], keyed: bool) -> None:
    result = difference(table(old), table(new), ["k"] if keyed else [], barrier=7)
    assert result.column_names == [*SCHEMA.names, "_change_type", "_barrier"]
    assert set(result["_barrier"].to_pylist()) <= {7}
    changes = changes_of(result)
    before, after = Counter(norm(r) for r in old), Counter(norm(r) for r in new)
    removed = Counter(row for row, kind in changes if kind in ("DELETE", "UPDATE_BEFORE"))
    added = Counter(row for row, kind in changes if kind in ("INSERT", "UPDATE_AFTER"))
    assert removed == before - after and added == after - before  # applying them gives `new`, and nothing cancels
    if not keyed:
        assert {kind for _, kind in changes} <= {"INSERT", "DELETE"}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 6), ROW), st.dictionaries(st.integers(0, 6), ROW))
def test_with_a_unique_key_every_changed_key_is_one_update_pair(old: dict, new: dict) -> None:
    old_rows = [(k, *r[1:]) for k, r in old.items()]
    new_rows = [(k, *r[1:]) for k, r in new.items()]
    result = changes_of(difference(table(old_rows), table(new_rows), ["k"]))
    expected = []
    for key in old.keys() | new.keys():
        was = norm((key, *old[key][1:])) if key in old else None
        now = norm((key, *new[key][1:])) if key in new else None
        if was == now:
            continue
        if was is None:
            expected.append((now, "INSERT"))
        elif now is None:
            expected.append((was, "DELETE"))
        else:
            expected += [(was, "UPDATE_BEFORE"), (now, "UPDATE_AFTER")]
    assert Counter(result) == Counter(expected)
    # each UPDATE_AFTER follows its UPDATE_BEFORE
    for i, (row, kind) in enumerate(result):
        if kind == "UPDATE_AFTER":
            assert result[i - 1][1] == "UPDATE_BEFORE" and result[i - 1][0][0] == row[0]


def test_columns_arrow_cannot_group_are_differenced_row_by_row() -> None:
    """A list column (Arrow's group_by refuses it) takes the row-by-row path, with the same answer."""
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("tags", pa.list_(pa.string()))])
    old = pa.Table.from_pylist([{"k": 1, "tags": ["a"]}, {"k": 2, "tags": ["b"]}, {"k": 3, "tags": None}], schema=schema)
    new = pa.Table.from_pylist([{"k": 1, "tags": ["a"]}, {"k": 2, "tags": ["b", "c"]}, {"k": 4, "tags": []},
                                {"k": 4, "tags": []}], schema=schema)
    got = Counter((r["k"], tuple(r["tags"]) if r["tags"] is not None else None, r["_change_type"])
                  for r in difference(old, new, ["k"]).to_pylist())
    assert got == Counter({(2, ("b",), "UPDATE_BEFORE"): 1, (2, ("b", "c"), "UPDATE_AFTER"): 1, (3, None, "DELETE"): 1,
                           (4, (), "INSERT"): 2})
