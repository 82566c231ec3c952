"""The Airflow provider (issue 48), with Airflow from PyPI, in-process: ``dag.test()`` runs the tasks and the
sensor's trigger inline; the asset trigger's ``run()`` is driven by the test's event loop. No scheduler.

Cuts expected here come from the metadata the fixture wrote, and what a task read is recounted with pyiceberg at
the snapshot ids it was handed.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog.airflow.payload import PinnedCut
from consistent_catalog.demo import COUNTS, WORDS
from tests.harness.lake import lagging_word_counts, words

pytestmark = [
    pytest.mark.integration,
    # dag.test() runs tasks through Airflow's in-process API client (starlette's TestClient over httpx)
    pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient` is deprecated"),
]
T0 = 1_700_000_000_000
SECRET = "s3cr3t-never-logged-4711"


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory):
    """Airflow's home (config, SQLite metadata DB, logs) in a temporary folder, migrated once for the module."""
    home = tmp_path_factory.mktemp("airflow")
    saved = dict(os.environ)
    os.environ.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                       "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
                       "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db"})
    from airflow.utils.db import initdb

    initdb()
    yield home
    os.environ.clear()
    os.environ.update(saved)


def build_lake(directory: Path):
    """words (W = T0 + 1000) -> word_counts (W = T0): word-count has not published T0 + 1000 yet."""
    return lagging_word_counts(directory, ("c", "c"), T0)


@pytest.fixture
def lake(tmp_path, monkeypatch):
    """The lake, reachable through an Airflow connection whose extra carries a (fake) secret."""
    cc, job = build_lake(tmp_path)
    extra = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/warehouse",
             "s3.secret-access-key": SECRET}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps({"conn_type": "consistent_catalog", "extra": extra}))
    return cc, job, tmp_path


def recount(cc: ConsistentCatalog, table: str, snapshot_id: int | None) -> dict[str, int]:
    if snapshot_id is None:
        return {}
    rows = cc.catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow().to_pylist()
    return {r["word"]: r["cnt"] for r in rows}


GATE_DAG = """
import json, os
from airflow.sdk import DAG, task
from consistent_catalog.airflow import ConsistentCatalogHook, ConsistentCutSensor, PinnedCut
from consistent_catalog.demo import COUNTS, WORDS, count_words
from tests.harness.lake import words

OUT = os.environ["CC_AIRFLOW_OUT"]
T0 = %(t0)d

def failed(context):  # what the task failed with, for the test to read
    with open(OUT + ".failure", "w") as f:
        f.write(f"{type(context['exception']).__name__}: {context['exception']}")

with DAG("cut_gate", schedule=None) as dag:
    gate = ConsistentCutSensor(task_id="wait_for_cut", tables=[WORDS, COUNTS], catalog_conn_id="lake",
                               at_least_barrier=T0 + 1_000, poke_interval=0.2, max_interval="1s",
                               timeout=float(os.environ.get("CC_AIRFLOW_TIMEOUT", "120")), on_failure_callback=failed,
                               deferrable=os.environ.get("CC_AIRFLOW_DEFERRABLE", "1") == "1")

    @task
    def later_epoch_lands():  # between the sensor and the reader the newest cut moves on
        cc = ConsistentCatalogHook("lake").get_catalog()
        cc.ingest(WORDS, words("d"), barrier=T0 + 2_000)
        with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite",
                    takeover=True) as job:  # the test's instance of the job lives on: take its lease over
            job.run_epoch()

    @task
    def read(cut):
        pinned = PinnedCut.of(cut)
        rows = pinned.scan(ConsistentCatalogHook("lake").get_catalog(), COUNTS).to_arrow().to_pylist()
        with open(OUT, "w") as f:
            json.dump({"cut": cut, "counts": {r["word"]: r["cnt"] for r in rows}}, f)

    gate >> later_epoch_lands() >> read(gate.output)
""" % {"t0": T0}


