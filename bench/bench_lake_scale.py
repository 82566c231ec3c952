"""Benchmark: a lake at scale (issue 45): a warehouse-shaped DAG of ``--tables`` tables and ``--jobs`` jobs, written by
N concurrent writer processes while a reader resolves cuts and polls ``status``; the same work with plain pyiceberg.

Not a test (``tests/integration/test_lake_scale.py`` runs it small and asserts). For each ``--writers`` count N, on a
fresh catalog (``--backend postgres``: a database of the throwaway PostgreSQL server of ``tests/harness/servers.py``;
``sqlite``: a SQLite file), it

1. generates the lake (``generate``): ~2 % roots (20 at 1,000 tables), then ``--depth`` layers of jobs (staging ->
   dimensions/facts -> marts: the TPC-DI shape), each job reading 1 to ``--max-fan-in`` tables of earlier layers (at
   least one of the layer just before, so the DAG is that deep) and writing its share of the other tables;
   every table twice: ``scale.*`` for the protocol and ``plain.*`` for plain pyiceberg;
2. puts one batch into every root, starts N writer processes and one reader process; every writer registers its
   jobs (job i belongs to writer i mod N: ``EpochJob``, pyiceberg writes) and runs them until each published a
   first epoch (the warm-up, untimed; ``--no-warmup`` skips it), then, for ``--duration`` seconds, repeats: every ``--ingest-every``-th
   operation a keyed ingest of ``--rows`` rows into a random root (``cc.ingest(root, rows, key=...)``), otherwise the
   epoch of its next job (round robin; an epoch whose sources did not move is a no-op, counted apart). Meanwhile the
   reader resolves the repeatable-read cut of the deepest table (its upstream closure) and of all tables, each cold
   (a new ``ConsistentCatalog``: empty state cache) and warm (the reader's long-lived one), calls ``status()`` of all
   tables (each job's freshness: now - W(its sinks)), polls ``wait_for`` once on the deepest table as a scheduler's
   sensor does (``fresher_than="1m"``, ``timeout=0``), and, every ``--check-every``-th cut of all tables, recounts it;
   (``--expire-every K``) every Python job expires its sinks every K published epochs meanwhile;
3. the plain phase, in the same processes right after: the same mix with plain pyiceberg on ``plain.*`` (an ingest is
   ``table.append``; a job loads its sources, and when one moved, recomputes and ``table.overwrite``s each sink);
4. (``--hot-root S``) every writer ingesting into one root for S seconds, the protocol's keyed ingests then plain
   appends: where a single table's commits serialise;
5. checks, through a client of its own: every sink's ``main`` holds each barrier once, from one attempt
   (``tests/harness/main_epochs.exactly_once_problems``); every ingest key the writers reported is on its root's
   ``main`` exactly once and no other is; the cut of all tables, recounted (below).

The transform of every job: for each root upstream, how many rows that root holds at the epoch's input (a table
``(root, n)``); a root's count is its input snapshot's ``total-records``, a derived source's rows are read. A cut is
*consistent* when every derived table at the cut holds, for each root upstream of it, exactly the number of rows the
root holds at the cut, recounted by scanning the root at its cut snapshot with plain pyiceberg (``recount_problems``).

Reported per N: operations/s of the protocol and of plain pyiceberg (ingests = appends; epochs that did work =
job runs that overwrote; sink commits), their ratio; the catalog commits of each phase (metadata files written per
table); each job's freshness (median and p95 of its samples; then the median and worst over jobs), each job's epoch
time; resolve and ``status`` times (wall, and the reader's own CPU time: under N writers on 2 cores most of a read's
wall time is waiting for a core); catalog connections in use (PostgreSQL: ``pg_stat_activity`` sampled every second:
peak and median); errors (target 0), with the first few messages; the checks' findings.

``--spark-writers K`` adds K PySpark drivers (``build_session``: the consistent catalog, ``local[1]``), each running
the SQL epochs of ``--spark-jobs-each`` jobs of layer 2 (which the Python writers then leave alone): per sink,
``SET spark.sql.consistent.job=<job>`` and ``INSERT OVERWRITE lake_consistent.scale.<sink> SELECT ...`` (the same
counts in SQL), round robin; in the plain phase the same statements through the plain Iceberg catalog
(``lake.plain.<sink>``). What each protocol statement did is read back from
``CALL lake_consistent.system.recent_results()`` (published or not). PostgreSQL only.

``--reads-only`` measures the reader alone on a quiet lake: it builds the protocol's copy (``--read-epochs`` rounds of a
batch into every root and an epoch of every job; ``--lake DIR`` keeps a SQLite lake for the next run), then times warm
cuts of the deepest table, of its component and of all tables, ``status`` of all tables named and of the catalog's
listing, in ``--read-runs`` fresh processes of ``--read-rounds`` rounds, wall and CPU time; ``--compare-with SRC`` runs
the same in processes importing the ``consistent_catalog`` under ``SRC`` (an older checkout's ``src``), alternating
with this one (an A/B on a shared machine).

Usage:
    .venv/bin/python -m bench.bench_lake_scale --reads-only [--backend sqlite] [--lake DIR] [--read-epochs 3]
                                               [--read-runs 5] [--read-rounds 10] [--compare-with OLD/src]
    .venv/bin/python -m bench.bench_lake_scale [--tables 1000] [--jobs 200] [--writers 1,8,32] [--backend postgres]
                                               [--duration 60] [--ingest-every 3] [--rows 5] [--depth 7]
                                               [--max-fan-in 10] [--seed 45] [--check-every 10] [--hot-root 0]
                                               [--spark-writers 0 [--spark-jobs-each 3]] [--expire-every 0]
                                               [--markdown]
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import platform
import queue
import random
import shlex
import statistics
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.common import load, quantile

PROTOCOL_NS, PLAIN_NS = "scale", "plain"
ROOT_SCHEMA = pa.schema([pa.field("writer", pa.int64()), pa.field("seq", pa.int64()), pa.field("payload", pa.string())])
DERIVED_SCHEMA = pa.schema([pa.field("root", pa.string()), pa.field("n", pa.int64())])
RETRIES = {"commit.retry.num-retries": "30", "commit.retry.min-wait-ms": "20", "commit.retry.max-wait-ms": "1000"}
"""Hot roots take commits from many writers at once: generous retries (as ``tests/harness/concurrent.py``)."""
LAYER_WEIGHTS = (0.2, 0.18, 0.16, 0.14, 0.12, 0.1, 0.1, 0.08)
"""Share of the jobs per layer (staging first, marts last), for up to 8 layers."""
VERSION = "lake-scale-1"
WARMUP_CAP = 600.0
"""Seconds a writer spends at most bringing its jobs to a first epoch before the timed phase."""
"""The jobs' definition (``cc.job(version=...)``): all jobs of a run compute the same thing."""


# --- the lake's shape -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobSpec:
    name: str
    layer: int
    sources: tuple[str, ...]  # short names (no namespace)
    sinks: tuple[str, ...]


@dataclass(frozen=True)
class LakeShape:
    roots: tuple[str, ...]
    jobs: tuple[JobSpec, ...]

    @property
    def derived(self) -> list[str]:
        return [s for j in self.jobs for s in j.sinks]

    @property
    def tables(self) -> list[str]:
        return [*self.roots, *self.derived]

    def sources_of(self) -> dict[str, tuple[str, ...]]:
        return {sink: job.sources for job in self.jobs for sink in job.sinks}

    def upstream_roots(self) -> dict[str, frozenset[str]]:
        """Per table, the roots it derives from (a root: itself)."""
        sources = self.sources_of()
        found: dict[str, frozenset[str]] = {r: frozenset({r}) for r in self.roots}
        for job in self.jobs:  # jobs come in layer order: sources are known before their sinks
            below = frozenset().union(*(found[s] for s in job.sources))
            for sink in job.sinks:
                found[sink] = below
        assert set(found) == set(self.tables) and all(sources[s] for s in self.derived)
        return found

    def depth(self) -> dict[str, int]:
        level = dict.fromkeys(self.roots, 0)
        for job in self.jobs:
            for sink in job.sinks:
                level[sink] = 1 + max(level[s] for s in job.sources)
        return level

    def deepest(self) -> str:
        levels = self.depth()
        return max(self.derived, key=lambda t: (levels[t], len(self.upstream_roots()[t]), t))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> LakeShape:
        return cls(tuple(raw["roots"]), tuple(JobSpec(j["name"], j["layer"], tuple(j["sources"]), tuple(j["sinks"]))
                                                for j in raw["jobs"]))


