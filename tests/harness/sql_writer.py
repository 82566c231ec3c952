"""Spark SQL writers through ``lake_consistent`` (protocol §5.9) for the crash and mixed-language tests.

Two sides:

- **The writer process** (``python -m tests.harness.sql_writer --catalog-uri URI --warehouse W SCRIPT``): a
  PySpark driver with the consistent catalog (``build_session``) that runs the SQL statements of ``SCRIPT``
  one by one, as ``spark-sql -f`` would (stops at the first error), but starts faster (no Hive CLI or metastore).
  The plugin's lines (``[lake_consistent] ...``, ``[failpoint] ...``) come from the driver JVM, which writes
  to this process's standard error; the writer adds ``[sql-writer]`` lines of its own. Exit status: 0, 1
  after a refused statement (its message on one line), or the JVM's own status when the JVM died under
  it (137 after a failpoint's ``halt``). At the end the JVM is asked to exit and waited for, so its shutdown
  hook (unregistering the job) has run when the process ends. The failpoint settings are plain
  environment variables of this process, which the JVM inherits.
- **The test side**: ``start_writer`` runs one such process in a session of its own (a real ``kill -9``
  of the driver is ``os.killpg(SIGKILL)``: Python and the JVM, no shutdown hook), ``SqlLake`` is the
  catalog both sides open, and the independent checks read what was written with plain pyiceberg:
  ``main_epochs`` groups ``main``'s ancestry into epochs (barrier, attempts, recorded inputs), and
  ``check_exactly_once`` recounts every epoch's words from the source snapshot it recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORDS, COUNTS = "demo.words", "demo.word_counts"
JOB = "word-count"
CONSISTENT = "lake_consistent"


def word_count_sql(ns: str = "demo") -> str:
    """The SQL job over the namespace ``ns`` (its ``words`` into its ``word_counts``)."""
    return (f"INSERT OVERWRITE {CONSISTENT}.{ns}.word_counts "
            f"SELECT word, count(*) AS cnt FROM {CONSISTENT}.{ns}.words GROUP BY word")


WORD_COUNT_SQL = word_count_sql()
"""The SQL job; ``count_words`` is the same job's transform in Python."""
LINE = f"[{CONSISTENT}]"
"""How the plugin's one line per statement starts (protocol §5.9)."""
EPOCH_LINE = re.compile(rf"^\[{CONSISTENT}\] \S+: \S+ barrier (?P<barrier>\d+) \([^)]*\) "
                        r"(?P<action>published|republished|done|watermark)\b")
INGEST_LINE = re.compile(rf"^\[{CONSISTENT}\] ingest: \S+ (?:ingest at barrier (?P<barrier>\d+) .*landed in snapshot"
                         r"|ingest key .* (?:already landed|landed meanwhile))")
EXIT_HALTED = 137
START_TIMEOUT = 240.0
DRIVER_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
"""A short-lived driver on 2 cores starts faster with the client compiler only and the serial collector."""


def count_words(ctx: Any) -> Any:
    """The Python job's transform (``EpochJob``): what ``WORD_COUNT_SQL`` computes, as a pyarrow table (word, cnt)."""
    return ctx.read(WORDS).group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])


# --- statements ------------------------------------------------------------------------------------------
def epoch_statements(*, takeover: bool, job: str = JOB, ns: str = "demo") -> list[str]:
    """One epoch of the word-count job (over the namespace ``ns``), as a SQL user writes it."""
    return [f"SET spark.sql.consistent.job={job}", f"SET spark.sql.consistent.takeover={str(takeover).lower()}",
            word_count_sql(ns)]


def ingest_statements(key: str | None, words: Sequence[str], ns: str = "demo") -> list[str]:
    """An ingest of ``words`` into the root ``<ns>.words`` (keyed when ``key`` is given): no job set."""
    values = ", ".join("('" + w.replace("'", "''") + "')" for w in words)
    keyed = [f"SET spark.sql.consistent.ingestKey={key}"] if key else ["RESET spark.sql.consistent.ingestKey"]
    return ["RESET spark.sql.consistent.job", *keyed, f"INSERT INTO {CONSISTENT}.{ns}.words VALUES {values}"]


