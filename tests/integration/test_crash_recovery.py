"""Crash safety at every step of protocol §5, with real processes and real ``kill -9``.

Each test runs epoch jobs as separate processes (``tests/harness/crash/worker.py``, driven by
``tests/harness/crash/driver.py``), kills them at chosen points of an epoch (before/during/after
staging, during/after publishing), at random instants and at random catalog commits, restarts them
until they finish, and checks the lake with an independent reader (``tests/harness/crash/oracle.py``:
SQLite rows and metadata JSON parsed by the harness, protocol §3 barriers recomputed there, rows
scanned by DuckDB): each barrier published once per table by one staging attempt, the recorded
inputs equal ``snap(source, B)``, nothing lost or doubled, protocol §7 at every barrier and at the
latest repeatable-read cuts. A reader thread keeps resolving and checking repeatable-read cuts while
the workers are being killed. The last tests show the checker is not vacuous: it flags doubled, lost
and partially published epochs written by hand.

Kills in the default run: 24 at chosen points + >= 20 random (``CRASH_RANDOM_KILLS``); the
``slow`` sweep kills at every commit of a run (24 kills). A soak is the random test with more kills
(``CRASH_RANDOM_KILLS=80``; ``bench/bench_reliability.py --kills 100`` tabulates one): the same
scenario and checks, so the suite runs it once. ``CRASH_SEED`` fixes the random choices (the
kill instants still depend on timing); a failure message names the seed.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path

import pytest

from consistent_catalog import properties as P
from consistent_catalog.demo import count_words, epoch_words
from tests.harness.crash.common import COPY, COUNTS, CRASH_POINTS, JOBS, WORDS
from tests.harness.crash.driver import Harness, Report
from tests.harness.crash.oracle import (
    RowReader,
    check_lake,
    check_latest_cuts,
    read_lake,
    spec7_problems,
    word_count_problems,
)
from tests.harness.crash.scenarios import (
    chosen_point_scenario,
    commit_sweep_scenario,
    idle_root_scenario,
    random_kill_scenario,
    zombie_scenario,
)
from tests.harness.transforms import copy_increment

pytestmark = pytest.mark.integration

RANDOM_KILLS = int(os.environ.get("CRASH_RANDOM_KILLS", "20"))
LEAVES_A_STAGED_EPOCH = ("after-stage", "during-publish")


def _seed() -> int:
    return int(os.environ.get("CRASH_SEED") or random.randrange(1_000_000))


def assert_clean(report: Report, context: str = "") -> None:
    problems = report.violations + [f"reader error: {e}" for e in report.reader_errors]
    assert not problems, f"{context}{report.summary()}\n" + "\n".join(problems[:30])
    assert report.findings.duplicated == 0 and report.findings.lost == 0, report.summary()
    assert report.findings.cuts_checked + report.reader_cuts > 0, "no consistent cut was ever checked"


@pytest.mark.parametrize("point", CRASH_POINTS)
@pytest.mark.parametrize("job", list(JOBS))
def test_kill_at_a_chosen_point_then_resume(tmp_path: Path, job: str, point: str) -> None:
    """Killed at ``point``, the job resumes from catalog metadata alone; a staged epoch is published as
    it is when the inputs did not move, and discarded and recomputed when they did."""
    report = chosen_point_scenario(tmp_path / "lake", job, point)
    assert_clean(report)
    assert report.total_kills == (2 if point in LEAVES_A_STAGED_EPOCH else 1)
    assert report.resumes == report.total_kills
    assert report.republished == (1 if point in LEAVES_A_STAGED_EPOCH else 0)


@pytest.mark.parametrize("job", list(JOBS))
def test_kill_during_a_watermark_only_publish(tmp_path: Path, job: str) -> None:
    """The root is idle (watermark advanced, no rows): the job's watermark-only publish, killed inside
    its commit, is published once by the resumed instance."""
    report = idle_root_scenario(tmp_path / "lake", job)
    assert_clean(report)
    assert report.total_kills == 1 and report.resumes == 1


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_zombie_woken_after_a_takeover_is_fenced(tmp_path: Path, point: str) -> None:
    """Stopped at ``point`` (SIGSTOP), taken over by a new instance that publishes newer input, then
    woken up: the append-mode job's zombie is refused by the catalog and nothing is doubled."""
    report = zombie_scenario(tmp_path / "lake", "copy", point)
    assert_clean(report)
    assert report.pauses == 1 and report.fenced == 1


