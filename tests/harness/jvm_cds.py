"""The suite's Spark drivers start in a fifth of the CPU: class data sharing, the client compiler, the serial GC.

A local Spark driver's start and first small query cost ~32 s of CPU on these machines (18 s of wall time on 2
cores), most of it loading and verifying Spark's ~16,000 classes and compiling them twice (C1, then C2). The suite
starts hundreds of drivers (pyspark in subprocesses, ``spark-sql``, the Thrift and Connect servers, dbt), each on
small data, so every driver it starts gets, through ``SPARK_SUBMIT_OPTS`` (Spark's launcher puts it on every JVM
``spark-submit`` starts; subprocesses inherit it):

- ``-XX:SharedArchiveFile``: Spark's classes mapped from a class data sharing archive (JDK 13+'s dynamic archive),
  made once per pyspark install and JDK by a warm-up driver (``-XX:ArchiveClassesAtExit``) under ``build/cds``, on a
  thread while the first tests run (``SmallDrivers``);
- ``-XX:TieredStopAtLevel=1 -XX:+UseSerialGC``: no C2 compilation, one GC thread (as the crash tests' workers have
  long run): small data never repays C2, and two cores are shared by the driver, the test and the servers.

Measured (JVM CPU of a driver's start and a group-by of 1,000 rows, ``ProcessHandle...totalCpuDuration``): 32 s
plain, 17 s with the archive, 6.5 s with all three. Users' drivers are untouched: this is the suite's environment.

Nothing depends on it. The JVM checks the archive against its own binary and class path and, where they differ (a
line's venv, a wheel test's fresh venv, ``spark.driver.extraClassPath``), runs without it; its log lines about that
are switched off, since tests read what drivers print. The archive holds Spark's jars only (the warm-up adds no
``spark.jars``): a jar on the archive's path table that changed would disable the whole archive, and the plugin's jar
is rebuilt while the suite runs.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

# off: the JVM's "Unable to use shared archive" warning, printed on stdout where a test reads spark-sql's rows
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

#: the suite's drivers compile with C1 only and collect with one thread (small data; 2 cores shared)
SMALL_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

WARM_UP = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("class-data-sharing warm-up")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    out = sys.argv[1]
    df = spark.range(1000).selectExpr("id", "id % 7 AS k", "CAST(id AS string) AS s", "current_timestamp() AS t")
    df.write.mode("overwrite").parquet(out)
    back = spark.read.parquet(out)
    back.createOrReplaceTempView("w")
    spark.sql("SELECT k, count(*), max(s), sum(id) FROM w GROUP BY k ORDER BY k").collect()
    spark.sql("SELECT a.k, count(*) FROM w a JOIN w b ON a.id = b.id WHERE a.k > 2 GROUP BY a.k").collect()
    print(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    spark.stop()
""")  # the driver exits once this Python has (its stdin closes) and writes the archive on its way out


def _key(python: str) -> str | None:
    """The archive's name: the JDK and the pyspark install (its path, version and jars) the drivers run."""
    found = subprocess.run([python, "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__)); "
                            "print(pyspark.__version__)"], capture_output=True, text=True, timeout=60)
    if found.returncode != 0:
        return None
    home, version = found.stdout.split()
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else None
    java_version = subprocess.run([str(java) if java else "java", "-version"], capture_output=True, text=True,
                                  timeout=60).stderr
    jars = Path(home, "jars")
    listing = sorted(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in jars.glob("*.jar"))
    digest = hashlib.sha256("\n".join([java_version, home, version, *listing]).encode()).hexdigest()[:16]
    return f"spark-{version}-{digest}"


class SmallDrivers:
    """``SPARK_SUBMIT_OPTS`` for the drivers of one pyspark install: ``SMALL_JVM`` at once, with the class data
    sharing archive as soon as it exists. A missing archive is made on a thread (a warm-up driver, then its dump:
    ~50 s on a quiet machine), so the tests run meanwhile; the drivers they start before it is ready run without it.
    ``on_ready`` gets the options once the archive is made (not when none could be: SMALL_JVM alone then)."""

    def __init__(self, folder: Path, python: str = sys.executable,
                 on_ready: Callable[[str], None] | None = None) -> None:
        self._archive: Path | None = None
        self._on_ready = on_ready
        threading.Thread(target=self._make, args=(folder, python), daemon=True, name="class-data-sharing").start()

    def _make(self, folder: Path, python: str) -> None:
        self._archive = _archive(folder, python)
        if self._archive is not None and self._on_ready is not None:
            self._on_ready(self.options())

    def options(self) -> str:
        archive = self._archive
        return f"{SMALL_JVM} -XX:SharedArchiveFile={archive} {QUIET}" if archive else SMALL_JVM


def _archive(folder: Path, python: str) -> Path | None:
    try:
        key = _key(python)
        if key is None:
            return None
        folder.mkdir(parents=True, exist_ok=True)
        archive = folder / f"{key}.jsa"
        with open(folder / f"{key}.lock", "w") as lock:  # two sessions of one venv: one warm-up
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not archive.exists():
                partial = folder / f"{key}.partial.jsa"
                partial.unlink(missing_ok=True)
                env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{SMALL_JVM} -XX:ArchiveClassesAtExit={partial} {QUIET}"}
                with tempfile.TemporaryDirectory() as scratch:
                    made = subprocess.run([python, "-c", WARM_UP, f"{scratch}/rows"], env=env, cwd=scratch,
                                          capture_output=True, text=True, timeout=300)
                driver = int(made.stdout.split()[-1]) if made.returncode == 0 else None
                for _ in range(1200 if driver else 0):  # its exit and dump: seconds on a quiet machine
                    try:
                        os.kill(driver, 0)
                    except ProcessLookupError:
                        break
                    time.sleep(0.1)
                if made.returncode != 0 or not partial.exists() or partial.stat().st_size == 0:
                    print(f"class data sharing: no archive ({made.returncode}): {made.stderr[-400:]}", file=sys.stderr)
                    return None
                partial.rename(archive)
        return archive
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:  # IndexError: it printed no pid
        print(f"class data sharing: no archive: {exc}", file=sys.stderr)
        return None
