"""Status, history and epoch reports (protocol §6.7 freshness) on hand-built TableStates.

The pipeline at ``NOW = 10_000``::

    db.r (root)      ingests at 1000 and 3000                         W = 3000
    db.fast  <- db.r  job "fast", epoch at 3000, lease live           W = 3000
    db.slow  <- db.r  job "slow", epoch at 1000, lease expired        W = 1000
    db.join  <- db.fast, db.slow  job "join", epoch at 1000           W = 1000

Delays are worked out by hand: end-to-end delay = NOW - W(X); a job's own delay = W(slowest source) - W(X);
the bottleneck is the job with the largest own delay on the slowest path back to a root.
"""

from __future__ import annotations

import pytest

from consistent_catalog import properties as P
from consistent_catalog import report
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.report import EpochEntry, HistoryEntry, TableStatus
from consistent_catalog.state import TableState
from tests.harness.builders import STAGED, derived_properties, epoch, genesis, ingest, snapshot, table_state

NOW = 10_000


def owned(job: str, *sources: str, lease_until: int | None = None, holder: str = "i-1") -> dict[str, str]:
    props = {**derived_properties(job, *sources), P.LEASE_HOLDER: holder}
    if lease_until is not None:
        props[P.LEASE_UNTIL] = str(lease_until)
    return props


R = table_state("db.r", [ingest(1, None, 1000), ingest(2, 1, 3000, total=2)], head=2)
FAST = table_state("db.fast", [genesis(10, job="fast"), epoch(11, 10, 3000, job="fast", sources={"db.r": 2})],
                   properties=owned("fast", "db.r", lease_until=NOW + 60_000), head=11)
SLOW = table_state("db.slow", [genesis(20, job="slow"), epoch(21, 20, 1000, job="slow", sources={"db.r": 1})],
                   properties=owned("slow", "db.r", lease_until=NOW - 1), head=21)
JOIN = table_state(
    "db.join", [genesis(30, job="join"), epoch(31, 30, 1000, job="join", sources={"db.fast": 10, "db.slow": 21})],
    properties=owned("join", "db.fast", "db.slow", lease_until=NOW + 1), head=31,
)
STATES = {s.identifier: s for s in (R, FAST, SLOW, JOIN)}


def rows(states: dict[str, TableState], tables: list[str]) -> dict[str, TableStatus]:
    return {row.table: row for row in report.status(states, tables, now=NOW)}


def test_status_of_a_root() -> None:
    row = rows(STATES, ["db.r"])["db.r"]
    assert row == TableStatus(
        table="db.r", role="root", job=None, lease="none", lease_until=None, watermark=3000, staged_barrier=None,
        delay_ms=7000, own_delay_ms=None, slowest_source=None, bottleneck_job=None, revision=0, snapshots=2,
        error=None,
    )


def test_status_delays_and_leases_of_derived_tables() -> None:
    found = rows(STATES, ["db.fast", "db.slow", "db.join"])
    fast, slow, join = found["db.fast"], found["db.slow"], found["db.join"]
    assert (fast.role, fast.job, fast.lease, fast.lease_until) == ("derived", "fast", "live", NOW + 60_000)
    assert (fast.watermark, fast.delay_ms, fast.own_delay_ms, fast.slowest_source) == (3000, 7000, 0, "db.r")
    assert fast.bottleneck_job is None  # no lag on its path
    assert (slow.lease, slow.watermark, slow.delay_ms, slow.own_delay_ms) == ("expired", 1000, 9000, 2000)
    assert slow.bottleneck_job == "slow"
    # db.join: slowest source db.slow (W 1000 < 3000); it is level with it; its path's laggard is job "slow"
    assert (join.lease, join.watermark, join.delay_ms) == ("live", 1000, 9000)
    assert (join.slowest_source, join.own_delay_ms, join.bottleneck_job) == ("db.slow", 0, "slow")
    assert [r.snapshots for r in (fast, slow, join)] == [2, 2, 2]


