"""Protocol §3 (barrier of a snapshot, snap(X, T), watermarks) on plain data: no catalog, no I/O.

Expected values are written out by hand from the rules of protocol §3 (docs/protocol.md), never computed by
the code under test.
"""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consistent_catalog import properties as P
from consistent_catalog.barrier import (
    PLAUSIBLE_MAX_MS,
    PLAUSIBLE_MIN_MS,
    SnapshotRecord,
    parse_barrier,
    parse_barrier_value,
    to_barrier,
    watermark,
)
from consistent_catalog.exceptions import (
    HistoryExpiredError,
    InvalidBarrierError,
    MalformedMetadataError,
    UntrackedWriteError,
)
from consistent_catalog.resolver import resolve
from consistent_catalog.state import TableState
from tests.harness.builders import EMPTY_TOTALS, derived_properties, epoch, genesis, snapshot, table_state

ROOT = "db.events"
DERIVED = "db.counts"
JOB = "count-job"
DERIVED_PROPERTIES = derived_properties(JOB, ROOT)


def epoch_snap(snapshot_id: int, parent: int | None, barrier: int, *, added: int = 1, total: int = 1) -> SnapshotRecord:
    """A snapshot as an epoch of ``count-job`` commits it (tagged, with change counters)."""
    # system time is irrelevant on a derived table
    return epoch(snapshot_id, parent, barrier, job=JOB, sources={ROOT: 1}, ts=barrier + 7, added=added, total=total)


def empty_genesis(snapshot_id: int, parent: int | None = None) -> SnapshotRecord:
    """The untagged empty append that prepare_staged_branch commits on an empty sink."""
    return genesis(snapshot_id, job=JOB, parent=parent, ts=5)


def table(
    identifier: str,
    records: list[SnapshotRecord],
    head: int | None,
    *,
    properties: dict[str, str] | None = None,
) -> TableState:
    props = dict(properties or {})
    if identifier == DERIVED:
        props = {**DERIVED_PROPERTIES, **props}
    return table_state(identifier, records, properties=props, head=head)


def chain(*records: SnapshotRecord) -> list[SnapshotRecord]:
    return list(records)


# --- raw barriers: system time on roots, consistent.barrier everywhere ------------------------------


def test_root_without_tags_uses_system_time() -> None:
    state = table(ROOT, chain(snapshot(11, None, 1000), snapshot(12, 11, 2000), snapshot(13, 12, 3000)), 13)
    history = state.branch()
    assert history.snapshot_ids == (11, 12, 13)
    assert history.barriers == (1000, 2000, 3000)
    assert history.head_barrier == 3000
    assert history.snap_at(2500) == (12, 2000)
    assert history.snap_at(2000) == (12, 2000)  # b <= T is inclusive
    assert history.snap_at(1999) == (11, 1000)
    assert history.snap_at(10**15) == (13, 3000)


def test_consistent_barrier_overrides_system_time_on_a_root() -> None:
    state = table(
        ROOT, chain(snapshot(11, None, 9000, barrier=100), snapshot(12, 11, 9500), snapshot(13, 12, 9900, barrier=9700)), 13
    )
    # 11: tag 100; 12: untagged -> its timestamp 9500; 13: tag 9700
    assert state.branch().barriers == (100, 9500, 9700)
    assert state.branch().snap_at(9499) == (11, 100)


def test_derived_table_barriers_come_from_its_epochs() -> None:
    state = table(DERIVED, chain(epoch_snap(21, None, 500), epoch_snap(22, 21, 800, total=2)), 22)
    assert state.branch().barriers == (500, 800)
    assert state.branch().snap_at(799) == (21, 500)
    assert state.watermark() == 800


def test_replace_keeps_the_parents_barrier() -> None:
    records = chain(
        snapshot(11, None, 1000),
        # compaction hours later: system time 50_000, but it changes no data
        snapshot(12, 11, 50_000, op="replace", summary={"added-data-files": "1", "deleted-data-files": "4"}),
        # even a consistent.barrier on a replace does not move the barrier
        snapshot(13, 12, 60_000, op="replace", barrier=70_000),
        snapshot(14, 13, 2000),
    )
    state = table(ROOT, records, 14)
    assert state.branch().barriers == (1000, 1000, 1000, 2000)
    # snap(X, 1000) is the newest snapshot with b <= 1000: the last compaction
    assert state.branch().snap_at(1500) == (13, 1000)


