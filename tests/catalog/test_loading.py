"""Loading states (``consistent_catalog.loading``): one query, lean reads, the cache, on real catalogs.

- every table's state through the loader equals ``TableState.from_metadata`` of pyiceberg's own load,
  on histories written by pyiceberg (ingests, epochs, staged branches, pins, deletes, expiry, revision)
  and on gzip-compressed metadata files;
- the SQL catalog is asked once for all tables (SQLite and PostgreSQL: the ``catalog`` fixture); a REST
  catalog once per table, all at once, and an unchanged table costs a ``304 Not Modified`` with no body
  (seen on the wire, through a hook on pyiceberg's own HTTP session); a server without ETags still
  skips the decode of a metadata file parsed before;
- an unchanged table is not read again; a changed one is; the cache stays within its bounds;
- a commit by another process is seen by the next resolution;
- ``read``/``to_arrow`` scan the metadata file the cut was resolved from, without asking the catalog;
- the conformance corpus, registered in a real SQLite catalog and in a REST catalog, resolves (cold and
  warm) as through pyiceberg's own loads.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table.metadata import TableMetadataUtil
from sqlalchemy import event

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import count_words, histogram
from consistent_catalog.exceptions import ConsistentCatalogError, TableNotFoundError
from consistent_catalog.loading import MetadataLoader, StateCache, table_state
from consistent_catalog.metadata import LeanDecodeError, decode_state
from consistent_catalog.resolver import DEFAULT_LEVEL
from consistent_catalog.retention import RetentionPolicy
from consistent_catalog.state import TableState
from tests.conformance.corpus import cut_json, load_cases, python_answer
from tests.conftest import rest_catalog
from tests.harness.lake import sqlite_catalog, words
from tests.harness.metadata_docs import REFUSED, assert_same

WORDS, COUNTS, HIST = "demo.words", "demo.word_counts", "demo.count_histogram"
FLIP = (WORDS, COUNTS, HIST)
#: the test runs on the backends named (overriding the ``backend`` fixture's parameters)
ON_SQL = pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.integration)],
                                 indirect=True)
ON_REST = pytest.mark.parametrize("backend", [pytest.param("rest", marks=pytest.mark.integration)], indirect=True)


# --- helpers -----------------------------------------------------------------------------------------
def is_rest(catalog) -> bool:  # type: ignore[no-untyped-def]
    return isinstance(catalog, RestCatalog)


@contextmanager
def statements(catalog: SqlCatalog) -> Iterator[list[str]]:
    """Every SQL statement the catalog's engine runs meanwhile; for a REST catalog, every HTTP request its
    session sends (``REST <METHOD> <url>``)."""
    seen: list[str] = []
    if is_rest(catalog):
        def record_request(response, *args, **kwargs):  # noqa: ARG001 - a requests response hook
            seen.append(f"REST {response.request.method} {response.request.url}")

        hooks = catalog._session.hooks["response"]
        hooks.append(record_request)
        try:
            yield seen
        finally:
            hooks.remove(record_request)
        return

    def record(conn, cursor, statement, parameters, context, executemany):  # noqa: ARG001
        seen.append(statement)

    event.listen(catalog.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(catalog.engine, "before_cursor_execute", record)


@contextmanager
def wire(catalog: RestCatalog, *, strip_etags: bool = False) -> Iterator[list[dict]]:
    """Every loadTable exchange of the REST catalog's HTTP session, as the wire saw it: the table, the status,
    the body's size, the ``If-None-Match`` sent, the ``ETag`` received and the sending thread. With
    ``strip_etags`` the answers lose their ``ETag`` before the client reads them: a server without ETags."""
    seen: list[dict] = []
    lock = threading.Lock()

    def record(response, *args, **kwargs):  # noqa: ARG001 - a requests response hook
        if response.request.method != "GET" or "/tables/" not in response.request.url:
            return
        if strip_etags:
            response.headers.pop("ETag", None)
        with lock:
            seen.append({"table": "demo." + response.request.url.split("?")[0].rsplit("/", 1)[1],
                         "status": response.status_code, "bytes": len(response.content),
                         "if_none_match": response.request.headers.get("If-None-Match"),
                         "etag": response.headers.get("ETag"), "thread": threading.current_thread().name})

    hooks = catalog._session.hooks["response"]
    hooks.append(record)
    try:
        yield seen
    finally:
        hooks.remove(record)


def by_table(seen: list[dict]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for exchange in seen:
        assert exchange["table"] not in found, f"{exchange['table']} asked twice: {seen}"
        found[exchange["table"]] = exchange
    return found


def table_reads(seen: list[str]) -> list[str]:
    """Reads of table pointers: SELECTs on ``iceberg_tables``, or REST GET/HEAD requests on a table."""
    return [s for s in seen if ("iceberg_tables" in s and s.lstrip().upper().startswith("SELECT"))
            or (s.startswith(("REST GET ", "REST HEAD ")) and "/tables/" in s)]


def catalog_spec(catalog) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Properties that open the same catalog in another process (the SQL URI with its password)."""
    if is_rest(catalog):
        return {"type": "rest", "uri": catalog.properties["uri"], "warehouse": catalog.properties["warehouse"]}
    return {"type": "sql", "uri": catalog.engine.url.render_as_string(hide_password=False),
            "warehouse": catalog.properties["warehouse"]}


