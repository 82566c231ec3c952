"""Spark on an Iceberg REST catalog (``spark.sql.catalog.lake.type=rest``), shared with pyiceberg's RestCatalog.

One SparkSession (local[2]) for the module, on the session's Java REST server (``tests/harness/rest_server.py``):
the module has a catalog of its own there (a REST prefix chosen by its warehouse location), and each test
works in its own namespace. What Spark writes is read back with plain pyiceberg through the server, and the
server's catalog database is read with ``sqlite3`` to show the tables really live behind the REST server.

The epoch-job tests commit through the project's fencing; they pass once every commit carries only standard
Iceberg requirements (issue 13); until then the REST client refuses the project's custom requirement types.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA
from tests.harness.rest_server import rest_server_fixture

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def env(rest_server, tmp_path_factory):
    from consistent_catalog.spark.session import build_session, spark_conf

    root = tmp_path_factory.mktemp("spark-rest")
    warehouse = f"file://{root}/warehouse"
    conf = spark_conf(rest_server.uri, warehouse)
    assert conf["spark.sql.catalog.lake.type"] == "rest" and conf["spark.sql.catalog.lake.uri"] == rest_server.uri
    assert not any("jdbc" in jar for jar in conf["spark.jars"].split(",")), conf["spark.jars"]
    spark = build_session(rest_server.uri, warehouse, app_name="test-spark-rest")
    catalog = rest_server.catalog(warehouse=warehouse)
    yield rest_server, warehouse, catalog, spark
    spark.stop()


@pytest.fixture
def ns(env, request):
    """A namespace per test, created by pyiceberg (Spark sees it through the same server)."""
    _, _, catalog, _ = env
    name = "t_" + request.node.name.replace("test_", "")[:40]
    catalog.create_namespace(name)
    return name


def server_rows(server, warehouse: str) -> list[tuple[str, str]]:
    """``iceberg_tables`` of this module's catalog, read from the server's SQLite file with sqlite3."""
    with sqlite3.connect(server.sqlite_path(warehouse)) as db:
        return sorted(db.execute('SELECT "table_namespace", "table_name" FROM "iceberg_tables"').fetchall())


def test_spark_writes_and_pyiceberg_reads_through_the_rest_server(env, ns):
    server, warehouse, catalog, spark = env
    table = f"{ns}.events"
    spark.sql(f"CREATE TABLE lake.{table} (id bigint, word string) USING iceberg")
    data = [(i, f"w{i % 7}") for i in range(50)]
    (spark.createDataFrame(data, "id bigint, word string")
     .writeTo(f"lake.{table}").option("snapshot-property.written-by", "spark").append())

    # pyiceberg, through the same REST server, sees Spark's table, snapshot and rows
    loaded = catalog.load_table(table)
    snapshot = loaded.current_snapshot()
    assert snapshot is not None and snapshot.summary["written-by"] == "spark"
    got = sorted((r["id"], r["word"]) for r in loaded.scan().to_arrow().to_pylist())
    assert got == sorted(data)
    # the table lives in the REST server's catalog database, under this module's warehouse
    assert (ns, "events") in server_rows(server, warehouse)
    assert loaded.location().removeprefix("file://").startswith(warehouse.removeprefix("file://"))

    # and the other way round: a pyiceberg append is visible to Spark at once (cache-enabled=false)
    more = pa.table({"id": pa.array([100, 101], pa.int64()), "word": ["x", "y"]})
    loaded.append(more)
    counted = {r["word"]: r["n"] for r in spark.sql(f"SELECT word, count(*) AS n FROM lake.{table} GROUP BY word").collect()}
    assert counted == dict(Counter(w for _, w in data) + Counter(["x", "y"]))
    # Spark's snapshot ids are pyiceberg's: reading Spark's snapshot by id gives Spark's rows only
    at_spark = spark.read.format("iceberg").option("versionAsOf", str(snapshot.snapshot_id)).load(f"lake.{table}")
    assert at_spark.count() == len(data)


def test_spark_refs_and_procedures_over_rest(env, ns):
    """Branches, tags and a system procedure go through the REST server's commits too."""
    _, _, catalog, spark = env
    table = f"{ns}.tagged"  # not "refs": Spark reads lake.ns.refs as the refs metadata table of "ns"
    spark.sql(f"CREATE TABLE lake.{table} (id bigint) USING iceberg")
    spark.sql(f"INSERT INTO lake.{table} VALUES (1), (2)")
    first = catalog.load_table(table).current_snapshot().snapshot_id
    spark.sql(f"ALTER TABLE lake.{table} CREATE TAG first_cut")
    spark.sql(f"INSERT INTO lake.{table} VALUES (3)")
    refs = catalog.load_table(table).metadata.refs
    assert refs["first_cut"].snapshot_id == first and refs["main"].snapshot_id != first
    spark.sql(f"CALL lake.system.rollback_to_snapshot('{table}', {first})")
    assert catalog.load_table(table).current_snapshot().snapshot_id == first
    assert sorted(r.id for r in spark.sql(f"SELECT id FROM lake.{table} VERSION AS OF 'first_cut'").collect()) == [1, 2]


