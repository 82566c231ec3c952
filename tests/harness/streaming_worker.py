"""A streaming lake in one Spark application, killed with SIGKILL where it is told; its driver and independent reader.

Worker (a process; run from the repository root)::

    python -m tests.harness.streaming_worker --dir D [--trigger 0.5] [--crash-at POINT [--crash-after N]]
                                             [--crash-job copy|word-count|count-histogram] [--max-seconds S]
                                             [--native-root | --native]

It opens the SQLite catalog at ``D`` and runs, in one local[2] Spark application, three streaming
queries with their checkpoints under ``D/checkpoints``:

- ``events``: Spark's file source over ``D/incoming`` (JSON lines ``{"file", "line", "word"}``) into
  the root ``s.events`` through ``start_root_stream`` (processing-time barriers), or with ``--native-root``
  through the plugin's streaming sink (``toTable("lake_consistent.s.events")``, no Python in the path; its
  crash points are the JVM's failpoints, ``NATIVE_POINTS``); with ``--native`` the two jobs below are plain
  streaming queries through ``lake_consistent`` too (``readStream.table`` ... ``toTable`` with the option
  ``consistent.job``: append mode for ``copy``, complete mode for ``word-count``), and a third hop runs:
  ``count-histogram``, ``s.word_counts``' changes counted by ``cnt`` with a sign in update output mode with
  ``consistent.deleteWhere`` into the keyed ``s.count_histogram`` (``streaming_demo.start_native_histogram``; the
  lake made by ``create_lake(native=True)``); the plugin's job failpoints stop the epochs of ``--crash-job``'s
  sink only (``CONSISTENT_FAILPOINT_TABLE``), the root's the root's;
- ``copy``: a streaming epoch job appending the rows new in ``s.events`` to ``s.events_copy``
  (``incremental=True``: a doubled epoch doubles rows);
- ``word-count``: a streaming epoch job overwriting ``s.word_counts`` with the counts of ``s.events``.

Jobs are started without ``takeover``: after a kill the restart takes over from the instance its
own checkpoint recorded. The worker exits 0 (``DONE``) once the consistent cut over the three
tables holds every line of every file in ``D/incoming`` and the queries stopped cleanly.

Crash points (monkeypatched in this process only, never in ``src/``); each SIGKILLs the whole
process group, the Spark JVM included:

- ``root-before-commit``: a micro-batch reached the root writer, nothing written yet;
- ``root-during-publish``: inside the catalog commit that publishes the batch's staged snapshot
  (metadata file written, catalog row not swapped);
- ``root-after-commit``: the batch landed in the catalog; Spark has not written its commit log
  (between the commit and the checkpoint);
- ``job-before-stage``: a job's epoch planned, nothing staged;
- ``job-during-publish``: inside the job's fenced publish commit (metadata written, not swapped);
- ``job-after-publish``: the epoch is published; the micro-batch is not committed in the checkpoint.

The driver side (:func:`run_worker`, :func:`feed`) and the independent reader (:func:`check_lake`:
plain pyiceberg scans and metadata, Spark's own checkpoint logs) are used by
``tests/spark/test_streaming.py`` and ``bench/bench_streaming.py``.

Module-level imports are standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVENTS, COPY, COUNTS, HISTOGRAM = "s.events", "s.events_copy", "s.word_counts", "s.count_histogram"
TABLES = (EVENTS, COPY, COUNTS)
NATIVE_TABLES = (*TABLES, HISTOGRAM)
JOBS = {"copy": (COPY, "append", "SELECT file, line, word FROM events", True),
        "word-count": (COUNTS, "overwrite", "SELECT word, count(*) AS cnt FROM events GROUP BY word", False)}
POINTS = ("root-before-commit", "root-during-publish", "root-after-commit",
          "job-before-stage", "job-during-publish", "job-after-publish")
NATIVE_POINTS = {"root-before-commit": "before-ingest", "root-after-commit": "after-ingest",
                 "job-before-stage": "before-stage", "job-after-stage": "after-stage", "job-after-publish": "after-publish"}
"""The crash points the plugin has (``--native-root``: the root's; ``--native``: also the jobs', at the epochs of the
job ``--crash-job`` names), by its failpoint names (jvm/.../Failpoints.java)."""
NATIVE_JOBS = {"copy": COPY, "word-count": COUNTS, "count-histogram": HISTOGRAM}
"""The native pipeline's jobs and their sinks (``--native``; ``count-histogram``, the third hop, only there)."""
EVENT_COLUMNS = "file string, line int, word string"
VOCABULARY = [f"w{i:02d}" for i in range(40)]
REPO = Path(__file__).resolve().parents[2]
MODULE = "tests.harness.streaming_worker"
EXIT_GAVE_UP = 2