def batch(index: int, size: int = 6) -> list[str]:
    """A deterministic batch of words: a few shared words and one of its own, so counts change every batch."""
    return [f"w{(index * 7 + i) % 5}" for i in range(size - 1)] + [f"only{index}"]


# --- the writer process -------------------------------------------------------------------------------------
def split_statements(text: str) -> list[str]:
    """Statements separated by ``;`` at a line end (the scripts here never put ``;`` inside a literal)."""
    return [s.strip() for s in re.split(r";\s*$", text, flags=re.MULTILINE) if s.strip()]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    # Py4J's message is "An error occurred while calling o42.sql.\n: <java exception>: <message>\n\tat ..."
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
    return " | ".join(lines[:3]) if lines else type(exc).__name__


def _jvm_status(spark: Any, exc: BaseException) -> int | None:
    """The driver JVM's exit status if ``exc`` means it died under the statement, else None."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    proc = getattr(spark.sparkContext._gateway, "proc", None)
    if proc is None or isinstance(exc, (Py4JJavaError, CapturedException)):  # the JVM answered: it lives
        return None
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return None


def _exit_jvm(spark: Any) -> int | None:
    """A normal end: stop Spark, close the gateway's stdin (the JVM exits on EOF) and wait for the JVM, so the
    plugin's shutdown hook (unregistering the job) has run when this process ends."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    spark.stop()
    if proc is None:
        return None
    if proc.stdin is not None:
        proc.stdin.close()
    return proc.wait(timeout=120)


def writer_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.sql_writer", description=__doc__.splitlines()[0])
    parser.add_argument("--catalog-uri", required=True)
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--app-name", default="sql-writer")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting of the session (e.g. a catalog option)")
    parser.add_argument("script", type=Path)
    args = parser.parse_args(argv)
    from consistent_catalog.spark.session import build_session

    started = time.monotonic()

    def say(text: str) -> None:
        print(f"[sql-writer] {time.monotonic() - started:6.2f}s {text}", file=sys.stderr, flush=True)

    statements = split_statements(args.script.read_text(encoding="utf-8"))
    conf = dict(DRIVER_CONF, **dict(item.split("=", 1) for item in args.conf))
    spark = build_session(args.catalog_uri, args.warehouse, app_name=args.app_name, extra_conf=conf)
    say(f"session {spark.sparkContext.applicationId} pid {os.getpid()}")
    for number, statement in enumerate(statements, 1):
        say(f"statement {number}: {statement.splitlines()[0][:120]}")
        try:
            spark.sql(statement)
        except Exception as exc:  # noqa: BLE001 - reported, then the process ends as spark-sql -f would
            status = _jvm_status(spark, exc)
            if status is not None:
                say(f"the driver JVM exited with {status} during statement {number}")
                return status
            say(f"error in statement {number}: {_one_line(exc)}")
            print(str(exc), file=sys.stderr, flush=True)  # the whole error, the JVM's stack included
            _exit_jvm(spark)
            return 1
    status = _exit_jvm(spark)
    say(f"done, JVM exit {status}")
    return 0


# --- the test side: a writer process --------------------------------------------------------------------------
@dataclass
class SqlLake:
    """A catalog both pyiceberg and the Spark writers open: ``uri`` (SQLite/PostgreSQL SQLAlchemy URI or a REST
    server's), ``warehouse`` (``file://...``), ``catalog`` (pyiceberg) and ``directory`` (scripts, logs)."""

    uri: str
    warehouse: str
    catalog: Any
    directory: Path

    def table(self, name: str) -> Any:
        return self.catalog.load_table(name)


