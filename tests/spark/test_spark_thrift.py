"""A JDBC client reads consistent cuts and writes epochs through the Spark Thrift server (issues #12, 19): ``beeline``
over ``lake_consistent``.

One FLIP demo lake (``consistent-catalog demo --engine pyiceberg``, whose jobs unregistered when it exited: no
lease is held), its ``spark-defaults.conf`` rendered by ``consistent-catalog spark-conf``, and one Spark Thrift
server (``HiveThriftServer2`` from pyspark's own jars, bound to 127.0.0.1 on a free port, Hive metastore in memory
as the rendered file keeps it) for the whole module; every statement is a ``beeline -u jdbc:hive2://...`` process,
as a JDBC user would run it. The tests run in file order: (b) expects the demo's caught-up lake, (c) writes.

(a) One statement returns the raw rows of words, word_counts and count_histogram from ``lake_consistent``;
    recounted here in Python they satisfy FLIP-276's invariants (sum(cnt) = count(words), every word's count,
    the histogram of the counts) and equal an independent pyiceberg read at the snapshot ids of
    ``ConsistentCatalog.resolve``, which ``CALL lake_consistent.system.current_cut`` also reports.
(b) After more words are ingested with pyiceberg (``ConsistentCatalog.ingest``) and no job runs, the plain
    catalog ``lake`` disagrees (count(words) > sum(cnt)) while ``lake_consistent`` still serves the agreeing
    cut, in the very same statement.
(c) The epoch statement of protocol §5.9 through beeline (``SET spark.sql.consistent.job=word-count`` and
    ``INSERT OVERWRITE lake_consistent.demo.word_counts SELECT ...``) is an epoch: word_counts' new main
    snapshot carries ``consistent.barrier`` (the words' newest ingest), ``consistent.job`` and
    ``consistent.attempt``, read with pyiceberg; its rows are a pyiceberg recount of words at that barrier, and
    every barrier on main is one attempt's. A ``DELETE FROM lake_consistent.demo.words`` stays refused
    (non-zero exit, the one-line ``CONSISTENT_WRITE.REFUSED`` error) and commits nothing. The Thrift session is
    the job's instance until the server stops (its shutdown unregisters it).

What the Thrift server needs besides the rendered file (both found here, both plain Spark/Hive behaviour):
- the conf's ``spark.jars`` also on the driver class path (``--driver-class-path``): the server opens each JDBC
  session on a Thrift worker thread whose class loader does not see ``spark.jars``, so loading the default
  catalog ``lake`` fails with "Cannot find catalog plugin class ... org.apache.iceberg.spark.SparkCatalog";
- a database in the JDBC URL (``jdbc:hive2://host:port/demo``): without one the Hive JDBC driver asks for
  ``USE default``, which runs in the default catalog ``lake``, which has no namespace ``default``
  (SCHEMA_NOT_FOUND while opening the session).
The Hive session's scratch, resources and operation-log directories are pointed into the test's directory
(``--hiveconf``), and beeline's ``~/.beeline/history`` too (``-Duser.home``), so nothing is left outside it.
"""

from __future__ import annotations

import csv
import io
import os
import shlex
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import COUNTS, FLIP_VERSION, SCHEMAS, TABLES, WORDS
from tests.harness.flip import Contents
from tests.harness.main_epochs import exactly_once_problems, main_epochs, snapshot_at
from tests.harness.servers import free_port as _free_port
from tests.harness.servers import listening as _listening
from tests.harness.servers import stop_group as _stop

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EPOCHS, ROWS_PER_EPOCH = 4, 100
SERVER_START_TIMEOUT = 240  # ~40 s on a busy 2-core machine
BEELINE_TIMEOUT = 300

UNION = """
SELECT '{tag}' AS q, 'W' AS k, word AS v, CAST(NULL AS BIGINT) AS n FROM {catalog}.demo.words
UNION ALL SELECT '{tag}', 'C', word, cnt FROM {catalog}.demo.word_counts
UNION ALL SELECT '{tag}', 'H', CAST(cnt AS STRING), words FROM {catalog}.demo.count_histogram
""".strip()
CUT = "CALL lake_consistent.system.current_cut('demo.words')"
# the demo's job word-count as a statement: the same definition as the demo's pyarrow job (protocol §6.10), so the
# statement continues its epochs instead of revising the table
EPOCH = ("SET spark.sql.consistent.job=word-count", f"SET spark.sql.consistent.version={FLIP_VERSION}",
         "INSERT OVERWRITE lake_consistent.demo.word_counts "
         "SELECT word, count(*) AS cnt FROM lake_consistent.demo.words GROUP BY word")
