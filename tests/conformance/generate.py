"""Generate the conformance corpus (``tests/conformance/cases/*.json``) that both resolvers answer.

Two kinds of case:

- ``h*``: histories written out by hand (``tests/harness/builders``) and serialised as Iceberg v2
  table metadata JSON (``corpus.metadata_json``): every rule of the protocol in isolation, with a few
  expected answers worked out by hand and checked here (``HAND``) before the case is written.
- ``p*``: real tables built with pyiceberg (and ``ConsistentCatalog``'s ingest and epoch jobs) on a
  temporary SQLite catalog; the metadata is the JSON file pyiceberg wrote, with the temporary
  directory replaced by ``/corpus``.

- ``w*``: write plans (``write_plans.py``) over real tables written through ``ConsistentCatalog`` (ingests,
  registered jobs, epochs run, staged and never published, revisions): what a job plans and commits next.
  ``h14`` holds write plans over hand-written histories. ``WRITE_OUTLINES`` states, from the protocol, the
  action and commits every write-plan query must come to.

Every query's expected answer comes from the Python resolver (``ConsistentCatalog.resolve``, or
``corpus.component_cut`` for ``"kind": "component"``) or, for a write plan, from ``plan_epoch`` and
``epoch_commits``. Run it again after a deliberate change of the protocol and review the diff::

    .venv/bin/python -m tests.conformance.generate            # rewrites tests/conformance/cases
    .venv/bin/python -m tests.conformance.generate --only w   # rewrites only the w* cases
    .venv/bin/python -m tests.conformance.generate --check    # exits 1 if the checked-in corpus differs
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from consistent_catalog import properties as P
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.state import TableState, encode_summary_sources, encode_table_sources
from tests.conformance import change_ranges, fault_cases
from tests.conformance.corpus import CASES, make_case, metadata_json, python_answer, write_case
from tests.conformance.write_plans import can_own_query, definition_query, fingerprint_sql_query, write_plan_query
from tests.conformance.write_plans import new_edges_query as edges
from tests.conformance.write_plans import write_commit_query as wc
from tests.conformance.write_plans import write_plan_query as wp
from tests.harness.builders import (
    EMPTY_TOTALS,
    MAIN,
    STAGED,
    T0,
    compaction,
    derived_properties,
    derived_state,
    epoch,
    genesis,
    ingest,
    root_state,
    snapshot,
    table_state,
)

LEVELS = ("repeatable-read", "read-committed", "read-uncommitted")
Case = tuple[str, dict[str, Any], list[dict[str, Any]]]


def q(tables: str | Iterable[str], level: str | None = None, as_of: Any = None) -> dict[str, Any]:
    query: dict[str, Any] = {"tables": [tables] if isinstance(tables, str) else list(tables)}
    if level is not None:
        query["level"] = level
    if as_of is not None:
        query["as_of"] = as_of
    return query


def comp(table: str, level: str | None = None, as_of: Any = None) -> dict[str, Any]:
    query: dict[str, Any] = {"kind": "component", "table": table}
    if level is not None:
        query["level"] = level
    if as_of is not None:
        query["as_of"] = as_of
    return query


def every_level(tables: Iterable[str], as_ofs: Iterable[Any] = (None,)) -> list[dict[str, Any]]:
    tables = list(tables)
    return [q(tables, level, as_of) for level in LEVELS for as_of in as_ofs]


def subsets(names: list[str]) -> list[list[str]]:
    """Every table alone, every pair, and all of them."""
    found = [[n] for n in names]
    found += [[a, b] for i, a in enumerate(names) for b in names[i + 1 :]]
    if len(names) > 2:
        found.append(list(names))
    return found


def meta(*states: TableState) -> dict[str, Any]:
    return {s.identifier: metadata_json(s) for s in states}


# --- hand-written histories ------------------------------------------------------------------------------
def h01_late_snapshots() -> Case:
    """Protocol §3: a late raw barrier gets b(p)+1; on a root a raw barrier equal to its parent's is late too."""
    records = [
        ingest(1, None, T0 + 100, total=1),
        ingest(2, 1, T0 + 300, total=2),
        ingest(3, 2, T0 + 200, total=3),  # late: 301
        ingest(4, 3, T0 + 300, total=4),  # equal to an earlier barrier, below b(p)=301: 302
        ingest(5, 4, T0 + 302, total=5),  # raw == b(p) on a root: late, 303
    ]
    root = table_state("db.events", records, head=5)
    job = "job-agg"
    agg = table_state(
        "db.agg",
        [
            genesis(10, job=job, ts=T0),
            epoch(11, 10, T0 + 301, job=job, sources={"db.events": 3}),
            epoch(12, 11, T0 + 301, job=job, sources={"db.events": 3}, total=1),  # same barrier twice on a derived table
            epoch(13, 12, T0 + 250, job=job, sources={"db.events": 3}, total=1),  # late on a derived table: 302
        ],
        head=13,
        properties=derived_properties(job, "db.events"),
    )
    queries = [*every_level(["db.events"], [None, T0 + 250, T0 + 301, T0 + 302, T0 + 99])]
    queries += [q(["db.events", "db.agg"], as_of=a) for a in (None, T0 + 301, T0 + 302, T0 + 303)]
    queries += [comp("db.agg"), comp("db.events", "read-committed", T0 + 302)]
    return "late snapshots: b(p)+1 on roots and derived tables", meta(root, agg), queries


def h02_replace_and_overwrite() -> Case:
    """A replace snapshot keeps its parent's barrier (also right after a genesis); overwrites change data."""
    job = "job-sum"
    root = table_state(
        "db.src",
        [ingest(1, None, T0 + 100), ingest(2, 1, T0 + 200, total=2), compaction(3, 2, T0 + 250, total=2),
         ingest(4, 3, T0 + 300, total=3)],
        head=4,
    )
    overwrite = {"added-data-files": "1", "deleted-data-files": "1", "added-records": "1", "deleted-records": "1",
                 "total-records": "1"}
    derived = table_state(
        "db.sum",
        [
            genesis(10, job=job, ts=T0),
            compaction(11, 10, T0 + 1),  # replace on top of the genesis: no barrier yet
            snapshot(12, 11, T0 + 150, barrier=T0 + 100, op="overwrite", job=job, sources={"db.src": 1}, summary=overwrite),
            compaction(13, 12, T0 + 160),
            snapshot(14, 13, T0 + 350, barrier=T0 + 300, op="overwrite", job=job, sources={"db.src": 4}, summary=overwrite),
            compaction(15, 14, T0 + 400),
        ],
        head=15,
        properties=derived_properties(job, "db.src"),
    )
    queries = every_level(["db.src", "db.sum"], [None, T0 + 100, T0 + 250, T0 + 299, T0 + 50])
    queries += [q("db.sum", as_of=T0 + 300), comp("db.src"), comp("db.sum", as_of=T0 + 200)]
    return "replace (compaction) snapshots and overwrite epochs", meta(root, derived), queries


def h03_staged_epochs() -> Case:
    """A staged epoch (consistent-staged ahead of main) is read at read-committed only."""
    job = "job-copy"
    root = root_state("db.in", [T0 + 100, T0 + 200, T0 + 300])
    records = [
        genesis(10, job=job, ts=T0),
        epoch(11, 10, T0 + 200, job=job, sources={"db.in": 2}),
        epoch(12, 11, T0 + 300, job=job, sources={"db.in": 3}, total=2),  # staged, not published
        epoch(13, 12, T0 + 300, job=job, sources={"db.in": 3}, total=3),  # second snapshot of the same attempt
    ]
    ahead = table_state("db.copy", records, {MAIN: 11, STAGED: 13}, derived_properties(job, "db.in"))
    # another sink whose staged branch was left pointing at an older snapshot (not ahead of main)
    behind = table_state(
        "db.copy2",
        [genesis(20, job="job-copy2", ts=T0), epoch(21, 20, T0 + 100, job="job-copy2", sources={"db.in": 1}),
         epoch(22, 21, T0 + 300, job="job-copy2", sources={"db.in": 3}, total=2)],
        {MAIN: 22, STAGED: 21},
        derived_properties("job-copy2", "db.in"),
    )
    # a staged branch that diverged from main (a discarded attempt): not ahead
    diverged = table_state(
        "db.copy3",
        [genesis(30, job="job-copy3", ts=T0), epoch(31, 30, T0 + 200, job="job-copy3", sources={"db.in": 2}),
         epoch(32, 30, T0 + 300, job="job-copy3", sources={"db.in": 3})],
        {MAIN: 31, STAGED: 32},
        derived_properties("job-copy3", "db.in"),
    )
    names = ["db.in", "db.copy", "db.copy2", "db.copy3"]
    queries = [q(s, level) for s in subsets(names) for level in LEVELS]
    queries += [q(["db.in", "db.copy"], "read-committed", T0 + 250), comp("db.copy"), comp("db.copy", "read-committed")]
    return "staged epochs: read-committed reads consistent-staged when it is ahead of main", meta(
        root, ahead, behind, diverged
    ), queries


def h04_watermark_floor() -> Case:
    """Watermarks, their marker (watermark-snapshot) and barrier overrides: a later snapshot lands above W."""
    lifted = table_state(
        "db.lifted",
        [ingest(1, None, T0 + 100), ingest(2, 1, T0 + 200, total=2), ingest(3, 2, T0 + 400, total=3),
         ingest(4, 3, T0 + 450, total=4)],
        head=4,
        properties={P.WATERMARK: str(T0 + 500), P.WATERMARK_SNAPSHOT: "2"},  # 3 and 4 came after W=500: 501, 502
    )
    empty_marker = table_state(
        "db.fresh",
        [ingest(1, None, T0 + 100), ingest(2, 1, T0 + 700, total=2)],
        head=2,
        properties={P.WATERMARK: str(T0 + 600), P.WATERMARK_SNAPSHOT: "-1"},  # every snapshot above 600
    )
    overridden = table_state(
        "db.overridden",
        [ingest(1, None, T0 + 100), ingest(2, 1, T0 + 150, total=2), ingest(3, 2, T0 + 800, total=3)],
        head=3,
        properties={P.WATERMARK: str(T0 + 900), P.WATERMARK_SNAPSHOT: "3",
                    P.BARRIER_OVERRIDES: json.dumps({"2": T0 + 650, "99": T0 + 1})},
    )
    job = "job-w"
    idle = table_state(  # a derived table whose last epoch changed nothing: only its watermark moved (protocol §5.3)
        "db.idle",
        [genesis(10, job=job, ts=T0), epoch(11, 10, T0 + 200, job=job, sources={"db.lifted": 2})],
        head=11,
        properties={**derived_properties(job, "db.lifted"), P.WATERMARK: str(T0 + 500), P.WATERMARK_SNAPSHOT: "11"},
    )
    names = ["db.lifted", "db.fresh", "db.overridden", "db.idle"]
    queries = [q(n, level, a) for n in names for level in LEVELS[:2] for a in (None, T0 + 500, T0 + 650)]
    queries += [q(["db.lifted", "db.idle"], as_of=a) for a in (None, T0 + 500, T0 + 501)]
    queries += [q(names), comp("db.idle"), comp("db.fresh")]
    return "watermark floors (watermark-snapshot, -1 marker, barrier-overrides) and watermark-only epochs", meta(
        lifted, empty_marker, overridden, idle
    ), queries


