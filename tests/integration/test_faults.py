"""Catalog faults settled inside the library (protocol §6.8), against real servers and real faults.

The pipeline of ``tests/harness/pipeline.py`` (keyed root ingests, two chained epoch jobs, a pin, a
revision, an expiry) runs through each fault; what landed is then checked through another, direct
client with plain pyiceberg: every key and every barrier exactly once, the resolved cut consistent.

- the REST server behind ``FaultProxy``: a quarter of commits lost (applied, 504), refused (503, 429),
  slow past the client's timeout, or reset before or after the server applied them; loads too;
- PostgreSQL restarted mid-pipeline; the REST server killed (-9) and started again mid-pipeline; a
  second process holding SQLite's write lock for longer than SQLite's own busy timeout;
- past the deadline: one ``CatalogUnavailableError`` (the CLI: one line, exit 75) that names the catalog
  and says whether anything landed, and nothing half-done.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.sql import SqlCatalog

from consistent_catalog import ConsistentCatalog
from consistent_catalog.exceptions import CatalogUnavailableError
from tests.harness.fault_proxy import FaultProxy
from tests.harness.lake import sqlite_catalog, words
from tests.harness.pipeline import WORDS, Pipeline, check, create_tables
from tests.harness.rest_server import RestCatalogServer, rest_server_fixture
from tests.harness.servers import PostgresServer, postgres_sql_catalog

#: a quarter of commits faulted, every kind; some loads too
RULES = {
    "commit": {"lost": 0.12, "refuse": 0.04, "throttle": 0.02, "slow": 0.02, "reset_before": 0.02, "reset_after": 0.03},
    "load": {"lost": 0.03, "refuse": 0.04, "reset_after": 0.02},
}


#: a REST server that advertises an idempotency-key-lifetime and applies each Idempotency-Key once
keyed_rest_server = rest_server_fixture(scope="module", name="keyed_rest_server", idempotency_key_lifetime="PT10M")


def run(pipeline: Pipeline, rounds: int = 8, during=None) -> None:  # noqa: ANN001
    """``rounds`` rounds with a pin after round 2, a revision to round 4 after round 5 and an expiry after
    round 6; ``during(round)`` runs before each round (a fault to start)."""
    with pipeline:
        for r in range(rounds):
            if during is not None:
                during(r)
            pipeline.run_round()
            if r == 2:
                pipeline.pin()
            if r == 5:
                pipeline.revise_to(4)
            if r == 6:
                pipeline.expire()


def through(proxy: FaultProxy, catalog, **properties: str) -> ConsistentCatalog:  # noqa: ANN001
    """``catalog``'s REST catalog, its requests through ``proxy``."""
    return ConsistentCatalog(load_catalog(catalog.name, **{**catalog.properties, "uri": proxy.uri,
                                                           "consistent.request-timeout": "1s", **properties}))


@pytest.mark.parametrize(("server", "seed"), [("rest_server", 1), ("rest_server", 2), ("keyed_rest_server", 1)])
def test_a_pipeline_through_a_catalog_that_loses_refuses_and_drops_a_quarter_of_commits(
    request: pytest.FixtureRequest, tmp_path: Path, server: str, seed: int
) -> None:
    """On our server as the suite runs it (no key: lost answers read back) and started with an
    idempotency-key-lifetime (every commit keyed, resent under its key before any read-back)."""
    rest_server: RestCatalogServer = request.getfixturevalue(server)
    direct = rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    create_tables(direct)
    with FaultProxy(rest_server.port, seed=seed, rules=RULES, slow_seconds=2.0) as proxy:
        cc = through(proxy, direct)
        pipeline = Pipeline(cc, seed=seed)
        run(pipeline)  # any error reaching the caller fails here
        commits = sum(n for (route, _), n in proxy.counts.items() if route == "commit")
        faulted = sum(n for (route, kind), n in proxy.counts.items() if route == "commit" and kind != "pass")
    assert commits >= 40 and faulted / commits >= 0.15, proxy.counts
    assert proxy.counts["commit", "lost"] >= 3  # applied without an answer: each had to be found
    assert cc.store.fault_log.unknown >= proxy.counts["commit", "lost"]
    keyed = [key is not None for route, key in proxy.keys if route == "commit"]
    assert all(keyed) if rest_server.idempotency_key_lifetime else not any(keyed)
    assert check(direct, pipeline.expected) == []


