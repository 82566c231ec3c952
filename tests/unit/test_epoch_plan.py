"""Epoch planning (protocol §5.1, ``consistent_catalog.epoch_plan``) on hand-built TableStates.

Every expectation is worked out by hand from the protocol: T is the newest barrier <= min W(source) at
which every source is complete (§4.2, §4.3), the inputs are ``snap(source, T)`` on ``main`` (§3.4), and
per sink the first action that applies of ``done`` (T <= W(sink)), ``publish-staged`` (one staged attempt
for exactly this epoch), ``watermark`` (the inputs hold the same rows as the previous epoch's) and
``stage``. ``check_append_only`` is §5.5's condition for an incremental read.

The root ``db.r`` holds one row per snapshot, ingested at its barrier::

    db.r (root)   1 b=100   2 b=200   3 b=300                        W = 300

Derived tables are built per test: ``genesis`` first (no barrier), then one snapshot per epoch, each
recording the inputs it read (``consistent.sources``). The job planned is ``job-x``, its sinks ``db.x``
(and ``db.y``); ``db.a``, ``db.b`` are sources written by jobs of their own.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from consistent_catalog import properties as P
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.epoch_plan import EpochPlan, SinkPlan, check_append_only, plan_epoch
from consistent_catalog.exceptions import InvalidInputError, UntrackedWriteError
from consistent_catalog.state import TableState
from tests.harness.builders import (
    MAIN,
    STAGED,
    T0,
    compaction,
    derived_properties,
    derived_state,
    epoch,
    genesis,
    ingest,
    root_state,
    snapshot,
    table_state,
)

JOB = "job-x"
"""The job whose epoch is planned; the sources' own jobs are named after their tables."""
R = root_state("db.r", [100, 200, 300])  # snapshots 1, 2, 3; W = 300


def sink_state(
    records: list[SnapshotRecord],
    branches: dict[str, int],
    properties: dict[str, str] | None = None,
    *,
    name: str = "db.x",
    sources: tuple[str, ...] = ("db.r",),
) -> TableState:
    """A sink of ``JOB`` registered on ``sources``: its own snapshots and refs, plus any extra table properties."""
    return table_state(name, records, branches, {**derived_properties(JOB, *sources), **(properties or {})})


def plan_of(sources: Sequence[TableState], sink: TableState, upstream: Sequence[TableState] = ()) -> EpochPlan:
    return plan_epoch(
        JOB, {s.identifier: s for s in sources}, {sink.identifier: sink}, upstream={u.identifier: u for u in upstream}
    )


# --- the barrier T and the inputs ---------------------------------------------------------------------------


def test_a_job_without_sources_is_refused() -> None:
    sink = derived_state("db.x", [], [], 10, job=JOB)
    with pytest.raises(InvalidInputError, match="no sources"):
        plan_epoch(JOB, {}, {"db.x": sink})


def test_a_source_without_watermark_leaves_every_sink_done() -> None:
    # db.e: a root never ingested into and never advanced has no W (§3.5), so there is no T (§5.1)
    never = table_state("db.e", [])
    behind = derived_state("db.x", ["db.e", "db.r"], [], 10, job=JOB)
    ahead = derived_state("db.y", ["db.e", "db.r"], [(100, {"db.e": None, "db.r": 1})], 20, job=JOB)
    plan = plan_epoch(JOB, {"db.r": R, "db.e": never}, {"db.x": behind, "db.y": ahead})
    assert (plan.barrier, dict(plan.inputs)) == (None, {})
    assert {name: p.action for name, p in plan.sinks.items()} == {"db.x": "done", "db.y": "done"}
    assert plan.pending == [] and plan.needs_transform is False


def test_the_barrier_is_the_lowest_source_watermark_and_the_inputs_are_snap_at_it() -> None:
    # db.q: b=50, b=250 and consistent.watermark=280, so W(db.q) = 280 < W(db.r) = 300; roots are complete up to W
    q = root_state("db.q", [50, 250], watermark=280)
    plan = plan_of([R, q], derived_state("db.x", ["db.q", "db.r"], [], 10, job=JOB))
    assert plan.barrier == 280
    # snap(db.r, 280): the newest snapshot with b <= 280 is 2 (b=200); snap(db.q, 280) is 2 (b=250)
    assert dict(plan.inputs) == {"db.r": 2, "db.q": 2}