# --- the same on an Iceberg REST catalog (a subset) ------------------------------------------------
# The session's Java REST server, a catalog of its own per test; workers open it from the lake's
# catalog.json and the independent reader reads the server's SQLite file (read-only). On REST,
# "during-publish" kills the worker inside its commit before the request is sent (the server validates
# and swaps inside one request, so there is no client-side instant between the two).
REST_POINTS = ("before-stage", "after-stage", "during-publish", "after-publish")


def rest_lake(rest_server, directory: Path) -> Path:
    from tests.harness.crash.common import write_catalog_config

    warehouse = f"file://{directory}/warehouse"
    write_catalog_config(directory, rest_server.catalog_properties(warehouse), rest_server.sqlite_path(warehouse))
    return directory


@pytest.mark.parametrize("point", REST_POINTS)
def test_kill_at_a_chosen_point_then_resume_on_rest(rest_server, tmp_path: Path, point: str) -> None:
    lake = rest_lake(rest_server, tmp_path / "lake")
    report = chosen_point_scenario(lake, "copy", point)
    assert_clean(report)
    assert report.total_kills == (2 if point in LEAVES_A_STAGED_EPOCH else 1)
    assert report.resumes == report.total_kills
    assert report.republished == (1 if point in LEAVES_A_STAGED_EPOCH else 0)
    assert not (lake / "catalog.db").exists()  # everything went through the server


def test_a_zombie_woken_after_a_takeover_is_fenced_on_rest(rest_server, tmp_path: Path) -> None:
    report = zombie_scenario(rest_lake(rest_server, tmp_path / "lake"), "copy", "after-stage")
    assert_clean(report)
    assert report.pauses == 1 and report.fenced == 1


# the instants a kill -9 can leave a new generation in: staged and not published, and inside the switch's commit (the
# metadata file written, the catalog not swapped); every point is stopped in-process in tests/catalog/test_generations.py
@pytest.mark.parametrize("point", ("after-stage", "during-publish"))
def test_a_new_generation_killed_at_a_chosen_point(tmp_path: Path, point: str) -> None:
    """Protocol §6.10: word-count's edited definition (words counted case-insensitively) is killed with ``kill -9`` at
    ``point`` of its new generation's first epoch. Meanwhile every cut of the chain is the one before, recounted with
    DuckDB (the old counts of the words at the cut, their histogram); the rerun switches, and once count-histogram
    followed, the cut holds the new counts."""
    from consistent_catalog import ConsistentCatalog
    from tests.harness.crash.common import HISTOGRAM, open_catalog

    chain = [WORDS, COUNTS, HISTOGRAM]
    with Harness(tmp_path / "lake", reader=False) as h:
        h.ingest()
        h.run_clean("word-count")
        h.run_clean("count-histogram")
        cc = ConsistentCatalog(open_catalog(h.directory))
        before = cc.resolve(chain)
        killed = h.run("word-count", crash_at=point, extra=["--upper"])
        assert killed.killed, killed.describe()
        meanwhile = ConsistentCatalog(open_catalog(h.directory)).resolve(chain)
        assert meanwhile.snapshot_ids == before.snapshot_ids and meanwhile.barrier == before.barrier
        tables, rows = read_lake(h.directory), RowReader()
        at = {t: rows.rows(t, tables[t].location, meanwhile[t].snapshot_id) for t in chain}
        assert not word_count_problems(at[WORDS], at[COUNTS], "the cut after the kill")  # the old definition's
        assert not spec7_problems(at[WORDS], at[COUNTS], at[HISTOGRAM], "the cut after the kill")
        rerun = h.run_clean("word-count", extra=["--upper"])
        assert [action for _, _, action in rerun.epochs()] == ["regenerated"]
        h.run_clean("count-histogram")
        after = ConsistentCatalog(open_catalog(h.directory)).resolve(chain)
        assert after.barrier == before.barrier
        tables = read_lake(h.directory)
        at = {t: rows.rows(t, tables[t].location, after[t].snapshot_id) for t in chain}
        upper = Counter(word.upper() for (word,), n in at[WORDS].items() for _ in range(n))
        assert {word: cnt for (word, cnt) in at[COUNTS]} == dict(upper)
        assert not spec7_problems(at[WORDS], at[COUNTS], at[HISTOGRAM], "the cut after the switch")


@pytest.mark.stress
def test_random_kills(tmp_path: Path) -> None:
    seed = _seed()
    report = random_kill_scenario(tmp_path / "lake", RANDOM_KILLS, seed=seed)
    assert_clean(report, f"CRASH_SEED={seed}: ")
    assert report.total_kills >= RANDOM_KILLS
    assert report.resumes > 0
    assert report.republished >= report.republish_expected