def load_dag(home: Path, source: str, dag_id: str):
    """Write the DAG file into Airflow's dags folder (``dag.test()`` serializes it from there) and import it."""
    import importlib.util

    dags = home / "dags"
    dags.mkdir(exist_ok=True)
    path = dags / f"{dag_id}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"dag_{dag_id}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_the_sensor_defers_resumes_and_the_task_reads_the_cut_that_woke_it(airflow_home, lake, monkeypatch, capfd,
                                                                            caplog):
    cc, job, folder = lake
    out = folder / "read.json"
    monkeypatch.setenv("CC_AIRFLOW_OUT", str(out))
    dag = load_dag(airflow_home, GATE_DAG, "cut_gate")

    ended, published = threading.Event(), threading.Event()

    def publish_once_deferred():  # the job publishes T0 + 1000 only once the sensor has deferred
        while not ended.is_set():
            if deferred(airflow_home):
                job.run_epoch()
                published.set()
                return
            time.sleep(0.05)

    publisher = threading.Thread(target=publish_once_deferred)
    publisher.start()
    try:
        run = dag.test()
    finally:
        ended.set()
        publisher.join()
    assert run.state == "success", run.state
    assert published.is_set()  # the sensor had deferred, and the cut it returned came after
    got = json.loads(out.read_text())
    cut = got["cut"]
    assert cut["barrier"] == T0 + 1_000 and cut["catalog"] == "lake"
    # independently: word_counts' snapshot whose epoch barrier is T0 + 1000, read back from its metadata
    counts_table = cc.catalog.load_table(COUNTS)
    at_1000 = [s.snapshot_id for s in counts_table.snapshots()
               if s.summary and s.summary.get("consistent.barrier") == str(T0 + 1_000)]
    assert cut["tables"][COUNTS]["snapshot_id"] == at_1000[-1]
    assert got["counts"] == recount(cc, COUNTS, at_1000[-1]) == {"a": 1, "b": 1, "c": 2}
    newest = counts_table.current_snapshot().snapshot_id
    assert newest != at_1000[-1] and recount(cc, COUNTS, newest) == {"a": 1, "b": 1, "c": 2, "d": 1}
    assert_no_secret(airflow_home, capfd.readouterr(), caplog, out)
    from airflow.sdk._shared.secrets_masker import redact

    assert redact(f"key {SECRET}") == "key ***"  # registered with Airflow's secrets masker (the hook masks it too)


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferred", "blocking"])
def test_the_sensor_times_out_naming_the_bottleneck(airflow_home, lake, monkeypatch, capfd, caplog, deferrable):
    cc, job, folder = lake
    out = folder / "read.json"
    monkeypatch.setenv("CC_AIRFLOW_OUT", str(out))
    monkeypatch.setenv("CC_AIRFLOW_DEFERRABLE", "1" if deferrable else "0")
    monkeypatch.setenv("CC_AIRFLOW_TIMEOUT", "1.5")
    dag = load_dag(airflow_home, GATE_DAG, "cut_gate")
    run = dag.test()
    assert run.state == "failed"
    failure = (folder / "read.json.failure").read_text()
    # word_counts' watermark (T0) is behind its source's (T0 + 1000): its job word-count is the bottleneck
    assert failure.startswith("AirflowSensorTimeout: the cut of demo.words, demo.word_counts is not fresh enough")
    assert "bottleneck: job word-count writing demo.word_counts, 1.0s behind its sources" in failure
    assert f"wanted barrier >= {T0 + 1_000}" in failure or "wanted barrier >= 2023-11-14" in failure
    assert not out.exists()
    assert_no_secret(airflow_home, capfd.readouterr(), caplog)


def test_a_deferrable_sensor_defers_for_a_barrier_ahead_of_now_within_its_timeout(airflow_home, lake):
    """A barrier up to the timeout ahead is reachable (as for the blocking wait): the sensor defers, it does not
    refuse the barrier as lying in the future."""
    from airflow.sdk.exceptions import TaskDeferred

    from consistent_catalog.airflow import ConsistentCutSensor

    sensor = ConsistentCutSensor(task_id="ahead", tables=[WORDS, COUNTS], catalog_conn_id="lake",
                                 at_least_barrier="now+10m", timeout=3600, poke_interval=1)
    with pytest.raises(TaskDeferred) as deferred_by:
        sensor.execute({})
    assert deferred_by.value.trigger.barrier > time.time() * 1000 + 9 * 60_000