def h05_genesis() -> Case:
    """A derived table with only its genesis snapshot has no barrier: it blocks every cut (NoWatermark)."""
    root = root_state("db.r", [T0 + 100, T0 + 200])
    only_genesis = table_state("db.new", [genesis(10, job="job-new", ts=T0)], head=10,
                               properties=derived_properties("job-new", "db.r"))
    marked = table_state(  # genesis plus an empty epoch that only set the watermark
        "db.marked", [genesis(20, job="job-m", ts=T0)], head=20,
        properties={**derived_properties("job-m", "db.r"), P.WATERMARK: str(T0 + 200), P.WATERMARK_SNAPSHOT: "20"},
    )
    queries = [q(s, level) for s in subsets(["db.r", "db.new", "db.marked"]) for level in LEVELS]
    queries += [q(["db.r", "db.marked"], as_of=T0 + 150), comp("db.r"), comp("db.new", "read-uncommitted")]
    return "genesis snapshots (empty, untagged) and watermark-only epochs on them", meta(root, only_genesis, marked), queries


def h06_foreign_writes() -> Case:
    """Data written without a barrier: on a derived table it is untracked from there on; a root uses its timestamp."""
    root = table_state(
        "db.raw",
        [snapshot(1, None, T0 + 100, summary={"added-records": "2", "total-records": "2"}),  # untagged: b = timestamp
         ingest(2, 1, T0 + 50, total=3),  # tagged below the timestamp barrier: late
         snapshot(3, 2, T0 + 400, summary={"added-records": "1", "total-records": "4"})],
        head=3,
    )
    job = "job-x"
    foreign = table_state(
        "db.written",
        [genesis(10, job=job, ts=T0), epoch(11, 10, T0 + 100, job=job, sources={"db.raw": 1}),
         snapshot(12, 11, T0 + 200, summary={"added-records": "5", "total-records": "6"}),  # a foreign append
         epoch(13, 12, T0 + 400, job=job, sources={"db.raw": 3}, total=7)],
        head=13,
        properties=derived_properties(job, "db.raw"),
    )
    harmless = table_state(  # an untagged commit that changes no rows (e.g. a property-only snapshot)
        "db.harmless",
        [genesis(20, job="job-h", ts=T0), epoch(21, 20, T0 + 100, job="job-h", sources={"db.raw": 1}),
         snapshot(22, 21, T0 + 150, summary={"added-records": "0", "total-records": "1"})],
        head=22,
        properties=derived_properties("job-h", "db.raw"),
    )
    downstream = table_state(
        "db.below",
        [genesis(30, job="job-b", ts=T0), epoch(31, 30, T0 + 100, job="job-b", sources={"db.written": 11})],
        head=31,
        properties=derived_properties("job-b", "db.written"),
    )
    names = ["db.raw", "db.written", "db.harmless", "db.below"]
    queries = [q(s, level) for s in subsets(names) for level in LEVELS[::2]]
    queries += [q("db.raw", as_of=T0 + 101), comp("db.raw"), comp("db.harmless", "read-committed")]
    return "foreign writes: untracked derived tables, untagged roots, untagged empty commits", meta(
        root, foreign, harmless, downstream
    ), queries


def h07_siblings_and_diamond() -> Case:
    """Sibling jobs at different speeds skip different barriers; a diamond must not mix two states of the root."""
    r = root_state("db.r", [T0 + 100, T0 + 150, T0 + 200])
    a = derived_state("db.a", ["db.r"], [(T0 + 100, {"db.r": 1}), (T0 + 200, {"db.r": 3})], 10, job="job-a")
    b = derived_state("db.b", ["db.r"], [(T0 + 150, {"db.r": 2})], 20, job="job-b")
    c = derived_state("db.c", ["db.a", "db.b"], [(T0 + 100, {"db.a": 11, "db.b": 20})], 30, job="job-c")
    names = ["db.r", "db.a", "db.b", "db.c"]
    queries = [q(s) for s in subsets(names)]
    queries += [q(["db.a", "db.b"], as_of=a) for a in (T0 + 99, T0 + 100, T0 + 149, T0 + 150, T0 + 200)]
    queries += [q(names, "read-committed"), q(names, "read-uncommitted", T0 + 150), comp("db.c"), comp("db.r", as_of=T0 + 120)]
    return "siblings at different speeds (skipped barriers) and a diamond", meta(r, a, b, c), queries


def h08_expired_history() -> Case:
    """Expired history: a barrier before the oldest retained snapshot is HistoryExpired; empty is never 'same'."""
    root = table_state(  # snapshots 1 and 2 were expired: 3's parent is gone
        "db.kept", [ingest(3, 2, T0 + 300, total=3), ingest(4, 3, T0 + 400, total=4)], head=4
    )
    job = "job-k"
    derived = table_state(
        "db.kept_sum",
        [epoch(12, 11, T0 + 300, job=job, sources={"db.kept": 3}), epoch(13, 12, T0 + 400, job=job, sources={"db.kept": 4})],
        head=13,
        properties=derived_properties(job, "db.kept"),
    )
    stale = table_state(  # its recorded input was expired from the source: it cannot be compared any more
        "db.stale_sum",
        [epoch(21, 20, T0 + 300, job="job-s", sources={"db.kept": 2})],
        head=21,
        properties=derived_properties("job-s", "db.kept"),
    )
    queries = [q(n, as_of=a) for n in ("db.kept", "db.kept_sum") for a in (None, T0 + 350, T0 + 300, T0 + 299, T0 + 5)]
    queries += [q(["db.kept", "db.kept_sum"], as_of=a) for a in (None, T0 + 300, T0 + 250)]
    queries += [q(["db.kept", "db.stale_sum"]), q("db.stale_sum"), q("db.kept", "read-uncommitted", T0 + 100)]
    queries += [comp("db.kept"), comp("db.kept", as_of=T0 + 200)]
    return "expired history (truncated ancestry)", meta(root, derived, stale), queries


def h09_empty_tables() -> Case:
    """Empty tables: without a watermark they block every cut; with one they take part, read as empty."""
    empty = table_state("db.empty", [], {})
    declared = table_state("db.declared", [], {}, {P.WATERMARK: str(T0 + 500)})
    root = root_state("db.full", [T0 + 100, T0 + 600])
    names = ["db.empty", "db.declared", "db.full"]
    queries = [q(s, level) for s in subsets(names) for level in LEVELS]
    queries += [q(["db.declared", "db.full"], as_of=T0 + 50), comp("db.empty"), q([])]
    queries += [q([], "read-uncommitted")]
    return "empty tables with and without a watermark", meta(empty, declared, root), queries


def h10_malformed() -> Case:
    """Malformed consistent.* values: MalformedMetadataError, raised where Python raises it."""
    def root(name: str, props: Mapping[str, str] | None = None, records: list[SnapshotRecord] | None = None) -> TableState:
        return table_state(name, records or [ingest(1, None, T0 + 100)], head=1, properties=dict(props or {}))

    bad_barrier = root("db.bad_barrier", records=[snapshot(1, None, T0, barrier="soon", summary={"total-records": "1"})])
    spaced = root("db.spaced", records=[snapshot(1, None, T0, barrier=f" {T0 + 7} ", summary={"total-records": "1"})])
    tables = [
        bad_barrier,
        spaced,
        root("db.bad_sources", {P.SOURCES: "[db.x"}),
        root("db.sources_not_list", {P.SOURCES: '{"db.x": 1}'}),
        root("db.blank_sources", {P.SOURCES: "  "}),
        root("db.bad_watermark", {P.WATERMARK: "-5"}),
        root("db.bad_marker", {P.WATERMARK: str(T0), P.WATERMARK_SNAPSHOT: "head"}),
        root("db.odd_marker", {P.WATERMARK: str(T0 + 200), P.WATERMARK_SNAPSHOT: " +1 "}),
        root("db.bad_overrides", {P.BARRIER_OVERRIDES: "[1, 2]"}),
        root("db.bad_override_key", {P.BARRIER_OVERRIDES: '{"one": 5}'}),
        root("db.bad_override_value", {P.BARRIER_OVERRIDES: '{"1": 5.5}'}),
        root("db.text_override", {P.BARRIER_OVERRIDES: json.dumps({"1": f" {T0 + 9}"})}),
        root("db.bad_revision", {P.REVISION: "two"}),
        root("db.trailing_json", {P.SOURCES: '["db.x"] junk'}),
    ]
    job = "job-m"
    bad_inputs = table_state(
        "db.bad_inputs",
        [genesis(10, job=job, ts=T0),
         snapshot(11, 10, T0, barrier=T0 + 100, job=job, summary={"added-records": "1", "total-records": "1",
                                                                    P.SOURCES: '{"db.spaced": true}'})],
        head=11,
        properties=derived_properties(job, "db.spaced"),
    )
    tables.append(bad_inputs)
    queries = [q(t.identifier) for t in tables]
    queries += [q(t.identifier, "read-uncommitted") for t in tables[:4]]
    queries += [q(["db.spaced", "db.bad_revision"]), q(["db.bad_revision", "db.spaced"]), comp("db.spaced")]
    return "malformed consistent.* values", meta(*tables), queries


def h11_invalid_input() -> Case:
    """Caller errors: unknown level, bad as-of values, unknown tables, no tables; and as-of spellings."""
    root = root_state("db.r", [T0 + 100, T0 + 200, T0 + 300])
    queries = [
        q("db.r", "serializable"),
        q("db.r", as_of=-5),
        q("db.r", as_of="-5"),
        q("db.r", as_of="yesterday"),
        q("db.r", as_of=True),
        q("db.r", as_of=1.5),
        q("db.r", as_of="1700000000150"),
        q("db.r", as_of=" 1700000000250 "),
        q("db.r", as_of="2023-11-14T22:13:20.150Z"),
        q("db.r", as_of="2023-11-14T22:13:20.2+00:00"),
        q("db.r", as_of="2023-11-14 23:13:20.250+01:00"),
        q("db.r", as_of="2023-11-14T22:13:20,3"),
        q("db.r", as_of="20231114T221320.2"),
        q("db.r", as_of="2023-11-14T2213"),
        q("db.r", as_of="2023-11-14"),
        q("db.r", as_of="1969-12-31T23:59:59Z"),
        q("db.r", as_of="2023-13-01"),
        q(["db.r", "db.missing"]),
        q("db.missing", "serializable"),
        q([]),
        comp("db.r", "serializable"),
        comp("db.r", as_of="soon"),
    ]
    return "invalid input (levels, as-of values, unknown tables) and as-of spellings", meta(root), queries


def h12_no_complete_barrier() -> Case:
    """A derived table whose recorded inputs are not on its source's branch (the source was rolled back), from
    barrier 0 on: no barrier has it complete (ResolutionError); from barrier 100 on, the cut falls below it."""
    root = table_state(
        "db.r",
        [ingest(1, None, 0, ts=T0), ingest(2, 1, 100, ts=T0 + 1, total=2), ingest(3, 1, 100, ts=T0 + 2, total=2)],
        head=3,  # 2 was rolled back, 3 replaced it
    )
    job = "job-d"
    derived = table_state(
        "db.d",
        [epoch(11, None, 0, job=job, sources={"db.r": 2}), epoch(12, 11, 100, job=job, sources={"db.r": 2})],
        head=12,
        properties=derived_properties(job, "db.r"),
    )
    later = derived_state("db.e", ["db.r"], [(100, {"db.r": 2})], 20, job="job-e")
    queries = [q(["db.r", "db.d"]), q("db.d"), q("db.d", as_of=50), q(["db.r", "db.d"], "read-uncommitted"),
               q(["db.r", "db.e"]), q("db.e", "read-committed"), comp("db.r"), comp("db.e")]
    return "no barrier at which every table is complete (ResolutionError)", meta(root, derived, later), queries