def test_the_bottleneck_is_the_largest_own_delay_on_the_slowest_path() -> None:
    # db.join2 runs 500 behind db.slow, which runs 2000 behind db.r: the bottleneck stays "slow"
    behind = table_state(
        "db.join2", [genesis(40, job="join2"), epoch(41, 40, 500, job="join2", sources={"db.fast": 10, "db.slow": 20})],
        properties=owned("join2", "db.fast", "db.slow", lease_until=NOW + 1), head=41,
    )
    row = rows({**STATES, "db.join2": behind}, ["db.join2"])["db.join2"]
    assert (row.slowest_source, row.own_delay_ms, row.delay_ms, row.bottleneck_job) == ("db.slow", 500, 9500, "slow")
    # once db.slow moved on to 2500 (500 behind db.r), db.join2's own delay (2000) is the largest on the path
    moved = table_state("db.slow", [*SLOW.snapshots.values(), epoch(22, 21, 2500, job="slow", sources={"db.r": 1})],
                        properties=SLOW.properties, head=22)
    found = rows({**STATES, "db.slow": moved, "db.join2": behind}, ["db.join2", "db.slow"])
    assert (found["db.slow"].own_delay_ms, found["db.slow"].bottleneck_job) == (500, "slow")
    row = found["db.join2"]
    assert (row.slowest_source, row.own_delay_ms, row.bottleneck_job) == ("db.slow", 2000, "join2")


def test_status_of_an_unregistered_sink_an_empty_table_and_a_broken_one() -> None:
    unregistered = table_state("db.u", [genesis(50, job="gone")],
                               properties={k: v for k, v in derived_properties("gone", "db.r").items() if k != P.JOB},
                               head=50)
    empty = table_state("db.e", [])
    broken = table_state("db.b", [ingest(60, None, 500)], properties={P.WATERMARK: "soon"}, head=60)
    found = rows({**STATES, "db.u": unregistered, "db.e": empty, "db.b": broken}, ["db.u", "db.e", "db.b"])
    # no lease held, but the job that wrote it is still named (as lineage names it): issue #23.6
    assert (found["db.u"].role, found["db.u"].job, found["db.u"].lease) == ("derived", "gone", "none")
    assert (found["db.u"].watermark, found["db.u"].delay_ms, found["db.u"].own_delay_ms) == (None, None, None)
    assert found["db.u"].slowest_source == "db.r"
    assert (found["db.e"].watermark, found["db.e"].delay_ms, found["db.e"].snapshots) == (None, None, 0)
    assert found["db.b"].watermark is None and found["db.b"].error is not None
    assert P.WATERMARK in found["db.b"].error and "soon" in found["db.b"].error


def test_status_reports_a_staged_epoch_and_the_revision() -> None:
    staged = table_state(
        "db.fast", [*FAST.snapshots.values(), epoch(12, 11, 4000, job="fast", sources={"db.r": 2})],
        {P.MAIN_BRANCH: 11, STAGED: 12}, {**FAST.properties, P.REVISION: "3"},
    )
    row = rows({**STATES, "db.fast": staged}, ["db.fast"])["db.fast"]
    assert (row.watermark, row.staged_barrier, row.revision, row.snapshots) == (3000, 4000, 3, 3)