@pytest.mark.parametrize(
    "q",
    [
        table_state("db.q", [], {}, {P.WATERMARK: "500"}),  # never ingested into, advanced to 500: W = 500
        root_state("db.q", [400]),  # its first snapshot lands after T: W = 400
    ],
    ids=["empty-with-watermark", "first-snapshot-after-T"],
)
def test_a_source_empty_at_the_barrier_is_an_input_of_none(q: TableState) -> None:
    plan = plan_of([R, q], derived_state("db.x", ["db.q", "db.r"], [], 10, job=JOB))
    assert plan.barrier == 300  # min(W(db.r) = 300, W(db.q))
    assert dict(plan.inputs) == {"db.r": 3, "db.q": None}


# The diamond of protocol §4.6: db.a = f(db.r) skipped barrier 200, db.b = g(db.r) ran at it.
A = derived_state("db.a", ["db.r"], [(100, {"db.r": 1}), (300, {"db.r": 3})], 10, job="job-a")  # 11, 12; W = 300
B = derived_state("db.b", ["db.r"], [(100, {"db.r": 1}), (200, {"db.r": 2})], 20, job="job-b")  # 21, 22; W = 200
C = derived_state("db.c", ["db.a", "db.b"], [], 30, job="job-c")


def test_a_diamond_plans_the_newest_barrier_at_which_both_sources_are_complete() -> None:
    # min W = 200, but snap(db.a, 200) = 11 read db.r@1 while snap(db.r, 200) = 2 added a row: db.a is incomplete
    # there. Candidates <= 200, newest first: 200, 199, 100, 99. At 199 db.a@11 and db.b@21 both read db.r@1,
    # which is snap(db.r, 199): both complete. An epoch at 200 would mix db.r's rows of 100 and of 200.
    plan = plan_epoch("job-c", {"db.a": A, "db.b": B}, {"db.c": C}, upstream={"db.r": R})
    assert plan.barrier == 199
    assert dict(plan.inputs) == {"db.a": 11, "db.b": 21}
    assert plan.sinks["db.c"].action == "stage"


def test_without_the_upstream_closure_an_unloadable_source_of_a_source_is_trusted() -> None:
    # §4.2: a table that cannot be loaded cannot be checked and is trusted; db.r missing, T is min W = 200
    plan = plan_epoch("job-c", {"db.a": A, "db.b": B}, {"db.c": C})
    assert (plan.barrier, dict(plan.inputs)) == (200, {"db.a": 11, "db.b": 22})


def test_sources_are_planned_on_main_never_on_a_staged_epoch() -> None:
    # db.a has an epoch at 300 staged, not published: W(db.a) on main is 100, snap(db.a, 100) = 11
    staged = table_state(
        "db.a",
        [genesis(10, job="job-a", ts=T0), epoch(11, 10, 100, job="job-a", sources={"db.r": 1}),
         epoch(12, 11, 300, job="job-a", sources={"db.r": 3}, attempt="a1")],
        {MAIN: 11, STAGED: 12},
        derived_properties("job-a", "db.r"),
    )
    sink = derived_state("db.x", ["db.a"], [], 30, job=JOB)
    plan = plan_of([staged], sink, upstream=[R])
    assert (plan.barrier, dict(plan.inputs)) == (100, {"db.a": 11})


def test_of_an_overwrite_epoch_the_input_is_its_last_snapshot() -> None:
    # §3.2 rule 6 / §11.13: db.a's epoch at 300 is a delete (12) and an append (13), both b=300; snap picks 13
    overwrite = table_state(
        "db.a",
        [
            genesis(10, job="job-a", ts=T0),
            epoch(11, 10, 100, job="job-a", sources={"db.r": 1}),
            snapshot(12, 11, T0, barrier=300, op="overwrite", job="job-a", sources={"db.r": 3},
                     summary={"deleted-data-files": "1", "deleted-records": "1", "total-records": "0"}),
            epoch(13, 12, 300, job="job-a", sources={"db.r": 3}, total=3, added=3),
        ],
        {MAIN: 13},
        derived_properties("job-a", "db.r"),
    )
    plan = plan_of([overwrite], derived_state("db.x", ["db.a"], [], 30, job=JOB), upstream=[R])
    assert (plan.barrier, dict(plan.inputs)) == (300, {"db.a": 13})


