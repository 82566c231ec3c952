"""Crash safety of Spark SQL writers through ``lake_consistent`` (protocol §5.4, §5.9, §6.6), with real processes.

Every writer is a PySpark driver process of its own (``tests/harness/sql_writer.py``) that runs SQL statements
as ``spark-sql -f`` does: ``SET spark.sql.consistent.job=word-count; INSERT OVERWRITE lake_consistent.demo.word_counts
SELECT word, count(*) ...``, and keyed ingests ``INSERT INTO lake_consistent.demo.words``. It is stopped

- at the plugin's failpoints (``CONSISTENT_FAILPOINT``, action ``halt``: ``Runtime.halt(137)``, no shutdown hook,
  as kill -9): ``before-stage`` (data files written, nothing committed), ``after-stage`` (staged epoch committed,
  not published), ``after-publish`` (published, the statement not finished), and ``before-ingest`` of a keyed
  root ingest; ``after-stage`` also on PostgreSQL;
- by a real ``kill -9`` of the driver (Python and its JVM) at a random moment of a longer run, twice in a row
  (``CRASH_SEED`` fixes the moments' choice, a failure message names it);
- as a zombie: paused at ``after-stage`` and SIGSTOPped while another process takes over and publishes newer
  input, then woken up: its publish is refused (``[CONSISTENT_WRITE.FENCED]``) and its staged epoch never
  reaches ``main``.

The dead driver keeps its lease, so the next process takes over (``SET spark.sql.consistent.takeover=true``) and
runs the statements again. Everything is checked with plain pyiceberg, never with the plugin's answers: each
barrier once on ``main`` by one staging attempt (``consistent.attempt``), its content equal to a recount of
``demo.words`` at the snapshot the epoch recorded (``consistent.sources``), every ingest key once; and what the
next run says on its stderr line (``republished`` after ``after-stage``, ``done`` after ``after-publish``).

The first runs of the failpoint scenarios run at the same time (each on a lake of its own), then their next
runs: on 2 cores, several driver JVMs at once take about half the time they take one after the other.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.exceptions import ConsistentCatalogError
from tests.harness.lake import sqlite_catalog
from tests.harness.servers import postgres_sql_catalog
from tests.harness.sql_writer import (
    COUNTS,
    EXIT_HALTED,
    JOB,
    WORD_COUNT_SQL,
    WORDS,
    Epoch,
    SqlLake,
    WriterRun,
    ancestry,
    batch,
    check_exactly_once,
    counts_at,
    create_lake,
    epoch_statements,
    ingest_keys,
    ingest_statements,
    main_epochs,
    run_writer,
    staged_attempts,
    start_writer,
    word_counter,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

EPOCH_POINTS = ("before-stage", "after-stage", "after-publish")
NEXT_RUN_SAYS = {"before-stage": "published", "after-stage": "republished", "after-publish": "done"}
"""What the next run's line says about the barrier the killed run was writing."""
RANDOM_ROUNDS = 5
RANDOM_KILLS = 2


def _seed() -> int:
    return int(os.environ.get("CRASH_SEED") or random.randrange(1_000_000))


def sqlite_lake(directory: Path) -> tuple[SqlLake, int]:
    return create_lake(sqlite_catalog(directory), f"sqlite:///{directory}/catalog.db", f"file://{directory}/warehouse",
                       directory)


def postgres_lake(server: Any, directory: Path) -> tuple[SqlLake, int]:
    catalog = postgres_sql_catalog(server, directory / "warehouse")
    return create_lake(catalog, catalog.properties["uri"], f"file://{directory}/warehouse", directory)


def wait_all(runs: list[WriterRun]) -> None:
    for run in runs:
        run.wait()


@dataclass
class State:
    """The sink as pyiceberg reads it at one moment."""

    epochs: list[Epoch]
    staged: dict[int, str | None]
    properties: dict[str, str]
    cut: tuple[int | None, int | None] | str
    """The library's cut of the sink then: (barrier, snapshot id), or the name of the error it raised."""

    @classmethod
    def read(cls, lake: SqlLake) -> State:
        table = lake.table(COUNTS)
        try:
            found = ConsistentCatalog(lake.catalog).resolve([COUNTS])
            cut: tuple[int | None, int | None] | str = (found.barrier, found.tables[COUNTS].snapshot_id)
        except ConsistentCatalogError as exc:
            cut = type(exc).__name__
        return cls(main_epochs(table), staged_attempts(table), dict(table.metadata.properties), cut)


