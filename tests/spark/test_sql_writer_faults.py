"""Spark SQL writers through ``lake_consistent`` on a JDBC catalog that goes away and comes back (protocol §6.8).

Real processes and a real database: each writer is a PySpark driver process running SQL statements one by one as
``spark-sql -f`` does (``tests/harness/sql_writer.py``): keyed root ingests (``INSERT INTO``), ``INSERT OVERWRITE``
epochs of the word-count job, the first of them taking the job over from a live Python instance. Meanwhile

- PostgreSQL (durable: fsync on, as in production) is restarted in immediate mode (connections cut, as in a crash) every 1-2.5 s, down 0.5-1.5 s, and
  once held down for 20 s;
- or another process holds SQLite's catalog database in an exclusive transaction for 5 s at a time (longer than
  sqlite-jdbc's own 3 s busy timeout, so the plugin's retry is what waits);
- or PostgreSQL stops for good while an ingest is about to commit, under a 4 s ``consistent.retry-deadline``;
- and, in this process's Spark session, a native streaming root (``toTable``) and a native streaming epoch job
  (complete mode) run while PostgreSQL restarts every other file fed.

The three writers run at once (module fixture). No error reaches the statements but the last case's, which is one ``[CONSISTENT_CUT.CATALOG_UNAVAILABLE]`` line
naming the catalog and whether anything landed. Everything is checked with plain pyiceberg: every epoch once on
``main``, equal to a recount of ``demo.words`` at the snapshot it recorded; every ingest key once; the words
table holding every batch once.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from consistent_catalog import ConsistentCatalog
from tests.harness.lake import sqlite_catalog
from tests.harness.servers import PostgresServer, postgres_sql_catalog
from tests.harness.sql_writer import (
    CONSISTENT,
    COUNTS,
    JOB,
    WORDS,
    SqlLake,
    WriterRun,
    batch,
    check_exactly_once,
    create_lake,
    epoch_statements,
    ingest_keys,
    ingest_statements,
    start_writer,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROUNDS = 6
HELD_DOWN = 20.0
SQLITE_HOLD = 5.0
SQLITE_ROUNDS = 3
STREAM_FILES = 6


def pipeline(rounds: int = ROUNDS) -> list[str]:
    """``rounds`` rounds of a keyed ingest and an epoch; the first epoch takes the job over."""
    statements: list[str] = []
    for r in range(1, rounds + 1):
        statements += ingest_statements(f"load-{r}", batch(r))
        statements += epoch_statements(takeover=r == 1)
    return statements


def postgres_lake(server: PostgresServer, directory: Path) -> SqlLake:
    catalog = postgres_sql_catalog(server, directory / "warehouse")
    lake, _ = create_lake(catalog, catalog.properties["uri"], f"file://{directory}/warehouse", directory)
    return lake


def reopened(lake: SqlLake) -> SqlLake:
    """The lake with a catalog of fresh connections (pyiceberg's pool still holds those the restarts cut)."""
    from pyiceberg.catalog.sql import SqlCatalog

    return replace(lake, catalog=SqlCatalog("lake", uri=lake.uri, warehouse=lake.warehouse))


def held_by_python(lake: SqlLake) -> None:
    """The job registered by a live Python instance: the first SQL epoch takes it over."""
    ConsistentCatalog(lake.catalog).register_job(JOB, [WORDS], [COUNTS])


def check_pipeline(lake: SqlLake, rounds: int = ROUNDS) -> None:
    """Every epoch once and equal to its recount; every ingest key and every batch once."""
    epochs = check_exactly_once(lake)
    assert epochs, "no epoch landed"
    words = lake.table(WORDS)
    assert ingest_keys(words) == Counter({f"load-{r}": 1 for r in range(1, rounds + 1)})
    landed = Counter(words.scan().to_arrow().column("word").to_pylist())
    assert landed == Counter(w for r in range(rounds + 1) for w in batch(r)), "a batch is missing or doubled"
    counts = lake.table(COUNTS)
    newest = {r["word"]: r["cnt"] for r in counts.scan().to_arrow().to_pylist()}
    assert newest == dict(landed), "the last epoch is not the word count of every batch"


@dataclass
class Scenario:
    lake: SqlLake
    run: WriterRun
    status: int | None = None
    events: list[float] = field(default_factory=list)
    """The restarts' down times, the lock's hold times."""
    note: str = ""


def restarting(server: PostgresServer, scenario: Scenario, rng: random.Random) -> None:
    """Restart ``server`` in immediate mode every 1-2.5 s (down 0.5-1.5 s, the second time 20 s) while the writer runs."""
    scenario.run.wait_for(r"\[sql-writer\].* statement 1:")  # the session is up: restarts from here on
    while scenario.run.process.poll() is None:
        time.sleep(rng.uniform(1.0, 2.5))
        if scenario.run.process.poll() is not None:
            return
        down = HELD_DOWN if len(scenario.events) == 1 else rng.uniform(0.5, 1.5)
        scenario.events.append(down)
        server.restart(down_seconds=down)


def locking(database: Path, scenario: Scenario) -> None:
    """Hold SQLite's catalog database in an exclusive transaction for 5 s at a time while the writer runs."""
    import sqlite3

    scenario.run.wait_for(r"\[sql-writer\].* statement 1:")
    con = sqlite3.connect(database, timeout=60, isolation_level=None)
    try:
        while scenario.run.process.poll() is None:
            time.sleep(1.5)
            con.execute("BEGIN EXCLUSIVE")
            started = time.monotonic()
            time.sleep(SQLITE_HOLD)
            con.execute("COMMIT")
            scenario.events.append(time.monotonic() - started)
    finally:
        con.close()


def stopping(server: PostgresServer, scenario: Scenario, release: Path) -> None:
    """Stop ``server`` for good while the ingest waits at its failpoint, then let the ingest go on."""
    scenario.run.wait_for(r"\[failpoint\] before-ingest")
    server._run("pg_ctl", "-D", str(server.data_dir), "-m", "immediate", "-w", "stop")
    scenario.events.append(time.monotonic())
    release.touch()


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Scenario]]:
    """The three writers, started at once (on 2 cores, driver JVMs side by side take about half the time), each with
    its fault: PostgreSQL restarted, SQLite locked, PostgreSQL stopped past a 4 s deadline."""
    root = tmp_path_factory.mktemp("sql-faults")
    seed = random.randrange(1_000_000)
    # a commit survives a crash (fsync on, as in production; the suite's fast servers lose commits on restarts)
    with PostgresServer.start(fast=False) as restarted, PostgresServer.start(fast=False) as stopped:
        restarts_lake = postgres_lake(restarted, root / "restarts")
        sqlite_dir = root / "locked"
        sqlite_dir.mkdir()
        locked_lake, _ = create_lake(sqlite_catalog(sqlite_dir), f"sqlite:///{sqlite_dir}/catalog.db",
                                     f"file://{sqlite_dir}/warehouse", sqlite_dir)
        deadline_lake = postgres_lake(stopped, root / "deadline")
        held_by_python(restarts_lake)
        held_by_python(locked_lake)
        release = root / "release"
        found = {
            "restarts": Scenario(restarts_lake, start_writer(restarts_lake, pipeline(), "restarts")),
            "locked": Scenario(locked_lake, start_writer(locked_lake, pipeline(SQLITE_ROUNDS), "locked")),
            "deadline": Scenario(deadline_lake, start_writer(
                deadline_lake, ingest_statements("down", batch(1)), "deadline", failpoint="before-ingest",
                action="pause", release=release, conf={f"spark.sql.catalog.{CONSISTENT}.consistent.retry-deadline": "4s"})),
        }
        found["restarts"].note = f"seed {seed}"
        drivers = [threading.Thread(target=restarting, args=(restarted, found["restarts"], random.Random(seed))),
                   threading.Thread(target=locking, args=(sqlite_dir / "catalog.db", found["locked"])),
                   threading.Thread(target=stopping, args=(stopped, found["deadline"], release))]
        for driver in drivers:
            driver.daemon = True
            driver.start()
        try:
            for scenario in found.values():
                scenario.status = scenario.run.wait(timeout=600)
        finally:
            for scenario in found.values():
                if scenario.run.process.poll() is None:
                    scenario.run.kill9()
            for driver in drivers:
                driver.join(timeout=120)
        stopped._run("pg_ctl", "-D", str(stopped.data_dir), "-l", str(stopped.data_dir.parent / "server.log"), "-w",
                     "-t", "60", "start")
        for scenario in found.values():
            scenario.lake = reopened(scenario.lake)
        yield found