def test_downstream_of_an_untracked_source_the_plan_waits_at_its_last_tracked_barrier() -> None:
    # §3.3: db.a's snapshot 13 was written outside its job; W(db.a) is b(12) = 300, snap ignores 13
    foreign = snapshot(13, 12, T0 + 5, summary={"added-data-files": "1", "added-records": "1", "total-records": "3"})
    untracked = table_state("db.a", [*A.snapshots.values(), foreign], {MAIN: 13}, A.properties)
    plan = plan_of([untracked], derived_state("db.x", ["db.a"], [], 30, job=JOB), upstream=[R])
    assert (plan.barrier, dict(plan.inputs)) == (300, {"db.a": 12})


# --- the action per sink --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "sink", "barrier"),
    [
        # the epoch at 300 was published: T = 300 <= W(db.x) = b(12) = 300
        (R, derived_state("db.x", ["db.r"], [(100, {"db.r": 1}), (300, {"db.r": 3})], 10, job=JOB), 300),
        # db.r idle at 400 (one snapshot, b=100); db.x's epoch at 100, then a watermark-only epoch at 400:
        # T = 400 <= W(db.x) = max(b(11) = 100, 400)
        (
            root_state("db.r", [100], watermark=400),
            sink_state([genesis(10, job=JOB, ts=T0), epoch(11, 10, 100, job=JOB, sources={"db.r": 1})], {MAIN: 11},
                       {P.WATERMARK: "400", P.WATERMARK_SNAPSHOT: "11"}),
            400,
        ),
    ],
    ids=["published", "watermark-only"],
)
def test_a_sink_whose_watermark_reached_the_barrier_is_done(source: TableState, sink: TableState, barrier: int) -> None:
    plan = plan_of([source], sink)
    assert (plan.barrier, plan.sinks["db.x"].action) == (barrier, "done")
    assert plan.pending == [] and plan.needs_transform is False


def test_the_action_of_each_sink_is_its_own() -> None:
    # one job, two sinks: db.x published 300 already, db.y has only its genesis
    done = derived_state("db.x", ["db.r"], [(300, {"db.r": 3})], 10, job=JOB)
    behind = derived_state("db.y", ["db.r"], [], 20, job=JOB)
    plan = plan_epoch(JOB, {"db.r": R}, {"db.x": done, "db.y": behind})
    assert {name: p.action for name, p in plan.sinks.items()} == {"db.x": "done", "db.y": "stage"}
    assert plan.pending == ["db.y"] and plan.needs_transform is True


# main: genesis 10, the epoch at 100 (11). T = W(db.r) = 300 with inputs {"db.r": 3}: the rows changed.
MAIN_RECORDS = [genesis(10, job=JOB, ts=T0), epoch(11, 10, 100, job=JOB, sources={"db.r": 1})]


def staged_sink(*staged: SnapshotRecord, staged_head: int | None = None) -> TableState:
    """``MAIN_RECORDS`` on main, ``staged`` (oldest first) on consistent-staged."""
    head = staged_head if staged_head is not None else staged[-1].snapshot_id
    return sink_state([*MAIN_RECORDS, *staged], {MAIN: 11, STAGED: head})


def test_one_staged_attempt_of_exactly_this_epoch_is_published_as_it_is() -> None:
    # an overwrite epoch staged before a crash: delete (12) and append (13), one attempt, T = 300, inputs db.r@3
    sink = staged_sink(
        snapshot(12, 11, T0, barrier=300, op="overwrite", job=JOB, sources={"db.r": 3},
                 summary={"deleted-records": "1", "total-records": "0", P.ATTEMPT: "a1"}),
        epoch(13, 12, 300, job=JOB, sources={"db.r": 3}, attempt="a1", total=3),
    )
    plan = plan_of([R], sink)
    assert (plan.barrier, dict(plan.inputs), plan.sinks["db.x"].action) == (300, {"db.r": 3}, "publish-staged")
    assert plan.needs_transform is False and plan.pending == ["db.x"]