def h13_revisions_tags_branches() -> Case:
    """consistent.revision is reported per table; tags and foreign branches do not change the cut."""
    r = root_state("db.r", [T0 + 100, T0 + 200])
    r.properties[P.REVISION] = "2"
    d = derived_state("db.d", ["db.r"], [(T0 + 100, {"db.r": 1}), (T0 + 200, {"db.r": 2})], 10, job="job-d")
    d.properties[P.REVISION] = "1"
    d.branches["audit"] = 11
    tags = {"consistent-pin-0001": 11, "consistent-daily-20231114": 12}
    tables = {"db.r": metadata_json(r, tags={"consistent-pin-0001": 1}), "db.d": metadata_json(d, tags=tags)}
    queries = [q(["db.r", "db.d"], level) for level in LEVELS] + [q(["db.d", "db.r"], as_of=T0 + 150), comp("db.d")]
    return "revisions, tags and foreign branches", tables, queries


def h14_write_plans() -> Case:
    """Write plans (tests/conformance/write_plans.py) on hand-written histories: previous inputs inherited through a
    compaction, a watermark floor set on an empty table (-1), consistent-staged behind main or diverged from it, an
    input no longer on its source's branch, malformed recorded inputs, sinks without main (genesis, or watermark)."""
    r = root_state("db.r", [T0 + 100, T0 + 200], watermark=T0 + 400)  # snapshots 1, 2
    quiet = table_state("db.q", [], {}, {P.WATERMARK: str(T0 + 400)})  # empty, complete up to 400
    fence = snapshot(19, None, T0, summary={**EMPTY_TOTALS, P.FENCE_REASON: "register"})
    compacted = table_state(
        "db.compacted",
        [fence, genesis(10, job="job-c", ts=T0), epoch(11, 10, T0 + 200, job="job-c", sources={"db.r": 2}),
         compaction(12, 11, T0 + 2000)],
        {MAIN: 12, STAGED: 12, P.FENCE_BRANCH: 19},
        derived_properties("job-c", "db.r"),
    )
    floored = table_state(  # watermark 150 set while the table was empty: its snapshots came later, raised above 150
        "db.floored",
        [genesis(20, job="job-f", ts=T0), epoch(21, 20, T0 + 100, job="job-f", sources={"db.r": 2})],
        head=21,
        properties={**derived_properties("job-f", "db.r"), P.WATERMARK: str(T0 + 150), P.WATERMARK_SNAPSHOT: "-1"},
    )
    behind = table_state(
        "db.behind",
        [genesis(30, job="job-b", ts=T0), epoch(31, 30, T0 + 100, job="job-b", sources={"db.r": 1})],
        {MAIN: 31, STAGED: 30},
        derived_properties("job-b", "db.r"),
    )
    diverged = table_state(  # an epoch at 400 staged on the genesis, while main moved on: not ahead of main
        "db.diverged",
        [genesis(40, job="job-d", ts=T0), epoch(41, 40, T0 + 100, job="job-d", sources={"db.r": 1}),
         epoch(42, 40, T0 + 400, job="job-d", sources={"db.r": 2}, attempt="aaaaaaaaaaaa")],
        {MAIN: 41, STAGED: 42},
        derived_properties("job-d", "db.r"),
    )
    rolled = table_state(  # its last input (snapshot 7) is not on db.r's main any more
        "db.rolled",
        [genesis(50, job="job-r", ts=T0), epoch(51, 50, T0 + 100, job="job-r", sources={"db.r": 7})],
        head=51,
        properties=derived_properties("job-r", "db.r"),
    )
    malformed = table_state(
        "db.malformed",
        [genesis(60, job="job-m", ts=T0),
         snapshot(61, 60, T0, barrier=T0 + 100, job="job-m", summary={"added-records": "1", "total-records": "1",
                                                                      P.SOURCES: '{"db.r": "two"}'})],
        head=61,
        properties=derived_properties("job-m", "db.r"),
    )
    emptied = table_state("db.emptied", [], {}, {**derived_properties("job-e", "db.r"), P.REVISION: "1"})
    void = table_state("db.void", [], {}, {**derived_properties("job-v", "db.q"), P.WATERMARK: str(T0 + 100),
                                          P.WATERMARK_SNAPSHOT: "-1"})
    blank = table_state("db.blank", [], {}, derived_properties("job-n", "db.q"))
    # names beyond ASCII: consistent.sources sorts them by code point and escapes them as json.dumps does
    wide = table_state("db.\uff57ide", [], {}, {P.WATERMARK: str(T0 + 400)})
    astral = table_state("db.\U0001f600", [], {}, {P.WATERMARK: str(T0 + 400)})
    multi = derived_state("db.multi", ["db.r", wide.identifier, astral.identifier], [], 70, job="job-u")
    tables = meta(r, quiet, compacted, floored, behind, diverged, rolled, malformed, emptied, void, blank, wide, astral,
                  multi)
    queries = [
        wp("job-c", ["db.r"], ["db.compacted"]),
        wp("job-f", ["db.r"], ["db.floored"]),
        wp("job-b", ["db.r"], ["db.behind"]),
        wp("job-d", ["db.r"], ["db.diverged"]),
        wp("job-r", ["db.r"], ["db.rolled"]),
        wp("job-m", ["db.r"], ["db.malformed"]),
        wp("job-e", ["db.r"], ["db.emptied"]),
        wp("job-v", ["db.q"], ["db.void"]),
        wp("job-n", ["db.q"], ["db.blank"]),
        wp("job-x", ["db.r", "db.q"], ["db.behind", "db.emptied"]),
        wp("job-x", [], ["db.blank"]),
        wp("job-u", ["db.r", wide.identifier, astral.identifier], ["db.multi"]),
        wp("job-u", [astral.identifier, "db.q", wide.identifier], ["db.multi"]),
        edges("job-c", ["db.compacted"], ["db.r"]),
        edges("job-c", ["db.q"], ["db.compacted", "db.r"]),
    ]
    return "write plans on hand-written histories (compaction, floors, staged branches, sinks without main)", tables, queries


def h16_write_commits() -> Case:
    """The protocol's other commits as planned (``write_plans`` / ``WritePlanner``): ingests (keyed, keyless, at an
    event time, late), watermark advances (explicit, idle), registration, renewal, release, reassignment."""
    now = T0 + 10_000
    fence = snapshot(19, None, T0, summary={**EMPTY_TOTALS, P.FENCE_REASON: "advance"})
    keyed = snapshot(2, 1, T0 + 205, barrier=T0 + 200, summary={"added-records": "1", "total-records": "2",
                                                                  P.INGEST_KEY: "k1"})
    r = table_state("db.r", [ingest(1, None, T0 + 100), keyed, fence], {MAIN: 2, P.FENCE_BRANCH: 19},
                    {P.WATERMARK: str(T0 + 400)})
    empty = table_state("db.empty", [], {}, {})
    idle = table_state("db.idle", [ingest(3, None, T0 + 100)], head=3,
                       properties={P.WATERMARK: str(T0 + 100), P.IDLE_AFTER: "5000"})
    lease = {P.LEASE_HOLDER: "aaaaaaaaaaaa", P.LEASE_UNTIL: str(now + 60_000), P.LEASE_HOLDER_INFO: '{"pid":7}'}
    fence_d = snapshot(29, None, T0, summary={**EMPTY_TOTALS, P.FENCE_REASON: "register", P.FENCE_HOLDER: "aaaaaaaaaaaa",
                                              P.FENCE_JOB: "job-d"})
    d = table_state("db.d", [genesis(20, job="job-d", ts=T0), epoch(21, 20, T0 + 100, job="job-d", sources={"db.r": 1}),
                             fence_d],
                    {MAIN: 21, STAGED: 21, P.FENCE_BRANCH: 29}, {**derived_properties("job-d", "db.r"), **lease})
    lapsed = table_state("db.lapsed", [genesis(30, job="job-l", ts=T0)], head=30,
                         properties={**derived_properties("job-l", "db.r"), P.LEASE_HOLDER: "bbbbbbbbbbbb",
                                     P.LEASE_UNTIL: str(now - 1)})
    sink = table_state("db.sink", [], {}, {})  # created, never written: registration gives it its genesis
    raw = table_state("db.raw", [snapshot(5, None, T0, summary={"added-records": "1", "total-records": "1"})], head=5)
    tables = meta(r, empty, idle, d, lapsed, sink, raw)
    i, a, reg = "ingest", "advance", "register"
    owner = {"sources": ["db.r"], "lease_ms": 300_000, "holder_info": '{"host":"h","pid":1}'}
    queries = [
        wc(i, "db.r", now),  # keyless at the clock
        wc(i, "db.r", now, barrier=T0 + 300),  # at an event time below W: W + 1
        wc(i, "db.r", now, barrier=T0 + 500, key="k2"),  # keyed, above W
        wc(i, "db.r", now, barrier="late"),  # rows without an event time: W + 1
        wc(i, "db.empty", now, barrier="late"),  # ... on a table without a watermark: the clock
        wc(i, "db.r", now, key="k1"),  # the key landed in snapshot 2: skipped
        wc(i, "db.r", now, barrier=now + 3_600_000),  # beyond the clock-skew allowance
        wc(i, "db.r", now, barrier=now + 3_600_000, allow_future=True),
        wc(i, "db.d", now),  # a derived table takes no ingests
        wc(i, "db.r", now, key=" "),  # an empty key
        wc(i, "db.empty", now, key="it's"),  # no main, no fence: both asserted absent
        wc(a, "db.r", now, barrier=T0 + 500),
        wc(a, "db.r", now, barrier=T0 + 400),  # the same barrier again: nothing to commit
        wc(a, "db.r", now, barrier=T0 + 300),  # a watermark never moves back
        wc(a, "db.r", now, barrier=now + 3_600_000),
        wc(a, "db.empty", now, barrier=T0 + 500),  # main asserted absent
        wc(a, "db.d", now, barrier=T0 + 500),
        wc("idle-advance", "db.idle", now),  # now - 5 s
        wc("idle-advance", "db.r", now),  # not declared idle
        wc("idle-advance", "db.idle", now, target=T0 + 50),  # not behind
        wc("idle-advance", "db.r", now, target=T0 + 9_000),  # a streaming root's own target
        wc("idle-advance", "db.d", now, target=T0 + 9_000),  # derived: never
        wc(reg, "db.sink", now, job="job-s", instance="cccccccccccc", **owner),  # genesis, main asserted absent
        wc(reg, "db.d", now, job="job-d", instance="aaaaaaaaaaaa", **owner),  # the holder again
        wc(reg, "db.d", now, job="job-d", instance="cccccccccccc", **owner),  # another live instance
        wc(reg, "db.d", now, job="job-d", instance="cccccccccccc", takeover=True, **owner),
        wc(reg, "db.d", now, job="job-x", instance="cccccccccccc", takeover=True, **owner),  # another job's table
        wc(reg, "db.lapsed", now, job="job-l", instance="cccccccccccc", **owner),  # the lease lapsed
        wc(reg, "db.raw", now, job="job-x", instance="cccccccccccc", **owner),  # data written outside any job
        wc("unregister", "db.d", now, job="job-d", instance="aaaaaaaaaaaa"),
        wc("unregister", "db.d", now, job="job-d", instance="cccccccccccc"),  # not ours: nothing
        wc("renew", "db.d", now, job="job-d", instance="aaaaaaaaaaaa", until=now + 300_000),
        wc("renew", "db.d", now, job="job-d", instance="cccccccccccc", until=now + 300_000),  # taken over
        wc("renew", "db.lapsed", now, job="job-x", instance="bbbbbbbbbbbb", until=now + 300_000),  # reassigned
        wc("reassign", "db.d", now, job="job-y"),  # a live lease
        wc("reassign", "db.d", now, job="job-y", takeover=True),
        wc("reassign", "db.lapsed", now, job="job-y"),
        wc("reassign", "db.lapsed", now, job="job-l"),  # its owner already, no live lease: nothing
        wc("reassign", "db.r", now, job="job-y"),  # a root
        wc("reassign", "db.missing", now, job="job-y"),
    ]
    return "the protocol's other commits (§5.6, §6.1-§6.3, §6.9) as planned: ingests, advances, ownership", tables, queries


