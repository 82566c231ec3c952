"""The bad-input catalogue: each bad input gets its own typed error, and afterwards the catalog and
the data are exactly as before (every table's metadata location and rows, read with plain pyiceberg)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from consistent_catalog import EpochContext
from consistent_catalog import properties as P
from consistent_catalog.demo import count_words
from consistent_catalog.exceptions import (
    InvalidBarrierError,
    InvalidInputError,
    MalformedMetadataError,
    TableNotFoundError,
)
from consistent_catalog.sql import cut_to_spark_sql
from consistent_catalog.util.identifiers import qualified_name
from tests.harness.catalogue import refused
from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA, words

WORDS, COUNTS = "demo.words", "demo.word_counts"


@pytest.fixture
def running(cc, catalog, flip_tables):
    cc.ingest(WORDS, words("a", "b"), barrier=1_000)
    job = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    job.register()
    job.run_epoch()
    return job


@pytest.mark.parametrize(
    "barrier, match",
    [("soon", "neither milliseconds"), (-5, "negative"), ("-5", "neither"), (True, "boolean"), (1.5, "type float"),
     ("2024-13-45", "neither")],
)
@pytest.mark.backends("sqlite", "rest-faults")  # refused before any catalog call
def test_bad_barriers(cc, catalog, running, barrier, match):
    refused(catalog, InvalidBarrierError, match, lambda: cc.advance_watermark(WORDS, barrier))
    refused(catalog, InvalidBarrierError, match, lambda: cc.resolve([WORDS, COUNTS], as_of=barrier))
    refused(catalog, InvalidBarrierError, match, lambda: cc.ingest(WORDS, words("x"), barrier=barrier))
    refused(catalog, InvalidBarrierError, match, lambda: cc.revise(WORDS, barrier))


@pytest.mark.parametrize(
    "key, value, match",
    [
        (P.SOURCES, "[not json", "not valid JSON"),
        (P.SOURCES, '{"demo.words": 1}', "JSON array"),
        (P.WATERMARK, "tomorrow", "not a non-negative integer"),
        (P.LEASE_UNTIL, "-1", "not a non-negative integer"),
        (P.WATERMARK_SNAPSHOT, "head", "not a snapshot id"),
        (P.BARRIER_OVERRIDES, "[1, 2]", "JSON object"),
    ],
)
def test_broken_table_properties(cc, catalog, running, key, value, match):
    catalog.load_table(COUNTS).transaction().set_properties({key: value, P.WATERMARK: "1000"} if key == P.WATERMARK_SNAPSHOT else {key: value}).commit_transaction()
    refused(catalog, MalformedMetadataError, match, lambda: (cc.resolve([WORDS, COUNTS]), cc.status([COUNTS])[0].lease_until, running.run_epoch()))


def test_broken_json_in_a_snapshot_summary(cc, catalog, running):
    # a writer outside the job commits a snapshot whose consistent.sources is not JSON
    catalog.load_table(COUNTS).append(
        pa.table({"word": ["z"], "cnt": [1]}, schema=COUNTS_SCHEMA),
        snapshot_properties={P.BARRIER: "2000", P.JOB: "word-count", P.SOURCES: "{broken"},
    )
    cc.ingest(WORDS, words("c"), barrier=2_000)
    refused(catalog, MalformedMetadataError, "not valid JSON", lambda: cc.resolve([WORDS, COUNTS]))
    refused(catalog, MalformedMetadataError, "not valid JSON", running.run_epoch)
    refused(catalog, MalformedMetadataError, "not valid JSON", lambda: cc.history(COUNTS))


def test_malformed_barrier_in_a_summary(cc, catalog, running):
    catalog.load_table(WORDS).append(words("q"), snapshot_properties={P.BARRIER: "12:00"})
    refused(catalog, MalformedMetadataError, "12:00", lambda: cc.resolve([WORDS]))


def test_source_that_does_not_exist(cc, catalog, flip_tables):
    refused(catalog, TableNotFoundError, "demo.nope does not exist", lambda: cc.register_job("j", ["demo.nope"], [COUNTS]))
    refused(catalog, TableNotFoundError, "demo.nope does not exist", lambda: cc.resolve(["demo.nope"]))


def test_source_dropped_mid_pipeline(cc, catalog, running):
    cc.ingest(WORDS, words("c"), barrier=2_000)
    catalog.drop_table(WORDS)
    refused(catalog, TableNotFoundError, "cannot find one of its sources", running.run_epoch)
    # readers of the derived table still get its last published state (the dropped source cannot be checked)
    cut = cc.resolve([COUNTS])
    assert cut[COUNTS].snapshot_id == catalog.load_table(COUNTS).metadata.current_snapshot_id


def test_sink_renamed_under_a_running_job(cc, catalog, running):
    cc.ingest(WORDS, words("c"), barrier=2_000)
    catalog.rename_table(COUNTS, "demo.counts_renamed")
    refused(catalog, TableNotFoundError, "cannot find one of its sinks", running.run_epoch)
    renamed = catalog.load_table("demo.counts_renamed")
    assert renamed.metadata.properties[P.JOB] == "word-count"  # ownership travels with the table


def test_root_clock_going_backwards_keeps_completed_barriers(cc, catalog, flip_tables):
    """A root writer whose clock jumped back: its snapshot is late (b(p)+1), never rewrites barrier 5000."""
    cc.ingest(WORDS, words("a"), barrier=5_000)
    first = catalog.load_table(WORDS).metadata.current_snapshot_id
    catalog.load_table(WORDS).append(words("late"), snapshot_properties={P.BARRIER: "3000"})  # plain writer
    cut = cc.resolve([WORDS], as_of=5_000)
    assert cut[WORDS].snapshot_id == first
    latest = cc.resolve([WORDS])
    assert latest.barrier == 5_001
    assert sorted(r["word"] for r in catalog.load_table(WORDS).scan(snapshot_id=latest[WORDS].snapshot_id).to_arrow().to_pylist()) == ["a", "late"]


def test_unknown_level_and_identifiers(cc, catalog, running):
    refused(catalog, InvalidInputError, "unknown isolation level", lambda: cc.resolve([WORDS], level="serializable"))
    refused(catalog, InvalidInputError, "namespace.table", lambda: cc.resolve(["words"]))
    refused(catalog, InvalidInputError, "contains a dot", lambda: cc.resolve([("demo", "my.table")]))
    refused(catalog, InvalidInputError, "revision mode", lambda: cc.revise(WORDS, 1, mode="partial"))
    refused(catalog, InvalidInputError, "write mode", lambda: cc.job("j", sources=[WORDS], sinks=[COUNTS], mode="upsert"))


@pytest.mark.parametrize("name", ['we"ird', "back`tick", "spa ce", "it's"])
def test_identifiers_with_quotes_and_backticks(cc, catalog, name):
    catalog.create_table(("demo", name), schema=WORDS_SCHEMA)
    sink = f"demo.{name}_counts"
    catalog.create_table(("demo", f"{name}_counts"), schema=COUNTS_SCHEMA)
    cc.ingest(f"demo.{name}", words("a", "a"), barrier=10)

    def count(ctx: EpochContext) -> pa.Table:
        return ctx.read(f"demo.{name}").group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])

    with cc.job(f"job {name}", sources=[f"demo.{name}"], sinks=[sink], transform=count, mode="overwrite") as job:
        job.run_epoch()
    props = catalog.load_table(("demo", f"{name}_counts")).metadata.properties
    assert json.loads(props[P.SOURCES]) == [f"demo.{name}"]
    cut = cc.resolve([f"demo.{name}", sink])
    assert cut.barrier == 10
    statements = cut_to_spark_sql(cut)
    quoted = qualified_name("lake", f"demo.{name}")
    assert quoted == "`lake`.`demo`.`" + name.replace("`", "``") + "`"
    assert any(quoted in s for s in statements)
