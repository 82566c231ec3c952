"""The pure expiry planner (protocol §9) on hand-built TableStates: which snapshots each table keeps, and why.

``plan_expiry`` (``consistent_catalog.retention.plan``), the retention policy and its durations
(``consistent_catalog.retention.policy``, ``consistent_catalog.util.durations``) and the names and
expiries of retained-cut tiers (``consistent_catalog.retention.tiers``): no catalog, no I/O. What
expiry does to real tables is in ``tests/catalog/test_retention.py``.
"""

from __future__ import annotations

import pytest

from consistent_catalog import properties as P
from consistent_catalog.exceptions import InvalidInputError
from consistent_catalog.retention.plan import plan_expiry
from consistent_catalog.retention.policy import RetentionPolicy
from consistent_catalog.retention.refs import RefInfo
from consistent_catalog.retention.tiers import tier_expiry, tier_period
from consistent_catalog.util.durations import parse_duration
from tests.harness import builders
from tests.harness.builders import EVERYTHING


def record(sid, parent, ts, barrier=None, *, op="append", sources=None, changes=True, job=None):
    counters = {"total-records": "1", "added-records": "1" if changes else "0"}
    return builders.snapshot(sid, parent, ts, barrier=barrier, op=op, job=job, sources=sources, summary=counters)


def chain_state(name, records, *, derived_from=(), branches=None, props=None):
    properties = dict(props or {})
    if derived_from:
        properties.update(builders.derived_properties("job", *derived_from))
    return builders.table_state(name, records, branches or {P.MAIN_BRANCH: records[-1].snapshot_id}, properties)


def refs_of(state, tags=()):
    out = {n: RefInfo(n, sid, False) for n, sid in state.branches.items()}
    out.update({t.name: t for t in tags})
    return out


def test_root_keeps_cut_and_head_and_expires_older_history():
    root = chain_state("db.r", [record(i, i - 1 if i > 1 else None, i * 10, i * 100) for i in range(1, 11)])
    plan_ = plan_expiry({"db.r": root}, {"db.r": refs_of(root)}, ["db.r"], EVERYTHING, now=10_000)
    table = plan_.tables["db.r"]
    assert set(table.expire) == set(range(1, 10)) and set(table.keep) == {10}
    assert any("latest repeatable-read cut" in r for r in table.keep[10])


def test_young_snapshots_and_keep_last_stay():
    root = chain_state("db.r", [record(i, i - 1 if i > 1 else None, i * 10, i * 100) for i in range(1, 11)])
    refs = {"db.r": refs_of(root)}
    young = plan_expiry({"db.r": root}, refs, ["db.r"], RetentionPolicy(older_than=35), now=100).tables["db.r"]
    assert set(young.expire) == set(range(1, 7))  # timestamps 70..100 are within 35 ms of now
    last = plan_expiry({"db.r": root}, refs, ["db.r"], RetentionPolicy(older_than=0, keep_last=3), now=100).tables["db.r"]
    assert set(last.keep) == {8, 9, 10}
    assert any("newest 3" in r for r in last.keep[8])


def test_older_than_takes_the_cli_durations_as_well_as_milliseconds():
    from datetime import timedelta

    assert RetentionPolicy(older_than="0s").older_than == 0
    assert RetentionPolicy(older_than="90s").older_than == 90 * 1000
    assert RetentionPolicy(older_than=timedelta(days=7)) == RetentionPolicy(older_than=7 * 86_400_000)
    assert RetentionPolicy.of(older_than="2h").older_than == 2 * 3_600_000
    for bad in ("-1s", "soon", True, -1):
        with pytest.raises(InvalidInputError):
            RetentionPolicy(older_than=bad)


def test_history_extends_back_until_barriers_are_unchanged():
    # snapshot 6 is late (raw barrier 50 < 500): its effective barrier 501 depends on snapshot 5
    records = [record(i, i - 1 if i > 1 else None, i * 10, i * 100) for i in range(1, 6)]
    records.append(record(6, 5, 60, 50))
    root = chain_state("db.r", records, branches={P.MAIN_BRANCH: 6})
    assert root.branch().barriers[-1] == 501
    table = plan_expiry({"db.r": root}, {"db.r": refs_of(root)}, ["db.r"], EVERYTHING, now=1000).tables["db.r"]
    assert 5 in table.keep and any("barrier continuity" in r for r in table.keep[5])
    assert set(table.expire) == {1, 2, 3, 4}


