"""Revision of a table and everything downstream (protocol §8), on the FLIP three-table pipeline.

After a revision and the jobs' replay, protocol §7's invariants are recomputed from raw rows read with
plain pyiceberg at the cut's snapshot ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from consistent_catalog import properties as P
from consistent_catalog.demo import count_words, histogram
from tests.harness.lake import words

WORDS, COUNTS, HIST = "demo.words", "demo.word_counts", "demo.count_histogram"
B = 1_700_000_000_000  # barriers are plausible times: the CLI refuses text in seconds (protocol §3.8)


def rows_at(catalog, table, snapshot_id):
    if snapshot_id is None:
        return []
    return catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


def check_flip(catalog, ids):
    w = rows_at(catalog, WORDS, ids[WORDS])
    c = rows_at(catalog, COUNTS, ids[COUNTS])
    h = rows_at(catalog, HIST, ids[HIST])
    assert {r["word"]: r["cnt"] for r in c} == dict(Counter(r["word"] for r in w))
    assert {r["cnt"]: r["words"] for r in h} == dict(Counter(r["cnt"] for r in c))
    return [r["word"] for r in w]


@pytest.fixture
def pipeline(cc, catalog, flip_tables):
    counter = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    hist = cc.job("count-histogram", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite")
    counter.register()
    hist.register()
    batches = [["a", "b"], ["a", "c"], ["bad", "bad", "bad"], ["b"]]
    for i, batch in enumerate(batches):
        cc.ingest(WORDS, words(*batch), barrier=B + (i + 1) * 1000)
        counter.run_epoch()
        hist.run_epoch()
    return counter, hist


def test_incremental_revision_rolls_back_downstream_and_jobs_replay(cc, catalog, pipeline):
    counter, hist = pipeline
    before = cc.resolve([WORDS, COUNTS, HIST])
    assert before.barrier == B + 4000
    result = cc.revise(WORDS, B + 2_000)
    assert [s.table for s in result.steps] == [WORDS, COUNTS, HIST]  # upstream first
    assert all(s.action == "rolled-back" and s.revision == 1 for s in result.steps)
    for table in (WORDS, COUNTS, HIST):
        props = catalog.load_table(table).metadata.properties
        assert props[P.REVISION] == "1" and props[P.WATERMARK] == str(B + 2000)
    after = cc.resolve([WORDS, COUNTS, HIST])
    assert after.barrier == B + 2_000 and after.revisions == {WORDS: 1, COUNTS: 1, HIST: 1}
    assert sorted(check_flip(catalog, after.snapshot_ids)) == ["a", "a", "b", "c"]

    # the corrected data arrives; the jobs replay incrementally from barrier 2000
    cc.ingest(WORDS, words("good"), barrier=B + 3_000)
    counter.run_until_caught_up()
    hist.run_until_caught_up()
    final = cc.resolve([WORDS, COUNTS, HIST])
    assert final.barrier == B + 3_000
    assert sorted(check_flip(catalog, final.snapshot_ids)) == ["a", "a", "b", "c", "good"]
    # the revised-away epochs stay readable by snapshot id but are no longer on main
    head = catalog.load_table(COUNTS).metadata.snapshot_by_name("main")
    assert json.loads(head.summary[P.SOURCES]) == {WORDS: final[WORDS].snapshot_id}


def test_full_revision_rebuilds_downstream_from_scratch(cc, catalog, pipeline):
    counter, hist = pipeline
    result = cc.revise(COUNTS, B + 2_000, mode="full")
    assert [(s.table, s.action) for s in result.steps] == [(COUNTS, "truncated"), (HIST, "truncated")]
    for table in (COUNTS, HIST):
        t = catalog.load_table(table)
        assert t.metadata.snapshot_by_name("main") is None and P.WATERMARK not in t.metadata.properties
        assert t.metadata.properties[P.REVISION] == "1"
    assert P.REVISION not in catalog.load_table(WORDS).metadata.properties  # upstream untouched
    counter.run_until_caught_up()
    hist.run_until_caught_up()
    cut = cc.resolve([WORDS, COUNTS, HIST])
    assert cut.barrier == B + 4_000
    assert len(check_flip(catalog, cut.snapshot_ids)) == 8
    assert cut.revisions == {WORDS: 0, COUNTS: 1, HIST: 1}


def test_a_job_mid_epoch_during_a_revision_re_plans(cc, catalog, pipeline):
    counter, hist = pipeline
    cc.ingest(WORDS, words("late"), barrier=B + 5_000)
    plan = counter.plan()
    data = counter.run_transform(plan)[COUNTS]
    staged = counter.stage(COUNTS, plan, data)  # staged from pre-revision data...
    cc.revise(WORDS, B + 2_000)  # ...then the revision discards it
    assert catalog.load_table(COUNTS).metadata.snapshot_by_name(P.STAGED_BRANCH).snapshot_id != staged.head
    result = counter.run_epoch()
    assert result.actions[COUNTS] in ("published", "done")
    counter.run_until_caught_up()
    hist.run_until_caught_up()
    cut = cc.resolve([WORDS, COUNTS, HIST])
    assert sorted(check_flip(catalog, cut.snapshot_ids)) == ["a", "a", "b", "c"]


@pytest.mark.backends("sqlite", "rest-faults")  # the CLI over the library the other tests run on all four
def test_revise_cli(cc, catalog, pipeline, tmp_path):
    directory = Path(catalog.properties["warehouse"].removeprefix("file://")).parent
    env = {
        **os.environ,
        "PYICEBERG_CATALOG__LAKE__URI": catalog.properties["uri"],
        "PYICEBERG_CATALOG__LAKE__WAREHOUSE": f"file://{directory}/warehouse",
    }
    exe = str(Path(sys.executable).parent / "consistent-catalog")
    # the barrier grammar (protocol §3.8) on --as-of: a relative time and an ISO-8601 one (computed here by datetime)
    for as_of, barrier in [("-1s", B + 4000), ("now-1m", B + 4000),
                           (datetime.fromtimestamp((B + 2500) / 1000, tz=timezone.utc).isoformat(), B + 2000)]:
        out = subprocess.run([exe, "-c", "lake", "-o", "json", "resolve", WORDS, "--as-of", as_of],
                             env=env, capture_output=True, text=True, check=True).stdout
        assert json.loads(out)["tables"][WORDS]["barrier"] == barrier, (as_of, out)
    out = subprocess.run([exe, "-c", "lake", "-o", "json", "revise", WORDS, "--to-barrier", str(B + 1000)],
                         env=env, capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    assert result["barrier"] == B + 1000 and [s["table"] for s in result["steps"]] == [WORDS, COUNTS, HIST]
    first = catalog.load_table(WORDS).snapshots()[0].snapshot_id
    assert catalog.load_table(WORDS).metadata.snapshot_by_name("main").snapshot_id == first
    bad = subprocess.run([exe, "-c", "lake", "revise", WORDS, "--to-barrier", "-3"], env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and ("negative" in bad.stderr or "neither" in bad.stderr), bad.stderr
    # the user's trap: a barrier in seconds is refused, naming it in milliseconds
    seconds = str((B + 2000) // 1000)
    bad = subprocess.run([exe, "-c", "lake", "revise", WORDS, "--to-barrier", seconds], env=env, capture_output=True,
                         text=True)
    assert bad.returncode == 1 and f"in seconds {seconds} would be {B + 2000}" in bad.stderr, bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
