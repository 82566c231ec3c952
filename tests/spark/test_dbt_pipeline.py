"""FLIP-276's pipeline as a dbt project (``spark-conf/dbt-flip``, issue 22): each model of ``dbt run`` one epoch.

One lake for the module: the three demo tables created with pyiceberg, and a work directory standing in for a
checkout: ``.venv`` (this venv), ``spark-conf/spark-defaults.conf`` rendered for the lake by ``consistent-catalog
spark-conf``, and a copy of ``spark-conf/dbt-flip`` (so dbt's ``target/`` and ``logs/`` stay out of the checkout).
Every ``dbt run`` of the real project is the README's dbt block, run as it is written (``bash -euo pipefail``):
that block is fenced ``text`` because tests/docs/test_snippets.py's work directory has no ``spark-conf/dbt-flip``.

(a) ``ROUNDS`` rounds, words ingested with pyiceberg before each and, from a thread, while all but the last run
    (so the last round catches up with every word). After every round, with pyiceberg alone
    (``tests.harness.flip_epochs``, never the plugin's own output): each model published exactly one epoch more,
    its job's alone, every epoch recording ``snap(source, barrier)`` as its input and holding a recount of the
    source there; both models at one barrier, the cut that ``consistent-catalog resolve`` gives, on which
    FLIP-276's invariants hold (``tests.harness.flip.Contents``) with at least every word ingested before the
    round. Then a rerun with no new word: both models ``done``, nothing written.
(c) The ownership of a model's table (issue 29, protocol §6.1-§6.2): a copy whose ``word_counts`` names a typo'd
    job is refused with the owner named, the table unchanged. (An edited model's new generation, ``--full-refresh`` and
    a rerun that is ``done`` are tests of ``test_dbt_project.py`` and (a).)
(b) A failing model publishes nothing: a copy of the project whose ``word_counts`` fails while its statement
    runs; ``dbt run`` fails, ``count_histogram`` is skipped, nothing is published; the failing model's SQL is a
    changed definition, whose new generation never replaced the one that serves: both sinks, their watermarks and
    the cut are as they were (protocol §6.10, issue 43). The real project's next run publishes those words exactly
    once.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import COUNTS, HISTOGRAM, SCHEMAS, TABLES, WORDS
from tests.docs.test_snippets import parse_blocks
from tests.harness.flip import Contents
from tests.harness.flip_epochs import FLIP_JOBS, epoch_problems, lineage_problems, scan
from tests.harness.main_epochs import main_epochs
from tests.spark import dbt_harness
from tests.spark.dbt_harness import BIN, NOT_COPIED, DbtRun
from tests.spark.test_sql_pipeline import VOCABULARY, Ingester

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "spark-conf" / "dbt-flip"
ROUNDS = 2
WORDS_BETWEEN = 40  # words ingested before each round
MODELS = {COUNTS: "word_counts", HISTOGRAM: "count_histogram"}


def readme_dbt_block() -> str:
    """The README's dbt commands (its block that runs ``dbt run``), exactly as a reader copies them."""
    found = [b.code for b in parse_blocks(ROOT / "README.md") if "dbt run --project-dir" in b.code]
    assert len(found) == 1, f"README.md should show the dbt commands in one block, found {len(found)}"
    return found[0]


