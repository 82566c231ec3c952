"""The fence ref (protocol §6.3): standard requirements only, the exact list sent, who moves the fence.

Every test runs on each backend of the ``backend`` fixture. The requirement lists are observed on the
way to the real catalog (a spy around ``commit_table`` that forwards every call), never replaced.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import count_words
from consistent_catalog.exceptions import CatalogConfigError, FencedError
from consistent_catalog.retention.expire import commit_expiry
from consistent_catalog.retention.policy import RetentionPolicy
from tests.harness.lake import words

WORDS, COUNTS, HIST = "demo.words", "demo.word_counts", "demo.count_histogram"
STANDARD = (AssertRefSnapshotId, AssertTableUUID)
EVERYTHING = RetentionPolicy(older_than=0, keep_last=1)


class Spy:
    """Records (table, requirements, updates) of every commit and forwards it unchanged."""

    def __init__(self, catalog: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, tuple, tuple]] = []
        original = catalog.commit_table

        def commit_table(table, requirements, updates):  # type: ignore[no-untyped-def]
            self.calls.append((".".join(table.name()), tuple(requirements), tuple(updates)))
            return original(table, requirements, updates)

        monkeypatch.setattr(catalog, "commit_table", commit_table)

    def refs(self, index: int = -1) -> dict[str, int | None]:
        _, requirements, _ = self.calls[index]
        return {r.ref: r.snapshot_id for r in requirements if isinstance(r, AssertRefSnapshotId)}


def fence_of(catalog: Any, table: str) -> int | None:
    ref = catalog.load_table(table).metadata.refs.get(P.FENCE_BRANCH)
    return None if ref is None else ref.snapshot_id


def fence_snapshots(catalog: Any, table: str) -> list[Any]:
    return [s for s in catalog.load_table(table).metadata.snapshots if P.FENCE_REASON in s.summary.additional_properties]


@pytest.mark.no_faults
def test_every_commit_of_an_epoch_sends_only_standard_requirements_with_the_planned_fence(cc, catalog, flip_tables, monkeypatch):
    cc.ingest(WORDS, words("a", "b"), barrier=1_000)
    job = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    job.register()
    fence = fence_of(catalog, COUNTS)
    assert fence is not None and fence_snapshots(catalog, COUNTS)[0].summary[P.FENCE_HOLDER] == job.lease.instance
    spy = Spy(catalog, monkeypatch)
    job.run_epoch()
    assert spy.calls, "the epoch committed nothing"
    for table, requirements, _ in spy.calls:
        assert table == COUNTS
        assert all(isinstance(r, STANDARD) for r in requirements), [type(r).__name__ for r in requirements]
        refs = [r.ref for r in requirements if isinstance(r, AssertRefSnapshotId)]
        assert len(refs) == len(set(refs)), refs  # one assertion per ref, none collapsed
        assert {r.ref: r.snapshot_id for r in requirements if isinstance(r, AssertRefSnapshotId)}[P.FENCE_BRANCH] == fence
    head = catalog.load_table(COUNTS).metadata.refs[P.STAGED_BRANCH].snapshot_id
    _, requirements, _ = spy.calls[-1]  # the publish: fence, main as planned, staged at the staged head, uuid
    assert spy.refs() == {P.FENCE_BRANCH: fence, P.MAIN_BRANCH: job.cc.store.state(COUNTS).snapshots[head].parent_id,
                          P.STAGED_BRANCH: head}
    assert type(requirements[-1]) is AssertTableUUID
    assert fence_of(catalog, COUNTS) == fence  # an epoch does not move the fence
    job.unregister()


def test_a_takeover_fences_out_the_zombie_inside_the_catalog(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    zombie = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    zombie.register()
    plan = zombie.plan()
    successor = ConsistentCatalog(type(catalog)(catalog.name, **catalog.properties)).job(
        "word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite", takeover=True)
    successor.register()
    assert fence_of(catalog, COUNTS) != plan.sinks[COUNTS].fence
    before = catalog.load_table(COUNTS).metadata_location
    with pytest.raises(FencedError, match=P.FENCE_BRANCH):
        zombie.stage(COUNTS, plan, pa.table({"word": ["z"], "cnt": [1]}))
    assert catalog.load_table(COUNTS).metadata_location == before  # nothing landed
    successor.run_epoch()
    assert Counter({r["word"]: r["cnt"] for r in catalog.load_table(COUNTS).scan().to_arrow().to_pylist()}) == {"a": 1}
    assert len(fence_snapshots(catalog, COUNTS)) == 1  # the takeover replaced the first registration's


def test_a_revision_moves_the_fence_and_the_owner_replans_with_it(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
        job.run_epoch()
        cc.ingest(WORDS, words("b"), barrier=2_000)
        job.run_epoch()
        before = fence_of(catalog, COUNTS)
        cc.revise(WORDS, 1_500)  # rolls demo.word_counts back to its epoch at 1000
        assert fence_of(catalog, COUNTS) != before
        assert fence_snapshots(catalog, COUNTS)[0].summary[P.FENCE_REASON] == "revise"
        assert fence_snapshots(catalog, COUNTS)[0].summary[P.FENCE_HOLDER] == job.lease.instance  # holder kept
        cc.ingest(WORDS, words("c"), barrier=3_000)
        results = job.run_until_caught_up()  # the owner carries on with the new fence
        assert results and results[-1].barrier == 3_000
    counts = {r["word"]: r["cnt"] for r in catalog.load_table(COUNTS).scan().to_arrow().to_pylist()}
    assert counts == {"a": 1, "c": 1}  # b was revised away (barrier 2000 > 1500)


def test_a_pin_refuses_an_expiry_planned_before_it(cc, catalog, flip_tables):
    for barrier, word in ((1_000, "a"), (2_000, "b"), (3_000, "c")):
        cc.ingest(WORDS, words(word), barrier=barrier)
    plan, loaded = cc.retention.plan([WORDS], EVERYTHING)
    assert plan.tables[WORDS].expire  # the stale plan would remove the older snapshots
    pinned = cc.pins.pin([WORDS], as_of=1_000, ttl="1h")
    with pytest.raises(FencedError, match=P.FENCE_BRANCH):
        commit_expiry(cc.store, loaded[WORDS], plan.tables[WORDS])
    result = cc.retention.expire([WORDS], EVERYTHING)  # planned again: the pin holds its snapshot
    assert result.expired[WORDS] >= 1
    assert catalog.load_table(WORDS).metadata.refs[pinned.tag].snapshot_id == pinned.tables[WORDS]
    assert pinned.to_arrow(WORDS)["word"].to_pylist() == ["a"]


def test_idle_advances_keep_one_fence_snapshot_and_delete_the_old_manifest_lists(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    lists = []
    for barrier in range(2_000, 7_000, 1_000):
        cc.advance_watermark(WORDS, barrier)
        fences = fence_snapshots(catalog, WORDS)
        assert len(fences) == 1 and fences[0].snapshot_id == fence_of(catalog, WORDS)
        assert fences[0].parent_snapshot_id is None and fences[0].summary[P.FENCE_REASON] == "advance"
        lists.append(fences[0].manifest_list)
    table = catalog.load_table(WORDS)
    assert table.scan(snapshot_id=fence_of(catalog, WORDS)).to_arrow().num_rows == 0  # holds no data
    assert [table.io.new_input(path).exists() for path in lists] == [False] * 4 + [True]
    assert cc.store.state(WORDS).watermark() == 6_000


def test_ingest_planned_before_an_advance_is_refused_and_lands_above_it(cc, catalog, flip_tables, monkeypatch):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    stale = cc.store.load(WORDS)
    cc.advance_watermark(WORDS, 5_000)
    loads = iter([stale])
    original = cc.store.load
    monkeypatch.setattr(cc.store, "load", lambda name: next(loads, None) or original(name))
    result = cc.ingest(WORDS, words("b"), barrier=2_000)  # planned with W=1000, refused, planned again
    assert result.barrier == 5_001  # the late-snapshot rule with the advanced watermark


def test_a_nessie_catalog_is_refused_before_anything_is_written(tmp_path):
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path}",
                         **{"nessie.is-nessie-catalog": "true"})
    with pytest.raises(CatalogConfigError, match="Nessie"):
        ConsistentCatalog(catalog)


def test_a_table_fenced_the_old_way_keeps_working_and_is_migrated_by_the_next_registration(cc, catalog, flip_tables):
    from pyiceberg.table.update import RemoveSnapshotRefUpdate

    cc.ingest(WORDS, words("a"), barrier=1_000)
    old = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    old.register()
    old.run_epoch()
    # what an earlier version left: the ownership properties, the epochs, no consistent-fence
    table = catalog.load_table(COUNTS)
    catalog.commit_table(table, (), (RemoveSnapshotRefUpdate(ref_name=P.FENCE_BRANCH),))
    assert fence_of(catalog, COUNTS) is None and cc.store.state(COUNTS).lease_holder == old.lease.instance
    cc.ingest(WORDS, words("b"), barrier=2_000)
    assert old.run_epoch().actions == {COUNTS: "published"}  # keeps working: asserts the fence absent
    new = ConsistentCatalog(type(catalog)(catalog.name, **catalog.properties)).job(
        "word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite", takeover=True)
    new.register()  # migrates: creates the fence
    assert fence_of(catalog, COUNTS) is not None
    cc.ingest(WORDS, words("c"), barrier=3_000)
    with pytest.raises(FencedError, match="taken over"):
        old.run_epoch()
    assert new.run_epoch().actions == {COUNTS: "published"}
    counts = {r["word"]: r["cnt"] for r in catalog.load_table(COUNTS).scan().to_arrow().to_pylist()}
    assert counts == {"a": 1, "b": 1, "c": 1}