def test_inputs_recorded_downstream_are_kept_on_the_source_with_their_reason():
    root = chain_state("db.r", [record(i, i - 1 if i > 1 else None, i, i * 100) for i in range(1, 11)])
    # the derived table ran at barriers 300 and 900 only: its head records root snapshot 9, its older epoch 3
    derived = chain_state("db.d", [
        record(101, None, 950, 300, sources={"db.r": 3}, job="job"),
        record(102, 101, 960, 900, sources={"db.r": 9}, job="job"),
    ], derived_from=("db.r",))
    states = {"db.r": root, "db.d": derived}
    refs = {n: refs_of(s) for n, s in states.items()}
    both = plan_expiry(states, refs, ["db.d", "db.r"], EVERYTHING, now=1000)
    assert set(both.tables["db.d"].expire) == {101}
    assert set(both.tables["db.r"].expire) == set(range(1, 9))  # the cut is at 900: root snapshot 9
    assert list(both.cuts.values())[0].barrier == 900
    # db.d's epoch 101 is younger than the threshold, so it would stay, and its inputs stay on db.r
    # even when db.d itself is not expired in this run
    young = plan_expiry(states, refs, ["db.r"], RetentionPolicy(older_than=100), now=1000)
    assert list(young.tables) == ["db.r"] and set(young.tables["db.r"].expire) == {1, 2}
    assert any("inputs of db.d snapshot 101" in r for r in young.tables["db.r"].keep[3])


def test_a_compaction_at_the_boundary_keeps_the_epoch_it_inherits_inputs_from():
    root = chain_state("db.r", [record(i, i - 1 if i > 1 else None, i, i * 100) for i in range(1, 6)])
    derived = chain_state("db.d", [
        record(101, None, 1, 100, sources={"db.r": 1}, job="job"),
        record(102, 101, 2, 500, sources={"db.r": 5}, job="job"),
        record(103, 102, 3, op="replace", changes=False),
    ], derived_from=("db.r",))
    states = {"db.r": root, "db.d": derived}
    refs = {n: refs_of(s) for n, s in states.items()}
    table = plan_expiry(states, refs, ["db.d"], EVERYTHING, now=1000).tables["db.d"]
    assert set(table.expire) == {101}
    assert any("inherits its epoch inputs" in r for r in table.keep[102])


def test_tags_live_and_expired_and_foreign():
    root = chain_state("db.r", [record(i, i - 1 if i > 1 else None, i * 10, i * 100) for i in range(1, 11)])
    tags = [
        RefInfo("consistent-pin-live", 2, True, 1000),  # expires at 20 + 1000
        RefInfo("consistent-pin-old", 3, True, 10),  # expired at 40
        RefInfo("release-1.0", 4, True, 10),  # foreign: never dropped by us
        RefInfo("consistent-daily-x", 5, True, None),  # no age: kept forever
    ]
    table = plan_expiry({"db.r": root}, {"db.r": refs_of(root, tags)}, ["db.r"], EVERYTHING, now=500).tables["db.r"]
    assert table.drop_tags == {"consistent-pin-old": 3}
    assert {2, 4, 5, 10} == set(table.keep)
    assert any("consistent-pin-live" in r and "until" in r for r in table.keep[2])


def test_staged_epoch_ahead_of_main_keeps_its_snapshots_and_inputs():
    root = chain_state("db.r", [record(i, i - 1 if i > 1 else None, i, i * 100) for i in range(1, 11)])
    derived = chain_state("db.d", [
        record(101, None, 1, 500, sources={"db.r": 5}, job="job"),
        record(102, 101, 2, 800, sources={"db.r": 8}, job="job"),  # staged, not published
    ], derived_from=("db.r",), branches={P.MAIN_BRANCH: 101, P.STAGED_BRANCH: 102})
    states = {"db.r": root, "db.d": derived}
    refs = {n: refs_of(s) for n, s in states.items()}
    result = plan_expiry(states, refs, ["db.d", "db.r"], EVERYTHING, now=1000)
    assert result.tables["db.d"].expire == ()
    assert set(result.tables["db.r"].expire) == {1, 2, 3, 4}  # the cut (500) needs root 5


def test_tier_names_and_expiry():
    now = 1795323000000  # 2026-11-22T04:50:00Z, a Sunday (ISO week 47)
    assert tier_period("hourly", now)[0] == "consistent-hourly-20261122T04"
    assert tier_period("daily", now)[0] == "consistent-daily-20261122"
    assert tier_period("weekly", now)[0] == "consistent-weekly-2026W47"
    name, expires = tier_expiry("daily", 7, now)
    assert expires == tier_period("daily", now)[1] + 7 * 86_400_000
    assert tier_period("weekly", now)[1] == 1794787200000  # Monday 2026-11-16T00:00Z


@pytest.mark.parametrize("text,ms", [("500ms", 500), ("90s", 90_000), ("30m", 1_800_000), ("12h", 43_200_000),
                                      ("7d", 604_800_000), ("2w", 1_209_600_000), ("1500", 1500), (0, 0)])
def test_parse_duration(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("bad", ["soon", "-1h", "1y", True])
def test_parse_duration_rejects_nonsense(bad):
    with pytest.raises(InvalidInputError):
        parse_duration(bad)
