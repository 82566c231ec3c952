"""Epochs by configuration: SQL files run by stock ``spark-sql`` processes over the consistent catalog.

A write through ``lake_consistent`` is an epoch of the job ``spark.sql.consistent.job`` names (protocol §5.9);
the catalog plugin prints one line per write statement on the driver's stderr (``[lake_consistent] word-count:
demo.word_counts barrier ... published (...)``). ``FLIP_PIPELINE_SQL`` is FLIP-276's pipeline written that way
(shipped in the package; a checkout's ``spark-conf/flip-pipeline.sql`` links to it), and ``run_spark_sql`` runs
a SQL file as ``spark-sql --properties-file F -f FILE``, a process of its own, with the ``spark-sql`` of this
Python's environment, returning those lines::

    from consistent_catalog.spark.sql_pipeline import FLIP_PIPELINE_SQL, run_spark_sql
    run = run_spark_sql("spark-defaults.conf", FLIP_PIPELINE_SQL).check()
    print(run.reports)
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from consistent_catalog.exceptions import ConsistentCatalogError, NotInstalledError

FLIP_PIPELINE_SQL = Path(__file__).resolve().with_name("flip_pipeline.sql")
"""FLIP-276's two jobs (word-count, count-histogram) as ``INSERT OVERWRITE ... SELECT`` through ``lake_consistent``."""

#: An error as Spark's CLI prints it: ``[ERROR_CLASS] message`` (the consistent catalog's, Spark's own), or a
#: Java exception's first line.
_ERROR_LINE = re.compile(r"^\[[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*\] |^Error in query|^[\w.$]+(Exception|Error): ")


def find_spark_sql() -> str:
    """The ``spark-sql`` launcher of this Python's environment (pyspark installs it next to the interpreter),
    else the first one on ``PATH``."""
    beside = Path(sys.executable).parent / "spark-sql"
    if beside.is_file():
        return str(beside)
    found = shutil.which("spark-sql")
    if found is None:
        raise NotInstalledError(
            f"no spark-sql next to {sys.executable} nor on PATH; install the Spark extra: "
            "pip install 'consistent-catalog[spark]'"
        )
    return found


def spark_sql_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a ``spark-sql`` launcher needs: this interpreter's ``bin`` first on ``PATH`` (its launcher
    looks for pyspark with the ``python3`` there), ``SPARK_HOME`` at the installed pyspark, ``PYSPARK_PYTHON``."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    if "SPARK_HOME" not in env:
        try:
            import pyspark
        except ImportError:
            pass
        else:
            env["SPARK_HOME"] = str(Path(pyspark.__file__).parent)
    return env


@dataclass(frozen=True)
class SparkSqlRun:
    """One ``spark-sql -f`` process: its command, exit status, output, and how long it took."""

    command: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    catalog: str = "lake_consistent"

    @property
    def reports(self) -> list[str]:
        """The consistent catalog's lines, one per write statement, in order (``[lake_consistent] job: ...``)."""
        prefix = f"[{self.catalog}] "
        return [line for line in self.stderr.splitlines() if line.startswith(prefix)]

    @property
    def error(self) -> str | None:
        """The first error line Spark printed (``[CONSISTENT_WRITE.REFUSED] ...``), or None."""
        return next((line for line in self.stderr.splitlines() if _ERROR_LINE.search(line)), None)

    def check(self) -> SparkSqlRun:
        """This run, or ``ConsistentCatalogError`` with Spark's error line when the process failed."""
        if self.returncode != 0:
            tail = [line for line in self.stderr.splitlines() if line.strip() and " WARN " not in line][-3:]
            raise ConsistentCatalogError(
                f"spark-sql -f {self.command[-1]} exited {self.returncode} after {self.seconds:.1f} s: "
                f"{self.error or ' | '.join(tail) or 'no error printed'}"
            )
        return self


def run_spark_sql(
    properties: str | os.PathLike[str],
    sql_file: str | os.PathLike[str] = FLIP_PIPELINE_SQL,
    *,
    conf: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    on_report: Callable[[str], object] | None = None,
    catalog: str = "lake_consistent",
) -> SparkSqlRun:
    """Run ``spark-sql --properties-file PROPERTIES -S -f SQL_FILE`` (plus ``--conf k=v`` for ``conf``) and wait.

    ``on_report`` is called with each of the consistent catalog's lines as the process prints it. The process
    runs in a session of its own; on a timeout (or an interrupt) its whole group is killed and the error raised.
    The exit status is returned, not checked: ``.check()`` raises on a failure.
    """
    command = [find_spark_sql(), "--properties-file", str(properties), "-S"]
    for key, value in (conf or {}).items():
        command += ["--conf", f"{key}={value}"]
    command += ["-f", str(sql_file)]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               text=True, env=spark_sql_env(), cwd=cwd, start_new_session=True)
    stdout: list[str] = []
    stderr: list[str] = []
    prefix = f"[{catalog}] "

    def read(stream: IO[str], into: list[str], report: bool) -> None:
        for line in stream:
            into.append(line)
            if report and on_report is not None and line.startswith(prefix):
                on_report(line.rstrip("\n"))

    readers = [threading.Thread(target=read, args=(process.stdout, stdout, False), daemon=True),
               threading.Thread(target=read, args=(process.stderr, stderr, True), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise ConsistentCatalogError(f"spark-sql -f {sql_file} did not finish within {timeout:.0f} s; killed it") from None
    except BaseException:  # Ctrl-C: no Spark JVM left behind
        _kill_group(process)
        raise
    finally:
        for reader in readers:
            reader.join(timeout=10)
    return SparkSqlRun(tuple(command), process.returncode, "".join(stdout), "".join(stderr),
                       time.monotonic() - started, catalog)


def _kill_group(process: subprocess.Popen[str], grace: float = 15.0) -> None:
    """SIGTERM to the process's group (the JVM's shutdown hooks unregister its jobs), SIGKILL after ``grace`` s."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 60.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
    process.wait(timeout=60)