def h15_faults_and_durations() -> Case:
    """Catalog faults (protocol §6.8) as PostgreSQL's and SQLite's drivers raise them, the duration grammar and the
    barrier grammar (§3.8)."""
    return ("fault classes of PostgreSQL's and SQLite's errors (§6.8), durations and barriers (§3.8): one "
            "classification, one grammar of each",
            {}, [query for query, _ in fault_cases.CASES])


HAND: dict[str, dict[int, Callable[[dict[str, Any]], bool]]] = {
    # the protocol's answer for every fault, duration and barrier query (fault_cases.CASES)
    "h15_faults_and_durations": {
        index: (lambda a, want=want: a == want) for index, (_, want) in enumerate(fault_cases.CASES)
    },
    # worked out by hand from the protocol §3 rules (not from the resolver)
    "h01_late_snapshots": {
        1: lambda a: a["tables"]["db.events"]["snapshot_id"] == 1 and a["barrier"] == T0 + 250,  # snap(250) = s1 (b=100)
        2: lambda a: a["tables"]["db.events"] == {"snapshot_id": 3, "barrier": T0 + 301, "branch": "main", "revision": 0},
        3: lambda a: a["tables"]["db.events"]["snapshot_id"] == 4 and a["tables"]["db.events"]["barrier"] == T0 + 302,
        4: lambda a: a == {"error": "InvalidBarrierError"},  # as-of before the first barrier: the cut holds nothing
        0: lambda a: a["barrier"] == T0 + 303,  # s5: raw 302 == b(p) on a root -> 303
    },
    "h03_staged_epochs": {
        # db.copy alone: repeatable-read at main (200, snapshot 11), read-committed at the staged head (300, 13)
        3: lambda a: (a["barrier"], a["tables"]["db.copy"]["snapshot_id"]) == (T0 + 200, 11),
        4: lambda a: (a["barrier"], a["tables"]["db.copy"]["snapshot_id"], a["tables"]["db.copy"]["branch"])
        == (T0 + 300, 13, "consistent-staged"),
    },
    "h04_watermark_floor": {
        # db.lifted: snapshots 3 and 4 came after the watermark 500 was set on 2: 501, 502; W = 502
        0: lambda a: (a["barrier"], a["tables"]["db.lifted"]["snapshot_id"]) == (T0 + 502, 4),
        1: lambda a: (a["barrier"], a["tables"]["db.lifted"]["snapshot_id"]) == (T0 + 500, 2),
    },
    "h07_siblings_and_diamond": {
        # {db.a, db.b}: db.a skipped 150, db.b skipped 100 and 200 -> no common complete barrier above 99
        7: lambda a: a["barrier"] == T0 + 99 and a["tables"]["db.b"]["snapshot_id"] is None,
    },
    "h08_expired_history": {3: lambda a: a == {"error": "HistoryExpiredError"}},
    "h09_empty_tables": {0: lambda a: a == {"error": "NoWatermarkError"}},
    "h11_invalid_input": {
        0: lambda a: a == {"error": "InvalidInputError"},
        1: lambda a: a == {"error": "InvalidBarrierError"},
        8: lambda a: (a["barrier"], a["tables"]["db.r"]["snapshot_id"]) == (T0 + 150, 1),
    },
    "h12_no_complete_barrier": {0: lambda a: a == {"error": "ResolutionError"}},
    # protocol §4.3 step 5 and §6.1, by hand
    "h18_stranded_data": {
        0: lambda a: a == {"error": "StrandedDataError"},
        1: lambda a: a == {"error": "StrandedDataError"},
        2: lambda a: (a["barrier"], a["tables"]["shop.orders"]["snapshot_id"]) == (T0 + 300, 3),
        3: lambda a: a["cut"]["barrier"] == T0 + 99 and set(a["blocked"]) == {"shop.by_customer", "shop.marked"},
        4: lambda a: a == {"error": "StrandedDataError"},
        5: lambda a: a["barrier"] == T0 + 99 and a["tables"]["shop.newer"]["snapshot_id"] is None,
        6: lambda a: a == {"error": "StrandedDataError"},
        7: lambda a: a["barrier"] is None and a["tables"]["shop.by_customer"]["snapshot_id"] == 11
        and a["tables"]["shop.orders"]["snapshot_id"] == 3,
        8: lambda a: a == {"error": "InvalidInputError"},
        9: lambda a: a == {"error": "InvalidInputError"},
        10: lambda a: "error" not in a,
    },
    # protocol §4.8 and §6.10, by hand (the worked example of §4.8 and its variants)
    "h19_generations": {
        0: lambda a: (a["barrier"], a["tables"]["db.s"]["snapshot_id"], a["tables"]["db.x"]["snapshot_id"]) == (T0 + 300, 12, 22),
        1: lambda a: (a["barrier"], a["tables"]["db.s"]["snapshot_id"]) == (T0 + 300, 13),
        2: lambda a: (a["tables"]["db.s"]["snapshot_id"], a["tables"]["db.y"]["snapshot_id"]) == (13, 33),
        3: lambda a: [a["tables"][t]["snapshot_id"] for t in ("db.s", "db.y", "db.z")] == [12, 32, 42],
        4: lambda a: a["cut"]["barrier"] == T0 + 300 and a["cut"]["tables"]["db.s"]["snapshot_id"] == 12,
        6: lambda a: a["barrier"] is None and (a["tables"]["db.s"]["snapshot_id"], a["tables"]["db.x"]["snapshot_id"]) == (13, 22),
        7: lambda a: (a["barrier"], a["tables"]["db.s"]["snapshot_id"], a["tables"]["db.x"]["snapshot_id"]) == (T0 + 200, 11, 21),
        8: lambda a: a["tables"]["db.w"]["snapshot_id"] == 51,
        9: lambda a: a["tables"]["db.w"]["snapshot_id"] == 52,
        10: lambda a: a["plan"]["sinks"]["db.x"]["action"] == "regenerate" and a["plan"]["sinks"]["db.x"]["reason"] == "upstream",
        11: lambda a: a["plan"]["sinks"]["db.z"]["action"] == "regenerate",
        12: lambda a: a["plan"]["sinks"]["db.s"]["action"] == "done",
        13: lambda a: a["plan"]["sinks"]["db.s"]["reason"] == "definition" and not a["plan"]["sinks"]["db.s"]["replay"],
        14: lambda a: a["plan"]["sinks"]["db.w"]["replay"] and [c["commit"] for c in a["commits"]["db.w"]] == ["publish"],
        15: lambda a: not a["plan"]["sinks"]["db.w"]["replay"],
        16: lambda a: a["plan"]["sinks"]["db.v"]["action"] == "regenerate" and not a["plan"]["sinks"]["db.v"]["replay"],
    },
    # protocol §3.6, §5.1-§5.3
    "h16_write_commits": {
        # worked out from protocol §5.6, §6.1-§6.3 and §6.9 (now = T0 + 10 s, W(db.r) = T0 + 400)
        0: lambda a: a["barrier"] == T0 + 10_000 and a["commit"]["summary"] == {P.BARRIER: str(T0 + 10_000)}
        and _refs(a) == [(P.FENCE_BRANCH, 19), (MAIN, 2)] and a["commit"]["take_fence"] is None,
        1: lambda a: a["barrier"] == T0 + 401,
        2: lambda a: a["commit"]["summary"] == {P.BARRIER: str(T0 + 500), P.INGEST_KEY: "k2"},
        3: lambda a: a["barrier"] == T0 + 401,
        4: lambda a: a["barrier"] == T0 + 10_000,
        5: lambda a: a == {"skipped_by": 2, "barrier": T0 + 200},
        6: lambda a: a == {"error": "InvalidBarrierError"},
        7: lambda a: a["barrier"] == T0 + 10_000 + 3_600_000,
        8: lambda a: a == {"error": "InvalidInputError"},
        9: lambda a: a == {"error": "InvalidInputError"},
        10: lambda a: _refs(a) == [(P.FENCE_BRANCH, None), (MAIN, None)] and a["commit"]["what"] == 'ingesting key "it\'s"',
        11: lambda a: _refs(a) == [(MAIN, 2)] and a["commit"]["take_fence"] == {
            "expected": 19, "reason": "advance", "holder": None, "job": None}
        and a["commit"]["updates"][0]["updates"][P.WATERMARK] == str(T0 + 500),
        12: lambda a: a == {"commit": None},
        13: lambda a: a == {"error": "InvalidBarrierError"},
        14: lambda a: a == {"error": "InvalidBarrierError"},
        15: lambda a: _refs(a) == [(MAIN, None)] and a["commit"]["take_fence"]["expected"] is None,
        16: lambda a: a == {"error": "InvalidInputError"},
        17: lambda a: a["commit"]["updates"][0]["updates"][P.WATERMARK] == str(T0 + 10_000 - 5_000),
        18: lambda a: a == {"commit": None},
        19: lambda a: a == {"commit": None},
        20: lambda a: a["commit"]["updates"][0]["updates"][P.WATERMARK] == str(T0 + 9_000),
        21: lambda a: a == {"commit": None},
        22: lambda a: a["commit"]["genesis"] is True and _refs(a) == [(MAIN, None)] and a["commit"]["take_fence"] == {
            "expected": None, "reason": "register", "holder": "cccccccccccc", "job": "job-s"}
        and a["commit"]["updates"][0]["updates"][P.LEASE_UNTIL] == str(T0 + 10_000 + 300_000),
        23: lambda a: a["commit"]["genesis"] is False and _refs(a) == [] and a["commit"]["take_fence"]["expected"] == 29,
        24: lambda a: a == {"error": "OwnershipError"},
        25: lambda a: a["commit"]["take_fence"]["holder"] == "cccccccccccc",
        26: lambda a: a == {"error": "OwnershipError"},
        28: lambda a: a == {"error": "InvalidInputError"},
        29: lambda a: _refs(a) == [(P.FENCE_BRANCH, 29)] and a["commit"]["updates"] == [
            {"action": "remove-properties", "removals": [P.LEASE_HOLDER, P.LEASE_UNTIL, P.LEASE_HOLDER_INFO]}],
        30: lambda a: a == {"commit": None},
        31: lambda a: _refs(a) == [(P.FENCE_BRANCH, 29)]
        and a["commit"]["updates"][0]["updates"] == {P.LEASE_UNTIL: str(T0 + 10_000 + 300_000)},
        32: lambda a: a == {"error": "FencedError"},
        33: lambda a: a == {"error": "FencedError"},
        34: lambda a: a == {"error": "OwnershipError"},
        35: lambda a: a["commit"]["take_fence"] == {"expected": 29, "reason": "reassign", "holder": None, "job": "job-y"},
        37: lambda a: a == {"commit": None},
        38: lambda a: a == {"error": "InvalidInputError"},
        39: lambda a: a == {"error": "TableNotFoundError"},
    },
    "h14_write_plans": {
        # the compaction's recorded inputs are its parent's: unchanged, so the watermark moves on the compaction
        0: lambda a: _published_properties(a, "db.compacted") == {
            P.LEASE_UNTIL: "1701000000000", P.WATERMARK: str(T0 + 400), P.WATERMARK_SNAPSHOT: "12"},
        # the floor set on the empty table raised snapshot 21 (raw 100) to 151: kept as an override
        1: lambda a: _published_properties(a, "db.floored")[P.BARRIER_OVERRIDES] == f'{{"21":{T0 + 151}}}',
        # no main, inputs empty: watermark on no snapshot, main asserted absent
        7: lambda a: _published_properties(a, "db.void")[P.WATERMARK_SNAPSHOT] == "-1"
        and a["commits"]["db.void"][0]["requirements"][1] == {"type": "assert-ref-snapshot-id", "ref": "main",
                                                             "snapshot-id": None},
        # the genesis of a table with no snapshot at all: sequence number 1, tagged with the job only
        6: lambda a: a["commits"]["db.emptied"][0]["updates"][0]["snapshot"]["sequence-number"] == 1
        and a["commits"]["db.emptied"][0]["updates"][0]["snapshot"]["summary"][P.JOB] == "job-e",
        # keys sorted by code point, escaped as json.dumps does
        11: lambda a: a["commits"]["db.multi"][1]["summary"][P.SOURCES]
        == '{"db.r":2,"db.\\uff57ide":null,"db.\\ud83d\\ude00":null}',
    },
}

