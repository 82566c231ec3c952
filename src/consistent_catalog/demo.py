"""FLIP-276's three-table example (protocol §7), run with Spark or pyiceberg epoch jobs, or as plain Spark SQL.

``demo.words(word)`` is the root; job ``word-count`` writes ``demo.word_counts(word, cnt)``; job
``count-histogram`` writes ``demo.count_histogram(cnt, words)``. The jobs run at different speeds,
so the tables lag each other, yet every repeatable-read cut satisfies the invariants of protocol §7.
With the engine ``sql`` both jobs are ``consistent_catalog/spark/flip_pipeline.sql``, run once per round
by a stock ``spark-sql`` process of its own (epochs through the catalog plugin, protocol §5.9).
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pyarrow as pa

from consistent_catalog.catalog import ConsistentCatalog
from consistent_catalog.epoch import EpochContext
from consistent_catalog.exceptions import (
    InvalidInputError,
    NotInstalledError,
    NoWatermarkError,
    OwnershipError,
    TableNotFoundError,
)
from consistent_catalog.ingest import IngestResult
from consistent_catalog.read import ConsistentRead
from consistent_catalog.util.time import fmt_barrier, now_ms

ENGINES = ("spark", "pyiceberg", "sql")
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


FLIP_VERSION = "flip-1"
"""The version the demo's jobs declare as their definition (protocol §6.10): their pyarrow, Spark SQL and plain-SQL
(``flip_pipeline.sql``) forms compute the same tables, so any of them, and the README's examples, continue the
demo's jobs instead of revising their tables."""


def count_words(ctx: EpochContext) -> pa.Table:
    words = ctx.read(WORDS)
    return words.group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])


def histogram(ctx: EpochContext) -> pa.Table:
    counts = ctx.read(COUNTS)
    return counts.group_by("cnt").aggregate([("cnt", "count")]).rename_columns(["cnt", "words"])


def check_invariants(read: ConsistentRead) -> list[str]:
    """Protocol §7's invariants at one cut; returns the violations (empty when all hold)."""
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
    """Who runs the jobs and ingests the words: pyiceberg in-process, or Spark.

    A context manager: the jobs hold their sinks inside it. ``run_round(epoch)`` runs ``word-count`` every
    round and ``count-histogram`` every second one; ``catch_up()`` runs both until nothing is left to do.
    """

    def __init__(self, cc: ConsistentCatalog, engine: str, spark: Any, takeover: bool) -> None:
        self.cc = cc
        self.spark = spark
        if engine == "spark":
            from consistent_catalog.spark.job import SparkEpochJob

            self.counter: Any = SparkEpochJob(cc, spark, "word-count", sources=[WORDS], sinks=[COUNTS],
                                              transform=WORD_COUNT_SQL, mode="overwrite", takeover=takeover,
                                              version=FLIP_VERSION)
            self.hist: Any = SparkEpochJob(cc, spark, "count-histogram", sources=[COUNTS], sinks=[HISTOGRAM],
                                           transform=HISTOGRAM_SQL, mode="overwrite", takeover=takeover,
                                           version=FLIP_VERSION)
        else:
            self.counter = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words,
                                  mode="overwrite", takeover=takeover, version=FLIP_VERSION)
            self.hist = cc.job("count-histogram", sources=[COUNTS], sinks=[HISTOGRAM], transform=histogram,
                               mode="overwrite", takeover=takeover, version=FLIP_VERSION)
        self._jobs = ExitStack()

    def __enter__(self) -> _Engine:
        self._jobs.enter_context(self.counter)
        self._jobs.enter_context(self.hist)
        return self

    def __exit__(self, *exc: object) -> None:
        self._jobs.close()

    def run_round(self, epoch: int) -> None:
        self.counter.run_epoch()
        if epoch % 2 == 1:  # the histogram job runs at half the speed: the tables lag each other
            self.hist.run_epoch()

    def catch_up(self) -> None:
        self.counter.run_until_caught_up()
        self.hist.run_until_caught_up()

    def ingest(self, epoch: int, words: pa.Table) -> IngestResult:
        """One epoch of words, idempotently: a second demo on the same catalog never ingests it twice."""
        key = f"demo-words-{epoch}"
        if self.spark is None:
            return self.cc.ingest(WORDS, words, key=key)
        from consistent_catalog.spark.job import ingest_dataframe

        frame = self.spark.createDataFrame([(w,) for w in words["word"].to_pylist()], "word string")
        return ingest_dataframe(self.cc, frame, WORDS, key=key)


