"""OpenLineage run events of Spark SQL epochs through ``lake_consistent`` (protocol §5.8, §5.9), sent by the plugin's
own emitter (``io.consistentcatalog.openlineage``) to an HTTP endpoint of the test.

The configuration is decided as the Python side decides it: ``conformance.OpenLineageProbe`` (a test main) answers
case by case what ``configured()`` and the openlineage-python client answer for the same variables and files. The
events are checked against the OpenLineage spec and our facet's schema (``validate``, as the Python tests do) and
against the snapshots read back with pyiceberg, never against the JVM's own answers; their structure against a
Python epoch's events for the same job.

One PySpark session for the Spark tests, on a driver JVM of the module's own (``session_in_own_jvm``): a JVM's
environment is fixed when it starts, so the driver's ``OPENLINEAGE_CONFIG`` names a file that each test writes (or
removes) to aim the JVM at its own collector; the JVM reads the configuration at every epoch statement.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.openlineage_events import configured, dataset_namespace, job_namespace
from consistent_catalog.spark import _jvm
from consistent_catalog.spark.session import parse_catalog_uri
from tests.conformance.corpus import build_jvm, java_command
from tests.harness.openlineage import Collector, validate
from tests.harness.spark_plugin import session_in_own_jvm
from tests.harness.sql_writer import count_words
from tests.spark.test_sql_writer import COUNT_WORDS, COUNTS, WORDS, error_of, ingest, main_chain, sql, summary

pytest.importorskip("openlineage.client", reason="openlineage-python is not installed (pip install -e '.[dev]')")
pytestmark = [pytest.mark.spark, pytest.mark.integration]

PROBE = "io.consistentcatalog.conformance.OpenLineageProbe"
JOB_NAMESPACE = "test-sql-writers"
SENDER_THREAD = "consistent-catalog-openlineage"
BROKEN = ("SELECT word, IF(word = 'boom', CAST(raise_error('the query broke on purpose') AS BIGINT), count(*)) AS cnt "
          "FROM lake_consistent.{ns}.words GROUP BY word")
"""The word count, failing in its tasks when a word is 'boom'."""


def overwrite(ns: str, query: str = COUNT_WORDS) -> str:
    return f"INSERT OVERWRITE lake_consistent.{ns}.word_counts {query.format(ns=ns)}"


def http_config(url: str, *, timeout: float = 5, retries: int = 0) -> str:
    return f"transport:\n  type: http\n  url: {url}\n  timeout: {timeout}\n  retry:\n    total: {retries}\n"


# --- the configuration: the JVM decides as the Python side does -------------------------------------------
@pytest.fixture(scope="module")
def plugin() -> Path:
    """build/jvm/spark-plugin: the plugin's classes, the probe among its test classes."""
    return build_jvm()


