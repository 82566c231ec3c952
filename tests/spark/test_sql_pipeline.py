"""FLIP-276's pipeline as a file of plain Spark SQL (issue 19): ``spark-sql --properties-file F -f flip_pipeline.sql``.

One lake for the module: the three demo tables created with pyiceberg, the properties file rendered by
``consistent-catalog spark-conf`` (``lake`` and ``lake_consistent``), one PySpark session that only reads.

(a) The packaged ``flip_pipeline.sql`` runs ``ROUNDS`` times, each a stock ``spark-sql -f`` process of its own,
    while words arrive through pyiceberg (``ConsistentCatalog.ingest``) between the rounds and, from a thread,
    during them. After every round, independently of what the plugin printed:
    - readers recount the rows: through ``lake_consistent`` (the PySpark session) and with pyiceberg at
      ``ConsistentCatalog.resolve``'s snapshot ids; both see the same rows, and they satisfy FLIP-276's
      invariants (sum(cnt) = count(words), every word's count, the histogram of the counts), with at least
      every word ingested before the round began;
    - every epoch exactly once: on each sink's main (read with pyiceberg) every barrier is one run of
      snapshots written by one ``consistent.attempt``, barriers strictly increase, each round added one epoch
      per sink, and each epoch's rows are a recount of its source at ``snap(source, barrier)``.
(b) ``consistent-catalog demo --sql`` end to end (small sizes): exit status 0, its progress lines and JSON,
    and the lake it leaves recounted with pyiceberg.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import COUNTS, HISTOGRAM, SCHEMAS, TABLES, WORDS
from consistent_catalog.spark.sql_pipeline import FLIP_PIPELINE_SQL, run_spark_sql
from tests.harness.flip import Contents
from tests.harness.main_epochs import exactly_once_problems, main_epochs, snapshot_at

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ROUNDS = 3  # the first round registers the jobs, later ones run on what earlier ones left; a fourth adds nothing new
WORDS_BETWEEN = 40  # words ingested before each round
WORDS_DURING = 5  # words per ingest of the thread that ingests while a round runs
ROUND_TIMEOUT = 400  # a spark-sql process: ~30 s on an idle 2-core machine, several times that on a busy one
VOCABULARY = [f"v{i:02d}" for i in range(30)]

UNION = """
SELECT 'W' AS k, word AS v, CAST(NULL AS BIGINT) AS n FROM lake_consistent.demo.words
UNION ALL SELECT 'C', word, cnt FROM lake_consistent.demo.word_counts
UNION ALL SELECT 'H', CAST(cnt AS STRING), words FROM lake_consistent.demo.count_histogram
""".strip()


# --- the independent recount ----------------------------------------------------------------------------------
def _scan(catalog: SqlCatalog, table: str, snapshot_id: int | None) -> pa.Table:
    loaded = catalog.load_table(table)
    if snapshot_id is None:
        return loaded.schema().as_arrow().empty_table()
    return loaded.scan(snapshot_id=snapshot_id).to_arrow()


def epoch_problems(catalog: SqlCatalog) -> list[str]:
    """Every epoch on each sink's main exactly once, and each one a recount of its source at its barrier."""
    problems = []
    for sink, source in ((COUNTS, WORDS), (HISTOGRAM, COUNTS)):
        metadata = catalog.load_table(sink).metadata
        problems += exactly_once_problems(sink, metadata)
        source_metadata = catalog.load_table(source).metadata
        for epoch in main_epochs(metadata)[0]:
            at = snapshot_at(source_metadata, epoch.barrier)
            got = _scan(catalog, sink, epoch.head)
            if sink == COUNTS:
                expected = dict(Counter(_scan(catalog, WORDS, at)["word"].to_pylist()))
                actual = dict(zip(got["word"].to_pylist(), got["cnt"].to_pylist()))
            else:
                expected = dict(Counter(_scan(catalog, COUNTS, at)["cnt"].to_pylist()))
                actual = dict(zip(got["cnt"].to_pylist(), got["words"].to_pylist()))
            if len(actual) != got.num_rows or actual != expected:
                problems.append(f"{sink} at barrier {epoch.barrier} (snapshot {epoch.head}) is not a recount of "
                                f"{source} at snapshot {at}")
    return problems