def _emit(*parts: object) -> None:
    print(" ".join(str(p) for p in parts), flush=True)


def open_catalog(directory: str | Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    root = Path(directory).resolve()
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    return SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")


def create_lake(directory: str | Path, *, native: bool = False) -> None:
    """The three tables (pyiceberg) and the watched directory; ``native`` (a lake for ``--native``): also
    ``s.count_histogram`` (``cnt bigint NOT NULL``, its identifier field, ``words bigint``), the third hop's sink
    that update output mode merges into, and ``s.word_counts.cnt`` is ``NOT NULL`` so the key it groups by cannot
    be null (the shape of ``consistent-catalog demo --streaming``'s native tables). The Python jobs' lake keeps
    ``cnt`` nullable, as it always was."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    catalog = open_catalog(directory)
    catalog.create_namespace("s")
    events = pa.schema([pa.field("file", pa.string()), pa.field("line", pa.int32()), pa.field("word", pa.string())])
    catalog.create_table(EVENTS, schema=events)
    catalog.create_table(COPY, schema=events)
    catalog.create_table(COUNTS, schema=pa.schema([pa.field("word", pa.string()),
                                                   pa.field("cnt", pa.int64(), nullable=not native)]))
    if native:
        catalog.create_table(HISTOGRAM, schema=Schema(
            NestedField(1, "cnt", LongType(), required=True), NestedField(2, "words", LongType(), required=False),
            identifier_field_ids=[1]))
    (Path(directory) / "incoming").mkdir(parents=True, exist_ok=True)
    catalog.engine.dispose()


def feed(directory: str | Path, index: int, rows: int = 10) -> Path:
    """Write input file ``index`` (``rows`` lines, deterministic words) atomically into ``D/incoming``."""
    rng = random.Random(index)
    name = f"part-{index:05d}.json"
    incoming = Path(directory) / "incoming"
    temporary = incoming / f".{name}.tmp"
    lines = [json.dumps({"file": name, "line": i, "word": rng.choice(VOCABULARY)}) for i in range(rows)]
    temporary.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(temporary, incoming / name)
    return incoming / name


def fed(directory: str | Path) -> dict[tuple[str, int], str]:
    """Every (file, line) -> word written into ``D/incoming`` so far."""
    out = {}
    for path in sorted((Path(directory) / "incoming").glob("part-*.json")):
        for text in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(text)
            out[(row["file"], row["line"])] = row["word"]
    return out


# --- the worker --------------------------------------------------------------------------------------


class _Injector:
    def __init__(self, point: str | None, after: int, job: str) -> None:
        self.point, self.after, self.job = point, after, job
        self.hits: Counter[str] = Counter()
        self.inside: str | None = None

    def hit(self, point: str, detail: object = "") -> None:
        if point != self.point:
            return
        self.hits[point] += 1
        if self.hits[point] > self.after:
            _emit("CRASH", point, detail)
            os.killpg(os.getpgid(0), signal.SIGKILL)  # the Spark JVM dies with us, as on a lost machine

    def install(self, catalog: Any) -> None:
        from consistent_catalog.spark import streaming
        from consistent_catalog.spark.job import SparkEpochJob

        injector = self
        ingest = streaming.ingest_dataframe

        def patched_ingest(cc: Any, frame: Any, table: str, **kwargs: Any) -> Any:
            injector.hit("root-before-commit", kwargs.get("key"))
            injector.inside = "root"
            try:
                result = ingest(cc, frame, table, **kwargs)
            finally:
                injector.inside = None
            _emit("BATCH", kwargs.get("key"), "skipped" if result.skipped else "landed", result.snapshot_id, result.barrier)
            if not result.skipped:
                injector.hit("root-after-commit", kwargs.get("key"))
            return result

        stage, publish = SparkEpochJob.stage, SparkEpochJob.publish

        def patched_stage(job: Any, sink: str, plan: Any, data: Any) -> Any:
            if job.job == injector.job:
                injector.hit("job-before-stage", plan.barrier)
            return stage(job, sink, plan, data)

        def patched_publish(job: Any, sink: str, plan: Any, main_head: Any, staged_head: Any, **options: Any) -> Any:
            injector.inside = "publish" if job.job == injector.job else None
            try:
                head = publish(job, sink, plan, main_head, staged_head, **options)
            finally:
                injector.inside = None
            if job.job == injector.job:
                injector.hit("job-after-publish", plan.barrier)
            return head

        write_metadata = catalog._write_metadata

        def patched_write_metadata(metadata: Any, io: Any, metadata_path: str) -> None:
            write_metadata(metadata, io, metadata_path)
            if injector.inside == "root":
                injector.hit("root-during-publish", metadata_path)
            elif injector.inside == "publish":
                injector.hit("job-during-publish", metadata_path)

        streaming.ingest_dataframe = patched_ingest
        SparkEpochJob.stage = patched_stage
        SparkEpochJob.publish = patched_publish
        catalog._write_metadata = patched_write_metadata


def worker_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the streaming lake until caught up (see the module docstring).")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--trigger", type=float, default=0.5, help="seconds between micro-batches")
    parser.add_argument("--crash-at", choices=sorted(set(POINTS) | set(NATIVE_POINTS)))
    parser.add_argument("--crash-after", type=int, default=0, help="let the point pass N times, kill at the next")
    parser.add_argument("--crash-job", choices=tuple(NATIVE_JOBS), default="copy",
                        help="the job whose epochs the job- points stop (count-histogram: --native only)")
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--stay", action="store_true", help="never finish on its own: run until killed (or --max-seconds)")
    parser.add_argument("--native-root", action="store_true",
                        help="the events query writes through lake_consistent (the JVM sink), not start_root_stream")
    parser.add_argument("--native", action="store_true",
                        help="all three queries through lake_consistent: the root, and the jobs as plain streaming "
                             "queries (readStream.table ... toTable with the option consistent.job)")
    args = parser.parse_args(argv)
    directory = Path(args.dir).resolve()
    args.native_root = args.native_root or args.native
    if args.native_root and args.crash_at in NATIVE_POINTS:
        # the JVM sink's failpoints (jvm/.../Failpoints.java): SIGKILL of the whole group, as the Python points do
        # CONSISTENT_FAILPOINT_TABLE: the point stops only the writes into that table (the root's, or --crash-job's sink)
        os.environ.update({"CONSISTENT_FAILPOINT": NATIVE_POINTS[args.crash_at], "CONSISTENT_FAILPOINT_ACTION": "kill-group",
                           "CONSISTENT_FAILPOINT_AFTER": str(args.crash_after),
                           "CONSISTENT_FAILPOINT_TABLE": EVENTS if args.crash_at.startswith("root-")
                           else NATIVE_JOBS[args.crash_job]})

    from consistent_catalog import ConsistentCatalog
    from consistent_catalog.spark.job import SparkEpochJob
    from consistent_catalog.spark.session import build_session
    from consistent_catalog.spark.streaming import start_root_stream, start_streaming_job
    from consistent_catalog.spark.streaming_demo import start_native_histogram

    cc = ConsistentCatalog(open_catalog(directory))
    injector = _Injector(args.crash_at, args.crash_after, args.crash_job)
    injector.install(cc.catalog)
    # a driver that lives seconds (most runs are killed): the client compiler only and the serial collector, as the
    # SQL writers' drivers (tests/harness/sql_writer.py DRIVER_CONF): it starts sooner and leaves the cores to Spark
    spark = build_session(f"sqlite:///{directory}/catalog.db", f"file://{directory}/warehouse",
                          app_name="streaming-worker", extra_conf={
                              "spark.driver.memory": "768m",
                              "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    trigger = args.trigger
    checkpoints = directory / "checkpoints"
    _emit("STARTED", os.getpid())
    queries: list[Any] = []
    try:
        source = spark.readStream.schema(EVENT_COLUMNS).json(str(directory / "incoming"))
        if args.native_root:
            queries.append(source.writeStream.queryName("events").option("checkpointLocation", str(checkpoints / "events"))
                           .trigger(processingTime=f"{trigger} seconds").toTable(f"lake_consistent.{EVENTS}"))
        else:
            queries.append(start_root_stream(source, cc, EVENTS, checkpoint_location=str(checkpoints / "events"),
                                             trigger=trigger, idle_after=None))
        for name, (sink, mode, sql, incremental) in JOBS.items():
            if args.native:
                events = spark.readStream.table(f"lake_consistent.{EVENTS}")
                frame = (events.select("file", "line", "word") if name == "copy"
                         else events.groupBy("word").count().withColumnRenamed("count", "cnt"))
                queries.append(frame.writeStream.queryName(name).outputMode("append" if name == "copy" else "complete")
                               .option("checkpointLocation", str(checkpoints / name)).option("consistent.job", name)
                               .trigger(processingTime=f"{trigger} seconds").toTable(f"lake_consistent.{sink}"))
                continue
            job = SparkEpochJob(cc, spark, name, sources=[EVENTS], sinks=[sink], transform=sql, mode=mode,
                                incremental=incremental)
            queries.append(start_streaming_job(
                job, checkpoint_location=str(checkpoints / name), trigger=trigger,
                on_epoch=lambda r: r.did_work and _emit("EPOCH", r.job, r.barrier, *sorted(r.actions.values())),
            ))
        if args.native:  # the third hop: word_counts' changes counted by cnt, merged into the keyed histogram
            queries.append(start_native_histogram(spark, "lake_consistent", checkpoint=str(checkpoints / "count-histogram"),
                                                  trigger=f"{trigger} seconds", wait_ms=int(trigger * 800),
                                                  source=COUNTS, sink=HISTOGRAM))
        _emit("RUNNING", *(q.id for q in queries))
        deadline = time.monotonic() + args.max_seconds
        cut: Any = None
        while cut is None:
            if time.monotonic() > deadline:
                _emit("GAVE-UP", args.max_seconds)
                return EXIT_GAVE_UP
            for query in queries:
                if not query.isActive:
                    _emit("FAILED", query.name, " ".join(str(query.exception()).split())[:4000])
                    return 1
            if args.stay:  # a run that is to be killed has no cut to wait for: leave the cores to Spark
                time.sleep(0.3)
                continue
            lines = len(fed(directory))
            try:
                read = cc.read(NATIVE_TABLES if args.native else TABLES)
            except Exception:  # no cut yet (a job has not published)
                read = None
            if read is not None and read.to_arrow(EVENTS).num_rows == lines:
                cut = read.cut
            time.sleep(0.3)
        for query in reversed(queries):
            query.stop()
        _emit("DONE", json.dumps(cut.to_json()))
        return 0
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
        spark.stop()


# --- the driver --------------------------------------------------------------------------------------


@dataclass
class WorkerRun:
    returncode: int
    lines: list[str]
    seconds: float

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def done(self) -> bool:
        return self.returncode == 0

    def marker(self, kind: str) -> list[list[str]]:
        return [line.split() for line in self.lines if line.split(" ", 1)[0] == kind]

    def describe(self) -> str:
        tail = "\n    ".join(self.lines[-30:])
        return f"streaming worker exited {self.returncode} after {self.seconds:.1f}s:\n    {tail}"


def run_worker(
    directory: str | Path,
    *,
    crash_at: str | None = None,
    crash_after: int = 0,
    crash_job: str = "copy",
    kill_after: float | None = None,
    trigger: float = 0.5,
    feed_every: float | None = None,
    feed_from: int | None = None,
    rows: int = 10,
    stay: bool = False,
    native_root: bool = False,
    native: bool = False,
    timeout: float = 300.0,
) -> WorkerRun:
    """Run one worker process in its own process group; ``kill_after``: SIGKILL the group that many
    seconds after its queries started. ``feed_every``: write a new input file that often while it runs
    (numbered from ``feed_from``, default the next free index). ``stay``: the worker never finishes on
    its own (for runs that are to be killed)."""
    argv = [sys.executable, "-m", MODULE, "--dir", str(directory), "--trigger", str(trigger),
            "--max-seconds", str(timeout - 30)]
    if stay:
        argv.append("--stay")
    if native_root:
        argv.append("--native-root")
    if native:
        argv.append("--native")
    if crash_at:
        argv += ["--crash-at", crash_at, "--crash-after", str(crash_after), "--crash-job", crash_job]
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": pythonpath}
    from tests.harness.crash.driver import _LinePump

    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO,
                            start_new_session=True)
    output = _LinePump(proc)
    stop_feeding = threading.Event()
    feeder: threading.Thread | None = None
    try:
        while (line := output.next_line(timeout)) is not None and not line.startswith("RUNNING"):
            pass
        running_at = time.monotonic()
        if feed_every is not None:
            first = len(list((Path(directory) / "incoming").glob("part-*.json"))) if feed_from is None else feed_from

            def feeding() -> None:
                index = first
                while not stop_feeding.wait(feed_every):
                    feed(directory, index, rows)
                    index += 1

            feeder = threading.Thread(target=feeding, daemon=True)
            feeder.start()
        if kill_after is not None and line is not None:
            try:
                proc.wait(timeout=max(0.0, kill_after - (time.monotonic() - running_at)))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError("streaming worker timed out:\n" + "\n".join(output.all()[-40:])) from None
    finally:
        stop_feeding.set()
        if feeder is not None:
            feeder.join()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        _reap_group(proc.pid)
    return WorkerRun(proc.returncode, output.all(), time.monotonic() - started)


def _reap_group(pgid: int) -> None:
    """Make sure nothing of a killed worker's group (the JVM) outlives it."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    time.sleep(0.2)


# --- the independent reader -----------------------------------------------------------------------


def spark_file_log(checkpoint: Path) -> tuple[str, dict[int, list[str]], set[int]]:
    """Spark's own record of the events query, read from its checkpoint files: the query id, the input
    files of each micro-batch id and the micro-batch ids Spark committed.

    The file source keeps its own log of discovered files (``sources/0``, compacted every 10 entries)
    whose entry numbers are not micro-batch ids (a crash after the file source logged new files and
    before Spark logged the batch's offsets shifts them); the offsets log (``offsets/N``: the source's
    log offset that ends micro-batch N) maps them: batch N holds the entries after batch N-1's end up
    to its own. Batches whose predecessor's offsets were purged (Spark keeps the last 100) are left out.
    """
    query_id = json.loads((checkpoint / "metadata").read_text(encoding="utf-8"))["id"]
    logged: dict[int, list[str]] = {}
    for entry in (checkpoint / "sources" / "0").glob("*"):
        if entry.name.startswith("."):
            continue
        for text in entry.read_text(encoding="utf-8").splitlines()[1:]:  # first line: the log version
            record = json.loads(text)
            name = record["path"].rsplit("/", 1)[-1]
            if name not in logged.setdefault(int(record["batchId"]), []):
                logged[int(record["batchId"])].append(name)
    ends: dict[int, int] = {}
    for entry in (checkpoint / "offsets").glob("*"):
        if entry.name.isdigit():
            lines = entry.read_text(encoding="utf-8").splitlines()  # version, batch metadata, one offset per source
            ends[int(entry.name)] = int(json.loads(lines[2])["logOffset"])
    files: dict[int, list[str]] = {}
    for batch, end in ends.items():
        start = -1 if batch == 0 else ends.get(batch - 1)
        if start is not None:
            files[batch] = [name for offset in range(start + 1, end + 1) for name in logged.get(offset, [])]
    committed = {int(p.name) for p in (checkpoint / "commits").glob("*") if p.name.isdigit()}
    return query_id, files, committed


def _main_chain(table: Any) -> list[Any]:
    """``main``'s ancestry, oldest first (pyiceberg metadata only)."""
    out = []
    snapshot = table.metadata.snapshot_by_name("main")
    while snapshot is not None:
        out.append(snapshot)
        snapshot = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return out[::-1]


def _summary(snapshot: Any) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties) | {"operation": snapshot.summary.operation.value}


