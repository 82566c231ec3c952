"""Contract test of ``consistent_catalog._pyiceberg``: every pyiceberg internal we rely on, asserted.

pyiceberg is pinned to a minor range; an upgrade that changes one of these behaviours fails here,
by name, instead of somewhere deep in an epoch.
"""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.avro.file import AvroFile
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.manifest import read_manifest_list
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveSnapshotsUpdate,
    SetSnapshotRefUpdate,
)
from sqlalchemy import text as sql_text

from consistent_catalog import _pyiceberg
from consistent_catalog.commit import refs_at
from tests.harness.source import lines_matching

SCHEMA = pa.schema([pa.field("word", pa.string())])


@pytest.fixture
def table(tmp_path: Path):
    (tmp_path / "warehouse").mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("demo")
    created = catalog.create_table("demo.words", schema=SCHEMA)
    yield created
    catalog.engine.dispose()


def rows(words: list[str]) -> pa.Table:
    return pa.table({"word": words}, schema=SCHEMA)


def avro_files(table) -> set[Path]:
    """Manifests and manifest lists."""
    return set((Path(table.metadata.location.removeprefix("file://")) / "metadata").glob("*.avro"))


def test_summary_fast_path_equals_the_public_properties(table) -> None:
    table.append(rows(["a"]), snapshot_properties={"consistent.barrier": "100"})
    table.overwrite(rows(["b", "c"]), snapshot_properties={"consistent.barrier": "200", "x": "y"})
    table.refresh()
    assert len(table.metadata.snapshots) >= 2
    for snapshot in table.metadata.snapshots:
        operation, properties = _pyiceberg.summary_parts(snapshot.summary)
        assert operation == snapshot.summary.operation.value
        assert dict(properties) == dict(snapshot.summary.additional_properties)
    assert {_pyiceberg.summary_parts(s.summary)[1].get("consistent.barrier") for s in table.metadata.snapshots} >= {"100", "200"}


def test_stage_keeps_only_the_first_requirement_of_a_type(table) -> None:
    """The pyiceberg trap ``commit_transaction_once`` avoids: ``_stage`` drops a second requirement of one type."""
    table.append(rows(["a"]))
    head = table.metadata.current_snapshot_id
    tx = table.transaction()
    tx._stage((), (AssertRefSnapshotId(ref="main", snapshot_id=head),))
    tx._stage((), (AssertRefSnapshotId(ref="consistent-staged", snapshot_id=None),))
    assert [r.ref for r in tx._requirements if isinstance(r, AssertRefSnapshotId)] == ["main"]


def test_commit_once_sends_exactly_the_intended_requirements(table, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple] = []
    original = table.catalog.commit_table

    def spy(tbl, requirements, updates):
        sent.append(tuple(requirements))
        return original(tbl, requirements, updates)

    table.append(rows(["a"]))
    monkeypatch.setattr(table.catalog, "commit_table", spy)
    tx = table.transaction()
    tx.append(rows(["b", "c"]))
    extra = refs_at({"consistent-fence": None, "consistent-staged": None})
    intended = _pyiceberg.transaction_requirements(tx, extra)
    assert _pyiceberg.commit_transaction_once(tx, extra) is not None
    assert sent == [intended]
    refs = [r.ref for r in sent[0] if isinstance(r, AssertRefSnapshotId)]
    assert refs == ["main", "consistent-fence", "consistent-staged"]  # the writer's own stays, none collapsed
    assert type(sent[0][-1]) is AssertTableUUID
    table.refresh()
    assert table.scan().to_arrow().num_rows == 3


def test_absent_ref_cannot_be_asserted_on_a_table_without_snapshots(table) -> None:
    """The pyiceberg quirk ``commit.absent_ref_unassertable`` works around (Java's validation has no such rule)."""
    with pytest.raises(CommitFailedException, match="no snapshots"):
        table.catalog.commit_table(table, tuple(refs_at({"consistent-fence": None})), ())
    table.catalog.commit_table(table, tuple(refs_at({"main": None})), ())  # main is exempt