def epochs_on_main(catalog: SqlCatalog, sink: str) -> list[int]:
    return [epoch.barrier for epoch in main_epochs(catalog.load_table(sink).metadata)[0]]


# --- the lake ------------------------------------------------------------------------------------------------
@dataclass
class Lake:
    root: Path
    uri: str
    properties: Path
    catalog: SqlCatalog
    cc: ConsistentCatalog
    spark: Any
    env: dict[str, str]


def _catalog(root: Path) -> SqlCatalog:
    return SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    from consistent_catalog.spark.session import build_session, parse_spark_defaults

    root = tmp_path_factory.mktemp("sql-pipeline")
    (root / "warehouse").mkdir()
    catalog = _catalog(root)
    catalog.create_namespace("demo")
    for table, schema in SCHEMAS.items():
        catalog.create_table(table, schema=schema)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYSPARK_PYTHON": sys.executable}
    subprocess.run(["bash", str(ROOT / "scripts" / "build_jvm.sh")], check=True, cwd=ROOT, timeout=600)
    properties = root / "spark-defaults.conf"
    subprocess.run(
        [str(BIN / "consistent-catalog"), "spark-conf", "--catalog-uri", f"sqlite:///{root}/catalog.db",
         "--warehouse", str(root / "warehouse"), "--write", str(properties)],
        check=True, capture_output=True, timeout=120, env=env, cwd=root,
    )
    conf = parse_spark_defaults(properties.read_text(encoding="utf-8"))
    assert conf.get("spark.sql.catalog.lake_consistent") == "io.consistentcatalog.spark.ConsistentSparkCatalog", conf
    uri = f"sqlite:///{root}/catalog.db"
    spark = build_session(uri, root / "warehouse", app_name="sql-pipeline-reader")
    try:
        yield Lake(root, uri, properties, catalog, ConsistentCatalog(catalog), spark, env)
    finally:
        spark.stop()


def _words(rng: random.Random, n: int) -> pa.Table:
    return pa.table({"word": rng.choices(VOCABULARY, k=n)}, schema=SCHEMAS[WORDS])


class Ingester(threading.Thread):
    """Ingests a few words every half second (its own catalog connection) until stopped: words arriving while
    a round runs, before, during and after its plan."""

    def __init__(self, root: Path, seed: int) -> None:
        super().__init__(name=f"ingester-{seed}", daemon=True)
        self.cc = ConsistentCatalog(_catalog(root))
        self.rng = random.Random(seed)
        self.stopped = threading.Event()
        self.ingested = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopped.wait(0.5):
                self.cc.ingest(WORDS, _words(self.rng, WORDS_DURING))
                self.ingested += WORDS_DURING
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def stop(self) -> int:
        self.stopped.set()
        self.join(timeout=120)
        assert self.error is None, f"an ingest during the round failed: {self.error!r}"
        return self.ingested


def _served(lake: Lake) -> tuple[Contents, dict[str, dict[str, Any]]]:
    """The rows through lake_consistent (one statement) and the cut the session reports for that statement."""
    rows = [(r["k"], r["v"], r["n"]) for r in lake.spark.sql(UNION).collect()]
    cut = {r["table"]: r.asDict() for r in lake.spark.sql("CALL lake_consistent.system.current_cut('demo.words')").collect()}
    return Contents.from_rows(rows), cut