def run_probe(plugin: Path, args: list[str], *, stdin: str = "", env: Mapping[str, str] | None = None,
              cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OPENLINEAGE")}
    result = subprocess.run([*java_command(plugin, PROBE), *args], input=stdin, capture_output=True, text=True,
                            env={**base, "JAVA_TOOL_OPTIONS": "", **(env or {})}, cwd=cwd, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def python_transport(transport: Any) -> dict[str, Any] | None:
    """The openlineage-python client's transport in the probe's terms (``Transport.describe()``)."""
    if transport.kind == "http":
        retry, unlimited = transport.config.retry, 2**31 - 1
        return {"type": "http", "url": urljoin(transport.url, transport.endpoint), "timeout": float(transport.timeout),
                "authorization": transport.config.auth.get_bearer(),
                "compression": str(transport.compression) if transport.compression else None,
                "custom_headers": {k: str(v) for k, v in transport.config.custom_headers.items()},
                "retry": {"total": unlimited if retry.get("total") is None else retry["total"],
                          "connect": unlimited if retry.get("connect") is None else retry["connect"],
                          "read": unlimited if retry.get("read") is None else retry["read"],
                          "backoff_factor": float(retry["backoff_factor"]),
                          "status_forcelist": list(retry["status_forcelist"])}}
    if transport.kind == "file":
        config = transport.config
        return {"type": "file", "log_file_path": config.log_file_path, "append": bool(config.append),
                "debug_mode": bool(config.debug_mode)}
    if transport.kind == "console":
        return {"type": "console"}
    return None  # noop: nothing is sent


def python_answer(env: Mapping[str, str], cwd: Path, home: Path) -> dict[str, Any]:
    """What the Python side decides for ``env`` in ``cwd`` with ``home``: ``configured()``, then the client."""
    from openlineage.client import OpenLineageClient
    from openlineage.client.filter import ExactMatchFilter

    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:
            patch.delenv(key)
        for key, value in env.items():
            patch.setenv(key, value)
        patch.setenv("HOME", str(home))
        patch.chdir(cwd)
        try:
            answer: dict[str, Any] = {"configured": configured(), "job_namespace": job_namespace(), "transport": None,
                                      "filters": []}
            if answer["configured"]:
                try:
                    client = OpenLineageClient()
                except Exception:  # noqa: BLE001 - emitter_for: a warning, and no events
                    client = None
                if client is not None:
                    answer["transport"] = python_transport(client.transport)
                    answer["filters"] = [["exact", f.match] if isinstance(f, ExactMatchFilter) else ["regex", f.pattern.pattern]
                                         for f in client._filters]
        finally:
            for key in [k for k in os.environ if k.startswith("OPENLINEAGE")]:  # the client's own aliases
                del os.environ[key]
    return answer


FULL_HTTP = """transport:
  type: http
  url: http://lineage-host:5000
  endpoint: api/v2/lineage
  timeout: 2.5
  auth:
    type: api_key
    apiKey: file-key
  compression: gzip
  custom_headers:
    X-Team: lake
  retry:
    total: 1
    backoff_factor: 0.5
    status_forcelist: [503]
"""
#: name -> (environment, files under the case's directory); "{dir}" in a value is that directory
CASES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "nothing": ({}, {}),
    "disabled wins": ({"OPENLINEAGE_DISABLED": " True ", "OPENLINEAGE_URL": "http://h:5000"}, {}),
    "url": ({"OPENLINEAGE_URL": "http://h:5000"}, {}),
    "url, endpoint, api key": ({"OPENLINEAGE_URL": "http://Lineage:5000/base", "OPENLINEAGE_ENDPOINT": "v2/lineage",
                                "OPENLINEAGE_API_KEY": "secret"}, {}),
    "absolute endpoint": ({"OPENLINEAGE_URL": "http://h:5000/base/", "OPENLINEAGE_ENDPOINT": "/abs"}, {}),
    "an invalid url": ({"OPENLINEAGE_URL": "not-a-url"}, {}),
    "OPENLINEAGE_CONFIG": ({"OPENLINEAGE_CONFIG": "{dir}/conf/ol.yml"}, {"conf/ol.yml": FULL_HTTP}),
    "a missing OPENLINEAGE_CONFIG": ({"OPENLINEAGE_CONFIG": "{dir}/missing.yml"},
                                     {"cwd/openlineage.yml": "transport:\n  type: console\n"}),
    "home": ({}, {"home/.openlineage/openlineage.yml": "transport:\n  type: http\n  url: http://home:1\n"}),
    "cwd before home": ({}, {"cwd/openlineage.yml": "transport:\n  type: file\n  log_file_path: events\n",
                             "home/.openlineage/openlineage.yml": "transport:\n  type: http\n  url: http://home:1\n"}),
    "the file over the variables": ({"OPENLINEAGE__TRANSPORT__TIMEOUT": "7", "OPENLINEAGE__TRANSPORT__URL": "http://env:1"},
                                    {"cwd/openlineage.yml": "transport:\n  type: http\n  url: http://file:2\n"}),
    "variables alone": ({"OPENLINEAGE__TRANSPORT__TYPE": "file", "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": "{dir}/events",
                         "OPENLINEAGE__TRANSPORT__APPEND": "true", "OPENLINEAGE__TRANSPORT__DEBUG_MODE": "false"}, {}),
    "a file URL": ({"OPENLINEAGE__TRANSPORT__TYPE": "file", "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": "file://{dir}/events"},
                   {}),
    "a whole transport as JSON": ({"OPENLINEAGE__TRANSPORT": '{"type": "http", "url": "http://json:3", '
                                                             '"auth": {"type": "api_key", "apiKey": "k"}}',
                                   "OPENLINEAGE__TRANSPORT__URL": "http://part:4"}, {}),
    "api key from variables": ({"OPENLINEAGE__TRANSPORT__TYPE": "http", "OPENLINEAGE__TRANSPORT__URL": "http://h:5",
                                "OPENLINEAGE__TRANSPORT__AUTH__TYPE": "api_key", "OPENLINEAGE__TRANSPORT__AUTH__APIKEY": "k2",
                                "OPENLINEAGE__TRANSPORT__RETRY__TOTAL": "0"}, {}),
    "no transport type: the URL": ({"OPENLINEAGE_URL": "http://u:6"}, {"cwd/openlineage.yml": "transport:\n  url: http://x:7\n"}),
    "no transport: the console": ({}, {"cwd/openlineage.yml": "tags:\n  job:\n    team: lake\n"}),
    "an empty file and the URL": ({"OPENLINEAGE_URL": "http://e:8"}, {"cwd/openlineage.yml": ""}),
    "filters": ({"OPENLINEAGE_URL": "http://f:9"}, {"cwd/openlineage.yml": "filters:\n  - type: exact\n    match: word-count\n"
                                                   "  - type: regex\n    regex: 'tmp-.*'\n"}),
    "job namespace": ({"OPENLINEAGE_URL": "http://n:1", "OPENLINEAGE_NAMESPACE": "analytics"}, {}),
    "noop": ({"OPENLINEAGE__TRANSPORT__TYPE": "noop"}, {}),
    "http without a url": ({"OPENLINEAGE__TRANSPORT__TYPE": "http"}, {}),
    "an unknown auth key": ({"OPENLINEAGE__TRANSPORT__TYPE": "http", "OPENLINEAGE__TRANSPORT__URL": "http://h:5",
                             "OPENLINEAGE__TRANSPORT__AUTH__TYPE": "api_key"}, {}),
}
#: transports only the Python client has: the JVM warns once and sends nothing
PYTHON_ONLY: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "kafka": ({"OPENLINEAGE__TRANSPORT__TYPE": "kafka"}, {}),
    "composite": ({}, {"cwd/openlineage.yml": "transport:\n  type: composite\n  transports: []\n"}),
    "remote files": ({"OPENLINEAGE__TRANSPORT__TYPE": "file", "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": "s3://bucket/ol"}, {}),
    "jwt": ({}, {"cwd/openlineage.yml": "transport:\n  type: http\n  url: http://h:1\n  auth:\n    type: jwt\n"}),
}


