"""Spark SQL epochs on Iceberg's REST fixture, and our OpenLineage events joined with OpenLineage's own Spark listener.

One Spark session (local[2], a driver JVM of its own) on Iceberg's REST fixture (``tests/harness/third_party.py``)
with both ``lake_consistent`` (our plugin) and ``io.openlineage.spark.agent.OpenLineageSparkListener`` (openlineage-
spark_<scala> 1.53.0 of the installed pyspark's Scala, copied from Maven Central by ``scripts/third_party_servers.sh``),
each writing its events to a file transport.

How the listener names an Iceberg table of a REST catalog (openlineage-spark's ``IcebergHandler`` and
``RestCatalogTypeHandler``): the dataset is the table's *location* (``PathUtils.fromPath``: namespace ``file``, name
the absolute path, for a local warehouse), with a ``symlinks`` facet entry of type ``TABLE`` whose namespace is the
catalog's ``uri`` as Spark is configured with it and whose name is the table identifier (``ns.table``). Ours
(protocol §5.8) name a table by the catalog's ``uri`` and the identifier: the listener's symlink, so a backend that
follows symlinks (Marquez does) joins both on one dataset.

Checked here with events of every kind we send: a Python root ingest, a Spark SQL epoch (the plugin's emitter), a
Python epoch job, the static ``lineage --format openlineage``. Every dataset they name is one the listener's events
name or link to by symlink, and the link is checked against the table itself (its location read with pyiceberg).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import histogram
from consistent_catalog.spark.lines import current_line
from tests.harness.lake import COUNTS_SCHEMA, HIST_SCHEMA, WORDS_SCHEMA
from tests.harness.spark_plugin import end_driver_jvm
from tests.harness.third_party import ROOT, IcebergRestFixture, ensure_fetched, iceberg_fixture

pytestmark = pytest.mark.spark
pytest.importorskip("openlineage.client", reason="openlineage-python is not installed (pip install -e '.[dev]')")

OPENLINEAGE_SPARK_VERSION = "1.53.0"
# the listener built for the Scala of the installed pyspark's line (2.12 for Spark 3.5, 2.13 for Spark 4)
LISTENER_JAR = ROOT / "build" / "third-party" / f"openlineage-spark_{current_line().scala}-{OPENLINEAGE_SPARK_VERSION}.jar"
OUR_PRODUCER = "https://pypi.org/project/consistent-catalog/"
WORDS, COUNTS, HIST, REPORT = "demo.words", "demo.word_counts", "demo.count_histogram", "demo.report"

iceberg_fixture = iceberg_fixture()


def events_in(directory: Path) -> list[dict[str, Any]]:
    """Every event of the file transports under ``directory`` (one JSON document per line, or per file)."""
    found: list[dict[str, Any]] = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        text = path.read_text(encoding="utf-8").strip()
        if not text:
            continue
        try:
            found.append(json.loads(text))
        except ValueError:
            found.extend(json.loads(line) for line in text.splitlines() if line.strip())
    return found


def datasets(event: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(event.get("inputs") or []), *(event.get("outputs") or [])]


@pytest.fixture(scope="module")
def env(iceberg_fixture: IcebergRestFixture, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from consistent_catalog.spark.session import build_session, spark_conf

    ensure_fetched()
    assert LISTENER_JAR.is_file(), f"{LISTENER_JAR} missing: run scripts/third_party_servers.sh"
    root = tmp_path_factory.mktemp("ol-join")
    ours, theirs = root / "ours", root / "theirs"
    ours.mkdir()
    theirs.mkdir()
    ol_env = {"OPENLINEAGE__TRANSPORT__TYPE": "file", "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(ours / "events.jsonl"),
              "OPENLINEAGE__TRANSPORT__APPEND": "true"}
    jars = spark_conf(iceberg_fixture.uri, iceberg_fixture.warehouse)["spark.jars"]
    extra = {
        "spark.jars": f"{jars},{LISTENER_JAR}",
        "spark.extraListeners": "io.openlineage.spark.agent.OpenLineageSparkListener",
        "spark.openlineage.transport.type": "file",
        "spark.openlineage.transport.location": str(theirs / "events.jsonl"),
        "spark.openlineage.namespace": "spark-listener",
    }
    end_driver_jvm()  # the driver JVM's environment is fixed when it starts: ours, with the variables above
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
            patch.delenv(key)
        for key, value in ol_env.items():
            patch.setenv(key, value)
        patch.chdir(root)
        spark = build_session(iceberg_fixture.uri, iceberg_fixture.warehouse, app_name="test-third-party-lineage",
                              extra_conf=extra)
        try:
            yield {"spark": spark, "ours": ours, "theirs": theirs, "root": root, "ol_env": ol_env}
        finally:
            spark.stop()
            end_driver_jvm()
            for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:  # the client's own aliases
                os.environ.pop(key, None)


def test_sql_epochs_on_the_fixture_and_our_lineage_joins_the_listeners(env: dict[str, Any],
                                                                       iceberg_fixture: IcebergRestFixture) -> None:
    spark = env["spark"]
    iceberg_fixture.reset()
    catalog = iceberg_fixture.catalog()
    catalog.create_namespace("demo")
    for name, schema in ((WORDS, WORDS_SCHEMA), (COUNTS, COUNTS_SCHEMA), (HIST, HIST_SCHEMA)):
        catalog.create_table(name, schema=schema)
    cc = ConsistentCatalog(catalog)

    # keyed Python root ingests (a repeated key lands nothing), then a Spark SQL epoch through lake_consistent
    batches = [["a", "b", "a"], ["b", "c"]]
    spark.conf.set("spark.sql.consistent.job", "sql-count")
    try:
        for i, batch in enumerate(batches):
            cc.ingest(WORDS, pa.table({"word": batch}), barrier=1_000 * (i + 1), key=f"k{i}")
        assert cc.ingest(WORDS, pa.table({"word": ["z"]}), key="k1").skipped
        spark.sql(f"INSERT OVERWRITE lake_consistent.{COUNTS} SELECT word, count(*) AS cnt "
                  f"FROM lake_consistent.{WORDS} GROUP BY word").collect()
    finally:
        spark.conf.unset("spark.sql.consistent.job")
    # recounted with pyiceberg: the epoch's rows on main, at the last barrier
    table = catalog.load_table(COUNTS)
    assert table.metadata.snapshot_by_name("main").summary[P.BARRIER] == "2000"
    assert {r["word"]: r["cnt"] for r in table.scan().to_arrow().to_pylist()} == {"a": 2, "b": 2, "c": 1}

    # a Python epoch job downstream; then a plain Spark job reads its sink (the listener's view of it)
    with cc.job("histogram", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite") as job:
        assert job.run_epoch().actions == {HIST: "published"}
    spark.sql(f"CREATE TABLE lake.{REPORT} USING iceberg AS SELECT * FROM lake.{HIST}").collect()
    assert sorted(r["words"] for r in catalog.load_table(REPORT).scan().to_arrow().to_pylist()) == [1, 2]

    # the static graph, as the CLI exports it
    cli_env = {**{k: v for k, v in os.environ.items() if not k.startswith(("OPENLINEAGE", "PYICEBERG_CATALOG"))},
               "PYICEBERG_CATALOG__LAKE__TYPE": "rest", "PYICEBERG_CATALOG__LAKE__URI": iceberg_fixture.uri}
    exported = subprocess.run([sys.executable, "-m", "consistent_catalog", "--catalog", "lake", "lineage",
                               "--format", "openlineage"], env=cli_env, capture_output=True, text=True, timeout=120)
    assert exported.returncode == 0, exported.stderr
    static = json.loads(exported.stdout)

    # both send from threads of their own: wait (bounded) for the last events each must send
    from consistent_catalog.openlineage_events import _EMITTERS

    for emitter in list(_EMITTERS):
        emitter.flush(10)
    deadline = time.monotonic() + 60
    while True:
        ours_events = [e for e in events_in(env["ours"]) if e.get("producer") == OUR_PRODUCER]
        theirs_events = [e for e in events_in(env["theirs"]) if "OpenLineage" in e.get("producer", "")]
        done_sql = [e for e in ours_events if e["job"]["name"] == "sql-count" and e["eventType"] == "COMPLETE"]
        done_report = [e for e in theirs_events if e["eventType"] == "COMPLETE"
                       and any(o["name"].endswith("/report") for o in e.get("outputs") or [])]
        if (done_sql and done_report) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(done_sql) == 1 and done_report, (len(done_sql), len(theirs_events))

    # what the listener names: each dataset, and what its symlinks facet links it to
    linked: dict[tuple[str, str], tuple[str, str]] = {}
    named: set[tuple[str, str]] = set()
    for event in theirs_events:
        for dataset in datasets(event):
            primary = (dataset["namespace"], dataset["name"])
            named.add(primary)
            for link in (dataset.get("facets", {}).get("symlinks", {}) or {}).get("identifiers", []):
                linked[(link["namespace"], link["name"])] = primary
    # what ours name: Python ingests and epochs, the plugin's SQL epochs, the static export
    ours: dict[tuple[str, str], set[str]] = {}
    for event in [*ours_events, *static]:
        kind = "static" if event in static else ("jvm" if "sql-count" in event["job"]["name"] else "python")
        for dataset in datasets(event):
            ours.setdefault((dataset["namespace"], dataset["name"]), set()).add(kind)
    assert {kind for kinds in ours.values() for kind in kinds} == {"python", "jvm", "static"}
    expected = {(iceberg_fixture.uri, t) for t in (WORDS, COUNTS, HIST)}
    assert set(ours) == expected, sorted(ours)

    unjoined = [d for d in ours if d not in named and d not in linked]
    assert not unjoined, f"our datasets the listener neither names nor links to: {unjoined}; it names {sorted(named)}, " \
                         f"links {sorted(linked)}"
    # the link is the table itself: the listener's dataset for it is the table's location (pyiceberg's answer)
    for namespace, name in ours:
        location = catalog.load_table(name).location()
        assert location.startswith("file:")
        primary = linked.get((namespace, name))
        assert primary == ("file", location.removeprefix("file:").replace("///", "/", 1)), (name, primary, location)

    # our run facet rides on a dataset the listener knows: the JVM and Python epochs' COMPLETE outputs
    for job_name in ("sql-count", "histogram"):
        completes = [e for e in ours_events if e["job"]["name"] == job_name and e["eventType"] == "COMPLETE"]
        assert completes and all("consistentCatalog_epoch" in e["run"]["facets"] for e in completes)
        assert all((o["namespace"], o["name"]) in linked for e in completes for o in e["outputs"])


def test_an_epoch_and_a_micro_batch_cost_the_requests_pinned_on_the_fixture(
        env: dict[str, Any], iceberg_fixture: IcebergRestFixture, tmp_path: Path) -> None:
    """Issue 46's request counts on Iceberg's own REST server (``tests/spark/test_spark_rest.py`` pins them on ours)."""
    from collections import Counter

    from tests.harness.request_counts import counted_epochs

    spark = env["spark"]
    iceberg_fixture.reset()
    catalog = iceberg_fixture.catalog()
    catalog.create_namespace("counted")
    # OpenLineage's own listener loads the tables of each event it describes (a cut resolution each): its requests
    # are not the epoch's, so it is taken off the session while they are counted. A listener without side effects
    # keeps the shared listener queue from emptying meanwhile: Spark stops an emptied queue under the bus's lock and
    # waits for its thread, which deadlocks (seen on Spark 3.5) when OpenLineage's handler is waiting for that lock
    bus = spark.sparkContext._jsc.sc()
    theirs = [listener for listener in bus.listenerBus().listeners()
              if listener.getClass().getName().endswith("OpenLineageSparkListener")]
    assert theirs
    placeholder = spark.sparkContext._jvm.org.apache.spark.scheduler.StatsReportListener()
    bus.addSparkListener(placeholder)
    for listener in theirs:
        bus.removeSparkListener(listener)
    try:
        counted = counted_epochs(spark, iceberg_fixture.port, iceberg_fixture.warehouse, catalog, "counted",
                                 tmp_path / "checkpoint")
    finally:
        for listener in theirs:
            bus.addSparkListener(listener)
        bus.removeSparkListener(placeholder)
    print("fixture epoch", dict(counted.epoch), "micro-batch", dict(counted.micro_batch))
    assert dict(counted.epoch) == FIXTURE_SQL_EPOCH_REQUESTS, "\n".join(counted.epoch_log)
    assert dict(counted.micro_batch) == FIXTURE_MICRO_BATCH_REQUESTS, "\n".join(counted.micro_batch_log)
    source = Counter(catalog.load_table("counted.words").scan().to_arrow()["word"].to_pylist())
    rows = catalog.load_table("counted.stream_counts").scan().to_arrow()
    assert dict(zip(rows["word"].to_pylist(), rows["cnt"].to_pylist())) == dict(source)  # recounted with pyiceberg


#: As on our server (tests/spark/test_spark_rest.py), with OpenLineage configured in this module's JVM.
FIXTURE_SQL_EPOCH_REQUESTS = {"list namespaces": 2, "list tables": 1, "load table": 2, "metrics report": 1,
                              "commit (multi-table)": 2}
FIXTURE_MICRO_BATCH_REQUESTS = {"load table": 2, "commit (multi-table)": 2}