@dataclass
class Crash:
    name: str
    point: str
    lake: SqlLake
    barrier: int
    """W(demo.words) when the killed run planned: the barrier it was writing."""
    killed: WriterRun
    after_kill: State
    resumed: WriterRun | None = None


# --- the failpoint scenarios, run side by side ---------------------------------------------------------------
SCENARIOS = {  # name -> (backend, failpoint)
    "before-stage": ("sqlite", "before-stage"),
    "after-stage": ("sqlite", "after-stage"),
    "after-publish": ("sqlite", "after-publish"),
    "after-stage-postgres": ("postgres", "after-stage"),
    "before-ingest": ("sqlite", "before-ingest"),
    # an edited statement (issue 43): its first epoch, a new generation, killed at each failpoint after the old
    # statement's epoch passed it
    "regenerate-before-stage": ("sqlite", "before-stage"),
    "regenerate-after-stage": ("sqlite", "after-stage"),
    "regenerate-after-publish": ("sqlite", "after-publish"),
}
EDITED_SQL = WORD_COUNT_SQL.replace("GROUP BY word", "WHERE word NOT LIKE 'only%' GROUP BY word")
"""The word-count job's statement edited: another definition (protocol §6.10)."""
REGENERATE_SAYS = {"before-stage": "published", "after-stage": "republished"}
"""What the next run's line says about the new generation the killed run was writing (after-publish: done)."""
INGEST_KEY = "load-1"


@pytest.fixture(scope="module")
def crashes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Crash]]:
    """Every scenario of ``SCENARIOS`` killed at its failpoint (all at once), then run again by a new process."""
    root = tmp_path_factory.mktemp("sql-crash")
    try:
        postgres = request.getfixturevalue("postgres_server")
    except pytest.skip.Exception:
        postgres = None
    lakes: dict[str, tuple[SqlLake, int]] = {}
    for name, (backend, _) in SCENARIOS.items():
        if backend == "postgres":
            if postgres is not None:
                lakes[name] = postgres_lake(postgres, root / name)
        else:
            lakes[name] = sqlite_lake(root / name)

    def edited(takeover: bool) -> list[str]:
        return [*epoch_statements(takeover=takeover)[:-1], EDITED_SQL]

    def statements(name: str, point: str, *, again: bool) -> list[str]:
        if name.startswith("regenerate-"):  # the old statement's epoch, then the edited one's (killed)
            if not again:
                return epoch_statements(takeover=False) + edited(False)
            return edited(True) + ingest_statements("load-2", batch(2)) + edited(True)
        if point == "before-ingest":
            once = ingest_statements(INGEST_KEY, batch(1))
            return once + once if again else once  # the second time the key is already there
        if not again:
            return epoch_statements(takeover=False)
        # the same epoch again (taking over from the dead driver), then one more ingest and epoch
        return epoch_statements(takeover=True) + ingest_statements("load-2", batch(2)) + epoch_statements(takeover=True)

    killed = {name: start_writer(lake, statements(name, SCENARIOS[name][1], again=False), "killed",
                                 failpoint=SCENARIOS[name][1], passes=1 if name.startswith("regenerate-") else 0)
              for name, (lake, _) in lakes.items()}
    wait_all(list(killed.values()))
    found = {name: Crash(name, SCENARIOS[name][1], lake, barrier, killed[name], State.read(lake))
             for name, (lake, barrier) in lakes.items()}
    resumed = {name: start_writer(c.lake, statements(name, c.point, again=True), "resumed")
               for name, c in found.items()}
    wait_all(list(resumed.values()))
    for name, run in resumed.items():
        found[name].resumed = run
    yield found
    for lake, _ in lakes.values():
        if hasattr(lake.catalog, "engine"):
            lake.catalog.engine.dispose()


def crash_of(crashes: dict[str, Crash], name: str) -> Crash:
    if name not in crashes:
        pytest.skip(f"{name}: its backend is not available here")
    return crashes[name]


def assert_killed_at(crash: Crash, *, before: int = 0) -> None:
    """Killed at its failpoint, the killed statement reporting nothing (after ``before`` epochs that did)."""
    run = crash.killed
    assert run.process.returncode == EXIT_HALTED, f"{run.name} ended with {run.process.returncode}:\n{run.tail()}"
    assert f"[failpoint] {crash.point} pid" in run.stderr(), run.tail()
    assert len(run.lines()) == before, f"the killed statement reported an outcome: {run.lines()}"
    assert [action for _, action in run.epochs()] == ["published"] * before, run.lines()


