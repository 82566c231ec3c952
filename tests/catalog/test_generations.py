"""A changed definition takes over without downtime: generations (protocol §6.10, §4.8), with the pyiceberg writer.

Against a real SQLite catalog, the FLIP chain ``words -> word_counts -> count_histogram``: ``word-count``'s transform
is edited (words counted case-insensitively). Until the new generation is published, and while ``count-histogram``
has not switched to it, every cut reads the old generation at its watermark; a new definition that fails (at run
time, or stopped at any point of its first epoch) leaves every cut as it was; a rerun switches; ``abandon`` goes
back; expiry keeps the previous generation exactly while it is read. Every check reads the rows with plain pyiceberg
at the snapshot ids the cut names and recomputes what they must hold from the words themselves.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest
from click.testing import CliRunner

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.cli.main import cli
from consistent_catalog.epoch import EpochJob
from consistent_catalog.exceptions import InvalidInputError
from tests.harness.lake import words
from tests.harness.transforms import count_upper_words  # the edited definition

WORDS, COUNTS, HIST = "demo.words", "demo.word_counts", "demo.count_histogram"
T0 = 1_700_000_000_000
pytestmark = pytest.mark.parametrize("backend", ["sqlite"])


def count_words(ctx):
    table = ctx.read(WORDS)
    return table.group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])


def histogram(ctx):
    counts = ctx.read(COUNTS)
    return counts.group_by("cnt").aggregate([("cnt", "count")]).rename_columns(["cnt", "words"])


def rows_at(catalog, table: str, snapshot_id: int | None) -> list[dict]:
    """Plain pyiceberg: the table's rows at a snapshot (none when the cut reads it empty)."""
    if snapshot_id is None:
        return []
    return catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


def generation_of(catalog, cut) -> str:
    """Which definition the cut's counts reflect, recomputed from its words: ``lower`` or ``upper``; raises when the
    counts or the histogram match neither (a cut that mixes generations, or reads a table empty)."""
    seen = [r["word"] for r in rows_at(catalog, WORDS, cut[WORDS].snapshot_id)]
    counts = {r["word"]: r["cnt"] for r in rows_at(catalog, COUNTS, cut[COUNTS].snapshot_id)}
    hist = {r["cnt"]: r["words"] for r in rows_at(catalog, HIST, cut[HIST].snapshot_id)}
    assert seen, "the cut reads no words"
    lower, upper = dict(Counter(seen)), dict(Counter(w.upper() for w in seen))
    assert counts in (lower, upper), f"counts {counts} are neither definition's over {seen}"
    assert hist == dict(Counter(counts.values())), f"histogram {hist} is not the histogram of {counts}: mixed"
    return "lower" if counts == lower else "upper"


def job(cc, name: str, transform, **options) -> EpochJob:
    source, sink = {"word-count": (WORDS, COUNTS), "count-histogram": (COUNTS, HIST)}[name]
    return cc.job(name, sources=[source], sinks=[sink], transform=transform, mode="overwrite", takeover=True, **options)


def run(cc, name: str, transform, **options):
    with job(cc, name, transform, **options) as running:
        return running.run_epoch()


@pytest.fixture
def lake(cc, catalog, flip_tables):
    """Two ingests, both jobs published under the first definition."""
    cc.ingest(WORDS, words("a", "b", "a"), barrier=T0)
    cc.ingest(WORDS, words("A", "c"), barrier=T0 + 1000)
    assert run(cc, "word-count", count_words).actions == {COUNTS: "published"}
    assert run(cc, "count-histogram", histogram).actions == {HIST: "published"}
    return cc


def test_the_old_generation_serves_until_the_chain_switched(lake, catalog):
    before = lake.resolve([WORDS, COUNTS, HIST])
    assert generation_of(catalog, before) == "lower"
    result = run(lake, "word-count", count_upper_words)
    assert result.actions == {COUNTS: "regenerated"}
    # the sink alone reads its new generation; with the table downstream, the old one at its watermark
    alone = lake.resolve([COUNTS])
    assert {r["word"]: r["cnt"] for r in rows_at(catalog, COUNTS, alone[COUNTS].snapshot_id)} == {"A": 3, "B": 1, "C": 1}
    for cut in (lake.resolve([WORDS, COUNTS, HIST]), lake.resolve([COUNTS], component=True)):
        assert cut.barrier == before.barrier
        assert cut[COUNTS].snapshot_id == before[COUNTS].snapshot_id and cut[COUNTS].generation == "previous"
    cut = lake.resolve([WORDS, COUNTS, HIST])
    assert cut[HIST].snapshot_id == before[HIST].snapshot_id and cut[HIST].generation == "current"
    assert generation_of(catalog, lake.resolve([WORDS, COUNTS, HIST])) == "lower"
    (row,) = [r for r in lake.status([COUNTS]) if r.table == COUNTS]
    assert row.generation == {"previous_snapshot": before[COUNTS].snapshot_id, "previous_watermark": before.barrier,
                              "read_by": [HIST], "staged": None}
    assert lake.lineage().to_json()["generations"] == {
        COUNTS: {"previous_snapshot": before[COUNTS].snapshot_id, "read_by": [HIST]}}
    props = catalog.load_table(COUNTS).metadata.properties
    assert props[P.REVISION] == "1" and json.loads(props[P.PREVIOUS])["snapshot"] == before[COUNTS].snapshot_id
    assert catalog.load_table(COUNTS).metadata.refs[P.PREVIOUS_BRANCH].snapshot_id == before[COUNTS].snapshot_id

    switched = run(lake, "count-histogram", histogram)
    assert switched.actions == {HIST: "regenerated"}
    after = lake.resolve([WORDS, COUNTS, HIST])
    assert {t: g["read_by"] for t, g in lake.lineage().to_json()["generations"].items()} == {COUNTS: [], HIST: []}
    assert after.barrier >= before.barrier
    assert {t.generation for t in after.tables.values()} == {"current"}
    assert generation_of(catalog, after) == "upper"
    epochs = [e for e in lake.epochs(HIST) if e.regenerate]
    assert [e.regenerate for e in epochs] == ["upstream"]