def check_lake(directory: str | Path, *, complete: bool) -> dict[str, Any]:
    """Check the streaming lake with plain pyiceberg and Spark's checkpoint files; returns findings.

    ``problems`` lists every violation: a batch id or row landed twice, a batch Spark committed that
    did not land, a landed batch whose row count differs from its files' lines, a derived table that
    is not exactly its recorded input, a barrier published twice; with ``complete``, a fed row that
    is missing anywhere.
    """
    directory = Path(directory)
    catalog = open_catalog(directory)
    problems: list[str] = []
    rows_fed = fed(directory)
    lines_per_file = Counter(f for f, _ in rows_fed)
    query_id, batch_files, committed = spark_file_log(directory / "checkpoints" / "events")

    # the root: one snapshot per batch id, with the batch's rows, under the stable query id
    events = catalog.load_table(EVENTS)
    landed: dict[int, int] = {}
    for snapshot in _main_chain(events):
        summary = _summary(snapshot)
        key = summary.get("consistent.ingest-key")
        if key is None:
            continue
        query, _, batch = key.rpartition("/")
        if query != query_id:
            problems.append(f"{EVENTS}: key {key} is not of the checkpoint's query {query_id}")
        if int(batch) in landed:
            problems.append(f"{EVENTS}: batch {batch} landed twice (snapshots {landed[int(batch)]}, {snapshot.snapshot_id})")
        landed[int(batch)] = snapshot.snapshot_id
        if int(batch) not in batch_files:
            continue  # its offsets were purged from the checkpoint: its row count cannot be checked
        expected = sum(lines_per_file[f] for f in batch_files[int(batch)])
        if int(summary.get("added-records", "0")) != expected:
            problems.append(f"{EVENTS}: batch {batch} added {summary.get('added-records')} rows, its files hold {expected}")
    for batch in sorted(committed):
        if batch_files.get(batch) and batch not in landed:
            problems.append(f"{EVENTS}: Spark committed batch {batch} ({batch_files[batch]}) but it never landed")
    head = events.metadata.snapshot_by_name("main")
    event_rows = events.scan(snapshot_id=head.snapshot_id).to_arrow().to_pylist() if head else []
    keys = Counter((r["file"], r["line"]) for r in event_rows)
    doubled = [k for k, n in keys.items() if n > 1]
    if doubled:
        problems.append(f"{EVENTS}: {len(doubled)} rows landed more than once, e.g. {doubled[:3]}")
    unknown = [k for k in keys if k not in rows_fed]
    if unknown:
        problems.append(f"{EVENTS}: rows nobody fed: {unknown[:3]}")
    if complete and set(keys) != set(rows_fed):
        problems.append(f"{EVENTS}: {len(set(rows_fed) - set(keys))} fed rows missing")

    # derived tables: exactly their recorded input; each barrier published once
    epochs: dict[str, int] = {}
    for name in (COPY, COUNTS):
        table = catalog.load_table(name)
        chain = _main_chain(table)
        attempts: dict[int, set[str]] = {}
        for snapshot in chain:
            summary = _summary(snapshot)
            if "consistent.barrier" in summary:
                attempts.setdefault(int(summary["consistent.barrier"]), set()).add(summary.get("consistent.attempt", "?"))
        twice = {b: a for b, a in attempts.items() if len(a) > 1}
        if twice:
            problems.append(f"{name}: barriers published by more than one attempt: {twice}")
        epochs[name] = len(attempts)
        if not chain or "consistent.sources" not in _summary(chain[-1]):
            continue
        recorded = json.loads(_summary(chain[-1])["consistent.sources"])[EVENTS]
        source_rows = events.scan(snapshot_id=recorded).to_arrow().to_pylist() if recorded else []
        rows = table.scan(snapshot_id=chain[-1].snapshot_id).to_arrow().to_pylist()
        if name == COPY:
            copied = Counter((r["file"], r["line"], r["word"]) for r in rows)
            expected_rows = Counter((r["file"], r["line"], r["word"]) for r in source_rows)
            if copied != expected_rows:
                extra, missing = copied - expected_rows, expected_rows - copied
                problems.append(f"{COPY}: not its input: {sum(extra.values())} extra (doubled epoch?), "
                                f"{sum(missing.values())} missing")
        else:
            counts = {r["word"]: r["cnt"] for r in rows}
            if counts != dict(Counter(r["word"] for r in source_rows)):
                problems.append(f"{COUNTS}: not the count of its input snapshot {recorded}")
        if complete and recorded != (head.snapshot_id if head else None):
            problems.append(f"{name}: caught up to {recorded}, not to {EVENTS}'s head {head and head.snapshot_id}")
    if catalog.table_exists(HISTOGRAM):  # a native lake: the third hop
        epochs[HISTOGRAM] = _check_histogram(catalog, catalog.load_table(COUNTS), catalog.load_table(HISTOGRAM),
                                             problems, complete=complete)
    catalog.engine.dispose()
    return {"problems": problems, "batches_landed": len(landed), "batches_committed": len(committed),
            "rows": len(keys), "rows_fed": len(rows_fed), "epochs": epochs, "query_id": query_id}