def test_untagged_replace_on_a_derived_table_is_not_an_untracked_write() -> None:
    records = chain(
        epoch_snap(21, None, 500),
        snapshot(
            22,
            21,
            99_999,
            op="replace",
            summary={"added-data-files": "1", "deleted-data-files": "3", "total-records": "1"},
        ),
    )
    state = table(DERIVED, records, 22)
    assert state.branch().barriers == (500, 500)
    assert state.branch().untracked is None
    assert state.watermark() == 500


def test_late_snapshot_gets_parent_plus_one_and_later_snapshots_continue_from_there() -> None:
    records = chain(
        snapshot(11, None, 1, barrier=1000),
        snapshot(12, 11, 2, barrier=400),  # late: 400 < 1000 -> 1001
        snapshot(13, 12, 3, barrier=900),  # still late: 900 < 1001 -> 1002
        snapshot(14, 13, 4, barrier=1003),  # on time again
        snapshot(15, 14, 5, barrier=1500),
    )
    state = table(ROOT, records, 15)
    assert state.branch().barriers == (1000, 1001, 1002, 1003, 1500)
    history = state.branch()
    # a barrier already declared complete never changes content: T=1000 still reads snapshot 11
    assert history.snap_at(1000) == (11, 1000)
    assert history.snap_at(1001) == (12, 1001)
    assert history.snap_at(1002) == (13, 1002)
    assert history.snap_at(1499) == (14, 1003)
    assert history.snap_at(1500) == (15, 1500)
    assert history.snap_at(999) is None


def test_late_system_time_snapshot_clock_skew() -> None:
    state = table(ROOT, chain(snapshot(11, None, 2000), snapshot(12, 11, 1500), snapshot(13, 12, 1800)), 13)
    assert state.branch().barriers == (2000, 2001, 2002)


def test_first_snapshot_takes_its_raw_barrier() -> None:
    state = table(ROOT, chain(snapshot(11, None, 1, barrier=7)), 11)
    assert state.branch().barriers == (7,)
    assert state.branch().snap_at(6) is None
    assert state.branch().snap_at(7) == (11, 7)


# --- untracked writes on derived tables -------------------------------------------------------------


@pytest.mark.parametrize(
    "summary",
    [
        {"added-data-files": "1", "added-records": "5", "total-records": "5"},
        {"deleted-data-files": "1", "deleted-records": "3", "total-records": "0"},
        {},  # no counters at all: unknown counts as a change
    ],
    ids=["append", "delete", "no-counters"],
)
def test_untracked_write_on_a_derived_table_fails_naming_table_and_snapshot(summary: dict[str, str]) -> None:
    """Protocol §3.3: untracked from the foreign snapshot on; what came before stays readable."""
    records = chain(epoch_snap(21, None, 500), snapshot(424242, 21, 600, op="overwrite", summary=summary))
    state = table(DERIVED, records, 424242)
    history = state.branch()
    assert history.untracked == 424242
    assert history.barriers == (500, None)
    # the tracked prefix still answers: snap and W stop at the last tracked snapshot
    assert history.head_barrier == 500 and history.snap_at(10_000) == (21, 500) and state.watermark() == 500
    for resolve_cut in (lambda: resolve([state]), lambda: resolve([state], as_of=501)):
        with pytest.raises(UntrackedWriteError) as raised:  # a cut past it names the table and the snapshot
            resolve_cut()
        message = str(raised.value)
        assert DERIVED in message
        assert "424242" in message
    assert resolve([state], as_of=500)[DERIVED].snapshot_id == 21  # cuts before it still resolve


def test_untagged_write_on_a_root_is_system_time_not_untracked() -> None:
    state = table(ROOT, chain(snapshot(11, None, 100, summary={"added-records": "5", "total-records": "5"})), 11)
    assert state.branch().untracked is None
    assert state.watermark() == 100


def test_genesis_snapshot_is_allowed_and_has_no_barrier() -> None:
    state = table(DERIVED, chain(empty_genesis(20)), 20)
    history = state.branch()
    assert history.untracked is None
    assert history.barriers == (None,)
    assert history.head_barrier is None
    assert history.snap_at(10**15) is None
    assert state.watermark() is None


def test_genesis_with_zero_counters_is_allowed() -> None:
    zero = {"added-data-files": "0", "added-records": "0", **EMPTY_TOTALS}
    state = table(DERIVED, chain(snapshot(20, None, 5, summary=zero)), 20)
    assert state.branch().untracked is None
    assert state.branch().barriers == (None,)