def test_a_new_definition_that_fails_leaves_every_cut_as_it_was(lake, catalog):
    before = lake.resolve([WORDS, COUNTS, HIST])

    def broken(ctx):
        raise ValueError("typo in the new definition")

    with pytest.raises(ValueError, match="typo"):
        run(lake, "word-count", broken, version="2")
    assert lake.resolve([WORDS, COUNTS, HIST]) == before
    assert P.PREVIOUS_BRANCH not in catalog.load_table(COUNTS).metadata.refs
    assert P.REVISION not in catalog.load_table(COUNTS).metadata.properties
    assert run(lake, "word-count", count_upper_words, version="2").actions == {COUNTS: "regenerated"}
    assert run(lake, "count-histogram", histogram).actions == {HIST: "regenerated"}
    assert generation_of(catalog, lake.resolve([WORDS, COUNTS, HIST])) == "upper"


class Stop(BaseException):
    """Stands for the process dying at a point (tests/integration/test_crash_recovery.py kills real processes)."""


@pytest.mark.parametrize("point", ["before-stage", "after-stage", "inside-publish", "after-publish"])
def test_a_new_generation_stopped_at_any_point_then_rerun(lake, catalog, monkeypatch, point):
    before = lake.resolve([WORDS, COUNTS, HIST])
    original_stage, original_publish = EpochJob.stage, EpochJob.publish

    def stage(self, sink, plan, data):
        if point == "before-stage":
            raise Stop
        staged = original_stage(self, sink, plan, data)
        if point == "after-stage":
            raise Stop
        return staged

    def publish(self, sink, plan, main_head, staged_head, **options):
        if point == "inside-publish":  # the process dies inside the commit, before the catalog swapped it in
            monkeypatch.setattr(self.store, "commit", lambda *a, **k: (_ for _ in ()).throw(Stop()))
        published = original_publish(self, sink, plan, main_head, staged_head, **options)
        if point == "after-publish":
            raise Stop
        return published

    monkeypatch.setattr(EpochJob, "stage", stage)
    monkeypatch.setattr(EpochJob, "publish", publish)
    stopped = job(lake, "word-count", count_upper_words)
    stopped.register()
    with pytest.raises(Stop):
        stopped.run_epoch()  # the instance is gone: no unregistration, its lease stays
    monkeypatch.undo()
    meanwhile = lake.resolve([WORDS, COUNTS, HIST])
    assert meanwhile.barrier == before.barrier
    assert generation_of(catalog, meanwhile) == "lower"
    assert meanwhile[HIST].snapshot_id == before[HIST].snapshot_id
    if point == "after-stage":
        (row,) = lake.status([COUNTS])
        assert row.generation["staged"] == "definition" and row.staged_barrier == before.barrier
    rerun = run(lake, "word-count", count_upper_words)
    expected = {"after-publish": "done", "after-stage": "regenerated"}.get(point, "regenerated")
    assert rerun.actions == {COUNTS: expected}
    assert run(lake, "count-histogram", histogram).actions == {HIST: "regenerated"}
    assert generation_of(catalog, lake.resolve([WORDS, COUNTS, HIST])) == "upper"
    assert catalog.load_table(COUNTS).metadata.properties[P.REVISION] == "1"  # one switch, however often it was tried


