"""Protocol §4 (consistent cuts at the three isolation levels, as_of, the JSON shape) on plain TableStates.

The fixture pipeline, barriers written as offsets from T = 2023-11-14T22:13:20Z:

    db.a (root)     101 b=T+100   102 b=T+200   103 b=T+300                       W = T+300
    db.b (root)     201 b=T+120   202 b=T+250   consistent.watermark = T+400      W = T+400
    db.d <- db.a    300 genesis   301 b=T+100   302 b=T+200 (main)                W(main) = T+200
                                                303 b=T+300 on consistent-staged  W(staged) = T+300
    db.e (root)     empty, no watermark                                           W = none
    db.f (root)     empty, consistent.watermark = T+50                            W = T+50
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from consistent_catalog import properties as P
from consistent_catalog.exceptions import (
    HistoryExpiredError,
    InvalidBarrierError,
    InvalidInputError,
    NoWatermarkError,
    UntrackedWriteError,
)
from consistent_catalog.resolver import LEVELS, resolve
from tests.harness.builders import T0 as T
from tests.harness.builders import derived_properties, epoch, genesis, ingest, snapshot, table_state

UTC = timezone.utc


A_RECORDS = [ingest(101, None, T + 100), ingest(102, 101, T + 200), ingest(103, 102, T + 300)]
A = table_state("db.a", A_RECORDS, {P.MAIN_BRANCH: 103})
B = table_state(
    "db.b",
    [ingest(201, None, T + 120), ingest(202, 201, T + 250)],
    {P.MAIN_BRANCH: 202},
    {P.WATERMARK: str(T + 400)},
)
D_RECORDS = [
    genesis(300, job="d-job", ts=T),
    epoch(301, 300, T + 100, job="d-job", sources={"db.a": 101}),
    epoch(302, 301, T + 200, job="d-job", sources={"db.a": 102}),
    epoch(303, 302, T + 300, job="d-job", sources={"db.a": 103}),
]
D = table_state("db.d", D_RECORDS, {P.MAIN_BRANCH: 302, P.STAGED_BRANCH: 303}, derived_properties("d-job", "db.a"))
E = table_state("db.e", [], {})
F = table_state("db.f", [], {}, {P.WATERMARK: str(T + 50)})


def ids(cut: object) -> dict[str, int | None]:
    return {name: t.snapshot_id for name, t in cut.tables.items()}  # type: ignore[attr-defined]


def barriers(cut: object) -> dict[str, int | None]:
    return {name: t.barrier for name, t in cut.tables.items()}  # type: ignore[attr-defined]


# --- repeatable-read --------------------------------------------------------------------------------


def test_repeatable_read_takes_the_minimum_watermark_on_main() -> None:
    cut = resolve([A, B, D])
    assert cut.level == "repeatable-read"
    assert cut.barrier == T + 200  # min(T+300, T+400, T+200): the staged epoch of db.d does not count
    assert ids(cut) == {"db.a": 102, "db.b": 201, "db.d": 302}
    assert barriers(cut) == {"db.a": T + 200, "db.b": T + 120, "db.d": T + 200}
    assert {t.branch for t in cut.tables.values()} == {P.MAIN_BRANCH}


def test_repeatable_read_uses_the_watermark_property() -> None:
    cut = resolve([A, B], "repeatable-read")
    assert cut.barrier == T + 300  # W(db.b) = max(T+250, T+400) = T+400 does not hold db.a back
    assert ids(cut) == {"db.a": 103, "db.b": 202}
    only_b = resolve([B])
    assert only_b.barrier == T + 400
    assert ids(only_b) == {"db.b": 202}
    assert barriers(only_b) == {"db.b": T + 250}


def test_table_empty_at_the_cut_has_null_snapshot() -> None:
    cut = resolve([A, F])
    assert cut.barrier == T + 50
    assert ids(cut) == {"db.a": None, "db.f": None}
    assert barriers(cut) == {"db.a": None, "db.f": None}


def test_staged_epoch_is_not_visible_at_repeatable_read() -> None:
    cut = resolve([D])
    assert cut.barrier == T + 200
    assert ids(cut) == {"db.d": 302}


# --- read-committed --------------------------------------------------------------------------------


def test_read_committed_reads_the_staged_branch_when_ahead() -> None:
    cut = resolve([A, B, D], "read-committed")
    assert cut.barrier == T + 300
    assert ids(cut) == {"db.a": 103, "db.b": 202, "db.d": 303}
    assert cut["db.d"].branch == P.STAGED_BRANCH
    assert cut["db.a"].branch == P.MAIN_BRANCH
    alone = resolve([D], "read-committed")
    assert alone.barrier == T + 300
    assert ids(alone) == {"db.d": 303}


def test_read_committed_ignores_a_staged_branch_that_does_not_descend_from_main() -> None:
    # the staged epoch 304 was built on 301, but main has moved on to 302 since: it is stale, not ahead
    stale = epoch(304, 301, T + 300, job="d-job", sources={"db.a": 103})
    d = table_state("db.d", [*D_RECORDS[:3], stale], {P.MAIN_BRANCH: 302, P.STAGED_BRANCH: 304}, D.properties)
    cut = resolve([d], "read-committed")
    assert cut.barrier == T + 200
    assert ids(cut) == {"db.d": 302}
    assert cut["db.d"].branch == P.MAIN_BRANCH


def test_read_committed_with_staged_equal_to_main() -> None:
    d = table_state("db.d", D_RECORDS[:3], {P.MAIN_BRANCH: 302, P.STAGED_BRANCH: 302}, D.properties)
    cut = resolve([d], "read-committed")
    assert cut.barrier == T + 200
    assert ids(cut) == {"db.d": 302}


# --- read-uncommitted -----------------------------------------------------------------------------


def test_read_uncommitted_reads_newest_states_without_a_barrier() -> None:
    cut = resolve([A, B, D, E, F], "read-uncommitted")
    assert cut.level == "read-uncommitted"
    assert cut.barrier is None
    assert ids(cut) == {"db.a": 103, "db.b": 202, "db.d": 303, "db.e": None, "db.f": None}
    assert barriers(cut) == {"db.a": T + 300, "db.b": T + 250, "db.d": T + 300, "db.e": None, "db.f": None}
    assert cut.to_json()["barrier"] is None


def test_read_uncommitted_as_of() -> None:
    cut = resolve([A, B, D], "read-uncommitted", as_of=T + 150)
    assert cut.barrier is None
    assert ids(cut) == {"db.a": 101, "db.b": 201, "db.d": 301}


# --- as_of ------------------------------------------------------------------------------------------


def test_as_of_clamps_the_cut() -> None:
    cut = resolve([A, B, D], as_of=T + 150)
    assert cut.barrier == T + 150
    assert ids(cut) == {"db.a": 101, "db.b": 201, "db.d": 301}
    later = resolve([A, B, D], as_of=T + 10_000)
    assert later.barrier == T + 200  # min(T*, A): as_of never reads past T*
    assert ids(later) == {"db.a": 102, "db.b": 201, "db.d": 302}


@pytest.mark.parametrize(
    "as_of",
    [
        datetime(2023, 11, 14, 22, 13, 20, 150000, tzinfo=UTC),
        datetime(2023, 11, 14, 22, 13, 20, 150000),  # naive = UTC
        "2023-11-14T22:13:20.150Z",
        "2023-11-14T23:13:20.150+01:00",
        str(T + 150),
        T + 150,
    ],
)
def test_as_of_accepts_points_in_time(as_of: object) -> None:
    cut = resolve([A, B, D], as_of=as_of)  # type: ignore[arg-type]
    assert cut.barrier == T + 150
    assert ids(cut) == {"db.a": 101, "db.b": 201, "db.d": 301}


def test_as_of_before_every_snapshot_is_refused() -> None:
    """Protocol §4.4: a cut before the first barrier of every table holds nothing (usually seconds given)."""
    with pytest.raises(InvalidBarrierError, match="before the first barrier of every table"):
        resolve([A, B], as_of=T + 50)
    with pytest.raises(InvalidBarrierError, match="milliseconds"):
        resolve([A, B], as_of=(T + 200) // 1000)


def test_as_of_at_read_committed() -> None:
    cut = resolve([A, D], "read-committed", as_of=T + 250)
    assert cut.barrier == T + 250  # min(T*=T+300, T+250)
    assert ids(cut) == {"db.a": 102, "db.d": 302}
    assert cut["db.d"].branch == P.STAGED_BRANCH


def test_invalid_as_of() -> None:
    with pytest.raises(InvalidBarrierError):
        resolve([A], as_of="last tuesday")
    with pytest.raises(InvalidBarrierError):
        resolve([A], as_of=-1)


def test_as_of_before_expired_history() -> None:
    truncated = table_state("db.a", A_RECORDS[1:], {P.MAIN_BRANCH: 103})  # 101 was expired
    assert resolve([truncated], as_of=T + 200).tables["db.a"].snapshot_id == 102
    with pytest.raises(HistoryExpiredError, match="db.a"):
        resolve([truncated], as_of=T + 150)


def test_as_of_between_epochs_is_still_consistent() -> None:
    """Protocol §4 calls as_of "historical consistent reads"; protocol §7: at every repeatable-read cut
    sum(word_counts.cnt) = count(words).

    demo.words gets one word per snapshot (b=T+100, T+200); word-count runs once, at T = W(words) = T+200,
    so its only epoch holds both words. A cut as_of T+150 reads words at snapshot 1 (one word) but
    word_counts at snap(word_counts, T+150) = empty: sum(cnt) = 0 != count(words) = 1. A consistent answer is
    either a cut whose barrier is an epoch boundary of word_counts (here < T+100: both empty) or an error.
    """
    words = table_state("demo.words", [ingest(1, None, T + 100), ingest(2, 1, T + 200)], {P.MAIN_BRANCH: 2})
    word_counts = table_state(
        "demo.word_counts",
        [genesis(10, job="word-count", ts=T), epoch(11, 10, T + 200, job="word-count", sources={"demo.words": 2})],
        {P.MAIN_BRANCH: 11},
        derived_properties("word-count", "demo.words"),
    )
    count_words = {None: 0, 1: 1, 2: 2}  # rows of demo.words at each snapshot
    sum_counts = {None: 0, 10: 0, 11: 2}  # sum(cnt) of demo.word_counts at each snapshot
    now = resolve([words, word_counts])
    assert count_words[now["demo.words"].snapshot_id] == sum_counts[now["demo.word_counts"].snapshot_id]
    historical = resolve([words, word_counts], as_of=T + 150)
    assert count_words[historical["demo.words"].snapshot_id] == sum_counts[historical["demo.word_counts"].snapshot_id]


# --- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["repeatable-read", "read-committed"])
def test_empty_table_without_watermark_blocks_the_cut(level: str) -> None:
    with pytest.raises(NoWatermarkError) as raised:
        resolve([A, E], level)
    assert "db.e" in str(raised.value)


def test_derived_table_with_only_genesis_and_no_watermark_blocks_the_cut() -> None:
    d = table_state("db.d", [genesis(300, job="d-job", ts=T)], {P.MAIN_BRANCH: 300}, D.properties)
    with pytest.raises(NoWatermarkError, match="db.d"):
        resolve([A, d])


def test_a_derived_table_whose_job_stopped_before_its_first_epoch_says_so_not_empty_root() -> None:
    """Issue 42, item 4: a job that registered and failed (its lease released) leaves a derived table with no
    watermark: the cut names the job and says it has no running instance, not "an empty root table"."""
    d = table_state("db.d", [genesis(300, job="d-job", ts=T)], {P.MAIN_BRANCH: 300}, D.properties)
    with pytest.raises(NoWatermarkError) as raised:
        resolve([A, d])
    message = str(raised.value)
    assert "derived table of job d-job, which registered but has not published an epoch and has no running" in message
    assert "empty root" not in message and raised.value.table == "db.d"
    running = table_state("db.d", [genesis(300, job="d-job", ts=T)], {P.MAIN_BRANCH: 300},
                          {**D.properties, P.LEASE_HOLDER: "abc123"})
    with pytest.raises(NoWatermarkError, match="its job d-job has not published an epoch — start it"):
        resolve([A, running])


def test_empty_epoch_published_as_a_watermark_completes_the_table() -> None:
    """Protocol §5.3: an epoch that produced nothing is published by setting consistent.watermark = T, with no
    snapshot; protocol §2: the watermark is the "barrier up to which the table is complete even though no newer
    snapshot carries it (idle source, empty epoch)"; protocol §4: T* = min W.

    db.d's job (a filter that kept no row) ran at T+250 over db.a@102 and published watermark T+250. By
    protocol §4 the cut of {db.a, db.d} is T+250 with db.a@102 and db.d empty. (SparkEpochJob.stage publishes
    exactly this when its transform returns None.)
    """
    d = table_state("db.d", [genesis(300, job="d-job", ts=T)], {P.MAIN_BRANCH: 300}, {**D.properties, P.WATERMARK: str(T + 250)})
    assert d.watermark() == T + 250
    cut = resolve([A, d])
    assert cut.barrier == T + 250
    assert ids(cut) == {"db.a": 102, "db.d": None}


def test_read_uncommitted_does_not_need_watermarks() -> None:
    assert ids(resolve([E], "read-uncommitted")) == {"db.e": None}


@pytest.mark.parametrize("level", ["serializable", "", "read_committed", "snapshot"])
def test_unknown_level(level: str) -> None:
    with pytest.raises(InvalidInputError):
        resolve([A], level)


def test_levels_are_the_three_of_spec_4() -> None:
    assert set(LEVELS) == {"repeatable-read", "read-committed", "read-uncommitted"}


def test_untracked_derived_table_fails_resolution() -> None:
    rogue = snapshot(777, 302, T + 999, summary={"added-records": "3", "total-records": "4"})
    d = table_state("db.d", [*D_RECORDS[:3], rogue], {P.MAIN_BRANCH: 777}, D.properties)
    with pytest.raises(UntrackedWriteError) as raised:
        resolve([A, d])
    assert "db.d" in str(raised.value)
    assert "777" in str(raised.value)


def test_revision_is_reported() -> None:
    revised = table_state("db.a", A_RECORDS, {P.MAIN_BRANCH: 103}, {P.REVISION: "2"})
    assert resolve([revised]).revisions == {"db.a": 2}
    assert resolve([A]).revisions == {"db.a": 0}


# --- the JSON contract ------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["repeatable-read", "read-committed", "read-uncommitted"])
def test_cut_json_has_exactly_the_keys_of_spec_4(level: str) -> None:
    cut = resolve([A, D, F], level)
    document = cut.to_json()
    assert set(document) == {"level", "barrier", "tables"}
    assert document["level"] == level
    assert set(document["tables"]) == {"db.a", "db.d", "db.f"}
    for entry in document["tables"].values():
        assert set(entry) == {"snapshot_id", "barrier"}
    assert json.loads(json.dumps(document)) == document


def test_cut_json_values() -> None:
    document = resolve([A, B, D, F], as_of=T + 150).to_json()
    assert document == {
        "level": "repeatable-read",
        "barrier": T + 50,
        "tables": {
            "db.a": {"snapshot_id": None, "barrier": None},
            "db.b": {"snapshot_id": None, "barrier": None},
            "db.d": {"snapshot_id": None, "barrier": None},
            "db.f": {"snapshot_id": None, "barrier": None},
        },
    }
    document = resolve([A, B, D]).to_json()
    assert document == {
        "level": "repeatable-read",
        "barrier": T + 200,
        "tables": {
            "db.a": {"snapshot_id": 102, "barrier": T + 200},
            "db.b": {"snapshot_id": 201, "barrier": T + 120},
            "db.d": {"snapshot_id": 302, "barrier": T + 200},
        },
    }