class _SqlEngine:
    """Both jobs as ``flip_pipeline.sql``: each round one stock ``spark-sql -f`` process (a plugin instance that
    registers the jobs on its first write and unregisters them when it exits); words ingested with pyiceberg."""

    def __init__(self, cc: ConsistentCatalog, properties: Path, takeover: bool, echo: Callable[[str], Any]) -> None:
        self.cc = cc
        self.properties = properties
        self.takeover = takeover  # the first round takes the jobs over from a killed run; the next ones need not
        self.echo = echo
        self.pending = True  # words may have arrived since the last round (also before this demo started)
        self.rounds = 0

    def __enter__(self) -> _SqlEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def run_round(self, epoch: int) -> None:
        from consistent_catalog.spark.sql_pipeline import FLIP_PIPELINE_SQL, run_spark_sql

        conf = {"spark.sql.consistent.takeover": "true"} if self.takeover else None
        self.rounds += 1
        self.echo(f"round {self.rounds}: spark-sql -f {FLIP_PIPELINE_SQL.name} (a process of its own, both jobs)")
        run = run_spark_sql(self.properties, FLIP_PIPELINE_SQL, conf=conf, cwd=self.properties.parent,
                            on_report=lambda line: self.echo(f"  {line}"))
        if run.returncode != 0 and "CONSISTENT_WRITE.OWNERSHIP" in (run.error or "") and not self.takeover:
            raise OwnershipError(f"spark-sql -f {FLIP_PIPELINE_SQL.name} was refused: {run.error} (the demo takes "
                                 "over from a killed earlier run with --takeover)")
        run.check()
        self.echo(f"  spark-sql exited 0 after {run.seconds:.1f}s")
        self.takeover = False
        self.pending = False

    def catch_up(self) -> None:
        if self.pending:
            self.run_round(-1)

    def ingest(self, epoch: int, words: pa.Table) -> IngestResult:
        self.pending = True
        return self.cc.ingest(WORDS, words, key=f"demo-words-{epoch}")


def _sql_properties(cc: ConsistentCatalog, directory: Path) -> Path:
    """``directory/spark-defaults.conf`` rendered for ``cc`` (``consistent-catalog spark-conf``), with ``lake_consistent``."""
    from consistent_catalog.spark.session import missing_plugin_jar_message, parse_spark_defaults, write_spark_defaults

    properties = cc.catalog.properties
    if cc.name != "lake" or "uri" not in properties or "warehouse" not in properties:
        raise InvalidInputError(
            f"the SQL demo needs a SQL catalog named 'lake' with a uri and a warehouse (flip_pipeline.sql writes "
            f"through lake_consistent); catalog {cc.name!r} is not one — use engine='spark' or 'pyiceberg'"
        )
    written = write_spark_defaults(directory / "spark-defaults.conf", properties["uri"], properties["warehouse"],
                                   name=cc.name)
    if f"spark.sql.catalog.{cc.name}_consistent" not in parse_spark_defaults(written.read_text(encoding="utf-8")):
        raise NotInstalledError(f"the SQL demo writes through {cc.name}_consistent, but there is no Spark plugin jar: "
                                f"{missing_plugin_jar_message()}")
    return written


def _demo_session(cc: ConsistentCatalog) -> Any:
    """A local[2] SparkSession over the same SQL catalog database and warehouse as ``cc``."""
    from consistent_catalog.spark.session import build_session

    properties = cc.catalog.properties
    if "uri" not in properties or "warehouse" not in properties:
        raise InvalidInputError(
            f"the Spark demo needs a SQL catalog with a uri and a warehouse; catalog {cc.name!r} has neither "
            "— pass spark= (a session configured for it) or use engine='pyiceberg'"
        )
    return build_session(properties["uri"], properties["warehouse"], name=cc.name, app_name="flip-demo")


