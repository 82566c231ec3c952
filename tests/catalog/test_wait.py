"""Waiting for freshness (protocol §6.7, issue #22) on real pyiceberg catalogs.

Expected barriers, delays and bottlenecks are computed here from the Iceberg metadata the tests
wrote (snapshot summaries and table properties read back through pyiceberg), never from the
project's report code.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import COUNTS, HISTOGRAM, WORDS, count_words, histogram
from consistent_catalog.exceptions import (
    InvalidBarrierError,
    InvalidInputError,
    NotFreshError,
    TableNotFoundError,
)
from consistent_catalog.util.time import now_ms
from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA, sqlite_catalog, words

T0 = 1_700_000_000_000
FAST = {"interval": "50ms", "max_interval": "200ms"}


pytestmark = pytest.mark.no_faults  # the tests read through cc.catalog itself (faulted on rest-faults)

def watermark(catalog, table: str) -> int:
    """W(X) straight from the metadata: the head's consistent.barrier or the consistent.watermark property."""
    metadata = catalog.load_table(table).metadata
    head = metadata.snapshot_by_name("main")
    values = [int(metadata.properties[P.WATERMARK])] if P.WATERMARK in metadata.properties else []
    if head is not None and head.summary.get(P.BARRIER) is not None:
        values.append(int(head.summary[P.BARRIER]))
    return max(values)


def expected_bottleneck(catalog, lineage: dict[str, str | None], table: str) -> tuple[str | None, str]:
    """Follow ``lineage`` (table -> its one source, None at the root) from ``table``; the job (table property
    consistent.job) with the largest W(source) - W(sink) > 0, else no job and the root."""
    best: tuple[int, str | None, str] = (0, None, table)
    while lineage[table] is not None:
        own = watermark(catalog, lineage[table]) - watermark(catalog, table)
        if own > best[0]:
            best = (own, catalog.load_table(table).metadata.properties[P.JOB], table)
        table = lineage[table]
    return (best[1], best[2]) if best[1] is not None else (None, table)


@pytest.fixture
def pipeline(cc: ConsistentCatalog, flip_tables):
    """words -> word_counts -> count_histogram; count-histogram 2 s behind word-count, word-count caught up."""
    cc.ingest(WORDS, words("a", "b", "a"), barrier=T0)
    counter = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    hist = cc.job("count-histogram", sources=[COUNTS], sinks=[HISTOGRAM], transform=histogram, mode="overwrite")
    for job in (counter, hist):
        job.register()
        job.run_epoch()
    cc.ingest(WORDS, words("c"), barrier=T0 + 2_000)
    counter.run_epoch()
    return counter, hist


LINEAGE = {WORDS: None, COUNTS: WORDS, HISTOGRAM: COUNTS}


def test_times_out_naming_the_bottleneck_job(cc: ConsistentCatalog, pipeline) -> None:
    catalog = cc.catalog
    assert (watermark(catalog, COUNTS), watermark(catalog, HISTOGRAM)) == (T0 + 2_000, T0)
    job, table = expected_bottleneck(catalog, LINEAGE, HISTOGRAM)
    assert (job, table) == ("count-histogram", HISTOGRAM)  # the set-up is what the test means

    started = time.monotonic()
    with pytest.raises(NotFreshError) as raised:
        cc.wait_for([COUNTS, HISTOGRAM], fresher_than="1h", timeout="300ms", **FAST)
    elapsed = time.monotonic() - started
    found = raised.value.freshness
    assert isinstance(raised.value, TimeoutError)
    assert 0.3 <= elapsed < 10 and found.polls >= 2 and found.waited_ms >= 300
    assert not found.fresh and found.barrier == T0  # min W, every table complete there
    assert found.now - T0 == found.delay_ms and found.delay_ms > 3_600_000
    assert (found.lagging_table, found.bottleneck_job, found.bottleneck_table) == (HISTOGRAM, job, table)
    assert found.bottleneck_delay_ms == watermark(catalog, COUNTS) - watermark(catalog, HISTOGRAM)
    head = catalog.load_table(HISTOGRAM).metadata.snapshot_by_name("main").snapshot_id
    assert found.cut.tables[HISTOGRAM].snapshot_id == head
    assert "count-histogram" in str(raised.value) and str(T0) in str(raised.value)


def test_a_lagging_root_is_the_bottleneck_when_every_job_caught_up(cc: ConsistentCatalog, pipeline) -> None:
    _, hist = pipeline
    hist.run_epoch()
    assert expected_bottleneck(cc.catalog, LINEAGE, HISTOGRAM) == (None, WORDS)
    with pytest.raises(NotFreshError) as raised:
        cc.wait_for([HISTOGRAM], fresher_than=timedelta(hours=1), timeout=0)
    found = raised.value.freshness
    assert found.polls == 1 and found.barrier == T0 + 2_000
    assert (found.bottleneck_job, found.bottleneck_table) == (None, WORDS)
    assert found.bottleneck_delay_ms == found.now - watermark(cc.catalog, WORDS)