def lay_out(root: Path, env: Mapping[str, str], files: Mapping[str, str]) -> tuple[dict[str, str], Path, Path]:
    for directory in ("cwd", "home", "conf"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")
    return {k: v.replace("{dir}", str(root)) for k, v in env.items()}, root / "cwd", root / "home"


def jvm_answers(plugin: Path, cases: Mapping[str, tuple[dict[str, str], Path, Path]]) -> dict[str, dict[str, Any]]:
    lines = "".join(json.dumps({"env": env, "cwd": str(cwd), "home": str(home)}) + "\n" for env, cwd, home in cases.values())
    answers = [json.loads(line) for line in run_probe(plugin, ["resolve"], stdin=lines).stdout.splitlines()]
    return dict(zip(cases, answers))


def test_the_jvm_decides_the_configuration_as_the_python_side(plugin: Path, tmp_path: Path) -> None:
    cases = {name: lay_out(tmp_path / f"case{i}", env, files) for i, (name, (env, files)) in enumerate(CASES.items())}
    jvm = jvm_answers(plugin, cases)
    for name, (env, cwd, home) in cases.items():
        expected = python_answer(env, cwd, home)
        answer = {k: jvm[name][k] for k in expected}
        assert answer == expected, f"{name}: JVM {jvm[name]}"
        if expected["transport"] is None and expected["configured"] and name != "noop":
            assert jvm[name]["warning"], name  # configured, yet nothing is sent: said once
    assert jvm["OPENLINEAGE_CONFIG"]["transport"]["url"] == "http://lineage-host:5000/api/v2/lineage"  # the cases mean it


def test_transports_of_the_python_client_alone_warn_and_send_nothing(plugin: Path, tmp_path: Path) -> None:
    cases = {name: lay_out(tmp_path / f"case{i}", env, files) for i, (name, (env, files)) in enumerate(PYTHON_ONLY.items())}
    for name, answer in jvm_answers(plugin, cases).items():
        assert answer["configured"] and answer["transport"] is None, name
        assert "OpenLineage is configured but the JVM writer sends no events" in answer["warning"], answer


def test_table_namespaces_are_the_python_sides_for_the_same_catalog(plugin: Path) -> None:
    """A Spark JDBC catalog's tables are named as pyiceberg's SQL catalog over the same database names them; Glue by
    its account's ARN (OpenLineage's naming spec), as the Python side names it."""
    catalogs = [
        {"uri": "jdbc:sqlite:/abs/path/catalog.db"},
        {"uri": "jdbc:sqlite:file:/abs/path/catalog.db?journal_mode=wal"},
        {"uri": "jdbc:postgresql://DB-Host:5432/lake?ssl=true", "jdbc.user": "me"},
        {"uri": "jdbc:postgresql://[::1]:5432/lake"},
        {"uri": "http://rest-host:8181/prefix", "warehouse": "s3://bucket/wh"},
        {"uri": "thrift://hive:9083"},
        {"type": "glue", "glue.id": "123456789012", "client.region": "eu-west-1", "warehouse": "s3://bucket/wh"},
        {"glue.id": "210987654321", "glue.region": "us-west-2"},  # Glue by its keys alone, as pyiceberg's
        {"warehouse": "s3://bucket/warehouse"},
        {"warehouse": "file:///abs/warehouse"},
        {},
    ]
    lines = "".join(json.dumps({"catalog": "lake", "properties": props}) + "\n" for props in catalogs)
    answers = [json.loads(line) for line in run_probe(plugin, ["names"], stdin=lines).stdout.splitlines()]
    for props, answer in zip(catalogs, answers, strict=True):
        python_props = dict(props)
        if props.get("uri", "").startswith("jdbc:"):
            python_props["uri"] = parse_catalog_uri(props["uri"]).pyiceberg_uri
        assert answer == dataset_namespace("lake", python_props), props
    assert answers[0] == "sqlite:////abs/path/catalog.db" and answers[2] == "postgresql+psycopg2://db-host:5432/lake"
    assert answers[6:8] == ["arn:aws:glue:eu-west-1:123456789012", "arn:aws:glue:us-west-2:210987654321"]


# --- the emitter without Spark --------------------------------------------------------------------------------
def test_the_url_variables_send_to_the_endpoint_with_the_api_key(plugin: Path, tmp_path: Path) -> None:
    with Collector() as collector:
        result = run_probe(plugin, ["emit", "word-count", "jdbc:sqlite:/abs/catalog.db"], cwd=tmp_path, env={
            "OPENLINEAGE_URL": collector.url + "/base", "OPENLINEAGE_ENDPOINT": "custom/lineage",
            "OPENLINEAGE_API_KEY": "secret-key", "OPENLINEAGE_NAMESPACE": JOB_NAMESPACE, "HOME": str(tmp_path)})
        assert result.stdout.startswith("queued ")
        start, complete = collector.wait_for(2, timeout=5)  # the JVM's shutdown sent them before it ended
    assert collector.paths == ["/custom/lineage", "/custom/lineage"]
    assert all(h["Authorization"] == "Bearer secret-key" and h["Content-Type"] == "application/json"
               for h in collector.headers)
    for event in (start, complete):
        validate(event)
        assert event["job"] == {"namespace": JOB_NAMESPACE, "name": "word-count", "facets": {}}
        assert event["inputs"][0]["namespace"] == "sqlite:////abs/catalog.db"
    assert result.stdout.split()[1] == start["run"]["runId"] == complete["run"]["runId"]
    assert complete["outputs"][0]["facets"]["version"]["datasetVersion"] == "2944848789731531313"


def test_the_file_transport_appends_json_lines(plugin: Path, tmp_path: Path) -> None:
    events = tmp_path / "lineage.jsonl"
    run_probe(plugin, ["emit", "word-count", "jdbc:sqlite:/abs/catalog.db"], cwd=tmp_path, env={
        "OPENLINEAGE__TRANSPORT__TYPE": "file", "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(events),
        "OPENLINEAGE__TRANSPORT__APPEND": "true", "HOME": str(tmp_path)})
    start, complete = [json.loads(line) for line in events.read_text(encoding="utf-8").splitlines()]
    for event in (start, complete):
        validate(event)
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")


def test_at_shutdown_queued_events_get_10_s_then_are_dropped(plugin: Path, tmp_path: Path) -> None:
    """An endpoint that accepts and never answers: ``main`` returns at once, the JVM's shutdown waits 10 s (Python's
    FLUSH_SECONDS) for its events, then drops them with a warning and the JVM ends."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        (tmp_path / "openlineage.yml").write_text(http_config(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=60),
                                                  encoding="utf-8")
        started = time.monotonic()
        result = run_probe(plugin, ["emit", "word-count", "jdbc:sqlite:/abs/catalog.db"], cwd=tmp_path,
                           env={"HOME": str(tmp_path)}, timeout=120)
        elapsed = time.monotonic() - started
    assert result.stdout.startswith("queued ")
    assert "2 OpenLineage event(s) still unsent after 10 s are dropped" in result.stderr, result.stderr
    assert 9.5 < elapsed < 60, elapsed  # it waited, and no longer than the bound plus a JVM's start


# --- Spark SQL epochs ---------------------------------------------------------------------------------------
@dataclass
class Lake:
    cc: ConsistentCatalog
    spark: Any
    config: Path
    """The driver's OPENLINEAGE_CONFIG (written or removed by each test)."""
    cwd: Path
    home: Path

    def point_at(self, url: str | None, **http: Any) -> None:
        """The JVM's next epochs send to ``url`` (None: no configuration file at all)."""
        if url is None:
            self.config.unlink(missing_ok=True)
        else:
            self.config.write_text(http_config(url, **http), encoding="utf-8")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, plugin: Path) -> Iterator[Lake]:
    root = tmp_path_factory.mktemp("sql-writer-openlineage")
    for directory in ("cwd", "home"):
        (root / directory).mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    driver_env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("OPENLINEAGE")}
    driver_env.update(OPENLINEAGE_CONFIG=str(root / "openlineage.yml"), OPENLINEAGE_NAMESPACE=JOB_NAMESPACE,
                      HOME=str(root / "home"))
    with session_in_own_jvm(f"sqlite:///{root}/catalog.db", root / "warehouse", env=driver_env, cwd=root / "cwd",
                            app_name="test-sql-writer-openlineage") as spark:
        yield Lake(ConsistentCatalog(catalog), spark, root / "openlineage.yml", root / "cwd", root / "home")