@pytest.mark.parametrize(
    "staged",
    [
        pytest.param([epoch(12, 11, 300, job=JOB, sources={"db.r": 2}, attempt="a1")], id="other-inputs"),
        pytest.param([epoch(12, 11, 200, job=JOB, sources={"db.r": 3}, attempt="a1")], id="other-barrier"),
        pytest.param([epoch(12, 11, 300, job="job-old", sources={"db.r": 3}, attempt="a1")], id="other-job"),
        pytest.param(
            [epoch(12, 11, 300, job=JOB, sources={"db.r": 3}, attempt="a1"),
             epoch(13, 12, 300, job=JOB, sources={"db.r": 3}, attempt="b2")],
            id="two-attempts-stacked",
        ),
        pytest.param(
            [epoch(12, 11, 300, job=JOB, sources={"db.r": 3}, attempt="a1"),
             epoch(13, 12, 300, job=JOB, sources={"db.r": 3})],
            id="a-snapshot-without-attempt-on-top",
        ),
    ],
)
def test_any_other_staged_state_is_recomputed(staged: list[SnapshotRecord]) -> None:
    # §5.4: other barrier, other inputs, another job, several attempts: the reset discards it, the epoch is staged
    plan = plan_of([R], staged_sink(*staged))
    assert (plan.barrier, plan.sinks["db.x"].action) == (300, "stage")


@pytest.mark.parametrize(
    "sink",
    [
        # §2.3: consistent-staged equals main's head when no epoch is staged
        sink_state(MAIN_RECORDS, {MAIN: 11, STAGED: 11}),
        # consistent-staged (12) sits on the genesis, not on main's head 11 (main moved on since): §4.1's "ahead"
        # needs main to be its ancestor
        staged_sink(epoch(12, 10, 300, job=JOB, sources={"db.r": 3}, attempt="a1")),
    ],
    ids=["at-main", "not-descending-from-main"],
)
def test_a_staged_branch_that_is_not_ahead_of_main_is_never_published(sink: TableState) -> None:
    assert plan_of([R], sink).sinks["db.x"].action == "stage"  # T = 300, the inputs changed since db.r@1


def test_inputs_holding_the_same_rows_as_the_previous_epoch_only_move_the_watermark() -> None:
    # db.r: 1 (b=100), 2 (b=200), then a compaction 3 (replace: b=200, same rows) and consistent.watermark=400
    compacted = table_state(
        "db.r", [ingest(1, None, 100, ts=100), ingest(2, 1, 200, ts=200, total=2), compaction(3, 2, 250, total=2)],
        {MAIN: 3}, {P.WATERMARK: "400"},
    )
    sink = derived_state("db.x", ["db.r"], [(200, {"db.r": 2})], 10, job=JOB)
    plan = plan_of([compacted], sink)
    # T = 400, snap(db.r, 400) = 3: not the recorded 2, but no data-changing snapshot lies between them
    assert (plan.barrier, dict(plan.inputs)) == (400, {"db.r": 3})
    assert plan.sinks["db.x"].action == "watermark"
    assert plan.needs_transform is False and plan.pending == ["db.x"]


@pytest.mark.parametrize("with_unchanged_source", [False, True], ids=["one-source", "and-an-unchanged-one"])
def test_inputs_with_new_rows_are_staged(with_unchanged_source: bool) -> None:
    # the same, but snapshot 3 is an ingest at 300: new rows since the previous epoch's input. One changed input
    # is enough: db.q (b=100, idle at 500) did not change since the previous epoch.
    grown = root_state("db.r", [100, 200, 300], watermark=400)
    q = root_state("db.q", [100], watermark=500)
    sources, previous, expected = [grown], {"db.r": 2}, {"db.r": 3}
    if with_unchanged_source:
        sources, previous, expected = [grown, q], {"db.q": 1, "db.r": 2}, {"db.q": 1, "db.r": 3}
    sink = derived_state("db.x", sorted(previous), [(200, previous)], 10, job=JOB)
    plan = plan_of(sources, sink)
    assert (plan.barrier, dict(plan.inputs), plan.sinks["db.x"].action) == (400, expected, "stage")


