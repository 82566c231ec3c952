"""What broke when the project was tried as a new user would (issue #10), on real catalogs.

Every expectation is checked against the table metadata or rows read with plain pyiceberg, never
against the library's own report of what it did.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pyarrow as pa
import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import count_words, histogram
from consistent_catalog.exceptions import (
    FencedError,
    InvalidBarrierError,
    InvalidInputError,
    NoWatermarkError,
    UntrackedWriteError,
)
from consistent_catalog.retention.refs import PIN_PREFIX
from consistent_catalog.util.time import now_ms
from tests.harness.catalogue import refused, snapshot_of
from tests.harness.lake import COUNTS_SCHEMA, words

WORDS, COUNTS, HIST = "demo.words", "demo.word_counts", "demo.count_histogram"


def rows(catalog, name: str, snapshot_id: int | None = None) -> list[dict]:
    table = catalog.load_table(name)
    if snapshot_id is None and table.metadata.current_snapshot_id is None:
        return []
    return table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


@pytest.fixture
def pipeline(cc, flip_tables):
    """Words ingested at two barriers; word-count and count-histogram caught up; jobs released."""
    cc.ingest(WORDS, words("a", "b", "a"), barrier=1_000)
    cc.ingest(WORDS, words("c"), barrier=2_000)
    for name, source, sink, transform in (("word-count", WORDS, COUNTS, count_words),
                                          ("count-histogram", COUNTS, HIST, histogram)):
        with cc.job(name, sources=[source], sinks=[sink], transform=transform, mode="overwrite") as job:
            job.run_until_caught_up()
    return cc


# --- item 2: exactly-once roots -------------------------------------------------------------------
def test_an_ingest_key_lands_once(cc, catalog, flip_tables) -> None:
    first = cc.ingest(WORDS, words("a", "b"), key="batch-1", barrier=1_000)
    again = cc.ingest(WORDS, words("a", "b"), key="batch-1", barrier=1_000)
    other = cc.ingest(WORDS, words("c"), key="batch-2", barrier=2_000)
    assert (first.skipped, again.skipped, other.skipped) == (False, True, False)
    assert again.snapshot_id == first.snapshot_id
    table = catalog.load_table(WORDS)
    assert len(table.metadata.snapshots) == 2
    assert sorted(r["word"] for r in rows(catalog, WORDS)) == ["a", "b", "c"]
    keys = [s.summary.additional_properties.get(P.INGEST_KEY) for s in table.metadata.snapshots]
    assert sorted(keys) == ["batch-1", "batch-2"]


def test_concurrent_ingests_of_one_key_land_once(catalog, flip_tables, tmp_path) -> None:
    """Two writers (each its own catalog connection) ingest the same keys at the same moment."""
    writers = [ConsistentCatalog(catalog), ConsistentCatalog(type(catalog)("lake", **catalog.properties))]
    rounds = 6
    results: list[list] = [[], []]

    def ingest(index: int, start: threading.Barrier) -> None:
        for round_ in range(rounds):
            start.wait()
            batch = words(*(f"r{round_}-{i}" for i in range(5)))
            results[index].append(writers[index].ingest(WORDS, batch, key=f"round-{round_}"))

    start = threading.Barrier(2)
    threads = [threading.Thread(target=ingest, args=(i, start)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    found = Counter(r["word"] for r in rows(catalog, WORDS))
    assert len(found) == rounds * 5 and set(found.values()) == {1}, found
    for round_ in range(rounds):  # exactly one of the two landed it, the other was told it was done
        assert sorted([results[0][round_].skipped, results[1][round_].skipped]) == [False, True]


def test_a_key_is_refused_when_empty(cc, catalog, flip_tables) -> None:
    refused(catalog, InvalidInputError, "ingest key", lambda: cc.ingest(WORDS, words("a"), key=" "))


# --- item 3: a foreign write makes a table untracked from that snapshot on -----------------------
def test_a_foreign_write_is_recoverable(pipeline, catalog) -> None:
    cc = pipeline
    before = cc.resolve([WORDS, COUNTS, HIST])
    catalog.load_table(COUNTS).append(pa.table({"word": ["zzz"], "cnt": [7]}, schema=COUNTS_SCHEMA))
    foreign = catalog.load_table(COUNTS).metadata.current_snapshot_id

    with pytest.raises(UntrackedWriteError) as raised:  # the latest cut names the table and the snapshot
        cc.resolve([WORDS, COUNTS, HIST])
    assert COUNTS in str(raised.value) and str(foreign) in str(raised.value) and "revise" in str(raised.value)
    historical = cc.resolve([WORDS, COUNTS, HIST], as_of=before.barrier)  # cuts before it still resolve
    assert historical.snapshot_ids == before.snapshot_ids
    assert cc.resolve([WORDS], level="read-uncommitted")[WORDS].snapshot_id is not None
    assert cc.resolve([COUNTS], level="read-uncommitted")[COUNTS].snapshot_id == foreign
    status = {s.table: s for s in cc.status([WORDS, COUNTS, HIST])}
    assert status[COUNTS].untracked_since == foreign and status[WORDS].untracked_since is None

    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
        cc.ingest(WORDS, words("d"), barrier=3_000)
        with pytest.raises(UntrackedWriteError):  # never published on top of the foreign rows
            job.run_epoch()
        assert catalog.load_table(COUNTS).metadata.current_snapshot_id == foreign

        cc.revise(COUNTS, before.barrier)  # the documented way out
        assert catalog.load_table(COUNTS).metadata.current_snapshot_id == before[COUNTS].snapshot_id
        job.run_until_caught_up()
    counts = {r["word"]: r["cnt"] for r in rows(catalog, COUNTS)}
    assert counts == dict(Counter(r["word"] for r in rows(catalog, WORDS))) and "zzz" not in counts


# --- item 4: watermarks are guarded ----------------------------------------------------------------
def test_a_watermark_in_the_future_is_refused_unless_insisted(pipeline, catalog) -> None:
    cc = pipeline
    refused(catalog, InvalidBarrierError, "in the future", lambda: cc.advance_watermark(WORDS, "2030-01-01T00:00:00Z"))
    refused(catalog, InvalidBarrierError, "in the future",
            lambda: cc.ingest(WORDS, words("x"), barrier=now_ms() + 3_600_000))
    refused(catalog, InvalidBarrierError, "never moves back", lambda: cc.advance_watermark(WORDS, 1_500))
    before = snapshot_of(catalog)
    assert cc.advance_watermark(WORDS, 2_000) == 2_000  # the same barrier again: a no-op
    assert snapshot_of(catalog) == before
    soon = now_ms() + 60_000  # within the default clock-skew allowance
    assert cc.advance_watermark(WORDS, soon) == soon
    far = now_ms() + 10 * 86_400_000
    assert cc.advance_watermark(WORDS, far, allow_future=True) == far
    assert catalog.load_table(WORDS).metadata.properties[P.WATERMARK] == str(far)


def set_clock_skew(catalog, name: str, skew_ms: int) -> None:
    """Set the table property the way a user does: a plain pyiceberg property update."""
    with catalog.load_table(name).transaction() as tx:
        tx.set_properties({P.CLOCK_SKEW: str(skew_ms)})


def test_the_clock_skew_property_widens_and_narrows_the_allowance(pipeline, catalog) -> None:
    cc = pipeline
    assert P.CLOCK_SKEW == "consistent.clock-skew-ms"  # the documented key (docs/protocol.md §2)
    hour, day = 3_600_000, 86_400_000
    refused(catalog, InvalidBarrierError, "in the future", lambda: cc.advance_watermark(WORDS, now_ms() + hour))

    set_clock_skew(catalog, WORDS, 2 * day)  # wider: an hour ahead is now accepted, three days still are not
    ahead = now_ms() + hour
    assert cc.advance_watermark(WORDS, ahead) == ahead
    assert catalog.load_table(WORDS).metadata.properties[P.WATERMARK] == str(ahead)
    refused(catalog, InvalidBarrierError, r"consistent\.clock-skew-ms",
            lambda: cc.advance_watermark(WORDS, now_ms() + 3 * day))
    later = now_ms() + 2 * hour
    assert cc.ingest(WORDS, words("x"), barrier=later).barrier == later  # ingests follow the same allowance
    head = catalog.load_table(WORDS).metadata.current_snapshot_id
    assert catalog.load_table(WORDS).metadata.snapshot_by_id(head).summary[P.BARRIER] == str(later)

    idle = "demo.idle"  # narrower: a root allowing no barrier beyond the clock at all
    catalog.create_table(idle, schema=words().schema)
    soon = now_ms() + 60_000
    assert cc.advance_watermark(idle, soon) == soon  # within the default allowance...
    set_clock_skew(catalog, idle, 0)
    refused(catalog, InvalidBarrierError, "in the future", lambda: cc.advance_watermark(idle, now_ms() + 120_000))
    refused(catalog, InvalidBarrierError, "in the future",  # ...and no longer, for ingests too
            lambda: cc.ingest(idle, words("y"), barrier=now_ms() + 120_000))
    assert catalog.load_table(idle).metadata.properties[P.WATERMARK] == str(soon)
    far = now_ms() + 3 * day
    assert cc.advance_watermark(idle, far, allow_future=True) == far  # insisting still works
    assert catalog.load_table(idle).metadata.properties[P.WATERMARK] == str(far)


# --- item 5: barriers that cannot be meant ---------------------------------------------------------
def test_an_as_of_in_seconds_is_refused(cc, catalog, flip_tables) -> None:
    cc.ingest(WORDS, words("a"))  # barriers at the current time, as in a real pipeline
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
        job.run_until_caught_up()
    seconds = now_ms() // 1000
    refused(catalog, InvalidBarrierError, "milliseconds", lambda: cc.resolve([WORDS, COUNTS], as_of=seconds))
    refused(catalog, InvalidBarrierError, "before the first barrier", lambda: cc.pins.pin([WORDS, COUNTS], as_of=5))
    assert all(not ref.startswith(P.TAG_PREFIX) for ref in catalog.load_table(WORDS).metadata.refs)


def test_a_pin_of_a_cut_that_holds_nothing_is_refused_and_tags_nothing(cc, catalog) -> None:
    """An as-of before any barrier of tables that have none (empty roots with only a watermark) passes
    the as-of guard, but the cut holds no snapshot: there is nothing to pin."""
    empty = ["demo.left", "demo.right"]
    watermark = now_ms() - 60_000
    for name in empty:
        catalog.create_table(name, schema=words().schema)
        cc.advance_watermark(name, watermark)
    refs_before = {name: set(catalog.load_table(name).metadata.refs) for name in empty}
    for as_of in (watermark - 10_000, None):
        refused(catalog, InvalidInputError, "nothing to pin", lambda as_of=as_of: cc.pins.pin(empty, as_of=as_of))
    for name in empty:
        refs = catalog.load_table(name).metadata.refs
        assert set(refs) == refs_before[name]
        assert not any(ref.startswith(PIN_PREFIX) for ref in refs)
        assert all(ref.snapshot_ref_type.value != "tag" for ref in refs.values())
    assert cc.pins.list() == []


# --- item 6: a revise that changes nothing commits nothing -----------------------------------------
def test_a_revise_to_a_later_barrier_changes_nothing(pipeline, catalog) -> None:
    cc = pipeline
    before = snapshot_of(catalog)
    assert now_ms() - 1_000 > max(cc.resolve([WORDS, COUNTS, HIST]).barrier, 0)  # later than every barrier, not ahead
    result = cc.revise(WORDS, now_ms() - 1_000)
    assert {s.action for s in result.steps} == {"unchanged"}
    assert snapshot_of(catalog) == before  # no commit at all: metadata locations unchanged
    assert all(P.REVISION not in catalog.load_table(t).metadata.properties for t in (WORDS, COUNTS, HIST))


def test_an_as_of_in_the_future_is_refused_by_every_reader(pipeline, catalog) -> None:
    """Protocol §4.4, as the Spark plugin refuses spark.sql.consistent.asOf: a future as-of would read the newest
    cut now and another one later. Within the clock-skew allowance it is the newest cut, as before."""
    cc = pipeline
    ahead = now_ms() + 365 * 86_400_000
    for read in (lambda: cc.resolve([WORDS, COUNTS], as_of=ahead), lambda: cc.read([WORDS], as_of=ahead),
                 lambda: cc.resolve([WORDS], as_of=ahead, component=True), lambda: cc.pins.pin([WORDS], as_of=ahead)):
        refused(catalog, InvalidBarrierError, "as-of .* lies .* in the future", read)
    assert cc.resolve([WORDS], as_of=now_ms() + 60_000).barrier == cc.resolve([WORDS]).barrier


def test_a_revise_to_a_future_barrier_is_refused(pipeline, catalog) -> None:
    """Issue #20: like a future watermark, a revision barrier beyond now plus the clock-skew allowance is refused
    (it used to report success while changing nothing)."""
    cc = pipeline
    refused(catalog, InvalidBarrierError, "revision barrier .* lies .* in the future",
            lambda: cc.revise(WORDS, now_ms() + 365 * 86_400_000))
    within = cc.revise(WORDS, now_ms() + 60_000)  # inside the 5-minute clock-skew allowance: a no-op, as before
    assert {s.action for s in within.steps} == {"unchanged"}


# --- item 13: a zombie in overwrite mode is fenced out with FencedError -------------------------
def test_a_frozen_overwrite_zombie_gets_fenced_error(cc, catalog, flip_tables) -> None:
    cc.ingest(WORDS, words("a", "b"), barrier=1_000)
    zombie = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    zombie.register()
    successor = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite",
                       takeover=True)
    prepare = zombie.prepare_staged_branch

    def frozen(sink: str, plan=None):
        prepared = prepare(sink, plan)  # the zombie passed its ownership check and is about to write...
        cc.ingest(WORDS, words("c"), barrier=2_000)
        successor.register()  # ...when a successor takes over and publishes
        successor.run_until_caught_up()
        return prepared

    zombie.prepare_staged_branch = frozen  # type: ignore[method-assign]
    with pytest.raises(FencedError):
        zombie.run_epoch()
    assert {r["word"]: r["cnt"] for r in rows(catalog, COUNTS)} == {"a": 1, "b": 1, "c": 1}
    successor.unregister()


# --- item 14: empty reads carry the table's own Arrow types --------------------------------------
def test_an_empty_and_a_non_empty_source_union(cc, catalog) -> None:
    for name in ("demo.left", "demo.right"):
        catalog.create_table(name, schema=words().schema)
    catalog.create_table("demo.both", schema=words().schema)
    cc.ingest("demo.left", words("a", "b"), barrier=1_000)
    cc.advance_watermark("demo.right", 1_000)  # complete, and empty

    def union(ctx):
        return pa.concat_tables([ctx.read("demo.left"), ctx.read("demo.right"), ctx.read_increment("demo.right")])

    with cc.job("union", sources=["demo.left", "demo.right"], sinks=["demo.both"], transform=union) as job:
        job.run_until_caught_up()
    assert sorted(r["word"] for r in rows(catalog, "demo.both")) == ["a", "b"]
    read = cc.read(["demo.left", "demo.right"])
    assert pa.concat_tables([read.to_arrow("demo.left"), read.to_arrow("demo.right")]).num_rows == 2


# --- item 15: who holds a table back, and idle sources ---------------------------------------------
def test_no_watermark_names_the_job_that_holds_a_derived_table_back(cc, catalog, flip_tables) -> None:
    cc.ingest(WORDS, words("a"), barrier=1_000)
    cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite").register()
    cc.job("count-histogram", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite").register()
    with pytest.raises(NoWatermarkError) as raised:
        cc.resolve([WORDS, COUNTS])
    message = str(raised.value)
    assert "word-count" in message and "ingest into it" not in message
    with pytest.raises(NoWatermarkError, match=f"its source {COUNTS} has none"):
        cc.resolve([HIST])


def test_an_idle_root_keeps_the_dag_moving(cc, catalog, flip_tables) -> None:
    cc.ingest(WORDS, words("a"), barrier=1_000)
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
        job.run_until_caught_up()
        stalled = cc.resolve([COUNTS]).barrier
        assert stalled == 1_000
        cc.set_idle(WORDS, "1m")
        started = now_ms()
        job.run_until_caught_up()  # the job advances its idle root before planning
    watermark = int(catalog.load_table(WORDS).metadata.properties[P.WATERMARK])
    assert started - 60_000 - 5_000 <= watermark <= now_ms() - 60_000
    assert cc.resolve([COUNTS]).barrier == watermark
    refused(catalog, InvalidInputError, "only root tables", lambda: cc.set_idle(COUNTS, "1m"))


# --- run_continuously: max_epochs counts attempts, not epochs that did work -----------------------
@pytest.mark.parametrize("backend", ["sqlite"])  # the loop is the same on every catalog
def test_run_continuously_stops_after_max_epochs_attempts_even_when_idle(cc, catalog, flip_tables) -> None:
    cc.ingest(WORDS, words("a", "b", "a"), key="batch-1", barrier=now_ms() - 10_000)
    job = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    attempts: list = []
    run_epoch = job.run_epoch

    def counted():
        attempts.append(run_epoch())
        return attempts[-1]

    job.run_epoch = counted  # type: ignore[method-assign]
    lines: list[str] = []
    interval = 0.05
    with job:
        started = time.monotonic()
        first = job.run_continuously(interval=interval, max_epochs=3, echo=lines.append)
        took = time.monotonic() - started
        assert len(attempts) == 3 and took >= 2 * interval  # no sleep after the last attempt
        assert [r.did_work for r in attempts] == [True, False, False]
        assert first == attempts[:1] and first[0].actions == {COUNTS: "published"}  # only the epochs that did work
        assert len(lines) == 1 and lines[0]  # one progress line per epoch that did work
        head = catalog.load_table(COUNTS).metadata.current_snapshot_id
        assert catalog.load_table(COUNTS).metadata.snapshot_by_id(head).summary[P.JOB] == "word-count"

        attempts.clear()
        lines.clear()
        assert job.run_continuously(interval=interval, max_epochs=4, echo=lines.append) == []  # nothing new at all
        assert len(attempts) == 4 and not any(r.did_work for r in attempts) and lines == []
        assert catalog.load_table(COUNTS).metadata.current_snapshot_id == head

        with pytest.raises(InvalidInputError, match="max_epochs"):
            job.run_continuously(interval=interval, max_epochs=0)
    assert {r["word"]: r["cnt"] for r in rows(catalog, COUNTS)} == {"a": 2, "b": 1}


# --- found in review: epochs that raced a revision, multi-sink jobs, interfering writers ---------
XS = pa.schema([pa.field("x", pa.int64())])


def xs(*values: int) -> pa.Table:
    return pa.table({"x": list(values)}, schema=XS)


def values(catalog, name: str) -> list[int]:
    return sorted(r["x"] for r in rows(catalog, name))


@pytest.fixture
def xtables(catalog):
    def make(*names: str) -> None:
        for name in names:
            catalog.create_table(name, schema=XS)
    return make


def test_a_revision_during_the_transform_makes_the_epoch_replan(cc, catalog, xtables) -> None:
    xtables("demo.r", "demo.d")
    now = now_ms()
    pending: list[int] = []

    def copy(ctx):
        if pending:  # an operator revises demo.d while the transform runs
            cc.revise("demo.d", pending.pop())
        return ctx.read_increment("demo.r")

    with cc.job("j", sources=["demo.r"], sinks=["demo.d"], transform=copy, mode="append") as job:
        for value, age in ((1, 30_000), (2, 20_000)):
            cc.ingest("demo.r", xs(value), barrier=now - age)
            job.run_until_caught_up()
        cc.ingest("demo.r", xs(3), barrier=now - 10_000)
        pending.append(now - 30_000)
        actions = [a for r in job.run_until_caught_up() for a in r.actions.values()]
    assert actions[0] == "conflict"  # never staged on the rolled-back head
    assert values(catalog, "demo.d") == [1, 2, 3] == values(catalog, "demo.r")


def test_sinks_with_different_previous_inputs_each_read_their_own_increment(cc, catalog, xtables) -> None:
    xtables("demo.r", "demo.a", "demo.b")
    now = now_ms()

    def copy(ctx):
        increment = ctx.read_increment("demo.r")
        return {"demo.a": increment, "demo.b": increment}

    with cc.job("j", sources=["demo.r"], sinks=["demo.a", "demo.b"], transform=copy, mode="append") as job:
        for value, age in ((1, 30_000), (2, 20_000)):
            cc.ingest("demo.r", xs(value), barrier=now - age)
            job.run_until_caught_up()
        cc.revise("demo.b", now - 30_000)  # only demo.b goes back: its next increment starts earlier
        cc.ingest("demo.r", xs(3), barrier=now - 10_000)
        job.run_until_caught_up()
    assert values(catalog, "demo.a") == values(catalog, "demo.b") == values(catalog, "demo.r") == [1, 2, 3]


def test_a_write_onto_the_staged_branch_by_another_writer_is_never_published(cc, catalog, xtables, monkeypatch) -> None:
    from consistent_catalog.epoch import EpochJob

    xtables("demo.r", "demo.d")
    job = cc.job("j", sources=["demo.r"], sinks=["demo.d"], transform=lambda ctx: ctx.read("demo.r"), mode="overwrite")
    original = EpochJob._write_staged

    def then_a_zombie(self, table, base_id, properties, data, mode, plan):  # an unfenced (Spark) zombie's write
        written = original(self, table, base_id, properties, data, mode, plan)
        catalog.load_table("demo.d").append(xs(666), branch=P.STAGED_BRANCH, snapshot_properties={
            **properties, P.ATTEMPT: "zombie000000"})
        return written

    with job:
        cc.ingest("demo.r", xs(1, 2), barrier=now_ms() - 10_000)
        monkeypatch.setattr(EpochJob, "_write_staged", then_a_zombie)
        assert job.run_epoch().actions == {"demo.d": "conflict"}
        monkeypatch.undo()
        job.run_until_caught_up()
    assert values(catalog, "demo.d") == [1, 2]


def test_a_revision_discards_a_staged_epoch_even_when_main_stays(cc, catalog, xtables) -> None:
    xtables("demo.r", "demo.d")
    now = now_ms()
    job = cc.job("j", sources=["demo.r"], sinks=["demo.d"], transform=lambda ctx: ctx.read("demo.r"), mode="overwrite")
    with job:
        cc.ingest("demo.r", xs(1), barrier=now - 30_000)
        job.run_until_caught_up()
        cc.ingest("demo.r", xs(2), barrier=now - 20_000)
        plan = job.plan()
        job.stage("demo.d", plan, job.run_transform(plan)["demo.d"])  # staged, not published (a crash)
        steps = {s.table: s.action for s in cc.revise("demo.r", now - 30_000).steps}
    table = catalog.load_table("demo.d")
    assert steps["demo.d"] == "rolled-back"
    assert table.metadata.refs[P.STAGED_BRANCH].snapshot_id == table.metadata.refs["main"].snapshot_id


def test_the_as_of_guard_ignores_tables_without_a_barrier(cc, catalog, xtables) -> None:
    xtables("demo.r", "demo.idle")
    cc.ingest("demo.r", xs(1))
    cc.advance_watermark("demo.idle", now_ms())  # complete, empty, no barrier of its own
    refused(catalog, InvalidBarrierError, "milliseconds",
            lambda: cc.resolve(["demo.r", "demo.idle"], as_of=now_ms() // 1000))
