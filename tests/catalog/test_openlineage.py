"""OpenLineage run events of epochs (protocol §5.8), sent by the standard client to an HTTP endpoint of the test.

The client is configured the ways users do it (``OPENLINEAGE_URL``, ``openlineage.yml``); the events are checked
against the OpenLineage spec and against the snapshots read back with plain pyiceberg.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import count_words, histogram
from tests.harness.lake import COUNTS_SCHEMA, HIST_SCHEMA, WORDS_SCHEMA, sqlite_catalog, words
from tests.harness.openlineage import Collector, validate

pytest.importorskip("openlineage.client", reason="openlineage-python is not installed (pip install -e '.[dev]')")

WORDS, COUNTS, HIST = "demo.words", "demo.word_counts", "demo.count_histogram"


@pytest.fixture
def lake(tmp_path: Path):
    catalog = sqlite_catalog(tmp_path / "lake")
    catalog.create_namespace("demo")
    for name, schema in ((WORDS, WORDS_SCHEMA), (COUNTS, COUNTS_SCHEMA), (HIST, HIST_SCHEMA)):
        catalog.create_table(name, schema=schema)
    return catalog


def _pipeline(cc: ConsistentCatalog) -> None:
    cc.ingest(WORDS, words("kafka", "offset", "kafka"))
    for job, source, sink, transform in (("word-count", WORDS, COUNTS, count_words),
                                         ("count-histogram", COUNTS, HIST, histogram)):
        with cc.job(job, sources=[source], sinks=[sink], transform=transform, mode="overwrite") as epoch_job:
            assert [r.actions[sink] for r in epoch_job.run_until_caught_up()] == ["published"]
            assert not epoch_job.run_epoch().did_work  # nothing to do: no event


def _published(catalog, table: str):
    """The snapshot on ``main``, read with plain pyiceberg."""
    return catalog.load_table(table).metadata.snapshot_by_name("main").snapshot_id, \
        catalog.load_table(table).snapshot_by_name("main").summary


def test_epochs_send_start_and_complete_that_match_the_published_snapshots(lake, ol_env, monkeypatch):
    with Collector() as collector:
        monkeypatch.setenv("OPENLINEAGE_URL", collector.url)
        monkeypatch.setenv("OPENLINEAGE_NAMESPACE", "test-pipelines")
        _pipeline(ConsistentCatalog(lake))
    ingest_events, events = collector.events[:2], collector.events[2:]
    assert [(e["job"]["name"], e["eventType"]) for e in ingest_events] == [  # the root's ingest (issue 34, item 7)
        ("ingest:demo.words", "START"), ("ingest:demo.words", "COMPLETE")]
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        ("word-count", "START"), ("word-count", "COMPLETE"), ("count-histogram", "START"), ("count-histogram", "COMPLETE")]
    # every dataset carries its columns (the spec's schema facet), as pyiceberg reads the table's schema
    for event in events:
        for dataset in event["inputs"] + event["outputs"]:
            columns = [(f.name, str(f.field_type)) for f in lake.load_table(dataset["name"]).schema().fields]
            assert [(f["name"], f["type"]) for f in dataset["facets"]["schema"]["fields"]] == columns
    assert set(collector.paths) == {"/api/v1/lineage"}
    for event in events:
        validate(event)
        assert event["job"]["namespace"] == "test-pipelines"
    namespace = lake.properties["uri"]  # sqlite:////.../catalog.db: the catalog is the datasource (protocol §5.8)
    for (start, complete), (source, sink) in zip([events[0:2], events[2:4]], [(WORDS, COUNTS), (COUNTS, HIST)]):
        assert start["run"]["runId"] == complete["run"]["runId"]
        snapshot_id, summary = _published(lake, sink)
        recorded = json.loads(summary[P.SOURCES])  # the epoch's inputs as the publish recorded them
        for event in (start, complete):
            (inp,), (out,) = event["inputs"], event["outputs"]
            assert (inp["namespace"], inp["name"], out["namespace"], out["name"]) == (namespace, source, namespace, sink)
            assert inp["facets"]["version"]["datasetVersion"] == str(recorded[source])
            facet = event["run"]["facets"]["consistentCatalog_epoch"]
            assert facet["barrier"] == int(summary[P.BARRIER])
        assert "version" not in start["outputs"][0]["facets"]  # not published yet
        assert complete["outputs"][0]["facets"]["version"]["datasetVersion"] == str(snapshot_id)
        assert start["run"]["facets"]["consistentCatalog_epoch"]["sinks"] == {sink: {"action": "stage"}}  # no attempt yet
        assert complete["run"]["facets"]["consistentCatalog_epoch"]["sinks"] == {
            sink: {"action": "published", "attempt": summary[P.ATTEMPT]}}
    # the histogram's input is the very snapshot word-count published
    assert events[2]["inputs"][0]["facets"]["version"] == events[1]["outputs"][0]["facets"]["version"]


def test_a_transform_that_raises_sends_fail_with_the_error(lake, ol_env, monkeypatch):
    def broken(ctx):
        raise ValueError("the transform broke on purpose")

    cc = ConsistentCatalog(lake)
    cc.ingest(WORDS, words("a"))
    with Collector() as collector:
        monkeypatch.setenv("OPENLINEAGE_URL", collector.url)
        with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=broken, mode="overwrite") as job:
            with pytest.raises(ValueError, match="on purpose"):
                job.run_epoch()
    start, fail = collector.events
    for event in (start, fail):
        validate(event)
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert start["run"]["runId"] == fail["run"]["runId"]
    error = fail["run"]["facets"]["errorMessage"]
    assert error["message"] == "ValueError: the transform broke on purpose"
    assert error["programmingLanguage"] == "python" and ", in broken\n" in error["stackTrace"]
    assert lake.load_table(COUNTS).metadata.snapshot_by_name(P.STAGED_BRANCH) is None  # nothing was staged


def test_a_transport_that_cannot_connect_never_fails_the_epoch(lake, ol_env, caplog):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (ol_env / "openlineage.yml").write_text(
        f"transport:\n  type: http\n  url: http://127.0.0.1:{port}\n  timeout: 2\n  retry:\n    total: 0\n",
        encoding="utf-8")
    cc = ConsistentCatalog(lake)
    cc.ingest(WORDS, words("a", "b"))
    with caplog.at_level(logging.WARNING, logger="consistent_catalog.openlineage_events"):
        with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
            assert job.lineage_events is not None  # configured by ./openlineage.yml
            assert job.run_epoch().actions == {COUNTS: "published"}
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "consistent_catalog.openlineage_events" and r.getMessage().startswith("word-count:")]
    assert len(warnings) == 2 and all("could not be sent (the epoch goes on)" in w for w in warnings), warnings
    assert "START" in warnings[0] and "COMPLETE" in warnings[1]


def test_a_transport_that_never_answers_holds_no_epoch_up(lake, ol_env, caplog, monkeypatch):
    """An endpoint that accepts and never answers costs the client its timeout per event: the events wait on the
    job's sending thread, the epochs do not; closing the job waits FLUSH_SECONDS, then drops them with a warning."""
    from consistent_catalog import openlineage_events

    monkeypatch.setattr(openlineage_events, "FLUSH_SECONDS", 1.0)
    with socket.socket() as silent:  # listens (connections complete in the backlog) and never reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        (ol_env / "openlineage.yml").write_text(
            f"transport:\n  type: http\n  url: http://127.0.0.1:{silent.getsockname()[1]}\n  timeout: 30\n"
            "  retry:\n    total: 0\n", encoding="utf-8")
        cc = ConsistentCatalog(lake)
        with caplog.at_level(logging.WARNING, logger="consistent_catalog.openlineage_events"):
            started = time.monotonic()
            with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
                monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")  # the ingests send nothing (the job's emitter is built)
                for n in range(3):
                    cc.ingest(WORDS, words(f"w{n}"), barrier=1_000 + n)
                    assert job.run_epoch().actions == {COUNTS: "published"}
            elapsed = time.monotonic() - started
    assert elapsed < 20  # inline, the first event alone would have waited 30 s
    assert any("still unsent after 1 s are dropped" in r.getMessage() for r in caplog.records), caplog.records