def test_genesis_then_epochs() -> None:
    state = table(DERIVED, chain(empty_genesis(20), epoch_snap(21, 20, 300), epoch_snap(22, 21, 450, total=2)), 22)
    history = state.branch()
    assert history.barriers == (None, 300, 450)
    assert history.snap_at(299) is None  # empty at T=299, not the genesis snapshot and not an error
    assert history.snap_at(300) == (21, 300)
    assert history.snap_at(500) == (22, 450)
    assert state.watermark() == 450


def test_empty_derived_table_with_watermark_only() -> None:
    state = table(DERIVED, chain(empty_genesis(20)), 20, properties={P.WATERMARK: "700"})
    assert state.watermark() == 700


# --- snap(X, T): empty vs history expired --------------------------------------------------------------


def test_snap_before_first_snapshot_is_empty() -> None:
    state = table(ROOT, chain(snapshot(11, None, 1000), snapshot(12, 11, 2000)), 12)
    assert state.branch().truncated is False
    assert state.branch().snap_at(999) is None
    assert state.branch().snap_at(0) is None


def test_snap_before_oldest_retained_snapshot_is_history_expired() -> None:
    # snapshot 10 (the parent of 11) was expired
    state = table(ROOT, chain(snapshot(11, 10, 1000), snapshot(12, 11, 2000)), 12)
    history = state.branch()
    assert history.truncated is True
    assert history.snap_at(1000) == (11, 1000)
    assert history.snap_at(2500) == (12, 2000)
    with pytest.raises(HistoryExpiredError) as raised:
        history.snap_at(999)
    assert ROOT in str(raised.value)


def test_empty_table_has_no_history() -> None:
    state = table(ROOT, [], None)
    assert state.branch().snapshot_ids == ()
    assert state.branch().head_barrier is None
    assert state.branch().snap_at(123) is None


def test_missing_branch_head_is_malformed() -> None:
    state = table(ROOT, chain(snapshot(11, None, 1000)), 99)
    with pytest.raises(MalformedMetadataError):
        state.branch()


def test_ancestry_cycle_is_malformed() -> None:
    state = table(ROOT, chain(snapshot(11, 12, 1000), snapshot(12, 11, 2000)), 12)
    with pytest.raises(MalformedMetadataError):
        state.branch()


# --- watermark W(X) = max(b(head), consistent.watermark) -----------------------------------------------


@pytest.mark.parametrize(
    ("head_ts", "watermark_property", "expected"),
    [
        (1000, None, 1000),
        (1000, "1500", 1500),
        (1000, "500", 1000),
        (1000, "1000", 1000),
        (None, "700", 700),
        (None, None, None),
    ],
)
def test_watermark(head_ts: int | None, watermark_property: str | None, expected: int | None) -> None:
    records = [] if head_ts is None else chain(snapshot(11, None, head_ts))
    props = {} if watermark_property is None else {P.WATERMARK: watermark_property}
    state = table(ROOT, records, None if head_ts is None else 11, properties=props)
    assert state.watermark() == expected


def test_watermark_function() -> None:
    assert watermark(None, None) is None
    assert watermark(5, None) == 5
    assert watermark(None, 5) == 5
    assert watermark(5, 9) == 9
    assert watermark(9, 5) == 9


def watermarked(records: list[SnapshotRecord], head: int, value: int, marker: int | None) -> TableState:
    """A root whose watermark was advanced to ``value`` when ``marker`` was main's head, as advance_watermark
    writes it (consistent.watermark-snapshot is the project's extension of protocol §2, see docs/protocol.md)."""
    props = {P.WATERMARK: str(value), P.WATERMARK_SNAPSHOT: P.NO_SNAPSHOT if marker is None else str(marker)}
    return table(ROOT, records, head, properties=props)


def test_snapshot_committed_after_a_watermark_lands_above_it() -> None:
    """Protocol §3's late rule exists "so a barrier already declared complete never changes content", and the
    watermark declares barriers complete too: a plain writer's snapshot with system time 3000, committed after
    the watermark of a root at b(head)=1000 was advanced to 5000, must not change snap(X, 5000)."""
    first = snapshot(11, None, 1, barrier=1000)
    before = watermarked([first], 11, 5000, marker=11)
    assert before.branch().snap_at(5000) == (11, 1000)  # what jobs and readers were told T=5000 holds
    after = watermarked([first, snapshot(12, 11, 3000)], 12, 5000, marker=11)
    assert after.branch().barriers == (1000, 5001)
    assert after.branch().snap_at(5000) == (11, 1000)
    assert after.watermark() == 5001


def test_watermark_on_an_empty_table_applies_to_its_first_snapshot() -> None:
    state = watermarked([snapshot(11, None, 3000)], 11, 5000, marker=None)
    assert state.branch().barriers == (5001,)


