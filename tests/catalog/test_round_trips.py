"""Catalog round trips of an epoch and of an ingest, counted where they leave the process.

Every call that reaches the catalog goes through one of these entry points: ``load_table``,
``commit_table``, ``list_namespaces`` and ``list_tables``, on SQL catalogs the one-query listings of metadata
locations (``_pyiceberg.sql_metadata_locations``) and of every table (``_pyiceberg.sql_table_identifiers``), and on REST catalogs the loader's own loadTable request
(``_pyiceberg.rest_load_table``, one per table, sent concurrently). The counter wraps those on the catalog's class (so the SQL
fast path, which checks that ``load_table`` is the class's own, stays on) and counts what one step
costs on every backend. The numbers are exact: a change that adds a round trip fails here.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import pytest

from consistent_catalog import _pyiceberg
from consistent_catalog.demo import count_words
from consistent_catalog.util.time import now_ms
from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA, words

pytestmark = pytest.mark.no_faults  # every test here counts catalog requests

WORDS, COUNTS = "demo.words", "demo.word_counts"


@contextmanager
def counting(catalog, monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter]:
    calls: Counter = Counter()
    kind = type(catalog)
    # SqlCatalog.commit_table loads the table itself: part of that one commit (per thread: REST loads run
    # on the loader's threads at once)
    local = threading.local()
    counter = threading.Lock()

    def wrap(name: str, original):
        def counted(*args, **kwargs):
            inside = local.__dict__.setdefault("inside", [])
            if not inside:
                with counter:
                    calls[name] += 1
            inside.append(name)
            try:
                return original(*args, **kwargs)
            finally:
                inside.pop()
        return counted

    with monkeypatch.context() as patch:
        patch.setattr(kind, "load_table", wrap("load_table", kind.load_table))
        patch.setattr(kind, "commit_table", wrap("commit_table", kind.commit_table))
        listing = _pyiceberg.sql_metadata_locations

        def listed(catalog_, identifiers):
            found = listing(catalog_, identifiers)
            if found is not None:
                calls["listing"] += 1
            return found

        patch.setattr(_pyiceberg, "sql_metadata_locations", listed)
        for method in ("list_namespaces", "list_tables"):
            patch.setattr(kind, method, wrap(method, getattr(kind, method)))
        every_table = _pyiceberg.sql_table_identifiers

        def every_table_listed(catalog_):
            found = every_table(catalog_)
            if found is not None:
                calls["table listing"] += 1
            return found

        patch.setattr(_pyiceberg, "sql_table_identifiers", every_table_listed)
        patch.setattr(_pyiceberg, "rest_load_table", wrap("rest_load", _pyiceberg.rest_load_table))
        yield calls


def lookups(catalog, tables: int) -> Counter:
    """What locating ``tables`` lineage levels (of one table each) costs: one listing each on SQL catalogs, one
    loadTable request each on REST, one load each elsewhere."""
    if _pyiceberg.is_sql_catalog(catalog):
        return Counter({"listing": tables})
    return Counter({"rest_load": tables}) if _pyiceberg.rest_loads_raw(catalog) else Counter({"load_table": tables})


@pytest.fixture
def pipeline(cc, catalog):
    catalog.create_table(WORDS, schema=WORDS_SCHEMA)
    catalog.create_table(COUNTS, schema=COUNTS_SCHEMA)
    job = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    with job:
        cc.ingest(WORDS, words("a", "b"), barrier=now_ms() - 60_000, key="k1")
        assert job.run_epoch().actions == {COUNTS: "published"}  # the first epoch also commits nothing extra
        yield job


def test_a_staged_epoch_costs_its_plan_one_load_and_two_commits(cc, catalog, pipeline, monkeypatch) -> None:
    cc.ingest(WORDS, words("a", "c"), barrier=now_ms() - 30_000, key="k2")
    with counting(catalog, monkeypatch) as calls:
        result = pipeline.run_epoch(advance_idle=False)
    assert result.actions == {COUNTS: "published"}
    # plan: the sink, then its source (one lineage level each); stage: one load of the sink, then the
    # staged write and the publish reuse the metadata each commit returned (no load in between)
    assert calls == lookups(catalog, 2) + Counter({"load_table": 1, "commit_table": 2}), dict(calls)
    table = catalog.load_table(COUNTS)
    assert {r["word"]: r["cnt"] for r in table.scan().to_arrow().to_pylist()} == {"a": 2, "b": 1, "c": 1}


def test_an_unchanged_epoch_moves_the_watermark_with_one_load_and_one_commit(cc, catalog, pipeline, monkeypatch) -> None:
    cc.advance_watermark(WORDS, now_ms() - 10_000)
    with counting(catalog, monkeypatch) as calls:
        result = pipeline.run_epoch(advance_idle=False)
    assert result.actions == {COUNTS: "watermark"}
    assert calls == lookups(catalog, 2) + Counter({"load_table": 1, "commit_table": 1}), dict(calls)


def test_a_keyed_ingest_costs_one_load_and_one_commit(cc, catalog, pipeline, monkeypatch) -> None:
    with counting(catalog, monkeypatch) as calls:
        landed = cc.ingest(WORDS, words("d"), barrier=now_ms() - 20_000, key="k3")
    assert calls == Counter({"load_table": 1, "commit_table": 1}), dict(calls)
    assert catalog.load_table(WORDS).metadata.current_snapshot_id == landed.snapshot_id  # the id came from the answer
    with counting(catalog, monkeypatch) as calls:
        again = cc.ingest(WORDS, pa.table({"word": ["d"]}), key="k3")
    assert again.skipped and again.snapshot_id == landed.snapshot_id
    assert calls == Counter({"load_table": 1}), dict(calls)


def test_status_of_the_whole_catalog_lists_it_in_one_query_on_sql_catalogs(cc, catalog, pipeline, monkeypatch) -> None:
    catalog.create_namespace("other")
    catalog.create_table("other.apart", schema=WORDS_SCHEMA)
    with counting(catalog, monkeypatch) as calls:
        rows = cc.status()
    assert [r.table for r in rows] == sorted([WORDS, COUNTS, "other.apart"])
    if _pyiceberg.is_sql_catalog(catalog):  # the listing, then one lookup of the tables' metadata locations
        assert calls == Counter({"table listing": 1, "listing": 1}), dict(calls)
    else:  # the namespace walk: the namespaces, each one's tables and nested namespaces; then the tables' loads
        assert calls == Counter({"list_namespaces": 3, "list_tables": 2}) + lookups(catalog, 3), dict(calls)