def own_cache(cc: ConsistentCatalog, **bounds: int) -> StateCache:
    cache = StateCache(**bounds)
    cc.store.loader.cache = cache
    return cache


def read_path(location: str) -> Path:
    # file:///x (pyiceberg) or file:/x (Hadoop's spelling: metadata a REST server's JdbcCatalog wrote)
    return Path(location[len("file://"):] if location.startswith("file://") else location.removeprefix("file:"))


def read_bytes(location: str) -> bytes:
    return read_path(location).read_bytes()


def pyiceberg_state(catalog: SqlCatalog, name: str) -> TableState:
    return table_state(name, catalog.load_table(name).metadata)


def file_state(name: str, location: str) -> TableState:
    """pyiceberg's parse of the metadata *file* at ``location``: what the lean decoder of that file must equal.
    (A REST server answers ``load_table`` with its own serialization of the metadata, whose JSON object
    order, e.g. of the refs, need not be the file's; for a SqlCatalog both are the file.)"""
    return table_state(name, TableMetadataUtil.parse_raw(read_bytes(location)))


@pytest.fixture
def pipeline(cc: ConsistentCatalog, catalog: SqlCatalog, flip_tables) -> ConsistentCatalog:
    """The FLIP tables after a busy history: ingests (keyed and not), epochs, an empty epoch, pins, a foreign delete."""
    cc.ingest(WORDS, words("a", "b", "b"), barrier=1_000)
    counts = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    hist = cc.job("histogram", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite")
    counts.register()
    hist.register()
    counts.run_epoch()
    hist.run_epoch()
    cc.ingest(WORDS, words("c"), barrier=2_000, key="batch-2")
    counts.run_epoch()
    cc.advance_watermark(WORDS, 2_500)
    counts.run_epoch()  # nothing new: publishes the watermark only
    hist.run_epoch()
    cc.pins.pin([COUNTS, HIST], ttl="1h")
    return cc


# --- the same states as pyiceberg's ----------------------------------------------------------------------
def test_loader_states_equal_pyiceberg_states_on_real_histories(pipeline, catalog) -> None:
    cc = pipeline
    own_cache(cc)
    for name in FLIP:
        location = catalog.load_table(name).metadata_location
        assert_same(decode_state(name, read_bytes(location)), file_state(name, location))
    assert_same(cc.store.state(COUNTS), pyiceberg_state(catalog, COUNTS))
    for lean, name in zip(cc.store.states(FLIP), FLIP):
        assert_same(lean, pyiceberg_state(catalog, name))
    for name, lean in cc.store.upstream_states([HIST]).items():
        assert_same(lean, pyiceberg_state(catalog, name))
    assert pyiceberg_state(catalog, COUNTS).tags  # the pin is there, and so compared


def test_after_deletes_expiry_and_revision_too(pipeline, catalog) -> None:
    cc = pipeline
    catalog.load_table(WORDS).delete("word == 'a'")  # a pyiceberg delete on the root: no barrier, system time
    cc.retention.expire([WORDS], RetentionPolicy(older_than=0, keep_last=1))
    cc.revise(WORDS, 2_000)
    own_cache(cc)
    for name in FLIP:
        location = catalog.load_table(name).metadata_location
        assert_same(decode_state(name, read_bytes(location)), file_state(name, location))
        assert_same(cc.store.state(name), pyiceberg_state(catalog, name))


def test_gzip_metadata_files(pipeline, catalog, tmp_path) -> None:
    cc = pipeline
    expected = {name: cc.resolve([name]).to_json() for name in FLIP}
    catalog.create_namespace("gz")
    for name in FLIP:  # the same tables again, from gzip-compressed copies of their metadata
        location = catalog.load_table(name).metadata_location
        compressed = tmp_path / f"{name.split('.')[1]}-00001-copy.gz.metadata.json"
        compressed.write_bytes(gzip.compress(read_bytes(location)))
        catalog.register_table(f"gz.{name.split('.')[1]}", f"file://{compressed}")  # pyiceberg reads it: valid
    own_cache(cc)
    for name in FLIP:
        gz = f"gz.{name.split('.')[1]}"
        assert_same(cc.store.state(gz), pyiceberg_state(catalog, gz))
        cut = cc.resolve([gz]).to_json()
        assert cut["barrier"] == expected[name]["barrier"]
        assert cut["tables"][gz] == expected[name]["tables"][name]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_the_lean_decoder_refuses_pyiceberg_parses_as_before(name: str) -> None:
    document = REFUSED[name]
    data = json.dumps(document).encode()
    with pytest.raises(LeanDecodeError):
        decode_state("db.t", data)
    try:
        expected: object = table_state("db.t", TableMetadataUtil.parse_raw(data))
    except Exception as exc:  # noqa: BLE001
        with pytest.raises(type(exc)):
            MetadataLoader._parse("db.t", "file:///x/00001-a.metadata.json", data)
        return
    got = MetadataLoader._parse("db.t", "file:///x/00001-a.metadata.json", data)
    if "timestamp missing" in name:  # pyiceberg takes the time of parsing: two parses differ there only
        assert got.snapshots.keys() == expected.snapshots.keys()  # type: ignore[attr-defined]
        got = TableState(got.identifier, expected.snapshots, got.branches, got.properties, got.tags, got.main_log,  # type: ignore[attr-defined]
                         got.current_schema_id)
    assert got == expected


# --- one catalog round-trip -------------------------------------------------------------------------------
@ON_SQL
def test_one_query_for_many_tables(pipeline, catalog) -> None:
    cc = pipeline
    for i in range(12):
        catalog.create_table(f"demo.extra_{i:02d}", schema=catalog.load_table(WORDS).schema())
        cc.ingest(f"demo.extra_{i:02d}", words("x"), barrier=1_000 + i)
    names = [f"demo.extra_{i:02d}" for i in range(12)] + [WORDS]
    own_cache(cc)
    with statements(catalog) as seen:
        states = cc.store.states(names)
    assert len(table_reads(seen)) == 1, seen
    assert [s.identifier for s in states] == names
    with statements(catalog) as seen:
        cut = cc.resolve([*names, HIST])  # the cut's tables and their upstream: one query per lineage level
    assert len(table_reads(seen)) <= 3, seen
    assert cut.barrier is not None
    with statements(catalog) as seen:
        cc.status(list(FLIP))
    assert len(table_reads(seen)) <= 3, seen


def extra_tables(cc: ConsistentCatalog, catalog, count: int = 12) -> list[str]:  # type: ignore[no-untyped-def]
    names = [f"demo.extra_{i:02d}" for i in range(count)]
    for i, name in enumerate(names):
        catalog.create_table(name, schema=catalog.load_table(WORDS).schema())
        cc.ingest(name, words("x"), barrier=1_000 + i)
    return names


@ON_REST
def test_rest_asks_for_every_table_at_once_and_an_unchanged_one_costs_a_304(pipeline, catalog) -> None:
    cc = pipeline
    names = [*extra_tables(cc, catalog), *FLIP]
    by_pyiceberg = {name: pyiceberg_state(catalog, name) for name in names}
    cache = own_cache(cc)
    with wire(catalog) as cold:
        states = cc.store.states(names)
    first = by_table(cold)
    assert sorted(first) == sorted(names)  # one request per table
    assert all(e["status"] == 200 and e["etag"] and e["if_none_match"] is None for e in cold), cold
    assert len({e["thread"] for e in cold}) > 1  # sent at once, not one after the other
    for state in states:
        assert_same(state, by_pyiceberg[state.identifier])
    with wire(catalog) as warm:
        again = cc.store.states(names)
    second = by_table(warm)
    assert sorted(second) == sorted(names)
    for name, exchange in second.items():  # each asked "still the metadata of this ETag?", answered with no body
        assert exchange["if_none_match"] == first[name]["etag"] and (exchange["status"], exchange["bytes"]) == (304, 0)
    assert [a is b for a, b in zip(again, states)] == [True] * len(names)  # the very states, nothing decoded
    # a commit by another client: that table alone comes back whole, with a new ETag
    catalog.load_table(WORDS).append(words("d"), snapshot_properties={P.BARRIER: "3000"})
    with wire(catalog) as changed:
        cut = cc.resolve(names)
    third = by_table(changed)
    assert third[WORDS]["status"] == 200 and third[WORDS]["etag"] != first[WORDS]["etag"]
    assert all(e["status"] == 304 for name, e in third.items() if name != WORDS)
    assert_same(cc.store.state(WORDS), pyiceberg_state(catalog, WORDS))
    assert cut.barrier == 1_000  # extra_00's watermark: the lowest of all
    assert cache.misses == len(names) + 1


@ON_REST
def test_a_304_stands_for_the_etag_sent_even_if_another_thread_moved_the_loaders_etag(pipeline) -> None:
    from consistent_catalog._pyiceberg import RestAnswer

    loader = pipeline.store.loader
    own_cache(pipeline)
    expected = pipeline.store.state(WORDS)
    sent = loader._etags[WORDS]
    loader._etags[WORDS] = ('"moved-by-another-thread"', "file:/somewhere/else.metadata.json")
    located = loader._from_answer(WORDS, RestAnswer(304, sent[0], b""), sent)
    assert located is not None and located.location == sent[1] and located.state is expected


@ON_REST
def test_a_table_handed_out_with_config_is_scanned_with_pyicebergs_fileio(pipeline, catalog) -> None:
    """Where the server hands config (or storage credentials) out with a table, a reader's table is the one
    ``load_table`` builds, with that FileIO, also for a cut older than the table's current metadata."""
    cc = pipeline

    def hand_out_config(response, *args, **kwargs):  # noqa: ARG001 - as a credential-vending server answers
        if response.request.method == "GET" and "/tables/" in response.request.url and response.status_code == 200:
            body = json.loads(response.content)
            body["config"] = {"test.vended": "yes"}
            response._content = json.dumps(body).encode()

    hooks = catalog._session.hooks["response"]
    hooks.append(hand_out_config)
    try:
        read = ConsistentCatalog(catalog).read([WORDS, COUNTS])  # a loader that saw the server's answers from the first
        cc.ingest(WORDS, words("later"), barrier=9_000)  # the table moves on after the cut
        for name in (WORDS, COUNTS):
            table = read.table(name)
            assert table.io.properties.get("test.vended") == "yes"
            expected = catalog.load_table(name).scan(snapshot_id=read.cut[name].snapshot_id).to_arrow()
            assert sorted(map(str, read.to_arrow(name).to_pylist())) == sorted(map(str, expected.to_pylist()))
        assert "later" not in read.to_arrow(WORDS)["word"].to_pylist()
    finally:
        hooks.remove(hand_out_config)


@ON_REST
def test_rest_without_etags_still_skips_the_decode_of_an_unchanged_table(pipeline, catalog) -> None:
    cc = pipeline
    cache = own_cache(cc)
    with wire(catalog, strip_etags=True) as cold:
        first = cc.resolve(list(FLIP))
    with wire(catalog, strip_etags=True) as warm:
        again = cc.resolve(list(FLIP))
    assert again == first
    assert all(e["status"] == 200 and e["if_none_match"] is None for e in cold + warm), cold + warm
    assert (cache.hits, cache.misses) == (3, 3)  # the second answers' metadata files were parsed before


@ON_REST
def test_rest_answers_equal_pyiceberg_loads_table_by_table(pipeline, catalog, monkeypatch) -> None:
    """The same cuts, states and errors as pyiceberg's own ``load_table`` (forced by replacing it on the instance)."""
    cc = pipeline
    names = [*extra_tables(cc, catalog, 3), *FLIP]
    ours = {level: cc.resolve(names, level).to_json() for level in ("repeatable-read", "read-committed")}
    own_cache(cc)
    monkeypatch.setattr(catalog, "load_table", catalog.load_table)  # an instance attribute: no raw REST loads
    theirs = ConsistentCatalog(catalog)
    own_cache(theirs)
    assert not theirs.store.loader._rest
    assert {level: theirs.resolve(names, level).to_json() for level in ours} == ours


def test_missing_tables_raise_as_before(pipeline, catalog) -> None:
    cc = pipeline
    with pytest.raises(TableNotFoundError, match=r"table demo\.nope does not exist in catalog 'lake'"):
        cc.store.states([WORDS, "demo.nope", "demo.nope2"])
    with pytest.raises(TableNotFoundError, match=r"demo\.nope "):
        cc.store.state("demo.nope")
    with pytest.raises(TableNotFoundError, match=r"demo\.nope "):
        cc.resolve([COUNTS, "demo.nope"])
    with pytest.raises(TableNotFoundError, match=r"demo\.nope "):
        cc.read(["demo.nope"])
    assert set(cc.store.upstream_states([HIST, "demo.nope"], required=False)) == set(FLIP)
    catalog.drop_table(WORDS)  # a dropped source is left out of the closure
    assert set(cc.store.upstream_states([HIST])) == {COUNTS, HIST}


def test_upstream_order_is_the_depth_first_order_of_before(pipeline) -> None:
    cc = pipeline
    assert list(cc.store.upstream_states([HIST])) == [HIST, COUNTS, WORDS]
    assert list(cc.store.upstream_states([WORDS, HIST])) == [HIST, COUNTS, WORDS]


@pytest.mark.no_faults
def test_a_known_lineage_is_loaded_in_one_round_and_a_changed_one_is_still_followed(pipeline, catalog, monkeypatch) -> None:
    """The loader asks for the sources each table named when it last loaded it together with that table: a
    warm closure is one load (one SQL query, one round of REST requests); a changed lineage is followed level by
    level as before, and a table no longer upstream is not in the result."""
    cc = pipeline
    rounds: list[list[str]] = []
    original = MetadataLoader._load
    monkeypatch.setattr(MetadataLoader, "_load", lambda self, names, must: rounds.append(list(names)) or original(self, names, must))
    assert list(cc.store.upstream_states([HIST])) == [HIST, COUNTS, WORDS]
    rounds.clear()
    with statements(catalog) as seen:
        assert list(cc.store.upstream_states([HIST])) == [HIST, COUNTS, WORDS]
    assert [sorted(r) for r in rounds] == [sorted(FLIP)]
    assert len(table_reads(seen)) == (3 if is_rest(catalog) else 1)
    # word_counts now derives from another root as well, and no longer from words
    catalog.create_table("demo.other", schema=catalog.load_table(WORDS).schema())
    cc.ingest("demo.other", words("o"), barrier=2_000)
    with catalog.load_table(COUNTS).transaction() as tx:
        tx.set_properties({P.SOURCES: json.dumps(["demo.other"])})
    rounds.clear()
    assert list(cc.store.upstream_states([HIST])) == [HIST, COUNTS, "demo.other"]  # words guessed, not upstream
    assert [sorted(r) for r in rounds] == [sorted(FLIP), ["demo.other"]]
    rounds.clear()
    assert list(cc.store.upstream_states([HIST])) == [HIST, COUNTS, "demo.other"]
    assert [sorted(r) for r in rounds] == [sorted([HIST, COUNTS, "demo.other"])]
    # a table guessed from an older lineage that can no longer be read does not make the closure raise
    cc.store.loader._sources[COUNTS] = (WORDS,)  # as remembered before the change above
    read_path(catalog.load_table(WORDS).metadata_location).unlink()
    cc.store.loader.cache.clear()
    assert list(cc.store.upstream_states([HIST])) == [HIST, COUNTS, "demo.other"]
    with pytest.raises(Exception):  # noqa: B017 - whatever the catalog raises for it, it is not a guess there
        cc.store.states([WORDS])


def test_other_catalogs_are_asked_table_by_table(pipeline, catalog, monkeypatch) -> None:
    """A catalog that is not a plain SqlCatalog (here: one whose load_table was replaced) gets load_table calls."""
    cc = pipeline
    expected = cc.resolve([HIST]).to_json()
    calls: list[str] = []
    original = catalog.load_table

    def counting(identifier):
        calls.append(identifier)
        return original(identifier)

    monkeypatch.setattr(catalog, "load_table", counting)
    fresh = ConsistentCatalog(catalog)
    own_cache(fresh)
    assert fresh.resolve([HIST]).to_json() == expected
    assert sorted(calls) == sorted(FLIP)
    read = fresh.read([COUNTS])
    calls.clear()
    assert read.to_arrow(COUNTS).num_rows == 3
    assert calls == []  # the table loaded to resolve is the one scanned


# --- the cache ---------------------------------------------------------------------------------------------
@pytest.mark.no_faults
def test_an_unchanged_table_is_not_read_again(pipeline, catalog) -> None:
    cc = pipeline
    cache = own_cache(cc)
    first = cc.resolve(list(FLIP))
    assert (cache.hits, cache.misses) == (0, 3)
    again = cc.resolve(list(FLIP))
    assert again == first and (cache.hits, cache.misses) == (3, 3)
    cc.status(list(FLIP))
    cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")  # no load
    assert cache.misses == 3  # status used the same states
    # one table changes (written by another process): only it is read again
    catalog.load_table(WORDS).append(words("d"), snapshot_properties={P.BARRIER: "3000"})
    cache.hits = cache.misses = 0
    cc.resolve(list(FLIP))
    assert (cache.hits, cache.misses) == (2, 1)


def test_epoch_planning_uses_the_cache(pipeline) -> None:
    cc = pipeline
    cache = own_cache(cc)
    cc.resolve(list(FLIP))
    job = cc.job("histogram", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite", takeover=True)
    job.register()  # a commit on HIST: its metadata file changes
    cache.hits = cache.misses = 0
    job.plan()
    assert cache.misses == 1 and cache.hits >= 2  # HIST read again; COUNTS and WORDS from the cache


def test_the_cache_is_bounded(pipeline, catalog) -> None:
    cc = pipeline
    sizes = {name: len(cc.store.state(name).snapshots) + 1 for name in FLIP}
    cache = own_cache(cc, max_snapshots=sizes[WORDS] + sizes[COUNTS])
    for name in FLIP:
        cc.store.state(name)
        assert cache.snapshots <= cache.max_snapshots
    keys = {identifier for identifier, _ in cache._entries}
    assert HIST in keys and WORDS not in keys  # the least recently used went first
    small = own_cache(cc, max_entries=2)
    cc.store.states(list(FLIP))
    assert len(small) == 2
    tiny = own_cache(cc, max_snapshots=1)
    cc.store.state(WORDS)
    assert len(tiny) == 0  # larger than the whole cache: not kept


def test_a_newer_metadata_file_replaces_the_older_state_in_the_cache(pipeline, catalog) -> None:
    cc = pipeline
    cache = own_cache(cc)
    cc.store.states(list(FLIP))
    before = catalog.load_table(WORDS).metadata_location
    cc.ingest(WORDS, words("z"), key="newer-file")  # a commit: WORDS has a new metadata file
    after = catalog.load_table(WORDS).metadata_location
    cc.store.states(list(FLIP))
    held = [location for identifier, location in cache._entries if identifier == WORDS]
    assert held == [after] and before != after  # superseded: loads ask for the current file only
    assert len(cache) == len(FLIP) and cache.snapshots == sum(len(cc.store.state(n).snapshots) + 1 for n in FLIP)
    elsewhere = before.replace("/metadata/", "/other-catalog-metadata/")  # the same name in another catalog's folder
    cache.put(WORDS, elsewhere, cc.store.state(WORDS))
    assert (WORDS, after) in cache and (WORDS, elsewhere) in cache


def test_writers_states_come_from_the_cache_and_fill_it(pipeline) -> None:
    cc = pipeline
    cache = own_cache(cc)
    table, state = cc.store.load(COUNTS)
    assert (cache.hits, cache.misses) == (0, 1)
    assert cc.store.state(COUNTS) is state and (cache.hits, cache.misses) == (1, 1)
    assert table.metadata.properties == dict(state.properties)


# --- concurrent writers ------------------------------------------------------------------------------------
def ingest_in_another_process(catalog: SqlCatalog, barrier: int) -> None:
    code = textwrap.dedent(
        f"""
        import pyarrow as pa
        from pyiceberg.catalog import load_catalog
        from consistent_catalog import ConsistentCatalog
        catalog = load_catalog({catalog.name!r}, **{catalog_spec(catalog)!r})
        ConsistentCatalog(catalog).ingest({WORDS!r}, pa.table({{"word": ["from-another-process"]}}), barrier={barrier})
        if hasattr(catalog, "engine"):
            catalog.engine.dispose()
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)


def test_a_commit_by_another_process_is_seen_by_the_next_resolve(pipeline, catalog) -> None:
    cc = pipeline
    cache = own_cache(cc)
    before = cc.resolve([WORDS])
    assert cc.resolve([WORDS]) == before and cache.hits == 1  # warm: answered from the cache
    for barrier in (5_000, 6_000):
        ingest_in_another_process(catalog, barrier)
        cut = cc.resolve([WORDS])
        assert cut.barrier == barrier
        assert cut[WORDS].snapshot_id == catalog.load_table(WORDS).metadata.current_snapshot_id
        assert cc.status([WORDS])[0].watermark == barrier
    read = cc.read([WORDS])
    assert "from-another-process" in read.to_arrow(WORDS)["word"].to_pylist()


def _cold_states_in_a_child(spec: dict[str, str], name: str, queue) -> None:  # type: ignore[no-untyped-def]
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(name, **spec)
    cc = ConsistentCatalog(catalog)
    own_cache(cc)
    queue.put([s.identifier for s in cc.store.states(list(FLIP))])
    if hasattr(catalog, "engine"):
        catalog.engine.dispose()


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_the_reader_pool_survives_a_fork(pipeline, catalog) -> None:
    """Reader threads started in the parent do not exist in a forked child: the child starts its own."""
    import multiprocessing

    own_cache(pipeline)
    pipeline.store.states(list(FLIP))  # the parent's pool has threads now
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_cold_states_in_a_child, args=(catalog_spec(catalog), catalog.name, queue))
    child.start()
    child.join(timeout=120)
    if child.is_alive():
        child.kill()  # the child this test started
        pytest.fail("the forked child hung reading metadata")
    assert child.exitcode == 0 and queue.get(timeout=5) == list(FLIP)


# --- reads scan what was resolved ----------------------------------------------------------------------------
def test_read_scans_the_resolved_metadata_without_asking_the_catalog_again(pipeline, catalog) -> None:
    cc = pipeline
    read = cc.read([WORDS, COUNTS])
    expected = {name: sorted(read.to_arrow(name).to_pylist(), key=str) for name in (WORDS, COUNTS)}
    again = cc.read([WORDS, COUNTS])
    cc.ingest(WORDS, words("later"), barrier=9_000)  # a commit after resolving: the read stays at its cut
    with statements(catalog) as seen:
        got = {name: sorted(again.to_arrow(name).to_pylist(), key=str) for name in (WORDS, COUNTS)}
        again.to_arrow(WORDS)
    assert got == expected
    assert table_reads(seen) == []  # the catalog was not asked: the resolved metadata file was opened
    assert again.table(WORDS).metadata_location != catalog.load_table(WORDS).metadata_location
    assert again.table(WORDS) is again.table(WORDS)  # opened once
    with pytest.raises(KeyError):
        again.table(HIST)


# --- the conformance corpus through a real catalog -------------------------------------------------------------
CORPUS = load_cases()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("rest", marks=pytest.mark.integration)])
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_the_corpus_resolves_to_its_answers_through_a_catalog(case: str, kind: str, tmp_path: Path,
                                                                request: pytest.FixtureRequest) -> None:
    """Through the SQL catalog (one query, the lean decoder of the files) or the REST catalog (a request per
    table, the lean decoder of its answers, 304s when warm) and the cache, cold then warm, every query of the
    corpus gets the answer of the corpus's own reference path (pyiceberg's full parse of each table)."""
    body = CORPUS[case]
    catalog = sqlite_catalog(tmp_path) if kind == "sqlite" else rest_catalog(request.getfixturevalue("rest_server"), tmp_path)
    try:
        for name, document in body["tables"].items():
            namespace = name.rpartition(".")[0]
            if (namespace,) not in catalog.list_namespaces():
                catalog.create_namespace(namespace)
            path = tmp_path / f"{name}.metadata.json"
            path.write_text(json.dumps(document), encoding="utf-8")
            catalog.register_table(name, f"file://{path}")
        cc = ConsistentCatalog(catalog)
        own_cache(cc)
        wrong = []
        for repeat in ("cold", "warm"):
            for index, query in enumerate(body["queries"]):
                if query.get("kind") is not None:  # a component cut or a write plan: not a resolve
                    continue
                try:
                    answer = cut_json(cc.resolve(query["tables"], query.get("level", DEFAULT_LEVEL), query.get("as_of")))
                except ConsistentCatalogError as exc:
                    answer = {"error": type(exc).__name__}
                expected = python_answer(body["tables"], query)  # pyiceberg's full load, table by table
                if answer != expected:
                    wrong.append(f"{repeat} query {index}: expected {expected}, got {answer}")
        assert not wrong, "\n".join(wrong[:5])
    finally:
        if kind == "sqlite":
            catalog.engine.dispose()


def test_watermark_marker_property_round_trips(pipeline) -> None:
    assert pipeline.store.state(WORDS).properties.get(P.WATERMARK) == "2500"
