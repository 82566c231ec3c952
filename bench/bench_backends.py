"""Benchmark: the FLIP pipeline's commit and read costs on SQLite vs PostgreSQL vs PostgreSQL + S3, side by side.

Not a test. In one run it starts a throwaway PostgreSQL server and moto's S3 server on 127.0.0.1
(``tests/harness/servers.py``, the same code the tests use), and for each backend

  sqlite         SqlCatalog on a SQLite file, warehouse in a local directory
  postgres       SqlCatalog on PostgreSQL, warehouse in a local directory
  postgres+s3    SqlCatalog on PostgreSQL, warehouse in an S3 bucket (moto)

runs ``--epochs`` epochs of the three-table pipeline with pyiceberg jobs, timing every

  ingest     ``cc.ingest(words)``: one root append commit (data file + metadata + catalog swap)
  stage      the word-count epoch's staged write on ``consistent-staged`` (data + fenced commit)
  publish    the fenced publish commit alone (main -> staged head, lease renewal): the WRITTEN step
  epoch      ``run_epoch()`` of word-count end to end (plan + read inputs + transform + stage + publish)
  resolve    ``cc.resolve(3 tables)``: cut resolution (metadata loads + the pure resolver)
  read       pyiceberg reading the three tables at the cut; ``duckdb`` the same with DuckDB

then, separately, ``--jobs`` concurrent job processes (plus 2 ingest and 2 reader processes) on a
fresh catalog of the same backend (``tests.harness.concurrent.run_concurrent_pipeline``): epochs/s is
epochs published by all jobs / wall time until every job has caught up.

PostgreSQL runs with its default durability (fsync on) here, unlike in the tests.

Usage:
    .venv/bin/python -m bench.bench_backends [--epochs 20] [--rows 1000] [--repeat 5] [--jobs 4]
                                             [--concurrent-epochs 10] [--backends sqlite,postgres,postgres+s3] [--markdown]
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

BACKENDS = ("sqlite", "postgres", "postgres+s3")
METRICS = ("ingest", "stage", "publish", "epoch", "resolve", "read", "duckdb")


def timed(samples: dict[str, list[float]], key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            samples[key].append(time.perf_counter() - start)

    return wrapper


def make_catalog(backend: str, workdir: Path, pg: Any, s3: Any) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    workdir.mkdir(parents=True, exist_ok=True)
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

    properties = {k: v for k, v in catalog.properties.items() if k.startswith("s3.")}
    catalog_args = (catalog.properties["uri"], catalog.properties["warehouse"], properties)
    result = run_concurrent_pipeline(catalog_args, jobs=jobs, ingesters=2, epochs=epochs, rows_per_epoch=rows,
                                     readers=2, timeout=900)
    failures = [f"{r[0]} {r[1]}: {r[3].strip().splitlines()[-1]}" for r in result["reports"] if r[3]]
    return {"epochs": result["job_epochs"], "seconds": result["seconds"], "failures": failures,
            "reader_cuts": sum(r[2] for r in result["reports"] if r[0] == "reader")}


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
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
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
    results: dict[str, dict[str, Any]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-backends-") as tmp:
            for backend in backends:
                started = time.monotonic()
                catalog = make_catalog(backend, Path(tmp) / backend / "serial", pg, s3)
                samples = bench_pipeline(catalog, args.epochs, args.rows, args.repeat)
                conc_catalog = make_catalog(backend, Path(tmp) / backend / "concurrent", pg, s3)
                try:
                    concurrency = bench_concurrency(conc_catalog, args.jobs, args.concurrent_epochs, args.rows)
                except Exception as exc:  # report, do not hide, a backend that cannot take concurrent writers
                    concurrency = {"epochs": 0, "seconds": float("nan"), "failures": [repr(exc)[:200]], "reader_cuts": 0}
                results[backend] = {"samples": samples, "concurrency": concurrency,
                                    "seconds": time.monotonic() - started}
                print(f"{backend}: done in {results[backend]['seconds']:.0f}s", file=sys.stderr)
    finally:
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