def run_demo(
    directory: str | Path | None = None,
    *,
    cc: ConsistentCatalog | None = None,
    spark: Any = None,
    engine: str = "spark",
    epochs: int = 6,
    rows_per_epoch: int = 1000,
    interval: float = 0.0,
    on_cut: Callable[[ConsistentRead, int], Any] | None = None,
    echo: Callable[[str], Any] = print,
    check: bool = True,
    takeover: bool = False,
) -> dict[str, Any]:
    """Ingest ``epochs`` epochs of words (resuming after those already ingested), run both jobs, check protocol §7.

    ``word-count`` runs every epoch and ``count-histogram`` every second one, so the tables lag each
    other; after every epoch the repeatable-read cut over all three tables is read, checked and
    handed to ``on_cut(read, epoch)`` (epoch ``epochs`` is the final read after both jobs caught up).
    ``interval`` spaces the ingest epochs (seconds), as a live source would.

    The catalog is ``cc`` or, by default, a SQLite catalog under ``directory``; with
    ``engine="spark"`` the jobs run in ``spark`` or, by default, in a local[2] session over the same
    catalog (stopped at the end; a session passed in is left running). With ``engine="sql"`` both jobs
    are ``spark/flip_pipeline.sql``, run after every ingest (both jobs each time) by a stock ``spark-sql``
    process of its own, with the properties file rendered into ``directory/spark-defaults.conf`` (a
    temporary one for ``cc=``); the words are ingested with pyiceberg. With ``check`` (the default)
    a violated invariant ends the demo with exit status 1. Each epoch's words are ingested with an
    idempotency key, so a second demo on the same catalog never ingests them twice; its jobs are
    refused while this one's hold their leases, unless ``takeover`` (restarting after a crash).
    """
    if engine not in ENGINES:
        raise InvalidInputError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    if cc is None:
        if directory is None:
            raise InvalidInputError("run_demo needs a directory for its catalog, or a catalog as cc=")
        cc = open_demo_catalog(directory)
    ensure_tables(cc)
    with ExitStack() as resources:
        runner: _Engine | _SqlEngine
        if engine == "sql":
            where = Path(directory) if directory is not None else Path(
                resources.enter_context(tempfile.TemporaryDirectory()))
            runner = _SqlEngine(cc, _sql_properties(cc, where.resolve()), takeover, echo)
        else:
            if engine == "spark" and spark is None:
                spark = _demo_session(cc)
                resources.callback(spark.stop)  # its own session only; one passed in is left running
            runner = _Engine(cc, engine, spark if engine == "spark" else None, takeover)
        return _run_rounds(cc, runner, epochs=epochs, rows_per_epoch=rows_per_epoch, interval=interval,
                           on_cut=on_cut, echo=echo, check=check)


def _run_rounds(
    cc: ConsistentCatalog,
    runner: _Engine | _SqlEngine,
    *,
    epochs: int,
    rows_per_epoch: int,
    interval: float,
    on_cut: Callable[[ConsistentRead, int], Any] | None,
    echo: Callable[[str], Any],
    check: bool,
) -> dict[str, Any]:
    """``run_demo``'s loop: ingest, a round of the jobs, the cut read and checked; then catch up and report."""
    done = len(cc.history(WORDS))
    if done >= epochs:
        echo(f"the demo catalog already holds {done} epochs of words (--epochs {epochs} is a total, not a number to add): "
             f"nothing to ingest; pass --epochs {done + epochs} for {epochs} more")
    elif done:
        echo(f"resuming: {done} of {epochs} epochs of words are in already; ingesting epochs {done + 1}-{epochs}")
    violations: list[str] = []
    delays: list[int] = []
    cuts_checked = 0

    def checked(read: ConsistentRead, epoch: int) -> None:
        nonlocal violations, cuts_checked
        violations += check_invariants(read)
        cuts_checked += 1
        if on_cut is not None:
            on_cut(read, epoch)

    with runner:
        for epoch in range(done, epochs):
            started = time.monotonic()
            ingested = runner.ingest(epoch, epoch_words(epoch, rows_per_epoch))
            barrier = ingested.barrier
            runner.run_round(epoch)
            try:
                read = cc.read(TABLES)
            except NoWatermarkError:  # count_histogram has not run yet: no cut covers all three tables
                echo(f"epoch {epoch + 1}/{epochs}: ingested barrier {fmt_barrier(barrier)}, no consistent cut yet")
            else:
                delays.append(now_ms() - read.cut.barrier)
                checked(read, epoch)
                echo(f"epoch {epoch + 1}/{epochs}: ingested barrier {fmt_barrier(barrier)}, consistent cut at "
                     f"{fmt_barrier(read.cut.barrier)} (count_histogram {delays[-1] / 1000:.1f}s behind)")
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
        runner.catch_up()
    status = cc.status(TABLES)  # after the jobs released their tables: what a status run now shows
    read = cc.read(TABLES)
    checked(read, epochs)
    for row in status:
        echo(f"  {row.table:22} {row.role:8} job={row.job or '-':16} lease={row.lease:8} "
             f"watermark={fmt_barrier(row.watermark)}")
    top = read.to_arrow(COUNTS).sort_by([("cnt", "descending")]).slice(0, 5)
    echo(f"consistent read at barrier {fmt_barrier(read.cut.barrier)}: {read.to_arrow(WORDS).num_rows} words, "
         f"top {list(zip(top['word'].to_pylist(), top['cnt'].to_pylist()))}")
    echo(f"protocol §7 invariants at {cuts_checked} cuts: "
         f"{'OK' if not violations else 'VIOLATED: ' + '; '.join(violations)}")
    if violations and check:
        raise SystemExit(1)
    return {"cut": read.cut.to_json(), "cuts_checked": cuts_checked, "violations": violations, "delays_ms": delays}