# --- epoch jobs (need the fencing with standard requirements, issue 13) -------------------------------------
def test_spark_epoch_job_publishes_tagged_epochs_over_rest(env, ns):
    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe

    server, warehouse, catalog, spark = env
    words, counts = f"{ns}.words", f"{ns}.word_counts"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    batches = [["a", "b", "a"], ["b", "c"]]
    first = ingest_dataframe(cc, spark.createDataFrame([(w,) for w in batches[0]], "word string"), words, barrier=1_000)
    job = SparkEpochJob(cc, spark, "count", sources=[words], sinks=[counts],
                        transform="SELECT word, count(*) AS cnt FROM words GROUP BY word", mode="overwrite")
    with job:
        assert job.run_epoch().actions == {counts: "published"}
        second = cc.ingest(words, pa.table({"word": batches[1]}), barrier=2_000)
        assert job.run_epoch().barrier == 2_000
    head = catalog.load_table(counts).metadata.snapshot_by_name("main")
    assert head.summary[P.BARRIER] == "2000" and head.summary[P.JOB] == "count"
    assert json.loads(head.summary[P.SOURCES]) == {words: second.snapshot_id}
    got = {r["word"]: r["cnt"] for r in catalog.load_table(counts).scan(snapshot_id=head.snapshot_id).to_arrow().to_pylist()}
    assert got == dict(Counter(batches[0] + batches[1]))
    cut = cc.resolve([words, counts], as_of=1_000)
    assert cut[words].snapshot_id == first.snapshot_id
    at_first = spark.read.format("iceberg").option("versionAsOf", str(cut[counts].snapshot_id)).load(f"lake.{counts}")
    assert {r["word"]: r["cnt"] for r in at_first.collect()} == dict(Counter(batches[0]))

    # the consistent catalog plugin reads the same REST catalog at the latest cut
    plugin = {r["word"]: r["cnt"] for r in spark.sql(f"SELECT word, cnt FROM lake_consistent.{counts}").collect()}
    assert plugin == got