# --- history ---------------------------------------------------------------------------------------
def test_history_is_the_newest_branch_newest_first_with_effective_barriers() -> None:
    records = [
        genesis(20, job="job", ts=5),
        epoch(21, 20, 100, job="job", sources={"db.r": 1}, ts=110, added=2, total=2),
        snapshot(22, 21, 320, barrier=300, op="overwrite", job="job", sources={"db.r": 3},
                 summary={"added-records": "1", "deleted-records": "2", "total-records": "1"}),
        epoch(23, 22, 400, job="job", sources={"db.r": 4}, ts=410, total=2),  # staged, not published
    ]
    state = table_state("db.d", records, {P.MAIN_BRANCH: 22, STAGED: 23}, derived_properties("job", "db.r"))
    assert report.history(state) == [
        HistoryEntry(23, STAGED, 400, 400, "job", {"db.r": 4}, 410, "append", 1, 0),
        HistoryEntry(22, P.MAIN_BRANCH, 300, 300, "job", {"db.r": 3}, 320, "overwrite", 1, 2),
        HistoryEntry(21, P.MAIN_BRANCH, 100, 100, "job", {"db.r": 1}, 110, "append", 2, 0),
        HistoryEntry(20, P.MAIN_BRANCH, None, None, "job", {}, 5, "append", 0, 0),
    ]


def test_history_of_a_root_shows_raw_and_effective_barriers() -> None:
    # 12 came late (raw 50 < 1000): its effective barrier is 1001; 13 is untagged: system time 2000
    records = [ingest(11, None, 1000, ts=1005), ingest(12, 11, 50, ts=1010), snapshot(13, 12, 2000)]
    state = table_state("db.r", records, head=13)
    entries = report.history(state)
    assert [(e.snapshot_id, e.raw_barrier, e.barrier) for e in entries] == [(13, None, 2000), (12, 50, 1001),
                                                                              (11, 1000, 1000)]
    assert {e.branch for e in entries} == {P.MAIN_BRANCH}
    assert [e.committed_at_ms for e in entries] == [2000, 1010, 1005]


