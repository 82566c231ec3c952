"""The crash-injection driver: runs workers as processes, kills and resumes them, and checks the lake.

:class:`Harness` builds the FLIP-276 lake plus an append-mode copy of the root, ingests root epochs
between (and during) worker runs, kills workers at chosen points, after random delays and at random
commits, restarts them until they finish, and checks everything with the independent reader of
:mod:`tests.harness.crash.oracle`. Used by ``tests/integration/test_crash_recovery.py`` and
``bench/bench_reliability.py`` (through :mod:`tests.harness.crash.scenarios`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.crash.common import (
    BARRIER_STEP,
    BASE_BARRIER,
    COPY,
    CUT_GROUPS,
    EXIT_FENCED,
    JOBS,
    READ_GROUPS,
    ROWS_PER_EPOCH,
    TABLES,
    WORDS,
    open_catalog,
)
from tests.harness.crash.oracle import (
    Findings,
    RowReader,
    TableMeta,
    check_lake,
    check_latest_cuts,
    cut_problems,
    read_lake,
)

REPO = Path(__file__).resolve().parents[3]
WORKER_MODULE = "tests.harness.crash.worker"


class HarnessError(AssertionError):
    """A worker failed in a way no crash explains (a traceback, a timeout)."""


@dataclass
class WorkerRun:
    job: str
    returncode: int
    lines: list[str]
    seconds: float
    """From the worker's first step (imports and catalog open done) to its DONE line (or its exit)."""

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def fenced(self) -> bool:
        return self.returncode == EXIT_FENCED

    @property
    def done(self) -> bool:
        return self.returncode == 0

    def marker(self, kind: str) -> list[str] | None:
        for line in self.lines:
            if line.split(" ", 1)[0] == kind:
                return line.split()
        return None

    @property
    def phase(self) -> str:
        """The last step the worker began (where a random kill landed)."""
        phases = [line.split()[1] for line in self.lines if line.startswith("PHASE ")]
        return phases[-1] if phases else "startup"

    @property
    def commits(self) -> int:
        return sum(1 for line in self.lines if line.startswith("COMMIT "))

    def epochs(self) -> list[tuple[str, int, str]]:
        """(job, barrier, action) of every epoch that did work."""
        out = []
        for line in self.lines:
            parts = line.split()
            if parts and parts[0] == "EPOCH" and parts[4] != "done":
                out.append((parts[1], int(parts[2]), parts[4]))
        return out

    def describe(self) -> str:
        tail = "\n    ".join(self.lines[-25:])
        return f"worker {self.job} exited {self.returncode} after {self.seconds:.1f}s:\n    {tail}"


def run_worker(
    directory: str | Path,
    job: str,
    *,
    crash_at: str | None = None,
    pause_at: str | None = None,
    crash_after_epochs: int = 0,
    crash_at_commit: tuple[int, str] | None = None,
    kill_after: float | None = None,
    during: tuple[float, Callable[[], Any]] | None = None,
    on_paused: Callable[[], Any] | None = None,
    timeout: float = 180.0,
    extra: Sequence[str] = (),
) -> WorkerRun:
    """Run one worker process. ``kill_after``: SIGKILL it that many seconds after its first step began.

    ``during=(t, fn)`` calls ``fn`` in this process ``t`` seconds after that
    (e.g. ingest while the job runs). ``on_paused`` runs when a ``pause_at`` worker stopped itself;
    the worker is woken up (SIGCONT) afterwards.
    """
    argv = [sys.executable, "-m", WORKER_MODULE, "--dir", str(directory), "--job", job]
    if crash_at:
        argv += ["--crash-at", crash_at]
    if pause_at:
        argv += ["--pause-at", pause_at]
    if crash_after_epochs:
        argv += ["--crash-after-epochs", str(crash_after_epochs)]
    if crash_at_commit:
        argv += ["--crash-at-commit", str(crash_at_commit[0]), "--commit-side", crash_at_commit[1]]
    argv += list(extra)
    # the worker is a module of this repository: run it from the root, with the root importable
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": pythonpath}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
    output = _LinePump(proc)
    started = time.monotonic()
    try:
        while (first := output.next_line(timeout)) is not None and not first.startswith("PHASE"):
            pass  # the clock starts when the worker begins its first step (imports and catalog open done)
        started = time.monotonic()
        if first is not None:
            if during is not None and (kill_after is None or during[0] < kill_after):
                _wait(proc, during[0])
                during[1]()
            if kill_after is not None:
                _wait(proc, max(0.0, kill_after - (time.monotonic() - started)))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
            if pause_at is not None:
                while (line := output.next_line(timeout)) is not None:
                    if line.startswith("PAUSED"):
                        _wait_stopped(proc.pid)
                        try:
                            if on_paused is not None:
                                on_paused()
                        finally:
                            proc.send_signal(signal.SIGCONT)
                        break
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise HarnessError(f"worker {job} timed out after {timeout}s:\n" + "\n".join(output.all()[-30:])) from None
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise
    lines = output.all()
    seconds = (output.done_at or time.monotonic()) - started
    return WorkerRun(job, proc.returncode, lines, seconds)