@pytest.fixture
def ns(lake: Lake, request: pytest.FixtureRequest) -> str:
    name = "ol_" + request.node.name.replace("test_", "")[:40]
    lake.cc.catalog.create_namespace(name)
    lake.cc.catalog.create_table(f"{name}.words", schema=WORDS)
    lake.cc.catalog.create_table(f"{name}.word_counts", schema=COUNTS)
    for key in ("job", "takeover", "lease", "ingestKey", "eventTimeColumn"):
        lake.spark.conf.unset(f"spark.sql.consistent.{key}")
    return name


@pytest.fixture
def collector(lake: Lake) -> Iterator[Collector]:
    """A collector the JVM's epochs send to for this test."""
    with Collector() as found:
        lake.point_at(found.url)
        yield found
    lake.point_at(None)


def published(cc: ConsistentCatalog, table: str) -> tuple[int, dict[str, str]]:
    """Main's snapshot id and summary (pyiceberg)."""
    snapshot = cc.catalog.load_table(table).metadata.snapshot_by_name("main")
    return snapshot.snapshot_id, summary(snapshot)


def epoch_facet(event: dict[str, Any]) -> dict[str, Any]:
    return event["run"]["facets"]["consistentCatalog_epoch"]


def sender_running(lake: Lake) -> bool:
    threads = _jvm.jvm(lake.spark).java.lang.Thread.getAllStackTraces().keySet().toArray()
    return any(t.getName() == SENDER_THREAD for t in threads)