# --- (a) the SQL file, round after round, each a process of its own ------------------------------------------
def test_flip_pipeline_sql_rounds_in_separate_processes_publish_each_epoch_once_at_consistent_cuts(lake: Lake) -> None:
    assert (ROOT / "spark-conf" / "flip-pipeline.sql").resolve() == FLIP_PIPELINE_SQL  # the checkout's link
    rng = random.Random(19)
    ingested = 0
    for round_ in range(1, ROUNDS + 1):
        lake.cc.ingest(WORDS, _words(rng, WORDS_BETWEEN), key=f"between-{round_}")
        ingested += WORDS_BETWEEN
        before_round = ingested
        during = Ingester(lake.root, seed=round_)
        during.start()
        try:
            run = run_spark_sql(lake.properties, FLIP_PIPELINE_SQL, cwd=lake.root, timeout=ROUND_TIMEOUT)
        finally:
            ingested += during.stop()
        described = f"round {round_}: spark-sql exit {run.returncode}, {run.seconds:.0f} s\n{run.stderr[-4000:]}"
        assert run.returncode == 0, described
        assert [line.split(":")[0] for line in run.reports] == ["[lake_consistent] word-count",
                                                                 "[lake_consistent] count-histogram"], described
        assert all(" published (" in line for line in run.reports), described

        # the readers: lake_consistent in the PySpark session, pyiceberg at resolve's snapshot ids
        cut = lake.cc.resolve(TABLES)
        expected = Contents.from_pyiceberg(lake.catalog, cut.snapshot_ids)
        assert not expected.problems(), (round_, expected.problems())
        served, reported = _served(lake)
        assert not served.problems(), (round_, served.problems())
        assert served == expected, f"round {round_}: lake_consistent and pyiceberg at the resolved cut differ"
        assert {t: reported[t]["snapshot_id"] for t in TABLES} == cut.snapshot_ids, (reported, cut)
        assert before_round <= expected.count <= ingested, (round_, before_round, expected.count, ingested)

        # every epoch exactly once, each a recount of its source at its barrier; one epoch per sink per round
        problems = epoch_problems(lake.catalog)
        assert not problems, f"round {round_}: {problems}"
        counts, histogram = epochs_on_main(lake.catalog, COUNTS), epochs_on_main(lake.catalog, HISTOGRAM)
        assert len(counts) == len(histogram) == round_, (round_, counts, histogram)
        assert histogram[-1] == counts[-1] == cut.barrier, (counts, histogram, cut.barrier)

    words_now = _scan(lake.catalog, WORDS, lake.catalog.load_table(WORDS).metadata.snapshot_by_name("main").snapshot_id)
    assert words_now.num_rows == ingested
    for sink in (COUNTS, HISTOGRAM):  # every spark-sql process released its lease when it exited; the job owns it
        properties = lake.catalog.load_table(sink).metadata.properties
        assert P.LEASE_HOLDER not in properties and P.JOB in properties, properties


# --- (b) consistent-catalog demo --sql --------------------------------------------------------------------------
def test_demo_sql_runs_the_file_once_per_epoch_and_checks_the_invariants(lake: Lake, tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    epochs, rows = 2, 30
    result = subprocess.run(
        [str(BIN / "consistent-catalog"), "demo", "--sql", "--dir", str(directory), "--epochs", str(epochs),
         "--rows-per-epoch", str(rows), "--output", "json"],
        capture_output=True, text=True, timeout=2 * ROUND_TIMEOUT + 120, env=lake.env, cwd=tmp_path,
    )
    described = f"exit {result.returncode}\nstdout:\n{result.stdout[-2000:]}\nstderr:\n{result.stderr[-4000:]}"
    assert result.returncode == 0, described
    report = json.loads(result.stdout)
    assert report["violations"] == [] and report["cuts_checked"] == epochs + 1, report

    progress = result.stderr.splitlines()
    assert [line for line in progress if line.startswith("round ")] == [
        f"round {i}: spark-sql -f flip_pipeline.sql (a process of its own, both jobs)" for i in (1, 2)], described
    published = [line.strip() for line in progress if line.strip().startswith("[lake_consistent] ")]
    assert len(published) == 2 * epochs and all(" published (" in line for line in published), described
    assert f"protocol §7 invariants at {epochs + 1} cuts: OK" in progress, described
    assert (directory / "spark-defaults.conf").is_file()

    # the lake it leaves, recounted with pyiceberg
    catalog = _catalog(directory)
    cut = ConsistentCatalog(catalog).resolve(TABLES)
    assert {t: v["snapshot_id"] for t, v in report["cut"]["tables"].items()} == cut.snapshot_ids
    contents = Contents.from_pyiceberg(catalog, cut.snapshot_ids)
    assert not contents.problems(), contents.problems()
    assert contents.count == epochs * rows
    assert not epoch_problems(catalog)
    assert len(epochs_on_main(catalog, COUNTS)) == len(epochs_on_main(catalog, HISTOGRAM)) == epochs