def test_past_the_deadline_one_error_names_the_catalog_and_says_nothing_landed(
    rest_server: RestCatalogServer, tmp_path: Path
) -> None:
    direct = rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    create_tables(direct)
    before = direct.load_table(WORDS).metadata_location
    with FaultProxy(rest_server.port, rules={"commit": {"refuse": 1.0}}) as proxy:
        cc = through(proxy, direct, **{"consistent.retry-deadline": "1s"})
        with pytest.raises(CatalogUnavailableError) as raised:
            cc.ingest(WORDS, words("a"), barrier=1_000, key="k1")
        assert proxy.counts["commit", "refuse"] >= 2  # retried before giving up
    error = raised.value
    assert error.catalog == "lake" and error.landed == "no"
    assert "catalog 'lake'" in str(error) and "landed: no" in str(error) and "consistent.retry-deadline" in str(error)
    assert direct.load_table(WORDS).metadata_location == before  # nothing half-done


class LoseThenGoDown(FaultProxy):
    """Applies the first commit and loses its answer, then answers nothing but 503: the read-back never comes."""

    def _decide(self, method: str, path: str, target: str | None = None) -> tuple[str, str]:
        route, kind = super()._decide(method, path, target)
        if kind == "lost":
            self.down()
        return route, kind


def test_an_outcome_that_stays_unknown_names_the_snapshot_to_look_for(rest_server: RestCatalogServer, tmp_path: Path) -> None:
    direct = rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    create_tables(direct)
    with LoseThenGoDown(rest_server.port, rules={"commit": {"lost": 1.0}}) as proxy:
        # 3 s: time for two read-backs on a loaded machine (in 1 s a slow first one could be the only one)
        cc = through(proxy, direct, **{"consistent.retry-deadline": "3s"})
        with pytest.raises(CatalogUnavailableError) as raised:
            cc.ingest(WORDS, words("a"), barrier=1_000)  # unkeyed: never sent again without a read-back
        assert proxy.counts["commit", "lost"] == 1 and proxy.counts["commit", "pass"] == 0
        assert proxy.counts["load", "down"] >= 2  # it kept looking until the deadline
    error = raised.value
    assert error.landed == "unknown"
    snapshots = direct.load_table(WORDS).metadata.snapshots
    assert len(snapshots) == 1  # applied once (by the lost attempt), never sent again
    assert f"snapshot {snapshots[0].snapshot_id}" in str(error) and f"consistent-catalog history {WORDS}" in str(error)


def test_a_lost_answer_is_found_and_not_sent_again(rest_server: RestCatalogServer, tmp_path: Path) -> None:
    direct = rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    create_tables(direct)
    with FaultProxy(rest_server.port, rules={"commit": {"lost": 1.0}}) as proxy:
        cc = through(proxy, direct)
        result = cc.ingest(WORDS, words("a", "b"), barrier=1_000)  # unkeyed: only the read-back can tell
        assert proxy.counts["commit", "lost"] == 1 and proxy.counts["commit", "pass"] == 0
        # a server that advertises no idempotency-key-lifetime gets no key, and the lost answer is read back
        lost = next(i for i, event in enumerate(proxy.events) if event[3] == "lost")
        assert proxy.keys[lost] == ("commit", None) and proxy.events[lost + 1][0] == "load"
    table = direct.load_table(WORDS)
    assert [s.snapshot_id for s in table.metadata.snapshots] == [result.snapshot_id]
    assert table.scan().to_arrow().num_rows == 2


def test_a_lost_answer_is_settled_by_the_server_under_the_commit_s_idempotency_key(
    keyed_rest_server: RestCatalogServer, tmp_path: Path
) -> None:
    """A server that advertises an idempotency-key-lifetime (protocol §6.8): every commit carries a key of its own
    (a UUIDv7), each commit's answer is lost once after the server applied it, and the client sends it again with
    the same key before any read-back; the server answers what it answered first, so it lands once."""
    import uuid

    direct = keyed_rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    create_tables(direct)
    with FaultProxy(keyed_rest_server.port, lose_first_of_each_key=True) as proxy:
        cc = through(proxy, direct)
        first = cc.ingest(WORDS, words("a", "b"), barrier=1_000)  # unkeyed: a blind resend would land it twice
        second = cc.ingest(WORDS, words("c"), barrier=2_000)
        events, keys = list(proxy.events), list(proxy.keys)
    sent = [(i, key) for i, (route, key) in enumerate(keys) if route == "commit"]
    assert len(sent) >= 4 and all(key is not None and uuid.UUID(key).version == 7 for _, key in sent)
    seen: set[str | None] = set()
    for i, key in sent:
        if key in seen:
            continue
        seen.add(key)
        assert events[i][3] == "lost", events  # the first send: applied, answer lost
        assert keys[i + 1] == ("commit", key) and events[i + 1][3] == "pass", events  # resent at once: no read-back
    assert [key for _, key in sent] == [key for key in dict.fromkeys(k for _, k in sent) for _ in range(2)]
    table = direct.load_table(WORDS)  # recounted by a client of its own, straight to the server
    assert [s.snapshot_id for s in table.metadata.snapshots] == [first.snapshot_id, second.snapshot_id]
    assert sorted(r["word"] for r in table.scan().to_arrow().to_pylist()) == ["a", "b", "c"]