@pytest.mark.parametrize("name", ["before-stage", "after-stage", "after-publish", "after-stage-postgres"])
def test_an_epoch_killed_at_a_failpoint_is_replayed_exactly_once(crashes: dict[str, Crash], name: str) -> None:
    crash = crash_of(crashes, name)
    assert_killed_at(crash)
    after = crash.after_kill
    # the killed driver never unregistered: its lease stays until a takeover
    assert after.properties.get(P.JOB) == JOB and after.properties.get(P.LEASE_HOLDER), after.properties
    if crash.point == "before-stage":
        assert after.epochs == [] and after.staged == {}, "nothing of the epoch may be committed before staging"
    elif crash.point == "after-stage":
        assert after.epochs == [], "the staged epoch must not be on main yet"
        assert len(set(after.staged.values())) == 1 and None not in after.staged.values(), after.staged
        staged_table = crash.lake.table(COUNTS)
        barriers = {staged_table.metadata.snapshot_by_id(i).summary[P.BARRIER] for i in after.staged}
        assert barriers == {str(crash.barrier)}, barriers
    else:
        assert [e.barrier for e in after.epochs] == [crash.barrier] and after.staged == {}

    resumed = crash.resumed
    assert resumed is not None and resumed.process.returncode == 0, resumed.tail() if resumed else "not run"
    landed = [b for b, how in resumed.ingests() if how == "landed"]
    assert len(landed) == 1 and landed[0] > crash.barrier, resumed.lines()
    # the next run's line about the barrier the killed one was writing, then a plain epoch for the new ingest
    assert resumed.epochs() == [(crash.barrier, NEXT_RUN_SAYS[crash.point]), (landed[0], "published")], resumed.lines()

    epochs = check_exactly_once(crash.lake)
    assert [e.barrier for e in epochs] == [crash.barrier, landed[0]]
    if crash.point == "after-stage":  # published as the crashed run staged it
        assert epochs[0].attempts == set(after.staged.values())
        assert epochs[0].snapshot_ids[-1] in after.staged
    if crash.point == "after-publish":
        assert epochs[0].attempts == after.epochs[0].attempts and epochs[0].snapshot_ids == after.epochs[0].snapshot_ids
    # the resumed driver ended normally: its shutdown hook released the lease; the owner and the lineage stay
    final = dict(crash.lake.table(COUNTS).metadata.properties)
    assert P.LEASE_HOLDER not in final and final.get(P.JOB) == JOB and final.get(P.SOURCES) == f'["{WORDS}"]', final


@pytest.mark.parametrize("point", EPOCH_POINTS)
def test_an_edited_statement_killed_at_a_failpoint_leaves_the_old_generation_serving(
        crashes: dict[str, Crash], point: str) -> None:
    """Issue 43: the edited statement's first epoch (a new generation) killed at each failpoint: until its publish
    landed, main, the watermark and the cut are the old generation's (never empty, never blocked); the next run
    regenerates (or republishes the staged regeneration, or is done) and the cut then reads the edited statement's
    output, recounted from demo.words with pyiceberg."""
    crash = crash_of(crashes, f"regenerate-{point}")
    assert_killed_at(crash, before=1)  # the old statement's epoch published, then the edited one's was killed
    words = crash.lake.table(WORDS)
    after = crash.after_kill
    runs = attempt_runs(after.epochs)
    old = runs[0]
    assert old.barrier == crash.barrier and old.regenerate == {None}, runs
    if point == "after-publish":  # switched: the old generation on consistent-previous
        assert [r.regenerate for r in runs] == [{None}, {"definition"}], runs
        assert after.properties.get(P.REVISION) == "1"
        assert json.loads(after.properties[P.PREVIOUS])["snapshot"] == old.head
    else:  # main, its watermark properties and the cut: the old generation's
        assert len(runs) == 1 and after.properties.get(P.REVISION) is None, runs
        assert P.PREVIOUS not in after.properties and P.WATERMARK not in after.properties
        staged = [crash.lake.table(COUNTS).metadata.snapshot_by_id(i) for i in after.staged]
        # before-stage: the new generation's delete of every row, at most; after-stage: the delete and the write
        assert {s.summary[P.REGENERATE] for s in staged} == {"definition"} and len(set(after.staged.values())) == 1
        assert len(staged) == (2 if point == "after-stage" else 1), staged
        assert after.cut == (crash.barrier, old.head), after.cut
    resumed = crash.resumed
    assert resumed is not None and resumed.process.returncode == 0, resumed.tail() if resumed else "not run"
    # the killed run's barrier, as the next run says it; then the new ingest's plain epoch
    first = next(line for line in resumed.lines() if f"barrier {crash.barrier} " in line)
    if point == "after-publish":
        assert " done: " in first, resumed.lines()
    else:
        assert "definition changed (sql " in first and f": new generation at barrier {crash.barrier} " in first, first
        assert f", {REGENERATE_SAYS[point]} (" in first, first
    landed = [b for b, how in resumed.ingests() if how == "landed"]
    assert len(landed) == 1 and resumed.epochs()[-1] == (landed[0], "published"), resumed.lines()
    # one switch only, to the edited statement's output; each epoch since recounts its recorded input
    counts = crash.lake.table(COUNTS)
    assert counts.metadata.properties.get(P.REVISION) == "1"
    assert counts.metadata.refs[P.PREVIOUS_BRANCH].snapshot_id == old.head
    final = attempt_runs(main_epochs(counts))
    assert final[0] == old and [(r.barrier, r.regenerate) for r in final[1:]] == [
        (crash.barrier, {"definition"}), (landed[0], {None})], final
    for run in final[1:]:
        expected = {w: n for w, n in word_counter(words, run.inputs[WORDS]).items() if not w.startswith("only")}
        assert counts_at(counts, run.head) == expected
    assert final[1].inputs == old.inputs
    if point == "after-stage":  # published as the killed run staged it
        assert {final[1].attempt} == set(after.staged.values())


