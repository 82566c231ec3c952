"""One REST server, many catalogs: ``GET /v1/config?warehouse=W`` hands out a prefix, ``/v1/<prefix>/...`` is
that catalog (its own SQLite file under the server directory), the routes without a prefix keep serving the
root catalog. This is what gives every behaviour test its own REST catalog on one session server
(``tests/conftest.py``), so the isolation is checked here on the server's own files, with ``sqlite3`` and raw
HTTP, not through pyiceberg alone.
"""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError
from pyiceberg.table.update import AssertRefSnapshotId, SetPropertiesUpdate

from tests.harness.rest_server import RestCatalogServer, expected_prefix

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def http(server: RestCatalogServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{server.uri}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, payload = err.code, err.read()
    return status, (json.loads(payload) if payload else None)


def rows_in(database: Path) -> list[tuple[str, str, str]]:
    """``iceberg_tables`` rows of a catalog file, read with sqlite3 (not through the server)."""
    with sqlite3.connect(database) as db:
        return sorted(db.execute(
            'SELECT "catalog_name", "table_namespace", "table_name" FROM "iceberg_tables"').fetchall())


def test_config_hands_out_a_prefix_per_warehouse(rest_server: RestCatalogServer, tmp_path: Path) -> None:
    location = f"file://{tmp_path}/a/warehouse"
    status, config = http(rest_server, "GET", "/v1/config?" + urllib.parse.urlencode({"warehouse": location}))
    assert status == 200 and config["overrides"] == {"prefix": expected_prefix(location)}
    # the same location (trailing slash or not) is the same catalog; a name is its own prefix
    status, again = http(rest_server, "GET", "/v1/config?" + urllib.parse.urlencode({"warehouse": location + "/"}))
    assert again["overrides"]["prefix"] == config["overrides"]["prefix"]
    status, named = http(rest_server, "GET", "/v1/config?warehouse=team_a")
    assert status == 200 and named["overrides"] == {"prefix": "team_a"}
    # no warehouse: the root catalog, no prefix (unchanged)
    assert http(rest_server, "GET", "/v1/config")[1]["overrides"] == {}
    for bad in ("namespaces", "wh-0123", "not a name"):
        status, body = http(rest_server, "GET", "/v1/config?" + urllib.parse.urlencode({"warehouse": bad}))
        assert status == 400 and body["error"]["type"] == "BadRequestException", (bad, body)


def test_catalogs_are_isolated_and_keep_their_files_apart(rest_server: RestCatalogServer, tmp_path: Path) -> None:
    wa, wb = tmp_path / "a" / "warehouse", tmp_path / "b" / "warehouse"
    a = rest_server.catalog(warehouse=f"file://{wa}")
    b = rest_server.catalog(warehouse=str(wb))  # a plain path is sent as file:///...
    assert a.properties["prefix"] != b.properties["prefix"]
    a.create_namespace("demo")
    table = a.create_table("demo.t", schema=SCHEMA)
    table.append(pa.table({"id": [1, 2, 3]}, schema=SCHEMA))
    assert ("demo",) not in b.list_namespaces()
    root = rest_server.catalog()
    assert ("demo",) not in root.list_namespaces()  # the root catalog is untouched (no test writes there)
    b.create_namespace("demo")
    b.create_table("demo.t", schema=SCHEMA)  # same name, other catalog: no conflict
    assert b.load_table("demo.t").scan().to_arrow().num_rows == 0
    assert a.load_table("demo.t").scan().to_arrow().num_rows == 3

    # each catalog's row is in its own SQLite file under the server directory, and nowhere else
    db_a, db_b = rest_server.sqlite_path(f"file://{wa}"), rest_server.sqlite_path(str(wb))
    assert db_a.parent.name == expected_prefix(f"file://{wa}") and db_a.parent.parent == rest_server.catalogs_dir
    assert rows_in(db_a) == [("lake", "demo", "t")] and rows_in(db_b) == [("lake", "demo", "t")]
    # the data and metadata went to the warehouse the client named
    assert list((wa / "demo" / "t" / "data").glob("*.parquet"))
    assert list((wb / "demo" / "t" / "metadata").glob("*.metadata.json"))
    assert not (wb / "demo" / "t" / "data").exists()


def test_prefixed_commits_are_checked_inside_the_swap(rest_server: RestCatalogServer, tmp_path: Path) -> None:
    catalog = rest_server.catalog(warehouse=f"file://{tmp_path}/warehouse")
    prefix = catalog.properties["prefix"]
    catalog.create_namespace("demo")
    table = catalog.create_table("demo.t", schema=SCHEMA, properties={"commit.retry.num-retries": "0"})
    table.append(pa.table({"id": [1]}, schema=SCHEMA))
    stale = table.current_snapshot().snapshot_id
    catalog.load_table("demo.t").append(pa.table({"id": [2]}, schema=SCHEMA))
    before = catalog.load_table("demo.t").metadata_location
    with pytest.raises(CommitFailedException):
        catalog.commit_table(table, (AssertRefSnapshotId(ref="main", snapshot_id=stale),),
                             (SetPropertiesUpdate(updates={"zombie": "1"}),))
    after = catalog.load_table("demo.t")
    assert after.metadata_location == before and "zombie" not in after.properties

    # an unknown requirement type on a prefixed route: 400, nothing changes
    status, body = http(rest_server, "POST", f"/v1/{prefix}/namespaces/demo/tables/t", {
        "requirements": [{"type": "consistent-assert-state", "snapshot-id": stale}],
        "updates": [{"action": "set-properties", "updates": {"marker": "x"}}],
    })
    assert status == 400 and "consistent-assert-state" in body["error"]["message"], body
    assert catalog.load_table("demo.t").metadata_location == before

    # the multi-table transaction endpoint works per prefix too
    catalog.create_table("demo.u", schema=SCHEMA)
    head = catalog.load_table("demo.t").current_snapshot().snapshot_id
    status, body = http(rest_server, "POST", f"/v1/{prefix}/transactions/commit", {"table-changes": [
        {"identifier": {"namespace": ["demo"], "name": "t"},
         "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": head}],
         "updates": [{"action": "set-properties", "updates": {"both": "yes"}}]},
        {"identifier": {"namespace": ["demo"], "name": "u"}, "requirements": [],
         "updates": [{"action": "set-properties", "updates": {"both": "yes"}}]},
    ]})
    assert status == 204, body
    assert {catalog.load_table(f"demo.{n}").properties.get("both") for n in "tu"} == {"yes"}


