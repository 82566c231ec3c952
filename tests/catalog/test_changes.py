"""Changes between barriers (protocol §5.10): ``cc.changes`` against an independent recount.

Every expectation is computed here from pyiceberg alone: ``snap(t, T)`` from the snapshot summaries along
``main`` (every epoch is tagged, barriers rise), both sides scanned whole with pyiceberg, and the expected
change set counted with ``collections.Counter`` — never from consistent-catalog's own output.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from consistent_catalog import properties as P
from consistent_catalog.changelog_read import read_change_range
from consistent_catalog.demo import count_words
from consistent_catalog.exceptions import HistoryExpiredError, InvalidBarrierError, InvalidInputError, NoWatermarkError
from consistent_catalog.retention import RetentionPolicy
from consistent_catalog.state import encode_table_sources
from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA, words

KEYED, BAG = "demo.accounts", "demo.accounts_bag"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "tier", StringType(), required=False),
    NestedField(3, "balance", LongType(), required=False),
    identifier_field_ids=[1],
)
ARROW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("tier", pa.string()), pa.field("balance", pa.int64())])
BARRIERS = [50, 100, 200, 250, 300, 400, 500, 600]  # 50: before the first epoch; 250: between two


def rows(*items: tuple[int, str, int]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "tier": t, "balance": b} for i, t, b in items], schema=ARROW)


def tag(barrier: int) -> dict[str, str]:
    return {P.BARRIER: str(barrier)}


def write_epochs(catalog, name: str, *, keyed: bool) -> None:
    """Epochs of every kind on a derived table (its job's snapshots share the epoch's barrier, protocol §3.2 rule 6)."""
    schema = SCHEMA if keyed else Schema(*SCHEMA.fields)
    table = catalog.create_table(name, schema=schema, properties={P.SOURCES: encode_table_sources(["demo.upstream"])})
    table.append(rows((1, "a", 10), (2, "a", 20), (3, "b", 30), (4, "b", 40), (5, "c", 50)), snapshot_properties=tag(100))
    extra = [] if keyed else [(1, "a", 10)]  # a whole row twice: the keyless difference counts it
    table.append(rows((6, "c", 60), (7, "c", 70), *extra), snapshot_properties=tag(200))
    # a merge epoch: one row updated, one inserted (copy-on-write: a delete and an append, both at 300)
    table.upsert(rows((2, "z", 21), (8, "a", 80)), join_cols=["id"], snapshot_properties=tag(300))
    table.delete("id == 3", snapshot_properties=tag(400))
    # an overwrite epoch rewriting the whole table with one row changed: the changes are that one row
    current = table.scan().to_arrow().to_pylist()
    table.overwrite(
        pa.Table.from_pylist([{**r, "balance": 41} if r["id"] == 4 else r for r in current], schema=ARROW),
        snapshot_properties=tag(500),
    )
    table.overwrite(rows((6, "d", 61)), overwrite_filter="id == 6", snapshot_properties=tag(600))


def snap_id(table, barrier: int) -> int | None:
    """snap(t, T) recounted: the newest snapshot of main's ancestry whose tagged barrier is <= T."""
    found, current = None, table.metadata.current_snapshot_id
    chain = []
    while current is not None:
        snapshot = table.metadata.snapshot_by_id(current)
        if snapshot is None:
            break
        chain.append(snapshot)
        current = snapshot.parent_snapshot_id
    for snapshot in reversed(chain):
        if int(snapshot.summary[P.BARRIER]) <= barrier:
            found = snapshot
    return None if found is None else found.snapshot_id


def content(table, barrier: int) -> list[tuple]:
    snapshot_id = snap_id(table, barrier)
    if snapshot_id is None:
        return []
    return [(r["id"], r["tier"], r["balance"]) for r in table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()]


def as_changes(changes: pa.Table) -> Counter:
    return Counter((r["id"], r["tier"], r["balance"], r["_change_type"]) for r in changes.to_pylist())


def expected_keyed(old: list[tuple], new: list[tuple]) -> Counter:
    before, after = {r[0]: r for r in old}, {r[0]: r for r in new}
    expected: Counter = Counter()
    for key in before.keys() | after.keys():
        was, now = before.get(key), after.get(key)
        if was == now:
            continue
        if was is None:
            expected[(*now, "INSERT")] += 1
        elif now is None:
            expected[(*was, "DELETE")] += 1
        else:
            expected[(*was, "UPDATE_BEFORE")] += 1
            expected[(*now, "UPDATE_AFTER")] += 1
    return expected


def expected_bag(old: list[tuple], new: list[tuple]) -> Counter:
    inserted, deleted = Counter(new) - Counter(old), Counter(old) - Counter(new)
    return Counter({(*r, "INSERT"): n for r, n in inserted.items()}) + Counter({(*r, "DELETE"): n for r, n in deleted.items()})


def applied(old: list[tuple], changes: pa.Table) -> Counter:
    result = Counter(old)
    for r in changes.to_pylist():
        row = (r["id"], r["tier"], r["balance"])
        if r["_change_type"] in ("DELETE", "UPDATE_BEFORE"):
            assert result[row] > 0, f"{r} deletes a row the old side does not hold"
            result[row] -= 1
        else:
            result[row] += 1
    return +result