def test_a_failed_requirement_is_not_retried_and_its_manifests_are_deleted(table, monkeypatch: pytest.MonkeyPatch) -> None:
    with table.transaction() as tx:  # pyiceberg's own retry path would try 4 more times
        tx.set_properties({"commit.retry.num-retries": "4"})
    table.append(rows(["a"]))
    before = avro_files(table)
    calls = 0
    original = table.catalog.commit_table

    def counting(tbl, requirements, updates):
        nonlocal calls
        calls += 1
        return original(tbl, requirements, updates)

    monkeypatch.setattr(table.catalog, "commit_table", counting)
    tx = table.transaction()
    tx.overwrite(rows(["z"]))
    with pytest.raises(CommitFailedException, match="consistent-fence"):
        _pyiceberg.commit_transaction_once(tx, refs_at({"consistent-fence": 12345}))
    assert calls == 1
    assert avro_files(table) == before  # data files are left to the orphan-file sweep, as after any failed commit
    table.refresh()
    assert table.scan().to_arrow()["word"].to_pylist() == ["a"]


def test_data_files_written_once_survive_a_refused_append_and_land_with_the_next(table) -> None:
    """``write_data_files``/``append_data_files`` (item 8): a refused attempt deletes its manifests, not the data files,
    so the next attempt appends the same files; the snapshot is the one ``append`` makes (its summary counts)."""
    files = _pyiceberg.write_data_files(table, rows(["a", "b"]))
    paths = [Path(f.file_path.removeprefix("file://")) for f in files]
    assert files and all(p.is_file() for p in paths)
    tx = table.transaction()
    _pyiceberg.append_data_files(tx, files, {"k": "refused"})
    with pytest.raises(CommitFailedException):
        _pyiceberg.commit_transaction_once(tx, refs_at({"consistent-fence": 12345}))
    assert all(p.is_file() for p in paths)
    tx = table.transaction()
    _pyiceberg.append_data_files(tx, files, {"k": "landed"})
    _pyiceberg.commit_transaction_once(tx)
    table.refresh()
    assert sorted(table.scan().to_arrow()["word"].to_pylist()) == ["a", "b"]
    summary = table.current_snapshot().summary
    assert (summary.operation.value, summary["k"], summary["added-records"]) == ("append", "landed", "2")
    assert _pyiceberg.write_data_files(table, rows([])) == []
    with pytest.raises(ValueError):  # the schema check append makes
        _pyiceberg.write_data_files(table, pa.table({"other": [1]}))


def test_nothing_to_commit_commits_nothing(table) -> None:
    tx = table.transaction()
    assert _pyiceberg.commit_transaction_once(tx, refs_at({"consistent-fence": None})) is None
    table.refresh()
    assert table.metadata.snapshots == []


def test_remove_snapshots_keeping_parents_keeps_the_dangling_parent_id(table) -> None:
    for word in "abc":
        table.append(rows([word]))
    table.refresh()
    first, second, third = (s.snapshot_id for s in table.metadata.snapshots)
    table.catalog.commit_table(table, (), (_pyiceberg.remove_snapshots_keeping_parents([first]),))
    table.refresh()
    assert [s.snapshot_id for s in table.metadata.snapshots] == [second, third]
    assert table.metadata.snapshot_by_id(second).parent_snapshot_id == first  # Java's behaviour, not pyiceberg's
    # ... which is why we need it: pyiceberg's own update nulls the parent of the oldest survivor
    table.catalog.commit_table(table, (), (RemoveSnapshotsUpdate(snapshot_ids=[second]),))
    table.refresh()
    assert table.metadata.snapshot_by_id(third).parent_snapshot_id is None