def test_unknown_prefix_is_404_and_unknown_route_stays_400(rest_server: RestCatalogServer) -> None:
    status, body = http(rest_server, "GET", "/v1/never-configured/namespaces")
    assert status == 404 and "never-configured" in body["error"]["message"], body
    status, body = http(rest_server, "GET", "/v1/nothing/here")
    assert status == 400, body


def test_restarted_server_serves_the_same_prefixes(tmp_path: Path) -> None:
    location = f"file://{tmp_path}/lake/warehouse"
    with RestCatalogServer(tmp_path / "server") as server:
        catalog = server.catalog(warehouse=location)
        catalog.create_namespace("kept")
        catalog.create_table("kept.t", schema=SCHEMA).append(pa.table({"id": [7]}, schema=SCHEMA))
        prefix = catalog.properties["prefix"]
    with RestCatalogServer(tmp_path / "server") as again:
        # straight to the prefixed route, without GET /v1/config first
        status, body = http(again, "GET", f"/v1/{prefix}/namespaces/kept/tables")
        assert status == 200 and body["identifiers"] == [{"namespace": ["kept"], "name": "t"}], body
        assert again.catalog(warehouse=location).load_table("kept.t").scan().to_arrow()["id"].to_pylist() == [7]
        with pytest.raises(NoSuchNamespaceError):
            again.catalog(warehouse="other").load_namespace_properties("kept")


def test_a_catalog_per_test_costs_far_less_than_a_server_per_test(rest_server: RestCatalogServer, tmp_path: Path) -> None:
    """The reason for the design: measured here, printed, and bounded loosely (2 shared cores)."""
    started = time.monotonic()
    with RestCatalogServer(tmp_path / "own") as own:
        own.catalog().list_namespaces()
    server_seconds = time.monotonic() - started
    timings = []
    for i in range(5):
        started = time.monotonic()
        catalog = rest_server.catalog(warehouse=f"file://{tmp_path}/c{i}/warehouse")
        catalog.create_namespace("demo")
        timings.append(time.monotonic() - started)
    per_catalog = sorted(timings)[len(timings) // 2]
    print(f"\nREST: a server start+stop {server_seconds:.2f}s, a new catalog on the session server {per_catalog:.3f}s (median)")
    assert per_catalog < server_seconds
