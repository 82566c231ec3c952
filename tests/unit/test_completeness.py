"""Completeness (protocol §4.2) on hand-built TableStates: at which barriers a table reflects its sources exactly.

The root ``db.r`` holds one row per snapshot: 1 (b=100), 2 (b=200), 3 (b=300). Derived tables record
which of those snapshots each epoch read; whether they are complete at t is worked out by hand below
from the rule: t <= W(X), the sources are complete at t, and the inputs of the epoch behind
``snap(X, t)`` hold the same rows as ``snap(source, t)``.
"""

from __future__ import annotations

import pytest

from consistent_catalog import properties as P
from consistent_catalog.completeness import Completeness
from consistent_catalog.state import TableState
from tests.harness.builders import STAGED, derived_state, epoch, genesis, root_state, table_state

R = root_state("db.r", [100, 200, 300])  # snapshots 1, 2, 3
# db.s skips barrier 200: epochs at 100 (read db.r@1) and 300 (read db.r@3)
S = derived_state("db.s", ["db.r"], [(100, {"db.r": 1}), (300, {"db.r": 3})], first_id=10, job="job-s")  # 10 genesis, 11, 12
# db.t ran at every barrier of db.r
T = derived_state("db.t", ["db.r"], [(100, {"db.r": 1}), (200, {"db.r": 2}), (300, {"db.r": 3})], first_id=20,
                  job="job-t")  # 21, 22, 23


def completeness(*states: TableState) -> Completeness:
    return Completeness({s.identifier: s for s in states})


@pytest.mark.parametrize(
    ("barrier", "complete"),
    [(0, True), (100, True), (250, True), (300, True), (301, False), (10**15, False)],
)
def test_a_root_is_complete_up_to_its_watermark(barrier: int, complete: bool) -> None:
    assert completeness(R).complete("db.r", barrier) is complete  # W(db.r) = 300


def test_a_root_watermark_property_extends_completeness() -> None:
    idle = root_state("db.r", [100, 200, 300], watermark=500)
    assert completeness(idle).complete("db.r", 500) is True
    assert completeness(idle).complete("db.r", 501) is False


def test_an_empty_root_without_watermark_is_never_complete() -> None:
    empty = table_state("db.r", [])
    assert completeness(empty).complete("db.r", 0) is False
    assert completeness(empty).latest(["db.r"], 1000) is None


@pytest.mark.parametrize(
    ("barrier", "complete"),
    [
        (99, True),  # db.s empty (genesis), db.r empty: the same rows
        (100, True),  # the epoch at 100 read db.r@1 = snap(db.r, 100)
        (199, True),  # still db.r@1 on both sides
        (200, False),  # snap(db.s, 200) read db.r@1, but snap(db.r, 200) = 2 holds row 2 too
        (299, False),
        (300, True),  # the epoch at 300 read db.r@3 = snap(db.r, 300)
        (301, False),  # beyond W(db.s) = 300
    ],
)
def test_a_derived_table_that_skipped_a_barrier(barrier: int, complete: bool) -> None:
    assert completeness(R, S).complete("db.s", barrier) is complete


@pytest.mark.parametrize("barrier", [99, 100, 150, 200, 250, 300])
def test_a_derived_table_that_ran_at_every_barrier_is_complete_up_to_its_watermark(barrier: int) -> None:
    assert completeness(R, T).complete("db.t", barrier) is True


def test_an_epoch_that_read_the_wrong_snapshot_is_incomplete() -> None:
    # the epoch at 100 claims to have read db.r@2 (b=200): not what db.r held at 100
    wrong = derived_state("db.w", ["db.r"], [(100, {"db.r": 2})], first_id=30, job="job-w")
    assert completeness(R, wrong).complete("db.w", 100) is False
    assert completeness(R, wrong).complete("db.w", 99) is True  # below its first epoch both sides are empty


def test_a_table_is_incomplete_where_its_source_is() -> None:
    # db.u = f(db.s): at 200 it read snap(db.s, 200) = 11, exactly db.s's content there, but db.s itself is
    # incomplete at 200, so db.u is too
    u = derived_state("db.u", ["db.s"], [(200, {"db.s": 11}), (300, {"db.s": 12})], first_id=40, job="job-u")
    check = completeness(R, S, u)
    assert check.complete("db.u", 200) is False
    assert check.complete("db.u", 300) is True
    assert check.latest(["db.u"], 300) == 300
    # below 200 db.u is still empty while db.s holds db.r's row of 100: consistent only below 100, all empty
    assert check.latest(["db.u"], 299) == 99


