"""A Python ``EpochJob`` and a Spark SQL job are one job: they take over from each other (protocol §5.9, §6.2, §6.6).

On SQLite, PostgreSQL and the Java REST server (real servers, started by the session fixtures), one PySpark
session per backend (the module's fixture) and pyiceberg write the same job ``word-count`` on the same tables:
the SQL job is ``INSERT OVERWRITE lake_consistent.demo.word_counts SELECT word, count(*) ...`` and the Python
job ``cc.job("word-count", transform=count_words, mode="overwrite")``. Words are ingested between rounds, in
turn by SQL (``INSERT INTO lake_consistent.demo.words`` with an ingest key) and by ``cc.ingest``. Each round the
other language takes over (``SET spark.sql.consistent.takeover=true`` / ``takeover=True``) and publishes an
epoch, then the language it took over from, a zombie now, tries its next write and is refused:

- SQL zombie: its next ``INSERT OVERWRITE`` fails with ``[CONSISTENT_WRITE.OWNERSHIP]`` (or ``.FENCED``);
- Python zombie: in one round it had planned and staged the new words before SQL took over (SQL then
  publishes that staged epoch as it is: ``publish-staged`` across languages) and its publish is refused inside
  the catalog's compare-and-swap; in the other its next ``run_epoch`` is refused (``FencedError``).

Nothing a zombie tried changes the sink (its metadata location). At the end, read with pyiceberg: every
barrier once on ``main`` by one staging attempt, each equal to a recount of the words at the snapshot it
recorded; ``cc.epochs``/``cc.history``/``cc.status`` describe SQL and Python epochs alike, and only Spark's own
summary keys (``spark.app.id``) tell which engine wrote a snapshot.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.exceptions import FencedError, OwnershipError
from tests.harness.lake import sqlite_catalog, words
from tests.harness.servers import postgres_sql_catalog
from tests.harness.sql_writer import (
    COUNTS,
    JOB,
    WORDS,
    SqlLake,
    batch,
    check_exactly_once,
    count_words,
    create_lake,
    epoch_statements,
    ingest_keys,
    ingest_statements,
    main_epochs,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROUNDS = ("python", "sql", "python", "sql", "python")
"""Who takes over in each round, after the SQL job's first epoch."""
SQL_ZOMBIE_ERRORS = re.compile(r"\[CONSISTENT_WRITE\.(OWNERSHIP|FENCED)\]")
SPARK_ONLY_KEYS = ("spark.app.id", "engine-name")
"""Summary keys Iceberg's Spark writes add (pyiceberg adds none of its own)."""


@dataclass
class Round:
    writer: str
    """Who published the epoch."""
    barrier: int
    action: str
    """How the epoch reached main: ``published``, or ``republished`` (the staged epoch the zombie left)."""
    staged_by: str = ""
    """Whose engine wrote the epoch's snapshots: the writer's, or for ``republished`` the zombie's."""
    zombie: str | None = None
    refusal: str = ""
    zombie_changed_sink: bool = False


@dataclass
class Mixed:
    backend: str
    lake: SqlLake
    cc: ConsistentCatalog
    spark: Any
    first_barrier: int
    rounds: list[Round] = field(default_factory=list)
    staged_by_python_zombie: str | None = None
    ingested: list[str] = field(default_factory=list)


def sql(spark: Any, statements: list[str]) -> None:
    spark.conf.set("spark.sql.consistent.version", VERSION)
    for statement in statements:
        spark.sql(statement)


def pointer(lake: SqlLake) -> str:
    return lake.table(COUNTS).metadata_location


def newest_epoch(lake: SqlLake) -> Any:
    epochs = main_epochs(lake.table(COUNTS))
    assert epochs, "the sink holds no epoch"
    return epochs[-1]


VERSION = "1"
"""The job's declared version (protocol §6.10): the SQL statement and the Python transform are one definition,
so neither language's epoch revises the other's (without it their fingerprints, sql and python, differ)."""