def test_a_later_watermark_advance_keeps_earlier_snapshots_above_the_earlier_watermark() -> None:
    """After the case above, the watermark is advanced again (to 9000, with snapshot 12 as main's head).
    Snapshot 12 was committed when the table was complete up to 5000, so its barrier stays 5001 and
    snap(X, 5000) stays snapshot 11. Only the newest (watermark, head) pair is stored, so recomputing the
    barriers must not forget the earlier floor."""
    records = [snapshot(11, None, 1, barrier=1000), snapshot(12, 11, 3000)]
    first = watermarked(records, 12, 5000, marker=11)
    assert first.branch().barriers == (1000, 5001)
    # the second advance is written the way advance_watermark writes it: from the table's current state
    advanced = table(ROOT, records, 12, properties=first.watermark_properties(9000))
    assert advanced.properties[P.WATERMARK_SNAPSHOT] == "12"
    assert advanced.branch().barriers == (1000, 5001)
    assert advanced.branch().snap_at(5000) == (11, 1000)


def test_snapshot_with_the_heads_barrier_does_not_change_a_completed_barrier() -> None:
    """W(X) = b(head) declares the root complete up to b(head) (protocol §3): a job may process T = 1000 reading
    snap(X, 1000) = 11. A second commit with the same raw barrier (two system-time commits in the same
    millisecond, or one event-time batch written in two commits) gets b = raw = 1000 by the letter of protocol §3
    ("b(s) = raw(s) when raw(s) >= b(p)") and silently changes snap(X, 1000) under that job: the rows of 12 are
    in no epoch at 1000 and the barrier-1000 content read by readers changes. Treating raw == b(p) as late
    (b(p) + 1) on roots, or W(root) = max(b(head) - 1, watermark), keeps completed barriers immutable."""
    one = table(ROOT, chain(snapshot(11, None, 1, barrier=1000)), 11)
    complete_up_to = one.watermark()
    assert complete_up_to is not None
    before = one.branch().snap_at(complete_up_to)
    two = table(ROOT, chain(snapshot(11, None, 1, barrier=1000), snapshot(12, 11, 2, barrier=1000)), 12)
    assert two.branch().snap_at(complete_up_to) == before


# --- malformed stored values ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "-5", "1.5", "", " ", "1e3", "0x10", pytest.param("²", id="superscript-2")])
def test_malformed_snapshot_barrier(value: str) -> None:
    state = table(ROOT, chain(snapshot(11, None, 1000, summary={P.BARRIER: value})), 11)
    with pytest.raises(MalformedMetadataError):
        state.branch()


@pytest.mark.parametrize("value", ["abc", "-5", "1.5", pytest.param("²", id="superscript-2")])
def test_malformed_watermark_property(value: str) -> None:
    state = table(ROOT, chain(snapshot(11, None, 1000)), 11, properties={P.WATERMARK: value})
    with pytest.raises(MalformedMetadataError):
        state.watermark()


def test_parse_barrier_value_accepts_decimal_digits() -> None:
    assert parse_barrier_value("1700000000123", where="x") == 1700000000123
    assert parse_barrier_value(" 42 ", where="x") == 42
    assert parse_barrier_value("0", where="x") == 0


# --- to_barrier: what callers may pass ------------------------------------------------------------------