def test_returns_at_once_when_fresh(cc: ConsistentCatalog, pipeline) -> None:
    started = time.monotonic()
    found = cc.wait_for([COUNTS, HISTOGRAM], barrier=T0, timeout="30s", interval="10s")
    assert time.monotonic() - started < 5 and found.fresh and found.polls == 1 and found.barrier == T0
    found = cc.wait_for([COUNTS], fresher_than="3650d", interval="10s")  # no timeout: still returns at once
    assert found.polls == 1 and found.barrier == T0 + 2_000
    assert json.loads(json.dumps(found.to_json()))["cut"]["barrier"] == T0 + 2_000


def test_blocks_until_another_writer_publishes_a_fresh_epoch(cc: ConsistentCatalog, pipeline) -> None:
    """The wait sees a commit made meanwhile (another thread, its own catalog connection), and only then returns."""
    _, hist = pipeline
    committed: dict[str, float] = {}

    def publish_later() -> None:
        time.sleep(0.6)
        committed["started"] = time.monotonic()
        hist.run_epoch()  # count_histogram catches up to T0 + 2000
        committed["done"] = time.monotonic()

    writer = threading.Thread(target=publish_later)
    writer.start()
    try:
        found = cc.wait_for([COUNTS, HISTOGRAM], barrier=T0 + 2_000, timeout="60s", **FAST)
        returned = time.monotonic()
    finally:
        writer.join()
    assert found.fresh and found.polls >= 2 and found.barrier == T0 + 2_000
    assert returned >= committed["started"]  # it could not have been fresh before the epoch was committed
    head = cc.catalog.load_table(HISTOGRAM).metadata.snapshot_by_name("main")
    assert head.summary[P.BARRIER] == str(T0 + 2_000)
    assert found.cut.tables[HISTOGRAM].snapshot_id == head.snapshot_id


def test_waits_for_a_barrier_just_ahead_of_now(tmp_path) -> None:
    """--barrier slightly in the future (within the skew allowance) waits for a system-time ingest."""
    cc = ConsistentCatalog(sqlite_catalog(tmp_path))
    cc.catalog.create_namespace("demo")
    cc.catalog.create_table(WORDS, schema=WORDS_SCHEMA)
    cc.ingest(WORDS, words("a"))
    target = now_ms() + 400
    ingested: dict[str, int] = {}

    def ingest_later() -> None:
        time.sleep(0.6)
        ingested["snapshot"] = cc.ingest(WORDS, words("b")).snapshot_id

    writer = threading.Thread(target=ingest_later)
    writer.start()
    try:
        found = cc.wait_for([WORDS], barrier=target, timeout="30s", **FAST)
    finally:
        writer.join()
    assert found.barrier >= target and found.polls >= 2
    assert found.cut.tables[WORDS].snapshot_id == ingested["snapshot"]


def test_a_cut_that_cannot_resolve_yet_is_not_fresh_and_names_the_job(tmp_path) -> None:
    cc = ConsistentCatalog(sqlite_catalog(tmp_path))
    cc.catalog.create_namespace("demo")
    cc.catalog.create_table(WORDS, schema=WORDS_SCHEMA)
    cc.catalog.create_table(COUNTS, schema=COUNTS_SCHEMA)
    cc.ingest(WORDS, words("a"), barrier=T0)
    cc.register_job("word-count", [WORDS], [COUNTS])  # registered, never published
    with pytest.raises(NotFreshError) as raised:
        cc.wait_for([COUNTS], fresher_than="1h", timeout="100ms", **FAST)
    found = raised.value.freshness
    assert found.barrier is None and found.cut is None and "no published epoch" in found.error
    assert (found.bottleneck_job, found.bottleneck_table) == ("word-count", COUNTS)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({}, InvalidInputError, "exactly one freshness target"),
        ({"fresher_than": "5m", "barrier": T0}, InvalidInputError, "exactly one freshness target"),
        ({"fresher_than": "-5m"}, InvalidInputError, "not understood"),
        ({"fresher_than": -5}, InvalidInputError, "negative"),
        ({"fresher_than": "5 minutes"}, InvalidInputError, "500ms, 90s"),
        ({"fresher_than": "5m", "timeout": "soon"}, InvalidInputError, "'soon' is not understood"),
        ({"fresher_than": "5m", "interval": "0s"}, InvalidInputError, "must be positive"),
        ({"barrier": 1_700_000_000}, InvalidBarrierError, "in seconds 1700000000 would be 1700000000000"),
        ({"barrier": "next week"}, InvalidBarrierError, "neither milliseconds"),
        ({"barrier": "2100-01-01T00:00:00Z", "timeout": "1h"}, InvalidBarrierError, "no cut can reach it in time"),
        ({"barrier": "2100-01-01T00:00:00Z"}, InvalidBarrierError, "more than a day ahead with no timeout"),
    ],
)
def test_bad_input_is_refused_before_any_poll(tmp_path, kwargs, error, message) -> None:
    cc = ConsistentCatalog(sqlite_catalog(tmp_path))
    with pytest.raises(error, match=message):
        cc.wait_for(["demo.nothing"], **kwargs)  # refused before the table is even looked up


def test_an_unknown_table_ends_the_wait_at_once(tmp_path) -> None:
    cc = ConsistentCatalog(sqlite_catalog(tmp_path))
    cc.catalog.create_namespace("demo")
    started = time.monotonic()
    with pytest.raises(TableNotFoundError):
        cc.wait_for(["demo.missing"], fresher_than="5m")  # no timeout: an error must not be waited out
    assert time.monotonic() - started < 5
