"""FLIP-276's two jobs checked epoch by epoch from Iceberg metadata alone (pyiceberg), for any writer of them
(the SQL file, the dbt project, a Python job): an independent reader of the protocol's keys (protocol §2.1, §2.2).

``epoch_problems(catalog, sink)`` says where a sink's ``main`` breaks what an epoch of its job promises:
every epoch exactly once (``tests.harness.main_epochs``), each written by the sink's job alone, each of its
snapshots recording as its inputs (``consistent.sources``) exactly ``snap(source, barrier)`` of the source
(protocol §3.4, found here from the source's own history), and its rows a recount of the source at that
recorded input snapshot. ``lineage_problems`` checks the sink's table properties after its job unregistered.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pyarrow as pa

from consistent_catalog.demo import COUNTS, HISTOGRAM, WORDS
from tests.harness.main_epochs import exactly_once_problems, main_epochs, snapshot_at

SOURCES, JOB, LEASE_HOLDER = "consistent.sources", "consistent.job", "consistent.lease-holder"

#: sink -> (its job, as spark-conf/flip-pipeline.sql and the dbt project name it; its one source)
FLIP_JOBS: dict[str, tuple[str, str]] = {COUNTS: ("word-count", WORDS), HISTOGRAM: ("count-histogram", COUNTS)}


def scan(catalog: Any, table: str, snapshot_id: int | None) -> pa.Table:
    """A plain pyiceberg scan at ``snapshot_id`` (None: the table was empty there)."""
    loaded = catalog.load_table(table)
    if snapshot_id is None:
        return loaded.schema().as_arrow().empty_table()
    return loaded.scan(snapshot_id=snapshot_id).to_arrow()


def recount(sink: str, source_rows: pa.Table) -> dict[Any, int]:
    """What ``sink`` holds for these source rows, counted here: word -> count, or count -> number of words."""
    column = "word" if sink == COUNTS else "cnt"
    return dict(Counter(source_rows[column].to_pylist()))


def held(sink: str, rows: pa.Table) -> dict[Any, int]:
    """A sink's rows as the mapping ``recount`` computes (a key twice is a problem: the mapping would be shorter)."""
    key, value = ("word", "cnt") if sink == COUNTS else ("cnt", "words")
    return dict(zip(rows[key].to_pylist(), rows[value].to_pylist()))


def epoch_problems(catalog: Any, sink: str) -> list[str]:
    """Every epoch on ``sink``'s main: once, by its job, recording ``snap(source, barrier)`` as its input, and a
    recount of the source at that input (empty when the sink's main is as the job promises)."""
    job, source = FLIP_JOBS[sink]
    metadata = catalog.load_table(sink).metadata
    source_metadata = catalog.load_table(source).metadata
    problems = exactly_once_problems(sink, metadata)
    for epoch in main_epochs(metadata)[0]:
        where = f"{sink} at barrier {epoch.barrier}"
        if epoch.jobs != {job}:
            problems.append(f"{where} was written by jobs {sorted(epoch.jobs)}, not {job!r} alone")
        expected = {source: snapshot_at(source_metadata, epoch.barrier)}
        recorded = [metadata.snapshot_by_id(s).summary.additional_properties.get(SOURCES) for s in epoch.snapshot_ids]
        if any(r is None or json.loads(r) != expected for r in recorded):
            problems.append(f"{where} records inputs {recorded}, not snap(source, barrier) = {expected}")
            continue
        rows = scan(catalog, sink, epoch.head)
        contents = held(sink, rows)
        if len(contents) != rows.num_rows or contents != recount(sink, scan(catalog, source, expected[source])):
            problems.append(f"{where} (snapshot {epoch.head}) is not a recount of {source} at its recorded input "
                            f"{expected[source]}")
    return problems


def lineage_problems(catalog: Any, sink: str) -> list[str]:
    """After its job's process exited: the lineage kept (``consistent.sources``), the job still the owner
    (``consistent.job``, protocol §6.2), its lease gone."""
    properties = catalog.load_table(sink).metadata.properties
    job, source = FLIP_JOBS[sink]
    problems = []
    if properties.get(SOURCES) != json.dumps([source], separators=(",", ":")):
        problems.append(f"{sink}: lineage {properties.get(SOURCES)!r}, not [{source!r}]")
    if properties.get(JOB) != job:
        problems.append(f"{sink}: owned by {properties.get(JOB)!r}, not by its job {job!r}")
    if LEASE_HOLDER in properties:
        problems.append(f"{sink}: still leased to {properties.get(LEASE_HOLDER)!r} of {properties.get(JOB)!r}")
    return problems
