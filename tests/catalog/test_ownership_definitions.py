"""A table belongs to its job, and a job's definition is part of its lineage (protocol §6.1-§6.2, §6.9, §6.10).

Against a real SQLite catalog: a wrong or foreign job name never takes a table away (also after its owner
released its lease), ``reassign`` is the one way a table changes owner, a job may not read its own output over
several registrations, and a changed definition (transform, declared version, the sink's schema, a rebuild
request) reaches the sink as a new generation, downstream included (protocol §6.10; tests/catalog/test_generations.py
has what readers see meanwhile). Every check reads the tables back with plain
pyiceberg and recomputes what they should hold from the ingested words, not from the project's own reader.
"""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest
from click.testing import CliRunner
from pyiceberg.types import LongType

from consistent_catalog import properties as P
from consistent_catalog.cli.main import cli
from consistent_catalog.exceptions import CycleError, FencedError, InvalidInputError, OwnershipError
from tests.harness.lake import words

WORDS, COUNTS, HIST = "demo.words", "demo.word_counts", "demo.count_histogram"
pytestmark = pytest.mark.parametrize("backend", ["sqlite"])


def count_words(ctx):
    table = ctx.read(WORDS)
    return table.group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])


def count_upper_words(ctx):  # the edited definition: words counted case-insensitively
    table = ctx.read(WORDS)
    upper = pa.table({"word": pa.compute.utf8_upper(table["word"])})
    return upper.group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])


def histogram(ctx):
    counts = ctx.read(COUNTS)
    return counts.group_by("cnt").aggregate([("cnt", "count")]).rename_columns(["cnt", "words"])


def scan(catalog, table: str) -> list[dict]:
    """Plain pyiceberg: main's rows now."""
    return catalog.load_table(table).scan().to_arrow().to_pylist()


def counts_of(catalog, *, upper: bool = False) -> dict[str, int]:
    """The word counts recomputed from the words table (plain pyiceberg), independently of the jobs."""
    found = Counter(r["word"].upper() if upper else r["word"] for r in scan(catalog, WORDS))
    return dict(found)


def properties(catalog, table: str) -> dict[str, str]:
    return dict(catalog.load_table(table).metadata.properties)


def location(catalog, table: str) -> str:
    return catalog.load_table(table).metadata_location


@pytest.fixture
def counted(cc, catalog, flip_tables):
    """word-count ran one epoch over two ingests and exited normally (its lease released)."""
    cc.ingest(WORDS, words("a", "b", "a"), barrier=1_700_000_000_000)
    cc.ingest(WORDS, words("A", "c"), barrier=1_700_000_001_000)
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
        assert job.run_epoch().actions == {COUNTS: "published"}
    return cc


# --- ownership ---------------------------------------------------------------------------------------------------
def test_the_owner_stays_after_its_lease_is_released(counted, catalog):
    props = properties(catalog, COUNTS)
    assert props[P.JOB] == "word-count"
    assert P.LEASE_HOLDER not in props and P.LEASE_UNTIL not in props