def test_the_consistent_catalog_waits_out_a_failing_rest_catalog_then_names_it(env, ns):
    """The plugin's resolution through tests/harness/fault_proxy.py: loads and listings lost, refused or reset
    are retried (protocol §6.8) and the cut is the one pyiceberg resolves; a catalog down past the catalog
    option consistent.retry-deadline is one CONSISTENT_CUT.CATALOG_UNAVAILABLE error naming it."""
    from collections import Counter as Count

    from tests.harness.fault_proxy import FaultProxy

    server, warehouse, catalog, spark = env
    words, counts = f"{ns}.words", f"{ns}.word_counts"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    cc.ingest(words, pa.table({"word": ["a", "b", "a"]}), barrier=1_000)
    def count_words(ctx):  # noqa: ANN001, ANN202
        counted = Count(ctx.read(words).column("word").to_pylist())
        return pa.table({"word": list(counted), "cnt": pa.array(list(counted.values()), pa.int64())})

    with cc.job("count", sources=[words], sinks=[counts], transform=count_words, mode="overwrite") as job:
        job.run_epoch()
    cc.ingest(words, pa.table({"word": ["c"]}), barrier=2_000)  # not counted yet: the cut stays at 1000
    cut = cc.resolve([counts])
    expected = {r["word"]: r["cnt"]
                for r in catalog.load_table(counts).scan(snapshot_id=cut[counts].snapshot_id).to_arrow().to_pylist()}
    rules = {"load": {"lost": 0.25, "refuse": 0.15, "reset_after": 0.1}, "other": {"lost": 0.2, "reset_before": 0.1}}
    with FaultProxy(server.port, seed=5, rules=rules) as proxy:
        name = f"faulty_{ns}"[:60]
        settings = {"": "io.consistentcatalog.spark.ConsistentSparkCatalog", ".type": "rest", ".uri": proxy.uri,
                    ".warehouse": warehouse, ".cache-enabled": "false", ".plain-catalog": "lake",
                    ".consistent.retry-deadline": "5s",
                    ".rest.client.max-retries": "1"}  # Iceberg's own retries of 503/429/504: ours are tested
        proxy.set_rules(None)  # the catalog's own start (GET /v1/config) is Iceberg's, before any resolution
        for key, value in settings.items():
            spark.conf.set(f"spark.sql.catalog.{name}{key}", value)
        spark.sql(f"SHOW NAMESPACES IN {name}").collect()
        proxy.set_rules(rules)
        for _ in range(3):  # a fresh cut per statement: every one resolved through the faults
            got = {r["word"]: r["cnt"] for r in spark.sql(f"SELECT word, cnt FROM {name}.{counts}").collect()}
            assert got == expected == {"a": 2, "b": 1}
        faulted = sum(n for (route, kind), n in proxy.counts.items() if kind != "pass" and route in ("load", "other"))
        assert faulted >= 3, proxy.counts
        # a server failing at the request itself (a plain 500) is its error at once: not waited out for the
        # deadline, never taken for a missing table
        proxy.set_rules({"load": {"fail_500": 1.0}})
        with pytest.raises(Exception) as failed:
            spark.sql(f"SELECT word, cnt FROM {name}.{counts}").collect()
        assert "ServiceFailureException" in str(failed.value)
        assert "TABLE_NOT_FOUND" not in str(failed.value) and "CATALOG_UNAVAILABLE" not in str(failed.value)
        failed_paths = Count(path for _route, _method, path, kind in proxy.events if kind == "fail_500")
        assert failed_paths and max(failed_paths.values()) <= 2, failed_paths  # each table asked once or twice: no retry loop
        proxy.set_rules(rules)
        proxy.down()
        with pytest.raises(Exception, match=r"CONSISTENT_CUT.CATALOG_UNAVAILABLE\] catalog lake did not answer") as raised:
            spark.sql(f"SELECT word, cnt FROM {name}.{counts}").collect()
        assert "consistent.retry-deadline" in str(raised.value) and "\n" not in str(raised.value).split("\n")[0]


def test_a_spark_epoch_job_settles_spark_s_own_lost_commits(env, ns, caplog):
    """Spark's staged write goes through Iceberg's Java client, which raises CommitStateUnknownException for a
    commit answer it lost: the job reads the sink back, finds its attempt on consistent-staged and carries on
    (protocol §6.8). Every barrier is then published once, with the rows of one write."""
    import logging

    from consistent_catalog.spark.job import SparkEpochJob
    from tests.harness.fault_proxy import FaultProxy

    caplog.set_level(logging.DEBUG, logger="consistent_catalog.faults")
    server, warehouse, catalog, spark = env
    words, counts = f"{ns}.words", f"{ns}.word_counts"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    with FaultProxy(server.port, seed=2) as proxy:
        name = f"faulty_{ns}"[:60]
        for key, value in {"": "org.apache.iceberg.spark.SparkCatalog", ".type": "rest", ".uri": proxy.uri,
                           ".warehouse": warehouse, ".cache-enabled": "false"}.items():
            spark.conf.set(f"spark.sql.catalog.{name}{key}", value)
        from pyiceberg.catalog import load_catalog

        cc = ConsistentCatalog(load_catalog(catalog.name, **{**catalog.properties, "uri": proxy.uri}))
        batches = [["a", "b", "a"], ["b", "c"], ["c", "c", "d"]]
        job = SparkEpochJob(cc, spark, "count", sources=[words], sinks=[counts], spark_catalog=name,
                            transform="SELECT word, count(*) AS cnt FROM words GROUP BY word", mode="overwrite")
        with job:
            for i, batch in enumerate(batches):
                cc.ingest(words, pa.table({"word": batch}), barrier=1_000 * (i + 1), key=f"k{i}")
                proxy.set_rules({"commit": {"lost": 1.0}})  # the next commit is Spark's staged write: its answer lost
                proxy.events.clear()
                try:
                    result = job.run_epoch()
                finally:
                    proxy.set_rules(None)
                assert result.actions == {counts: "published"} and result.faults >= 1
    settled = [r.getMessage() for r in caplog.records if f"on Spark's staged write of {counts}" in r.getMessage()]
    assert len(settled) == 3 and all("CommitStateUnknownException" in m for m in settled), settled
    head = catalog.load_table(counts).metadata.snapshot_by_name("main")
    assert head.summary[P.BARRIER] == "3000"
    got = {r["word"]: r["cnt"] for r in catalog.load_table(counts).scan(snapshot_id=head.snapshot_id).to_arrow().to_pylist()}
    assert got == dict(Counter(w for batch in batches for w in batch))
    attempts: dict[str, set[str]] = {}
    table = catalog.load_table(counts)
    snapshot = head
    while snapshot is not None:
        if snapshot.summary.get(P.BARRIER):
            attempts.setdefault(snapshot.summary[P.BARRIER], set()).add(snapshot.summary[P.ATTEMPT])
        snapshot = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    assert {b: len(a) for b, a in attempts.items()} == {"1000": 1, "2000": 1, "3000": 1}