#: what each write-plan query must come to, worked out from protocol §5.1-§5.4 (not from the planner): per sink
#: "action: the commits sent", or the error class, or "ok" (a registration's cycle check that passes)
STAGE = "stage: staged-write publish"
RESET = "stage: reset staged-write publish"
GENESIS = "stage: genesis reset staged-write publish"
WATERMARK = "watermark: publish"
WRITE_OUTLINES: dict[str, list[Any]] = {
    "h14_write_plans": [{"db.compacted": WATERMARK}, {"db.floored": WATERMARK}, {"db.behind": RESET},
                        {"db.diverged": RESET}, {"db.rolled": RESET}, "MalformedMetadataError", {"db.emptied": GENESIS},
                        {"db.void": WATERMARK}, {"db.blank": WATERMARK}, {"db.behind": RESET, "db.emptied": GENESIS},
                        "InvalidInputError", {"db.multi": RESET}, {"db.multi": WATERMARK}, "CycleError", "ok"],
    "w01_stage": [{"db.first": RESET}, {"db.later": STAGE}, {"db.two_a": RESET, "db.two_b": RESET}],
    "w02_watermark": [{"db.plain": WATERMARK}, {"db.floored": WATERMARK}, {"db.idle": WATERMARK}],
    "w03_done": [{"db.current": "done:"}, {"db.waiting": "done:"}],
    "w04_replay": [{"db.crashed": "publish-staged: publish"}, {"db.twice": RESET}, {"db.crashed": RESET},
                   {"db.stale": RESET}],
    "w05_multi_source": [{"db.c": RESET}, {"db.c": RESET}, {"db.c2": "done:"}, {"db.a": "done:"}],
    "w06_revised": [{"db.full": GENESIS}, {"db.part": STAGE}],
    "w07_refused": ["CycleError", "CycleError", "CycleError", "ok", "ok", "ok", "UntrackedWriteError",
                    "TableNotFoundError", {"db.b": "done:"}],
}


def _refs(answer: Mapping[str, Any]) -> list[tuple[str, int | None]]:
    """The refs a planned write commit asserts, in order."""
    return [(r["ref"], r["snapshot-id"]) for r in answer["commit"]["requirements"]]


def _published_properties(answer: dict[str, Any], sink: str) -> dict[str, str]:
    publish = answer["commits"][sink][-1]
    return next(u["updates"] for u in publish["updates"] if u["action"] == "set-properties")


def write_outline(answer: Mapping[str, Any]) -> Any:
    """A write-plan answer in WRITE_OUTLINES' terms."""
    if "error" in answer:
        return answer["error"]
    if "ok" in answer:
        return "ok"
    return {sink: " ".join([f"{p['action']}:", *(c["commit"] for c in answer["commits"][sink])])
            for sink, p in answer["plan"]["sinks"].items()}


def check_write_outlines(name: str, case: Mapping[str, Any]) -> None:
    expected = WRITE_OUTLINES.get(name)
    found = [write_outline(q["expected"]) for q in case["queries"] if q.get("kind") in ("write-plan", "new-edges")]
    if expected is not None and found != expected:
        raise AssertionError(f"{name}: the write plans differ from the outline worked out by hand:\n  expected "
                             f"{expected}\n  found    {found}")


# --- real tables, written by pyiceberg -------------------------------------------------------------------
WORD = pa.schema([pa.field("word", pa.string())])


