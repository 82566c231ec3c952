"""Behaviour of ConsistentCatalog and EpochJob against a real SQLite catalog.

Checks read the Iceberg metadata and data back with plain pyiceberg (snapshot summaries, table
properties, scans at snapshot ids) and recompute expected results in Python, independently of the
project's own resolver/reader.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from consistent_catalog import ConsistentCatalog, EpochContext
from consistent_catalog import properties as P
from consistent_catalog.demo import count_words, histogram
from consistent_catalog.exceptions import (
    CycleError,
    FencedError,
    InvalidBarrierError,
    InvalidInputError,
    MalformedMetadataError,
    NoWatermarkError,
    OwnershipError,
    TableNotFoundError,
    UntrackedWriteError,
)
from tests.harness.lake import COUNTS_SCHEMA, sqlite_catalog, words

WORDS, COUNTS, HIST = "demo.words", "demo.word_counts", "demo.count_histogram"


def rows_at(catalog: SqlCatalog, table: str, snapshot_id: int | None) -> list[dict]:
    """Independent read: plain pyiceberg scan at a snapshot id (no project code)."""
    if snapshot_id is None:
        return []
    return catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


def summary(catalog: SqlCatalog, table: str, snapshot_id: int) -> dict[str, str]:
    snap = catalog.load_table(table).metadata.snapshot_by_id(snapshot_id)
    assert snap is not None and snap.summary is not None
    return dict(snap.summary.additional_properties)


def main_head(catalog: SqlCatalog, table: str) -> int | None:
    snap = catalog.load_table(table).metadata.snapshot_by_name("main")
    return None if snap is None else snap.snapshot_id


def flip_violations(catalog: SqlCatalog, ids: dict[str, int | None]) -> list[str]:
    w = rows_at(catalog, WORDS, ids[WORDS])
    c = rows_at(catalog, COUNTS, ids[COUNTS])
    h = rows_at(catalog, HIST, ids[HIST])
    problems = []
    if sum(r["cnt"] for r in c) != len(w):
        problems.append("sum(cnt) != count(words)")
    if Counter(r["word"] for r in w) != {r["word"]: r["cnt"] for r in c}:
        problems.append("word_counts is not the count of words")
    if sum(r["words"] for r in h) != len(c):
        problems.append("sum(histogram.words) != count(word_counts)")
    if Counter(r["cnt"] for r in c) != {r["cnt"]: r["words"] for r in h}:
        problems.append("count_histogram is not the histogram of word_counts")
    return problems


# --- lineage and ownership --------------------------------------------------------------------


def test_register_writes_contract_properties(cc, catalog, flip_tables):
    lease = cc.register_job("word-count", [WORDS], [COUNTS], lease_ms=60_000)
    props = catalog.load_table(COUNTS).metadata.properties
    assert props[P.JOB] == "word-count"
    assert json.loads(props[P.SOURCES]) == [WORDS]
    assert props[P.LEASE_HOLDER] == lease.instance
    assert int(props[P.LEASE_UNTIL]) == lease.until_ms
    assert P.JOB not in catalog.load_table(WORDS).metadata.properties  # roots stay unowned


def test_second_job_on_owned_sink_is_refused(cc, catalog, flip_tables):
    cc.register_job("word-count", [WORDS], [COUNTS])
    before = catalog.load_table(COUNTS).metadata_location
    with pytest.raises(OwnershipError, match="owned by job 'word-count'"):
        cc.register_job("intruder", [WORDS], [COUNTS])
    assert catalog.load_table(COUNTS).metadata_location == before


def test_expired_lease_of_another_job_is_still_refused_until_reassigned(cc, catalog, flip_tables):
    cc.register_job("word-count", [WORDS], [COUNTS], lease_ms=1)
    import time

    time.sleep(0.01)
    with pytest.raises(OwnershipError, match=r"owned by job 'word-count' \(no instance of it is running\)"):
        cc.register_job("word-count-v2", [WORDS], [COUNTS])
    assert catalog.load_table(COUNTS).metadata.properties[P.JOB] == "word-count"
    cc.reassign(COUNTS, "word-count-v2")
    cc.register_job("word-count-v2", [WORDS], [COUNTS])
    assert catalog.load_table(COUNTS).metadata.properties[P.JOB] == "word-count-v2"


def test_same_job_second_live_instance_needs_takeover(cc, catalog, flip_tables):
    first = cc.register_job("word-count", [WORDS], [COUNTS])
    with pytest.raises(OwnershipError, match="another live instance"):
        cc.register_job("word-count", [WORDS], [COUNTS])
    second = cc.register_job("word-count", [WORDS], [COUNTS], takeover=True)
    assert catalog.load_table(COUNTS).metadata.properties[P.LEASE_HOLDER] == second.instance != first.instance


_REGISTER_AND_WAIT = """
import sys, time
from pathlib import Path
from consistent_catalog import ConsistentCatalog
from tests.harness.lake import sqlite_catalog
lease = ConsistentCatalog(sqlite_catalog(Path(sys.argv[1]))).register_job("word-count", ["demo.words"], ["demo.word_counts"])
print(lease.instance, flush=True)
time.sleep(600)
"""


def test_a_lease_whose_process_was_killed_on_this_host_is_called_gone_not_live(tmp_path):
    """Issue 42.8: after a kill -9 the refusal says the holder's process is gone and names the takeover; a live holder
    is still "another live instance". The pure check is told (``holder_gone``), it never looks at the host itself."""
    import os
    import selectors
    import signal
    import subprocess
    import sys

    from consistent_catalog import write_plans
    from consistent_catalog.ownership import holder_process_gone

    catalog = sqlite_catalog(tmp_path)
    catalog.create_namespace("demo")
    catalog.create_table(WORDS, schema=words().schema)
    catalog.create_table(COUNTS, schema=COUNTS_SCHEMA)
    holder = subprocess.Popen([sys.executable, "-c", _REGISTER_AND_WAIT, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        with selectors.DefaultSelector() as waiting:  # bounded: a child stuck on the catalog fails the test, not CI
            waiting.register(holder.stdout, selectors.EVENT_READ)
            instance = holder.stdout.readline().strip() if waiting.select(timeout=120) else ""
        assert instance, "the registering process printed no instance within 120 s"
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
        holder.stdout.close()
    cc = ConsistentCatalog(catalog)
    state = cc.store.state(COUNTS)
    assert state.lease_holder == instance and json.loads(state.properties[P.LEASE_HOLDER_INFO])["pid"] == holder.pid
    assert holder_process_gone(state)
    before = catalog.load_table(COUNTS).metadata_location
    with pytest.raises(OwnershipError) as refused:
        cc.register_job("word-count", [WORDS], [COUNTS])
    message = str(refused.value)
    assert f"its process pid {holder.pid} on this host is gone" in message and "takeover=True" in message, message
    assert "another live instance" not in message, message
    assert catalog.load_table(COUNTS).metadata_location == before  # refused: nothing written
    # the same state with a holder that runs (the flag is the caller's finding): another live instance
    with pytest.raises(OwnershipError, match="another live instance"):
        write_plans.check_can_own(state, "word-count", "someone-else", False, now=state.lease_until - 1)
    cc.register_job("word-count", [WORDS], [COUNTS], takeover=True)
    assert catalog.load_table(COUNTS).metadata.properties[P.LEASE_HOLDER] != instance


def test_cycle_is_refused(cc, catalog, flip_tables):
    cc.register_job("word-count", [WORDS], [COUNTS])
    cc.register_job("count-histogram", [COUNTS], [HIST])
    before = {t: catalog.load_table(t).metadata_location for t in flip_tables}
    with pytest.raises(CycleError, match="close a cycle"):
        cc.register_job("feedback", [HIST], [WORDS])
    with pytest.raises(CycleError, match="its own source"):
        cc.register_job("self", [COUNTS], [COUNTS], takeover=True)
    assert {t: catalog.load_table(t).metadata_location for t in flip_tables} == before


def test_unknown_source_is_refused(cc, flip_tables):
    with pytest.raises(TableNotFoundError, match="demo.nope does not exist"):
        cc.register_job("j", ["demo.nope"], [COUNTS])


def test_unregister_releases_the_lease_keeps_owner_and_lineage(cc, catalog, flip_tables):
    lease = cc.register_job("word-count", [WORDS], [COUNTS])
    cc.unregister_job(lease)
    props = catalog.load_table(COUNTS).metadata.properties
    assert props[P.JOB] == "word-count" and P.LEASE_HOLDER not in props and P.LEASE_UNTIL not in props
    assert json.loads(props[P.SOURCES]) == [WORDS]
    graph = cc.lineage()
    assert graph.upstream[COUNTS] == (WORDS,)


def test_lineage_of_a_subset(cc, catalog, flip_tables):
    catalog.create_table("demo.other", schema=COUNTS_SCHEMA)
    cc.register_job("word-count", [WORDS], [COUNTS])
    cc.register_job("count-histogram", [COUNTS], [HIST])
    graph = cc.lineage([COUNTS])
    assert graph.tables == {WORDS, COUNTS, HIST}
    assert graph.topological() == [WORDS, COUNTS, HIST]
    assert "demo.other" in cc.lineage().tables


def _register_in_process(directory: str, job: str, start: mp.synchronize.Barrier, results: mp.Queue) -> None:
    cc = ConsistentCatalog(sqlite_catalog(Path(directory)))
    start.wait()
    try:
        lease = cc.register_job(job, [WORDS], [COUNTS])
        results.put((job, "won", lease.instance))
    except OwnershipError as exc:
        results.put((job, "refused", str(exc)))


@pytest.mark.slow  # 4 rounds of 2 spawned interpreters: 10-30 s on 2 cores
def test_registration_race_has_exactly_one_winner(tmp_path):
    catalog = sqlite_catalog(tmp_path)
    catalog.create_namespace("demo")
    catalog.create_table(WORDS, schema=words().schema)
    ctx = mp.get_context("spawn")
    for _ in range(4):
        try:
            catalog.drop_table(COUNTS)
        except Exception:
            pass
        catalog.create_table(COUNTS, schema=COUNTS_SCHEMA)
        start, results = ctx.Barrier(2), ctx.Queue()
        procs = [
            ctx.Process(target=_register_in_process, args=(str(tmp_path), f"job-{i}", start, results)) for i in range(2)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        outcomes = [results.get(timeout=5) for _ in procs]
        winners = [o for o in outcomes if o[1] == "won"]
        assert len(winners) == 1, outcomes
        props = catalog.load_table(COUNTS).metadata.properties
        assert props[P.JOB] == winners[0][0] and props[P.LEASE_HOLDER] == winners[0][2]


# --- epochs ------------------------------------------------------------------------------------


def test_epoch_tags_every_snapshot_with_the_contract_keys(cc, catalog, flip_tables):
    ingested = cc.ingest(WORDS, words("a", "b", "a"), barrier=1_000)
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
        result = job.run_epoch()
    assert result.barrier == 1_000
    head = main_head(catalog, COUNTS)
    assert head == result.snapshots[COUNTS]
    s = summary(catalog, COUNTS, head)
    assert s[P.BARRIER] == "1000" and s[P.JOB] == "word-count"
    assert json.loads(s[P.SOURCES]) == {WORDS: ingested.snapshot_id}
    assert Counter(r["word"] for r in rows_at(catalog, COUNTS, head)) == Counter({"a": 1, "b": 1})
    assert {r["word"]: r["cnt"] for r in rows_at(catalog, COUNTS, head)} == {"a": 2, "b": 1}
    # the staged branch carries the same snapshot, and every snapshot written after genesis is tagged
    table = catalog.load_table(COUNTS)
    assert table.metadata.refs[P.STAGED_BRANCH].snapshot_id == head
    fences = [s for s in table.metadata.snapshots if s.summary and s.summary.get(P.FENCE_REASON)]
    assert [s.snapshot_id for s in fences] == [table.metadata.refs[P.FENCE_BRANCH].snapshot_id]  # one, the ref's
    assert fences[0].summary.get(P.FENCE_JOB) == "word-count" and fences[0].parent_snapshot_id is None
    data = [s for s in table.metadata.snapshots if s not in fences]
    tagged = [s for s in data if s.summary and s.summary.get(P.BARRIER)]
    untagged = [s for s in data if not (s.summary and s.summary.get(P.BARRIER))]
    assert len(untagged) == 1 and untagged[0].summary.get("total-records") == "0"  # the empty genesis
    assert all(s.summary.get(P.BARRIER) == "1000" for s in tagged)


def test_nothing_to_do_until_a_source_advances_and_never_twice(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
        assert job.run_epoch().actions == {COUNTS: "published"}
        location = catalog.load_table(COUNTS).metadata_location
        again = job.run_epoch()
        assert again.actions == {COUNTS: "done"}
        assert catalog.load_table(COUNTS).metadata_location == location
        cc.ingest(WORDS, words("b"), barrier=2_000)
        assert job.run_epoch().barrier == 2_000
    barriers = [s.summary.get(P.BARRIER) for s in catalog.load_table(COUNTS).snapshots() if s.summary.get(P.BARRIER)]
    # overwrite = delete + append per epoch; each barrier's snapshots are one contiguous run
    assert [b for i, b in enumerate(barriers) if i == 0 or barriers[i - 1] != b] == ["1000", "2000"]


def test_empty_output_is_recorded_and_unchanged_input_only_moves_the_watermark(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)

    def only_new_z(ctx: EpochContext) -> pa.Table:
        new = ctx.read_increment(WORDS).to_pylist()
        return pa.table({"word": [r["word"] for r in new if r["word"] == "z"], "cnt": [1 for r in new if r["word"] == "z"]})

    with cc.job("z", sources=[WORDS], sinks=[COUNTS], transform=only_new_z) as job:
        # new input, empty output: an empty snapshot records barrier and inputs (the table is complete at 1000)
        assert job.run_epoch().actions == {COUNTS: "published"}
        head = main_head(catalog, COUNTS)
        s = summary(catalog, COUNTS, head)
        assert s[P.BARRIER] == "1000" and s.get("added-records") is None and s["total-records"] == "0"
        assert json.loads(s[P.SOURCES]) == {WORDS: main_head(catalog, WORDS)}
        # the root only advances its watermark: the input holds the same rows, so no snapshot, only the watermark
        cc.advance_watermark(WORDS, 2_000)
        assert job.run_epoch().actions == {COUNTS: "watermark"}
        table = catalog.load_table(COUNTS)
        assert main_head(catalog, COUNTS) == head
        assert table.metadata.properties[P.WATERMARK] == "2000"
        assert table.metadata.properties[P.WATERMARK_SNAPSHOT] == str(head)
    cut = cc.resolve([WORDS, COUNTS])
    assert cut.barrier == 2_000 and cut[COUNTS].snapshot_id == head
    assert rows_at(catalog, COUNTS, head) == []


def test_incremental_reads_get_exactly_the_new_rows(cc, catalog, flip_tables):
    seen: list[list[str]] = []

    def collect(ctx: EpochContext) -> pa.Table:
        new = sorted(r["word"] for r in ctx.read_increment(WORDS).to_pylist())
        seen.append(new)
        return pa.table({"word": new, "cnt": [1] * len(new)})

    with cc.job("copy", sources=[WORDS], sinks=[COUNTS], transform=collect) as job:
        cc.ingest(WORDS, words("a", "b"), barrier=10)
        job.run_epoch()
        cc.ingest(WORDS, words("c"), barrier=20)
        cc.ingest(WORDS, words("d", "e"), barrier=30)
        job.run_epoch()
    assert seen == [["a", "b"], ["c", "d", "e"]]
    assert sorted(r["word"] for r in rows_at(catalog, COUNTS, main_head(catalog, COUNTS))) == list("abcde")


def test_multi_source_job_aligns_sources_at_the_same_barrier(cc, catalog, flip_tables):
    catalog.create_table("demo.left", schema=words().schema)
    catalog.create_table("demo.right", schema=words().schema)
    cc.ingest("demo.left", words("l1"), barrier=100)
    cc.ingest("demo.left", words("l2"), barrier=300)
    cc.ingest("demo.right", words("r1"), barrier=200)
    inputs = {}

    def union(ctx: EpochContext) -> pa.Table:
        inputs.update(ctx.inputs)
        rows = ctx.read("demo.left").to_pylist() + ctx.read("demo.right").to_pylist()
        return pa.table({"word": [r["word"] for r in rows], "cnt": [1] * len(rows)})

    with cc.job("union", sources=["demo.left", "demo.right"], sinks=[COUNTS], transform=union, mode="overwrite") as job:
        result = job.run_epoch()
    assert result.barrier == 200  # min of the sources' watermarks
    left_ids = [s.snapshot_id for s in catalog.load_table("demo.left").snapshots()]
    assert inputs["demo.left"] == left_ids[0]  # l2 (barrier 300) is beyond T
    assert sorted(r["word"] for r in rows_at(catalog, COUNTS, main_head(catalog, COUNTS))) == ["l1", "r1"]


def test_killed_writer_staged_epoch_is_invisible_at_repeatable_read(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    job = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    job.register()
    job.run_epoch()
    published = main_head(catalog, COUNTS)
    cc.ingest(WORDS, words("b", "b"), barrier=2_000)
    plan = job.plan()
    outputs = job.run_transform(plan)
    staged = job.stage(COUNTS, plan, outputs[COUNTS]).head  # ... and the writer dies before publishing
    assert main_head(catalog, COUNTS) == published
    rr = cc.resolve([WORDS, COUNTS])
    assert rr[COUNTS].snapshot_id == published and rr.barrier == 1_000
    rc = cc.resolve([WORDS, COUNTS], level="read-committed")
    assert rc[COUNTS].snapshot_id == staged and rc.barrier == 2_000
    ru = cc.resolve([WORDS, COUNTS], level="read-uncommitted")
    assert ru.barrier is None and ru[COUNTS].snapshot_id == staged

    # a new instance takes over and publishes the staged epoch as it is (same inputs), exactly once
    restarted = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite", takeover=True)
    with restarted:
        result = restarted.run_epoch()
    assert result.actions == {COUNTS: "republished"} and main_head(catalog, COUNTS) == staged
    assert {r["word"]: r["cnt"] for r in rows_at(catalog, COUNTS, staged)} == {"a": 1, "b": 2}
    # the zombie cannot publish any more: the refusal comes from the catalog commit
    with pytest.raises(FencedError, match="refused by the catalog"):
        job.publish(COUNTS, plan, published, staged)


def test_zombie_cannot_stage_or_publish_after_takeover(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    zombie = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    zombie.register()
    plan = zombie.plan()
    successor = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite", takeover=True)
    successor.register()
    location = catalog.load_table(COUNTS).metadata_location
    with pytest.raises(FencedError):
        zombie.stage(COUNTS, plan, zombie.run_transform(plan)[COUNTS])
    with pytest.raises(FencedError):
        zombie.publish(COUNTS, plan, None, None)
    with pytest.raises(FencedError, match="taken over"):
        zombie.run_epoch()
    assert catalog.load_table(COUNTS).metadata_location == location
    assert successor.run_epoch().actions == {COUNTS: "published"}


def test_stale_staged_epoch_is_discarded_when_inputs_changed(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    job = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    job.register()
    plan = job.plan()
    job.stage(COUNTS, plan, job.run_transform(plan)[COUNTS])  # crash before publish...
    cc.ingest(WORDS, words("b"), barrier=2_000)  # ...and the source moves on meanwhile
    result = job.run_epoch()
    assert result.actions == {COUNTS: "published"} and result.barrier == 2_000
    head = main_head(catalog, COUNTS)
    assert summary(catalog, COUNTS, head)[P.BARRIER] == "2000"
    assert {r["word"]: r["cnt"] for r in rows_at(catalog, COUNTS, head)} == {"a": 1, "b": 1}
    # barrier 1000 was never published on main: main's ancestry holds only genesis + barrier 2000
    table = catalog.load_table(COUNTS)
    chain, current = [], head
    while current is not None:
        snap = table.metadata.snapshot_by_id(current)
        chain.append(snap.summary.get(P.BARRIER))
        current = snap.parent_snapshot_id
    assert "1000" not in chain


# --- reads -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_flip_invariants_hold_at_every_cut_of_a_pipeline(cc, catalog, flip_tables, seed):
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(12)]
    counter = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    hist = cc.job("count-histogram", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite")
    counter.register()
    hist.register()
    barriers: list[int] = []
    checked = 0
    for step in range(14):
        action = rng.random()
        if action < 0.45:
            cc.ingest(WORDS, words(*rng.choices(vocabulary, k=rng.randint(1, 6))), barrier=(step + 1) * 100)
        elif action < 0.75:
            counter.run_epoch()
        else:
            hist.run_epoch()
        try:
            cut = cc.resolve(flip_tables)
        except NoWatermarkError:
            continue
        assert flip_violations(catalog, cut.snapshot_ids) == []
        barriers.append(cut.barrier)
        checked += 1
    counter.run_until_caught_up()
    hist.run_until_caught_up()
    cut = cc.resolve(flip_tables)
    assert flip_violations(catalog, cut.snapshot_ids) == []
    assert cut.barrier == max(int(s.summary[P.BARRIER]) for s in catalog.load_table(WORDS).snapshots())
    assert barriers == sorted(barriers)  # T* never decreases
    assert checked > 0


def test_consistent_read_returns_the_cut_rows(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a", "b"), barrier=10)
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
        job.run_epoch()
    cc.ingest(WORDS, words("c"), barrier=20)  # not yet counted: the cut stays at 10
    read = cc.read([WORDS, COUNTS])
    assert read.cut.barrier == 10
    first = catalog.load_table(WORDS).snapshots()[0].snapshot_id
    assert sorted(read.to_arrow(WORDS)["word"].to_pylist()) == sorted(r["word"] for r in rows_at(catalog, WORDS, first))
    assert read.to_arrow(COUNTS).num_rows == 2
    assert read.cut.to_json()["tables"][WORDS] == {"snapshot_id": first, "barrier": 10}


def test_as_of_reads_a_historical_cut(cc, catalog, flip_tables):
    from datetime import datetime, timezone

    first = cc.ingest(WORDS, words("a"), barrier=1_700_000_000_000)
    cc.ingest(WORDS, words("b"), barrier=1_700_000_060_000)
    cut = cc.resolve([WORDS], as_of=datetime(2023, 11, 14, 22, 13, 30, tzinfo=timezone.utc))
    assert cut.barrier == 1_700_000_010_000 and cut[WORDS].snapshot_id == first.snapshot_id
    with pytest.raises(InvalidBarrierError, match="before the first barrier"):  # protocol §4.4
        cc.resolve([WORDS], as_of=1)


# --- roots, watermarks, bad input ----------------------------------------------------------------


def test_ingest_never_goes_below_the_watermark(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    assert cc.advance_watermark(WORDS, 5_000) == 5_000
    late = cc.ingest(WORDS, words("late"), barrier=2_000)
    assert late.barrier == 5_001
    assert summary(catalog, WORDS, late.snapshot_id)[P.BARRIER] == "5001"
    with pytest.raises(InvalidBarrierError, match="never moves back"):
        cc.advance_watermark(WORDS, 4_000)
    with pytest.raises(InvalidBarrierError, match="negative"):
        cc.advance_watermark(WORDS, -1)
    with pytest.raises(InvalidBarrierError):
        cc.advance_watermark(WORDS, "yesterday")
    assert catalog.load_table(WORDS).metadata.properties[P.WATERMARK] == "5000"


def test_idle_root_watermark_lets_the_cut_advance(cc, catalog, flip_tables):
    catalog.create_table("demo.idle", schema=words().schema)
    cc.ingest(WORDS, words("a"), barrier=1_000)
    with pytest.raises(NoWatermarkError, match="demo.idle is an empty root table"):
        cc.resolve([WORDS, "demo.idle"])
    cc.advance_watermark("demo.idle", 900)
    assert cc.resolve([WORDS, "demo.idle"]).barrier == 900
    cc.advance_watermark("demo.idle", 2_000)
    assert cc.resolve([WORDS, "demo.idle"]).barrier == 1_000


def test_derived_tables_refuse_ingest_and_manual_watermarks(cc, flip_tables):
    cc.register_job("word-count", [WORDS], [COUNTS])
    with pytest.raises(InvalidInputError, match="only root tables"):
        cc.ingest(COUNTS, pa.table({"word": ["x"], "cnt": [1]}))
    with pytest.raises(InvalidInputError, match="advances when its job"):
        cc.advance_watermark(COUNTS, 10)


def test_write_outside_the_job_makes_the_table_untracked(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
        job.run_epoch()
    catalog.load_table(COUNTS).append(pa.table({"word": ["rogue"], "cnt": [9]}, schema=COUNTS_SCHEMA))
    rogue = main_head(catalog, COUNTS)
    with pytest.raises(UntrackedWriteError, match=f"demo.word_counts: snapshot {rogue}"):
        cc.resolve([WORDS, COUNTS])


def test_malformed_properties_raise_typed_errors(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    catalog.load_table(WORDS).transaction().set_properties({P.WATERMARK: "soon"}).commit_transaction()
    with pytest.raises(MalformedMetadataError, match="consistent.watermark"):
        cc.resolve([WORDS])
    catalog.load_table(COUNTS).transaction().set_properties({P.SOURCES: "[not json"}).commit_transaction()
    with pytest.raises(MalformedMetadataError, match="not valid JSON"):
        cc.lineage()


def test_status_and_history_match_the_metadata(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_000)
    cc.ingest(WORDS, words("b"), barrier=3_000)
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
        job.run_epoch()
        rows = {r.table: r for r in cc.status([WORDS, COUNTS], now=10_000)}
        assert rows[COUNTS].lease == "live" and rows[COUNTS].job == "word-count"
    assert rows[WORDS].role == "root" and rows[WORDS].watermark == 3_000 and rows[WORDS].delay_ms == 7_000
    assert rows[COUNTS].own_delay_ms == 0 and rows[COUNTS].slowest_source == WORDS
    entries = cc.history(COUNTS)
    table = catalog.load_table(COUNTS)
    assert [e.snapshot_id for e in entries][0] == table.metadata.current_snapshot_id
    data = [s for s in table.metadata.snapshots if P.FENCE_REASON not in (s.summary or {}).additional_properties]
    assert len(entries) == len(data)  # every data snapshot; the fence ref's snapshot is not history
    assert entries[0].barrier == 3_000 and entries[0].sources == {WORDS: main_head(catalog, WORDS)}


def test_bottleneck_is_the_slowest_job_on_the_slowest_path(cc, catalog, flip_tables):
    """words -> fast (word_counts) and words -> slow (other) -> both feed count_histogram's sibling 'joined'."""
    catalog.create_table("demo.slow", schema=COUNTS_SCHEMA)
    catalog.create_table("demo.joined", schema=COUNTS_SCHEMA)

    def copy(source):
        return lambda ctx: ctx.read(source)

    fast = cc.job("fast", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    slow = cc.job("slow", sources=[WORDS], sinks=["demo.slow"], transform=count_words, mode="overwrite")
    joined = cc.job("join", sources=[COUNTS, "demo.slow"], sinks=["demo.joined"], transform=copy(COUNTS), mode="overwrite")
    for job in (fast, slow, joined):
        job.register()
    cc.ingest(WORDS, words("a"), barrier=1_000)
    for job in (fast, slow, joined):
        job.run_epoch()
    cc.ingest(WORDS, words("b"), barrier=5_000)
    fast.run_epoch()  # the slow job lags 4 s behind its source; join cannot move past it
    joined.run_epoch()
    rows = {r.table: r for r in cc.status(["demo.joined", COUNTS, "demo.slow"], now=6_000)}
    # independent computation from the raw properties/summaries
    w = {t: int(catalog.load_table(t).metadata.snapshot_by_name("main").summary[P.BARRIER]) for t in (COUNTS, "demo.slow")}
    assert w == {COUNTS: 5_000, "demo.slow": 1_000}
    assert rows["demo.slow"].own_delay_ms == 4_000 and rows["demo.slow"].bottleneck_job == "slow"
    assert rows["demo.joined"].slowest_source == "demo.slow" and rows["demo.joined"].delay_ms == 5_000
    assert rows["demo.joined"].bottleneck_job == "slow"
    assert rows[COUNTS].bottleneck_job is None and rows[COUNTS].own_delay_ms == 0


def test_epoch_history_reports_staging_and_publishing(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a", "b"), barrier=1_000)
    job = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    job.register()
    job.run_epoch()
    cc.ingest(WORDS, words("c"), barrier=2_000)
    plan = job.plan()
    job.stage(COUNTS, plan, job.run_transform(plan)[COUNTS])  # staged, not published
    entries = cc.epochs(COUNTS)
    assert [e.barrier for e in entries] == [2_000, 1_000]
    staged, published = entries
    assert staged.branch == P.STAGED_BRANCH and staged.published_at_ms is None
    table = catalog.load_table(COUNTS)
    log = {entry.snapshot_id: entry.timestamp_ms for entry in table.metadata.snapshot_log}
    assert published.published_at_ms == log[published.snapshot_ids[-1]]
    assert published.latency_ms == published.published_at_ms - 1_000
    assert published.added_records == 2 and published.total_records == 2  # overwrite: delete + append of 2 rows
    assert staged.added_records == 3 and staged.deleted_records == 2
    assert len(published.snapshot_ids) == len({s for s in published.snapshot_ids}) >= 1


def test_the_component_cut_waits_for_a_lagging_table_downstream(cc, catalog, flip_tables):
    """Protocol §4.7: resolve(words) covers words and its upstream; the component cut covers word_counts and
    count_histogram too, so a lagging histogram holds it back (what lake_consistent serves for words)."""
    counter = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    hist = cc.job("count-histogram", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite")
    with counter, hist:
        cc.ingest(WORDS, words("a", "b"), barrier=1_000)
        counter.run_until_caught_up()
        hist.run_until_caught_up()
        cc.ingest(WORDS, words("c"), barrier=2_000)
        counter.run_until_caught_up()  # count_histogram lags at 1_000
    assert cc.resolve([WORDS]).barrier == 2_000
    component = cc.resolve([WORDS], component=True)
    assert component.barrier == 1_000 and list(component.tables) == [WORDS]
    assert component[WORDS].snapshot_id == catalog.load_table(WORDS).snapshots()[0].snapshot_id  # the first ingest
    both = cc.resolve([COUNTS, WORDS], component=True)
    assert list(both.tables) == [COUNTS, WORDS] and both.barrier == 1_000
    catalog.create_table("demo.apart", schema=COUNTS_SCHEMA)
    with pytest.raises(InvalidInputError, match="not in the lineage component of demo.words"):
        cc.resolve([WORDS, "demo.apart"], component=True)
    with pytest.raises(NoWatermarkError):  # an asked table that is left out of its component's cut says why
        cc.resolve(["demo.apart"], component=True)
