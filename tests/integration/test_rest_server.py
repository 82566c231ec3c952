"""pyiceberg's RestCatalog against the real REST catalog server (Iceberg's CatalogHandlers over JdbcCatalog/SQLite).

One server for the module; each test works in its own namespace. What is under test is the server's
commit discipline, the part the consistent catalog relies on: requirements checked inside the
compare-and-swap (a stale one is refused and changes nothing, two racing writers never lose a
write), an unknown requirement type is a 400 and changes nothing, and refs (branches, tags) work.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.table import Table
from pyiceberg.table.update import AssertRefSnapshotId, SetPropertiesUpdate

from tests.harness.rest_server import RestCatalogServer, rest_server_fixture

pytestmark = pytest.mark.integration

rest_server = rest_server_fixture(scope="module")

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("word", pa.string())])


def rows(start: int, count: int, tag: str = "w") -> pa.Table:
    return pa.table({"id": list(range(start, start + count)), "word": [f"{tag}{i}" for i in range(start, start + count)]},
                    schema=SCHEMA)


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


@pytest.fixture
def catalog(rest_server: RestCatalogServer) -> RestCatalog:
    return rest_server.catalog()


@pytest.fixture
def ns(catalog: RestCatalog) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    catalog.create_namespace(name)
    yield name


@pytest.fixture
def table(catalog: RestCatalog, ns: str) -> Table:
    return catalog.create_table(f"{ns}.events", schema=SCHEMA)


# pyiceberg 0.12 retries a refused append by itself: it refreshes, drops its assert-ref-snapshot-id and
# rebases the snapshot onto the new head. Tables with this property show the server's refusal as is.
NO_CLIENT_RETRY = {"commit.retry.num-retries": "0"}


@pytest.fixture
def strict_table(catalog: RestCatalog, ns: str) -> Table:
    return catalog.create_table(f"{ns}.strict_events", schema=SCHEMA, properties=NO_CLIENT_RETRY)


def http(server: RestCatalogServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """A raw request (no pyiceberg in the way): status and decoded JSON body (None when empty)."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(f"{server.uri}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, payload = err.code, err.read()
    return status, (json.loads(payload) if payload else None)


def table_path(ns: str, name: str) -> str:
    return f"/v1/namespaces/{ns}/tables/{name}"


# --- catalog basics ------------------------------------------------------------------------------------
def test_config_lists_the_served_endpoints(rest_server: RestCatalogServer) -> None:
    status, config = http(rest_server, "GET", "/v1/config")
    assert status == 200
    assert config["overrides"] == {} and config["defaults"] == {}  # no prefix: routes are /v1/namespaces/...
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}" in config["endpoints"]
    assert "POST /v1/{prefix}/transactions/commit" in config["endpoints"]


def test_namespaces_lifecycle_and_errors(catalog: RestCatalog) -> None:
    name = f"n_{uuid.uuid4().hex[:10]}"
    catalog.create_namespace(name, {"owner": "pipeline"})
    assert (name,) in catalog.list_namespaces()
    assert catalog.namespace_exists(name)
    assert catalog.load_namespace_properties(name)["owner"] == "pipeline"

    summary = catalog.update_namespace_properties(name, removals={"owner", "absent"}, updates={"tier": "gold"})
    assert summary.updated == ["tier"] and summary.removed == ["owner"] and summary.missing == ["absent"]
    props = catalog.load_namespace_properties(name)
    assert props["tier"] == "gold" and "owner" not in props

    catalog.create_table(f"{name}.t", schema=SCHEMA)
    with pytest.raises(NamespaceNotEmptyError):  # 409
        catalog.drop_namespace(name)
    catalog.drop_table(f"{name}.t")
    catalog.drop_namespace(name)
    assert not catalog.namespace_exists(name)
    with pytest.raises(NoSuchNamespaceError):  # 404
        catalog.load_namespace_properties(name)