def test_postgresql_restarted_under_sql_epochs_ingests_and_a_takeover(scenarios: dict[str, Scenario]) -> None:
    scenario = scenarios["restarts"]
    stderr = scenario.run.stderr()
    assert scenario.status == 0 and "error in statement" not in stderr, (
        f"{scenario.note}, downs {scenario.events}:\n{scenario.run.tail()}")
    assert len(scenario.events) >= 2 and HELD_DOWN in scenario.events, (
        f"the writer ended before the restarts (downs {scenario.events})")
    assert "catalog fault" in stderr, "the restarts were missed, not met"
    check_pipeline(scenario.lake)


def test_sqlite_catalog_locked_by_another_process_during_sql_epochs(scenarios: dict[str, Scenario]) -> None:
    scenario = scenarios["locked"]
    stderr = scenario.run.stderr()
    assert scenario.status == 0 and "error in statement" not in stderr, scenario.run.tail()
    assert scenario.events, "the writer ended before the database was locked"
    assert "catalog fault (unavailable)" in stderr and "database is locked" in stderr, "the lock was never met"
    check_pipeline(scenario.lake, SQLITE_ROUNDS)


def test_a_catalog_down_past_the_deadline_gives_one_line_naming_it_and_what_landed(
    scenarios: dict[str, Scenario],
) -> None:
    scenario = scenarios["deadline"]
    errors = [line for line in scenario.run.stderr().splitlines() if "error in statement" in line]
    assert scenario.status == 1 and len(errors) == 1, scenario.run.tail()
    line = errors[0]
    assert "[CONSISTENT_CUT.CATALOG_UNAVAILABLE]" in line and "catalog lake_consistent did not answer" in line, line
    assert "consistent.retry-deadline" in line and "for 4.0 s" in line, line
    # "no" when every attempt found no connection; "unknown" with the snapshot to look for when a statement met a
    # connection cut under it (a pooled connection used less than a second before the stop is not checked first)
    said = re.search(r"landed: (no|unknown \(snapshot (\d+))", line)
    assert said is not None, line
    words = scenario.lake.table(WORDS)
    landed = said[2] is not None and words.metadata.snapshot_by_id(int(said[2])) is not None
    assert ingest_keys(words) == (Counter({"down": 1}) if landed else Counter()), f"{said[0]}, yet: {ingest_keys(words)}"