def test_the_server_applies_a_key_once_and_refuses_it_for_another_request(keyed_rest_server: RestCatalogServer,
                                                                          tmp_path: Path) -> None:
    """Our REST server's side of Idempotency-Key: the lifetime in its config, a repeat answered with the first
    answer (not applied again: no 409), the same key with another body refused with 422 and not applied."""
    import requests

    warehouse = f"file://{tmp_path}/warehouse"
    config = requests.get(f"{keyed_rest_server.uri}/v1/config", params={"warehouse": warehouse}, timeout=30).json()
    assert config["idempotency-key-lifetime"] == "PT10M"
    url = f"{keyed_rest_server.uri}/v1/{config['overrides']['prefix']}/namespaces"
    key = {"Idempotency-Key": "0190b1c2-0000-7000-8000-000000000001"}
    first = requests.post(url, json={"namespace": ["once"]}, headers=key, timeout=30)
    again = requests.post(url, json={"namespace": ["once"]}, headers=key, timeout=30)
    unkeyed = requests.post(url, json={"namespace": ["once"]}, timeout=30)
    other = requests.post(url, json={"namespace": ["other"]}, headers=key, timeout=30)
    assert (first.status_code, again.status_code, again.json()) == (200, 200, first.json())
    assert unkeyed.status_code == 409  # applied again without a key: it exists
    assert other.status_code == 422 and "Idempotency-Key" in other.json()["error"]["message"]
    listed = requests.get(url, timeout=30).json()["namespaces"]
    assert listed == [["once"]]


def test_a_503_after_the_server_applied_the_commit_is_found_not_doubled(rest_server: RestCatalogServer,
                                                                        tmp_path: Path) -> None:
    """A gateway may answer 503 after forwarding: the commit is looked for, not sent again blindly (an unkeyed
    ingest would land twice), and the refusal of a resend does not delete the files of the landed attempt."""
    direct = rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    create_tables(direct)
    with FaultProxy(rest_server.port, rules={"commit": {"lost_503": 1.0}}) as proxy:
        cc = through(proxy, direct)
        result = cc.ingest(WORDS, words("a", "b"), barrier=1_000)  # unkeyed
        assert proxy.counts["commit", "lost_503"] == 1
    table = direct.load_table(WORDS)
    assert [s.snapshot_id for s in table.metadata.snapshots] == [result.snapshot_id]
    assert sorted(r["word"] for r in table.scan().to_arrow().to_pylist()) == ["a", "b"]  # its files are all there


def test_the_table_returned_after_a_lost_answer_is_the_one_the_commit_made(rest_server: RestCatalogServer,
                                                                          tmp_path: Path) -> None:
    """Another client's property commit lands between the plan and the commit (it moves no ref, so the commit's
    requirements still hold): the table handed back is the metadata file holding our snapshot, not the one after
    the planned file."""
    from pyiceberg.table.update import SetPropertiesUpdate

    direct = rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    create_tables(direct)
    with FaultProxy(rest_server.port) as proxy:
        cc = through(proxy, direct)
        planned = cc.store.load_table(WORDS)
        other = direct.load_table(WORDS)
        direct.commit_table(other, (), (SetPropertiesUpdate(updates={"owner": "someone else"}),))
        proxy.set_rules({"commit": {"lost": 1.0}})
        committed = cc.store.write(planned, [], lambda tx: tx.append(words("x")), what="appending x")
        proxy.set_rules(None)
    assert committed is not None and committed.metadata.current_snapshot() is not None
    now = direct.load_table(WORDS)
    assert committed.metadata_location == now.metadata_location  # nothing after it: the newest file is ours
    assert committed.metadata.current_snapshot().snapshot_id == now.metadata.current_snapshot().snapshot_id
    assert committed.metadata.properties.get("owner") == "someone else"