def test_sql_metadata_locations_equal_what_load_table_loads(tmp_path: Path) -> None:
    """One query gives every table's metadata location, as ``load_table`` would; missing tables and views get None."""
    (tmp_path / "warehouse").mkdir()
    uri, warehouse = f"sqlite:///{tmp_path}/catalog.db", f"file://{tmp_path}/warehouse"
    catalog = SqlCatalog("lake", uri=uri, warehouse=warehouse)
    other = SqlCatalog("other", uri=uri, warehouse=warehouse)  # same database, another catalog name
    try:
        catalog.create_namespace("demo")
        catalog.create_namespace(("deep", "er"))
        other.create_namespace("demo")
        names = ["demo.words", "demo.counts", "deep.er.words"]
        for name in names:
            catalog.create_table(name, schema=SCHEMA).append(rows(["a"]))
        other.create_table("demo.elsewhere", schema=SCHEMA)
        with catalog.engine.begin() as connection:  # a view row, as Java's JdbcCatalog writes one
            connection.execute(sql_text(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, iceberg_type) "
                "VALUES ('lake', 'demo', 'a_view', 'file:///nowhere.metadata.json', 'VIEW')"
            ))
        wanted = [*names, "demo.elsewhere", "demo.a_view", "demo.missing", "nowhere.words"]
        found = _pyiceberg.sql_metadata_locations(catalog, wanted)
        assert found == {
            **{name: catalog.load_table(name).metadata_location for name in names},
            "demo.elsewhere": None, "demo.a_view": None, "demo.missing": None, "nowhere.words": None,
        }
        for name in ("demo.elsewhere", "demo.a_view", "demo.missing"):
            with pytest.raises(NoSuchTableError):
                catalog.load_table(name)
        assert catalog._iceberg_type_filter() is not None  # a v1 catalog schema: views are filtered out
        assert _pyiceberg.sql_metadata_locations(catalog, []) == {}
    finally:
        catalog.engine.dispose()
        other.engine.dispose()


