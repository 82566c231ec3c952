"""FLIP-276's three-table example (shared/SPEC.md section 7), run with pyiceberg epoch jobs.

``demo.words(word)`` is the root; job ``word-count`` writes ``demo.word_counts(word, cnt)``; job
``count-histogram`` writes ``demo.count_histogram(cnt, words)``. The jobs run at different speeds,
so the tables lag each other, yet every repeatable-read cut satisfies the SPEC 7 invariants.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from consistent_catalog.catalog import ConsistentCatalog, ConsistentRead
from consistent_catalog.epoch import EpochContext
from consistent_catalog.exceptions import NoWatermarkError, TableNotFoundError

WORDS, COUNTS, HISTOGRAM = "demo.words", "demo.word_counts", "demo.count_histogram"
TABLES = (WORDS, COUNTS, HISTOGRAM)
SCHEMAS = {
    WORDS: pa.schema([pa.field("word", pa.string())]),
    COUNTS: pa.schema([pa.field("word", pa.string()), pa.field("cnt", pa.int64())]),
    HISTOGRAM: pa.schema([pa.field("cnt", pa.int64()), pa.field("words", pa.int64())]),
}
VOCABULARY = [f"w{i:03d}" for i in range(200)]


def epoch_words(epoch: int, rows: int) -> pa.Table:
    """Deterministic words of one ingest epoch (Zipf-like, so counts differ)."""
    rng = random.Random(epoch)
    weights = [1 / (i + 1) for i in range(len(VOCABULARY))]
    return pa.table({"word": rng.choices(VOCABULARY, weights=weights, k=rows)}, schema=SCHEMAS[WORDS])


def count_words(ctx: EpochContext) -> pa.Table:
    words = ctx.read(WORDS)
    return words.group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])


def histogram(ctx: EpochContext) -> pa.Table:
    counts = ctx.read(COUNTS)
    return counts.group_by("cnt").aggregate([("cnt", "count")]).rename_columns(["cnt", "words"])


def check_invariants(read: ConsistentRead) -> list[str]:
    """SPEC 7's invariants at one cut; returns the violations (empty when all hold)."""
    data = read.to_arrow_all()
    words, counts, hist = data[WORDS], data[COUNTS], data[HISTOGRAM]
    problems = []
    if sum(counts["cnt"].to_pylist()) != words.num_rows:
        problems.append(f"sum(word_counts.cnt)={sum(counts['cnt'].to_pylist())} != count(words)={words.num_rows}")
    if sum(hist["words"].to_pylist()) != counts.num_rows:
        problems.append(f"sum(count_histogram.words)={sum(hist['words'].to_pylist())} != count(word_counts)={counts.num_rows}")
    expected: dict[int, int] = {}
    for cnt in counts["cnt"].to_pylist():
        expected[cnt] = expected.get(cnt, 0) + 1
    actual = dict(zip(hist["cnt"].to_pylist(), hist["words"].to_pylist()))
    if expected != actual:
        problems.append("count_histogram is not the histogram of word_counts")
    return problems


def open_demo_catalog(directory: str | Path) -> ConsistentCatalog:
    from pyiceberg.catalog.sql import SqlCatalog

    root = Path(directory).resolve()
    root.mkdir(parents=True, exist_ok=True)
    (root / "warehouse").mkdir(exist_ok=True)
    catalog = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    return ConsistentCatalog(catalog)


def ensure_tables(cc: ConsistentCatalog) -> None:
    if ("demo",) not in cc.catalog.list_namespaces():
        cc.catalog.create_namespace("demo")
    for name, schema in SCHEMAS.items():
        try:
            cc.load_table(name)
        except TableNotFoundError:
            cc.catalog.create_table(name, schema=schema)


WORD_COUNT_SQL = "SELECT word, count(*) AS cnt FROM words GROUP BY word"
HISTOGRAM_SQL = "SELECT cnt, count(*) AS words FROM word_counts GROUP BY cnt"