@pytest.mark.parametrize("backend", ["sqlite"])
def test_changes_between_any_two_barriers_turn_one_snapshot_into_the_other(cc, catalog) -> None:
    write_epochs(catalog, KEYED, keyed=True)
    write_epochs(catalog, BAG, keyed=False)
    for name, expected_of in ((KEYED, expected_keyed), (BAG, expected_bag)):
        table = catalog.load_table(name)
        at = {barrier: content(table, barrier) for barrier in BARRIERS}
        for first, last in itertools.combinations_with_replacement(BARRIERS, 2):
            old, new = at[first], at[last]
            changes = cc.changes(name, first, last)
            assert applied(old, changes) == Counter(new), (name, first, last)
            assert as_changes(changes) == expected_of(old, new), (name, first, last)
            to_id = snap_id(table, last)
            barrier = None if to_id is None else int(table.metadata.snapshot_by_id(to_id).summary[P.BARRIER])
            assert set(changes["_barrier"].to_pylist()) <= {barrier}
    # the overwrite epoch that rewrote the whole table is one update, not the table deleted and re-inserted
    assert as_changes(cc.changes(KEYED, 400, 500)) == Counter({(4, "b", 40, "UPDATE_BEFORE"): 1, (4, "b", 41, "UPDATE_AFTER"): 1})
    # a key declared on the keyless table pairs its updates
    assert as_changes(cc.changes(BAG, 250, 300, key="id")) == Counter({(2, "a", 20, "UPDATE_BEFORE"): 1,
                                                                      (2, "z", 21, "UPDATE_AFTER"): 1,
                                                                      (8, "a", 80, "INSERT"): 1})


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_range_reads_only_what_changed(cc, catalog) -> None:
    write_epochs(catalog, KEYED, keyed=True)
    assert [read_change_range(cc.store, KEYED, a, b)[2] for a, b in ((300, 399), (50, 200), (100, 200), (200, 600))] == [
        "none", "appends", "appends", "files",
    ]
    # defaults: up to the watermark
    assert cc.changes(KEYED, 500).num_rows == 2  # id 6 updated at 600
    assert cc.changes(KEYED, 600).num_rows == 0


def test_changes_of_a_derived_table_written_by_overwrite_epochs(cc, catalog) -> None:
    catalog.create_table("demo.words", schema=WORDS_SCHEMA)
    catalog.create_table("demo.word_counts", schema=COUNTS_SCHEMA)
    with cc.job("counter", sources=["demo.words"], sinks=["demo.word_counts"], transform=count_words,
                mode="overwrite") as job:
        for barrier, batch in ((1_000, ("a", "b", "c")), (2_000, ("a", "d")), (3_000, ("b",))):
            cc.ingest("demo.words", words(*batch), barrier=barrier)
            job.run_epoch()
    counts = catalog.load_table("demo.word_counts")
    changes = cc.changes("demo.word_counts", 1_000, 3_000, key=["word"])
    # recount: the counts at each barrier from the words themselves
    got = Counter((r["word"], r["cnt"], r["_change_type"]) for r in changes.to_pylist())
    assert got == Counter({("a", 1, "UPDATE_BEFORE"): 1, ("a", 2, "UPDATE_AFTER"): 1,
                           ("b", 1, "UPDATE_BEFORE"): 1, ("b", 2, "UPDATE_AFTER"): 1, ("d", 1, "INSERT"): 1})
    head = counts.metadata.current_snapshot_id
    assert set(changes["_barrier"].to_pylist()) == {int(counts.metadata.snapshot_by_id(head).summary[P.BARRIER])}
    # without a key: the multiset difference of whole rows
    keyless = Counter((r["word"], r["cnt"], r["_change_type"]) for r in cc.changes("demo.word_counts", 1_000, 3_000).to_pylist())
    assert keyless == Counter({("a", 1, "DELETE"): 1, ("a", 2, "INSERT"): 1, ("b", 1, "DELETE"): 1, ("b", 2, "INSERT"): 1,
                               ("d", 1, "INSERT"): 1})


@pytest.mark.parametrize("backend", ["sqlite"])
def test_bad_ranges_and_expired_history_give_typed_errors(cc, catalog) -> None:
    write_epochs(catalog, KEYED, keyed=True)
    with pytest.raises(InvalidBarrierError, match=r"from_barrier 400 lies after to_barrier 300"):
        cc.changes(KEYED, 400, 300)
    with pytest.raises(InvalidBarrierError, match=r"not final yet, its watermark is .*\(600\)") as found:
        cc.changes(KEYED, 100, 700)
    assert found.value.barrier == 600
    with pytest.raises(InvalidBarrierError, match=r"from_barrier: "):
        cc.changes(KEYED, "yesterday-ish")
    with pytest.raises(InvalidInputError, match=r"key \['nope'\] names no column .*id, tier, balance"):
        cc.changes(KEYED, 100, key="nope")
    catalog.create_table("demo.empty", schema=SCHEMA, properties={P.SOURCES: encode_table_sources(["demo.upstream"])})
    with pytest.raises(NoWatermarkError, match="demo.empty has no watermark"):
        cc.changes("demo.empty", 0)

    # a root whose older snapshots retention expired
    catalog.create_table("demo.events", schema=WORDS_SCHEMA)
    for barrier in (1_000, 2_000, 3_000):
        cc.ingest("demo.events", words(str(barrier)), barrier=barrier)
    expired = cc.retention.expire(["demo.events"], RetentionPolicy(older_than=0, keep_last=1))
    assert expired.expired.get("demo.events", 0) == 2
    with pytest.raises(HistoryExpiredError, match=r"expired by retention .* starts at barrier 3000\).*changes from 3000 on") as gone:
        cc.changes("demo.events", 1_000, 3_000)
    assert gone.value.barrier == 3_000 and gone.value.table == "demo.events"
    assert cc.changes("demo.events", 3_000, 3_000).num_rows == 0