def test_nothing_is_sent_until_configured_and_the_cwd_and_home_files_count(lake: Lake, ns: str) -> None:
    """First in the module: with no configuration the JVM starts no sending thread at all (as Python imports nothing).
    Then ``./openlineage.yml`` in the driver's working directory, then ``~/.openlineage/openlineage.yml``."""
    cc, spark = lake.cc, lake.spark
    sender_before = sender_running(lake)
    lake.point_at(None)
    ingest(cc, ns, "a")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, overwrite(ns))
    assert len([s for s in main_chain(cc, f"{ns}.word_counts") if P.ATTEMPT in summary(s)]) == 1
    if not sender_before:
        assert not sender_running(lake)
    files = [lake.cwd / "openlineage.yml", lake.home / ".openlineage" / "openlineage.yml"]
    try:
        with Collector() as found:
            for number, file in enumerate(files, start=1):
                file.parent.mkdir(exist_ok=True)
                file.write_text(http_config(found.url), encoding="utf-8")
                barrier = ingest(cc, ns, f"w{number}")
                sql(spark, overwrite(ns))
                events = found.wait_for(2 * number)
                assert [epoch_facet(e)["barrier"] for e in events[-2:]] == [barrier, barrier]
                file.unlink()
        assert len(found.events) == 4  # the unconfigured epoch sent nothing anywhere
    finally:
        for file in files:
            file.unlink(missing_ok=True)


def test_an_sql_epoch_sends_start_and_complete_matching_what_it_published(
    lake: Lake, ns: str, collector: Collector,
) -> None:
    cc, spark = lake.cc, lake.spark
    ingest(cc, ns, "a", "b", "a")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, overwrite(ns))
    start, complete = collector.wait_for(2)
    for event in (start, complete):
        validate(event)
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert set(collector.paths) == {"/api/v1/lineage"}
    sink, source = f"{ns}.word_counts", f"{ns}.words"
    snapshot_id, main = published(cc, sink)
    recorded = json.loads(main[P.SOURCES])  # the epoch's inputs as its publish recorded them
    assert recorded == {source: cc.catalog.load_table(source).metadata.current_snapshot_id}
    namespace = dataset_namespace("lake", cc.catalog.properties)  # the Python side's name of this catalog
    assert namespace == cc.catalog.properties["uri"]
    holder = cc.catalog.load_table(sink).metadata.properties[P.LEASE_HOLDER]
    for event in (start, complete):
        job = event["job"]
        assert (job["namespace"], job["name"], set(job["facets"])) == (JOB_NAMESPACE, "word-count", {"sql"})
        assert (job["facets"]["sql"]["query"], job["facets"]["sql"]["dialect"]) == (overwrite(ns), "spark")  # as sent
        (tag,) = event["run"]["facets"]["tags"]["tags"]  # the tags run facet, as Python's events carry one
        assert tag["key"] == "consistent_catalog_version" and tag["source"] == "CONSISTENT_CATALOG"
        for dataset in event["inputs"] + event["outputs"]:  # the columns, as pyiceberg reads the table's schema
            columns = [(f.name, str(f.field_type)) for f in cc.catalog.load_table(dataset["name"]).schema().fields]
            assert [(f["name"], f["type"]) for f in dataset["facets"]["schema"]["fields"]] == columns
        (inp,), (out,) = event["inputs"], event["outputs"]
        assert (inp["namespace"], inp["name"], out["namespace"], out["name"]) == (namespace, source, namespace, sink)
        assert inp["facets"]["version"]["datasetVersion"] == str(recorded[source])
        assert epoch_facet(event)["barrier"] == int(main[P.BARRIER])
        assert epoch_facet(event)["instance"] == holder
    assert "version" not in start["outputs"][0]["facets"]  # not published yet
    assert complete["outputs"][0]["facets"]["version"]["datasetVersion"] == str(snapshot_id)
    assert epoch_facet(start)["sinks"] == {sink: {"action": "stage"}}
    assert epoch_facet(complete)["sinks"] == {sink: {"action": "published", "attempt": main[P.ATTEMPT]}}


def test_explain_and_a_done_epoch_send_nothing_and_a_watermark_epoch_completes_at_mains_snapshot(
    lake: Lake, ns: str, collector: Collector,
) -> None:
    cc, spark = lake.cc, lake.spark
    first = ingest(cc, ns, "a")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, f"EXPLAIN {overwrite(ns)}")  # planned, never carried out: no run
    sql(spark, overwrite(ns))
    assert [e["eventType"] for e in collector.wait_for(2)] == ["START", "COMPLETE"]
    sql(spark, overwrite(ns))  # done: the sink holds the barrier already
    cc.advance_watermark(f"{ns}.words", first + 1000)  # an idle root moved on: the watermark alone
    sql(spark, overwrite(ns))
    events = collector.wait_for(4)
    start, complete = events[2:]  # in order: the done statement sent nothing before them
    for event in (start, complete):
        validate(event)
        assert epoch_facet(event)["barrier"] == first + 1000
    snapshot_id, main = published(cc, f"{ns}.word_counts")
    assert int(main[P.BARRIER]) == first  # the watermark moved, main did not
    assert epoch_facet(start)["sinks"] == {f"{ns}.word_counts": {"action": "watermark"}}
    assert epoch_facet(complete)["sinks"] == {f"{ns}.word_counts": {"action": "watermark"}}
    assert complete["outputs"][0]["facets"]["version"]["datasetVersion"] == str(snapshot_id)
    assert start["inputs"] == events[0]["inputs"]  # the same source snapshot at the later barrier
    time.sleep(0.5)
    assert len(collector.events) == 4