def test_a_source_missing_from_the_states_is_trusted() -> None:
    assert completeness(S).complete("db.s", 200) is True  # db.r not loaded: cannot be checked
    assert Completeness({}).complete("db.gone", 5) is True


def test_candidates_are_the_bound_and_every_barrier_below_it_and_one_less() -> None:
    check = completeness(R, S)
    # db.r: 100, 200, 300; db.s: 100, 300 (its genesis has none): below 250 that is {100, 200} and {99, 199}
    assert list(check.candidates(250)) == [250, 200, 199, 100, 99]
    assert list(check.candidates(300)) == [300, 299, 200, 199, 100, 99]
    assert list(check.candidates(50)) == [50]


def test_latest_is_the_newest_barrier_at_which_all_are_complete() -> None:
    check = completeness(R, S, T)
    assert check.latest(["db.r", "db.s", "db.t"], 300) == 300  # all complete at the bound itself
    assert check.latest(["db.s"], 250) == 199  # db.s is incomplete on [200, 300)
    assert check.latest(["db.t"], 250) == 250
    assert check.latest(["db.s", "db.t"], 299) == 199
    assert check.latest(["db.s"], 99) == 99


def test_a_diamond_that_mixes_two_states_of_its_root_is_never_complete_above_them() -> None:
    """db.c = f(db.s, db.t) ran once, at 200, over db.s@11 (db.r's rows at 100) and db.t@22 (db.r's rows at 200)."""
    c = derived_state("db.c", ["db.s", "db.t"], [(200, {"db.s": 11, "db.t": 22})], first_id=50, job="job-c")
    check = completeness(R, S, T, c)
    assert check.complete("db.c", 200) is False  # db.s is incomplete at 200
    assert check.complete("db.c", 199) is False  # db.c is empty at 199, but db.s and db.t are not
    assert check.complete("db.c", 99) is True  # everything empty
    assert check.latest(["db.c"], 200) == 99
    # the diamond done right: an epoch at 300 over db.s@12 and db.t@23
    ok = derived_state("db.c", ["db.s", "db.t"], [(300, {"db.s": 12, "db.t": 23})], first_id=50, job="job-c")
    assert completeness(R, S, T, ok).latest(["db.c"], 300) == 300


def test_an_empty_epoch_published_as_a_watermark_completes_the_table() -> None:
    """Protocol §5.3: the root only advanced its watermark to 400; db.t's job found nothing new and published
    consistent.watermark = 400 on its head (23), with no snapshot."""
    idle_root = root_state("db.r", [100, 200, 300], watermark=400)
    marked = table_state(
        "db.t", T.snapshots.values(), T.branches,
        {**T.properties, P.WATERMARK: "400", P.WATERMARK_SNAPSHOT: "23"},
    )
    check = completeness(idle_root, marked)
    assert check.complete("db.t", 400) is True
    assert check.complete("db.t", 350) is True  # snap(db.t, 350) = 23 read db.r@3 = snap(db.r, 350)
    assert check.complete("db.t", 401) is False


def test_a_staged_epoch_counts_only_on_the_staged_branch() -> None:
    # db.s published 100 (11) and staged 300 (13, read db.r@3) on consistent-staged, ahead of main
    records = [genesis(10, job="job-s"), epoch(11, 10, 100, job="job-s", sources={"db.r": 1}),
               epoch(13, 11, 300, job="job-s", sources={"db.r": 3})]
    staged = table_state("db.s", records, {P.MAIN_BRANCH: 11, STAGED: 13}, S.properties)
    on_main = completeness(R, staged)
    assert on_main.complete("db.s", 300) is False  # W(main) = 100
    assert on_main.latest(["db.s"], 300) == 100
    newest = Completeness({"db.r": R, "db.s": staged}, branch_of=lambda state: state.newest_branch())
    assert newest.complete("db.s", 300) is True
    assert newest.complete("db.s", 200) is False


def test_the_fixture_is_what_the_hand_computations_assume() -> None:
    assert R.branch().snapshot_ids == (1, 2, 3) and R.branch().barriers == (100, 200, 300)
    assert S.branch().snapshot_ids == (10, 11, 12) and S.branch().barriers == (None, 100, 300)
    assert T.branch().snapshot_ids == (20, 21, 22, 23) and T.branch().barriers == (None, 100, 200, 300)