def python_job(cc: ConsistentCatalog) -> Any:
    return cc.job(JOB, sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite", takeover=True,
                  version=VERSION)


def run_rounds(env: Mixed) -> None:
    """The SQL job's first epoch, then ``ROUNDS``: ingest, the other language takes over, its zombie is refused."""
    spark, lake, cc = env.spark, env.lake, env.cc
    sql(spark, epoch_statements(takeover=False))
    env.rounds.append(Round("sql", newest_epoch(lake).barrier, "published", staged_by="sql"))
    job: Any = None  # the Python instance of the previous Python round: a zombie once SQL takes over
    for number, writer in enumerate(ROUNDS, 1):
        if number % 2:
            sql(spark, ingest_statements(f"sql-{number}", batch(number)))
            env.ingested.append(f"sql-{number}")
        else:
            cc.ingest(WORDS, words(*batch(number)), key=f"py-{number}")
            env.ingested.append(f"py-{number}")
        if writer == "python":
            job = python_job(cc)
            job.register()
            result = job.run_epoch()
            assert result.actions == {COUNTS: "published"}, result
            done = Round("python", result.barrier, "published", zombie="sql")
            before = pointer(lake)
            with pytest.raises(Exception) as refused:  # noqa: PT011 - a Py4J/pyspark error; its message is checked
                sql(spark, epoch_statements(takeover=False))
            done.refusal = str(refused.value).splitlines()[0]
            done.zombie_changed_sink = pointer(lake) != before
        elif env.staged_by_python_zombie is None:
            # the Python instance, still thinking it owns the sink, plans and stages the new words ...
            plan = job.plan()
            staged = job.stage(COUNTS, plan, job.run_transform(plan)[COUNTS])
            env.staged_by_python_zombie = staged.attempt
            # ... SQL takes over: the staged epoch has its barrier, its job and its inputs: published as it is
            sql(spark, epoch_statements(takeover=True))
            head = newest_epoch(lake)
            action = "republished" if head.attempts == {staged.attempt} else "published"
            done = Round("sql", head.barrier, action, staged_by="python", zombie="python")
            before = pointer(lake)
            with pytest.raises((FencedError, OwnershipError)) as refused:
                job.publish(COUNTS, plan, staged.base, staged.head, table=staged.table)
            done.refusal = f"{type(refused.value).__name__}: {refused.value}"
            done.zombie_changed_sink = pointer(lake) != before
        else:
            sql(spark, epoch_statements(takeover=True))
            done = Round("sql", newest_epoch(lake).barrier, "published", zombie="python")
            before = pointer(lake)
            with pytest.raises((FencedError, OwnershipError)) as refused:
                job.run_epoch()
            done.refusal = f"{type(refused.value).__name__}: {refused.value}"
            done.zombie_changed_sink = pointer(lake) != before
        if writer == "sql" and job is not None:
            job.unregister()  # a no-op: it is not the holder any more
        done.staged_by = done.staged_by or done.writer
        env.rounds.append(done)
    job.unregister()  # the last round is Python's: the sink ends with no lease


@pytest.fixture(scope="module", params=["sqlite", "postgres", "rest"])
def mixed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mixed]:
    from consistent_catalog.spark.session import build_session

    backend = request.param
    root = tmp_path_factory.mktemp(f"mixed-{backend}")
    warehouse = f"file://{root}/warehouse"
    if backend == "sqlite":
        catalog, uri = sqlite_catalog(root), f"sqlite:///{root}/catalog.db"
    elif backend == "postgres":
        catalog = postgres_sql_catalog(request.getfixturevalue("postgres_server"), root / "warehouse")
        uri = catalog.properties["uri"]
    else:
        server = request.getfixturevalue("rest_server")
        catalog, uri = server.catalog(warehouse=warehouse), server.uri
    lake, first_barrier = create_lake(catalog, uri, warehouse, root)
    spark = build_session(uri, warehouse, app_name=f"mixed-{backend}")
    try:
        env = Mixed(backend, lake, ConsistentCatalog(catalog), spark, first_barrier)
        run_rounds(env)
        yield env
    finally:
        spark.stop()
        if backend == "postgres":
            catalog.engine.dispose()