def test_a_statement_whose_query_fails_sends_fail_with_the_error(lake: Lake, ns: str, collector: Collector) -> None:
    cc, spark = lake.cc, lake.spark
    ingest(cc, ns, "a", "boom")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    with pytest.raises(Exception, match="the query broke on purpose"):
        sql(spark, overwrite(ns, BROKEN))
    start, fail = collector.wait_for(2)
    for event in (start, fail):
        validate(event)
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert start["run"]["runId"] == fail["run"]["runId"]
    error = fail["run"]["facets"]["errorMessage"]
    assert "the query broke on purpose" in error["message"] and error["programmingLanguage"] == "java"
    assert "\tat " in error["stackTrace"]
    assert epoch_facet(fail)["sinks"] == {f"{ns}.word_counts": {"action": "stage"}}
    assert "version" not in fail["outputs"][0]["facets"]
    assert [s for s in main_chain(cc, f"{ns}.word_counts") if P.ATTEMPT in summary(s)] == []  # nothing published


def test_a_plan_that_fails_sends_fail_alone(lake: Lake, ns: str, collector: Collector) -> None:
    """As EpochJob.run_epoch when ``plan`` raises: FAIL without START, inputs without versions, no epoch facet."""
    cc, spark = lake.cc, lake.spark
    ingest(cc, ns, "a")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, overwrite(ns))
    collector.wait_for(2)
    foreign = pa.table({"word": ["x"], "cnt": [1]}, schema=COUNTS.as_arrow())
    cc.catalog.load_table(f"{ns}.word_counts").append(foreign)  # written outside the job
    ingest(cc, ns, "b")
    message = error_of(spark, overwrite(ns))
    assert message.startswith("[CONSISTENT_CUT.UNTRACKED_WRITE]"), message
    fail = collector.wait_for(3)[2]
    validate(fail)
    assert fail["eventType"] == "FAIL" and fail["run"]["runId"] != collector.events[0]["run"]["runId"]
    assert set(fail["run"]["facets"]) == {"errorMessage", "tags"}
    assert fail["run"]["facets"]["errorMessage"]["message"].startswith("AnalysisException: [CONSISTENT_CUT.UNTRACKED_WRITE]")
    (source,) = fail["inputs"]
    assert (source["name"], source["inputFacets"], set(source["facets"])) == (f"{ns}.words", {}, {"schema"})  # no version


def test_an_sql_ingest_is_a_run_of_its_roots_ingest_job_validated_against_the_spec(
    lake: Lake, ns: str, collector: Collector,
) -> None:
    """Issue 34, item 7: a write into a root is an ingest, a run of the job ``ingest:<root>`` as Python's ingests are
    (START, COMPLETE with the snapshot landed, the root's columns, the statement and our ingest facet); a key that
    landed already writes nothing and sends nothing. Checked against the spec and pyiceberg's reading of the root."""
    cc, spark = lake.cc, lake.spark
    insert = f"INSERT INTO lake_consistent.{ns}.words VALUES ('a'), ('b')"
    sql(spark, "SET spark.sql.consistent.ingestKey=sql-batch-1")
    sql(spark, insert)
    sql(spark, insert)  # the same key: nothing written, no run
    sql(spark, "RESET spark.sql.consistent.ingestKey")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, overwrite(ns))
    events = collector.wait_for(4)
    time.sleep(0.5)
    assert len(collector.events) == 4, [(e["job"]["name"], e["eventType"]) for e in collector.events]
    for event in events:
        validate(event)
    words = f"{ns}.words"
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        (f"ingest:{words}", "START"), (f"ingest:{words}", "COMPLETE"), ("word-count", "START"), ("word-count", "COMPLETE")]
    start, complete = events[:2]
    assert start["run"]["runId"] == complete["run"]["runId"] and start["eventTime"] <= complete["eventTime"]
    landed = [s for s in main_chain(cc, words) if summary(s).get(P.INGEST_KEY) == "sql-batch-1"]
    assert len(landed) == 1
    (out,) = complete["outputs"]
    assert (out["name"], out["facets"]["version"]["datasetVersion"]) == (words, str(landed[0].snapshot_id))
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [
        (f.name, str(f.field_type)) for f in cc.catalog.load_table(words).schema().fields]
    assert complete["run"]["facets"]["consistentCatalog_ingest"] == {
        "_producer": "https://pypi.org/project/consistent-catalog/",
        "_schemaURL": "urn:consistent-catalog:openlineage:ConsistentCatalogIngestRunFacet:1-0-0",
        "barrier": int(summary(landed[0])[P.BARRIER]), "snapshot": landed[0].snapshot_id, "key": "sql-batch-1"}
    assert complete["job"]["facets"]["sql"]["query"] == insert and complete["inputs"] == []
    assert published(cc, f"{ns}.word_counts")[1][P.ATTEMPT] == epoch_facet(events[3])["sinks"][f"{ns}.word_counts"]["attempt"]