def test_nothing_is_sent_and_nothing_imported_when_not_configured(lake, ol_env, tmp_path):
    with Collector() as collector:
        cc = ConsistentCatalog(lake)
        cc.ingest(WORDS, words("a"))
        with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
            assert job.lineage_events is None
            job.run_epoch()
    assert collector.events == []
    # in a fresh interpreter: an unconfigured epoch imports no OpenLineage module at all
    script = tmp_path / "epoch.py"
    script.write_text(f"""
import sys
from consistent_catalog import ConsistentCatalog
from consistent_catalog.demo import count_words
from tests.harness.lake import sqlite_catalog, words
cc = ConsistentCatalog(sqlite_catalog(__import__("pathlib").Path({str(tmp_path / "lake")!r})))
cc.ingest("demo.words", words("b"))
with cc.job("word-count", sources=["demo.words"], sinks=["demo.word_counts"], transform=count_words,
            mode="overwrite") as job:
    assert job.run_epoch().did_work
assert not [m for m in sys.modules if m.startswith("openlineage")], sorted(m for m in sys.modules if "lineage" in m)
""", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENLINEAGE")}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run([sys.executable, str(script)], cwd=ol_env, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_disabled_wins_over_a_configuration(lake, ol_env, monkeypatch):
    with Collector() as collector:
        monkeypatch.setenv("OPENLINEAGE_URL", collector.url)
        monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")
        job = ConsistentCatalog(lake).job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words)
        assert job.lineage_events is None