# --- epochs ----------------------------------------------------------------------------------------
def epoch_part(snapshot_id: int, parent: int | None, barrier: int, ts: int, attempt: str, *, op: str = "append",
               added: int = 0, deleted: int = 0, total: int) -> SnapshotRecord:
    """One snapshot of an epoch as EpochJob stages it: barrier, job, inputs and the staging attempt."""
    counters = {"added-records": str(added), "deleted-records": str(deleted), "total-records": str(total),
                P.ATTEMPT: attempt}
    return snapshot(snapshot_id, parent, ts, barrier=barrier, op=op, job="job", sources={"db.r": barrier // 100},
                    summary=counters)


@pytest.fixture
def epochs_state() -> TableState:
    records = [
        genesis(20, job="job", ts=5),
        epoch_part(21, 20, 100, 150, "a1", added=2, total=2),  # published at 160
        epoch_part(22, 21, 300, 350, "a2", op="delete", deleted=2, total=0),  # an overwrite: delete ...
        epoch_part(23, 22, 300, 351, "a2", added=3, total=3),  # ... and append, published at 400
        epoch_part(24, 23, 400, 450, "a3", added=1, total=4),  # staged, not published
    ]
    main_log = ((6, 20), (160, 21), (400, 23))  # when main moved (Iceberg's snapshot log)
    return table_state("db.d", records, {P.MAIN_BRANCH: 23, STAGED: 24}, derived_properties("job", "db.r"),
                       main_log=main_log)


def test_epochs_group_an_attempts_snapshots_and_time_the_publish(epochs_state: TableState) -> None:
    assert report.epochs(epochs_state) == [
        EpochEntry(barrier=400, job="job", sources={"db.r": 4}, snapshot_ids=[24], branch=STAGED, staged_at_ms=450,
                   published_at_ms=None, publish_ms=None, latency_ms=None, added_records=1, deleted_records=0,
                   total_records=4),
        EpochEntry(barrier=300, job="job", sources={"db.r": 3}, snapshot_ids=[22, 23], branch=P.MAIN_BRANCH,
                   staged_at_ms=350, published_at_ms=400, publish_ms=50, latency_ms=100, added_records=3,
                   deleted_records=2, total_records=3),
        EpochEntry(barrier=100, job="job", sources={"db.r": 1}, snapshot_ids=[21], branch=P.MAIN_BRANCH,
                   staged_at_ms=150, published_at_ms=160, publish_ms=10, latency_ms=60, added_records=2,
                   deleted_records=0, total_records=2),
    ]  # the genesis (20) is no epoch


def test_an_epoch_missing_from_the_snapshot_log_was_published_by_its_commit_time(epochs_state: TableState) -> None:
    expired_log = table_state("db.d", epochs_state.snapshots.values(), epochs_state.branches, epochs_state.properties,
                              main_log=((400, 23),))
    oldest = report.epochs(expired_log)[-1]
    assert (oldest.barrier, oldest.published_at_ms, oldest.publish_ms, oldest.latency_ms) == (100, 150, 0, 50)


def test_two_attempts_at_one_barrier_are_two_epochs() -> None:
    """A zombie's staged attempt at 300 that was replaced by a new attempt at the same barrier: not one epoch."""
    records = [
        genesis(20, job="job", ts=5),
        epoch_part(21, 20, 300, 350, "old", added=1, total=1),
        epoch_part(22, 21, 300, 360, "new", added=1, total=2),
    ]
    state = table_state("db.d", records, head=22, properties=derived_properties("job", "db.r"))
    assert [(e.barrier, e.snapshot_ids) for e in report.epochs(state)] == [(300, [22]), (300, [21])]


# --- the freshness of a cut (protocol §6.7, issue #22) ------------------------------------------------
def test_freshness_of_a_cut_names_the_lagging_table_and_its_bottleneck() -> None:
    from consistent_catalog.resolver import resolve

    target = report.FreshnessTarget(fresher_than_ms=8_000)
    cut = resolve([FAST, JOIN], upstream=list(STATES.values()))
    found = report.freshness(STATES, ["db.fast", "db.join"], cut, target, now=NOW)
    # min W = 1000, but db.fast's genesis read nothing while db.r holds r1 at 1000: complete at 999 (§4.2)
    assert (found.barrier, found.delay_ms, found.fresh) == (999, 9001, False)
    # db.join (W 1000) lags; on its slowest path db.slow is 2000 behind db.r
    assert (found.lagging_table, found.bottleneck_job, found.bottleneck_table, found.bottleneck_delay_ms) == (
        "db.join", "slow", "db.slow", 2000)
    assert report.freshness(STATES, ["db.fast", "db.join"], cut, report.FreshnessTarget(fresher_than_ms=9_001),
                            now=NOW).fresh  # a delay of exactly D is fresh enough
    fast = report.freshness(STATES, ["db.fast"], resolve([FAST], upstream=[R]), target, now=NOW)
    # nothing lags between db.r and db.fast: the root is the bottleneck, NOW - W(db.r) behind
    assert (fast.bottleneck_job, fast.bottleneck_table, fast.bottleneck_delay_ms) == (None, "db.r", 7000)


@pytest.mark.parametrize("barrier, now, fresh", [(3000, 3000, True), (3001, 3000, False), (1000, 10**13, True)])
def test_a_barrier_target_is_met_from_that_barrier_on(barrier: int, now: int, fresh: bool) -> None:
    assert report.FreshnessTarget(barrier=barrier * 10**8).reached(now * 10**8, now=0) is fresh


def test_an_unresolvable_cut_is_not_fresh_and_the_blocking_table_is_the_bottleneck() -> None:
    from consistent_catalog.exceptions import NoWatermarkError

    never = table_state("db.never", [genesis(50, job="never")], properties=owned("never", "db.r", lease_until=NOW + 1),
                        head=50)
    states = {**STATES, "db.never": never}
    error = NoWatermarkError("db.never has no published epoch yet", table="db.never")
    found = report.freshness(states, ["db.never"], None, report.FreshnessTarget(fresher_than_ms=1), now=NOW,
                             error=error)
    assert (found.fresh, found.barrier, found.delay_ms, found.error) == (False, None, None, str(error))
    assert (found.bottleneck_job, found.bottleneck_table, found.bottleneck_delay_ms) == ("never", "db.never", None)
    assert found.to_json()["cut"] is None