def test_an_unreachable_endpoint_fails_no_epoch(lake: Lake, ns: str) -> None:
    cc, spark = lake.cc, lake.spark
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lake.point_at(f"http://127.0.0.1:{port}", timeout=2)
    first = ingest(cc, ns, "a")
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, overwrite(ns))
    assert int(published(cc, f"{ns}.word_counts")[1][P.BARRIER]) == first
    with Collector() as found:  # the sending thread lives on: the next epoch's events arrive
        lake.point_at(found.url)
        second = ingest(cc, ns, "b")
        sql(spark, overwrite(ns))
        assert [epoch_facet(e)["barrier"] for e in found.wait_for(2)] == [second, second]
    lake.point_at(None)


def test_an_endpoint_that_never_answers_holds_no_epoch_up(lake: Lake, ns: str) -> None:
    """The endpoint takes START and does not answer (timeout 60 s): the statement returns and the epoch is published
    while START is still unanswered; COMPLETE waits behind it on the sending thread, in order."""
    cc, spark = lake.cc, lake.spark
    with Collector(hold=True) as held:
        lake.point_at(held.url, timeout=60)
        barrier = ingest(cc, ns, "a")
        sql(spark, "SET spark.sql.consistent.job=word-count")
        started = time.monotonic()
        sql(spark, overwrite(ns))
        elapsed = time.monotonic() - started
        assert int(published(cc, f"{ns}.word_counts")[1][P.BARRIER]) == barrier
        (start,) = held.wait_for(1)
        assert start["eventType"] == "START" and not held.released.is_set()
        assert len(held.events) == 1  # COMPLETE is queued behind the unanswered START
        held.release()
        assert [e["eventType"] for e in held.wait_for(2)] == ["START", "COMPLETE"]
    lake.point_at(None)
    assert elapsed < 30, elapsed  # generous: the statement never waited for the endpoint (timeout 60 s)


def test_a_republished_epoch_completes_with_the_attempt_that_staged_it(lake: Lake, ns: str, collector: Collector) -> None:
    """A Python job staged an epoch and stopped before publishing; the SQL statement publishes it as it is (§5.4)."""
    cc, spark = lake.cc, lake.spark
    ingest(cc, ns, "a", "b")
    words, counts = f"{ns}.words", f"{ns}.word_counts"

    def transform(ctx: Any) -> Any:
        return ctx.read(words).group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])

    with cc.job("word-count", sources=[words], sinks=[counts], transform=transform, mode="overwrite") as job:
        plan = job.plan()
        staged = job.stage(counts, plan, job.run_transform(plan)[counts])
    sql(spark, "SET spark.sql.consistent.job=word-count")
    sql(spark, overwrite(ns))
    start, complete = collector.wait_for(2)
    snapshot_id, main = published(cc, counts)
    assert main[P.ATTEMPT] == staged.attempt
    assert epoch_facet(start)["sinks"] == {counts: {"action": "publish-staged"}}
    assert epoch_facet(complete)["sinks"] == {counts: {"action": "republished", "attempt": staged.attempt}}
    assert complete["outputs"][0]["facets"]["version"]["datasetVersion"] == str(snapshot_id)


def structure(value: Any) -> Any:
    """The keys and value types of an event, recursively (lists item by item)."""
    if isinstance(value, dict):
        return {key: structure(item) for key, item in value.items()}
    if isinstance(value, list):
        return [structure(item) for item in value]
    return type(value).__name__


