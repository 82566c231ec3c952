"""Issue #10 on real Spark: exactly-once root ingests from concurrent Spark writers, and a foreign
Spark ``INSERT`` that leaves the pipeline recoverable. Checked by reading rows and summaries back
with plain pyiceberg."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import COUNTS, HISTOGRAM, TABLES, WORDS, ensure_tables, run_demo
from consistent_catalog.exceptions import UntrackedWriteError
from tests.harness.lake import WORDS_SCHEMA, sqlite_catalog

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from consistent_catalog.spark.session import build_session

    root = tmp_path_factory.mktemp("spark-hardening")
    catalog = sqlite_catalog(root)
    spark = build_session(f"sqlite:///{root}/catalog.db", root / "warehouse", app_name="test-spark-hardening")
    yield root, catalog, spark
    spark.stop()


def words_of(catalog, snapshot_id=None) -> Counter:
    table = catalog.load_table(WORDS)
    if table.metadata.current_snapshot_id is None:
        return Counter()
    return Counter(r["word"] for r in table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())


def test_two_concurrent_spark_ingesters_land_each_key_once(env) -> None:
    from consistent_catalog.spark.job import ingest_dataframe

    root, catalog, spark = env
    catalog.create_namespace("race")
    catalog.create_table("race.words", schema=WORDS_SCHEMA)
    sessions = [spark.newSession(), spark.newSession()]  # each its own SQL conf (the staged write's id)
    ccs = [ConsistentCatalog(sqlite_catalog(root)), ConsistentCatalog(sqlite_catalog(root))]
    rounds = 3
    results: list[list] = [[], []]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def ingest(index: int) -> None:
        try:
            for round_ in range(rounds):
                frame = sessions[index].createDataFrame([(f"r{round_}-{i}",) for i in range(50)], "word string")
                start.wait()
                results[index].append(ingest_dataframe(ccs[index], frame, "race.words", key=f"epoch-{round_}"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=ingest, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    table = catalog.load_table("race.words")
    found = Counter(r["word"] for r in table.scan().to_arrow().to_pylist())
    assert len(found) == rounds * 50 and set(found.values()) == {1}  # 150 words, none twice
    for round_ in range(rounds):
        assert sorted([results[0][round_].skipped, results[1][round_].skipped]) == [False, True]
    keys = Counter(
        s.summary.additional_properties.get(P.INGEST_KEY)
        for s in table.metadata.snapshots
        if s.snapshot_id in _ancestry(table)
    )
    assert keys == Counter({f"epoch-{r}": 1 for r in range(rounds)}), keys


def _ancestry(table) -> set[int]:
    found, current = set(), table.metadata.current_snapshot_id
    while current is not None:
        found.add(current)
        current = table.metadata.snapshot_by_id(current).parent_snapshot_id
    return found


def test_a_foreign_spark_insert_is_recoverable(env) -> None:
    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    ensure_tables(cc)
    run_demo(cc=cc, spark=spark, engine="spark", epochs=2, rows_per_epoch=100, echo=lambda _line: None)
    before = cc.resolve(TABLES)

    spark.sql(f"INSERT INTO lake.{COUNTS} VALUES ('intruder', 99)")  # a plain Spark write, no barrier
    table = catalog.load_table(COUNTS)
    foreign = table.metadata.current_snapshot_id
    assert foreign != before[COUNTS].snapshot_id

    with pytest.raises(UntrackedWriteError, match=str(foreign)):
        cc.resolve(TABLES)
    assert cc.resolve(TABLES, as_of=before.barrier).snapshot_ids == before.snapshot_ids
    status = {s.table: s for s in cc.status(TABLES)}
    assert status[COUNTS].untracked_since == foreign
    assert status[COUNTS].untracked_by is not None and "spark" in status[COUNTS].untracked_by
    assert spark.sparkContext.applicationId in status[COUNTS].untracked_by

    cc.revise(COUNTS, before.barrier)  # the documented way out
    assert catalog.load_table(COUNTS).metadata.current_snapshot_id == before[COUNTS].snapshot_id
    run_demo(cc=cc, spark=spark, engine="spark", epochs=3, rows_per_epoch=100, echo=lambda _line: None)
    after = cc.resolve(TABLES)
    counts = {r["word"]: r["cnt"] for r in catalog.load_table(COUNTS).scan(snapshot_id=after[COUNTS].snapshot_id)
              .to_arrow().to_pylist()}
    assert "intruder" not in counts
    assert counts == dict(words_of(catalog, after[WORDS].snapshot_id))
    hist = {r["cnt"]: r["words"] for r in catalog.load_table(HISTOGRAM).scan(
        snapshot_id=after[HISTOGRAM].snapshot_id).to_arrow().to_pylist()}
    assert hist == dict(Counter(counts.values()))