@dataclass
class AttemptRun:
    """Consecutive snapshots of ``main`` staged by one attempt (an epoch; a new generation's delete and write)."""

    attempt: str | None
    barrier: int
    ids: list[int]
    regenerate: set[str | None]
    inputs: dict[str, int | None]

    @property
    def head(self) -> int:
        return self.ids[-1]


def attempt_runs(epochs: list[Epoch]) -> list[AttemptRun]:
    """``main_epochs`` split by staging attempt: an old generation and the new one at the same barrier apart."""
    runs: list[AttemptRun] = []
    for epoch in epochs:
        for snapshot_id, summary in zip(epoch.snapshot_ids, epoch.summaries, strict=True):
            attempt = summary.get(P.ATTEMPT)
            if not runs or runs[-1].attempt != attempt:
                runs.append(AttemptRun(attempt, epoch.barrier, [], set(), json.loads(summary[P.SOURCES])))
            runs[-1].ids.append(snapshot_id)
            runs[-1].regenerate.add(summary.get(P.REGENERATE))
    return runs


def test_a_keyed_ingest_killed_before_its_commit_lands_once(crashes: dict[str, Crash]) -> None:
    crash = crash_of(crashes, "before-ingest")
    assert_killed_at(crash)
    assert crash.after_kill.epochs == []
    words = crash.lake.table(WORDS)
    resumed = crash.resumed
    assert resumed is not None and resumed.process.returncode == 0, resumed.tail() if resumed else "not run"
    assert [how for _, how in resumed.ingests()] == ["landed", "skipped"], resumed.lines()
    assert ingest_keys(words) == Counter({INGEST_KEY: 1})
    assert word_counter(words, words.metadata.snapshot_by_name("main").snapshot_id) == Counter(batch(0) + batch(1))
    (keyed,) = [s for s in ancestry(words) if s.summary is not None and s.summary.get(P.INGEST_KEY) == INGEST_KEY]
    (landed_barrier,) = [b for b, how in resumed.ingests() if how == "landed"]
    assert keyed.summary[P.BARRIER] == str(landed_barrier) and landed_barrier > crash.barrier