@pytest.mark.slow
@pytest.mark.stress
def test_kill_at_every_commit_of_a_run(tmp_path: Path) -> None:
    """All three jobs in one process, killed at each of its catalog commits in turn (inside the commit
    and right after it), each time resumed with the same input."""
    report = commit_sweep_scenario(tmp_path / "lake")
    assert_clean(report)
    assert report.total_kills >= 20
    assert report.republished == report.republish_expected > 0


# --- the checker is not vacuous ------------------------------------------------------------------
def _lake_with_jobs(directory: Path, *jobs: str) -> Harness:
    """A lake with two root epochs, each followed by an in-process epoch of ``jobs``."""
    h = Harness(directory, reader=False)
    transforms = {"word-count": count_words, "copy": copy_increment}
    for _ in range(2):
        h.ingest()
        for name in jobs:
            source, sink, mode = JOBS[name]
            with h.cc.job(name, sources=[source], sinks=[sink], transform=transforms[name], mode=mode) as job:
                job.run_until_caught_up()
    return h


def test_the_checker_passes_an_intact_lake(tmp_path: Path) -> None:
    h = _lake_with_jobs(tmp_path, "word-count", "copy")
    findings = check_lake(h.directory, RowReader(), caught_up=["word-count", "copy"])
    assert findings.violations == [] and findings.epochs_checked == 4 and findings.cuts_checked == 2


def test_the_checker_flags_an_epoch_appended_twice(tmp_path: Path) -> None:
    """A second writer appending the same epoch again (what fencing prevents) is caught."""
    h = _lake_with_jobs(tmp_path, "copy")
    table = h.cc.load_table(COPY)
    head = table.metadata.snapshot_by_name(P.MAIN_BRANCH)
    assert head is not None and head.summary is not None
    summary = {k: v for k, v in head.summary.additional_properties.items() if k.startswith("consistent.")}
    table.append(epoch_words(1, h.rows_per_epoch), snapshot_properties={**summary, P.ATTEMPT: "zombie"})
    findings = check_lake(h.directory, RowReader())
    assert findings.duplicated >= 1
    assert any("staging attempts" in v for v in findings.violations)
    assert any("duplicated" in v for v in findings.violations)
    assert any("words_copy" in v for v in check_latest_cuts(read_lake(h.directory), RowReader()).violations)


def test_the_checker_flags_a_lost_epoch(tmp_path: Path) -> None:
    """A sink whose watermark claims a barrier whose rows it never received is caught."""
    h = _lake_with_jobs(tmp_path, "copy")
    h.ingest()
    table = h.cc.load_table(COPY)
    with table.transaction() as tx:
        tx.set_properties({P.WATERMARK: str(h.clock)})
    findings = check_lake(h.directory, RowReader())
    assert findings.lost == 1
    assert any("lost" in v for v in findings.violations)


def test_the_checker_flags_a_partially_published_overwrite(tmp_path: Path) -> None:
    """main left at the delete half of an overwrite epoch (a partial epoch) breaks protocol §7 at the cut."""
    h = _lake_with_jobs(tmp_path, "word-count")
    table = h.cc.load_table(COUNTS)
    head = table.metadata.snapshot_by_name(P.MAIN_BRANCH)
    assert head is not None and head.parent_snapshot_id is not None
    parent = table.metadata.snapshot_by_id(head.parent_snapshot_id)
    assert parent is not None and parent.summary is not None and parent.summary.operation.value == "delete"
    table.manage_snapshots().set_current_snapshot(snapshot_id=parent.snapshot_id).commit()
    cuts = check_latest_cuts(read_lake(h.directory), RowReader(), cross_check=False)
    assert any("word_counts != Counter(words)" in v or "sum(word_counts.cnt)" in v for v in cuts.violations)
    assert check_lake(h.directory, RowReader()).violations


def test_the_checker_flags_inputs_other_than_snap_at_the_barrier(tmp_path: Path) -> None:
    """An epoch recording inputs other than snap(source, B) (not the same inputs replayed) is caught."""
    h = _lake_with_jobs(tmp_path, "copy")
    table = h.cc.load_table(COPY)
    words = h.cc.load_table(WORDS)
    first_words = words.metadata.snapshots[0].snapshot_id
    head = table.metadata.snapshot_by_name(P.MAIN_BRANCH)
    assert head is not None and head.summary is not None
    summary = {k: v for k, v in head.summary.additional_properties.items() if k.startswith("consistent.")}
    h.ingest()
    table.append(epoch_words(2, h.rows_per_epoch), snapshot_properties={
        **summary, P.BARRIER: str(h.clock), P.ATTEMPT: "stale", P.SOURCES: json.dumps({WORDS: first_words})})
    assert any("snap(source, B)" in v for v in check_lake(h.directory, RowReader()).violations)