def test_abandon_returns_the_chain_to_the_old_generation(lake, catalog, monkeypatch):
    before = lake.resolve([WORDS, COUNTS, HIST])
    run(lake, "word-count", count_upper_words)
    run(lake, "count-histogram", histogram)
    assert generation_of(catalog, lake.resolve([WORDS, COUNTS, HIST])) == "upper"
    for key, value in catalog.properties.items():
        monkeypatch.setenv(f"PYICEBERG_CATALOG__LAKE__{key.upper().replace('-', '_')}", value)
    done = CliRunner().invoke(cli, ["--catalog", "lake", "-o", "json", "revise", COUNTS, "--abandon"])
    assert done.exit_code == 0, done.output
    answer = json.loads(done.output)
    assert (answer["barrier"], answer["mode"]) == (None, "abandon")
    assert [(s["table"], s["action"], s["to_snapshot"]) for s in answer["steps"]] == [
        (COUNTS, "abandoned", before[COUNTS].snapshot_id), (HIST, "abandoned", before[HIST].snapshot_id)]
    after = lake.resolve([WORDS, COUNTS, HIST])
    assert after.snapshot_ids == before.snapshot_ids and after.barrier == before.barrier
    assert generation_of(catalog, after) == "lower"
    for table in (COUNTS, HIST):
        metadata = catalog.load_table(table).metadata
        assert P.PREVIOUS_BRANCH not in metadata.refs and P.PREVIOUS not in metadata.properties
        assert metadata.properties[P.REVISION] == "2"  # the switch, then the abandon
    refused = CliRunner().invoke(cli, ["--catalog", "lake", "revise", COUNTS, "--abandon"])
    assert refused.exit_code == 1 and refused.output.count("\n") == 1
    assert "no new generation to abandon" in refused.output
    usage = CliRunner().invoke(cli, ["--catalog", "lake", "revise", COUNTS])
    assert usage.exit_code == 2 and "--to-barrier" in usage.output and "--abandon" in usage.output
    with pytest.raises(InvalidInputError, match="no new generation to abandon"):
        lake.abandon_generation(WORDS)


def test_expiry_keeps_the_previous_generation_exactly_while_it_is_read(lake, catalog):
    from consistent_catalog.retention import RetentionPolicy

    lake.ingest(WORDS, words("d"), barrier=T0 + 2000)  # more history, so that there is something to expire
    run(lake, "word-count", count_words)
    run(lake, "count-histogram", histogram)
    before = lake.resolve([WORDS, COUNTS, HIST])
    run(lake, "word-count", count_upper_words)
    policy = RetentionPolicy(older_than=0, keep_last=1)
    lake.retention.expire(policy=policy)
    assert catalog.load_table(COUNTS).metadata.refs[P.PREVIOUS_BRANCH].snapshot_id == before[COUNTS].snapshot_id
    cut = lake.resolve([WORDS, COUNTS, HIST])  # still the old generation, readable after expiry
    assert cut.snapshot_ids == before.snapshot_ids and generation_of(catalog, cut) == "lower"
    run(lake, "count-histogram", histogram)
    result = lake.retention.expire(policy=policy)
    assert result.plan.tables[COUNTS].drop_previous and result.plan.tables[HIST].drop_previous
    for table in (COUNTS, HIST):
        metadata = catalog.load_table(table).metadata
        assert P.PREVIOUS_BRANCH not in metadata.refs and P.PREVIOUS not in metadata.properties
    assert generation_of(catalog, lake.resolve([WORDS, COUNTS, HIST])) == "upper"


def test_no_cut_mixes_generations_while_the_chain_catches_up(lake, catalog, tmp_path):
    """Readers resolve and recount the whole chain in a thread of their own while words keep arriving, word-count
    switches definitions at the barrier both tables had reached and count-histogram follows two epochs later: every cut
    is one generation, never empty, and its barrier never goes back. The timeline it prints is the one in the
    issue's note."""
    reader_cc = ConsistentCatalog(catalog)  # the same catalog object: pyiceberg's SQL catalog is thread-safe
    stop = threading.Event()
    seen: list[tuple[int, str, str]] = []
    failures: list[BaseException] = []

    def read() -> None:
        while not stop.is_set():
            try:
                cut = reader_cc.resolve([WORDS, COUNTS, HIST])
                seen.append((cut.barrier, generation_of(catalog, cut), cut[COUNTS].generation))
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)
                return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        for step in range(6):
            lake.ingest(WORDS, words("a", "B", "b"), barrier=T0 + 2000 + 1000 * step)
            run(lake, "word-count", count_words if step < 2 else count_upper_words)
            if step == 1:  # both at the same watermark, then the edit: the switch lands at that very barrier
                run(lake, "count-histogram", histogram)
                run(lake, "word-count", count_upper_words)
                time.sleep(0.5)  # readers sample the chain while count-histogram has not switched
            if step == 3:  # count-histogram follows, two epochs later
                run(lake, "count-histogram", histogram)
        run(lake, "count-histogram", histogram)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not failures, failures[0]
    assert seen and [b for b, _, _ in seen] == sorted(b for b, _, _ in seen), "a cut went back"
    generations = [g for _, g, _ in seen]
    assert generations[0] == "lower" and generations[-1] == "upper"
    assert generations == sorted(generations), "a cut read the old generation after the new one"  # lower < upper
    assert any(view == "previous" for _, _, view in seen), "no sampled cut read the previous generation"
    timeline = [f"{b - T0:>10} {g:>10} {view:>8}" for b, g, view in dict.fromkeys(seen)]
    print(f"{len(seen)} cuts sampled\nbarrier-T0 definition counts-read\n" + "\n".join(timeline))