@pytest.mark.parametrize("intruder", ["word-counts", "count-histogram"])
def test_a_typo_or_another_jobs_name_is_refused_and_changes_nothing(counted, catalog, intruder):
    before = location(catalog, COUNTS)
    job = counted.job(intruder, sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    with pytest.raises(OwnershipError) as refused:
        job.register()
    message = str(refused.value)
    assert "owned by job 'word-count' (no instance of it is running)" in message
    assert f"consistent-catalog reassign {COUNTS} --to-job {intruder}" in message
    assert location(catalog, COUNTS) == before
    assert counted.lineage().to_json()["jobs"] == [{"job": "word-count", "sources": [WORDS], "sinks": [COUNTS]}]


def test_reassign_hands_the_table_over_and_fences_the_old_owner(counted, catalog):
    old = counted.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    old.register()  # a running instance of the owner
    with pytest.raises(OwnershipError, match="stop that job first"):
        counted.reassign(COUNTS, "words-v2")
    result = counted.reassign(COUNTS, "words-v2", takeover=True)
    assert result.to_json() == {"table": COUNTS, "from_job": "word-count", "to_job": "words-v2", "changed": True}
    props = properties(catalog, COUNTS)
    assert props[P.JOB] == "words-v2" and P.LEASE_HOLDER not in props
    fence = catalog.load_table(COUNTS).metadata.snapshot_by_name(P.FENCE_BRANCH)
    assert fence.summary.additional_properties[P.FENCE_REASON] == "reassign"
    counted.ingest(WORDS, words("d"), barrier=1_700_000_002_000)
    with pytest.raises(FencedError):  # the old instance's next epoch is refused (zombie)
        old.run_epoch()
    assert counted.reassign(COUNTS, "words-v2").changed is False
    with counted.job("words-v2", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
        assert job.run_epoch().actions == {COUNTS: "published"}
    assert {r["word"]: r["cnt"] for r in scan(catalog, COUNTS)} == counts_of(catalog)


def test_reassign_refuses_roots_and_jobs_that_would_read_their_own_output(counted, catalog):
    with pytest.raises(InvalidInputError, match="is a root"):
        counted.reassign(WORDS, "anyone")
    with counted.job("count-histogram", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite") as job:
        job.run_epoch()
    before = location(catalog, COUNTS)
    with pytest.raises(CycleError, match="would read its own output"):
        counted.reassign(COUNTS, "count-histogram")  # it reads word_counts and would own it
    assert location(catalog, COUNTS) == before


def test_a_job_reading_its_own_sink_over_two_registrations_is_refused(counted, catalog):
    before = location(catalog, HIST)
    job = counted.job("word-count", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite")
    with pytest.raises(CycleError, match=f"job 'word-count' would read its own output: {COUNTS} is its own sink"):
        job.register()
    assert location(catalog, HIST) == before
    assert P.JOB not in properties(catalog, HIST)


def test_the_cli_reassigns_in_json_and_refuses_in_one_line(counted, catalog, monkeypatch):
    for key, value in catalog.properties.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__LAKE__{key.upper().replace('-', '_')}", value)
    runner = CliRunner()
    done = runner.invoke(cli, ["--catalog", "lake", "-o", "json", "reassign", COUNTS, "--to-job", "wc2"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output) == {"table": COUNTS, "from_job": "word-count", "to_job": "wc2", "changed": True}
    refused = runner.invoke(cli, ["--catalog", "lake", "reassign", WORDS, "--to-job", "wc2"])
    assert refused.exit_code == 1
    assert refused.output.count("\n") == 1 and "is a root" in refused.output
    assert properties(catalog, COUNTS)[P.JOB] == "wc2"


# --- definitions ---------------------------------------------------------------------------------------------------
def run_pipeline(cc, count_transform, **options):
    """word-count then count-histogram, one epoch each; returns their results."""
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_transform, mode="overwrite",
                **options) as counter:
        first = counter.run_epoch()
    with cc.job("count-histogram", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite") as hist:
        second = hist.run_epoch()
    return first, second


def histogram_of(counts: dict[str, int]) -> dict[int, int]:
    return dict(Counter(counts.values()))


def test_an_unchanged_definition_stays_done_and_writes_nothing(counted, catalog):
    run_pipeline(counted, count_words)
    before = {t: len(catalog.load_table(t).metadata.snapshots) for t in (COUNTS, HIST)}
    first, second = run_pipeline(counted, count_words)
    assert first.actions == {COUNTS: "done"} and second.actions == {HIST: "done"}
    assert not first.regenerated and not second.regenerated
    for table in (COUNTS, HIST):  # registration renews the lease, nothing else: no snapshot, no revision
        assert len(catalog.load_table(table).metadata.snapshots) == before[table]
        assert P.REVISION not in properties(catalog, table)


def test_an_edited_transform_regenerates_the_sink_and_its_downstream(counted, catalog):
    run_pipeline(counted, count_words)
    assert histogram_of(counts_of(catalog)) == {r["cnt"]: r["words"] for r in scan(catalog, HIST)}
    recorded = catalog.load_table(COUNTS).metadata.snapshot_by_name("main").summary.additional_properties[P.DEFINITION]
    assert recorded.startswith("python:")
    first, second = run_pipeline(counted, count_upper_words)
    assert first.actions == {COUNTS: "regenerated"}
    assert first.regenerated[COUNTS].startswith(f"definition changed (python {recorded.split(':')[1]} -> ")
    assert ": new generation at barrier 1700000001000 (" in first.regenerated[COUNTS]
    assert second.actions == {HIST: "regenerated"}  # its source switched: recomputed from the new counts
    assert second.regenerated[HIST].startswith(f"source {COUNTS} switched generations: new generation at barrier")
    expected = counts_of(catalog, upper=True)
    assert {r["word"]: r["cnt"] for r in scan(catalog, COUNTS)} == expected == {"A": 3, "B": 1, "C": 1}
    assert {r["cnt"]: r["words"] for r in scan(catalog, HIST)} == histogram_of(expected)
    for table in (COUNTS, HIST):
        assert properties(catalog, table)[P.REVISION] == "1"
    # the cut of the whole pipeline is consistent again
    read = counted.read([WORDS, COUNTS, HIST])
    data = read.to_arrow_all()
    assert sum(data[COUNTS]["cnt"].to_pylist()) == data[WORDS].num_rows


def test_a_declared_version_decides_and_rebuild_forces(counted, catalog):
    first, _ = run_pipeline(counted, count_words, version="1")
    assert first.regenerated  # the epoch recorded a python fingerprint; version 1 differs
    first, _ = run_pipeline(counted, count_upper_words, version="1")  # same version: the code change is not seen
    assert first.actions == {COUNTS: "done"} and not first.regenerated
    first, second = run_pipeline(counted, count_upper_words, version="1", rebuild=True)
    assert first.regenerated[COUNTS].startswith("rebuild requested: new generation at barrier")
    assert {r["word"]: r["cnt"] for r in scan(catalog, COUNTS)} == counts_of(catalog, upper=True)
    assert second.actions == {HIST: "regenerated"}


def test_a_schema_change_of_the_sink_regenerates_it_and_fills_the_new_column(counted, catalog):
    with catalog.load_table(COUNTS).update_schema() as update:
        update.add_column("length", LongType())

    def with_length(ctx):
        table = count_words(ctx)
        return table.append_column("length", pa.compute.utf8_length(table["word"]).cast(pa.int64()))

    with counted.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=with_length, mode="overwrite",
                     version="1") as job:
        result = job.run_epoch()
    assert ": new generation at barrier " in result.regenerated[COUNTS]
    rows = scan(catalog, COUNTS)
    assert {r["word"]: (r["cnt"], r["length"]) for r in rows} == {w: (n, len(w)) for w, n in counts_of(catalog).items()}


def test_an_epoch_that_read_a_source_before_its_first_data_warns(cc, catalog, flip_tables):
    catalog.create_table("demo.later", schema=words().schema)
    cc.ingest(WORDS, words("a"), barrier=1_700_000_000_000)
    cc.ingest("demo.later", words("z"), barrier=1_700_000_000_900)  # loaded after words: empty at its barrier

    def both(ctx):
        rows = pa.concat_tables([ctx.read(WORDS), ctx.read("demo.later")])
        return rows.group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])

    with cc.job("both", sources=[WORDS, "demo.later"], sinks=[COUNTS], transform=both, mode="overwrite") as job:
        result = job.run_epoch()
        assert result.actions == {COUNTS: "published"}
        (warning,) = result.warnings
        assert "read demo.later empty at barrier 1700000000000 (" in warning
        assert "its first data is at barrier 1700000000900 (" in warning
        assert f"consistent-catalog advance-watermark {WORDS} now" in warning
        cc.ingest(WORDS, words("b"), barrier=1_700_000_001_000)
        assert job.run_epoch().warnings == ()  # both sources hold data at the next barrier
    assert {r["word"] for r in scan(catalog, COUNTS)} == {"a", "z"}  # T = 1700000000900: b is later



def test_a_derived_source_lagging_behind_is_brought_forward_by_its_jobs_epoch_not_by_a_watermark(cc, catalog, flip_tables):
    """§6.10: the way out names, for a lagging derived source, an epoch of the job that writes it (its watermark is
    refused to anyone else), not ``advance-watermark``."""
    catalog.create_table("demo.later", schema=words().schema)
    cc.ingest(WORDS, words("a"), barrier=1_700_000_000_000)
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as counter:
        counter.run_epoch()
        cc.ingest("demo.later", words("z"), barrier=1_700_000_000_900)  # after word_counts' epoch: empty at its W

        later_rows: list[int] = []

        def counts_and_later(ctx):
            later_rows.append(ctx.read("demo.later").num_rows)
            return histogram(ctx)

        with cc.job("mixed", sources=[COUNTS, "demo.later"], sinks=[HIST], transform=counts_and_later,
                    mode="overwrite") as job:
            (warning,) = job.run_epoch().warnings
            assert later_rows == [0]
            assert "read demo.later empty at barrier 1700000000000 (" in warning
            assert f"(an epoch of job word-count, which writes {COUNTS})" in warning and "advance-watermark" not in warning
            with pytest.raises(InvalidInputError, match="is derived"):
                cc.advance_watermark(COUNTS, 1_700_000_000_900)  # what the old advice said: refused
            cc.ingest(WORDS, words("b"), barrier=1_700_000_001_000)
            counter.run_epoch()  # the advice followed: both sources hold data at the next barrier
            assert job.run_epoch().warnings == () and later_rows == [0, 1]

def test_refusals_name_where_the_holder_runs(counted, catalog):
    import os
    import socket

    lease = counted.register_job("word-count", [WORDS], [COUNTS], application="app-20261127-0001")
    info = json.loads(properties(catalog, COUNTS)[P.LEASE_HOLDER_INFO])
    assert info["host"] == socket.gethostname() and info["pid"] == os.getpid() and info["app"] == "app-20261127-0001"
    with pytest.raises(OwnershipError) as refused:
        counted.register_job("word-count", [WORDS], [COUNTS])  # a second instance while the first lives
    message = str(refused.value)
    assert f"instance {lease.instance} (host {socket.gethostname()}, pid {os.getpid()}, Spark application " \
           "app-20261127-0001, since " in message
    counted.unregister_job(lease)
    assert P.LEASE_HOLDER_INFO not in properties(catalog, COUNTS)


def test_rebuild_on_a_sink_without_an_epoch_is_its_first_build_only(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a"), barrier=1_700_000_000_000)
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite",
                rebuild=True) as job:
        first = job.run_epoch()
        cc.ingest(WORDS, words("b"), barrier=1_700_000_001_000)
        second = job.run_epoch()
    assert first.actions == second.actions == {COUNTS: "published"}
    assert not first.regenerated and not second.regenerated  # nothing to rebuild, then no second rebuild
    assert P.REVISION not in properties(catalog, COUNTS)