def test_tables_create_list_rename_drop(catalog: RestCatalog, ns: str) -> None:
    catalog.create_table(f"{ns}.a", schema=SCHEMA)
    with pytest.raises(TableAlreadyExistsError):  # 409
        catalog.create_table(f"{ns}.a", schema=SCHEMA)
    assert catalog.list_tables(ns) == [(ns, "a")]
    assert catalog.table_exists(f"{ns}.a") and not catalog.table_exists(f"{ns}.nope")

    catalog.rename_table(f"{ns}.a", f"{ns}.b")
    assert catalog.list_tables(ns) == [(ns, "b")]
    catalog.drop_table(f"{ns}.b")
    assert catalog.list_tables(ns) == []
    with pytest.raises(NoSuchTableError):  # 404
        catalog.load_table(f"{ns}.b")


def test_create_table_transaction_stages_then_creates(catalog: RestCatalog, ns: str) -> None:
    with catalog.create_table_transaction(f"{ns}.staged", schema=SCHEMA) as tx:  # stage-create, then assert-create
        assert not catalog.table_exists(f"{ns}.staged")
        tx.append(rows(0, 3))
    assert sorted_rows(catalog.load_table(f"{ns}.staged").scan().to_arrow()) == sorted_rows(rows(0, 3))


# --- data ----------------------------------------------------------------------------------------------
def test_append_and_read_back_through_a_fresh_client(rest_server: RestCatalogServer, table: Table) -> None:
    first, second = rows(0, 5, "a"), rows(5, 3, "b")
    table.append(first)
    table.append(second)

    fresh = rest_server.catalog().load_table(table.name())  # another client: only what the server stored
    assert sorted_rows(fresh.scan().to_arrow()) == sorted_rows(pa.concat_tables([first, second]))
    assert len(fresh.history()) == 2
    assert fresh.metadata_location == table.metadata_location


# --- the commit discipline -----------------------------------------------------------------------------
def test_stale_assert_ref_snapshot_id_is_refused_and_changes_nothing(catalog: RestCatalog,
                                                                     strict_table: Table) -> None:
    table = strict_table
    table.append(rows(0, 2))
    stale_id = table.current_snapshot().snapshot_id
    table.append(rows(2, 2))
    before = catalog.load_table(table.name())

    # The explicit requirement, exactly as a client sends it.
    with pytest.raises(CommitFailedException, match="branch main has changed"):
        catalog.commit_table(
            table,
            requirements=(AssertRefSnapshotId(ref="main", snapshot_id=stale_id),),
            updates=(SetPropertiesUpdate(updates={"should": "not-land"}),),
        )
    # The everyday case: an append from a table object that has not seen the latest commit.
    stale_table = catalog.load_table(table.name())
    table.append(rows(4, 1))
    with pytest.raises(CommitFailedException):
        stale_table.append(rows(100, 7))

    after = catalog.load_table(table.name())
    assert "should" not in after.properties
    assert sorted_rows(after.scan().to_arrow()) == sorted_rows(rows(0, 5))
    assert len(after.snapshots()) == len(before.snapshots()) + 1  # only the good append landed


def test_stale_append_with_pyiceberg_retry_is_rebased_not_lost(catalog: RestCatalog, table: Table) -> None:
    table.append(rows(0, 2))
    stale_table = catalog.load_table(table.name())
    table.append(rows(2, 2))
    stale_table.append(rows(100, 3))  # refused once by the server (409), then rebased by pyiceberg

    after = catalog.load_table(table.name())
    assert sorted_rows(after.scan().to_arrow()) == sorted_rows(pa.concat_tables([rows(0, 4), rows(100, 3)]))
    assert len(after.snapshots()) == 3