def test_a_spark_zombie_is_fenced_over_rest(env, ns):
    from consistent_catalog.exceptions import FencedError
    from consistent_catalog.spark.job import SparkEpochJob, ingest_dataframe

    _, _, catalog, spark = env
    words, counts = f"{ns}.words", f"{ns}.word_counts"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    sql = "SELECT word, count(*) AS cnt FROM words GROUP BY word"
    ingest_dataframe(cc, spark.createDataFrame([("a",)], "word string"), words, barrier=1_000)
    zombie = SparkEpochJob(cc, spark, "count", sources=[words], sinks=[counts], transform=sql, mode="overwrite")
    zombie.register()
    zombie.run_epoch()
    ingest_dataframe(cc, spark.createDataFrame([("b",)], "word string"), words, barrier=2_000)
    plan = zombie.plan()
    staged = zombie.stage(counts, plan, zombie.run_transform(plan)[counts])

    # new input arrives; a new instance (its own catalog client) takes over: the zombie's staged epoch is
    # stale (its inputs moved), so the successor discards it and publishes barrier 3000 itself
    ingest_dataframe(cc, spark.createDataFrame([("c",)], "word string"), words, barrier=3_000)
    other = ConsistentCatalog(type(catalog)("lake", **catalog.properties))
    successor = SparkEpochJob(other, spark, "count", sources=[words], sinks=[counts], transform=sql, mode="overwrite",
                              takeover=True)
    with successor:
        assert successor.run_epoch().barrier == 3_000
    before = catalog.load_table(counts).metadata_location
    with pytest.raises(FencedError):
        zombie.publish(counts, plan, staged.base, staged.head)
    assert catalog.load_table(counts).metadata_location == before
    head = catalog.load_table(counts).metadata.snapshot_by_name("main")
    assert head.snapshot_id != staged.head and head.summary[P.BARRIER] == "3000"
    metadata, ancestry, current = catalog.load_table(counts).metadata, set(), head
    while current is not None:  # main's ancestry, walked by parent ids: the zombie's epoch is not on it
        ancestry.add(current.snapshot_id)
        current = metadata.snapshot_by_id(current.parent_snapshot_id) if current.parent_snapshot_id else None
    assert staged.head not in ancestry
    got = {r["word"]: r["cnt"] for r in catalog.load_table(counts).scan().to_arrow().to_pylist()}
    assert got == {"a": 1, "b": 1, "c": 1}


def test_rest_example_conf_names_the_settings_spark_ran_with(env):
    """spark-conf/rest.conf.example carries every setting this module's session was built with."""
    from consistent_catalog.spark.session import parse_spark_defaults, spark_conf

    server, warehouse, _, _ = env
    example = parse_spark_defaults(
        (Path(__file__).resolve().parents[2] / "spark-conf" / "rest.conf.example").read_text(encoding="utf-8"))
    used = spark_conf(server.uri, warehouse)
    assert sorted(set(used) - set(example)) == []
    assert {k: example[k] for k in used if "<" not in example[k] and k != "spark.jars"} == \
        {k: v for k, v in used.items() if "<" not in example[k] and k != "spark.jars"}