def generate(tables: int, jobs: int, *, depth: int = 7, max_fan_in: int = 10, seed: int = 45) -> LakeShape:
    """A warehouse-shaped DAG: ~2 % roots (2 to 20), ``jobs`` jobs in ``depth`` layers (fewer when there are fewer
    jobs), each job writing its share of the other tables from 1 to ``max_fan_in`` tables of earlier layers, at
    least one of them from the layer just before."""
    if tables < 3 or jobs < 1:
        raise ValueError(f"a lake needs at least 3 tables and 1 job (got --tables {tables} --jobs {jobs})")
    n_roots = max(2, min(20, tables // 50))
    if tables - n_roots < jobs:
        raise ValueError(f"{jobs} jobs need at least {jobs} derived tables; {tables} tables leave {tables - n_roots} "
                         "after the roots: raise --tables or lower --jobs")
    if not 1 <= depth <= len(LAYER_WEIGHTS):
        raise ValueError(f"--depth must be 1 to {len(LAYER_WEIGHTS)}, got {depth}")
    rng = random.Random(seed)
    layers = min(depth, jobs)
    weights = LAYER_WEIGHTS[:layers]
    per_layer = [max(1, round(jobs * w / sum(weights))) for w in weights]
    while sum(per_layer) > jobs:  # rounding: take from the widest layer, add to the first
        per_layer[per_layer.index(max(per_layer))] -= 1
    per_layer[0] += jobs - sum(per_layer)
    derived = tables - n_roots
    sinks_per_job = [derived // jobs + (1 if i < derived % jobs else 0) for i in range(jobs)]
    roots = tuple(f"src_{i:02d}" for i in range(n_roots))
    by_layer: list[list[str]] = [list(roots)]
    specs: list[JobSpec] = []
    index = 0
    for layer, count in enumerate(per_layer, start=1):
        made: list[str] = []
        for _ in range(count):
            name = f"j{index:03d}"
            sinks = tuple(f"l{layer}_{name}_{k}" for k in range(sinks_per_job[index]))
            earlier = [t for level in by_layer[:-1] for t in level]
            fan_in = min(len(by_layer[-1]) + len(earlier),
                         1 + min(max_fan_in - 1, int(rng.expovariate(1 / 2.5))))  # mostly 1-4, up to max_fan_in
            first = rng.choice(by_layer[-1])
            others = [t for t in by_layer[-1] + earlier if t != first]
            sources = (first, *rng.sample(others, min(len(others), fan_in - 1)))
            specs.append(JobSpec(name, layer, tuple(sorted(sources)), sinks))
            made += sinks
            index += 1
        by_layer.append(made)
    return LakeShape(roots, tuple(specs))


def qualified(namespace: str, name: str) -> str:
    return f"{namespace}.{name}"


def spark_jobs(shape: LakeShape, spark_writers: int, per_writer: int) -> list[list[JobSpec]]:
    """The jobs each Spark writer runs: ``per_writer`` each, from layer 2 (dimensions and facts, read by the layers
    above), then layer 3 and on when layer 2 has too few."""
    pool = sorted(shape.jobs, key=lambda j: (j.layer != 2, j.layer < 2, j.layer, j.name))
    if spark_writers * per_writer > len(pool):
        raise ValueError(f"{spark_writers} Spark writers x {per_writer} jobs each is more than the {len(pool)} jobs")
    return [pool[i * per_writer:(i + 1) * per_writer] for i in range(spark_writers)]


def python_jobs(shape: LakeShape, writer: int, writers: int, taken: Iterable[str]) -> list[JobSpec]:
    """The jobs of Python writer ``writer``: every ``writers``-th of those no Spark writer runs."""
    skip = set(taken)
    return [j for i, j in enumerate(j for j in shape.jobs if j.name not in skip) if i % writers == writer]


# --- the catalog ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CatalogArgs:
    """What every process opens its own pyiceberg SqlCatalog from."""

    uri: str
    warehouse: str

    def open(self) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog("lake", uri=self.uri, warehouse=self.warehouse)


def create_lake(args: CatalogArgs, shape: LakeShape, threads: int = 4, *, plain: bool = True) -> float:
    """Both copies of every table (``scale.*``, and with ``plain`` ``plain.*``); returns the seconds it took."""
    started = time.perf_counter()
    catalog = args.open()
    namespaces = (PROTOCOL_NS, PLAIN_NS) if plain else (PROTOCOL_NS,)
    for namespace in namespaces:
        catalog.create_namespace_if_not_exists(namespace)
    schema = {**dict.fromkeys(shape.roots, ROOT_SCHEMA), **dict.fromkeys(shape.derived, DERIVED_SCHEMA)}
    work = [(ns, name) for ns in namespaces for name in shape.tables]
    local = threading.local()

    def create(item: tuple[str, str]) -> None:
        if not hasattr(local, "catalog"):
            local.catalog = args.open()
        local.catalog.create_table(qualified(*item), schema=schema[item[1]], properties=RETRIES)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, work))
    return time.perf_counter() - started


# --- the transform, shared by the protocol's jobs and the plain ones ----------------------------------
def merge_counts(counts: Iterable[tuple[str, int]], inconsistent: list[str], where: str) -> pa.Table:
    """Rows (root, n) from the sources' (root, n) pairs; two sources disagreeing on a root is noted (an inconsistent
    input) and the larger count kept."""
    merged: dict[str, int] = {}
    for root, n in counts:
        if root in merged and merged[root] != n:
            inconsistent.append(f"{where}: sources disagree on {root}: {merged[root]} vs {n}")
        merged[root] = max(n, merged.get(root, n))
    ordered = sorted(merged)
    return pa.table({"root": ordered, "n": [merged[r] for r in ordered]}, schema=DERIVED_SCHEMA)


def total_records(table: Any, snapshot_id: int | None) -> int:
    if snapshot_id is None:
        return 0
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    return int((snapshot.summary.additional_properties if snapshot and snapshot.summary else {}).get("total-records", 0))


class CountRoots:
    """The protocol job's transform: see the module docstring."""

    def __init__(self, namespace: str, roots: Iterable[str], sinks: Iterable[str], inconsistent: list[str]) -> None:
        self.roots = {qualified(namespace, r) for r in roots}
        self.sinks = [qualified(namespace, s) for s in sinks]
        self.inconsistent = inconsistent

    def __call__(self, ctx: Any) -> dict[str, pa.Table]:
        pairs: list[tuple[str, int]] = []
        for source, snapshot_id in ctx.inputs.items():
            if source in self.roots:
                pairs.append((source.split(".", 1)[1], total_records(ctx.table(source), snapshot_id)))
            else:
                rows = ctx.read(source)
                pairs += zip(rows["root"].to_pylist(), rows["n"].to_pylist())
        output = merge_counts(pairs, self.inconsistent, f"{ctx.job} at barrier {ctx.barrier}")
        return dict.fromkeys(self.sinks, output)


# --- the writer processes -------------------------------------------------------------------------------
@dataclass
class PhaseReport:
    writer: int
    phase: str
    kind: str = "python"
    """``python`` (ingests and ``EpochJob`` epochs) or ``spark`` (SQL epochs through ``lake_consistent``)."""
    seconds: float = 0.0
    ingests: int = 0
    epochs: int = 0
    """Epochs that did work (protocol) / job runs that overwrote (plain)."""
    noops: int = 0
    sink_commits: int = 0
    """Sinks published (protocol: stage + publish each) / overwritten (plain)."""
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    keys: list[tuple[str, str]] = field(default_factory=list)
    """(root, ingest key) of every protocol ingest that landed (not skipped)."""
    epoch_seconds: dict[str, list[float]] = field(default_factory=dict)
    """Per job: seconds of each epoch that did work."""
    ingest_seconds: list[float] = field(default_factory=list)
    inconsistent: list[str] = field(default_factory=list)
    setup_seconds: float = 0.0
    """Protocol: registering this writer's jobs."""
    warmup_seconds: float = 0.0
    """Protocol: until every job of this writer published an epoch (before the timed phase)."""

    def error(self, what: str, exc: BaseException) -> None:
        self.error_count += 1
        if len(self.errors) < 5:
            self.errors.append(f"writer {self.writer} {what}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")


def ingest_batch(writer: int, seq: int, rows: int) -> pa.Table:
    return pa.table({"writer": [writer] * rows, "seq": [seq] * rows, "payload": [f"w{writer}-{seq}-{i}" for i in range(rows)]},
                    schema=ROOT_SCHEMA)


def _schedule(writer: int, seed: int, roots: Sequence[str], ingest_every: int) -> Iterable[str | None]:
    """The writer's operations, the same in both phases: a root to ingest into, or None (the next job's epoch)."""
    rng = random.Random(seed * 1000 + writer)
    step = 0
    while True:
        yield rng.choice(roots) if step % ingest_every == 0 else None
        step += 1


EXPIRE_OLDER_THAN = "5s"
"""``--expire-every``: a sink's snapshots older than this may be expired (cut-aware: what a retained cut or a
downstream epoch's recorded input needs is kept), so expiry removes something within a 45 s phase."""


def _protocol_phase(catalog_args: CatalogArgs, shape: LakeShape, writer: int, writers: int, duration: float,
                    ingest_every: int, rows: int, seed: int, ready: Any, taken: Sequence[str],
                    warmup: bool = True, *, expire_every: int = 0) -> PhaseReport:
    from consistent_catalog import ConsistentCatalog
    from consistent_catalog.retention.policy import RetentionPolicy

    report = PhaseReport(writer, "protocol")
    cc = ConsistentCatalog(catalog_args.open())
    mine = python_jobs(shape, writer, writers, taken)
    started = time.perf_counter()
    jobs = []
    for spec in mine:
        job = cc.job(spec.name, sources=[qualified(PROTOCOL_NS, s) for s in spec.sources],
                     sinks=[qualified(PROTOCOL_NS, s) for s in spec.sinks],
                     transform=CountRoots(PROTOCOL_NS, shape.roots, spec.sinks, report.inconsistent), mode="overwrite",
                     version=VERSION, expire_every=expire_every or None,
                     retention=RetentionPolicy(older_than=EXPIRE_OLDER_THAN, keep_last=2) if expire_every else None)
        try:
            job.register()
            jobs.append(job)
        except Exception as exc:  # noqa: BLE001 - counted: the target is none
            report.error(f"registering {spec.name}", exc)
    report.setup_seconds = time.perf_counter() - started
    if warmup:  # every job of this writer publishes once (the others' jobs upstream do so meanwhile)
        started = time.perf_counter()
        pending = list(jobs)
        while pending and time.perf_counter() - started < WARMUP_CAP:
            for job in list(pending):
                try:
                    if job.run_epoch().did_work:
                        pending.remove(job)
                except Exception as exc:  # noqa: BLE001
                    report.error(f"warm-up epoch of {job.job}", exc)
            if pending:
                time.sleep(0.2)
        report.warmup_seconds = time.perf_counter() - started
    ready.wait(600 + WARMUP_CAP)
    schedule = _schedule(writer, seed, shape.roots, ingest_every)
    seq, next_job = 0, 0
    t0 = time.perf_counter()
    deadline = t0 + duration
    while time.perf_counter() < deadline:
        root = next(schedule)
        op_started = time.perf_counter()
        if root is not None or not jobs:
            root = root or random.choice(shape.roots)
            key = f"w{writer}-{seq}"
            table = qualified(PROTOCOL_NS, root)
            try:
                result = cc.ingest(table, ingest_batch(writer, seq, rows), key=key)
                if time.perf_counter() <= deadline:
                    report.ingests += 1
                    report.ingest_seconds.append(time.perf_counter() - op_started)
                if not result.skipped:
                    report.keys.append((table, key))
            except Exception as exc:  # noqa: BLE001
                report.error(f"ingest {key} into {table}", exc)
            seq += 1
            continue
        job = jobs[next_job % len(jobs)]
        next_job += 1
        try:
            result = job.run_epoch()
        except Exception as exc:  # noqa: BLE001
            report.error(f"epoch of {job.job}", exc)
            continue
        if time.perf_counter() > deadline:
            break
        if result.did_work:
            report.epochs += 1
            report.sink_commits += sum(a in ("published", "republished") for a in result.actions.values())
            report.epoch_seconds.setdefault(job.job, []).append(time.perf_counter() - op_started)
        else:
            report.noops += 1
    report.seconds = time.perf_counter() - t0
    for job in jobs:
        try:
            job.unregister()
        except Exception as exc:  # noqa: BLE001
            report.error(f"unregistering {job.job}", exc)
    return report


def _plain_phase(catalog_args: CatalogArgs, shape: LakeShape, writer: int, writers: int, duration: float,
                 ingest_every: int, rows: int, seed: int, ready: Any, taken: Sequence[str],
                 warmup: bool = True) -> PhaseReport:
    report = PhaseReport(writer, "plain")
    catalog = catalog_args.open()
    mine = python_jobs(shape, writer, writers, taken)
    roots = set(shape.roots)
    last_inputs: dict[str, dict[str, int | None]] = {}
    ready.wait(600)
    schedule = _schedule(writer, seed, shape.roots, ingest_every)
    seq, next_job = 0, 0
    t0 = time.perf_counter()
    deadline = t0 + duration
    while time.perf_counter() < deadline:
        root = next(schedule)
        op_started = time.perf_counter()
        if root is not None or not mine:
            root = root or random.choice(shape.roots)
            try:
                catalog.load_table(qualified(PLAIN_NS, root)).append(ingest_batch(writer, seq, rows))
                if time.perf_counter() <= deadline:
                    report.ingests += 1
                    report.ingest_seconds.append(time.perf_counter() - op_started)
            except Exception as exc:  # noqa: BLE001
                report.error(f"append into {root}", exc)
            seq += 1
            continue
        spec = mine[next_job % len(mine)]
        next_job += 1
        try:
            sources = {s: catalog.load_table(qualified(PLAIN_NS, s)) for s in spec.sources}
            inputs = {s: (t.current_snapshot().snapshot_id if t.current_snapshot() else None) for s, t in sources.items()}
            if inputs == last_inputs.get(spec.name):
                if time.perf_counter() <= deadline:
                    report.noops += 1
                continue
            pairs: list[tuple[str, int]] = []
            for source, table in sources.items():
                if source in roots:
                    pairs.append((source, total_records(table, inputs[source])))
                elif inputs[source] is not None:
                    data = table.scan(snapshot_id=inputs[source]).to_arrow()
                    pairs += zip(data["root"].to_pylist(), data["n"].to_pylist())
            output = merge_counts(pairs, [], spec.name)  # plain jobs have no consistent inputs to check
            for sink in spec.sinks:
                catalog.load_table(qualified(PLAIN_NS, sink)).overwrite(output)
            last_inputs[spec.name] = inputs
        except Exception as exc:  # noqa: BLE001
            report.error(f"plain job {spec.name}", exc)
            continue
        if time.perf_counter() <= deadline:
            report.epochs += 1
            report.sink_commits += len(spec.sinks)
            report.epoch_seconds.setdefault(spec.name, []).append(time.perf_counter() - op_started)
    report.seconds = time.perf_counter() - t0
    return report


def writer_process(catalog_args: CatalogArgs, raw_shape: dict, writer: int, writers: int, duration: float,
                   ingest_every: int, rows: int, seed: int, barriers: tuple[Any, ...], out: Any,
                   taken: Sequence[str] = (), warmup: bool = True, expire_every: int = 0) -> None:
    logging.getLogger("pyiceberg").setLevel(logging.ERROR)  # commit retries are expected under contention
    logging.getLogger("consistent_catalog").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", "Delete operation did not match any records")  # an overwrite of an empty sink
    shape = LakeShape.from_dict(raw_shape)
    phases = (_protocol_phase, _plain_phase)[:len(barriers)]
    for phase, ready in zip(phases, barriers):
        try:
            extra = {"expire_every": expire_every} if phase is _protocol_phase else {}
            report = phase(catalog_args, shape, writer, writers, duration, ingest_every, rows, seed, ready, taken,
                           warmup, **extra)
        except Exception:  # noqa: BLE001 - the whole phase failed: reported as one error
            report = PhaseReport(writer, phase.__name__.strip("_").split("_")[0], error_count=1,
                                 errors=[f"writer {writer}: {traceback.format_exc()[-600:]}"])
            ready.abort()
        out.put(asdict(report))


def job_sql(catalog: str, job: JobSpec, sink: str, roots: Iterable[str]) -> str:
    """The SQL of a job's epoch into one sink: what ``CountRoots`` computes, per root upstream the larger count."""
    roots = set(roots)
    parts = [f"SELECT '{s}' AS root, count(*) AS n FROM {catalog}.{s}" if s in roots
             else f"SELECT root, n FROM {catalog}.{s}" for s in job.sources]
    union = "\n  UNION ALL ".join(parts)
    return f"INSERT OVERWRITE {catalog}.{sink}\nSELECT root, max(n) AS n FROM (\n  {union}\n) GROUP BY root"


def _spark_warmup(spark: Any, work: Sequence[tuple[JobSpec, str, str]], report: PhaseReport) -> int:
    """Run every statement until each found a barrier (its action is not ``nothing``), as the Python writers' warm-up
    does, so the jobs downstream of these sinks can warm up too; returns the last statement number it used."""
    started = time.perf_counter()
    pending = list(work)
    last = 0
    while pending and time.perf_counter() - started < WARMUP_CAP:
        for job, sink, sql in list(pending):
            try:
                spark.sql(f"SET spark.sql.consistent.job={job.name}")
                spark.sql(sql)
            except Exception as exc:  # noqa: BLE001
                report.error(f"warm-up SQL epoch of {job.name} into {sink}", exc)
                continue
            row = spark.sql("CALL lake_consistent.system.recent_results()").collect()[-1]
            last = max(last, row["statement"])
            if row["action"] != "nothing":
                pending.remove((job, sink, sql))
        if pending:
            time.sleep(0.5)
    report.warmup_seconds = time.perf_counter() - started
    return last


def _spark_phase(spark: Any, phase: str, index: int, jobs: Sequence[JobSpec], roots: Sequence[str], duration: float,
                 ready: Any) -> PhaseReport:
    report = PhaseReport(1000 + index, phase, kind="spark")
    catalog = f"lake_consistent.{PROTOCOL_NS}" if phase == "protocol" else f"lake.{PLAIN_NS}"
    work = [(job, sink, job_sql(catalog, job, sink, roots)) for job in jobs for sink in job.sinks]
    warmed = _spark_warmup(spark, work, report) if phase == "protocol" else 0
    ready.wait(600 + WARMUP_CAP)
    t0 = time.perf_counter()
    deadline = t0 + duration
    step = 0
    while time.perf_counter() < deadline and work:
        job, sink, sql = work[step % len(work)]
        step += 1
        started = time.perf_counter()
        try:
            if phase == "protocol":
                spark.sql(f"SET spark.sql.consistent.job={job.name}")
            spark.sql(sql)
        except Exception as exc:  # noqa: BLE001 - counted: the target is none
            report.error(f"SQL epoch of {job.name} into {sink}", exc)
            continue
        if time.perf_counter() <= deadline:
            report.epoch_seconds.setdefault(job.name, []).append(time.perf_counter() - started)
            if phase == "plain":
                report.epochs += 1
                report.sink_commits += 1
    if phase == "protocol":  # what each statement did, from the plugin's own record of the session's writes
        results = spark.sql("CALL lake_consistent.system.recent_results()").collect()
        for row in results:
            if row["statement"] <= warmed:
                continue
            if row["action"] in ("published", "republished"):
                report.epochs += 1
                report.sink_commits += 1
            else:
                report.noops += 1
    report.seconds = time.perf_counter() - t0
    return report


def spark_writer_process(catalog_args: CatalogArgs, raw_shape: dict, index: int, job_names: Sequence[str],
                         duration: float, barriers: tuple[Any, ...], out: Any) -> None:
    """A PySpark driver with the consistent catalog running SQL epochs of its jobs (protocol), then the same SQL
    through the plain Iceberg catalog (``lake.plain.*``)."""
    from tests.harness.sql_writer import DRIVER_CONF, _exit_jvm

    shape = LakeShape.from_dict(raw_shape)
    jobs = [j for j in shape.jobs if j.name in set(job_names)]
    spark = None
    try:
        from consistent_catalog.spark.session import build_session

        spark = build_session(catalog_args.uri, catalog_args.warehouse, app_name=f"lake-scale-spark-{index}",
                              master="local[1]", extra_conf=DRIVER_CONF)
        for phase, ready in zip(("protocol", "plain"), barriers):
            out.put(asdict(_spark_phase(spark, phase, index, jobs, shape.roots, duration, ready)))
    except Exception:  # noqa: BLE001 - the whole process failed: one error per phase not yet reported
        for ready in barriers:
            ready.abort()
        out.put(asdict(PhaseReport(1000 + index, "protocol", kind="spark", error_count=1,
                                   errors=[f"spark writer {index}: {traceback.format_exc()[-600:]}"])))
    finally:
        if spark is not None:
            _exit_jvm(spark)


def hot_root_process(catalog_args: CatalogArgs, root: str, writer: int, seconds: float, barriers: tuple[Any, Any],
                     out: Any) -> None:
    """One writer of the hot-root run: keyed ingests into ``scale.<root>`` for ``seconds``, then plain appends into
    ``plain.<root>`` for as long."""
    logging.getLogger("pyiceberg").setLevel(logging.ERROR)
    from consistent_catalog import ConsistentCatalog

    catalog = catalog_args.open()
    cc = ConsistentCatalog(catalog)
    try:  # untimed: each kind's first call in a process pays its imports and first loads (32 at once on 2 cores)
        cc.ingest(qualified(PROTOCOL_NS, root), ingest_batch(writer, 9_999, 1), key=f"hot-w{writer}-warm")
        catalog.load_table(qualified(PLAIN_NS, root)).append(ingest_batch(writer, 9_999, 1))
    except Exception:  # noqa: BLE001 - a warm-up refused under contention warms as well
        pass
    for phase, ready in zip(("protocol", "plain"), barriers):
        report = PhaseReport(writer, phase)
        ready.wait(600)
        t0 = time.perf_counter()
        seq = 0
        while time.perf_counter() < t0 + seconds:
            started = time.perf_counter()
            try:
                if phase == "protocol":
                    cc.ingest(qualified(PROTOCOL_NS, root), ingest_batch(writer, 10_000 + seq, 1), key=f"hot-w{writer}-{seq}")
                else:
                    catalog.load_table(qualified(PLAIN_NS, root)).append(ingest_batch(writer, 10_000 + seq, 1))
            except Exception as exc:  # noqa: BLE001 - counted
                report.error(f"hot {phase} ingest", exc)
            else:
                if time.perf_counter() <= t0 + seconds:
                    report.ingests += 1
                    report.ingest_seconds.append(time.perf_counter() - started)
            seq += 1
        out.put(asdict(report))


def run_hot_root(catalog_args: CatalogArgs, root: str, writers: int, seconds: float,
                 timeout: float = 600) -> dict[str, Any]:
    """``writers`` processes ingesting into one root at once: the protocol's keyed ingests, then plain appends."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    barriers = (ctx.Barrier(writers + 1), ctx.Barrier(writers + 1))
    procs = [ctx.Process(target=hot_root_process, args=(catalog_args, root, w, seconds, barriers, out))
             for w in range(writers)]
    for p in procs:
        p.start()
    reports: list[dict[str, Any]] = []
    try:
        for ready in barriers:
            ready.wait(timeout)
            while len(reports) < writers * (1 + barriers.index(ready)):
                reports.append(out.get(timeout=timeout))
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.terminate()
    figures: dict[str, Any] = {}
    for phase in ("protocol", "plain"):
        mine = [r for r in reports if r["phase"] == phase]
        figures[phase] = {"rate": sum(r["ingests"] for r in mine) / seconds,
                          "ms": [v * 1000 for r in mine for v in r["ingest_seconds"]],
                          "errors": sum(r["error_count"] for r in mine),
                          "error_lines": [e for r in mine for e in r["errors"]][:3]}
    return figures


# --- the reader process ---------------------------------------------------------------------------------
def reader_process(catalog_args: CatalogArgs, raw_shape: dict, check_every: int, ready: Any, stop: Any,
                   out: Any) -> None:
    """Cold and warm resolves of the deepest table and of all tables, ``status`` of all, checks of cuts."""
    logging.getLogger("pyiceberg").setLevel(logging.ERROR)
    from consistent_catalog import ConsistentCatalog
    from consistent_catalog.exceptions import NotFreshError, NoWatermarkError, ResolutionError
    from consistent_catalog.loading import SHARED_CACHE

    shape = LakeShape.from_dict(raw_shape)
    times: dict[str, list[float]] = {k: [] for k in ("deep cold", "deep warm", "component cold", "component warm",
                                                     "all cold", "all warm", "status", "wait")}
    cpu: dict[str, list[float]] = {k: [] for k in times}
    """The reader's own CPU time per read (``time.process_time``): under N writers on 2 cores a read's wall time is
    mostly waiting for a core; its CPU time is what the code costs, apart from that wait."""
    freshness: dict[str, list[float]] = {}
    own: dict[str, list[float]] = {}
    """Per job: W(slowest source) - W(its sink), the job's own share of the delay."""
    errors: list[str] = []
    error_count, not_yet, cuts_checked = 0, 0, 0
    why: Counter[str] = Counter()
    why_lines: list[str] = []
    problems: list[str] = []
    catalog = catalog_args.open()
    warm = ConsistentCatalog(catalog)
    everything = [qualified(PROTOCOL_NS, t) for t in shape.tables]
    deep = [qualified(PROTOCOL_NS, shape.deepest())]
    sink_of_job = {j.name: qualified(PROTOCOL_NS, j.sinks[0]) for j in shape.jobs}
    ready.wait(600)
    round_no = 0
    while not stop.is_set():
        round_no += 1
        for label, tables in (("deep", deep), ("component", deep), ("all", everything)):
            for kind, cc in (("cold", ConsistentCatalog(catalog)), ("warm", warm)):
                if kind == "cold":
                    SHARED_CACHE.clear()  # metadata files parsed before are parsed again: a new process's first cut
                started, cpu_started = time.perf_counter(), time.process_time()
                try:
                    cut = cc.resolve(tables, component=label == "component")
                except (NoWatermarkError, ResolutionError) as exc:
                    not_yet += 1  # a table without an epoch yet: no cut, not an error
                    why[f"{label}: {type(exc).__name__}"] += 1
                    if len(why_lines) < 3 and round_no > 20:
                        why_lines.append(f"round {round_no} {label} {kind}: {str(exc)[:300]}")
                    continue
                except Exception as exc:  # noqa: BLE001
                    error_count += 1
                    if len(errors) < 5:
                        errors.append(f"reader resolve {label} {kind}: {type(exc).__name__}: {str(exc)[:300]}")
                    continue
                times[f"{label} {kind}"].append(time.perf_counter() - started)
                cpu[f"{label} {kind}"].append(time.process_time() - cpu_started)
                if label == "all" and kind == "warm" and check_every and (len(times["all warm"]) % check_every == 1
                                                                          or check_every == 1):
                    problems += recount_problems(catalog, shape, cut)
                    cuts_checked += 1
        started, cpu_started = time.perf_counter(), time.process_time()
        try:
            rows = warm.status(everything)
        except Exception as exc:  # noqa: BLE001
            error_count += 1
            if len(errors) < 5:
                errors.append(f"reader status: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        times["status"].append(time.perf_counter() - started)
        cpu["status"].append(time.process_time() - cpu_started)
        started, cpu_started = time.perf_counter(), time.process_time()
        try:  # a scheduler's poll (an Airflow sensor): is the deepest table's cut within a minute of now?
            warm.wait_for(deep, fresher_than="1m", timeout=0)
        except NotFreshError:
            pass  # measured and answered "not yet": what the poll is for
        except (NoWatermarkError, ResolutionError):
            not_yet += 1
        except Exception as exc:  # noqa: BLE001
            error_count += 1
            if len(errors) < 5:
                errors.append(f"reader wait: {type(exc).__name__}: {str(exc)[:300]}")
        times["wait"].append(time.perf_counter() - started)
        cpu["wait"].append(time.process_time() - cpu_started)
        by_table = {r.table: r for r in rows}
        for job, sink in sink_of_job.items():
            found = by_table.get(sink)
            if found is not None and found.delay_ms is not None:
                freshness.setdefault(job, []).append(found.delay_ms / 1000)
            if found is not None and found.own_delay_ms is not None:
                own.setdefault(job, []).append(found.own_delay_ms / 1000)
    out.put({"times": times, "cpu": cpu, "freshness": freshness, "own": own, "errors": errors, "error_count": error_count,
             "not_yet": not_yet, "cuts_checked": cuts_checked, "problems": problems[:20],
             "problem_count": len(problems), "rounds": round_no, "not_yet_why": dict(why), "not_yet_lines": why_lines})


# --- the checks -----------------------------------------------------------------------------------------
def recount_problems(catalog: Any, shape: LakeShape, cut: Any, namespace: str = PROTOCOL_NS) -> list[str]:
    """Is ``cut`` (of any tables of the lake) consistent? Every derived table at its cut snapshot must hold, per root
    upstream of it, exactly the rows that root holds at the cut, recounted by scanning the root with plain pyiceberg
    (another client's loads: nothing of the project is asked)."""
    ups = shape.upstream_roots()
    in_cut = {name.split(".", 1)[1]: part.snapshot_id for name, part in cut.tables.items()}
    roots_needed = {r for t in in_cut for r in ups[t]}
    counts: dict[str, int] = {}
    problems: list[str] = []
    for root in sorted(roots_needed):
        if root in in_cut:
            snapshot_id = in_cut[root]
        else:  # a root outside the cut: count it at snap(root, T*) of the cut's barrier, computed here
            snapshot_id = snapshot_at_barrier(catalog.load_table(qualified(namespace, root)).metadata, cut.barrier)
        counts[root] = (0 if snapshot_id is None else
                        catalog.load_table(qualified(namespace, root)).scan(snapshot_id=snapshot_id).to_arrow().num_rows)
    for table, snapshot_id in sorted(in_cut.items()):
        if table in shape.roots:
            continue
        got: dict[str, int] = {}
        if snapshot_id is not None:
            data = catalog.load_table(qualified(namespace, table)).scan(snapshot_id=snapshot_id).to_arrow()
            got = dict(zip(data["root"].to_pylist(), data["n"].to_pylist()))
        expected = {r: counts[r] for r in ups[table]}
        nonzero = {r: n for r, n in expected.items() if n}
        if {r: n for r, n in got.items() if n} != nonzero:
            diff = {r: (got.get(r), expected[r]) for r in expected if got.get(r, 0) != expected[r]}
            problems.append(f"cut at {cut.barrier}: {table}@{snapshot_id} disagrees with its roots' rows at the cut "
                            f"(found, recounted): {dict(list(diff.items())[:3])}")
    return problems


def snapshot_at_barrier(metadata: Any, barrier: int | None) -> int | None:
    """snap(root, T) on main by raw barriers (``tests/harness/main_epochs.snapshot_at``)."""
    from tests.harness.main_epochs import snapshot_at

    return None if barrier is None else snapshot_at(metadata, barrier)


def exactly_once(catalog: Any, shape: LakeShape, keys: Iterable[tuple[str, str]]) -> tuple[int, list[str]]:
    """(epochs checked, problems): each sink's barriers once on main from one attempt; each landed ingest key on its
    root's main once, and no key that no writer reported."""
    from tests.harness.main_epochs import exactly_once_problems, main_epochs, main_history

    from consistent_catalog import properties as P

    problems: list[str] = []
    epochs = 0
    for sink in shape.derived:
        metadata = catalog.load_table(qualified(PROTOCOL_NS, sink)).metadata
        problems += exactly_once_problems(sink, metadata)
        epochs += len(main_epochs(metadata)[0])
    reported: dict[str, Counter[str]] = {}
    for root, key in keys:
        reported.setdefault(root, Counter())[key] += 1
    for root in shape.roots:
        name = qualified(PROTOCOL_NS, root)
        history = main_history(catalog.load_table(name).metadata)
        on_main = Counter(k for s in history if (k := (s.summary.additional_properties if s.summary else {})
                                                 .get(P.INGEST_KEY)) is not None)
        want = reported.get(name, Counter())
        for key in set(on_main) | set(want):
            if on_main[key] != 1 or want[key] != 1:
                problems.append(f"{name}: ingest key {key} is on main {on_main[key]} times, reported landed "
                                f"{want[key]} times")
    return epochs, problems


def catalog_commits(catalog: Any, namespace: str, tables: Iterable[str]) -> int:
    """Catalog commits over the tables' lives, creation excluded: the version number in each table's current
    metadata file name (``00042-<uuid>.metadata.json``: pyiceberg numbers them one up per commit), read with one
    query of the catalog's own table (``metadata_log`` would not do: pyiceberg keeps only its last 100 entries)."""
    import sqlalchemy

    wanted = set(tables)
    with catalog.engine.connect() as con:
        rows = con.execute(sqlalchemy.text(
            'SELECT "table_name", "metadata_location" FROM "iceberg_tables" WHERE "table_namespace" = :ns'),
            {"ns": namespace}).all()
    return sum(int(location.rsplit("/", 1)[1].split("-", 1)[0]) for name, location in rows if name in wanted)


class ConnectionSampler(threading.Thread):
    """Every second: the PostgreSQL connections to the run's database (``pg_stat_activity``) and the load."""

    def __init__(self, uri: str | None) -> None:
        super().__init__(daemon=True)
        self.uri = uri
        self.samples: list[tuple[float, int, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        engine = None
        if self.uri is not None:
            import sqlalchemy

            engine = sqlalchemy.create_engine(self.uri, poolclass=sqlalchemy.pool.NullPool)
        while not self.stop.is_set():
            count = -1
            if engine is not None:
                with engine.connect() as con:
                    count = con.execute(sqlalchemy.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")).scalar_one() - 1
            self.samples.append((time.time(), count, load()))
            self.stop.wait(1.0)
        if engine is not None:
            engine.dispose()


# --- one run ----------------------------------------------------------------------------------------------
def seed_roots(catalog_args: CatalogArgs, shape: LakeShape, *, plain: bool = True) -> list[tuple[str, str]]:
    """One batch in every root of both copies (keyed in ``scale``), so the warm-up's epochs have data to read;
    returns the (root, key) pairs that landed."""
    from consistent_catalog import ConsistentCatalog

    catalog = catalog_args.open()
    cc = ConsistentCatalog(catalog)
    landed = []
    for i, root in enumerate(shape.roots):
        batch = ingest_batch(-1, i, 5)
        cc.ingest(qualified(PROTOCOL_NS, root), batch, key=f"seed-{root}")
        if plain:
            catalog.load_table(qualified(PLAIN_NS, root)).append(batch)
        landed.append((qualified(PROTOCOL_NS, root), f"seed-{root}"))
    return landed


def run_lake(catalog_args: CatalogArgs, shape: LakeShape, *, writers: int, duration: float, ingest_every: int = 3,
             rows: int = 5, seed: int = 45, check_every: int = 10, pg: bool = False, plain: bool = True,
             spark_writers: int = 0, spark_jobs_each: int = 3, warmup: bool = True, expire_every: int = 0,
             timeout: float = 1800) -> dict[str, Any]:
    """One run at ``writers`` writers: the protocol phase, then (``plain``) the plain one; the tables must exist
    (``create_lake``)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    reader_out = ctx.Queue()
    stop = ctx.Event()
    seeded = seed_roots(catalog_args, shape, plain=plain) if warmup else []
    on_spark = spark_jobs(shape, spark_writers, spark_jobs_each) if spark_writers else []
    taken = [j.name for jobs in on_spark for j in jobs]
    processes = writers + spark_writers
    ready = ctx.Barrier(processes + 2)  # the writers, the reader and this process: the protocol phase starts together
    plain_ready = ctx.Barrier(processes + 1)  # the plain phase starts once every writer ended the protocol phase
    barriers = (ready, plain_ready) if plain else (ready,)
    raw = shape.to_dict()
    procs = [ctx.Process(target=writer_process, args=(catalog_args, raw, w, writers, duration, ingest_every, rows,
                                                      seed, barriers, out, taken, warmup, expire_every))
             for w in range(writers)]
    procs += [ctx.Process(target=spark_writer_process, args=(catalog_args, raw, i, [j.name for j in jobs], duration,
                                                             barriers, out)) for i, jobs in enumerate(on_spark)]
    reader = ctx.Process(target=reader_process, args=(catalog_args, raw, check_every, ready, stop, reader_out))
    sampler = ConnectionSampler(catalog_args.uri if pg else None)
    for p in [*procs, reader]:
        p.start()
    reports: list[dict[str, Any]] = []
    phases: dict[str, tuple[float, float]] = {}
    try:
        ready.wait(timeout)  # every writer registered its jobs
        sampler.start()
        phases["protocol"] = (time.time(), 0.0)
        while len(reports) < processes:
            reports.append(out.get(timeout=timeout))
        stop.set()
        reader_report = reader_out.get(timeout=timeout)
        phases["protocol"] = (phases["protocol"][0], time.time())
        reader.join(60)
        if plain:
            plain_ready.wait(timeout)
            phases["plain"] = (time.time(), 0.0)
            while len(reports) < 2 * processes:
                reports.append(out.get(timeout=timeout))
            phases["plain"] = (phases["plain"][0], time.time())
    except (queue.Empty, threading.BrokenBarrierError):
        raise RuntimeError(f"the writers did not finish within {timeout}s; reports so far: {reports}") from None
    finally:
        stop.set()
        sampler.stop.set()
        for p in [*procs, reader]:
            p.join(30)
            if p.is_alive():
                p.terminate()
    return {"reports": reports, "reader": reader_report, "phases": phases, "connections": sampler.samples,
            "spark_jobs": taken, "seeded": seeded}


def final_checks(catalog_args: CatalogArgs, shape: LakeShape, keys: Iterable[tuple[str, str]], *,
                 plain: bool = True) -> dict[str, Any]:
    """After the run, through a client of its own: exactly once, and the cut of all tables recounted."""
    from consistent_catalog import ConsistentCatalog
    from consistent_catalog.exceptions import NoWatermarkError, ResolutionError

    catalog = catalog_args.open()
    epochs, problems = exactly_once(catalog, shape, keys)
    try:
        cut = ConsistentCatalog(catalog).resolve([qualified(PROTOCOL_NS, t) for t in shape.tables])
    except (NoWatermarkError, ResolutionError) as exc:  # some job never ran: recount the deepest table's cut
        problems.append(f"no cut of all tables after the run ({type(exc).__name__}: {str(exc)[:200]})")
        cut = None
    if cut is not None:
        problems += recount_problems(catalog, shape, cut)
    return {"epochs_checked": epochs, "problems": problems, "final_barrier": None if cut is None else cut.barrier,
            "protocol_commits": catalog_commits(catalog, PROTOCOL_NS, shape.tables),
            "plain_commits": catalog_commits(catalog, PLAIN_NS, shape.tables) if plain else 0}


def summarise(run: dict[str, Any], checks: dict[str, Any], shape: LakeShape, duration: float) -> dict[str, Any]:
    """The figures of one run (see the module docstring)."""
    by_phase: dict[str, list[dict[str, Any]]] = {"protocol": [], "plain": []}
    for report in run["reports"]:
        by_phase[report["phase"]].append(report)
    figures: dict[str, Any] = {}
    for phase, reports in by_phase.items():
        figures[phase] = {k: sum(r[k] for r in reports) / duration for k in ("ingests", "epochs", "noops", "sink_commits")}
        figures[phase]["commits"] = figures[phase]["ingests"] + figures[phase]["sink_commits"]
        figures[phase]["ingest_ms"] = [s * 1000 for r in reports for s in r["ingest_seconds"]]
        per_job: dict[str, list[float]] = {}
        for r in reports:
            for job, values in r["epoch_seconds"].items():
                per_job.setdefault(job, []).extend(values)
        figures[phase]["epoch_s"] = {job: statistics.median(v) for job, v in per_job.items()}
        figures[phase]["errors"] = sum(r["error_count"] for r in reports)
        figures[phase]["error_lines"] = [line for r in reports for line in r["errors"]][:5]
        figures[phase]["inconsistent"] = [line for r in reports for line in r["inconsistent"]]
        spark = [r for r in reports if r["kind"] == "spark"]
        figures[phase]["spark_sinks"] = sum(r["sink_commits"] for r in spark) / duration
        figures[phase]["spark_statement_s"] = [v for r in spark for vs in r["epoch_seconds"].values() for v in vs]
    figures["spark_writers"] = sum(1 for r in by_phase["protocol"] if r["kind"] == "spark")
    figures["setup_s"] = max((r["setup_seconds"] for r in by_phase["protocol"]), default=0.0)
    figures["warmup_s"] = max((r.get("warmup_seconds", 0.0) for r in by_phase["protocol"]), default=0.0)
    reader = run["reader"]
    figures["reader"] = reader
    fresh = {job: (statistics.median(v), quantile(v, 0.95)) for job, v in reader["freshness"].items() if v}
    figures["freshness"] = fresh
    epoch_s = figures["protocol"]["epoch_s"]
    figures["fresh_within"] = sum(1 for job, (_, p95) in fresh.items() if job in epoch_s and p95 <= 2 * epoch_s[job])
    runs: Counter[str] = Counter()
    for r in by_phase["protocol"]:
        for job, values in r["epoch_seconds"].items():
            runs[job] += len(values)
    period = {job: duration / n for job, n in runs.items()}  # seconds between a job's epochs that did work
    own = {job: quantile(v, 0.95) for job, v in reader.get("own", {}).items() if v}
    figures["own_p95"] = own
    figures["period"] = period
    figures["own_within"] = sum(1 for job, p95 in own.items() if job in period and p95 <= 2 * period[job])
    for phase in by_phase:
        figures[phase].update(connections=(None, None), load=("-", "-"), wall=0.0)
    for phase, (start, end) in run["phases"].items():
        counts = [c for t, c, _ in run["connections"] if start <= t <= end and c >= 0]
        loads = [lo for t, _, lo in run["connections"] if start <= t <= end]
        figures[phase]["connections"] = (max(counts) if counts else None, statistics.median(counts) if counts else None)
        figures[phase]["load"] = (loads[0], loads[-1]) if loads else ("-", "-")
        figures[phase]["wall"] = end - start
    figures["checks"] = checks
    figures["errors"] = figures["protocol"]["errors"] + figures["plain"]["errors"] + reader["error_count"]
    return figures


def _ms(values: Sequence[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} / {quantile(values, 0.95) * 1000:.0f}" if values else "-"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b else "-"


def print_results(results: dict[int, dict[str, Any]], shape: LakeShape, args: argparse.Namespace,
                  command: str, load_start: str) -> None:
    levels = shape.depth()
    fan_in = [len(j.sources) for j in shape.jobs]
    deep = shape.deepest()
    print(f"`{command}` on {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average at the start {load_start}, at the end {load()}")
    print()
    print(f"Lake: {len(shape.tables)} tables ({len(shape.roots)} roots), {len(shape.jobs)} jobs "
          f"(sinks per job {min(len(j.sinks) for j in shape.jobs)}-{max(len(j.sinks) for j in shape.jobs)}), "
          f"depth {max(levels.values())}, fan-in {min(fan_in)}-{max(fan_in)} (median {statistics.median(fan_in):.0f}); "
          f"backend {args.backend}; each phase {args.duration:.0f} s; every {args.ingest_every}th operation an ingest "
          f"of {args.rows} rows into a random root, the others a job's epoch; deepest table {deep} "
          f"(depth {levels[deep]}, upstream closure of {len(upstream_closure(shape, deep))} tables).")
    print()
    cols = list(results)
    print("| writers | " + " | ".join(str(n) for n in cols) + " |")
    print("|---|" + "---:|" * len(cols))

    def row(label: str, fn: Any) -> None:
        print(f"| {label} | " + " | ".join(fn(results[n]) for n in cols) + " |")

    row("ingests/s: protocol / plain appends", lambda f: f"{f['protocol']['ingests']:.1f} / {f['plain']['ingests']:.1f} "
        f"({_ratio(f['protocol']['ingests'], f['plain']['ingests'])})")
    row("epochs/s: protocol / plain jobs that overwrote", lambda f: f"{f['protocol']['epochs']:.1f} / "
        f"{f['plain']['epochs']:.1f} ({_ratio(f['protocol']['epochs'], f['plain']['epochs'])})")
    row("sinks written/s: protocol / plain", lambda f: f"{f['protocol']['sink_commits']:.1f} / "
        f"{f['plain']['sink_commits']:.1f} ({_ratio(f['protocol']['sink_commits'], f['plain']['sink_commits'])})")
    row("**commit rate** (ingests + sinks)/s: protocol / plain", lambda f: f"**{f['protocol']['commits']:.1f} / "
        f"{f['plain']['commits']:.1f} ({_ratio(f['protocol']['commits'], f['plain']['commits'])})**")
    if any(f["spark_writers"] for f in results.values()):
        row("of which Spark SQL sinks/s: protocol / plain", lambda f: f"{f['protocol']['spark_sinks']:.2f} / "
            f"{f['plain']['spark_sinks']:.2f} ({_ratio(f['protocol']['spark_sinks'], f['plain']['spark_sinks'])})")
        row("Spark SQL statement s median: protocol / plain", lambda f: f"{_med(f['protocol']['spark_statement_s']):.2f}"
            f" / {_med(f['plain']['spark_statement_s']):.2f}")
    row("no-op epochs/s: protocol / plain", lambda f: f"{f['protocol']['noops']:.1f} / {f['plain']['noops']:.1f}")
    row("catalog commits (metadata files): protocol / plain", lambda f: f"{f['checks']['protocol_commits']} / "
        f"{f['checks']['plain_commits']}")
    row("ingest ms median / p95: protocol / plain", lambda f: f"{_q(f['protocol']['ingest_ms'])} / "
        f"{_q(f['plain']['ingest_ms'])}")
    row("epoch s, median over jobs: protocol / plain", lambda f: f"{_med(f['protocol']['epoch_s'].values()):.2f} / "
        f"{_med(f['plain']['epoch_s'].values()):.2f}")
    row("freshness s (now − W), median over jobs of median / p95", lambda f: f"{_med(m for m, _ in f['freshness'].values()):.1f} / "
        f"{_med(p for _, p in f['freshness'].values()):.1f}")
    row("freshness p95, worst job (s)", lambda f: f"{max((p for _, p in f['freshness'].values()), default=float('nan')):.1f}")
    row("jobs with freshness p95 ≤ 2× own epoch time", lambda f: f"{f['fresh_within']}/{len(shape.jobs)}")
    row("own delay s (W(slowest source) − W(sink)) p95, median over jobs", lambda f: f"{_med(f['own_p95'].values()):.1f}")
    row("seconds between a job's epochs, median over jobs", lambda f: f"{_med(f['period'].values()):.1f}")
    row("jobs with own delay p95 ≤ 2× the time between their epochs", lambda f: f"{f['own_within']}/{len(shape.jobs)}")
    names = {"deep": "the deepest table (its upstream)", "component": "the deepest table's component (§4.7)",
             "all": "all tables"}
    for key in ("deep cold", "deep warm", "component cold", "component warm", "all cold", "all warm", "status", "wait"):
        label = ("status of all tables" if key == "status" else "a `wait` poll of the deepest table (timeout 0)"
                 if key == "wait" else f"resolve {names[key.split()[0]]}, {key.split()[1]},")
        row(f"{label} ms median / p95", lambda f, key=key: _ms(f["reader"]["times"][key]))
        row(f"{label} the reader's CPU ms median / p95", lambda f, key=key: _ms(f["reader"]["cpu"][key]))
    row("reader rounds (cuts not yet resolvable)", lambda f: f"{f['reader']['rounds']} ({f['reader']['not_yet']})")
    row("registering the jobs / warm-up to a first epoch (s, slowest writer)", lambda f: f"{f['setup_s']:.1f} / "
        f"{f['warmup_s']:.1f}")
    row("catalog connections peak / median: protocol / plain", lambda f: f"{_conn(f['protocol'])} / {_conn(f['plain'])}")
    row("load average (1 min) start → end: protocol / plain", lambda f: f"{_load(f['protocol'])} / {_load(f['plain'])}")
    if args.hot_root:
        row(f"hot root: all writers ingest into {shape.roots[0]}, ingests/s: protocol / plain", lambda f:
            f"{f['hot']['protocol']['rate']:.1f} / {f['hot']['plain']['rate']:.1f} "
            f"({_ratio(f['hot']['protocol']['rate'], f['hot']['plain']['rate'])})")
        row("hot root ingest ms median/p95: protocol / plain", lambda f: f"{_q(f['hot']['protocol']['ms'])} / "
            f"{_q(f['hot']['plain']['ms'])}")
    row("**errors**", lambda f: f"**{f['errors']}**")
    row("epochs checked once / problems", lambda f: f"{f['checks']['epochs_checked']} / {len(f['checks']['problems'])}")
    row("cuts recounted (during + after) / inconsistent", lambda f: f"{f['reader']['cuts_checked']} + "
        f"{1 if f['checks']['final_barrier'] is not None else 0} / {f['reader']['problem_count']}")
    row("epochs that read inconsistent inputs", lambda f: str(len(f['protocol']['inconsistent'])))
    for n in cols:
        f = results[n]
        for line in [*f["protocol"]["error_lines"], *f["plain"]["error_lines"], *f["reader"]["errors"],
                     *f["checks"]["problems"][:5], *f["reader"]["problems"][:3], *f["protocol"]["inconsistent"][:3],
                     *[e for p in ("protocol", "plain") for e in f.get("hot", {}).get(p, {}).get("error_lines", [])]]:
            print(f"- {n} writers: {line}")


def _q(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.0f}/{quantile(values, 0.95):.0f}" if values else "-"


def _med(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def _conn(phase: Mapping[str, Any]) -> str:
    peak, median = phase["connections"]
    return "-" if peak is None else f"{peak}/{median:.0f}"


def _load(phase: Mapping[str, Any]) -> str:
    start, end = phase["load"]
    return f"{str(start).split()[0]}→{str(end).split()[0]}"


def upstream_closure(shape: LakeShape, table: str) -> set[str]:
    sources = shape.sources_of()
    found, stack = {table}, [table]
    while stack:
        for source in sources.get(stack.pop(), ()):
            if source not in found:
                found.add(source)
                stack.append(source)
    return found


# --- reads alone (--reads-only): the reader's figures on a quiet lake, A/B against another checkout ----------
READ_OPS = ("deep warm", "component warm", "all warm", "status", "status listed")
"""What ``measure_reads`` times: warm cuts of the deepest table, of its component (§4.7) and of all tables;
``status`` of all tables named, and of the catalog's listing (``status()`` with no tables, the CLI's default)."""


def build_read_lake(catalog_args: CatalogArgs, shape: LakeShape, epochs: int = 1) -> float:
    """The protocol's copy of the lake: ``epochs`` rounds of one batch into every root then one epoch of every job (in
    layer order, so every table has a watermark and an aged history); returns the seconds it took."""
    from consistent_catalog import ConsistentCatalog

    started = time.perf_counter()
    create_lake(catalog_args, shape, plain=False)
    seed_roots(catalog_args, shape, plain=False)
    cc = ConsistentCatalog(catalog_args.open())
    inconsistent: list[str] = []
    jobs = []
    for spec in shape.jobs:
        job = cc.job(spec.name, sources=[qualified(PROTOCOL_NS, s) for s in spec.sources],
                     sinks=[qualified(PROTOCOL_NS, s) for s in spec.sinks],
                     transform=CountRoots(PROTOCOL_NS, shape.roots, spec.sinks, inconsistent), mode="overwrite",
                     version=VERSION)
        job.register()
        jobs.append(job)
    for round_no in range(epochs):
        if round_no:
            for i, root in enumerate(shape.roots):
                cc.ingest(qualified(PROTOCOL_NS, root), ingest_batch(-1, round_no * 1000 + i, 5), key=f"round{round_no}-{root}")
        worked = sum(job.run_epoch().did_work for job in jobs)
        print(f"building the lake: round {round_no + 1}, {worked} of {len(jobs)} epochs did work", file=sys.stderr)
    for job in jobs:
        job.unregister()
    if inconsistent:
        raise RuntimeError(f"building the lake: {inconsistent[:3]}")
    return time.perf_counter() - started


def measure_reads(catalog_args: CatalogArgs, shape: LakeShape, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Seconds of each of ``READ_OPS`` over ``rounds`` rounds, in this process, after one untimed round (warm: the
    process's state cache and the loader's guesses filled): ``wall`` (what a caller waits) and ``cpu`` (this process's
    CPU time: on a shared machine, the work done, apart from the waits for a core)."""
    logging.getLogger("pyiceberg").setLevel(logging.ERROR)
    from consistent_catalog import ConsistentCatalog

    cc = ConsistentCatalog(catalog_args.open())
    everything = [qualified(PROTOCOL_NS, t) for t in shape.tables]
    deep = [qualified(PROTOCOL_NS, shape.deepest())]
    calls = {"deep warm": lambda: cc.resolve(deep), "component warm": lambda: cc.resolve(deep, component=True),
             "all warm": lambda: cc.resolve(everything), "status": lambda: cc.status(everything),
             "status listed": lambda: cc.status()}
    times: dict[str, dict[str, list[float]]] = {"wall": {op: [] for op in READ_OPS}, "cpu": {op: [] for op in READ_OPS}}
    for round_no in range(rounds + 1):
        for op, call in calls.items():
            started, cpu = time.perf_counter(), time.process_time()
            call()
            if round_no:
                times["wall"][op].append(time.perf_counter() - started)
                times["cpu"][op].append(time.process_time() - cpu)
    return times


def run_reads(args: argparse.Namespace, shape: LakeShape, command: str) -> None:
    """``--reads-only``: build the lake once, then time the reads in ``--read-runs`` fresh processes per code
    version (this checkout's, and with ``--compare-with SRC`` the one under ``SRC`` by ``PYTHONPATH``), back to back."""
    import json
    import subprocess

    pg = None
    try:
        if args.backend == "postgres":
            from tests.harness.servers import PostgresServer

            pg = PostgresServer.start(fast=False, max_connections=args.max_connections)
        with tempfile.TemporaryDirectory(prefix="bench-lake-reads-") as scratch:
            tmp = args.lake or scratch
            reuse = pg is None and (Path(tmp) / "catalog.db").exists()
            (Path(tmp) / "warehouse").mkdir(parents=True, exist_ok=True)
            uri = pg.uri(pg.create_database()) if pg is not None else f"sqlite:///{tmp}/catalog.db"
            catalog_args = CatalogArgs(uri, f"file://{tmp}/warehouse")
            if not reuse:
                built = build_read_lake(catalog_args, shape, args.read_epochs)
                print(f"lake of {len(shape.tables)} tables built in {built:.0f}s", file=sys.stderr)
            variants = {"this checkout": None}
            if args.compare_with:
                variants[f"PYTHONPATH={args.compare_with}"] = str(Path(args.compare_with).resolve())
            results = {name: {clock: {op: [] for op in READ_OPS} for clock in ("wall", "cpu")} for name in variants}
            loads = []
            for _ in range(args.read_runs):
                for name, path in variants.items():
                    env = dict(os.environ)
                    if path is not None:
                        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
                    measured = subprocess.run(
                        [sys.executable, "-m", "bench.bench_lake_scale", "--measure-reads", uri, f"file://{tmp}/warehouse",
                         "--tables", str(args.tables), "--jobs", str(args.jobs), "--depth", str(args.depth),
                         "--max-fan-in", str(args.max_fan_in), "--seed", str(args.seed), "--read-rounds",
                         str(args.read_rounds)], env=env, check=True, capture_output=True, text=True)
                    answer = json.loads(measured.stdout.splitlines()[-1])
                    if path is not None and not answer["module"].startswith(path):
                        raise RuntimeError(f"--compare-with {path}: the process imported {answer['module']}")
                    for clock, ops in answer["times"].items():
                        for op, values in ops.items():
                            results[name][clock][op] += values
                    loads.append(os.getloadavg()[0])
    finally:
        if pg is not None:
            pg.stop()
    print(f"`{command}`\n")
    print(f"{len(shape.tables)} tables, {len(shape.jobs)} jobs, {args.backend}; {args.read_runs} processes per version "
          f"x {args.read_rounds} rounds, alternating; load (1 min) {min(loads):.1f}-{max(loads):.1f}\n")
    print("| ms: wall median / p95 (CPU median) | " + " | ".join(variants) + " |")
    print("|---|" + "---:|" * len(variants))
    for op in READ_OPS:
        print(f"| {op} | " + " | ".join(f"{_ms(results[name]['wall'][op])} ({statistics.median(results[name]['cpu'][op]) * 1000:.0f})"
                                         for name in variants) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--writers", default="1,8,32", help="writer process counts, one run each")
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of each phase (protocol, plain)")
    parser.add_argument("--ingest-every", type=int, default=3, help="every Nth operation of a writer is an ingest")
    parser.add_argument("--rows", type=int, default=5, help="rows per ingest")
    parser.add_argument("--depth", type=int, default=7)
    parser.add_argument("--max-fan-in", type=int, default=10)
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--check-every", type=int, default=10, help="recount every Nth warm cut of all tables (0: none)")
    parser.add_argument("--max-connections", type=int, default=300, help="PostgreSQL's max_connections")
    parser.add_argument("--spark-writers", type=int, default=0,
                        help="PySpark drivers running SQL epochs through lake_consistent (PostgreSQL only)")
    parser.add_argument("--spark-jobs-each", type=int, default=3, help="jobs each Spark writer runs (from layer 2)")
    parser.add_argument("--expire-every", type=int, default=0, metavar="K",
                        help="every Python job expires its sinks every K published epochs (EpochJob's expire_every, cut-aware "
                             f"retention of snapshots older than {EXPIRE_OLDER_THAN}, the newest 2 kept; default 0: never), "
                             "so expiry commits go on meanwhile")
    parser.add_argument("--no-warmup", action="store_true",
                        help="start timing at once (default: one batch in every root, then each writer brings its jobs "
                             "to a first epoch before the timed phase)")
    parser.add_argument("--hot-root", type=float, default=0.0, metavar="SECONDS",
                        help="after each run, every writer ingests into one root for SECONDS (protocol, then plain)")
    parser.add_argument("--hot-root-only", action="store_true",
                        help="run only the hot-root part (--hot-root seconds, 10 by default) on a small lake")
    parser.add_argument("--reads-only", action="store_true",
                        help="build the lake (one epoch of every job), then time only the reads: warm cuts and status, "
                             "in --read-runs fresh processes of --read-rounds rounds each, no writers")
    parser.add_argument("--read-epochs", type=int, default=3,
                        help="--reads-only: rounds of (a batch into every root, an epoch of every job) building the lake")
    parser.add_argument("--read-runs", type=int, default=5, help="--reads-only: processes per code version")
    parser.add_argument("--read-rounds", type=int, default=10, help="--reads-only: timed rounds per process")
    parser.add_argument("--compare-with", metavar="SRC",
                        help="--reads-only: also time the consistent_catalog under SRC (PYTHONPATH=SRC), alternating")
    parser.add_argument("--lake", metavar="DIR",
                        help="--reads-only, SQLite: the lake's directory, built there when it has no catalog.db yet and "
                             "kept (the same --tables/--jobs/--seed every time)")
    parser.add_argument("--measure-reads", nargs=2, metavar=("URI", "WAREHOUSE"), help=argparse.SUPPRESS)
    parser.add_argument("--markdown", action="store_true", help="(the output is always Markdown; kept for make bench-all)")
    args = parser.parse_args(argv)
    if args.spark_writers and args.backend != "postgres":
        parser.error("--spark-writers needs --backend postgres (Spark's JDBC catalog holds a SQLite catalog's lock)")
    counts = [int(x) for x in args.writers.split(",") if x.strip()]
    if not counts or min(counts) < 1:
        parser.error(f"--writers takes positive counts, e.g. 1,8,32; got {args.writers!r}")
    shape = generate(args.tables, args.jobs, depth=args.depth, max_fan_in=args.max_fan_in, seed=args.seed)
    logging.getLogger("pyiceberg").setLevel(logging.ERROR)
    if args.measure_reads:  # one process of --reads-only: its figures as one JSON line
        import json

        import consistent_catalog

        times = measure_reads(CatalogArgs(*args.measure_reads), shape, args.read_rounds)
        print(json.dumps({"module": consistent_catalog.__file__, "times": times}))
        return 0
    load_start = load()
    command = "python -m bench.bench_lake_scale " + shlex.join(argv if argv is not None else sys.argv[1:])
    if args.reads_only:
        run_reads(args, shape, command.strip())
        return 0
    pg = None
    results: dict[int, dict[str, Any]] = {}
    try:
        if args.backend == "postgres":
            from tests.harness.servers import PostgresServer

            pg = PostgresServer.start(fast=False, max_connections=args.max_connections)
        with tempfile.TemporaryDirectory(prefix="bench-lake-scale-") as tmp:
            for writers in counts:
                workdir = Path(tmp) / f"w{writers}"
                (workdir / "warehouse").mkdir(parents=True)
                uri = pg.uri(pg.create_database()) if pg is not None else f"sqlite:///{workdir}/catalog.db"
                catalog_args = CatalogArgs(uri, f"file://{workdir}/warehouse")
                created = create_lake(catalog_args, shape)
                print(f"{writers} writers: {2 * len(shape.tables)} tables created in {created:.0f}s", file=sys.stderr)
                if args.hot_root_only:
                    results[writers] = {"hot": run_hot_root(catalog_args, shape.roots[0], writers, args.hot_root or 10)}
                    continue
                run = run_lake(catalog_args, shape, writers=writers, duration=args.duration,
                               ingest_every=args.ingest_every, rows=args.rows, seed=args.seed,
                               check_every=args.check_every, pg=pg is not None, spark_writers=args.spark_writers,
                               spark_jobs_each=args.spark_jobs_each, warmup=not args.no_warmup,
                               expire_every=args.expire_every)
                keys = [*run["seeded"], *(tuple(k) for r in run["reports"] if r["phase"] == "protocol" for k in r["keys"])]
                checks = final_checks(catalog_args, shape, keys)
                results[writers] = summarise(run, checks, shape, args.duration)
                if args.hot_root:
                    results[writers]["hot"] = run_hot_root(catalog_args, shape.roots[0], writers, args.hot_root)
                    results[writers]["errors"] += sum(results[writers]["hot"][p]["errors"] for p in ("protocol", "plain"))
                print(f"{writers} writers: done, {results[writers]['errors']} errors, "
                      f"{len(checks['problems'])} problems", file=sys.stderr)
    finally:
        if pg is not None:
            pg.stop()
    if args.hot_root_only:
        print_hot_root(results, shape, command.strip())
    else:
        print_results(results, shape, args, command.strip(), load_start)
    return 0


def print_hot_root(results: Mapping[int, Mapping[str, Any]], shape: LakeShape, command: str) -> None:
    """The hot-root figures alone (``--hot-root-only``): every writer ingesting into one root."""
    print(f"`{command}`\n")
    print(f"| writers into {shape.roots[0]} | ingests/s protocol / plain | ms median/p95 protocol / plain | errors "
          "protocol / plain |")
    print("|---|---|---|---|")
    for writers, figures in results.items():
        hot = figures["hot"]
        print(f"| {writers} | {hot['protocol']['rate']:.1f} / {hot['plain']['rate']:.1f} "
              f"({_ratio(hot['protocol']['rate'], hot['plain']['rate'])}) | {_q(hot['protocol']['ms'])} / "
              f"{_q(hot['plain']['ms'])} | {hot['protocol']['errors']} / {hot['plain']['errors']} |")
    for writers, figures in results.items():
        for phase in ("protocol", "plain"):
            for line in figures["hot"][phase]["error_lines"]:
                print(f"- {writers} writers, {phase}: {line}")


if __name__ == "__main__":
    sys.exit(main())