@pytest.mark.parametrize("client_retry", [False, True], ids=["no-client-retry", "pyiceberg-retry"])
def test_racing_appends_from_the_same_base_never_lose_a_write(rest_server: RestCatalogServer, catalog: RestCatalog,
                                                              ns: str, client_retry: bool,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    table = catalog.create_table(f"{ns}.race", schema=SCHEMA, properties={} if client_retry else NO_CLIENT_RETRY)
    table.append(rows(0, 1))
    clients = [rest_server.catalog().load_table(table.name()) for _ in range(2)]  # both see the same snapshot
    start = threading.Barrier(len(clients))
    outcome: dict[int, str] = {}

    def write(i: int, tbl: Table) -> None:
        start.wait()
        try:
            tbl.append(rows(1000 * (i + 1), 10, f"c{i}"))
            outcome[i] = "ok"
        except CommitFailedException:
            outcome[i] = "refused"

    threads = [threading.Thread(target=write, args=(i, tbl)) for i, tbl in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    # Same base: at most one can pass assert-ref-snapshot-id. Without a client retry the other is refused;
    # with pyiceberg's retry it is rebased and lands too.
    assert sorted(outcome.values()) == (["ok", "ok"] if client_retry else ["ok", "refused"])
    if client_retry:  # the server did refuse the loser once (409); pyiceberg logged it and rebased
        assert any("Commit failed due to a concurrent update" in r.getMessage() for r in caplog.records)

    landed = [rows(0, 1)] + [rows(1000 * (i + 1), 10, f"c{i}") for i, result in sorted(outcome.items()) if result == "ok"]
    final = rest_server.catalog().load_table(table.name())
    assert sorted_rows(final.scan().to_arrow()) == sorted_rows(pa.concat_tables(landed))  # each landed write once
    assert len(final.snapshots()) == len(landed)


def test_concurrent_appends_with_retry_never_lose_a_write(rest_server: RestCatalogServer, table: Table) -> None:
    writers, appends_each = 2, 4
    start = threading.Barrier(writers)
    refused = [0] * writers
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            client = rest_server.catalog()
            start.wait()
            for k in range(appends_each):
                batch = rows(10_000 * i + 10 * k, 10, f"w{i}.{k}")
                for _attempt in range(50):
                    try:
                        client.load_table(table.name()).append(batch)
                        break
                    except CommitFailedException:
                        refused[i] += 1
                else:
                    raise AssertionError(f"writer {i} never committed batch {k}")
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors

    final = rest_server.catalog().load_table(table.name())
    expected = pa.concat_tables([rows(10_000 * i + 10 * k, 10, f"w{i}.{k}")
                                 for i in range(writers) for k in range(appends_each)])
    assert sorted_rows(final.scan().to_arrow()) == sorted_rows(expected)  # every write, exactly once
    assert len(final.snapshots()) == writers * appends_each


def test_unknown_requirement_type_is_400_and_changes_nothing(rest_server: RestCatalogServer, catalog: RestCatalog,
                                                             table: Table) -> None:
    table.append(rows(0, 3))
    before = catalog.load_table(table.name())
    snapshot_id = before.current_snapshot().snapshot_id
    path = table_path(*table.name())
    set_marker = {"action": "set-properties", "updates": {"marker": "landed"}}

    status, body = http(rest_server, "POST", path, {
        "requirements": [{"type": "consistent-assert-state", "state": "staged", "snapshot-id": snapshot_id}],
        "updates": [set_marker],
    })
    assert status == 400, body
    assert body["error"]["code"] == 400 and body["error"]["type"] == "BadRequestException"
    assert "consistent-assert-state" in body["error"]["message"]

    # The same body shape with other defects: also 400, never 500.
    for bad in (
        {"requirements": [], "updates": [{"action": "consistent-do-something"}]},  # unknown update action
        {"requirements": [{"snapshot-id": 1}], "updates": []},                      # requirement without a type
        b"{not json",
    ):
        status, body = http(rest_server, "POST", path, bad)
        assert status == 400, (bad, body)

    after = catalog.load_table(table.name())
    assert after.metadata_location == before.metadata_location
    assert "marker" not in after.properties

    # A known requirement that holds, sent the same way, does land: the 400s were about the type.
    status, body = http(rest_server, "POST", path, {
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": snapshot_id}],
        "updates": [set_marker],
    })
    assert status == 200, body
    assert catalog.load_table(table.name()).properties["marker"] == "landed"
    # ... and one that does not hold is a 409 with the standard error body.
    status, body = http(rest_server, "POST", path, {
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": snapshot_id + 1}],
        "updates": [set_marker],
    })
    assert status == 409 and body["error"]["type"] == "CommitFailedException"


def test_unknown_route_is_400(rest_server: RestCatalogServer) -> None:
    status, body = http(rest_server, "GET", "/v1/nothing/here")
    assert status == 400 and body["error"]["code"] == 400


# --- refs --------------------------------------------------------------------------------------------
def test_branches_and_tags(catalog: RestCatalog, strict_table: Table) -> None:
    table = strict_table
    staged = "consistent-staged"
    table.append(rows(0, 2, "main"))
    base = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(base, "cut-1").create_branch(base, staged).commit()

    table.append(rows(10, 3, "staged"), branch=staged)
    reloaded = catalog.load_table(table.name())
    refs = reloaded.refs()
    assert refs["cut-1"].snapshot_id == base and refs["cut-1"].snapshot_ref_type == "tag"
    assert refs["main"].snapshot_id == base                     # main untouched by the branch append
    staged_head = refs[staged].snapshot_id
    assert staged_head != base and refs[staged].snapshot_ref_type == "branch"
    assert reloaded.scan().to_arrow().num_rows == 2
    assert sorted_rows(reloaded.scan(snapshot_id=staged_head).to_arrow()) == sorted_rows(
        pa.concat_tables([rows(0, 2, "main"), rows(10, 3, "staged")]))

    # A branch append from a stale view of the branch is refused like one on main.
    stale = catalog.load_table(table.name())
    table.append(rows(20, 1, "staged"), branch=staged)
    with pytest.raises(CommitFailedException):
        stale.append(rows(30, 1, "lost"), branch=staged)

    # Publish: main fast-forwards to the staged head; the tag keeps the old cut.
    head = catalog.load_table(table.name()).refs()[staged].snapshot_id
    reloaded = catalog.load_table(table.name())
    reloaded.manage_snapshots().set_current_snapshot(ref_name=staged).commit()
    reloaded.manage_snapshots().remove_tag("cut-1").create_tag(head, "cut-2").commit()
    final = catalog.load_table(table.name())
    assert final.current_snapshot().snapshot_id == head
    assert final.scan().to_arrow().num_rows == 6
    assert "cut-1" not in final.refs() and final.refs()["cut-2"].snapshot_id == head
    assert final.scan(snapshot_id=base).to_arrow().num_rows == 2  # the old cut stays readable by id


def test_table_properties_round_trip(catalog: RestCatalog, table: Table) -> None:
    with table.transaction() as tx:
        tx.set_properties({"consistent.epoch": "7", "owner": "etl"})
    assert {"consistent.epoch": "7", "owner": "etl"}.items() <= catalog.load_table(table.name()).properties.items()

    with table.transaction() as tx:
        tx.remove_properties("owner")
        tx.set_properties({"consistent.epoch": "8"})
    props = catalog.load_table(table.name()).properties
    assert props["consistent.epoch"] == "8" and "owner" not in props


# --- multi-table transaction (pyiceberg 0.12 has no client for it: raw HTTP) -----------------------------
def test_multi_table_transaction_is_all_or_nothing(rest_server: RestCatalogServer, catalog: RestCatalog,
                                                   ns: str) -> None:
    a = catalog.create_table(f"{ns}.a", schema=SCHEMA)
    b = catalog.create_table(f"{ns}.b", schema=SCHEMA)
    b.append(rows(0, 1))
    b_snapshot = catalog.load_table(f"{ns}.b").current_snapshot().snapshot_id

    def change(tbl: Table, requirements: list[dict[str, Any]], epoch: str) -> dict[str, Any]:
        return {"identifier": {"namespace": [ns], "name": tbl.name()[-1]},
                "requirements": [{"type": "assert-table-uuid", "uuid": str(tbl.metadata.table_uuid)}, *requirements],
                "updates": [{"action": "set-properties", "updates": {"epoch": epoch}}]}

    fresh_b = [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": b_snapshot}]
    status, body = http(rest_server, "POST", "/v1/transactions/commit",
                        {"table-changes": [change(a, [], "1"), change(b, fresh_b, "1")]})
    assert status == 204, body
    assert catalog.load_table(f"{ns}.a").properties["epoch"] == "1"
    assert catalog.load_table(f"{ns}.b").properties["epoch"] == "1"

    before = {t: catalog.load_table(f"{ns}.{t}").metadata_location for t in ("a", "b")}
    stale_b = [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None}]  # b has a snapshot
    status, body = http(rest_server, "POST", "/v1/transactions/commit",
                        {"table-changes": [change(a, [], "2"), change(b, stale_b, "2")]})
    assert status == 409, body
    for t in ("a", "b"):  # a's valid change did not land either
        after = catalog.load_table(f"{ns}.{t}")
        assert after.metadata_location == before[t] and after.properties["epoch"] == "1"

    status, body = http(rest_server, "POST", "/v1/transactions/commit",
                        {"table-changes": [{**change(a, [], "3"),
                                            "requirements": [{"type": "consistent-assert-state"}]}]})
    assert status == 400, body


# --- the process -----------------------------------------------------------------------------------------
def test_restart_keeps_the_catalog_and_sigterm_stops_cleanly(tmp_path: Any) -> None:
    with RestCatalogServer(tmp_path) as server:
        assert server.startup_seconds is not None and server.startup_seconds < 60
        cat = server.catalog()
        cat.create_namespace("kept")
        cat.create_table("kept.t", schema=SCHEMA).append(rows(0, 4))
    assert server.returncode == 143  # SIGTERM, handled by the JVM: shutdown hook ran
    assert "RestCatalogServer: stopped" in server.log_path.read_text()
    assert not server.running

    with RestCatalogServer(tmp_path) as again:  # same SQLite file and warehouse
        assert again.catalog().load_table("kept.t").scan().to_arrow().num_rows == 4


def test_postgresql_backend(request: pytest.FixtureRequest, tmp_path: Any) -> None:
    """The same server over PostgreSQL (the session's server from tests/conftest.py): the compare-and-swap and the
    all-or-nothing transaction run on PostgreSQL's row locks instead of SQLite's file lock."""
    try:
        pg = request.getfixturevalue("postgres_server")
    except pytest.FixtureLookupError:
        pytest.skip("no postgres_server fixture (tests/conftest.py not loaded)")
    database = pg.create_database("rest")
    with RestCatalogServer(tmp_path, jdbc_uri=f"jdbc:postgresql://127.0.0.1:{pg.port}/{database}",
                           properties={"jdbc.user": "postgres"}) as server:
        cat = server.catalog()
        cat.create_namespace("pg")
        tbl = cat.create_table("pg.t", schema=SCHEMA, properties=NO_CLIENT_RETRY)
        tbl.append(rows(0, 2))
        stale = cat.load_table("pg.t")
        tbl.append(rows(2, 2))
        with pytest.raises(CommitFailedException):
            stale.append(rows(100, 1))
        assert sorted_rows(server.catalog().load_table("pg.t").scan().to_arrow()) == sorted_rows(rows(0, 4))

        other = cat.create_table("pg.u", schema=SCHEMA)
        change = {"identifier": {"namespace": ["pg"], "name": "u"}, "requirements": [],
                  "updates": [{"action": "set-properties", "updates": {"epoch": "1"}}]}
        stale_t = {"identifier": {"namespace": ["pg"], "name": "t"},
                   "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None}],
                   "updates": [{"action": "set-properties", "updates": {"epoch": "1"}}]}
        status, body = http(server, "POST", "/v1/transactions/commit", {"table-changes": [change, stale_t]})
        assert status == 409, body
        assert "epoch" not in cat.load_table("pg.u").properties
        assert cat.load_table("pg.u").metadata_location == other.metadata_location