def test_sql_epochs_through_the_consistent_catalog_settle_lost_commit_answers(env, ns):
    """Protocol §5.9 over REST, every commit's answer lost once: registration, the staged branch's reset, Spark's
    fenced staged write and the publish each reach the server, their answers are replaced by a 504, and the
    plugin reads the table back, finds its commit and carries on (protocol §6.8). Every barrier then lands on
    main exactly once, with the rows of one write (recounted with pyiceberg)."""
    from tests.harness.fault_proxy import FaultProxy

    server, warehouse, catalog, spark = env
    words, counts = f"{ns}.words", f"{ns}.word_counts"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    with FaultProxy(server.port, seed=7) as proxy:
        name = f"lost_{ns}"[:50] + "_consistent"
        settings = {"": "io.consistentcatalog.spark.ConsistentSparkCatalog", ".type": "rest", ".uri": proxy.uri,
                    ".warehouse": warehouse, ".cache-enabled": "false", ".plain-catalog": "lake",
                    ".consistent.retry-deadline": "30s", ".rest.client.max-retries": "1"}
        for key, value in settings.items():
            spark.conf.set(f"spark.sql.catalog.{name}{key}", value)
        spark.sql(f"SHOW NAMESPACES IN {name}").collect()
        batches = [["a", "b", "a"], ["b", "c"], ["c", "c", "d"]]
        spark.conf.set("spark.sql.consistent.job", "sql-count")
        try:
            for i, batch in enumerate(batches):
                cc.ingest(words, pa.table({"word": batch}), barrier=1_000 * (i + 1))
                proxy.set_rules({"commit": {"lost": 1.0}})
                try:
                    spark.sql(f"INSERT OVERWRITE {name}.{counts} SELECT word, count(*) AS cnt FROM {name}.{words} "
                              "GROUP BY word").collect()
                finally:
                    proxy.set_rules(None)
        finally:
            spark.conf.unset("spark.sql.consistent.job")
        lost = sum(n for (route, kind), n in proxy.counts.items() if route == "commit" and kind == "lost")
        # every epoch's staged write and publish (and, once, the registration and the staged branch's creation)
        assert lost >= 2 * len(batches) + 2, proxy.counts
    table = catalog.load_table(counts)
    head = table.metadata.snapshot_by_name("main")
    assert head.summary[P.BARRIER] == "3000"
    got = {r["word"]: r["cnt"] for r in table.scan(snapshot_id=head.snapshot_id).to_arrow().to_pylist()}
    assert got == dict(Counter(w for batch in batches for w in batch))
    attempts: dict[str, set[str]] = {}
    snapshot = head
    while snapshot is not None:
        if snapshot.summary.get(P.BARRIER):
            attempts.setdefault(snapshot.summary[P.BARRIER], set()).add(snapshot.summary[P.ATTEMPT])
        snapshot = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    assert {b: len(a) for b, a in attempts.items()} == {"1000": 1, "2000": 1, "3000": 1}


#: a REST server that advertises an idempotency-key-lifetime and applies each Idempotency-Key once (protocol §6.8)
keyed_rest_server = rest_server_fixture(scope="module", name="keyed_rest_server", idempotency_key_lifetime="PT10M")


