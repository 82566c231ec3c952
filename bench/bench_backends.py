"""Benchmark: the FLIP pipeline's commit and read costs on SQLite vs PostgreSQL vs PostgreSQL + S3, side by side.

Not a test. In one run it starts a throwaway PostgreSQL server and moto's S3 server on 127.0.0.1
(``tests/harness/servers.py``, the same code the tests use), and for each backend

  sqlite         SqlCatalog on a SQLite file, warehouse in a local directory
  postgres       SqlCatalog on PostgreSQL, warehouse in a local directory
  postgres+s3    SqlCatalog on PostgreSQL, warehouse in an S3 bucket (moto)
  rest           RestCatalog on the project's Java REST server (jvm/rest-server, started by the bench on
                 127.0.0.1: Iceberg's own CatalogHandlers over a JdbcCatalog on SQLite; one catalog per run,
                 a REST prefix of its own), warehouse in a local directory

runs ``--epochs`` epochs of the three-table pipeline with pyiceberg jobs, timing every

  ingest     ``cc.ingest(words)``: one root append commit (data file + metadata + catalog swap)
  stage      the word-count epoch's staged write on ``consistent-staged`` (data + fenced commit)
  publish    the fenced publish commit alone (main -> staged head, lease renewal): the WRITTEN step
  epoch      ``run_epoch()`` of word-count end to end (plan + read inputs + transform + stage + publish)
  resolve    ``cc.resolve(3 tables)``: cut resolution (metadata loads + the pure resolver)
  read       pyiceberg reading the three tables at the cut; ``duckdb`` the same with DuckDB

then, separately, ``--jobs`` concurrent job processes (plus 2 ingest and 2 reader processes) on a
fresh catalog of the same backend (``tests.harness.concurrent.run_concurrent_pipeline``): epochs/s is
epochs published by all jobs / wall time until every job has caught up; and ``--zombies`` zombie rounds
(``bench_zombies``): instance A stages an epoch, instance B (its own catalog client) takes over and
publishes, A publishes its stale epoch: counted as refused only when the catalog refused it and the
sink's metadata did not move (re-read through a third client), with the time the refusal took.

The ``rest`` column needs the fencing with standard Iceberg requirements (issue 13): until the project's
commits carry only ``assert-table-uuid``/``assert-ref-snapshot-id``, pyiceberg's REST client refuses its
custom requirement types before sending, and the column shows the failure instead of numbers.

PostgreSQL runs with its default durability (fsync on) here, unlike in the tests.

``--faults 0,10,25`` adds the faults table (issue 20, protocol §6.8): on the REST backend, for each
percentage of commits faulted, the pipeline of ``tests/harness/pipeline.py`` (a keyed ingest and two
chained epochs per round, ``--fault-rounds`` rounds) runs through ``tests/harness/fault_proxy.py``
(of the faulted commits: half lost after the server applied them, a fifth refused with 503, the rest
reset before or after the server saw them or answered past the 1 s client timeout). It reports
epochs/s, the p95 of an epoch (plan + stage + publish, settling included), the errors that reached
the caller (target 0) and what an independent check through a direct client found wrong (target
none). ``--faults-only`` skips everything else.

Usage:
    .venv/bin/python -m bench.bench_backends [--epochs 20] [--rows 1000] [--repeat 5] [--jobs 4]
                                             [--concurrent-epochs 10] [--zombies 10]
                                             [--backends sqlite,postgres,postgres+s3,rest] [--markdown]
                                             [--faults 0,10,25 [--fault-rounds 30] [--faults-only]]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BACKENDS = ("sqlite", "postgres", "postgres+s3", "rest")
METRICS = ("ingest", "stage", "publish", "epoch", "resolve", "read", "duckdb")


def timed(samples: dict[str, list[float]], key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            samples[key].append(time.perf_counter() - start)

    return wrapper


def make_catalog(backend: str, workdir: Path, pg: Any, s3: Any, rest: Any = None) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    workdir.mkdir(parents=True, exist_ok=True)
    if backend == "rest":  # a catalog of its own on the bench's REST server (its warehouse picks the prefix)
        return rest.catalog(warehouse=f"file://{workdir}/warehouse")
    if backend == "sqlite":
        (workdir / "warehouse").mkdir(exist_ok=True)
        return SqlCatalog("lake", uri=f"sqlite:///{workdir}/catalog.db", warehouse=f"file://{workdir}/warehouse")
    if backend == "postgres":
        (workdir / "warehouse").mkdir(exist_ok=True)
        return SqlCatalog("lake", uri=pg.uri(pg.create_database()), warehouse=f"file://{workdir}/warehouse")
    return SqlCatalog("lake", uri=pg.uri(pg.create_database()), warehouse=f"s3://{s3.create_bucket()}/warehouse",
                      **s3.properties())


def bench_pipeline(catalog: Any, epochs: int, rows: int, repeat: int) -> dict[str, list[float]]:
    from consistent_catalog import ConsistentCatalog
    from consistent_catalog.demo import (
        COUNTS,
        HISTOGRAM,
        TABLES,
        WORDS,
        count_words,
        ensure_tables,
        epoch_words,
        histogram,
    )
    from consistent_catalog.duckdb_reader import connect, read_cut_duckdb

    cc = ConsistentCatalog(catalog)
    ensure_tables(cc)
    samples: dict[str, list[float]] = {m: [] for m in METRICS}
    counter = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    hist = cc.job("count-histogram", sources=[COUNTS], sinks=[HISTOGRAM], transform=histogram, mode="overwrite")
    counter.stage = timed(samples, "stage", counter.stage)
    counter.publish = timed(samples, "publish", counter.publish)
    duck = connect(catalog.properties, s3=catalog.properties["warehouse"].startswith("s3://"))
    with counter, hist:
        for epoch in range(epochs):
            timed(samples, "ingest", cc.ingest)(WORDS, epoch_words(epoch, rows))
            timed(samples, "epoch", counter.run_epoch)()
            hist.run_epoch()
            for _ in range(repeat):
                cut = timed(samples, "resolve", cc.resolve)(TABLES)
            read = cc.read(TABLES)
            timed(samples, "read", read.to_arrow_all)()
            timed(samples, "duckdb", read_cut_duckdb)(cc, cut, connection=duck)
    duck.close()
    return samples


def bench_concurrency(catalog: Any, jobs: int, epochs: int, rows: int) -> dict[str, Any]:
    from tests.harness.concurrent import run_concurrent_pipeline
    from tests.harness.lake import catalog_spec

    if catalog_spec(catalog)["type"] == "rest":
        catalog_args: Any = catalog_spec(catalog)  # every process opens its own RestCatalog client
    else:
        properties = {k: v for k, v in catalog.properties.items() if k.startswith("s3.")}
        catalog_args = (catalog.properties["uri"], catalog.properties["warehouse"], properties)
    result = run_concurrent_pipeline(catalog_args, jobs=jobs, ingesters=2, epochs=epochs, rows_per_epoch=rows,
                                     readers=2, timeout=900)
    failures = [f"{r[0]} {r[1]}: {r[3].strip().splitlines()[-1]}" for r in result["reports"] if r[3]]
    return {"epochs": result["job_epochs"], "seconds": result["seconds"], "failures": failures,
            "reader_cuts": sum(r[2] for r in result["reports"] if r[0] == "reader")}


def bench_zombies(catalog: Any, rounds: int, rows: int) -> dict[str, Any]:
    """``rounds`` zombie publishes: A stages, B takes over and publishes, A publishes its stale epoch.

    Three clients of the one catalog (as three processes would have): A, B and an observer that re-reads
    the sink. A refusal counts only if it is a FencedError *and* the sink's metadata location and refs
    are what B left (the zombie changed nothing); anything else is listed as a failure.
    """
    from consistent_catalog import ConsistentCatalog
    from consistent_catalog.demo import COUNTS, WORDS, count_words, ensure_tables, epoch_words
    from consistent_catalog.exceptions import FencedError

    def client() -> Any:
        return type(catalog)("lake", **{k: v for k, v in catalog.properties.items() if k != "prefix"})

    cc_a, cc_b, observer = ConsistentCatalog(catalog), ConsistentCatalog(client()), client()
    ensure_tables(cc_a)
    refused, seconds, failures = 0, [], []
    for round_no in range(rounds):
        a = cc_a.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite",
                     takeover=True)
        a.register()
        cc_a.ingest(WORDS, epoch_words(round_no, rows), key=f"zombies-round-{round_no}-a")
        plan = a.plan()
        staged = a.stage(COUNTS, plan, a.run_transform(plan).get(COUNTS))
        b = cc_b.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite",
                     takeover=True)
        with b:
            cc_b.ingest(WORDS, epoch_words(1000 + round_no, rows), key=f"zombies-round-{round_no}-b")
            list(b.run_until_caught_up())  # a generator: run it to the end
            before = observer.load_table(COUNTS).metadata
            started = time.perf_counter()
            try:
                a.publish(COUNTS, plan, staged.base, staged.head)
            except FencedError:
                seconds.append(time.perf_counter() - started)
                after = observer.load_table(COUNTS).metadata
                if after.metadata_log == before.metadata_log and after.refs == before.refs:
                    refused += 1
                else:
                    failures.append(f"round {round_no}: refused, but the sink's metadata moved")
            except Exception as exc:  # noqa: BLE001 - reported in the table
                failures.append(f"round {round_no}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            else:
                failures.append(f"round {round_no}: the zombie's publish was accepted")
    return {"attempted": rounds, "refused": refused, "seconds": seconds, "failures": failures}


#: how a fault rate is split among the kinds of commit faults
FAULT_MIX = {"lost": 0.5, "refuse": 0.2, "reset_after": 0.1, "reset_before": 0.1, "slow": 0.1}


def bench_faults(rest: Any, workdir: Path, percent: int, rounds: int, rows: int, seed: int = 11) -> dict[str, Any]:
    """The pipeline through the fault proxy at ``percent`` % commit faults (see the module docstring)."""
    from pyiceberg.catalog import load_catalog
    from tests.harness.fault_proxy import FaultProxy
    from tests.harness.pipeline import Pipeline, check, create_tables

    from consistent_catalog import ConsistentCatalog

    direct = rest.catalog(warehouse=f"file://{workdir}/warehouse")
    create_tables(direct)
    rules = {"commit": {kind: share * percent / 100 for kind, share in FAULT_MIX.items()}} if percent else None
    errors: list[str] = []
    with FaultProxy(rest.port, seed=seed, rules=rules, slow_seconds=2.0) as proxy:
        cc = ConsistentCatalog(load_catalog("lake", **{**direct.properties, "uri": proxy.uri,
                                                       "consistent.request-timeout": "1s"}))
        pipeline = Pipeline(cc, seed=seed, rows=rows)
        started = time.perf_counter()
        with pipeline:
            for _ in range(rounds):
                try:
                    pipeline.run_round()
                except Exception as exc:  # noqa: BLE001 - counted: the target is none
                    errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
                    pipeline.rounds += 1
        seconds = time.perf_counter() - started
        commits = sum(n for (route, _), n in proxy.counts.items() if route == "commit")
        faulted = sum(n for (route, kind), n in proxy.counts.items() if route == "commit" and kind != "pass")
    epochs = sorted(pipeline.publish_ms)
    return {"epochs": len(epochs), "seconds": seconds, "p50": statistics.median(epochs) if epochs else float("nan"),
            "p95": epochs[min(len(epochs) - 1, int(0.95 * len(epochs)))] if epochs else float("nan"),
            "commits": commits, "faulted": faulted, "errors": errors, "settled": cc.store.fault_log.total,
            "problems": check(direct, pipeline.expected)}


def ms(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(values) * 1000:.0f} ({p90 * 1000:.0f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5, help="cut resolutions timed per epoch")
    parser.add_argument("--jobs", type=int, default=4, help="concurrent job processes")
    parser.add_argument("--concurrent-epochs", type=int, default=10, help="ingest epochs per ingest process")
    parser.add_argument("--zombies", type=int, default=10, help="zombie publish rounds per backend")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--faults", default="", help="percentages of REST commits faulted, e.g. 0,10,25")
    parser.add_argument("--fault-rounds", type=int, default=30, help="pipeline rounds per fault rate")
    parser.add_argument("--faults-only", action="store_true", help="only the faults table")
    args = parser.parse_args(argv)
    fault_rates = [int(x) for x in args.faults.split(",") if x.strip()]
    if args.faults_only:
        if not fault_rates:
            parser.error("--faults-only needs --faults")
        return faults_main(args, fault_rates, argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        parser.error(f"unknown backend(s) {sorted(unknown)}; choose from {', '.join(BACKENDS)}")

    import logging

    logging.getLogger("pyiceberg").setLevel(logging.ERROR)  # commit retries are expected under contention
    from tests.harness.servers import MotoS3Server, PostgresServer

    load_start = os.getloadavg()[0]
    pg = PostgresServer.start(fast=False) if any(b.startswith("postgres") for b in backends) else None
    s3 = MotoS3Server.start() if "postgres+s3" in backends else None
    rest = None
    results: dict[str, dict[str, Any]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-backends-") as tmp:
            if "rest" in backends:
                from tests.harness.rest_server import RestCatalogServer

                rest = RestCatalogServer(Path(tmp) / "rest-server").start()
                print(f"rest: server ready in {rest.startup_seconds:.1f}s", file=sys.stderr)
            for backend in backends:
                started = time.monotonic()
                catalog = make_catalog(backend, Path(tmp) / backend / "serial", pg, s3, rest)
                try:
                    samples = bench_pipeline(catalog, args.epochs, args.rows, args.repeat)
                    error = None
                except Exception as exc:  # e.g. rest before issue 13: show why instead of stopping the run
                    samples = {m: [] for m in METRICS}
                    error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                conc_catalog = make_catalog(backend, Path(tmp) / backend / "concurrent", pg, s3, rest)
                try:
                    concurrency = bench_concurrency(conc_catalog, args.jobs, args.concurrent_epochs, args.rows)
                except Exception as exc:  # report, do not hide, a backend that cannot take concurrent writers
                    concurrency = {"epochs": 0, "seconds": float("nan"), "failures": [repr(exc)[:200]], "reader_cuts": 0}
                zombie_catalog = make_catalog(backend, Path(tmp) / backend / "zombies", pg, s3, rest)
                try:
                    zombies = bench_zombies(zombie_catalog, args.zombies, max(10, args.rows // 10))
                except Exception as exc:  # noqa: BLE001
                    zombies = {"attempted": args.zombies, "refused": 0, "seconds": [],
                               "failures": [f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"]}
                results[backend] = {"samples": samples, "concurrency": concurrency, "zombies": zombies,
                                    "error": error, "seconds": time.monotonic() - started}
                print(f"{backend}: done in {results[backend]['seconds']:.0f}s", file=sys.stderr)
            if rest is not None:
                rest.stop()
                rest = None
    finally:
        if rest is not None:
            rest.stop()
        if s3 is not None:
            s3.stop()
        if pg is not None:
            pg.stop()

    command = "python -m bench.bench_backends " + shlex.join(argv if argv is not None else sys.argv[1:])
    print(f"`{command.strip()}` on {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average {load_start:.1f} -> {os.getloadavg()[0]:.1f}")
    print()
    print("Median (p90) milliseconds per operation;", f"{args.epochs} epochs of {args.rows} words.")
    print()
    print("| operation | " + " | ".join(backends) + " |")
    print("|---|" + "---:|" * len(backends))
    for metric in METRICS:
        print(f"| {metric} | " + " | ".join(ms(results[b]["samples"][metric]) for b in backends) + " |")
    for backend in backends:
        if results[backend]["error"]:
            print(f"- {backend}: the serial pipeline failed: {results[backend]['error']}")
    print()
    print(f"Concurrency: {args.jobs} job processes + 2 ingest + 2 reader processes, "
          f"{2 * args.concurrent_epochs} ingest epochs of {args.rows} words.")
    print()
    print("| | " + " | ".join(backends) + " |")
    print("|---|" + "---:|" * len(backends))
    conc = {b: results[b]["concurrency"] for b in backends}
    print("| epochs published | " + " | ".join(str(conc[b]["epochs"]) for b in backends) + " |")
    print("| wall time (s) | " + " | ".join(f"{conc[b]['seconds']:.1f}" for b in backends) + " |")
    print("| epochs/s | " + " | ".join(
        f"{conc[b]['epochs'] / conc[b]['seconds']:.2f}" if conc[b]["epochs"] else "-" for b in backends) + " |")
    print("| consistent cuts read | " + " | ".join(str(conc[b]["reader_cuts"]) for b in backends) + " |")
    print("| failed processes | " + " | ".join(str(len(conc[b]["failures"])) for b in backends) + " |")
    for backend in backends:
        for failure in conc[backend]["failures"]:
            print(f"- {backend}: {failure}")
    print()
    print(f"Zombies: {args.zombies} rounds of stage -> takeover + publish by another client -> stale publish.")
    print()
    print("| | " + " | ".join(backends) + " |")
    print("|---|" + "---:|" * len(backends))
    zomb = {b: results[b]["zombies"] for b in backends}
    print("| zombie publishes refused | " + " | ".join(f"{zomb[b]['refused']}/{zomb[b]['attempted']}" for b in backends)
          + " |")
    print("| refusal ms, median (p90) | " + " | ".join(ms(zomb[b]["seconds"]) for b in backends) + " |")
    for backend in backends:
        for failure in zomb[backend]["failures"][:5]:
            print(f"- {backend} zombies: {failure}")
    if fault_rates:
        print()
        return faults_main(args, fault_rates, argv)
    return 0


def faults_main(args: argparse.Namespace, rates: list[int], argv: list[str] | None) -> int:
    import logging

    logging.getLogger("pyiceberg").setLevel(logging.ERROR)
    from tests.harness.rest_server import RestCatalogServer

    load_start = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp, RestCatalogServer(Path(tmp) / "rest") as rest:
        for rate in rates:
            results[rate] = bench_faults(rest, Path(tmp) / f"faults-{rate}", rate, args.fault_rounds, args.rows)
            print(f"{rate}% faults: done in {results[rate]['seconds']:.0f}s", file=sys.stderr)
    command = "python -m bench.bench_backends " + shlex.join(argv if argv is not None else sys.argv[1:])
    print(f"`{command.strip()}` on {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average {load_start:.1f} -> {os.getloadavg()[0]:.1f}")
    print()
    print(f"Faults on REST: {args.fault_rounds} rounds (a keyed ingest of {args.rows} words, two chained epochs) "
          "through tests/harness/fault_proxy.py.")
    print()
    print("| commit faults | commits faulted | epochs/s | epoch ms p50 | epoch ms p95 | faults settled | "
          "errors to the caller | check |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for rate, r in results.items():
        print(f"| {rate} % | {r['faulted']}/{r['commits']} | {r['epochs'] / r['seconds']:.2f} | {r['p50']:.0f} | "
              f"{r['p95']:.0f} | {r['settled']} | {len(r['errors'])} | {'; '.join(r['problems']) or 'all keys and epochs once, cut consistent'} |")
    for rate, r in results.items():
        for error in r["errors"][:5]:
            print(f"- {rate} %: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