@dataclass
class WriterRun:
    """One writer process (its own session: ``kill9``/``stop``/``cont`` reach Python and the JVM)."""

    name: str
    process: subprocess.Popen[bytes]
    stderr_path: Path
    started: float = field(default_factory=time.monotonic)

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def lines(self) -> list[str]:
        """The plugin's one line per statement, in order."""
        return [ln.strip() for ln in self.stderr().splitlines() if ln.startswith(LINE)]

    def epochs(self) -> list[tuple[int, str]]:
        """``(barrier, action)`` of every epoch statement's line (published, republished, done, watermark)."""
        return [(int(m["barrier"]), m["action"]) for line in self.lines() if (m := EPOCH_LINE.search(line))]

    def ingests(self) -> list[tuple[int | None, str]]:
        """``(barrier, how)`` of every ingest statement's line: ``landed`` with its barrier, or ``skipped``."""
        found: list[tuple[int | None, str]] = []
        for line in self.lines():
            if m := INGEST_LINE.search(line):
                found.append((int(m["barrier"]), "landed") if m["barrier"] else (None, "skipped"))
        return found

    def wait_for(self, pattern: str, timeout: float = START_TIMEOUT) -> re.Match[str]:
        """Until a line of standard error matches ``pattern`` (AssertionError when the process ends first)."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            for line in self.stderr().splitlines():
                found = regex.search(line)
                if found:
                    return found
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.process.returncode} before /{pattern}/:\n"
                                     f"{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no /{pattern}/ within {timeout:.0f}s:\n{self.tail()}")
            time.sleep(0.05)

    def wait(self, timeout: float = START_TIMEOUT) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"{self.name} did not finish within {timeout:.0f}s:\n{self.tail()}") from None

    def signal(self, sig: int) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)

    def kill9(self) -> None:
        """A real ``kill -9`` of the driver: the writer and its JVM at once, no shutdown hook."""
        self.signal(signal.SIGKILL)
        self.process.wait(timeout=60)

    def tail(self, lines: int = 40) -> str:
        kept = [ln for ln in self.stderr().splitlines() if not ln.startswith(("\tat ", "    at "))]
        return "\n".join(kept[-lines:])


def create_lake(catalog: Any, uri: str, warehouse: str, directory: Path, ns: str = "demo") -> tuple[SqlLake, int]:
    """``<ns>.words`` (a root) and ``<ns>.word_counts`` (empty) in ``catalog``, words ingested once with pyiceberg;
    returns the lake and that ingest's barrier (``W(<ns>.words)``)."""
    from consistent_catalog import ConsistentCatalog
    from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA, words

    directory.mkdir(parents=True, exist_ok=True)
    catalog.create_namespace(ns)
    catalog.create_table(f"{ns}.words", schema=WORDS_SCHEMA)
    catalog.create_table(f"{ns}.word_counts", schema=COUNTS_SCHEMA)
    first = ConsistentCatalog(catalog).ingest(f"{ns}.words", words(*batch(0)))
    return SqlLake(uri, warehouse, catalog, directory), first.barrier


def start_writer(
    lake: SqlLake, statements: Iterable[str], name: str, *, failpoint: str | None = None, action: str = "halt",
    release: Path | None = None, conf: Mapping[str, str] | None = None, passes: int = 0,
    env: Mapping[str, str] | None = None,
) -> WriterRun:
    """Start one writer process running ``statements`` on ``lake``, with a failpoint when given (protocol §5.9;
    ``action``: ``halt`` as kill -9 does, or ``pause`` until ``release`` exists; ``passes``: how many times the point
    lets writes pass first; ``env``: more environment, e.g. Glue's credentials for Iceberg's AWS SDK)."""
    script = lake.directory / f"{name}.sql"
    script.write_text("".join(f"{s};\n" for s in statements), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONSISTENT_FAILPOINT")} | dict(env or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if failpoint is not None:
        env.update(CONSISTENT_FAILPOINT=failpoint, CONSISTENT_FAILPOINT_ACTION=action,
                   CONSISTENT_FAILPOINT_AFTER=str(passes))
        if release is not None:
            env["CONSISTENT_FAILPOINT_RELEASE"] = str(release)
    stderr_path = lake.directory / f"{name}.stderr"
    with stderr_path.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.sql_writer", "--catalog-uri", lake.uri, "--warehouse", lake.warehouse,
             "--app-name", name, *(f"--conf={k}={v}" for k, v in (conf or {}).items()), str(script)],
            cwd=lake.directory, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            start_new_session=True,
        )
    return WriterRun(name, process, stderr_path)


def run_writer(lake: SqlLake, statements: Iterable[str], name: str, **options: Any) -> WriterRun:
    """``start_writer`` and wait for it to end."""
    run = start_writer(lake, statements, name, **options)
    run.wait()
    return run