NULL_AT_100 = table_state("db.q", [], {}, {P.WATERMARK: "100"})  # never ingested into, advanced to 100
NO_ROWS_AT_100 = table_state(  # one snapshot at 100 that holds no rows
    "db.p", [snapshot(1, None, 100, summary={"total-records": "0", "added-records": "0"})], {MAIN: 1}
)


@pytest.mark.parametrize(
    ("sources", "action"),
    [
        # every input is empty (null): nothing to record, the watermark alone says the sink is complete at T
        ([NULL_AT_100], "watermark"),
        # an input is a snapshot that holds no rows: the same rows as "nothing", but a sink without main and
        # without watermark must stage to record its inputs (§5.1: watermark needs a main head or a watermark,
        # or every input empty; §11.11)
        ([NO_ROWS_AT_100], "stage"),
        ([NULL_AT_100, NO_ROWS_AT_100], "stage"),
    ],
    ids=["null-input", "input-without-rows", "one-null-one-without-rows"],
)
def test_a_sink_without_main_or_watermark_moves_only_its_watermark_when_every_input_is_null(
    sources: list[TableState], action: str
) -> None:
    expected_inputs = {"db.q": None, "db.p": 1}
    names = [s.identifier for s in sources]
    emptied = table_state("db.x", [], {}, derived_properties(JOB, *names))  # e.g. a revision emptied it (§5.2)
    plan = plan_of(sources, emptied)
    assert plan.barrier == 100  # min W of the sources
    assert dict(plan.inputs) == {name: expected_inputs[name] for name in names}
    assert plan.sinks["db.x"].action == action


# --- untracked sinks ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "summary",
    [
        {"added-data-files": "1", "added-records": "5", "total-records": "6", "engine-name": "spark"},
        {},  # no counters at all: counts as a data change (§2.1)
    ],
    ids=["foreign-append", "no-counters"],
)
def test_a_sink_with_a_foreign_write_refuses_to_plan(summary: dict[str, str]) -> None:
    foreign = snapshot(12, 11, T0 + 5, summary=summary)
    sink = sink_state([*MAIN_RECORDS, foreign], {MAIN: 12})
    with pytest.raises(UntrackedWriteError, match="snapshot 12"):
        plan_of([R], sink)
    with pytest.raises(UntrackedWriteError):  # also when there would be nothing to do (§3.3: it never plans)
        plan_epoch(JOB, {"db.r": R, "db.e": table_state("db.e", [])}, {"db.x": sink})


def test_a_compaction_of_a_sink_is_not_a_foreign_write() -> None:
    # §3.3: untagged replace snapshots on a derived table are not untracked writes
    sink = sink_state([*MAIN_RECORDS, compaction(12, 11, T0 + 5)], {MAIN: 12})
    plan = plan_of([R], sink)
    assert (plan.barrier, plan.sinks["db.x"].action) == (300, "stage")


# --- what each sink plan carries ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("records", "head", "previous"),
    [
        ([genesis(10, job=JOB, ts=T0)], 10, {}),  # no epoch yet
        ([*MAIN_RECORDS, epoch(12, 11, 200, job=JOB, sources={"db.r": 2})], 12, {"db.r": 2}),
        ([*MAIN_RECORDS, compaction(12, 11, T0 + 5)], 12, {"db.r": 1}),  # a compaction inherits its parent's
        ([*MAIN_RECORDS, epoch(12, 11, 200, job=JOB, sources={"db.r": 2}), compaction(13, 12, T0 + 5),
          compaction(14, 13, T0 + 6)], 14, {"db.r": 2}),
    ],
    ids=["genesis", "head-epoch", "compacted", "compacted-twice"],
)
def test_previous_inputs_are_those_recorded_by_the_sink_head(
    records: list[SnapshotRecord], head: int, previous: dict[str, int | None]
) -> None:
    plan = plan_of([R], sink_state(records, {MAIN: head}))
    assert plan.barrier == 300
    assert dict(plan.sinks["db.x"].previous_inputs) == previous


