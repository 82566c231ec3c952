"""Several jobs, ingesters and readers, each a process, on one catalog (PostgreSQL in the tests and benchmarks).

The process targets live here, in an importable module, because ``multiprocessing``'s *spawn* context
imports them by name in every child.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time
import traceback
from collections import Counter
from collections.abc import Mapping

from consistent_catalog import ConsistentCatalog
from consistent_catalog.demo import WORDS, epoch_words
from consistent_catalog.exceptions import NoWatermarkError
from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA

RETRIES = {"commit.retry.num-retries": "20", "commit.retry.min-wait-ms": "20", "commit.retry.max-wait-ms": "500"}


def sink_names(jobs: int) -> list[str]:
    return [f"demo.counts_{i}" for i in range(jobs)]


def open_cc(catalog_args: tuple[str, str, dict[str, str]] | Mapping[str, str]) -> ConsistentCatalog:
    """A SQL catalog from ``(uri, warehouse, properties)``, or any catalog from pyiceberg catalog properties
    (``{"type": "rest", "uri": ..., "warehouse": ...}``: ``tests.harness.lake.catalog_spec``)."""
    if isinstance(catalog_args, Mapping):
        from tests.harness.lake import open_catalog

        return ConsistentCatalog(open_catalog(catalog_args))
    from pyiceberg.catalog.sql import SqlCatalog

    uri, warehouse, properties = catalog_args
    return ConsistentCatalog(SqlCatalog("lake", uri=uri, warehouse=warehouse, **properties))


def _ingester(catalog_args, index, epochs, rows_per_epoch, done, ready, out) -> None:
    try:
        cc = open_cc(catalog_args)
        ready.wait(120)
        for epoch in range(epochs):
            cc.ingest(WORDS, epoch_words(1000 * index + epoch, rows_per_epoch))
        out.put(("ingester", index, epochs, None))
    except Exception:
        out.put(("ingester", index, 0, traceback.format_exc()))
    finally:
        done.set()


def _count(ctx):
    words = ctx.read(WORDS)
    return words.group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])


def _job(catalog_args, index, sink, ingesters_done, ready, out) -> None:
    try:
        cc = open_cc(catalog_args)
        ready.wait(120)
        epochs = 0
        with cc.job(f"count-{index}", sources=[WORDS], sinks=[sink], transform=_count, mode="overwrite") as job:
            while True:
                finished = all(e.is_set() for e in ingesters_done)  # read before running: no epoch is missed
                epochs += sum(1 for r in job.run_until_caught_up() if r.did_work)
                if finished:
                    break
                time.sleep(0.05)
        out.put(("job", index, epochs, None))
    except Exception:
        out.put(("job", index, 0, traceback.format_exc()))


def _reader(catalog_args, index, sinks, stop, ready, out) -> None:
    try:
        cc = open_cc(catalog_args)
        ready.wait(120)
        cuts = 0
        violations = []
        give_up: float | None = None  # once stopped, wait at most 60 s for a first cut (none may ever come)
        while not stop.is_set() or cuts == 0:
            if stop.is_set():
                give_up = give_up or time.monotonic() + 60
                if time.monotonic() > give_up:
                    violations.append("no consistent cut appeared")
                    break
            try:
                read = cc.read([WORDS, *sinks])
            except NoWatermarkError:
                time.sleep(0.05)
                continue
            data = read.to_arrow_all()
            expected = dict(Counter(data[WORDS]["word"].to_pylist()))
            for sink in sinks:
                got = dict(zip(data[sink]["word"].to_pylist(), data[sink]["cnt"].to_pylist()))
                if got != expected:
                    violations.append(f"{sink} at barrier {read.cut.barrier}")
            cuts += 1
        out.put(("reader", index, cuts, "; ".join(violations) or None))
    except Exception:
        out.put(("reader", index, 0, traceback.format_exc()))


def run_concurrent_pipeline(catalog_args: tuple[str, str, dict[str, str]] | Mapping[str, str], *, jobs: int, ingesters: int, epochs: int,
                            rows_per_epoch: int, readers: int, timeout: float = 300) -> dict:
    """``ingesters`` + ``jobs`` job + ``readers`` reader processes on one catalog ((uri, warehouse, properties)
    of a SQL catalog, or catalog properties such as a REST catalog's).

    Every job counts the words of the one root into its own sink; readers check, at every cut over the
    root and all sinks, that each sink is the count of the root. Tables get generous commit retries.
    Returns the processes' reports (kind, index, count, error or None), the wall time from the common
    start until every ingester and job finished, and the number of epochs the jobs published.
    """
    cc = open_cc(catalog_args)
    sinks = sink_names(jobs)
    if ("demo",) not in cc.catalog.list_namespaces():
        cc.catalog.create_namespace("demo")
    cc.catalog.create_table(WORDS, schema=WORDS_SCHEMA, properties=RETRIES)
    for sink in sinks:
        cc.catalog.create_table(sink, schema=COUNTS_SCHEMA, properties=RETRIES)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    done = [ctx.Event() for _ in range(ingesters)]
    stop = ctx.Event()
    ready = ctx.Barrier(ingesters + jobs + readers + 1)  # all start together, once their imports are done
    procs = [ctx.Process(target=_ingester, args=(catalog_args, i, epochs, rows_per_epoch, done[i], ready, out))
             for i in range(ingesters)]
    procs += [ctx.Process(target=_job, args=(catalog_args, i, sink, done, ready, out))
              for i, sink in enumerate(sinks)]
    reader_procs = [ctx.Process(target=_reader, args=(catalog_args, i, sinks, stop, ready, out))
                    for i in range(readers)]
    for p in procs + reader_procs:
        p.start()
    reports: list[tuple] = []
    try:
        ready.wait(timeout)
        started = time.monotonic()
        while len(reports) < len(procs):
            reports.append(out.get(timeout=max(1.0, timeout - (time.monotonic() - started))))
        elapsed = time.monotonic() - started
        stop.set()
        for _ in reader_procs:
            reports.append(out.get(timeout=60))
    except (queue.Empty, threading.BrokenBarrierError):
        raise AssertionError(f"processes did not finish within {timeout}s; reports so far: {reports}") from None
    finally:
        stop.set()
        for p in procs + reader_procs:
            p.join(30)
            if p.is_alive():
                p.terminate()
    return {"reports": reports, "seconds": elapsed,
            "job_epochs": sum(r[2] for r in reports if r[0] == "job")}