# --- independent checks with pyiceberg ----------------------------------------------------------------------
@dataclass
class Epoch:
    """One barrier's run of snapshots on ``main`` (oldest first)."""

    barrier: int
    attempts: set[str | None]
    sources: set[str | None]
    snapshot_ids: list[int]
    summaries: list[dict[str, str]]

    @property
    def head(self) -> int:
        return self.snapshot_ids[-1]

    def inputs(self) -> dict[str, int | None]:
        (recorded,) = self.sources
        assert recorded is not None, f"barrier {self.barrier} records no consistent.sources"
        return json.loads(recorded)


def _summary(snapshot: Any) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties) if snapshot.summary is not None else {}


def ancestry(table: Any, ref: str = "main") -> list[Any]:
    """The snapshots of ``ref``'s ancestry, oldest first (plain pyiceberg metadata)."""
    metadata = table.metadata
    snapshot = metadata.snapshot_by_name(ref)
    chain = []
    while snapshot is not None:
        chain.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return chain[::-1]


def main_epochs(table: Any) -> list[Epoch]:
    """``main``'s ancestry grouped by ``consistent.barrier`` into epochs; the untagged genesis is left out."""
    epochs: list[Epoch] = []
    for snapshot in ancestry(table):
        summary = _summary(snapshot)
        barrier = summary.get("consistent.barrier")
        if barrier is None:
            assert not epochs and "consistent.job" in summary, f"an untagged snapshot on main: {snapshot}"
            continue
        if epochs and epochs[-1].barrier == int(barrier):
            current = epochs[-1]
        else:
            current = Epoch(int(barrier), set(), set(), [], [])
            epochs.append(current)
        current.attempts.add(summary.get("consistent.attempt"))
        current.sources.add(summary.get("consistent.sources"))
        current.snapshot_ids.append(snapshot.snapshot_id)
        current.summaries.append(summary)
    return epochs


def word_counter(table: Any, snapshot_id: int | None) -> Counter[str]:
    if snapshot_id is None:
        return Counter()
    return Counter(table.scan(snapshot_id=snapshot_id).to_arrow().column("word").to_pylist())


def counts_at(table: Any, snapshot_id: int) -> dict[str, int]:
    rows = table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()
    counted = {r["word"]: r["cnt"] for r in rows}
    assert len(counted) == len(rows), f"a word appears twice in word_counts at snapshot {snapshot_id}: {rows}"
    return counted


def check_exactly_once(lake: SqlLake, sink: str = COUNTS, source: str = WORDS) -> list[Epoch]:
    """Every barrier once on the sink's ``main``, in order, by one staging attempt with one recorded input, and
    its content equal to a recount of the source at the input it recorded. Returns the epochs."""
    counts, words = lake.table(sink), lake.table(source)
    epochs = main_epochs(counts)
    barriers = [e.barrier for e in epochs]
    assert barriers == sorted(set(barriers)), f"a barrier twice or out of order on {sink}'s main: {barriers}"
    for epoch in epochs:
        assert len(epoch.attempts) == 1 and None not in epoch.attempts, (
            f"barrier {epoch.barrier} on main by {len(epoch.attempts)} attempts {epoch.attempts}")
        assert len(epoch.sources) == 1, f"barrier {epoch.barrier}: several recorded inputs {epoch.sources}"
        inputs = epoch.inputs()
        assert set(inputs) == {source}, inputs
        expected = dict(word_counter(words, inputs[source]))
        assert counts_at(counts, epoch.head) == expected, (
            f"barrier {epoch.barrier}: {sink} differs from a recount of {source} at snapshot {inputs[source]}")
    return epochs


def ingest_keys(table: Any) -> Counter[str]:
    """How often each ``consistent.ingest-key`` occurs on ``main``'s ancestry."""
    return Counter(k for s in ancestry(table) if (k := _summary(s).get("consistent.ingest-key")) is not None)


def staged_attempts(table: Any) -> dict[int, str | None]:
    """The snapshots ``consistent-staged`` is ahead of ``main`` by, with their attempt ids."""
    on_main = {s.snapshot_id for s in ancestry(table)}
    return {s.snapshot_id: _summary(s).get("consistent.attempt") for s in ancestry(table, "consistent-staged")
            if s.snapshot_id not in on_main}


def properties(table: Any) -> Mapping[str, str]:
    return table.metadata.properties


if __name__ == "__main__":
    code = writer_main()
    sys.stderr.flush()
    os._exit(code)  # the JVM is gone: skip Py4J's exit handlers, which would only report the closed connection