UTC = timezone.utc
# 1_700_000_000 s is 2023-11-14T22:13:20Z
T_2023 = 1_700_000_000_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (T_2023 + 123, T_2023 + 123),
        (datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC), T_2023 + 123),
        (datetime(2023, 11, 14, 22, 13, 20, 123000), T_2023 + 123),  # naive = UTC
        (datetime(2023, 11, 14, 23, 13, 20, tzinfo=timezone(timedelta(hours=1))), T_2023),
        (datetime(1970, 1, 1, tzinfo=UTC), 0),
        (date(2023, 11, 14), T_2023 - (22 * 3600 + 13 * 60 + 20) * 1000),
        ("2023-11-14T22:13:20.123Z", T_2023 + 123),
        ("2023-11-14T22:13:20.123+00:00", T_2023 + 123),
        ("2023-11-14T23:13:20+01:00", T_2023),
        ("2023-11-14T22:13:20", T_2023),  # naive ISO = UTC
        ("2023-11-14", T_2023 - (22 * 3600 + 13 * 60 + 20) * 1000),
        ("1700000000123", T_2023 + 123),
        (" 1700000000123 ", T_2023 + 123),
        ("0", 0),
        (42, 42),  # an int a program computed is taken as given (logical clocks); text must be plausible
        # float arithmetic on timestamp() must not lose the millisecond
        (datetime(1970, 1, 1, 0, 0, 1, 1000, tzinfo=UTC), 1001),
        (datetime(2004, 5, 31, 13, 17, 20, 909000, tzinfo=UTC), 1_086_009_440_909),
        ("2004-05-31T13:17:20.909Z", 1_086_009_440_909),
    ],
)
def test_to_barrier_accepts(value: object, expected: int) -> None:
    assert to_barrier(value) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        -1,
        "-5",
        True,
        False,
        "abc",
        "",
        "1.5",
        1.5,
        None,
        [1],
        datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
        "yesterday",
        pytest.param("²", id="superscript-2"),  # str.isdigit() is True, int() fails
        # text outside the plausible range (protocol §3.8): seconds, microseconds, before 1973, from 2200
        " 42 ",
        "1700000000",
        "1700000000000000",
        "1970-01-01T00:00:01.001Z",
        "2200-01-01T00:00:00Z",
        "-5",
    ],
)
def test_to_barrier_rejects(value: object) -> None:
    with pytest.raises(InvalidBarrierError):
        to_barrier(value)  # type: ignore[arg-type]


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=253_402_300_799_999))  # up to 9999-12-31T23:59:59.999Z
def test_to_barrier_is_exact_for_millisecond_datetimes(ms: int) -> None:
    moment = EPOCH + timedelta(milliseconds=ms)
    assert to_barrier(moment) == ms
    assert to_barrier(moment.replace(tzinfo=None)) == ms
    if ms == 0 or PLAUSIBLE_MIN_MS <= ms < PLAUSIBLE_MAX_MS:  # 0: the start of time
        assert to_barrier(moment.isoformat()) == ms
    else:
        with pytest.raises(InvalidBarrierError, match="outside the plausible barriers"):
            to_barrier(moment.isoformat())


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2**62))
def test_to_barrier_keeps_integers_and_plausible_digit_strings(ms: int) -> None:
    assert to_barrier(ms) == ms
    if ms == 0 or PLAUSIBLE_MIN_MS <= ms < PLAUSIBLE_MAX_MS:
        assert to_barrier(str(ms)) == ms
    else:
        with pytest.raises(InvalidBarrierError, match=f"^barrier '{ms}': {ms} ms is "):
            to_barrier(str(ms))


# --- parse_barrier: the grammar of protocol §3.8 (the corpus's barrier queries hold more forms) ----------------


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=PLAUSIBLE_MIN_MS, max_value=PLAUSIBLE_MAX_MS - 1))
def test_a_barrier_in_seconds_or_microseconds_is_refused_with_its_milliseconds(ms: int) -> None:
    """The user's trap: seconds (or microseconds) where milliseconds belong. The refusal names the value in ms and
    its UTC time, computed here with datetime, not with the module's formatter."""
    readable = (EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    seconds, micros = ms // 1000, ms * 1000
    if seconds < PLAUSIBLE_MIN_MS and seconds > 0:
        with pytest.raises(InvalidBarrierError, match=rf"in seconds {seconds} would be {seconds * 1000} \("):
            parse_barrier(str(seconds))
    with pytest.raises(InvalidBarrierError, match=rf"in microseconds {micros} would be {ms} \({readable}\)"):
        parse_barrier(str(micros))
    assert parse_barrier(str(ms)) == ms


def test_the_seconds_refusal_reads_as_the_cli_user_met_it() -> None:
    with pytest.raises(InvalidBarrierError) as caught:
        parse_barrier("1700000000")
    assert str(caught.value) == (
        "barrier '1700000000': 1700000000 ms is 1970-01-20 16:13:20.000Z, outside the plausible barriers (1973-03-03 "
        "to 2200-01-01): barriers are milliseconds — in seconds 1700000000 would be 1700000000000 "
        "(2023-11-14 22:13:20.000Z)")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("now", T_2023), ("Now ", T_2023), ("now-5m", T_2023 - 300_000), ("now + 2h", T_2023 + 7_200_000),
     ("-1d", T_2023 - 86_400_000), ("-90s", T_2023 - 90_000), ("now-250", T_2023 - 250)],
)
def test_now_and_relative_barriers_read_the_clock_given(text: str, expected: int) -> None:
    assert parse_barrier(text, now=T_2023) == expected
    assert to_barrier(text, now=T_2023) == expected


def test_now_without_a_clock_given_is_the_wall_clock() -> None:
    before = int(time.time() * 1000)
    got = parse_barrier("now-1m")
    after = int(time.time() * 1000)
    assert before - 60_000 <= got <= after - 60_000