class Lake:
    """A temporary SQLite catalog and pyiceberg writes that carry the protocol's summary keys."""

    def __init__(self, directory: Path) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        self.directory = directory
        (directory / "warehouse").mkdir(parents=True, exist_ok=True)
        self.catalog = SqlCatalog("lake", uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/warehouse")
        self.catalog.create_namespace("db")

    def create(self, name: str, properties: Mapping[str, str] | None = None) -> None:
        self.catalog.create_table(name, schema=WORD, properties=dict(properties or {}))

    def table(self, name: str) -> Any:
        return self.catalog.load_table(name)

    def append(self, name: str, words: list[str], props: Mapping[str, str] | None = None, *, branch: str = MAIN,
               overwrite: bool = False) -> int:
        table = self.table(name)
        data = pa.table({"word": words}, schema=WORD)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Delete operation did not match any records")
            (table.overwrite if overwrite else table.append)(data, snapshot_properties=dict(props or {}), branch=branch)
        return self.table(name).metadata.snapshot_by_name(branch).snapshot_id

    def set_properties(self, name: str, **props: str) -> None:
        with self.table(name).transaction() as tx:
            tx.set_properties(props)

    def set_branch(self, name: str, branch: str, snapshot_id: int) -> None:
        from pyiceberg.table.refs import SnapshotRefType
        from pyiceberg.table.update import SetSnapshotRefUpdate

        table = self.table(name)
        self.catalog.commit_table(
            table, (), (SetSnapshotRefUpdate(ref_name=branch, type=SnapshotRefType.BRANCH, snapshot_id=snapshot_id),)
        )

    def tag(self, name: str, tag: str, snapshot_id: int) -> None:
        self.table(name).manage_snapshots().create_tag(snapshot_id, tag).commit()

    def metadata(self, *names: str) -> dict[str, Any]:
        """Each table's current metadata file, as pyiceberg wrote it (temporary paths replaced by /corpus)."""
        found = {}
        for name in names:
            location = self.table(name).metadata_location.removeprefix("file://")
            text = Path(location).read_text(encoding="utf-8").replace(str(self.directory), "/corpus")
            found[name] = json.loads(text)
        return found


def epoch_props(job: str, barrier: int, inputs: Mapping[str, int | None]) -> dict[str, str]:
    return {P.BARRIER: str(barrier), P.JOB: job, P.SOURCES: encode_summary_sources(inputs), P.ATTEMPT: f"a{barrier}"}


def p01_flip_pipeline(directory: Path) -> Case:
    """FLIP-276's three tables with ConsistentCatalog's ingest and pyiceberg epoch jobs, the histogram lagging,
    then an epoch of word-count staged on consistent-staged and never published (a killed job)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from consistent_catalog.catalog import ConsistentCatalog
    from consistent_catalog.demo import COUNTS, HISTOGRAM, SCHEMAS, WORDS, count_words, epoch_words, histogram

    (directory / "warehouse").mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("lake", uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/warehouse")
    catalog.create_namespace("demo")
    for name, schema in SCHEMAS.items():
        catalog.create_table(name, schema=schema)
    cc = ConsistentCatalog(catalog)
    counter = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    hist = cc.job("count-histogram", sources=[COUNTS], sinks=[HISTOGRAM], transform=histogram, mode="overwrite")
    barriers = [T0 + 1000 * (i + 1) for i in range(5)]
    with counter, hist:
        for i, barrier in enumerate(barriers[:4]):
            cc.ingest(WORDS, epoch_words(i, 12), barrier=barrier)
            counter.run_epoch()
            if i % 2 == 1:
                hist.run_epoch()
        cc.ingest(WORDS, epoch_words(4, 12), barrier=barriers[4])
    cc.advance_watermark(WORDS, barriers[4] + 500)
    # word-count's next epoch, staged by hand the way EpochJob stages it, and never published
    words = catalog.load_table(WORDS).metadata
    counts = catalog.load_table(COUNTS)
    main_head = counts.metadata.snapshot_by_name(MAIN).snapshot_id
    if counts.metadata.refs.get(STAGED) is None or counts.metadata.refs[STAGED].snapshot_id != main_head:
        SimpleLake(catalog).set_branch(COUNTS, STAGED, main_head)
    inputs = {WORDS: words.snapshot_by_name(MAIN).snapshot_id}
    data = pa.table({"word": ["w000"], "cnt": [1]}, schema=SCHEMAS[COUNTS])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Delete operation did not match any records")
        catalog.load_table(COUNTS).overwrite(data, snapshot_properties=epoch_props("word-count", barriers[4] + 500, inputs),
                                             branch=STAGED)
    tables = {}
    for name in (WORDS, COUNTS, HISTOGRAM):
        location = catalog.load_table(name).metadata_location.removeprefix("file://")
        tables[name] = json.loads(Path(location).read_text(encoding="utf-8").replace(str(directory), "/corpus"))
    names = [WORDS, COUNTS, HISTOGRAM]
    as_ofs = [None, barriers[0] - 1, barriers[0], barriers[1] + 1, barriers[2], barriers[4] + 500]
    queries = [q(s, level) for s in subsets(names) for level in LEVELS]
    queries += [q(names, level, a) for level in LEVELS[:2] for a in as_ofs[1:]]
    queries += [comp(WORDS), comp(HISTOGRAM, "read-committed"), comp(COUNTS, as_of=barriers[1])]
    return "FLIP-276 pipeline written by ConsistentCatalog (pyiceberg jobs), histogram lagging, a staged epoch", tables, queries


class SimpleLake(Lake):
    """A Lake over an existing catalog (for its helpers)."""

    def __init__(self, catalog: Any) -> None:  # noqa: D107 - no namespace creation
        self.catalog = catalog


def p02_foreign_late_overwrite(directory: Path) -> Case:
    """pyiceberg writes: event-time ingests (late ones), an untagged root append, overwrite epochs of a derived
    table, a foreign append on a derived table, a tagged pin."""
    lake = Lake(directory)
    lake.create("db.events")
    lake.create("db.daily", derived_properties("job-daily", "db.events"))
    lake.create("db.mirror", derived_properties("job-mirror", "db.events"))
    e1 = lake.append("db.events", ["a", "b"], {P.BARRIER: str(T0 + 100)})
    e2 = lake.append("db.events", ["c"], {P.BARRIER: str(T0 + 300)})
    e3 = lake.append("db.events", ["d"], {P.BARRIER: str(T0 + 200)})  # late: 301
    g = lake.append("db.daily", [], {P.JOB: "job-daily"})
    lake.set_branch("db.daily", STAGED, g)
    d1 = lake.append("db.daily", ["a", "b"], epoch_props("job-daily", T0 + 100, {"db.events": e1}), branch=STAGED, overwrite=True)
    lake.set_branch("db.daily", MAIN, d1)
    d2 = lake.append("db.daily", ["a", "b", "c", "d"], epoch_props("job-daily", T0 + 301, {"db.events": e3}),
                     branch=STAGED, overwrite=True)
    lake.set_branch("db.daily", MAIN, d2)
    lake.tag("db.daily", "consistent-pin-00000001", d1)
    lake.tag("db.events", "consistent-pin-00000001", e1)
    lake.append("db.events", ["e"])  # untagged root append: its barrier is its commit time
    gm = lake.append("db.mirror", [], {P.JOB: "job-mirror"})
    m1 = lake.append("db.mirror", ["a", "b", "c"], epoch_props("job-mirror", T0 + 300, {"db.events": e2}))
    lake.append("db.mirror", ["zz"])  # a foreign writer: untracked from here on
    del gm, m1
    names = ["db.events", "db.daily", "db.mirror"]
    queries = [q(s, level) for s in subsets(names) for level in LEVELS]
    queries += [q(["db.events", "db.daily"], as_of=a) for a in (T0 + 99, T0 + 100, T0 + 250, T0 + 301)]
    queries += [comp("db.events"), comp("db.daily", as_of=T0 + 301)]
    return "pyiceberg writes: late event-time barriers, untagged root append, overwrites, a foreign append", lake.metadata(
        *names
    ), queries


def expire_keeping_parents(metadata: dict[str, Any], snapshot_ids: Iterable[int]) -> dict[str, Any]:
    """What Iceberg's (Java) expiry writes: the snapshots are gone, their children keep ``parent-snapshot-id``."""
    gone = set(snapshot_ids)
    out = dict(metadata)
    out["snapshots"] = [s for s in metadata["snapshots"] if s["snapshot-id"] not in gone]
    out["snapshot-log"] = [e for e in metadata.get("snapshot-log", []) if e["snapshot-id"] not in gone]
    return out


def p03_expired(directory: Path) -> Case:
    """Expired history: db.log and db.log_copy lost their oldest snapshots the way Iceberg's expiry removes
    them (children keep their parent id: the history is truncated); db.log_py was expired with pyiceberg
    0.12's expire_snapshots, which also drops the parent id of the oldest retained snapshot, so its history
    looks complete (and empty before it)."""
    lake = Lake(directory)
    lake.create("db.log")
    lake.create("db.log_copy", derived_properties("job-copy", "db.log"))
    lake.create("db.log_py")
    ids = [lake.append("db.log", [f"r{i}"], {P.BARRIER: str(T0 + 100 * (i + 1))}) for i in range(4)]
    g = lake.append("db.log_copy", [], {P.JOB: "job-copy"})
    lake.append("db.log_copy", ["r0", "r1"], epoch_props("job-copy", T0 + 200, {"db.log": ids[1]}))
    lake.append("db.log_copy", ["r2", "r3"], epoch_props("job-copy", T0 + 400, {"db.log": ids[3]}))
    py_ids = [lake.append("db.log_py", [f"r{i}"], {P.BARRIER: str(T0 + 100 * (i + 1))}) for i in range(4)]
    lake.table("db.log_py").maintenance.expire_snapshots().by_ids(py_ids[:2]).commit()
    tables = lake.metadata("db.log", "db.log_copy", "db.log_py")
    tables["db.log"] = expire_keeping_parents(tables["db.log"], ids[:2])
    tables["db.log_copy"] = expire_keeping_parents(tables["db.log_copy"], [g])
    names = ["db.log", "db.log_copy"]
    queries = [q(names, as_of=a) for a in (None, T0 + 400, T0 + 350, T0 + 300, T0 + 250, T0 + 100)]
    queries += [q("db.log", as_of=a) for a in (T0 + 299, T0 + 300)] + [q("db.log_copy", as_of=T0 + 300)]
    queries += [q("db.log_py", as_of=a) for a in (None, T0 + 250, T0 + 300)]
    queries += [comp("db.log"), comp("db.log_copy", as_of=T0 + 250)]
    return "expired history: truncated as Iceberg expires, and as pyiceberg 0.12 expires", tables, queries


def p04_diamond(directory: Path) -> Case:
    """Real tables: two sibling jobs at different speeds and a diamond job over them, with watermarks."""
    lake = Lake(directory)
    lake.create("db.r")
    lake.create("db.a", derived_properties("job-a", "db.r"))
    lake.create("db.b", derived_properties("job-b", "db.r"))
    lake.create("db.c", derived_properties("job-c", "db.a", "db.b"))
    r = [lake.append("db.r", [f"x{i}"], {P.BARRIER: str(T0 + 100 * (i + 1))}) for i in range(4)]
    lake.append("db.a", [], {P.JOB: "job-a"})
    a1 = lake.append("db.a", ["x0", "x1"], epoch_props("job-a", T0 + 200, {"db.r": r[1]}))
    a2 = lake.append("db.a", ["x2", "x3"], epoch_props("job-a", T0 + 400, {"db.r": r[3]}))
    lake.append("db.b", [], {P.JOB: "job-b"})
    b1 = lake.append("db.b", ["x0", "x1", "x2"], epoch_props("job-b", T0 + 300, {"db.r": r[2]}))
    lake.append("db.c", [], {P.JOB: "job-c"})
    lake.append("db.c", ["x0", "x1"], epoch_props("job-c", T0 + 200, {"db.a": a1, "db.b": None}))
    lake.set_properties("db.r", **{P.WATERMARK: str(T0 + 450)})
    lake.set_properties("db.b", **{P.WATERMARK: str(T0 + 400), P.WATERMARK_SNAPSHOT: str(b1)})  # an empty epoch at 400
    del a2
    names = ["db.r", "db.a", "db.b", "db.c"]
    queries = [q(s) for s in subsets(names)]
    queries += [q(names, "read-committed", a) for a in (None, T0 + 300, T0 + 200)]
    queries += [comp("db.a"), comp("db.c", as_of=T0 + 350)]
    return "siblings and a diamond written by pyiceberg, with watermark-only epochs", lake.metadata(*names), queries


# --- write plans: real tables, then what a job plans and commits (tests/conformance/write_plans.py) -----------
class JobLake(Lake):
    """A Lake written through ``ConsistentCatalog``: ingests, registered jobs, epochs (all or part of one)."""

    def __init__(self, directory: Path) -> None:
        from consistent_catalog.catalog import ConsistentCatalog

        super().__init__(directory)
        self.cc = ConsistentCatalog(self.catalog)

    def ingest(self, name: str, words: list[str], barrier: int) -> int:
        self.cc.ingest(name, pa.table({"word": words}, schema=WORD), barrier=barrier)
        return self.table(name).metadata.snapshot_by_name(MAIN).snapshot_id

    def job(self, job: str, sources: Iterable[str], sinks: Iterable[str], mode: str = "overwrite") -> Any:
        """A registered job copying its sources' rows into each sink."""
        sources = list(sources)

        def copy(ctx: Any) -> pa.Table:
            return pa.concat_tables([ctx.read(s) for s in sources])

        found = self.cc.job(job, sources=sources, sinks=sinks, transform=copy, mode=mode)
        found.register()
        return found

    def stage_only(self, job: Any) -> None:
        """Stage the job's next epoch on every sink and never publish it (a job killed in between)."""
        plan = job.plan()
        outputs = job.run_transform(plan)
        for sink, sink_plan in plan.sinks.items():
            assert sink_plan.action == "stage", sink_plan
            job.stage(sink, plan, outputs.get(sink))


def w01_stage(directory: Path) -> Case:
    """Epochs to stage: a job's first epoch after registration (its genesis on main, no consistent-staged yet:
    reset), a later epoch (consistent-staged at main's head: no reset), a job with two sinks."""
    lake = JobLake(directory)
    for name in ("db.r", "db.first", "db.later", "db.two_a", "db.two_b"):
        lake.create(name)
    lake.ingest("db.r", ["a", "b"], T0 + 100)
    lake.job("job-first", ["db.r"], ["db.first"])
    later = lake.job("job-later", ["db.r"], ["db.later"], mode="append")
    later.run_epoch()
    lake.job("job-two", ["db.r"], ["db.two_a", "db.two_b"])
    lake.ingest("db.r", ["c"], T0 + 200)
    queries = [wp("job-first", ["db.r"], ["db.first"]), wp("job-later", ["db.r"], ["db.later"]),
               wp("job-two", ["db.r"], ["db.two_a", "db.two_b"])]
    return "write plans: stage (a first epoch after registration, a later one, two sinks)", lake.metadata(
        "db.r", "db.first", "db.later", "db.two_a", "db.two_b"), queries


def w02_watermark(directory: Path) -> Case:
    """Watermark-only epochs: inputs unchanged since the last epoch; a sink whose watermark floor raised a late
    snapshot's barrier and that has barrier overrides (kept, or dropped with their snapshot); inputs all empty."""
    lake = JobLake(directory)
    for name in ("db.r", "db.quiet", "db.plain", "db.floored", "db.idle"):
        lake.create(name)
    e1 = lake.ingest("db.r", ["a"], T0 + 100)
    lake.job("job-plain", ["db.r"], ["db.plain"]).run_epoch()
    lake.job("job-floored", ["db.r"], ["db.floored"]).run_epoch()
    f1 = lake.table("db.floored").metadata.snapshot_by_name(MAIN).snapshot_id
    # a watermark-only epoch at 250 on f1, then a late snapshot tagged 200 with the same input: raised to 251
    lake.set_properties("db.floored", **{P.WATERMARK: str(T0 + 250), P.WATERMARK_SNAPSHOT: str(f1),
                                         P.BARRIER_OVERRIDES: json.dumps({str(f1): T0 + 100, "99": T0 + 5})})
    lake.append("db.floored", ["a"], epoch_props("job-floored", T0 + 200, {"db.r": e1}))
    lake.cc.advance_watermark("db.r", T0 + 300)
    lake.cc.advance_watermark("db.quiet", T0 + 300)
    lake.job("job-idle", ["db.quiet"], ["db.idle"])
    queries = [wp("job-plain", ["db.r"], ["db.plain"]), wp("job-floored", ["db.r"], ["db.floored"]),
               wp("job-idle", ["db.quiet"], ["db.idle"])]
    return "write plans: watermark-only epochs (plain, with a floor and overrides, empty inputs)", lake.metadata(
        "db.r", "db.quiet", "db.plain", "db.floored", "db.idle"), queries


def w03_done(directory: Path) -> Case:
    """Nothing to do: the sink already holds T (done); a source without any watermark (no barrier at all)."""
    lake = JobLake(directory)
    for name in ("db.r", "db.none", "db.current", "db.waiting"):
        lake.create(name)
    lake.ingest("db.r", ["a"], T0 + 100)
    current = lake.job("job-current", ["db.r"], ["db.current"])
    current.run_epoch()
    lake.job("job-waiting", ["db.none", "db.r"], ["db.waiting"])
    queries = [wp("job-current", ["db.r"], ["db.current"]), wp("job-waiting", ["db.none", "db.r"], ["db.waiting"])]
    return "write plans: done (the sink holds T) and no barrier (a source has no watermark)", lake.metadata(
        "db.r", "db.none", "db.current", "db.waiting"), queries


def w04_replay(directory: Path) -> Case:
    """After a crash (protocol §5.4): a staged epoch for T with the planned inputs is published as it is; one two
    attempts staged on top of each other, another job's, or a stale one (its source moved on) is reset."""
    lake = JobLake(directory)
    for name in ("db.r", "db.moved", "db.crashed", "db.twice", "db.stale"):
        lake.create(name)
    lake.ingest("db.r", ["a"], T0 + 100)
    lake.ingest("db.moved", ["a"], T0 + 100)
    crashed = lake.job("job-crashed", ["db.r"], ["db.crashed"])
    twice = lake.job("job-twice", ["db.r"], ["db.twice"])
    stale = lake.job("job-stale", ["db.moved"], ["db.stale"])
    for job in (crashed, twice, stale):
        job.run_epoch()
    e2 = lake.ingest("db.r", ["b"], T0 + 200)
    lake.ingest("db.moved", ["b"], T0 + 200)
    for job in (crashed, twice, stale):
        lake.stage_only(job)
    # a second writer staged the same epoch on top (a zombie): two attempt ids
    lake.append("db.twice", ["a", "b"], {**epoch_props("job-twice", T0 + 200, {"db.r": e2}), P.ATTEMPT: "ffffffffffff"},
                branch=STAGED)
    lake.ingest("db.moved", ["c"], T0 + 300)  # db.stale's staged epoch (at 200) is now stale
    queries = [wp("job-crashed", ["db.r"], ["db.crashed"]), wp("job-twice", ["db.r"], ["db.twice"]),
               wp("job-other", ["db.r"], ["db.crashed"]), wp("job-stale", ["db.moved"], ["db.stale"])]
    return "write plans: replay after a crash (publish-staged; two attempts, another job's, stale: reset)", lake.metadata(
        "db.r", "db.moved", "db.crashed", "db.twice", "db.stale"), queries


def w05_multi_source(directory: Path) -> Case:
    """A job over two sibling tables at different speeds: db.a skipped 150 (processed 100, then 200), db.b
    processed 100 and 150. The diamond job's T is the newest barrier below 150 where both are complete, never
    db.a at 200 with db.b at 150; db.c2, which published that T already, is done."""
    lake = JobLake(directory)
    for name in ("db.r", "db.a", "db.b", "db.c", "db.c2"):
        lake.create(name)
    a = lake.job("job-a", ["db.r"], ["db.a"])
    b = lake.job("job-b", ["db.r"], ["db.b"])
    lake.ingest("db.r", ["x"], T0 + 100)
    a.run_epoch()
    b.run_epoch()
    lake.ingest("db.r", ["y"], T0 + 150)
    b.run_epoch()
    lake.ingest("db.r", ["z"], T0 + 200)
    a.run_epoch()
    lake.job("job-c", ["db.a", "db.b"], ["db.c"])
    lake.job("job-c2", ["db.a", "db.b"], ["db.c2"]).run_epoch()
    queries = [wp("job-c", ["db.a", "db.b"], ["db.c"]), wp("job-c", ["db.b", "db.a"], ["db.c"]),
               wp("job-c2", ["db.a", "db.b"], ["db.c2"]), wp("job-a", ["db.r"], ["db.a"])]
    return "write plans: a multi-source job whose sources skipped different barriers", lake.metadata(
        "db.r", "db.a", "db.b", "db.c", "db.c2"), queries


def w06_revised(directory: Path) -> Case:
    """After revisions (protocol §8): a full revision emptied the sink (no main: the epoch starts with a genesis);
    an incremental one rolled it back to T with watermark T (its job replays from there)."""
    lake = JobLake(directory)
    for name in ("db.r", "db.full", "db.r2", "db.part"):
        lake.create(name)
    full = lake.job("job-full", ["db.r"], ["db.full"])
    part = lake.job("job-part", ["db.r2"], ["db.part"])
    for barrier in (T0 + 100, T0 + 200):
        lake.ingest("db.r", [f"w{barrier}"], barrier)
        lake.ingest("db.r2", [f"w{barrier}"], barrier)
        full.run_epoch()
        part.run_epoch()
    lake.cc.revise("db.r", T0 + 150, mode="full")
    lake.cc.revise("db.r2", T0 + 150)
    lake.ingest("db.r", ["again"], T0 + 250)
    lake.ingest("db.r2", ["again"], T0 + 250)
    queries = [wp("job-full", ["db.r"], ["db.full"]), wp("job-part", ["db.r2"], ["db.part"])]
    return "write plans: after a full revision (genesis) and an incremental one", lake.metadata(
        "db.r", "db.full", "db.r2", "db.part"), queries


def w07_refused(directory: Path) -> Case:
    """Refusals: registrations that would close a cycle (CycleError) or are fine (re-registering with new sources
    replaces the sink's edges); a plan over a sink with a foreign write (UntrackedWriteError) or a missing source."""
    lake = JobLake(directory)
    for name in ("db.r", "db.a", "db.b", "db.foreign"):
        lake.create(name)
    lake.ingest("db.r", ["x"], T0 + 100)
    lake.job("job-a", ["db.r"], ["db.a"]).run_epoch()
    lake.job("job-b", ["db.a"], ["db.b"]).run_epoch()
    lake.job("job-f", ["db.r"], ["db.foreign"]).run_epoch()
    lake.append("db.foreign", ["zz"])  # a writer outside the job: untracked from here on
    lake.ingest("db.r", ["y"], T0 + 200)
    queries = [
        edges("job-a", ["db.b"], ["db.a"]),  # db.b is downstream of db.a: a cycle
        edges("job-a", ["db.a"], ["db.a"]),  # its own source
        edges("job-x", ["db.b"], ["db.r"]),  # the root would read its own descendant
        edges("job-a", ["db.r", "db.foreign"], ["db.a"]),
        edges("job-b", ["db.r"], ["db.b"]),  # db.b's current edge (from db.a) is replaced, not checked
        edges("job-n", ["db.b", "db.foreign"], ["db.new"]),
        wp("job-f", ["db.r"], ["db.foreign"]),
        wp("job-a", ["db.r", "db.missing"], ["db.a"]),
        wp("job-b", ["db.a"], ["db.b"]),
    ]
    return "write plans: refused registrations (cycles) and plans (a foreign write, a missing source)", lake.metadata(
        "db.r", "db.a", "db.b", "db.foreign"), queries


def w08_owners_and_definitions(directory: Path) -> Case:
    """Ownership (protocol §6.1-§6.2, §6.9) and definitions (§6.10): a job's table stays its own after it released
    its lease (also one unregistered by an earlier version, which removed consistent.job), another job is refused
    whatever the lease; a job may not read its own output over several registrations; the fingerprint rule, and the
    normalised SQL text it hashes."""
    from consistent_catalog.definition import sql_definition, version_definition
    from consistent_catalog.util.time import now_ms

    lake = JobLake(directory)
    names = ("db.r", "db.empty", "db.owned", "db.legacy", "db.live", "db.a", "db.b", "db.def", "db.schema")
    for name in names:
        lake.create(name)
    lake.ingest("db.r", ["x"], T0 + 100)
    owned = lake.job("job-o", ["db.r"], ["db.owned"])
    owned.run_epoch()
    owned.unregister()  # the lease released: job-o still owns db.owned
    legacy = lake.job("job-legacy", ["db.r"], ["db.legacy"])
    legacy.run_epoch()
    legacy.unregister()
    lake.table("db.legacy").transaction().remove_properties(P.JOB).commit_transaction()  # an earlier version's
    live = lake.job("job-l", ["db.r"], ["db.live"])
    lake.job("job-j", ["db.r"], ["db.a"]).run_epoch()
    lake.job("job-k", ["db.a"], ["db.b"]).run_epoch()
    v1, v2 = version_definition("1"), version_definition("2")
    lake.cc.job("job-d", sources=["db.r"], sinks=["db.def"], transform=lambda ctx: ctx.read("db.r"),
                mode="overwrite", version="1").__enter__().run_epoch()
    lake.cc.job("job-s", sources=["db.r"], sinks=["db.schema"], transform=lambda ctx: ctx.read("db.r"),
                mode="overwrite", version="1").__enter__().run_epoch()
    with lake.table("db.schema").update_schema() as update:
        from pyiceberg.types import LongType

        update.add_column("n", LongType())
    lake.ingest("db.r", ["y"], T0 + 200)
    now = now_ms()
    queries = [
        can_own_query("job-x", "db.owned", "aaaaaaaaaaaa", now=now),  # another job, no lease: refused
        can_own_query("job-o", "db.owned", "aaaaaaaaaaaa", now=now),  # its own job again
        can_own_query("job-x", "db.legacy", "aaaaaaaaaaaa", now=now),  # owned by its last writer
        can_own_query("job-legacy", "db.legacy", "aaaaaaaaaaaa", now=now),
        can_own_query("job-l", "db.live", "aaaaaaaaaaaa", now=now),  # another live instance of the job
        can_own_query("job-l", "db.live", "aaaaaaaaaaaa", takeover=True, now=now),
        can_own_query("job-l", "db.live", live.lease.instance, now=now),  # the holder itself
        can_own_query("job-x", "db.live", "aaaaaaaaaaaa", takeover=True, now=now),  # takeover is for the same job
        can_own_query("job-x", "db.empty", "aaaaaaaaaaaa", now=now),  # an empty table: anybody's
        can_own_query("job-x", "db.missing", "aaaaaaaaaaaa", now=now),
        edges("job-j", ["db.a"], ["db.new"]),  # job-j would read db.a, its own sink
        edges("job-j", ["db.b"], ["db.new"]),  # db.b is downstream of job-j's db.a
        edges("job-j", ["db.r"], ["db.new"]),  # a second sink from the same root: fine
        edges("job-k", ["db.r"], ["db.new"]),  # job-k reads db.a (not its own): fine
        edges("job-k", ["db.b"], ["db.new"]),  # job-k's own db.b
        definition_query("job-d", "db.def", v1),  # unchanged
        definition_query("job-d", "db.def", v2),  # changed
        definition_query("job-d", "db.def", None),  # the job does not know its definition: no change
        definition_query("job-d", "db.def", v1, rebuild=True),
        definition_query("job-other", "db.def", v2),  # no epoch of that job on the sink
        definition_query("job-s", "db.schema", v1),  # the sink's schema evolved since its last epoch
        definition_query("job-x", "db.empty", v1),
        write_plan_query("job-d", ["db.r"], ["db.def"], definition=v1),
        write_plan_query("job-d", ["db.r"], ["db.def"], definition=v2),
        write_plan_query("job-d", ["db.r"], ["db.def"], definition=v1, rebuild=True),
        *(fingerprint_sql_query(text) for text in SQL_TEXTS),
    ]
    assert sql_definition(SQL_TEXTS[0]) == sql_definition(SQL_TEXTS[1])
    return "owners kept after unregistration, jobs reading their own output, the definition rule", lake.metadata(
        *names), queries


#: statements whose fingerprints the corpus pins: the first two are the same statement (comments, white space,
#: a trailing ';'); quoted text keeps its spaces, case and comment-like content
SQL_TEXTS = (
    "INSERT OVERWRITE db.t SELECT word, count(*) AS n FROM db.r GROUP BY word",
    "/* dbt */ INSERT   OVERWRITE db.t\n  SELECT word, count(*) AS n -- the count\n  FROM db.r\tGROUP BY word ;",
    "INSERT OVERWRITE db.t SELECT upper(word) AS word, count(*) AS n FROM db.r GROUP BY 1",
    "INSERT INTO db.t SELECT 'a  b -- not a comment' AS s, \"Col  X\", `we  ird` FROM db.r",
    "INSERT INTO db.t SELECT 'it''s  /* kept */' AS s FROM db.r;;",
    "",
)


GENERATED: tuple[Callable[[Path], Case], ...] = (
    p01_flip_pipeline,
    p02_foreign_late_overwrite,
    p03_expired,
    p04_diamond,
    w01_stage,
    w02_watermark,
    w03_done,
    w04_replay,
    w05_multi_source,
    w06_revised,
    w07_refused,
    w08_owners_and_definitions,
)
def h17_change_ranges() -> Case:
    """Protocol §5.10: the range of changes between two barriers over the histories of h01, h02, h06 and h08 (late
    snapshots, compactions and overwrite epochs, a foreign write, expired history): both snapshots, the barrier of
    the changes, and how little a reader reads; bad ranges and expired starts are typed errors."""
    tables: dict[str, Any] = {}
    for make in (h01_late_snapshots, h02_replace_and_overwrite, h06_foreign_writes, h08_expired_history):
        found = make()[1]
        assert not tables.keys() & found.keys(), "h17 merges histories whose table names are distinct"
        tables.update(found)
    grid = [T0 + 5, T0 + 100, T0 + 150, T0 + 250, T0 + 300, T0 + 301, T0 + 302, T0 + 303, T0 + 400]
    queries = [change_ranges.query(name, a, b) for name in sorted(tables) for i, a in enumerate(grid) for b in grid[i:]]
    queries += [change_ranges.query(name, T0 + 100) for name in sorted(tables)]  # to: the watermark
    queries += [change_ranges.query("db.events", T0 + 300, T0 + 200), change_ranges.query("db.events", -1),
                change_ranges.query("db.events", T0, T0 + 10**6)]
    # a from_barrier in seconds (an int a program passed) before the first barrier is refused (protocol §3.8); 0, the
    # start of time, reads everything
    queries += [change_ranges.query("db.events", T0 // 1000), change_ranges.query("db.events", 0)]
    return "changes between two barriers: their range", tables, queries


def h18_stranded_data() -> Case:
    """Protocol §4.3 step 5 and §6.1: rows ingested into a table while it was a root, which a job then registered on
    (issue 42's forgotten job setting), strand every cut with it; so does a watermark beyond a source's. A table that
    only lags (a new derived table whose first epoch is newer than a sibling's watermark) is not an error. A root
    that holds ingests or a declared watermark refuses a job's registration; an empty root accepts it."""
    orders = root_state("shop.orders", [T0 + 100, T0 + 200, T0 + 300])
    job = "by-customer"
    by_customer = table_state(  # one root ingest at 400, then registered as derived from orders
        "shop.by_customer", [ingest(11, None, T0 + 400, total=3)], head=11, properties=derived_properties(job, "shop.orders")
    )
    marked = table_state(  # empty, registered, with a watermark beyond its source's
        "shop.marked", [genesis(21, job="job-marked", ts=T0)], head=21,
        properties={**derived_properties("job-marked", "shop.orders"), P.WATERMARK: str(T0 + 400)},
    )
    lagging = derived_state("shop.lagging", ["shop.orders"], [(T0 + 100, {"shop.orders": 1})], 30, job="job-lag")
    newer = derived_state("shop.newer", ["shop.orders"], [(T0 + 300, {"shop.orders": 3})], 40, job="job-new")
    ingested = root_state("shop.ingested", [T0 + 100])
    declared = root_state("shop.declared", [], watermark=T0 + 100)
    empty = root_state("shop.empty", [])
    queries = [
        q(["shop.orders", "shop.by_customer"]),  # 0: stranded, held back by shop.by_customer
        q("shop.by_customer"),  # 1: stranded (its own ingest)
        q("shop.orders"),  # 2: fine
        comp("shop.orders"),  # 3: shop.by_customer and shop.marked left out, the rest readable
        q(["shop.orders", "shop.marked"]),  # 4: stranded by the watermark
        q(["shop.lagging", "shop.newer"]),  # 5: only lags: the cut before the data, no error
        q(["shop.orders", "shop.by_customer"], "read-committed"),  # 6
        q(["shop.orders", "shop.by_customer"], "read-uncommitted"),  # 7: no cut search, no refusal
        can_own_query("job-x", "shop.ingested", "i1", now=T0 + 1000),  # 8: a root with ingests: refused
        can_own_query("job-x", "shop.declared", "i1", now=T0 + 1000),  # 9: a root with a watermark: refused
        can_own_query("job-x", "shop.empty", "i1", now=T0 + 1000),  # 10: an empty root: accepted
    ]
    return "stranded data: a root turned derived, a watermark beyond a source's; registrations on roots", meta(
        orders, by_customer, marked, lagging, newer, ingested, declared, empty
    ), queries


def h19_generations() -> Case:
    """Protocol §4.8 and §6.10: the chain r -> s -> x, s's definition changed and its new generation switched in at the
    old watermark (300); x has not switched, y (another table derived from s) has, z (derived from y) has not. A cut
    reads the previous generation while a table of it has not switched, the new one once all have; a tie goes to the
    new one. The plans: x and z regenerate (a source switched), s with yet another definition regenerates again, s
    with its definition is done; a staged regeneration is republished."""
    r = root_state("db.r", [T0 + 100, T0 + 300])

    def regen(snapshot_id: int, parent: int, barrier: int, job: str, sources: dict[str, int], why: str) -> SnapshotRecord:
        record = epoch(snapshot_id, parent, barrier, job=job, sources=sources, total=2)
        return SnapshotRecord(record.snapshot_id, record.parent_id, record.timestamp_ms, "overwrite",
                              {**record.summary, P.REGENERATE: why, P.DEFINITION: "version:2", "deleted-records": "1"})

    def switched(name: str, job: str, records: list[SnapshotRecord], head: int, previous: int, source: str,
                 staged: int | None = None) -> TableState:
        branches = {MAIN: head, P.PREVIOUS_BRANCH: previous, STAGED: head if staged is None else staged}
        properties = {**derived_properties(job, source), P.REVISION: "1", P.WATERMARK: str(T0 + 300),
                      P.WATERMARK_SNAPSHOT: str(head),
                      P.PREVIOUS: json.dumps({"snapshot": previous, "watermark": None, "watermark-snapshot": None},
                                             separators=(",", ":"), sort_keys=True)}
        return table_state(name, records, branches, properties)

    def versioned(record: SnapshotRecord) -> SnapshotRecord:
        return SnapshotRecord(record.snapshot_id, record.parent_id, record.timestamp_ms, record.operation,
                              {**record.summary, P.DEFINITION: "version:1"})

    s = switched("db.s", "job-s", [
        genesis(10, job="job-s", ts=T0),
        versioned(epoch(11, 10, T0 + 100, job="job-s", sources={"db.r": 1})),
        versioned(epoch(12, 11, T0 + 300, job="job-s", sources={"db.r": 2}, total=2)),
        regen(13, 12, T0 + 300, "job-s", {"db.r": 2}, "definition"),
    ], 13, 12, "db.r")
    x = derived_state("db.x", ["db.s"], [(T0 + 100, {"db.s": 11}), (T0 + 300, {"db.s": 12})], 20, job="job-x")
    y = switched("db.y", "job-y", [
        genesis(30, job="job-y", ts=T0),
        epoch(31, 30, T0 + 100, job="job-y", sources={"db.s": 11}),
        epoch(32, 31, T0 + 300, job="job-y", sources={"db.s": 12}),
        regen(33, 32, T0 + 300, "job-y", {"db.s": 13}, "upstream"),
    ], 33, 32, "db.s")
    z = derived_state("db.z", ["db.y"], [(T0 + 100, {"db.y": 31}), (T0 + 300, {"db.y": 32})], 40, job="job-z")
    # w: a staged regeneration of its new definition, not published (killed after staging): cuts read the old one
    w = table_state("db.w", [
        genesis(50, job="job-w", ts=T0),
        versioned(epoch(51, 50, T0 + 300, job="job-w", sources={"db.r": 2})),
        regen(52, 51, T0 + 300, "job-w", {"db.r": 2}, "definition"),
    ], {MAIN: 51, STAGED: 52}, derived_properties("job-w", "db.r"))
    w = TableState(w.identifier, w.snapshots, w.branches, w.properties)
    # v: a regeneration stopped after its first commit (the delete of every row, before the output's write)
    stopped = regen(62, 61, T0 + 300, "job-v", {"db.r": 2}, "definition")
    v = table_state("db.v", [
        genesis(60, job="job-v", ts=T0),
        versioned(epoch(61, 60, T0 + 300, job="job-v", sources={"db.r": 2})),
        SnapshotRecord(62, 61, stopped.timestamp_ms, "delete", {**stopped.summary, "added-records": "0"}),
    ], {MAIN: 61, STAGED: 62}, derived_properties("job-v", "db.r"))
    queries = [
        q(["db.s", "db.x"]),  # 0: previous, at 300: s 12, x 22
        q("db.s"),  # 1: current: s 13
        q(["db.s", "db.y"]),  # 2: a tie at 300: current (s 13, y 33)
        q(["db.s", "db.y", "db.z"]),  # 3: z has not switched: previous (s 12, y 32, z 42)
        comp("db.s"),  # 4: the component: previous
        q(["db.s", "db.x"], "read-committed"),  # 5: as 0
        q(["db.s", "db.x"], "read-uncommitted"),  # 6: each at its newest branch
        q(["db.s", "db.x"], as_of=T0 + 200),  # 7: before the switch: the same history either way
        q(["db.w", "db.r"]),  # 8: a staged regeneration changes no cut
        q(["db.w", "db.r"], "read-committed"),  # 9: read-committed reads the staged regeneration
        wp("job-x", ["db.s"], ["db.x"]),  # 10: regenerate (upstream), at 300 although W(x) = 300
        wp("job-z", ["db.y"], ["db.z"]),  # 11: regenerate (upstream)
        wp("job-s", ["db.r"], ["db.s"], definition="version:2"),  # 12: done: the new generation is published
        wp("job-s", ["db.r"], ["db.s"], definition="version:3"),  # 13: regenerate (definition) again
        wp("job-w", ["db.r"], ["db.w"], definition="version:2"),  # 14: the staged regeneration is republished
        wp("job-w", ["db.r"], ["db.w"], definition="version:3"),  # 15: another definition: staged again
        wp("job-v", ["db.r"], ["db.v"], definition="version:2"),  # 16: a delete alone is no finished regeneration
    ]
    return "generations: a switched chain read at its previous generation until every table switched", meta(
        r, s, x, y, z, w, v
    ), queries


HANDWRITTEN: tuple[Callable[[], Case], ...] = (
    h01_late_snapshots,
    h02_replace_and_overwrite,
    h03_staged_epochs,
    h04_watermark_floor,
    h05_genesis,
    h06_foreign_writes,
    h07_siblings_and_diamond,
    h08_expired_history,
    h09_empty_tables,
    h10_malformed,
    h11_invalid_input,
    h12_no_complete_barrier,
    h13_revisions_tags_branches,
    h14_write_plans,
    h15_faults_and_durations,
    h16_write_commits,
    h17_change_ranges,
    h18_stranded_data,
    h19_generations,
)


def build_cases(only: Iterable[str] = ("",)) -> dict[str, dict[str, Any]]:
    """Every case whose name starts with one of ``only`` (default: all)."""
    only = tuple(only)
    cases: dict[str, dict[str, Any]] = {}
    for make in HANDWRITTEN:
        if not make.__name__.startswith(only):
            continue
        description, tables, queries = make()
        case = make_case(description, tables, queries)
        for index, check in HAND.get(make.__name__, {}).items():
            answer = case["queries"][index]["expected"]
            if not check(answer):
                raise AssertionError(f"{make.__name__} query {index}: hand-checked value differs: {answer}")
        check_write_outlines(make.__name__, case)
        cases[make.__name__] = case
    for make in GENERATED:
        if not make.__name__.startswith(only):
            continue
        with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
            description, tables, queries = make(Path(tmp))
            cases[make.__name__] = make_case(description, tables, queries)
        check_write_outlines(make.__name__, cases[make.__name__])
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=CASES, help="directory of the case files (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="only check that the hand-written cases are unchanged")
    parser.add_argument("--only", nargs="+", metavar="PREFIX",
                        help="write only the cases whose names start with one of these (e.g. w: the write plans); the "
                             "generated ones get new snapshot ids on every run, so rewrite only what changed")
    args = parser.parse_args(argv)
    cases = build_cases(args.only or ("",))
    if args.check:
        stale = []
        for name, case in cases.items():
            path = args.out / f"{name}.json"
            if not name.startswith("h"):
                continue  # generated from real writes: timestamps and ids differ on every run
            if not path.is_file() or json.loads(path.read_text()) != json.loads(json.dumps(case)):
                stale.append(name)
        print("stale: " + ", ".join(stale) if stale else "corpus up to date")
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, case in cases.items():
        write_case(args.out, name, case)
    total = sum(len(c["queries"]) for c in cases.values())
    size = sum((args.out / f"{n}.json").stat().st_size for n in cases)
    print(f"wrote {len(cases)} cases, {total} queries, {size // 1024} KiB to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


_ = (python_answer, encode_table_sources)  # re-exported for interactive use
