"""The dbt project (``spark-conf/dbt-flip``) under issue 29: a model's job owns its table, and its SQL is the
definition its epochs record (protocol §6.1-§6.2, §6.10).

One lake for the module (``tests.spark.test_dbt_pipeline``'s fixture: the demo tables, a work directory with the
rendered ``spark-defaults.conf`` and a copy of the project). In order: the real project publishes; a copy whose
``word_counts`` model names a typo'd job is refused with the owner named, the table's lineage unchanged; a copy
whose model is edited revises ``demo.word_counts`` and, downstream, ``demo.count_histogram``, both recomputed at
the barrier (recounted with pyiceberg); the same again is ``done`` (no snapshot, no revision: only the new
process's lease is committed); ``--full-refresh -s word_counts`` revises.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from consistent_catalog import properties as P
from consistent_catalog.demo import COUNTS, HISTOGRAM, WORDS
from tests.harness.flip_epochs import scan
from tests.spark import test_dbt_pipeline
from tests.spark.test_dbt_pipeline import BIN, PROJECT, Lake, _run, _words, copy_project, run_project

lake = test_dbt_pipeline.lake  # the module's fixture, shared

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

EDITED_WORD_COUNTS = """\
-- job word-count, edited: words of one letter are left out
{{ config(consistent_job='word-count') }}
SELECT word, count(*) AS cnt FROM {{ source('demo', 'words') }} WHERE length(word) > 1 GROUP BY word
"""


def project(lake: Lake, name: str, word_counts: str | None = None) -> Path:
    copy = copy_project(lake, name)
    if word_counts is not None:
        (copy / "models" / "word_counts.sql").write_text(word_counts, encoding="utf-8")
    return copy


def state(lake: Lake, table: str) -> tuple[str, dict[str, str]]:
    loaded = lake.catalog.load_table(table)
    return loaded.metadata_location, dict(loaded.metadata.properties)


def refs(lake: Lake, table: str) -> dict[str, int]:
    """main's and consistent-staged's heads."""
    found = lake.catalog.load_table(table).metadata.refs
    return {ref: found[ref].snapshot_id for ref in ("main", "consistent-staged") if ref in found}


def last_epoch(lake: Lake, table: str) -> tuple[int, dict[str, str]]:
    snapshot = lake.catalog.load_table(table).metadata.snapshot_by_name("main")
    while snapshot is not None and P.ATTEMPT not in snapshot.summary.additional_properties:
        snapshot = lake.catalog.load_table(table).metadata.snapshot_by_id(snapshot.parent_snapshot_id)
    assert snapshot is not None, f"{table} has no epoch on main"
    return snapshot.snapshot_id, dict(snapshot.summary.additional_properties)


def rows(lake: Lake, table: str, snapshot_id: int | None) -> list[dict]:
    return [] if snapshot_id is None else scan(lake.catalog, table, snapshot_id).to_pylist()


def test_a_typod_job_is_refused_and_an_edited_model_revises_its_table_and_downstream(lake: Lake) -> None:
    lake.cc.ingest(WORDS, _words(random.Random(29), 40))
    first = run_project(lake, project(lake, "dbt-real"))
    assert first.returncode == 0 and all(" published (" in line for line in first.reports), first.describe()
    _, before = last_epoch(lake, COUNTS)
    assert before[P.DEFINITION].startswith("sql:")

    # a typo'd job name: refused with the owner named, nothing of the table changed
    typo = project(lake, "dbt-typo", (PROJECT / "models" / "word_counts.sql").read_text(encoding="utf-8")
                   .replace("consistent_job='word-count'", "consistent_job='word-counts'"))
    owned = state(lake, COUNTS)
    refused = run_project(lake, typo)
    assert refused.returncode == 1 and refused.statuses["word_counts"] == "error", refused.describe()
    assert "owned by job 'word-count'" in refused.stdout and "system.reassign(" in refused.stdout, refused.describe()
    assert state(lake, COUNTS) == owned

    # the model edited: both tables revised and recomputed at the barrier, in the same run
    edited = project(lake, "dbt-edited", EDITED_WORD_COUNTS)
    run = run_project(lake, edited)
    assert run.returncode == 0, run.describe()
    assert any(line.startswith("[lake_consistent] word-count: demo.word_counts definition changed (sql ")
               and ": revised at barrier " in line and ", published (" in line for line in run.reports), run.describe()
    assert any("revised with demo.count_histogram downstream" in line for line in run.reports), run.describe()
    counts_id, counts_epoch = last_epoch(lake, COUNTS)
    assert counts_epoch[P.DEFINITION] != before[P.DEFINITION] and counts_epoch[P.BARRIER] == before[P.BARRIER]
    assert state(lake, COUNTS)[1][P.REVISION] == "1" and state(lake, HISTOGRAM)[1][P.REVISION] == "1"
    read = json.loads(counts_epoch[P.SOURCES])[WORDS]
    words = Counter(r["word"] for r in rows(lake, WORDS, read))
    counts = {r["word"]: r["cnt"] for r in rows(lake, COUNTS, counts_id)}
    assert counts == {w: n for w, n in words.items() if len(w) > 1}  # the new definition at that barrier
    hist_id, hist_epoch = last_epoch(lake, HISTOGRAM)
    assert json.loads(hist_epoch[P.SOURCES])[COUNTS] == counts_id and hist_epoch[P.BARRIER] == counts_epoch[P.BARRIER]
    assert {r["cnt"]: r["words"] for r in rows(lake, HISTOGRAM, hist_id)} == dict(Counter(counts.values()))

    # the same project again: done, nothing but the new process's registration (its lease) committed
    unchanged = {t: refs(lake, t) for t in (COUNTS, HISTOGRAM)}
    again = run_project(lake, edited)
    assert again.returncode == 0 and all(" done: " in line for line in again.reports), again.describe()
    assert {t: refs(lake, t) for t in (COUNTS, HISTOGRAM)} == unchanged
    assert state(lake, COUNTS)[1][P.REVISION] == "1"

    # --full-refresh: a rebuild whatever the definition
    refresh = _run(lake, [str(BIN / "dbt"), "run", "--project-dir", str(edited), "--profiles-dir", str(edited),
                          "--full-refresh", "-s", "word_counts"], edited, SPARK_CONF_DIR=str(lake.workdir / "spark-conf"))
    assert refresh.returncode == 0, refresh.describe()
    assert any("word-count: demo.word_counts rebuild requested: revised at barrier " in line for line in refresh.reports), \
        refresh.describe()
    assert state(lake, COUNTS)[1][P.REVISION] == "2"
    counts_id, _ = last_epoch(lake, COUNTS)
    assert {r["word"]: r["cnt"] for r in rows(lake, COUNTS, counts_id)} == counts