# --- kill -9 at a random moment ----------------------------------------------------------------------------------
@pytest.mark.stress
def test_sql_writers_killed_at_random_moments_are_replayed_exactly_once(tmp_path: Path) -> None:
    """``RANDOM_ROUNDS`` keyed ingests, each followed by an epoch, run ``RANDOM_KILLS`` times in a row and each time
    killed with SIGKILL a random time after a random one of its statement lines (each run taking over from the
    one killed before it); the same statements once more, to the end, leave every key once and every published
    barrier once, caught up with the last ingest."""
    seed = _seed()
    rng = random.Random(seed)
    lake, first_barrier = sqlite_lake(tmp_path / "lake")
    statements: list[str] = []
    for number in range(1, RANDOM_ROUNDS + 1):
        statements += ingest_statements(f"load-{number}", batch(number)) + epoch_statements(takeover=True)
    kills: list[str] = []
    for kill in range(1, RANDOM_KILLS + 1):
        # after a random number of this run's own work lines (a replayed key or a done epoch is quick and does
        # not count), a random delay: the kill lands inside the work that is left
        after_work = rng.randrange(0, 3)
        delay = rng.uniform(0.0, 1.0)
        run = start_writer(lake, statements, f"killed-{kill}")
        run.wait_for(r"\[sql-writer\] .* statement 1:")  # the driver is up
        while _work_lines(run) < after_work and run.process.poll() is None:
            time.sleep(0.02)
        time.sleep(delay)
        run.kill9()
        if run.process.returncode != -signal.SIGKILL:
            # the run finished its work before the kill (only a later run can, with little left): nothing to kill
            assert kill > 1 and run.process.returncode == 0, (
                f"CRASH_SEED={seed}: run {kill} ended before its kill ({after_work} work lines + {delay:.2f}s):\n"
                f"{run.tail()}")
            kills.append(f"run {kill} finished before its kill, having said {run.lines()}")
            break
        kills.append(f"kill {kill} after {after_work} work lines + {delay:.2f}s, having said {run.lines()}")
    context = f"CRASH_SEED={seed}: " + "; ".join(kills) + "\n"

    resumed = run_writer(lake, statements, "resumed")
    assert resumed.process.returncode == 0, f"{context}{resumed.tail()}"
    words = lake.table(WORDS)
    assert ingest_keys(words) == Counter({f"load-{n}": 1 for n in range(1, RANDOM_ROUNDS + 1)}), context
    expected_words = Counter(w for n in range(RANDOM_ROUNDS + 1) for w in batch(n))
    head = words.metadata.snapshot_by_name("main").snapshot_id
    assert word_counter(words, head) == expected_words, context
    try:
        epochs = check_exactly_once(lake)
    except AssertionError as exc:
        raise AssertionError(f"{context}{exc}") from None
    assert epochs and epochs[-1].inputs() == {WORDS: head}, f"{context}not caught up: {[e.barrier for e in epochs]}"
    assert all(e.barrier >= first_barrier for e in epochs), context


def _work_lines(run: Any) -> int:
    """The run's lines that did work: an ingest or epoch that landed, not one found done or already landed."""
    return sum(1 for line in run.lines() if "already landed" not in line and " done: " not in line)


# --- a zombie ---------------------------------------------------------------------------------------------------
def test_a_sql_zombie_is_fenced_and_its_staged_epoch_never_reaches_main(tmp_path: Path) -> None:
    """A pauses at ``after-stage`` and is SIGSTOPped; new words land and B takes over and publishes them; A wakes
    up and publishes: refused inside the catalog's compare-and-swap, one ``[CONSISTENT_WRITE.FENCED]`` line."""
    lake, _ = sqlite_lake(tmp_path / "lake")
    release = lake.directory / "release-a"
    a = start_writer(lake, epoch_statements(takeover=False), "zombie-a", failpoint="after-stage", action="pause",
                     release=release)
    try:
        a.wait_for(r"\[failpoint\] after-stage pid \d+")
        a.signal(signal.SIGSTOP)
        staged_by_a = staged_attempts(lake.table(COUNTS))
        b = run_writer(lake, ingest_statements("load-1", batch(1)) + epoch_statements(takeover=True), "takeover-b")
        main_after_b = main_epochs(lake.table(COUNTS))
        release.touch()
        a.signal(signal.SIGCONT)
        a.wait()
    finally:
        if a.process.poll() is None:
            a.signal(signal.SIGCONT)
            a.kill9()

    assert len(set(staged_by_a.values())) == 1 and None not in staged_by_a.values(), staged_by_a
    (a_attempt,) = set(staged_by_a.values())
    assert b.process.returncode == 0, b.tail()
    (landed,) = [barrier for barrier, how in b.ingests() if how == "landed"]
    # new inputs: A's staged epoch is discarded by B's reset, not republished
    assert b.epochs() == [(landed, "published")], b.lines()

    assert a.process.returncode not in (0, EXIT_HALTED), a.tail()
    assert a.epochs() == [], f"the zombie reported a write: {a.lines()}"
    errors = [ln for ln in a.stderr().splitlines() if "[sql-writer]" in ln and " error in statement" in ln]
    assert len(errors) == 1 and "[CONSISTENT_WRITE.FENCED]" in errors[0], a.tail()
    assert "refused by the catalog" in errors[0], errors[0]

    epochs = check_exactly_once(lake)
    assert [e.barrier for e in epochs] == [landed]
    assert main_epochs(lake.table(COUNTS)) == main_after_b, "main moved after the takeover"
    on_main = {s.snapshot_id for s in ancestry(lake.table(COUNTS))}
    assert not on_main & set(staged_by_a), "the zombie's staged snapshots reached main"
    assert all(a_attempt not in e.attempts for e in epochs)
    assert not set(staged_attempts(lake.table(COUNTS))) & set(staged_by_a), "the zombie's staged epoch came back"