_SCANS: dict[tuple[str, int], list[dict[str, Any]]] = {}
"""Rows of a snapshot, by (table location, snapshot id): snapshots never change, and check_lake runs after every kill."""


def _rows_at(table: Any, snapshot_id: int | None) -> list[dict[str, Any]]:
    if snapshot_id is None:
        return []
    key = (table.metadata.location, snapshot_id)
    if key not in _SCANS:
        _SCANS[key] = table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()
    return _SCANS[key]


def _check_histogram(catalog: Any, counts: Any, histogram: Any, problems: list[str], *, complete: bool) -> int:
    """Every published epoch of ``s.count_histogram`` (the last snapshot of each barrier on ``main``) is the histogram
    recounted here from ``snap(s.word_counts, T)`` at the epoch's barrier ``T`` (the last ``word_counts`` snapshot on
    ``main`` with a barrier at or below ``T``): {cnt: how many words have that count}, no bucket at 0 words (update
    mode deletes them) nor below; each barrier published by one attempt only. ``complete``: the last epoch read
    ``word_counts``' head. Returns the number of epochs."""
    published: dict[int, Any] = {}  # barrier -> the epoch's last snapshot (an update-mode epoch may commit several)
    attempts: dict[int, set[str]] = {}
    for snapshot in _main_chain(histogram):
        summary = _summary(snapshot)
        if "consistent.barrier" in summary:
            barrier = int(summary["consistent.barrier"])
            published[barrier] = snapshot
            attempts.setdefault(barrier, set()).add(summary.get("consistent.attempt", "?"))
    twice = {b: a for b, a in attempts.items() if len(a) > 1}
    if twice:
        problems.append(f"{HISTOGRAM}: barriers published by more than one attempt: {twice}")
    counts_chain = [(int(_summary(s)["consistent.barrier"]), s.snapshot_id) for s in _main_chain(counts)
                    if "consistent.barrier" in _summary(s)]
    for barrier, snapshot in sorted(published.items()):
        source = None  # the chain's barriers never decrease: the last snapshot at or below T is snap(word_counts, T)
        for at, snapshot_id in counts_chain:
            if at <= barrier:
                source = snapshot_id
        expected = Counter(r["cnt"] for r in _rows_at(counts, source))
        got = _rows_at(histogram, snapshot.snapshot_id)
        buckets = Counter(r["cnt"] for r in got)
        if any(n > 1 for n in buckets.values()):
            problems.append(f"{HISTOGRAM}: epoch {barrier} holds a cnt twice: {[c for c, n in buckets.items() if n > 1]}")
        bad = [r for r in got if r["words"] is None or r["words"] <= 0]
        if bad:
            problems.append(f"{HISTOGRAM}: epoch {barrier} holds buckets at 0 words or below: {bad[:3]}")
        histogram_rows = {r["cnt"]: r["words"] for r in got}
        if histogram_rows != dict(expected):
            recorded = json.loads(_summary(snapshot).get("consistent.sources", "{}")).get(COUNTS)
            problems.append(f"{HISTOGRAM}: epoch {barrier} (snapshot {snapshot.snapshot_id}, read {COUNTS} snapshot "
                            f"{recorded}) is {sorted(histogram_rows.items())}, the recount of snap({COUNTS}, {barrier}) "
                            f"= snapshot {source} is {sorted(expected.items())}")
    if complete:
        head = counts.metadata.snapshot_by_name("main")
        last = published[max(published)] if published else None
        recorded = json.loads(_summary(last).get("consistent.sources", "{}")).get(COUNTS) if last else None
        if head is not None and recorded != head.snapshot_id:
            problems.append(f"{HISTOGRAM}: caught up to {COUNTS} snapshot {recorded}, not to its head {head.snapshot_id}")
        final = {r["cnt"]: r["words"] for r in _rows_at(histogram, last.snapshot_id)} if last else {}
        if head is not None and final != dict(Counter(r["cnt"] for r in _rows_at(counts, head.snapshot_id))):
            problems.append(f"{HISTOGRAM}: the final histogram is not the recount of {COUNTS}' head")
    return len(published)


if __name__ == "__main__":
    sys.exit(worker_main())