def test_lost_commit_answers_are_settled_by_the_server_under_the_idempotency_keys_iceberg_sends(
    env, keyed_rest_server, tmp_path
):
    """Protocol §6.8 from the JVM, on a server that advertises an idempotency-key-lifetime: from Iceberg 1.11 every
    commit of a SQL epoch carries a key (Iceberg's REST client puts it on), and each commit's answer is lost once
    after the server applied it. From 1.12 (Spark 4.1) Iceberg's HTTP client sends the commit again with the same
    key and the server answers what it answered first: no read-back before the resend (a resend after one would carry
    a new key); on 1.11 the plugin
    reads back; 1.10 sends no key. The epoch lands once (recounted with pyiceberg)."""
    from consistent_catalog.spark.lines import current_line
    from tests.harness.fault_proxy import FaultProxy

    spark = env[3]
    warehouse = f"file://{tmp_path}/warehouse"
    catalog = keyed_rest_server.catalog(warehouse=warehouse)
    catalog.create_namespace("idem")
    words, counts = "idem.words", "idem.word_counts"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    ConsistentCatalog(catalog).ingest(words, pa.table({"word": ["a", "b", "a"]}), barrier=1_000)  # straight to it
    iceberg = tuple(int(part) for part in current_line().iceberg.split(".")[:2])
    with FaultProxy(keyed_rest_server.port, lose_first_of_each_key=True) as proxy:
        for plain, settings in {"idem": {"": "org.apache.iceberg.spark.SparkCatalog"},
                                "idem_consistent": {"": "io.consistentcatalog.spark.ConsistentSparkCatalog",
                                                    ".plain-catalog": "idem", ".consistent.retry-deadline": "30s"}}.items():
            for key, value in {**settings, ".type": "rest", ".uri": proxy.uri, ".warehouse": warehouse,
                               ".cache-enabled": "false"}.items():
                spark.conf.set(f"spark.sql.catalog.{plain}{key}", value)
        spark.conf.set("spark.sql.consistent.job", "idem-count")
        try:
            spark.sql(f"INSERT OVERWRITE idem_consistent.{counts} SELECT word, count(*) AS cnt FROM "
                      f"idem_consistent.{words} GROUP BY word").collect()
        finally:
            spark.conf.unset("spark.sql.consistent.job")
        events, keys = list(proxy.events), list(proxy.keys)
    sent = [(i, key) for i, (route, key) in enumerate(keys) if route == "commit"]
    assert len(sent) >= 3, events  # at least the registration, the staged write and the publish
    if iceberg < (1, 11):
        assert all(key is None for _, key in sent), keys
    else:
        assert all(key is not None for _, key in sent), keys
    if iceberg >= (1, 12):
        first = {}
        for i, key in sent:
            first.setdefault(key, i)
        for key, i in first.items():  # its resend, the same key, with no load (a read-back) or commit in between
            j = next(j for j in range(i + 1, len(keys)) if keys[j] == ("commit", key))
            assert events[i][3] == "lost" and events[j][3] == "pass", events
            assert all(events[k][0] == "other" for k in range(i + 1, j)), events[i:j + 1]  # a metrics report may
        assert all([k for _, k in sent].count(key) == 2 for key in first), keys  # each commit sent twice, no more
    table = catalog.load_table(counts)
    head = table.metadata.snapshot_by_name("main")
    assert head.summary[P.BARRIER] == "1000"
    assert {r["word"]: r["cnt"] for r in table.scan(snapshot_id=head.snapshot_id).to_arrow().to_pylist()} == \
        {"a": 2, "b": 1}
    written = [s for s in table.metadata.snapshots if (s.summary or {}).get(P.BARRIER) == "1000"
               and s.summary.get("added-records")]
    assert len({s.summary[P.ATTEMPT] for s in written}) == 1 and len(written) == 1, written  # one write landed