def test_python_and_jvm_epochs_send_events_of_the_same_structure(
    lake: Lake, ol_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """The same job (word count, demo.words -> demo.word_counts) as a SQL statement and as a Python EpochJob: START,
    COMPLETE, then a failing epoch's START and FAIL have the same keys, facets and value types. Only the client's own
    tag (its version) is Python's alone, and the statement's ``sql`` job facet the JVM's (the Python transform is a
    function)."""
    cc, spark = lake.cc, lake.spark
    tables = ("demo.words", "demo.word_counts")
    cc.catalog.create_namespace("demo")
    for name, schema in zip(tables, (WORDS, COUNTS), strict=True):
        cc.catalog.create_table(name, schema=schema)
    spark.conf.unset("spark.sql.consistent.job")
    with Collector() as found:
        lake.point_at(found.url)
        ingest(cc, "demo", "a", "b")
        sql(spark, "SET spark.sql.consistent.job=word-count")
        sql(spark, overwrite("demo"))
        ingest(cc, "demo", "boom")
        error_of(spark, overwrite("demo", BROKEN))
        jvm_events = found.wait_for(4)
    lake.point_at(None)

    def broken(ctx: Any) -> Any:
        raise ValueError("the transform broke on purpose")

    python_cc = ConsistentCatalog(SqlCatalog("py", uri=f"sqlite:///{tmp_path}/py.db", warehouse=f"file://{tmp_path}/wh"))
    python_cc.catalog.create_namespace("demo")
    for name, schema in zip(tables, (WORDS, COUNTS), strict=True):
        python_cc.catalog.create_table(name, schema=schema)
    with Collector() as found:
        monkeypatch.setenv("OPENLINEAGE_URL", found.url)
        monkeypatch.setenv("OPENLINEAGE_NAMESPACE", JOB_NAMESPACE)
        ingest(python_cc, "demo", "a", "b")
        with python_cc.job("word-count", sources=[tables[0]], sinks=[tables[1]], transform=count_words,
                           mode="overwrite") as job:
            job.run_epoch()
        ingest(python_cc, "demo", "c")
        with python_cc.job("word-count", sources=[tables[0]], sinks=[tables[1]], transform=broken,
                           mode="overwrite") as job, pytest.raises(ValueError):
            job.run_epoch()
        python_events = [e for e in found.wait_for(8) if not e["job"]["name"].startswith("ingest:")]  # 2 ingest runs
    for python_event, jvm_event in zip(python_events, jvm_events, strict=True):
        validate(jvm_event)
        python_tags = {t["key"]: t for t in python_event["run"]["facets"].pop("tags")["tags"]}
        jvm_tags = {t["key"]: t for t in jvm_event["run"]["facets"].pop("tags")["tags"]}
        assert set(python_tags) == {"openlineage_client_version", "consistent_catalog_version"}  # the client's is Python's
        assert set(jvm_tags) == {"consistent_catalog_version"}
        assert jvm_tags["consistent_catalog_version"]["source"] == python_tags["consistent_catalog_version"]["source"]
        # a statement has its SQL (the sql job facet); the Python job's transform is a function, it has none
        assert jvm_event["job"]["facets"].pop("sql")["query"] in (overwrite("demo"), overwrite("demo", BROKEN))
        assert structure(jvm_event) == structure(python_event), jvm_event["eventType"]
        for key in ("eventType", "producer", "schemaURL", "job"):
            assert jvm_event[key] == python_event[key]
        assert [d["name"] for d in jvm_event["inputs"] + jvm_event["outputs"]] == list(tables)
        jvm_sinks, python_sinks = epoch_facet(jvm_event)["sinks"], epoch_facet(python_event)["sinks"]
        assert jvm_sinks[tables[1]]["action"] == python_sinks[tables[1]]["action"]
    assert python_events[3]["run"]["facets"]["errorMessage"]["programmingLanguage"] == "python"


def test_a_streaming_epoch_through_lake_consistent_sends_start_and_complete(
    lake: Lake, ns: str, collector: Collector,
) -> None:
    """A plain streaming query with the option ``consistent.job`` (protocol §5.7): each micro-batch epoch with work is
    one run, its input at the snapshot the batch read and its output at main's snapshot (read with pyiceberg)."""
    cc, spark = lake.cc, lake.spark
    ingest(cc, ns, "a", "b", "a")
    sink, source = f"{ns}.word_counts", f"{ns}.words"
    query = (spark.readStream.table(f"lake_consistent.{source}").groupBy("word").count()
             .withColumnRenamed("count", "cnt").writeStream.outputMode("complete")
             .option("consistent.job", "word-count-stream")
             .option("checkpointLocation", str(lake.cwd / f"chk-{ns}")).trigger(availableNow=True)
             .toTable(f"lake_consistent.{sink}"))
    query.awaitTermination(120)
    start, complete = collector.wait_for(2)
    for event in (start, complete):
        validate(event)
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    snapshot_id, main = published(cc, sink)
    recorded = json.loads(main[P.SOURCES])
    for event in (start, complete):
        assert event["job"]["name"] == "word-count-stream"
        (inp,) = event["inputs"]
        assert inp["name"] == source and inp["facets"]["version"]["datasetVersion"] == str(recorded[source])
        assert epoch_facet(event)["barrier"] == int(main[P.BARRIER])
    assert complete["outputs"][0]["facets"]["version"]["datasetVersion"] == str(snapshot_id)
    assert epoch_facet(complete)["sinks"] == {sink: {"action": "published", "attempt": main[P.ATTEMPT]}}


def test_a_native_streaming_roots_batch_is_an_ingest_run(lake: Lake, ns: str, collector: Collector) -> None:
    """Issue 34, item 7: each micro-batch a streaming query lands in a root through ``lake_consistent`` is a run of
    ``ingest:<root>``, its key the batch's (``<query id>/<batch id>``), validated and checked against pyiceberg."""
    cc, spark = lake.cc, lake.spark
    arriving = lake.cwd / f"arriving-{ns}"
    arriving.mkdir()
    (arriving / "1.json").write_text('{"word": "stream"}\n{"word": "lineage"}\n', encoding="utf-8")
    query = (spark.readStream.schema("word string").json(str(arriving)).writeStream
             .option("checkpointLocation", str(lake.cwd / f"chk-root-{ns}")).trigger(availableNow=True)
             .toTable(f"lake_consistent.{ns}.words"))
    query.awaitTermination(120)
    start, complete = collector.wait_for(2)
    for event in (start, complete):
        validate(event)
    words = f"{ns}.words"
    assert [(e["job"]["name"], e["eventType"]) for e in (start, complete)] == [
        (f"ingest:{words}", "START"), (f"ingest:{words}", "COMPLETE")]
    (landed,) = [s for s in main_chain(cc, words) if P.INGEST_KEY in summary(s)]
    facet = complete["run"]["facets"]["consistentCatalog_ingest"]
    assert (facet["snapshot"], facet["barrier"], facet["key"]) == (
        landed.snapshot_id, int(summary(landed)[P.BARRIER]), summary(landed)[P.INGEST_KEY])
    assert facet["key"] == f"{query.id}/0"
    assert complete["outputs"][0]["facets"]["version"]["datasetVersion"] == str(landed.snapshot_id)
    assert "sql" not in complete["job"]["facets"]  # a DataFrame write has no statement text