REFUSED_DELETE = "DELETE FROM lake_consistent.demo.words WHERE word = 'beeline-epoch'"


def readme_thrift_command(properties: Path, port: int, *, extra: list[str]) -> str:
    """The README's ``spark-submit ... HiveThriftServer2 ... spark-internal`` line (issue 34, item 6), as a bash
    command: its properties file and port replaced by the test's, ``extra`` options put before ``spark-internal``."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("spark-submit --class org.apache.spark.sql.hive.thriftserver.HiveThriftServer2")
    end = readme.index("spark-internal", start)
    line = readme[start:end].replace("\\\n", " ")
    assert line.count("lake/spark-defaults.conf") == 2 and "thrift.port=10000" in line, line
    line = line.replace("lake/spark-defaults.conf", shlex.quote(str(properties)))
    line = line.replace("thrift.port=10000", f"thrift.port={port}")
    return f"exec {BIN}/{line} {' '.join(shlex.quote(word) for word in extra)} spark-internal"


# --- the independent recount ----------------------------------------------------------------------------------
# --- the lake and the Thrift server -------------------------------------------------------------------------
@dataclass
class Beeline:
    returncode: int
    stdout: str
    stderr: str

    def rows(self) -> list[list[str]]:
        return [row for row in csv.reader(io.StringIO(self.stdout)) if row]

    def tagged(self, tag: str) -> list[tuple[str, str, str]]:
        """The (kind, value, n) rows of the UNION statement tagged ``tag``."""
        return [(r[1], r[2], r[3]) for r in self.rows() if len(r) == 4 and r[0] == tag]

    def describe(self) -> str:
        return f"beeline exit {self.returncode}\nstdout:\n{self.stdout[-2000:]}\nstderr:\n{self.stderr[-4000:]}"


@dataclass
class Thrift:
    root: Path
    url: str
    cc: ConsistentCatalog
    env: dict[str, str]
    log: Path

    def beeline(self, *statements: str) -> Beeline:
        """One beeline process running ``statements`` (it stops at the first failing one)."""
        script = ";\n".join(statements) + ";"
        env = {**self.env, "JAVA_TOOL_OPTIONS": f"-Duser.home={self.root / 'beeline-home'}"}
        process = subprocess.Popen(
            [str(BIN / "beeline"), "-u", self.url, "-n", "test", "--silent=true", "--outputformat=csv2",
             "-e", script],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=self.root,
            start_new_session=True, stdin=subprocess.DEVNULL,
        )
        try:
            stdout, stderr = process.communicate(timeout=BEELINE_TIMEOUT)
        except subprocess.TimeoutExpired:
            _stop(process, grace=0)
            raise AssertionError(f"beeline took over {BEELINE_TIMEOUT}s; server log:\n{self.server_log()}") from None
        return Beeline(process.returncode, stdout, stderr)

    def server_log(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-4000:]


def _needs() -> str | None:
    try:
        import pyspark
    except ImportError:
        return "pyspark is not installed"
    jars = Path(pyspark.__file__).parent / "jars"
    if not list(jars.glob("spark-hive-thriftserver_*.jar")) or not list(jars.glob("hive-jdbc-*.jar")):
        return f"this pyspark has no Thrift server or Hive JDBC jars in {jars}"
    if not (BIN / "beeline").exists():
        return f"no beeline next to {sys.executable}"
    return None


@pytest.fixture(scope="module")
def thrift(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Thrift]:
    reason = _needs()
    if reason is not None:
        pytest.skip(reason)
    import pyspark

    from consistent_catalog.spark.session import parse_spark_defaults

    root = tmp_path_factory.mktemp("thrift-lake")
    lake = root / "lake"
    lake.mkdir()
    (root / "beeline-home").mkdir()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "SPARK_HOME": str(Path(pyspark.__file__).parent), "PYSPARK_PYTHON": sys.executable}
    subprocess.run(
        [str(BIN / "consistent-catalog"), "demo", "--dir", str(lake), "--engine", "pyiceberg",
         "--epochs", str(EPOCHS), "--rows-per-epoch", str(ROWS_PER_EPOCH)],
        check=True, capture_output=True, timeout=300, env=env, cwd=root,
    )
    subprocess.run(["bash", str(ROOT / "scripts" / "build_jvm.sh")], check=True, cwd=ROOT, timeout=600)
    properties = root / "spark-defaults.conf"
    subprocess.run(
        [str(BIN / "consistent-catalog"), "spark-conf", "--catalog-uri", f"sqlite:///{lake}/catalog.db",
         "--warehouse", str(lake / "warehouse"), "--write", str(properties)],
        check=True, capture_output=True, timeout=120, env=env, cwd=root,
    )
    conf = parse_spark_defaults(properties.read_text(encoding="utf-8"))
    assert conf.get("spark.sql.catalog.lake_consistent") == "io.consistentcatalog.spark.ConsistentSparkCatalog", conf
    assert conf.get("spark.hadoop.javax.jdo.option.ConnectionURL", "").startswith("jdbc:derby:memory:"), conf
    assert "spark.jars.packages" not in conf, "the rendered conf needs Maven; this test runs offline"

    port = _free_port()
    hive = root / "hive"
    hiveconf = {  # besides the README's: the Hive session's directories inside the test's
        "hive.exec.local.scratchdir": str(hive / "scratch"),
        "hive.exec.scratchdir": str(hive / "scratch-dfs"),
        "hive.downloaded.resources.dir": str(hive / "resources"),
        "hive.server2.logging.operation.log.location": str(hive / "operation_logs"),
    }
    command = readme_thrift_command(properties, port, extra=["--name", "consistent-catalog-thrift-test",
                                                             *(w for k, v in hiveconf.items() for w in ("--hiveconf", f"{k}={v}"))])
    log = root / "thrift-server.log"
    server_dir = root / "server-cwd"
    server_dir.mkdir()
    # (d) pauses an epoch after staging while this file is missing (Failpoints; present, every epoch passes)
    release = root / "failpoint-release"
    release.touch()
    failpoint = {"CONSISTENT_FAILPOINT": "after-stage", "CONSISTENT_FAILPOINT_ACTION": "pause",
                 "CONSISTENT_FAILPOINT_RELEASE": str(release)}
    with log.open("wb") as out:  # SPARK_LOCAL_IP: the driver's own ports on the loopback too
        server = subprocess.Popen(["bash", "-c", command], stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env={**env, "SPARK_LOCAL_IP": "127.0.0.1", **failpoint},
                                  cwd=server_dir, start_new_session=True)
    cc = ConsistentCatalog(SqlCatalog("lake", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}/warehouse"))
    try:
        started = time.monotonic()
        while not _listening(port):
            tail = log.read_text(encoding="utf-8", errors="replace")[-4000:]
            assert server.poll() is None, f"the Thrift server exited with {server.returncode}:\n{tail}"
            assert time.monotonic() - started < SERVER_START_TIMEOUT, f"no Thrift server on {port}:\n{tail}"
            time.sleep(1)
        # the session's database: without one the driver sends USE default, which the catalog lake lacks
        yield Thrift(root, f"jdbc:hive2://127.0.0.1:{port}/demo", cc, env, log)
    finally:
        _stop(server)
    assert server.poll() is not None
    leftovers = sorted(p.name for p in server_dir.iterdir())
    assert leftovers == [], f"the Thrift server left {leftovers} in its working directory"


# --- (a) the consistent cut, recounted and read again with pyiceberg ----------------------------------------------
def test_beeline_reads_the_consistent_cut_that_pyiceberg_reads(thrift: Thrift) -> None:
    cut = thrift.cc.resolve(TABLES)
    result = thrift.beeline(UNION.format(tag="a", catalog="lake_consistent"), CUT)
    assert result.returncode == 0, result.describe()

    served = Contents.from_rows(result.tagged("a"))
    assert not served.problems(), served.problems()
    assert served.count == EPOCHS * ROWS_PER_EPOCH  # the demo's jobs caught up: every word is counted
    assert served == Contents.from_pyiceberg(thrift.cc, cut.snapshot_ids)

    reported = {row[0]: row for row in result.rows() if len(row) == 7 and row[0] in TABLES}
    assert {t: int(reported[t][1]) for t in TABLES} == cut.snapshot_ids, (reported, cut)
    assert {int(reported[t][4]) for t in TABLES} == {cut.barrier}
    assert {reported[t][6] for t in TABLES} == {"ok"}, reported


# --- (b) new words, no job run: the plain catalog disagrees, the consistent one does not ------------------------
def test_after_an_ingest_only_the_plain_catalog_disagrees(thrift: Thrift) -> None:
    cc = thrift.cc
    before = cc.resolve(TABLES)
    new_words = ["thrift-new"] * 3 + ["w000", "w001", "w199"] + [f"jdbc-{i}" for i in range(31)]
    cc.ingest(WORDS, pa.table({"word": new_words}, schema=SCHEMAS[WORDS]))  # no epoch job runs after it
    cut = cc.resolve(TABLES)
    assert cut.snapshot_ids == before.snapshot_ids  # the ingest is beyond the pipeline's consistent cut
    main = cc.load_table(WORDS).metadata.snapshot_by_name("main")
    assert main is not None and main.snapshot_id != cut[WORDS].snapshot_id
    expected = Contents.from_pyiceberg(cc, cut.snapshot_ids)
    snapshots = len(cc.load_table(WORDS).metadata.snapshots)

    both = """