def test_a_warm_statement_sees_every_change_since_the_last_one(env, ns):
    """The warm per-statement refresh over REST: the second and third statements hold the tables the first one
    loaded and refresh them (on Iceberg 1.11+ by conditional loads, 304 when unchanged, on the refresh-threads
    threads, started before the listing); a table appended to since, one created and one dropped are all seen
    as pyiceberg sees them, and a table left alone still reads its rows."""
    from consistent_catalog.spark.lines import current_line

    server, warehouse, catalog, spark = env
    tables = {t: f"{ns}.{t}" for t in ("changed", "same", "dropped", "created")}
    for t in ("changed", "same", "dropped"):
        catalog.create_table(tables[t], schema=WORDS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    for t in ("changed", "same", "dropped"):
        cc.ingest(tables[t], pa.table({"word": [t, "x"]}), barrier=1_000)
    name = f"warm_{ns}"[:50] + "_consistent"
    settings = {"": "io.consistentcatalog.spark.ConsistentSparkCatalog", ".type": "rest", ".uri": server.uri,
                ".warehouse": warehouse, ".cache-enabled": "false", ".plain-catalog": "lake",
                ".load-threads": "2", ".refresh-threads": "3"}
    for key, value in settings.items():
        spark.conf.set(f"spark.sql.catalog.{name}{key}", value)

    def served(t: str) -> list[str]:
        return sorted(r["word"] for r in spark.sql(f"SELECT word FROM {name}.{tables[t]}").collect())

    def in_catalog(t: str) -> list[str]:  # what pyiceberg reads at the table's main head, independently
        return sorted(catalog.load_table(tables[t]).scan().to_arrow().column("word").to_pylist())

    def refresh_threads() -> int:
        threads = spark._jvm.java.lang.Thread.getAllStackTraces().keySet().toArray()  # noqa: SLF001 - py4j
        return sum(1 for t in threads if t.getName().startswith(f"consistent-catalog-{name}-refresh-"))

    assert served("changed") == in_catalog("changed") == ["changed", "x"]  # cold: every table loaded
    cc.ingest(tables["changed"], pa.table({"word": ["y", "z"]}), barrier=2_000)
    assert served("changed") == in_catalog("changed") == ["changed", "x", "y", "z"]  # warm: the change seen
    assert served("same") == in_catalog("same") == ["same", "x"]
    iceberg = tuple(int(p) for p in current_line().iceberg.split(".")[:2])
    if iceberg >= (1, 11):  # RESTTableCache: the held tables were refreshed by conditional loads on their threads
        assert 1 <= refresh_threads() <= 3
    else:  # Iceberg 1.10 has no table cache: refresh() on the load threads, as before
        assert refresh_threads() == 0
    catalog.drop_table(tables["dropped"])
    catalog.create_table(tables["created"], schema=WORDS_SCHEMA)
    cc.ingest(tables["created"], pa.table({"word": ["new"]}), barrier=3_000)
    cc.ingest(tables["changed"], pa.table({"word": ["w"]}), barrier=3_000)
    assert served("created") == in_catalog("created") == ["new"]
    assert served("changed") == in_catalog("changed") == ["changed", "w", "x", "y", "z"]
    with pytest.raises(Exception, match=r"CONSISTENT_CUT.TABLE_NOT_FOUND\] .*\.dropped does not exist"):
        spark.sql(f"SELECT word FROM {name}.{tables['dropped']}").collect()


# --- requests per epoch (issue 46): one planner, fed by what the statement loaded -------------------------------
#: One INSERT OVERWRITE epoch in steady state: the statement's cut resolution (the namespaces and the tables listed,
#: the two tables refreshed by conditional loads), the source's scan report, the staged write's commit (what it made is
#: its base with its changes: the transactions route answers 204, and no load follows), the publish's commit. The sink
#: is loaded once per statement. Issue 46's target is 7: the resolution's walk of the namespaces (the root's listing,
#: then each namespace's tables and its child namespaces) is the rest.
SQL_EPOCH_REQUESTS = {"list namespaces": 2, "list tables": 1, "load table": 2, "metrics report": 1,
                      "commit (multi-table)": 2}
#: One micro-batch into a derived table: the group's plan of the batch (the source loaded, its barrier chosen; the
#: batch's scan and epoch reuse it), the sink loaded at the commit, the staged commit (not read back), the publish.
MICRO_BATCH_REQUESTS = {"load table": 2, "commit (multi-table)": 2}


def test_an_epoch_and_a_micro_batch_cost_the_requests_pinned(env, ns, tmp_path):
    from tests.harness.request_counts import counted_epochs

    server, _, _, spark = env
    warehouse = f"file://{tmp_path}/counted"  # a catalog of its own: the resolution lists and loads its tables only
    catalog = server.catalog(warehouse=warehouse)
    catalog.create_namespace(ns)
    counted = counted_epochs(spark, server.port, warehouse, catalog, ns, tmp_path / "checkpoint")
    assert dict(counted.epoch) == SQL_EPOCH_REQUESTS, "\n".join(counted.epoch_log)
    assert sum(counted.epoch.values()) <= 8
    assert dict(counted.micro_batch) == MICRO_BATCH_REQUESTS, "\n".join(counted.micro_batch_log)
    assert sum(counted.micro_batch.values()) <= 4
    # what they wrote, recounted with pyiceberg from the source's rows
    source = Counter(catalog.load_table(f"{ns}.words").scan().to_arrow()["word"].to_pylist())
    for sink in ("word_counts", "stream_counts"):
        rows = catalog.load_table(f"{ns}.{sink}").scan().to_arrow()
        written = dict(zip(rows["word"].to_pylist(), rows["cnt"].to_pylist()))
        if sink == "word_counts":  # its last epoch read the source before the stream's ingests
            assert written == {"a": 2, "b": 2, "c": 1}
        else:
            assert written == dict(source)