def test_configured_without_the_client_installed_warns_and_runs(lake, ol_env, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "openlineage.client", None)  # what an environment without the extra sees
    monkeypatch.setenv("OPENLINEAGE_URL", "http://127.0.0.1:9")
    with caplog.at_level(logging.WARNING, logger="consistent_catalog.openlineage_events"):
        job = ConsistentCatalog(lake).job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words)
    assert job.lineage_events is None
    assert "pip install 'consistent-catalog[openlineage]'" in caplog.text
    from consistent_catalog.exceptions import NotInstalledError
    from consistent_catalog.openlineage_events import require_client

    with pytest.raises(NotInstalledError, match=r"consistent-catalog\[openlineage\]"):
        require_client()


def test_a_replayed_staged_epoch_completes_with_the_attempt_that_staged_it(lake, ol_env, monkeypatch):
    """An epoch staged by a crashed run is published as it is (protocol §5.4): COMPLETE names its attempt."""
    cc = ConsistentCatalog(lake)
    cc.ingest(WORDS, words("a", "b"))
    with Collector() as collector:
        monkeypatch.setenv("OPENLINEAGE_URL", collector.url)
        with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
            plan = job.plan()
            job.stage(COUNTS, plan, job.run_transform(plan)[COUNTS])  # staged, then "crashed" before publishing
            assert job.run_epoch().actions == {COUNTS: "republished"}
    start, complete = collector.events
    for event in (start, complete):
        validate(event)
    snapshot_id, summary = _published(lake, COUNTS)
    assert start["run"]["facets"]["consistentCatalog_epoch"]["sinks"] == {COUNTS: {"action": "publish-staged"}}
    assert complete["run"]["facets"]["consistentCatalog_epoch"]["sinks"] == {
        COUNTS: {"action": "republished", "attempt": summary[P.ATTEMPT]}}
    assert complete["outputs"][0]["facets"]["version"]["datasetVersion"] == str(snapshot_id)


def test_an_interrupted_epoch_sends_abort(lake, ol_env, monkeypatch):
    def interrupted(ctx):
        raise KeyboardInterrupt

    cc = ConsistentCatalog(lake)
    cc.ingest(WORDS, words("a"))
    with Collector() as collector:
        monkeypatch.setenv("OPENLINEAGE_URL", collector.url)
        with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=interrupted, mode="overwrite") as job:
            with pytest.raises(KeyboardInterrupt):
                job.run_epoch()
    start, abort = collector.events
    validate(abort)
    assert (start["eventType"], abort["eventType"]) == ("START", "ABORT")
    assert abort["run"]["facets"]["errorMessage"]["message"].startswith("KeyboardInterrupt")


def test_root_ingests_are_runs_validated_against_the_spec(lake, ol_env, monkeypatch):
    """Issue 34, item 7: an ingest that lands is a run of job ``ingest:<root>`` (START, COMPLETE with the snapshot
    it landed, the root's columns and our ingest facet); a key already landed sends nothing; an ingest refused
    sends START and FAIL. Every event validated against the spec's schema and ours; values against pyiceberg."""
    from consistent_catalog.exceptions import InvalidInputError

    with Collector() as collector:
        monkeypatch.setenv("OPENLINEAGE_URL", collector.url)
        cc = ConsistentCatalog(lake)
        landed = cc.ingest(WORDS, words("lineage", "of", "roots"), key="batch-1")
        assert cc.ingest(WORDS, words("lineage", "of", "roots"), key="batch-1").skipped
        cc.register_job("word-count", sources=[WORDS], sinks=[COUNTS])
        with pytest.raises(InvalidInputError):
            cc.ingest(COUNTS, pa.table({"word": ["x"], "cnt": [1]}))  # a derived table takes no ingest
        events = collector.wait_for(4)
    for event in events:
        validate(event)
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        ("ingest:demo.words", "START"), ("ingest:demo.words", "COMPLETE"),
        ("ingest:demo.word_counts", "START"), ("ingest:demo.word_counts", "FAIL")]
    start, complete, _, fail = events
    assert start["run"]["runId"] == complete["run"]["runId"] and start["eventTime"] <= complete["eventTime"]
    head = lake.load_table(WORDS).metadata.snapshot_by_name("main")
    (out,) = complete["outputs"]
    assert (out["namespace"], out["name"]) == (lake.properties["uri"], WORDS) and complete["inputs"] == []
    assert out["facets"]["version"]["datasetVersion"] == str(head.snapshot_id) == str(landed.snapshot_id)
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [("word", "string")]
    facet = complete["run"]["facets"]["consistentCatalog_ingest"]
    assert (facet["barrier"], facet["snapshot"], facet["key"]) == (
        int(head.summary.additional_properties[P.BARRIER]), head.snapshot_id, "batch-1")
    assert "version" not in start["outputs"][0]["facets"]
    assert "InvalidInputError" in fail["run"]["facets"]["errorMessage"]["message"]
    import consistent_catalog

    for event in events:  # our version tag, and the client's own tags beside it
        tags = {t["key"]: (t["value"], t.get("source")) for t in event["run"]["facets"]["tags"]["tags"]}
        assert tags["consistent_catalog_version"] == (consistent_catalog.__version__, "CONSISTENT_CATALOG")
        assert "openlineage_client_version" in tags