def test_native_streaming_root_and_job_through_postgresql_restarts(tmp_path: Path) -> None:
    """A native streaming root (``toTable``) and a native streaming epoch job (complete mode, ``consistent.job``), in
    this process's Spark session, while PostgreSQL restarts: neither query fails, every file lands once, every
    published epoch equals a recount of its recorded input."""
    import json

    from consistent_catalog.spark.session import build_session
    from tests.harness.sql_writer import DRIVER_CONF, counts_at, main_epochs, word_counter

    rng = random.Random()
    with PostgresServer.start(fast=False) as server:
        lake = postgres_lake(server, tmp_path)
        incoming = tmp_path / "in"
        incoming.mkdir()
        spark = build_session(lake.uri, lake.warehouse, app_name="streaming-restarts", extra_conf=DRIVER_CONF)
        downs: list[float] = []
        fed: list[str] = []
        try:
            root = (spark.readStream.schema("word string").json(str(incoming)).writeStream
                    .option("checkpointLocation", str(tmp_path / "chk-root")).trigger(processingTime="0.5 seconds")
                    .toTable(f"{CONSISTENT}.{WORDS}"))
            job = (spark.readStream.option("consistent.waitFor", "200ms").table(f"{CONSISTENT}.{WORDS}")
                   .groupBy("word").count().withColumnRenamed("count", "cnt").writeStream.outputMode("complete")
                   .option("checkpointLocation", str(tmp_path / "chk-job")).option("consistent.job", JOB)
                   .trigger(processingTime="0.5 seconds").toTable(f"{CONSISTENT}.{COUNTS}"))
            try:
                for index in range(1, STREAM_FILES + 1):
                    words = batch(100 + index)
                    temporary = incoming / f".{index}.tmp"
                    temporary.write_text("".join(json.dumps({"word": w}) + "\n" for w in words), encoding="utf-8")
                    temporary.rename(incoming / f"{index}.json")
                    fed += words
                    time.sleep(rng.uniform(0.3, 1.0))
                    if index % 2 == 0:  # a restart every other file, down 0.5-1.5 s, the queries running meanwhile
                        downs.append(rng.uniform(0.5, 1.5))
                        server.restart(down_seconds=downs[-1])
                root.processAllAvailable()
                head = reopened(lake).table(WORDS).metadata.current_snapshot().snapshot_id
                deadline = time.monotonic() + 120
                while True:  # the job's epochs catch up with the root's last batch
                    epochs = main_epochs(reopened(lake).table(COUNTS))
                    if epochs and epochs[-1].inputs().get(WORDS) == head:
                        break
                    assert job.exception() is None and time.monotonic() < deadline, (
                        f"the job did not reach the root's head {head}: {job.exception()}")
                    time.sleep(0.5)
            finally:
                for query in (job, root):
                    query.stop()
            assert root.exception() is None and job.exception() is None
        finally:
            spark.stop()
        checked = reopened(lake)
        words_table, counts = checked.table(WORDS), checked.table(COUNTS)
        landed = Counter(words_table.scan().to_arrow().column("word").to_pylist())
        assert landed == Counter(batch(0)) + Counter(fed), "a file is missing or doubled in the root"
        epochs = main_epochs(counts)
        barriers = [e.barrier for e in epochs]
        assert barriers == sorted(set(barriers)) and len(epochs) >= 2, barriers
        for epoch in epochs:
            read = json.loads(epoch.summaries[-1]["consistent.sources"])[WORDS]
            assert counts_at(counts, epoch.head) == dict(word_counter(words_table, read)), (
                f"barrier {epoch.barrier} differs from a recount of {WORDS} at snapshot {read} (downs {downs})")
        assert len(downs) == STREAM_FILES // 2