class _Engine:
    """Who runs the jobs and ingests the words: pyiceberg in-process, or Spark."""

    def __init__(self, cc: ConsistentCatalog, directory: Path, engine: str) -> None:
        self.cc = cc
        self.spark: Any = None
        if engine == "spark":
            from consistent_catalog.spark.job import SparkEpochJob
            from consistent_catalog.spark.session import build_session

            self.spark = build_session(f"sqlite:///{directory}/catalog.db", directory / "warehouse", app_name="flip-demo")
            self.counter: Any = SparkEpochJob(cc, self.spark, "word-count", sources=[WORDS], sinks=[COUNTS],
                                              transform=WORD_COUNT_SQL, mode="overwrite", takeover=True)
            self.hist: Any = SparkEpochJob(cc, self.spark, "count-histogram", sources=[COUNTS], sinks=[HISTOGRAM],
                                           transform=HISTOGRAM_SQL, mode="overwrite", takeover=True)
        elif engine == "pyiceberg":
            self.counter = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words,
                                  mode="overwrite", takeover=True)
            self.hist = cc.job("count-histogram", sources=[COUNTS], sinks=[HISTOGRAM], transform=histogram,
                               mode="overwrite", takeover=True)
        else:
            raise ValueError(f"unknown engine {engine!r}; use spark or pyiceberg")

    def ingest(self, words: pa.Table) -> int:
        if self.spark is None:
            return self.cc.ingest(WORDS, words).barrier
        from consistent_catalog.spark.job import ingest_dataframe

        frame = self.spark.createDataFrame([(w,) for w in words["word"].to_pylist()], "word string")
        return ingest_dataframe(self.cc, frame, WORDS).barrier


def run_demo(
    directory: str | Path,
    *,
    epochs: int = 6,
    rows_per_epoch: int = 1000,
    engine: str = "spark",
    interval: float = 0.0,
    echo: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """Ingest ``epochs`` epochs of words (resuming after those already ingested), run both jobs, check SPEC 7.

    ``word-count`` runs every epoch and ``count-histogram`` every second one, so the tables lag each
    other; after every epoch the repeatable-read cut over all three tables is read and checked.
    ``interval`` spaces the ingest epochs (seconds), as a live source would.
    """
    root = Path(directory).resolve()
    cc = open_demo_catalog(root)
    ensure_tables(cc)
    runner = _Engine(cc, root, engine)
    done = len(cc.history(WORDS))
    violations: list[str] = []
    delays: list[int] = []
    cuts_checked = 0
    with runner.counter, runner.hist:
        for epoch in range(done, epochs):
            started = time.monotonic()
            barrier = runner.ingest(epoch_words(epoch, rows_per_epoch))
            runner.counter.run_epoch()
            if epoch % 2 == 1:  # the histogram job runs at half the speed: the tables lag each other
                runner.hist.run_epoch()
            try:
                read = cc.read(TABLES)
            except NoWatermarkError:  # count_histogram has not run yet: no cut covers all three tables
                echo(f"epoch {epoch + 1}/{epochs}: ingested barrier {barrier}, no consistent cut yet")
            else:
                delays.append(int(time.time() * 1000) - read.cut.barrier)
                violations += check_invariants(read)
                cuts_checked += 1
                echo(f"epoch {epoch + 1}/{epochs}: ingested barrier {barrier}, consistent cut at {read.cut.barrier} "
                     f"(count_histogram {delays[-1] / 1000:.1f}s behind)")
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
        runner.counter.run_until_caught_up()
        runner.hist.run_until_caught_up()
        status = cc.status(TABLES)
    read = cc.read(TABLES)
    violations += check_invariants(read)
    cuts_checked += 1
    for row in status:
        echo(f"  {row.table:22} {row.role:8} job={row.job or '-':16} lease={row.lease:8} watermark={row.watermark}")
    top = read.to_arrow(COUNTS).sort_by([("cnt", "descending")]).slice(0, 5)
    echo(f"consistent read at barrier {read.cut.barrier}: {read.to_arrow(WORDS).num_rows} words, "
         f"top {list(zip(top['word'].to_pylist(), top['cnt'].to_pylist()))}")
    echo(f"SPEC 7 invariants at {cuts_checked} cuts: {'OK' if not violations else 'VIOLATED: ' + '; '.join(violations)}")
    if runner.spark is not None:
        runner.spark.stop()
    if violations:
        raise SystemExit(1)
    return {"cut": read.cut.to_json(), "cuts_checked": cuts_checked, "violations": violations, "delays_ms": delays}