def test_sql_metadata_locations_leaves_other_catalogs_to_load_table(table, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = table.catalog
    assert _pyiceberg.sql_metadata_locations(catalog, ["demo.words"]) is not None
    monkeypatch.setattr(catalog, "load_table", catalog.load_table)  # replaced (a test double, a wrapper)
    assert _pyiceberg.sql_metadata_locations(catalog, ["demo.words"]) is None
    assert _pyiceberg.sql_metadata_locations(object(), ["demo.words"]) is None  # type: ignore[arg-type]


def test_a_metadata_file_is_read_and_opened_as_load_table_does(table, tmp_path: Path) -> None:
    table.append(rows(["a", "b"]), snapshot_properties={"consistent.barrier": "100"})
    catalog = table.catalog
    loaded = catalog.load_table("demo.words")
    location = loaded.metadata_location
    io = _pyiceberg.metadata_file_io(catalog, location)
    with io.new_input(location).open() as stream:
        data = stream.read()
    assert _pyiceberg.parse_metadata(data, location) == loaded.metadata
    gz = tmp_path / "00009-copy.gz.metadata.json"  # pyiceberg's gzip rule is the file name
    gz.write_bytes(gzip.compress(data))
    assert _pyiceberg.parse_metadata(gz.read_bytes(), f"file://{gz}") == loaded.metadata
    opened = _pyiceberg.open_table(catalog, "demo.words", location)
    assert opened.name() == loaded.name() and opened.metadata == loaded.metadata
    assert opened.metadata_location == location and opened.catalog is catalog
    assert opened.io.properties == loaded.io.properties and type(opened.io) is type(loaded.io)
    assert opened.scan().to_arrow().equals(loaded.scan().to_arrow())
    table.append(rows(["c"]))  # a later commit: the opened table stays at its metadata file
    assert _pyiceberg.open_table(catalog, "demo.words", location).scan().to_arrow().num_rows == 2


def add_on_branch(table, snapshot, branch: str) -> None:
    """Commit ``snapshot`` as the head of ``branch``, as ``genesis_updates`` and a fence take do."""
    updates = (AddSnapshotUpdate(snapshot=snapshot),
               SetSnapshotRefUpdate(ref_name=branch, type=SnapshotRefType.BRANCH, snapshot_id=snapshot.snapshot_id))
    table.catalog.commit_table(table, (), updates)


def manifest_list_header(table, path: str) -> dict[str, str]:
    """The key-value metadata of a manifest list's Avro header (Avro's own keys but the codec left out)."""
    with AvroFile(table.io.new_input(path)) as reader:
        meta = reader.header.meta
    return {k: v for k, v in meta.items() if not k.startswith("avro.") or k == "avro.codec"}


@pytest.mark.parametrize("format_version", [1, 2])
def test_an_empty_snapshot_is_parentless_holds_no_data_and_pyiceberg_builds_on_it(tmp_path: Path, format_version: int) -> None:
    """``empty_snapshot`` as the genesis of an empty sink: the snapshot it builds is the one pyiceberg stores and
    reads back, its manifest list is one pyiceberg reads as empty, and pyiceberg's next append continues from it."""
    (tmp_path / "warehouse").mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    try:
        catalog.create_namespace("demo")
        table = catalog.create_table("demo.words", schema=SCHEMA, properties={"format-version": str(format_version)})
        assert table.metadata.format_version == format_version
        genesis = _pyiceberg.empty_snapshot(table, {"consistent.job": "job-a"})
        assert genesis.parent_snapshot_id is None
        assert table.metadata.snapshot_by_id(genesis.snapshot_id) is None  # a new id
        assert genesis.schema_id == table.metadata.current_schema_id
        assert genesis.sequence_number == (table.metadata.next_sequence_number() if format_version >= 2 else None)
        operation, properties = _pyiceberg.summary_parts(genesis.summary)
        assert operation == "append"
        assert dict(properties) == {**_pyiceberg.EMPTY_TOTALS, "consistent.job": "job-a"}
        # the manifest list: written before the commit, where pyiceberg writes its own, empty, read back as empty
        metadata_dir = Path(table.metadata.location.removeprefix("file://")) / "metadata"
        written = Path(genesis.manifest_list.removeprefix("file://"))
        assert written.parent == metadata_dir and written.exists()
        assert list(read_manifest_list(table.io.new_input(genesis.manifest_list))) == []

        add_on_branch(table, genesis, "main")
        table = catalog.load_table("demo.words")
        stored = table.metadata.snapshot_by_id(genesis.snapshot_id)
        assert stored is not None and table.metadata.current_snapshot_id == genesis.snapshot_id
        assert stored.parent_snapshot_id is None
        assert stored.manifest_list == genesis.manifest_list
        assert _pyiceberg.summary_parts(stored.summary) == (operation, properties)
        if format_version >= 2:
            assert stored.sequence_number == genesis.sequence_number == table.metadata.last_sequence_number
        assert stored.manifests(table.io) == []  # zero manifests, so zero entries
        assert table.inspect.entries(snapshot_id=genesis.snapshot_id).num_rows == 0
        scanned = table.scan(snapshot_id=genesis.snapshot_id).to_arrow()
        assert scanned.num_rows == 0 and scanned.column_names == ["word"]
        assert table.scan().to_arrow().num_rows == 0

        # pyiceberg's own append continues from it: parent, totals from its summary, a manifest list like ours
        table.append(rows(["a", "b"]))
        table = catalog.load_table("demo.words")
        head = table.current_snapshot()
        assert head is not None and head.parent_snapshot_id == genesis.snapshot_id
        assert head.summary["total-records"] == "2" and head.summary["total-data-files"] == "1"
        assert {k for k in head.summary.additional_properties if k.startswith("total-")} == set(_pyiceberg.EMPTY_TOTALS)
        assert Path(head.manifest_list.removeprefix("file://")).parent == metadata_dir
        ours, theirs = manifest_list_header(table, genesis.manifest_list), manifest_list_header(table, head.manifest_list)
        assert ours.keys() == theirs.keys() and ours["avro.codec"] == theirs["avro.codec"]
        assert ours["snapshot-id"] == str(genesis.snapshot_id) and ours["parent-snapshot-id"] == "null"
        assert ours["format-version"] == str(format_version)
        if format_version >= 2:
            assert ours["sequence-number"] == str(genesis.sequence_number)
        assert table.scan(snapshot_id=genesis.snapshot_id).to_arrow().num_rows == 0
        assert table.scan().to_arrow().num_rows == 2
    finally:
        catalog.engine.dispose()


def test_an_empty_snapshot_without_parent_is_exempt_from_the_sequence_number_check(table) -> None:
    """The fence snapshot: a parentless empty snapshot on its own branch, built from metadata a concurrent commit
    has since overtaken (its sequence number no longer above the table's), is still accepted; with a parent, the
    same sequence number is refused. ``sequence_number`` is taken as given (a second snapshot of one commit)."""
    table.append(rows(["a"]))
    stale = table.metadata
    table.append(rows(["b"]))  # another commit lands meanwhile
    table.refresh()
    head = table.metadata.current_snapshot_id
    fence = _pyiceberg.empty_snapshot(table, {"consistent.fence": "1"}, metadata=stale)
    assert fence.sequence_number == stale.last_sequence_number + 1 <= table.metadata.last_sequence_number
    assert fence.parent_snapshot_id is None
    add_on_branch(table, fence, "consistent-fence")
    table.refresh()
    assert table.metadata.refs["consistent-fence"].snapshot_id == fence.snapshot_id
    assert table.metadata.current_snapshot_id == head  # main untouched
    assert table.scan(snapshot_id=fence.snapshot_id).to_arrow().num_rows == 0
    assert table.scan().to_arrow().num_rows == 2
    assert table.metadata.snapshot_by_id(fence.snapshot_id).manifests(table.io) == []

    given = _pyiceberg.empty_snapshot(table, {}, sequence_number=table.metadata.last_sequence_number + 5)
    assert given.sequence_number == table.metadata.last_sequence_number + 5
    with_parent = given.model_copy(update={"parent_snapshot_id": head, "sequence_number": stale.last_sequence_number})
    with pytest.raises(ValueError, match="older than last sequence number"):
        add_on_branch(table, with_parent, "other")


def test_nothing_is_registered_at_import() -> None:
    code = (
        "import consistent_catalog, consistent_catalog.retention\n"
        "from pyiceberg.table.update import _apply_table_update\n"
        "from consistent_catalog._pyiceberg import RemoveSnapshotsKeepingParents\n"
        "print(RemoveSnapshotsKeepingParents in _apply_table_update.registry)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


#: pyiceberg (and pydantic/Enum) internals: allowed in _pyiceberg.py only.
INTERNALS = re.compile(
    r"__pydantic_private__|_apply_table_update|\._value_\b|\btx\._|\._snapshot_producers|\._stage\(|\._apply\("
    r"|_iceberg_type_filter|\._load_file_io\b|\bIcebergTables\b"
)


def test_no_other_module_touches_pyiceberg_internals() -> None:
    assert lines_matching(INTERNALS, except_in="_pyiceberg.py") == []


# --- 7. a REST catalog's loadTable, conditional and raw ----------------------------------------------
@pytest.mark.integration
def test_the_raw_rest_load_sends_what_load_table_sends_and_reads_its_answer(rest_server, tmp_path: Path) -> None:
    """``rest_load_table`` asks the URL ``load_table`` asks (nested namespaces, a prefix), through the catalog's
    own session; its 200 body parses (pyiceberg's own model) to the metadata ``load_table`` returns; a current
    ETag gets a 304 with no body; a missing table is left to ``load_table`` (None)."""
    from tests.conftest import rest_catalog

    catalog = rest_catalog(rest_server, tmp_path)
    assert _pyiceberg.rest_loads_raw(catalog)
    catalog.create_namespace(("deep", "er"))
    catalog.create_table("deep.er.words", schema=SCHEMA).append(rows(["a"]))
    catalog._session.headers["X-Test-Header"] = "set on the session"  # as pyiceberg sets its own headers
    sent: list = []
    catalog._session.hooks["response"].append(lambda response, *a, **k: sent.append(response.request))
    table = catalog.load_table("deep.er.words")
    answer = _pyiceberg.rest_load_table(catalog, "deep.er.words", None)
    assert answer is not None and answer.status == 200 and answer.etag
    assert sent[0].url == sent[1].url and dict(sent[0].headers) == dict(sent[1].headers)  # load_table's request
    assert sent[1].headers["X-Test-Header"] == "set on the session"
    location, metadata = _pyiceberg.parse_load_result(answer.body)
    assert location == table.metadata_location and metadata == table.metadata
    unchanged = _pyiceberg.rest_load_table(catalog, "deep.er.words", answer.etag)
    assert unchanged == _pyiceberg.RestAnswer(304, answer.etag, b"")
    assert _pyiceberg.rest_load_table(catalog, "deep.er.missing", None) is None
    stale = _pyiceberg.rest_load_table(catalog, "deep.er.words", '"not-the-current-one"')
    assert stale is not None and stale.status == 200 and stale.etag == answer.etag


@pytest.mark.integration
def test_the_raw_rest_load_is_only_for_a_plain_rest_catalog(rest_server, tmp_path: Path, monkeypatch) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    from tests.conftest import rest_catalog

    catalog = rest_catalog(rest_server, tmp_path)
    monkeypatch.setattr(catalog, "load_table", catalog.load_table)  # replaced on the instance
    assert not _pyiceberg.rest_loads_raw(catalog)

    class Custom(RestCatalog):
        pass

    assert not _pyiceberg.rest_loads_raw(Custom("c", uri=rest_server.uri))
    assert not _pyiceberg.rest_loads_raw(SqlCatalog("s", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}"))
    odd = RestCatalog("o", uri=rest_server.uri, **{"snapshot-loading-mode": "some"})
    assert not _pyiceberg.rest_loads_raw(odd)  # load_table raises for it: it is asked, and raises


@pytest.mark.integration
def test_a_widened_rest_pool_keeps_that_many_connections_open(rest_server, tmp_path: Path) -> None:
    """16 requests at once through the widened pool use 16 connections, reused by the next 16 (counted at a
    proxy in front of the server: requests' default pool of 10 would open new ones for the extra requests)."""
    from concurrent.futures import ThreadPoolExecutor

    from pyiceberg.catalog import load_catalog

    from tests.harness.proxy import DelayProxy

    with DelayProxy(rest_server.port, delay_ms=30) as proxy:
        catalog = load_catalog("far", type="rest", uri=proxy.uri)
        catalog.create_namespace("wide")
        catalog.create_table("wide.t", schema=SCHEMA)
        assert _pyiceberg.widen_rest_connections(catalog, 16) == 16
        assert _pyiceberg.widen_rest_connections(catalog, 8) == 16  # never narrowed
        before = proxy.connections
        with ThreadPoolExecutor(16) as pool:
            for _ in range(2):
                answers = list(pool.map(lambda _: _pyiceberg.rest_load_table(catalog, "wide.t", None), range(16)))
                assert all(a is not None and a.status == 200 for a in answers)
        assert proxy.connections - before <= 16


# --- 9. Idempotency-Key on a REST catalog's commits ----------------------------------------------------
@pytest.mark.integration
def test_the_idempotency_key_goes_on_the_commit_s_post_only(rest_server, tmp_path: Path) -> None:
    """pyiceberg 0.12 sends no ``Idempotency-Key``: ``idempotency_key`` puts one on the POST ``commit_table`` sends
    (through the ``TimedAdapter`` mounted for the catalog's URI), none on a load inside the block nor on a commit
    after it; a server that advertises no ``idempotency-key-lifetime`` gets None, asked once per catalog."""
    from pyiceberg.table.update import SetPropertiesUpdate

    from tests.conftest import rest_catalog

    catalog = rest_catalog(rest_server, tmp_path)
    sent: list = []
    catalog._session.hooks["response"].append(lambda response, *a, **k: sent.append(response.request))
    assert _pyiceberg.idempotency_key_lifetime(catalog) is None
    assert _pyiceberg.idempotency_key_lifetime(catalog) is None
    assert [r.url.split("?")[0].rsplit("/", 2)[-2:] for r in sent] == [["v1", "config"]]  # asked once
    catalog.create_namespace("keyed")
    table = catalog.create_table("keyed.t", schema=SCHEMA)
    assert _pyiceberg._keying_adapter(catalog)
    del sent[:]
    with _pyiceberg.idempotency_key("0190b1c2-0000-7000-8000-0000000000aa"):
        catalog.load_table("keyed.t")
        catalog.commit_table(table, (), (SetPropertiesUpdate(updates={"a": "1"}),))
    catalog.commit_table(table, (), (SetPropertiesUpdate(updates={"a": "2"}),))
    assert [(r.method, r.headers.get("Idempotency-Key")) for r in sent] == [
        ("GET", None), ("POST", "0190b1c2-0000-7000-8000-0000000000aa"), ("POST", None)]
    assert catalog.load_table("keyed.t").properties["a"] == "2"