# --- the lake and the work directory ---------------------------------------------------------------------------
@dataclass
class Lake:
    root: Path
    workdir: Path
    catalog: SqlCatalog
    cc: ConsistentCatalog
    env: dict[str, str]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    dbt_harness.require_dbt()
    root = tmp_path_factory.mktemp("dbt-pipeline")
    (root / "warehouse").mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("demo")
    for table, schema in SCHEMAS.items():
        catalog.create_table(table, schema=schema)

    workdir = root / "checkout"
    (workdir / "spark-conf").mkdir(parents=True)
    (workdir / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    (workdir / "src").symlink_to(ROOT / "src", target_is_directory=True)  # packages.yml names the checkout's package
    shutil.copytree(PROJECT, workdir / "spark-conf" / "dbt-flip", ignore=shutil.ignore_patterns(*NOT_COPIED))
    # the process environment, less what would point dbt or Spark elsewhere (the README block sets its own)
    env = dbt_harness.environment(f"sqlite:///{root}/catalog.db", f"file://{root}/warehouse")
    subprocess.run(
        [str(BIN / "consistent-catalog"), "spark-conf", "--catalog-uri", f"sqlite:///{root}/catalog.db",
         "--warehouse", str(root / "warehouse"), "--write", str(workdir / "spark-conf" / "spark-defaults.conf")],
        check=True, capture_output=True, timeout=120, env=env, cwd=workdir,
    )
    yield Lake(root, workdir, catalog, ConsistentCatalog(catalog), env)


def _words(rng: random.Random, n: int) -> pa.Table:
    return pa.table({"word": rng.choices(VOCABULARY, k=n)}, schema=SCHEMAS[WORDS])


# --- dbt runs --------------------------------------------------------------------------------------------------
def copy_project(lake: Lake, name: str) -> Path:
    """A copy of the project beside the lake, its package named by the path ``consistent-catalog dbt-path`` prints
    (as a project outside a checkout names it): installed with ``dbt deps`` once, the later copies reuse it."""
    installed = next((p for p in sorted(lake.root.iterdir()) if (p / "dbt_packages").is_dir()), None)
    return dbt_harness.copy_project(PROJECT, lake.root / name, env=lake.env, installed=installed)


def run_readme_dbt(lake: Lake) -> DbtRun:
    return dbt_harness.run(["bash", "-euo", "pipefail", "-c", readme_dbt_block()], cwd=lake.workdir, env=lake.env,
                           project=lake.workdir / "spark-conf" / "dbt-flip")


def run_project(lake: Lake, project: Path) -> DbtRun:
    """``dbt run`` of another project directory, with the work directory's properties file."""
    return dbt_harness.dbt(project, "run", profiles=project, cwd=lake.workdir,
                           env={**lake.env, "SPARK_CONF_DIR": str(lake.workdir / "spark-conf")})


# --- what pyiceberg reads --------------------------------------------------------------------------------------
def epochs(lake: Lake) -> dict[str, list[int]]:
    """Each sink's epochs on main: their head snapshot ids, oldest first."""
    return {sink: [e.head for e in main_epochs(lake.catalog.load_table(sink).metadata)[0]] for sink in MODELS}


def heads(lake: Lake) -> dict[str, dict[str, int]]:
    """Each sink's main and consistent-staged snapshot ids."""
    found = {}
    for sink in MODELS:
        refs = lake.catalog.load_table(sink).metadata.refs
        found[sink] = {ref: refs[ref].snapshot_id for ref in ("main", "consistent-staged") if ref in refs}
    return found


def resolve(lake: Lake) -> dict:
    """``consistent-catalog resolve`` of the three tables, as its JSON says."""
    return dbt_harness.resolve(lake.env, TABLES)


def check_round(lake: Lake, run: DbtRun, round_: int, before_round: int, ingested: int) -> None:
    """After a published round: one epoch more per model, each as its job promises, at the resolved cut."""
    described = f"round {round_}: {run.describe()}"
    assert run.returncode == 0, described
    assert run.statuses == {"word_counts": "success", "count_histogram": "success"}, described
    assert [line.split(":")[0] for line in run.reports] == [
        "[lake_consistent] word-count", "[lake_consistent] count-histogram"], described
    assert all(" published (" in line for line in run.reports), described

    for sink in MODELS:
        assert not epoch_problems(lake.catalog, sink), (round_, epoch_problems(lake.catalog, sink))
        assert not lineage_problems(lake.catalog, sink), (round_, lineage_problems(lake.catalog, sink))
    found = epochs(lake)
    assert {sink: len(ids) for sink, ids in found.items()} == dict.fromkeys(MODELS, round_), (round_, found)

    cut = resolve(lake)
    ids = {table: part["snapshot_id"] for table, part in cut["tables"].items()}
    assert {sink: ids[sink] for sink in MODELS} == {sink: found[sink][-1] for sink in MODELS}, (cut, found)
    assert {cut["tables"][sink]["barrier"] for sink in MODELS} == {cut["barrier"]}, cut
    contents = Contents.from_pyiceberg(lake.catalog, ids)
    assert not contents.problems(), (round_, contents.problems())
    assert before_round <= contents.count <= ingested, (round_, before_round, contents.count, ingested)


# --- (a) rounds of the README's dbt run while words arrive, then a rerun with nothing new ----------------------
def test_dbt_run_rounds_publish_one_epoch_per_model_at_consistent_cuts_and_a_rerun_is_done(lake: Lake) -> None:
    assert {sink: job for sink, (job, _) in FLIP_JOBS.items()} == {COUNTS: "word-count", HISTOGRAM: "count-histogram"}
    rng = random.Random(22)
    ingested = 0
    for round_ in range(1, ROUNDS + 1):
        lake.cc.ingest(WORDS, _words(rng, WORDS_BETWEEN), key=f"dbt-between-{round_}")
        ingested += WORDS_BETWEEN
        before_round = ingested
        if round_ == ROUNDS:  # the last round: nothing arrives while it runs, so it publishes every word
            run = run_readme_dbt(lake)
        else:
            during = Ingester(lake.root, seed=100 + round_)
            during.start()
            try:
                run = run_readme_dbt(lake)
            finally:
                ingested += during.stop()
        check_round(lake, run, round_, before_round, ingested)
    # the last round's cut holds every word (check_round: before_round == ingested there)

    # no new word: each model's statement plans the barrier its sink holds, runs no query, writes nothing
    before, cut_before = heads(lake), resolve(lake)
    rerun = run_readme_dbt(lake)
    assert rerun.returncode == 0 and rerun.statuses == {"word_counts": "success", "count_histogram": "success"}, (
        rerun.describe())
    assert len(rerun.reports) == 2 and all(" done: the sink already holds it, nothing written" in line
                                           for line in rerun.reports), rerun.describe()
    assert heads(lake) == before and resolve(lake) == cut_before
    assert {sink: len(ids) for sink, ids in epochs(lake).items()} == dict.fromkeys(MODELS, ROUNDS)


# --- (c) a typo'd job is refused, the owner named -----------------------------------------------------------------
def test_a_typod_job_is_refused_with_the_owner_named_and_nothing_changed(lake: Lake) -> None:
    typo = copy_project(lake, "dbt-typo")
    model = typo / "models" / "word_counts.sql"
    model.write_text(model.read_text(encoding="utf-8").replace("consistent_job='word-count'",
                                                               "consistent_job='word-counts'"), encoding="utf-8")
    loaded = lake.catalog.load_table(COUNTS)
    owned = (loaded.metadata_location, dict(loaded.metadata.properties))
    assert owned[1][P.JOB] == "word-count"  # (a) published the real project
    refused = run_project(lake, typo)
    assert refused.returncode == 1 and refused.statuses["word_counts"] == "error", refused.describe()
    assert "owned by job 'word-count'" in refused.stdout and "system.reassign(" in refused.stdout, refused.describe()
    loaded = lake.catalog.load_table(COUNTS)
    assert (loaded.metadata_location, dict(loaded.metadata.properties)) == owned


# --- (b) a failing model publishes nothing; the next run publishes its words once -------------------------------
FAILING_WORD_COUNTS = """\
{{ config(consistent_job='word-count') }}
SELECT word, IF(count(*) > 0, raise_error('dbt-flip test: word_counts fails while it runs'), count(*)) AS cnt
FROM {{ source('demo', 'words') }} GROUP BY word
"""


def test_a_failing_model_publishes_nothing_and_the_next_run_publishes_its_epoch_once(lake: Lake) -> None:
    broken = copy_project(lake, "dbt-flip-broken")
    (broken / "models" / "word_counts.sql").write_text(FAILING_WORD_COUNTS, encoding="utf-8")
    published = {sink: len(ids) for sink, ids in epochs(lake).items()}
    words_main = lake.catalog.load_table(WORDS).metadata.snapshot_by_name("main")
    words_before = 0 if words_main is None else scan(lake.catalog, WORDS, words_main.snapshot_id).num_rows
    rng = random.Random(2022)
    lake.cc.ingest(WORDS, _words(rng, WORDS_BETWEEN), key="dbt-before-failure")
    before, cut_before = heads(lake), resolve(lake)
    revisions = {sink: lake.catalog.load_table(sink).metadata.properties.get(P.REVISION) for sink in MODELS}
    marks = {sink: lake.catalog.load_table(sink).metadata.properties.get(P.WATERMARK) for sink in MODELS}

    failed = run_project(lake, broken)
    described = failed.describe()
    assert failed.returncode == 1, described
    assert failed.statuses == {"word_counts": "error", "count_histogram": "skipped"}, described
    assert "dbt-flip test: word_counts fails while it runs" in failed.stdout, described
    assert not any(" published (" in line for line in failed.reports), described
    # its SQL is another definition: a new generation, computed beside the serving one, which it never replaced
    # (protocol §6.10): main, the watermarks and the cut are as they were
    assert {sink: h["main"] for sink, h in heads(lake).items()} == {sink: h["main"] for sink, h in before.items()}
    assert {sink: len(ids) for sink, ids in epochs(lake).items()} == published
    for sink in MODELS:
        loaded = lake.catalog.load_table(sink).metadata
        assert loaded.properties.get(P.REVISION) == revisions[sink] and "consistent-previous" not in loaded.refs
        assert loaded.properties.get(P.WATERMARK) == marks[sink]
        assert not lineage_problems(lake.catalog, sink), lineage_problems(lake.catalog, sink)
    assert resolve(lake) == cut_before

    # the real project (its definition is the one on main): the words that arrived before the failure, published once
    run = run_readme_dbt(lake)
    total = words_before + WORDS_BETWEEN
    check_round(lake, run, published[COUNTS] + 1, total, total)
    assert published[COUNTS] == published[HISTOGRAM]