SELECT 'b' AS q,
       (SELECT count(*) FROM lake.demo.words) AS plain_words,
       (SELECT sum(cnt) FROM lake.demo.word_counts) AS plain_counted,
       (SELECT count(*) FROM lake_consistent.demo.words) AS words,
       (SELECT sum(cnt) FROM lake_consistent.demo.word_counts) AS counted""".strip()
    result = thrift.beeline(both, UNION.format(tag="c", catalog="lake_consistent"))
    assert result.returncode == 0, result.describe()

    aggregates = [row for row in result.rows() if len(row) == 5 and row[0] == "b"]
    assert len(aggregates) == 1, result.describe()
    plain_words, plain_counted, words, counted = map(int, aggregates[0][1:])
    assert plain_counted == expected.count and plain_words == expected.count + len(new_words), aggregates
    assert plain_words > plain_counted  # the plain catalog's tables disagree
    assert words == counted == expected.count, aggregates

    served = Contents.from_rows(result.tagged("c"))
    assert served.count > 0, result.describe()
    assert not served.problems(), served.problems()
    assert served == expected
    assert len(cc.load_table(WORDS).metadata.snapshots) == snapshots  # reads commit nothing
    assert cc.resolve(TABLES).snapshot_ids == cut.snapshot_ids


# --- (c) the epoch statement through JDBC; DELETE stays refused ---------------------------------------------------
def test_an_epoch_statement_through_beeline_publishes_one_epoch_and_a_delete_stays_refused(thrift: Thrift) -> None:
    cc = thrift.cc
    cc.ingest(WORDS, pa.table({"word": ["beeline-epoch", "beeline-epoch", "w000"]}, schema=SCHEMAS[WORDS]))
    words = cc.load_table(WORDS).metadata
    barrier = int(words.snapshot_by_name("main").summary.additional_properties[P.BARRIER])
    before = cc.load_table(COUNTS).metadata
    epochs_before = main_epochs(before)[0]

    result = thrift.beeline(*EPOCH)
    assert result.returncode == 0, result.describe()

    # read back with pyiceberg: word_counts' new main snapshot is the epoch at the words' newest barrier
    after = cc.load_table(COUNTS).metadata
    head = after.snapshot_by_name("main")
    assert head is not None and head.snapshot_id != before.snapshot_by_name("main").snapshot_id
    summary = head.summary.additional_properties
    assert summary[P.BARRIER] == str(barrier) and summary[P.JOB] == "word-count" and summary.get(P.ATTEMPT), summary
    epochs = main_epochs(after)[0]
    assert [e.barrier for e in epochs] == [e.barrier for e in epochs_before] + [barrier], epochs
    assert epochs[-1].attempts == {summary[P.ATTEMPT]}
    assert exactly_once_problems(COUNTS, after) == []
    source = snapshot_at(words, barrier)
    recount = Counter(cc.load_table(WORDS).scan(snapshot_id=source).to_arrow()["word"].to_pylist())
    counted = cc.load_table(COUNTS).scan(snapshot_id=head.snapshot_id).to_arrow()
    assert dict(zip(counted["word"].to_pylist(), counted["cnt"].to_pylist())) == dict(recount)
    assert counted.num_rows == len(recount) and recount["beeline-epoch"] == 2
    assert after.properties.get(P.LEASE_HOLDER), "the Thrift session holds the job until the server stops"
    log = thrift.log.read_text(encoding="utf-8", errors="replace")
    assert f"[lake_consistent] word-count: demo.word_counts barrier {barrier} " in log, thrift.server_log()

    # a second JDBC connection (a new beeline process) runs the job's next epoch: the server's sessions share
    # one writer instance, so no takeover is needed and nothing is refused
    cc.ingest(WORDS, pa.table({"word": ["second-connection"]}, schema=SCHEMAS[WORDS]))
    second = int(cc.load_table(WORDS).metadata.snapshot_by_name("main").summary.additional_properties[P.BARRIER])
    again = thrift.beeline(*EPOCH)
    assert again.returncode == 0, again.describe()
    head = cc.load_table(COUNTS).metadata.snapshot_by_name("main")
    assert head.summary.additional_properties[P.BARRIER] == str(second)
    assert exactly_once_problems(COUNTS, cc.load_table(COUNTS).metadata) == []

    # DELETE through lake_consistent: refused in one line, a non-zero exit, nothing committed
    words_head = cc.load_table(WORDS).metadata.snapshot_by_name("main").snapshot_id
    snapshots = len(cc.load_table(WORDS).metadata.snapshots)
    refused = thrift.beeline(REFUSED_DELETE)
    assert refused.returncode != 0, refused.describe()
    error = next((line for line in refused.stderr.splitlines() if "CONSISTENT_WRITE.REFUSED" in line), None)
    assert error is not None, refused.describe()
    assert not [line for line in refused.stderr.splitlines() if line.lstrip().startswith(("at ", "Caused by"))], \
        refused.describe()  # one line, no stack trace (spark.sql.hive.thriftServer.async false: issue 34, item 4)
    assert "lake_consistent.demo.words" in error and "revise" in error, error
    words_after = cc.load_table(WORDS).metadata
    assert words_after.snapshot_by_name("main").snapshot_id == words_head and len(words_after.snapshots) == snapshots
    assert cc.load_table(COUNTS).metadata.snapshot_by_name("main").snapshot_id == head.snapshot_id


# --- (d) a fenced epoch statement: one line, safe to rerun; each plugin line once in the server's log -------------
def test_a_fenced_epoch_is_one_line_in_beeline_says_a_rerun_is_safe_and_the_log_has_each_line_once(
    thrift: Thrift,
) -> None:
    """Issue 34, item 4: the Thrift server's epoch pauses after staging (the failpoint); meanwhile a Python instance
    takes the job over and publishes; released, the statement's publish is refused inside the catalog's
    compare-and-swap. beeline shows one ``[CONSISTENT_WRITE.FENCED]`` line, no stack trace, saying that nothing was
    published and a rerun is safe; the rerun is refused or done, and nothing is ever published twice."""
    import threading

    from consistent_catalog.demo import count_words

    cc = thrift.cc
    release = thrift.root / "failpoint-release"
    cc.ingest(WORDS, pa.table({"word": ["fenced-statement"]}, schema=SCHEMAS[WORDS]))
    barrier = int(cc.load_table(WORDS).metadata.snapshot_by_name("main").summary.additional_properties[P.BARRIER])
    paused_before = thrift.log.read_text(encoding="utf-8", errors="replace").count("[failpoint] after-stage")
    release.unlink()
    results: list[Beeline] = []
    statement = threading.Thread(target=lambda: results.append(thrift.beeline(*EPOCH)))
    statement.start()
    try:
        deadline = time.monotonic() + BEELINE_TIMEOUT
        while thrift.log.read_text(encoding="utf-8", errors="replace").count("[failpoint] after-stage") == paused_before:
            assert statement.is_alive() and time.monotonic() < deadline, f"no pause; {thrift.server_log()}"
            time.sleep(0.5)
        with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite",
                    takeover=True, version=FLIP_VERSION) as job:
            job.run_until_caught_up()  # publishes the staged epoch of barrier (or recomputes it)
    finally:
        release.touch()
        statement.join(BEELINE_TIMEOUT)
    (fenced,) = results
    assert fenced.returncode != 0, fenced.describe()
    said = [line for line in (fenced.stdout + fenced.stderr).splitlines() if line.strip()]
    errors = [line for line in said if "CONSISTENT_WRITE.FENCED" in line]
    assert len(errors) == 1, fenced.describe()
    assert not [line for line in said if line.lstrip().startswith(("at ", "Caused by", "..."))], fenced.describe()
    assert "nothing of this statement was published" in errors[0] and "safe" in errors[0], errors[0]

    epochs = main_epochs(cc.load_table(COUNTS).metadata)[0]
    assert [e.barrier for e in epochs].count(barrier) == 1 and epochs[-1].barrier == barrier, epochs
    assert exactly_once_problems(COUNTS, cc.load_table(COUNTS).metadata) == []
    head = cc.load_table(COUNTS).metadata.snapshot_by_name("main").snapshot_id

    rerun = thrift.beeline(*EPOCH)  # the Python instance released the job on exit: the rerun registers again
    assert rerun.returncode == 0, rerun.describe()
    assert cc.load_table(COUNTS).metadata.snapshot_by_name("main").snapshot_id == head  # done: nothing republished

    # each [lake_consistent] line of the server once in its log (not once from the log and once from stderr)
    log = thrift.log.read_text(encoding="utf-8", errors="replace")
    lines = [line[line.index("[lake_consistent] "):] for line in log.splitlines() if "[lake_consistent] word-count:" in line]
    assert lines and len(lines) == len(set(lines)), "\n".join(lines)
    assert sum(f"barrier {barrier} " in line and "done" in line for line in lines) == 1, "\n".join(lines)