def cli_status(proxy: FaultProxy, direct, *, deadline: str) -> subprocess.CompletedProcess:  # noqa: ANN001
    """``consistent-catalog status demo.words`` in a process of its own, its catalog ``lake`` behind ``proxy``."""
    env = {**os.environ, "PYICEBERG_CATALOG__LAKE__TYPE": "rest", "PYICEBERG_CATALOG__LAKE__URI": proxy.uri,
           "PYICEBERG_CATALOG__LAKE__WAREHOUSE": direct.properties["warehouse"],
           "PYICEBERG_CATALOG__LAKE__CONSISTENT__RETRY_DEADLINE": deadline}
    return subprocess.run([sys.executable, "-m", "consistent_catalog", "--catalog", "lake", "status", WORDS],
                          capture_output=True, text=True, env=env, timeout=120)


def test_the_cli_prints_one_line_and_exits_75_when_the_catalog_stays_down(rest_server: RestCatalogServer,
                                                                          tmp_path: Path) -> None:
    direct = rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    create_tables(direct)
    with FaultProxy(rest_server.port) as proxy:
        proxy.down()
        done = cli_status(proxy, direct, deadline="1s")
    assert done.returncode == 75, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: catalog 'lake' did not answer"), done.stderr
    assert "landed: no" in lines[0]


def test_the_cli_says_it_is_waiting_then_gives_up_naming_the_table_it_read(rest_server: RestCatalogServer,
                                                                           tmp_path: Path) -> None:
    direct = rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    create_tables(direct)
    with FaultProxy(rest_server.port, rules={"load": {"refuse": 1.0}}) as proxy:
        done = cli_status(proxy, direct, deadline="2s")
    assert done.returncode == 75, done
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(f"warning: catalog fault (unavailable) on loading {WORDS}: ServiceUnavailableError")
    assert lines[0].endswith("; retrying") and len(lines) <= 3  # one warning every 10 s, not one per attempt
    assert lines[-1].startswith(f"error: catalog 'lake' did not answer loading {WORDS} for 2 s"), done.stderr
    assert "landed: no" in lines[-1] and done.stdout == ""


def test_a_rest_answer_that_never_comes_times_out_at_the_catalog_property(rest_server: RestCatalogServer,
                                                                          tmp_path: Path) -> None:
    import requests

    direct = rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    create_tables(direct)
    with FaultProxy(rest_server.port, rules={"load": {"slow": 1.0}}, slow_seconds=3.0) as proxy:
        faulty = load_catalog(direct.name, **{**direct.properties, "uri": proxy.uri,
                                              "consistent.request-timeout": "500ms"})
        ConsistentCatalog(faulty)  # pyiceberg sets no timeout: the library gives the session one
        with pytest.raises(requests.exceptions.ReadTimeout):
            faulty.load_table(WORDS)


# --- servers that go away ------------------------------------------------------------------------------
def test_postgresql_restarted_mid_pipeline(tmp_path: Path) -> None:
    try:
        # durable (fsync, synchronous commits), as a production server is: the session's fast server
        # loses its last acknowledged commits when it crashes, which no client can make good
        server = PostgresServer.start(fast=False)
    except FileNotFoundError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
    try:
        catalog = postgres_sql_catalog(server, tmp_path / "warehouse")
        create_tables(catalog)
        cc = ConsistentCatalog(catalog)
        pipeline = Pipeline(cc, seed=3)
        restarts: list[threading.Thread] = []

        def restart(r: int) -> None:
            if r in (2, 5):  # stopped and started again while the round runs
                thread = threading.Thread(target=server.restart, kwargs={"down_seconds": 2.0})
                thread.start()
                restarts.append(thread)

        run(pipeline, during=restart)
        for thread in restarts:
            thread.join(60)
        assert server.restarts == 2
        assert cc.store.fault_log.total >= 1  # the restarts were met, not missed
        direct = SqlCatalog("lake", uri=catalog.properties["uri"], warehouse=catalog.properties["warehouse"])
        assert check(direct, pipeline.expected) == []
        catalog.engine.dispose()
        direct.engine.dispose()
    finally:
        server.stop()