def test_each_language_takes_over_and_its_predecessor_is_refused(mixed: Mixed) -> None:
    writers = [r.writer for r in mixed.rounds]
    assert writers == ["sql", *ROUNDS]
    barriers = [r.barrier for r in mixed.rounds]
    assert barriers == sorted(set(barriers)) and barriers[0] == mixed.first_barrier, barriers
    for done in mixed.rounds[1:]:
        assert not done.zombie_changed_sink, f"the {done.zombie} zombie changed the sink in round {done}"
        if done.zombie == "sql":
            assert SQL_ZOMBIE_ERRORS.search(done.refusal), done.refusal
        else:
            assert done.refusal.startswith(("FencedError", "OwnershipError")), done.refusal
    # the round where the Python zombie had staged: SQL published its staged epoch unchanged
    assert mixed.rounds[2].action == "republished", mixed.rounds[2]


def test_every_barrier_once_and_equal_to_a_recount(mixed: Mixed) -> None:
    epochs = check_exactly_once(mixed.lake)
    assert [e.barrier for e in epochs] == [r.barrier for r in mixed.rounds]
    words_table = mixed.lake.table(WORDS)
    assert ingest_keys(words_table) == {key: 1 for key in mixed.ingested}
    assert epochs[-1].inputs() == {WORDS: words_table.metadata.snapshot_by_name("main").snapshot_id}
    (republished,) = [e for e, r in zip(epochs, mixed.rounds) if r.action == "republished"]
    assert republished.attempts == {mixed.staged_by_python_zombie}


def test_history_and_status_describe_both_languages_alike(mixed: Mixed) -> None:
    """What the library reports about an epoch has the same form whoever wrote it; only Spark's summary keys
    (``spark.app.id``) tell the engine apart. (Iceberg's own operations differ too: Spark's INSERT OVERWRITE
    commits one ``overwrite`` snapshot, pyiceberg a ``delete`` and an ``append``; both are one epoch, §5.2.)"""
    cc = mixed.cc
    writer_of = {r.barrier: r.staged_by for r in mixed.rounds}
    main = main_epochs(mixed.lake.table(COUNTS))
    for epoch in main:
        by_spark = writer_of[epoch.barrier] == "sql"
        for summary in epoch.summaries:
            ours = {k: v for k, v in summary.items() if k.startswith("consistent.")}
            assert set(ours) == {P.BARRIER, P.JOB, P.SOURCES, P.ATTEMPT, P.DEFINITION}, summary
            assert ours[P.DEFINITION] == "version:" + hashlib.sha256(VERSION.encode()).hexdigest()[:16], summary
            assert ours[P.JOB] == JOB and re.fullmatch(r"[0-9a-f]{12}", ours[P.ATTEMPT]), summary
            assert ours[P.SOURCES] == json.dumps(json.loads(ours[P.SOURCES]), separators=(",", ":"), sort_keys=True)
            assert all((key in summary) == by_spark for key in SPARK_ONLY_KEYS), (writer_of[epoch.barrier], summary)

    epochs = {e.barrier: e for e in cc.epochs(COUNTS) if e.barrier is not None}
    assert set(epochs) == set(writer_of)
    for barrier, epoch in epochs.items():
        recorded = next(e for e in main if e.barrier == barrier).inputs()
        assert (epoch.job, epoch.sources, epoch.branch) == (JOB, recorded, P.MAIN_BRANCH), epoch
        assert epoch.published_at_ms is not None and epoch.total_records is not None, epoch
    history = [h for h in cc.history(COUNTS) if h.barrier is not None]
    assert {h.barrier for h in history} == set(writer_of)
    assert {h.job for h in history} == {JOB}

    (status,) = cc.status([COUNTS])
    expected = ("derived", JOB, "none", mixed.rounds[-1].barrier)
    assert (status.role, status.job, status.lease, status.watermark) == expected, status
    assert status.error is None and status.untracked_since is None, status