class _LinePump:
    """Reads a process's output lines on a thread, so waiting for a marker never blocks a kill."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._lines: list[str] = []
        self._condition = threading.Condition()
        self._eof = False
        self._consumed = 0
        self.done_at: float | None = None
        self._thread = threading.Thread(target=self._pump, args=(proc,), name="worker-output", daemon=True)
        self._thread.start()

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._condition:
                self._lines.append(line.rstrip("\n"))
                if line.startswith("DONE"):
                    self.done_at = time.monotonic()
                self._condition.notify_all()
        proc.stdout.close()
        with self._condition:
            self._eof = True
            self._condition.notify_all()

    def next_line(self, timeout: float) -> str | None:
        """The next line not returned yet; None at end of output."""
        with self._condition:
            if not self._condition.wait_for(lambda: self._consumed < len(self._lines) or self._eof, timeout):
                raise subprocess.TimeoutExpired("worker", timeout)
            if self._consumed < len(self._lines):
                self._consumed += 1
                return self._lines[self._consumed - 1]
            return None

    def all(self) -> list[str]:
        self._thread.join(timeout=30)
        with self._condition:
            return list(self._lines)


def _wait(proc: subprocess.Popen[str], seconds: float) -> None:
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass


def _wait_stopped(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
        if state in ("T", "t"):
            return
        time.sleep(0.005)
    raise HarnessError(f"worker {pid} announced a pause but did not stop")


@dataclass
class Report:
    """What a scenario did and found (adds up across scenarios)."""

    kills: Counter[str] = field(default_factory=Counter)
    """Kills that landed, by chosen point or ``random@<phase the worker was in>``."""
    kills_missed: int = 0
    """Random kills whose timer fired after the worker had already finished (not counted as kills)."""
    pauses: int = 0
    fenced: int = 0
    """Zombie instances whose writes the catalog refused (FencedError, exit EXIT_FENCED)."""
    runs: int = 0
    resumes: int = 0
    """Clean runs of a job that had been killed (or paused and taken over) before."""
    republished: int = 0
    """Staged epochs found after a crash and published as they were (protocol §5.4)."""
    republish_expected: int = 0
    """Resumes that re-planned the barrier of a staged epoch a killed run left (so had to republish it)."""
    conflicts: int = 0
    """Epochs a worker abandoned and re-planned because main moved under them (none expected here)."""
    ingests: int = 0
    idle_advances: int = 0
    """Root watermarks advanced with no new rows (jobs then publish watermark-only epochs)."""
    checks: int = 0
    findings: Findings = field(default_factory=Findings)
    reader_cuts: int = 0
    reader_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total_kills(self) -> int:
        return sum(self.kills.values())

    @property
    def violations(self) -> list[str]:
        return self.findings.violations

    def add(self, other: Report) -> None:
        self.kills.update(other.kills)
        for name in ("kills_missed", "pauses", "fenced", "runs", "resumes", "republished", "republish_expected",
                     "conflicts", "ingests",
                     "idle_advances", "checks", "reader_cuts", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.findings.add(other.findings)
        self.reader_errors += other.reader_errors

    def summary(self) -> str:
        return (f"{self.total_kills} kills {dict(self.kills)}, {self.kills_missed} missed, {self.pauses} pauses, "
                f"{self.fenced} fenced, {self.runs} runs, {self.resumes} resumes, {self.republished} republished "
                f"({self.republish_expected} expected), {self.conflicts} conflicts, {self.ingests} ingests, "
                f"{self.idle_advances} idle advances, "
                f"{self.checks} full checks, {self.findings.epochs_checked} epoch and "
                f"{self.findings.cuts_checked + self.reader_cuts} cut checks, {len(self.violations)} violations, "
                f"{self.findings.duplicated} duplicated, {self.findings.lost} lost, "
                f"{len(self.reader_errors)} reader errors, {self.seconds:.1f}s")


class CutReader(threading.Thread):
    """Reads repeatable-read cuts in a loop while workers are being killed, and checks them.

    Each round checks (a) the latest cuts computed by the independent reader and (b) the cuts the
    project's own API hands a live reader (``cc.read``, at repeatable-read and, over the chain and
    the copy, at read-committed, where staged epochs left behind by killed workers are read), all on
    raw rows scanned by DuckDB.
    """

    def __init__(self, directory: Path, rows: RowReader, interval: float = 0.25) -> None:
        super().__init__(name="cut-reader", daemon=True)
        self.directory = directory
        self.rows = rows
        self.interval = interval
        self.stop_event = threading.Event()
        self.findings = Findings()
        self.errors: list[str] = []

    def run(self) -> None:
        from consistent_catalog import ConsistentCatalog, exceptions

        # no cut exists yet (a table without watermark; no barrier at which all tables are complete)
        no_cut = tuple(getattr(exceptions, name) for name in ("NoWatermarkError", "ResolutionError")
                       if hasattr(exceptions, name))

        try:
            cc = ConsistentCatalog(open_catalog(self.directory))
        except Exception as exc:  # noqa: BLE001 - reported, never raised in a thread
            self.errors.append(f"opening the catalog: {exc!r}")
            return
        pause = self.interval
        while not self.stop_event.wait(pause):
            started = time.monotonic()
            try:
                self.findings.add(check_latest_cuts(read_lake(self.directory), self.rows, cross_check=False))
                for level, groups in (("repeatable-read", READ_GROUPS), ("read-committed", CUT_GROUPS)):
                    for group in groups:
                        try:
                            read = cc.read(group, level=level)
                        except no_cut:
                            continue
                        tables = {n: TableMeta.load(n, read.table(n).metadata_location) for n in group}
                        ids = {n: read.cut[n].snapshot_id for n in group}
                        self.findings.violations += cut_problems(
                            tables, ids, self.rows, f"cc.read({'+'.join(n.split('.')[1] for n in group)}, {level}) "
                                                    f"at {read.cut.barrier}")
                        self.findings.cuts_checked += 1
            except Exception as exc:  # noqa: BLE001 - reported, never raised in a thread
                self.errors.append(repr(exc))
                if len(self.errors) > 20:
                    return
            # at most about half of one core: the workers being killed need the CPU more
            pause = max(self.interval, time.monotonic() - started)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=60)


class Harness:
    """One lake, its workers, its reader thread and the running report.

    >>> with Harness(tmp_path) as h:          # doctest: +SKIP
    ...     h.ingest(); h.run("word-count", crash_at="after-stage"); h.run_clean("word-count"); h.check()
    """

    def __init__(self, directory: str | Path, *, reader: bool = True, reader_interval: float = 0.25,
                 rows_per_epoch: int = ROWS_PER_EPOCH) -> None:
        from consistent_catalog import ConsistentCatalog

        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cc = ConsistentCatalog(open_catalog(self.directory))
        self.rows_per_epoch = rows_per_epoch
        self.rows = RowReader()
        self.report = Report()
        self.pending: set[str] = set()  # jobs killed and not yet resumed
        self.staged_left: dict[str, int] = {}  # sink -> barrier of the staged epoch a killed run left
        self.durations: dict[str, float] = {}
        self.commits: dict[str, int] = {}  # catalog commits of a recent clean run, per job
        self.clock = BASE_BARRIER  # the barrier of the latest root epoch (ingest or idle watermark)
        self._started = time.monotonic()
        self._create_tables()
        self.reader = CutReader(self.directory, self.rows, reader_interval) if reader else None

    def _create_tables(self) -> None:
        import pyarrow as pa

        from consistent_catalog.demo import SCHEMAS

        catalog = self.cc.catalog
        if ("demo",) not in catalog.list_namespaces():
            catalog.create_namespace("demo")
        schemas = {**SCHEMAS, COPY: pa.schema([pa.field("word", pa.string())])}
        existing = {".".join(t) for t in catalog.list_tables("demo")}
        for name in TABLES:
            if name not in existing:
                catalog.create_table(name, schema=schemas[name])

    def __enter__(self) -> Harness:
        if self.reader is not None:
            self.reader.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> Report:
        if self.reader is not None and self.reader.is_alive():
            self.reader.stop()
        if self.reader is not None:
            self.report.findings.add(Findings(violations=self.reader.findings.violations))
            self.report.reader_cuts = self.reader.findings.cuts_checked
            self.report.reader_errors = list(self.reader.errors)
            self.reader = None
        self.report.seconds = time.monotonic() - self._started
        return self.report

    # --- actions ------------------------------------------------------------------------------
    def ingest(self) -> int:
        """Append one deterministic epoch of words to the root at the next barrier."""
        from consistent_catalog.demo import epoch_words

        index = self.report.ingests
        self.clock += BARRIER_STEP
        result = self.cc.ingest(WORDS, epoch_words(index, self.rows_per_epoch), barrier=self.clock)
        self.report.ingests += 1
        return result.barrier

    def advance_root_watermark(self) -> int:
        """The root stays idle for a while: declare it complete up to the next barrier (no new rows)."""
        self.clock += BARRIER_STEP
        self.report.idle_advances += 1
        return self.cc.advance_watermark(WORDS, self.clock)

    def run(self, job: str, **options: Any) -> WorkerRun:
        """Run a worker; raise HarnessError unless it finished, was killed, or was fenced."""
        run = run_worker(self.directory, job, **options)
        self.report.runs += 1
        jobs = set(JOBS) if job == "all" else {job}
        if run.killed and run.marker("DONE") is not None:
            run.returncode = 0  # the kill hit the interpreter's shutdown after the work was done: a miss
        if run.killed:
            point = options.get("crash_at")
            if point is not None:
                crash = run.marker("CRASH")
                if crash is None or crash[1] != point:
                    raise HarnessError(f"expected a crash at {point}; {run.describe()}")
                self.report.kills[point] += 1
            elif options.get("crash_at_commit") is not None:
                crash = run.marker("CRASH")
                if crash is None:
                    raise HarnessError(f"expected a crash at a commit; {run.describe()}")
                self.report.kills[f"{crash[1]}@{run.phase}"] += 1
            else:
                self.report.kills[f"timer@{run.phase}"] += 1
            self.pending |= jobs
            self.staged_left = self._staged_ahead()
        elif run.fenced:
            self.report.fenced += 1
        elif run.done:
            if options.get("kill_after") is not None or options.get("crash_at_commit") is not None:
                self.report.kills_missed += 1
            if options.get("crash_at") is not None:
                raise HarnessError(f"the crash point {options['crash_at']} was never reached; {run.describe()}")
            self.report.resumes += len(self.pending & jobs)
            self.pending -= jobs
            self.report.republished += sum(1 for _, _, action in run.epochs() if action == "republished")
            self.report.conflicts += sum(1 for _, _, action in run.epochs() if action == "conflict")
            self._check_republished(run, jobs)
            previous = self.durations.get(job)
            self.durations[job] = run.seconds if previous is None else 0.7 * previous + 0.3 * run.seconds
            self.commits[job] = max(run.commits, self.commits.get(job, 0) // 2)
        else:
            raise HarnessError(run.describe())
        return run

    def _staged_ahead(self) -> dict[str, int]:
        """Sinks whose ``consistent-staged`` holds an unpublished epoch, with that epoch's barrier."""
        found = {}
        for name, table in read_lake(self.directory).items():
            staged, main = table.refs.get("consistent-staged"), table.refs.get("main")
            if staged is None or staged == main:
                continue
            if main is not None and main not in {s["snapshot-id"] for s in table.chain("consistent-staged")}:
                continue
            barrier = table.snapshots[staged].get("summary", {}).get("consistent.barrier")
            if barrier is not None:
                found[name] = int(barrier)
        return found

    def _check_republished(self, run: WorkerRun, jobs: set[str]) -> None:
        """Protocol §5.4: a staged epoch left by a killed instance, re-planned at the same barrier (hence the
        same inputs), must be published as it is, not recomputed."""
        for job, barrier, action in run.epochs():
            sink = JOBS[job][1]
            if action == "conflict":  # main moved under the epoch: it re-plans, nothing was decided
                continue
            if self.staged_left.get(sink) == barrier:
                self.report.republish_expected += 1
                if action != "republished":
                    self.violation(f"{sink}: the epoch staged at barrier {barrier} by a killed instance was "
                                   f"re-planned at the same barrier but {action}, not published as it was (protocol §5.4)")
        for job in jobs:
            self.staged_left.pop(JOBS[job][1], None)

    def run_clean(self, job: str, **options: Any) -> WorkerRun:
        run = self.run(job, **options)
        if not run.done:
            raise HarnessError(f"expected a clean run; {run.describe()}")
        return run

    def check(self, *, caught_up: Iterable[str] = ()) -> Findings:
        found = check_lake(self.directory, self.rows, caught_up=caught_up)
        self.report.findings.add(found)
        self.report.checks += 1
        return found

    def violation(self, message: str) -> None:
        self.report.findings.violations.append(message)