FENCE = snapshot(90, None, T0, summary={P.FENCE_REASON: "register", "total-records": "0"})


def test_the_sink_plan_carries_the_heads_the_revision_and_the_fence_as_read() -> None:
    staged = epoch(12, 11, 300, job=JOB, sources={"db.r": 3}, attempt="a1")
    sink = sink_state([*MAIN_RECORDS, staged, FENCE], {MAIN: 11, STAGED: 12, P.FENCE_BRANCH: 90}, {P.REVISION: "2"})
    plan = plan_of([R], sink)
    assert plan == EpochPlan(
        JOB,
        300,
        {"db.r": 3},
        {"db.x": SinkPlan("db.x", "publish-staged", 11, 12, {"db.r": 1}, revision="2", fence=90)},
    )


def test_a_sink_plan_with_nothing_to_do_still_carries_them() -> None:
    sink = sink_state([*MAIN_RECORDS, FENCE], {MAIN: 11, STAGED: 11, P.FENCE_BRANCH: 90}, {P.REVISION: "1"})
    plan = plan_epoch(JOB, {"db.r": R, "db.e": table_state("db.e", [])}, {"db.x": sink})  # db.e: no W
    p = plan.sinks["db.x"]
    assert (p.action, p.main_head, p.staged_head, p.revision, p.fence) == ("done", 11, 11, "1", 90)
    # without the properties and refs: None for each
    p = plan_of([R], derived_state("db.x", ["db.r"], [], 10, job=JOB)).sinks["db.x"]
    assert (p.main_head, p.staged_head, p.revision, p.fence) == (10, None, None, None)


# --- incremental reads (§5.5) ---------------------------------------------------------------------------


def changed(op: str, sid: int, parent: int, **counters: str) -> SnapshotRecord:
    return snapshot(sid, parent, T0 + sid, op=op, summary={"total-records": "9", **counters})


APPENDS = table_state(
    "db.r",
    [ingest(1, None, 100), ingest(2, 1, 200), compaction(3, 2, 250), ingest(4, 3, 300),
     changed("delete", 6, 4, **{"deleted-records": "0", "deleted-data-files": "0"}),  # 6: a delete that matched nothing
     changed("append", 5, 1, **{"added-records": "1"})],  # 5: on a branch that was rolled back
    {MAIN: 6, "old": 5},
)


@pytest.mark.parametrize(("start", "end"), [(1, 4), (None, 4), (2, 3), (4, 4), (None, 1), (1, 6), (4, 6)])
def test_appends_compactions_and_empty_commits_can_be_read_incrementally(start: int | None, end: int) -> None:
    # §5.5: every snapshot in (start, end] is an append or changes no data
    check_append_only(APPENDS, start, end)  # raises if not


@pytest.mark.parametrize(
    "record",
    [
        changed("overwrite", 3, 2, **{"deleted-records": "1", "added-records": "1"}),
        changed("delete", 3, 2, **{"deleted-data-files": "1", "deleted-records": "2"}),
    ],
    ids=["overwrite", "delete"],
)
def test_an_overwrite_or_delete_in_the_range_is_refused(record: SnapshotRecord) -> None:
    state = table_state("db.r", [ingest(1, None, 100), ingest(2, 1, 200), record, ingest(4, 3, 300)], {MAIN: 4})
    with pytest.raises(InvalidInputError, match=f"snapshot 3 is a {record.operation}"):
        check_append_only(state, 1, 4)
    check_append_only(state, 3, 4)  # the range (3, 4] starts after it


def test_a_previous_input_that_is_not_an_ancestor_is_refused() -> None:
    # snapshot 5 (the old input) was rolled back: main's 4 does not descend from it
    with pytest.raises(InvalidInputError, match="not an ancestor"):
        check_append_only(APPENDS, 5, 4)
    with pytest.raises(InvalidInputError, match="not an ancestor"):
        check_append_only(APPENDS, 4, 2)  # a newer snapshot as the start: the source went back