class AssetState:
    """What Airflow's triggerer hands an asset watcher's trigger (``asset_state_store``): values kept per asset
    in the metadata DB across triggerer restarts; here a dict outliving the trigger instances."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    async def aget(self, key: str, default: object = None) -> object:
        return self.values.get(key, default)

    async def aset(self, key: str, value: object) -> None:
        self.values[key] = value


def test_the_asset_trigger_emits_once_per_new_cut_across_a_restart(airflow_home, lake):
    from consistent_catalog.airflow import ConsistentCutAssetTrigger

    cc, job, folder = lake
    state = AssetState()

    def started(kwargs):
        trigger = ConsistentCutAssetTrigger(**kwargs)
        trigger.asset_state_store = state
        return trigger

    first = started({"tables": [WORDS, COUNTS], "catalog_conn_id": "lake", "interval_ms": 100})
    classpath, kwargs = first.serialize()
    assert classpath == "consistent_catalog.airflow.triggers.ConsistentCutAssetTrigger"
    assert SECRET not in json.dumps(kwargs)

    async def scenario():
        events = first.run()
        one = await asyncio.wait_for(events.__anext__(), 30)
        assert one.payload["barrier"] == T0
        job.run_epoch()  # publishes T0 + 1000: a new cut
        two = await asyncio.wait_for(events.__anext__(), 30)
        assert two.payload["barrier"] == T0 + 1_000
        await events.aclose()  # the triggerer stops (restarts) ...
        restarted = started(kwargs).run()  # ... and runs the trigger again from its kwargs
        nothing = asyncio.ensure_future(restarted.__anext__())
        await asyncio.sleep(1.0)  # ten polls: the cut at T0 + 1000 was emitted already
        assert not nothing.done()
        cc.ingest(WORDS, words("e"), barrier=T0 + 2_000)
        job.run_epoch()
        three = await asyncio.wait_for(nothing, 30)
        await restarted.aclose()
        return [one.payload, two.payload, three.payload]

    payloads = asyncio.run(scenario())
    assert [p["barrier"] for p in payloads] == [T0, T0 + 1_000, T0 + 2_000]
    counts_table = cc.catalog.load_table(COUNTS)
    for payload in payloads:  # each event names the snapshot of that epoch, read back from the metadata
        expected = [s.snapshot_id for s in counts_table.snapshots()
                    if s.summary and s.summary.get("consistent.barrier") == str(payload["barrier"])][-1]
        assert payload["tables"][COUNTS]["snapshot_id"] == expected
        assert PinnedCut.of({"from_trigger": True, "payload": payload}).snapshot_ids[COUNTS] == expected
    assert recount(cc, COUNTS, payloads[2]["tables"][COUNTS]["snapshot_id"])["e"] == 1
    assert state.values == {"consistent_catalog.last_barrier": T0 + 2_000}


def test_the_example_dags_parse(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    example = Path(__file__).resolve().parents[2] / "docs" / "airflow" / "consistent_cut_dag.py"
    bag = DagBag(str(example))
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["on_each_cut", "word_report"]
    watcher = bag.get_dag("on_each_cut")  # scheduled on the asset whose watcher runs the cut trigger
    assert "word_counts_cut" in repr(watcher.timetable.asset_condition)


def deferred(home: Path) -> bool:
    """Whether the sensor's task instance has been deferred (its next_method set), read from Airflow's DB."""
    import sqlite3

    try:
        with sqlite3.connect(f"file:{home}/airflow.db?mode=ro", uri=True, timeout=1) as db:
            row = db.execute("SELECT next_method FROM task_instance WHERE task_id = 'wait_for_cut' "
                             "ORDER BY start_date DESC LIMIT 1").fetchone()
    except sqlite3.Error:
        return False
    return bool(row and row[0])


def assert_no_secret(home: Path, captured, caplog, *more: Path) -> None:
    """The connection's secret is nowhere: not in the output, the log records, the task logs, XCom, the triggers."""
    assert SECRET not in captured.out + captured.err + caplog.text
    for path in [*home.rglob("*.log"), *home.rglob("*.json"), *more]:
        assert SECRET not in path.read_text(errors="replace"), path
    import sqlite3

    with sqlite3.connect(f"{home}/airflow.db") as db:
        for table in ("xcom", "trigger", "task_instance"):
            for row in db.execute(f'SELECT * FROM "{table}"'):
                assert SECRET not in repr(row), table


def test_airflow_lists_the_provider(airflow_home):
    from airflow.providers_manager import ProvidersManager

    from consistent_catalog import __version__

    provider = ProvidersManager().providers["consistent-catalog"]  # found by the apache_airflow_provider entry point
    assert provider.version == __version__
    assert provider.data["connection-types"] == [{
        "connection-type": "consistent_catalog",
        "hook-class-name": "consistent_catalog.airflow.hooks.ConsistentCatalogHook"}]