def test_rest_server_killed_and_started_again_mid_pipeline(tmp_path: Path) -> None:
    home = tmp_path / "server"
    server = RestCatalogServer(home).start()
    port = server.port
    try:
        direct_props = server.catalog_properties(f"file://{tmp_path}/warehouse")
        create_tables(server.catalog(warehouse=f"file://{tmp_path}/warehouse"))
        cc = ConsistentCatalog(load_catalog("lake", **direct_props))
        pipeline = Pipeline(cc, seed=4)
        state = {"server": server}

        def kill_and_restart(r: int) -> None:
            if r == 3:
                state["server"]._process.kill()  # -9: no shutdown hook
                state["server"].stop()

                def again() -> None:
                    time.sleep(1.0)
                    state["server"] = RestCatalogServer(home, port=port).start()

                threading.Thread(target=again).start()

        run(pipeline, during=kill_and_restart)
        assert cc.store.fault_log.total >= 1
        assert check(load_catalog("check", **direct_props), pipeline.expected) == []
    finally:
        state["server"].stop()
        server.stop()


def test_a_second_process_holding_sqlite_s_write_lock(tmp_path: Path) -> None:
    catalog = sqlite_catalog(tmp_path)
    create_tables(catalog)
    database = catalog.properties["uri"].removeprefix("sqlite:///")
    cc = ConsistentCatalog(catalog)
    pipeline = Pipeline(cc, seed=5)
    holders: list[subprocess.Popen] = []
    hold = ("import sqlite3, sys, time\n"
            "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "con.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(float(sys.argv[2]))\n"
            "con.execute('COMMIT')\n")

    def lock(r: int) -> None:
        if r in (1, 4):  # longer than SQLite's own busy timeout (5 s): pyiceberg gets "database is locked"
            holder = subprocess.Popen([sys.executable, "-c", hold, database, "7"], stdout=subprocess.PIPE, text=True)
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            holders.append(holder)

    run(pipeline, during=lock)
    for holder in holders:
        assert holder.wait(30) == 0
    assert cc.store.fault_log.unavailable >= 1  # the lock was met and waited out
    direct = SqlCatalog("lake", uri=catalog.properties["uri"], warehouse=catalog.properties["warehouse"])
    assert check(direct, pipeline.expected) == []
    with sqlite3.connect(database) as con:  # the catalog's pointer rows are intact
        assert con.execute("select count(*) from iceberg_tables").fetchone()[0] == 3


def test_pipeline_module_checks_can_fail(tmp_path: Path) -> None:
    """The checker is not vacuous: a doubled ingest and a second attempt of a barrier are reported."""
    catalog = sqlite_catalog(tmp_path)
    create_tables(catalog)
    cc = ConsistentCatalog(catalog)
    pipeline = Pipeline(cc, seed=6)
    run(pipeline, rounds=2)
    assert check(catalog, pipeline.expected) == []
    table = catalog.load_table(WORDS)
    table.append(words("w0"))  # a row nobody expects (untracked: also not a key)
    assert any("words at main" in p for p in check(catalog, pipeline.expected))
    expected = dict(pipeline.expected)
    expected["batch-9"] = ["w1"]
    assert any("batch-9 is on main 0 times" in p for p in check(catalog, expected))


def test_a_continuously_running_job_carries_on_through_faults_and_says_what_it_settled(
    rest_server: RestCatalogServer, tmp_path: Path
) -> None:
    from consistent_catalog.demo import count_words
    from tests.harness.pipeline import COUNTS

    direct = rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    create_tables(direct)
    with FaultProxy(rest_server.port, seed=9, rules={"commit": {"lost": 0.3, "reset_after": 0.2}}) as proxy:
        cc = through(proxy, direct)
        for i in range(4):
            cc.ingest(WORDS, words("a", f"w{i}"), barrier=1_000 * (i + 1), key=f"k{i}")
        lines: list[str] = []
        with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite") as job:
            results = []
            for i in range(4, 8):  # a new batch before each epoch: every epoch has work
                cc.ingest(WORDS, words("a", f"w{i}"), barrier=1_000 * (i + 1), key=f"k{i}")
                results += job.run_continuously(0.0, max_epochs=1, echo=lines.append)
    assert [r.barrier for r in results] == [5_000, 6_000, 7_000, 8_000]
    assert sum(r.faults for r in results) >= 1 and proxy.counts["commit", "lost"] >= 1
    assert any("catalog fault" in line and "settled" in line for line in lines), lines
    counts = {r["word"]: r["cnt"] for r in direct.load_table(COUNTS).scan().to_arrow().to_pylist()}
    assert counts == {"a": 8, **{f"w{i}": 1 for i in range(8)}}
