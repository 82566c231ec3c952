"""A Spark Connect client reads and writes ``lake_consistent`` (issue 42, item 6): the README's server line and client.

One Spark Connect server for the module, started with exactly README's ``spark-submit ... SparkConnectServer ...
spark-internal`` line (its properties file and port substituted): the file ``consistent-catalog spark-conf`` rendered
for a new SQLite catalog. Every client is a ``python`` process of this venv (``SparkSession.builder.remote``: no JVM on
its side), as a user's script would be. The tests run in file order.

(a) README's client code, as written but for the server's address: it creates ``shop.orders`` and ``shop.by_customer``
    through ``lake``, ingests three orders through ``lake_consistent`` and runs the epoch of job ``by-customer``.
    Read back with pyiceberg: orders holds the three rows; by_customer's ``main`` snapshot carries ``consistent.job``
    and orders' barrier, and its totals are pyiceberg's own sum of the orders. The server's standard error has
    both statements' ``[lake_consistent]`` lines.
(b) A client session's ``CALL lake_consistent.system.recent_results()`` (protocol §5.9) returns what its statements
    did: the ingest's row (action ``ingest``, the barrier and snapshot pyiceberg reads on orders' ``main``, 2 rows),
    the epoch's (``published``, the same barrier, by_customer's snapshot, the rows pyiceberg counts, its attempt),
    each ``line`` the very line the server printed; a second client session sees none of them.
(c) A refused statement (``DELETE`` through ``lake_consistent``) reaches the client as one line, its error class
    first, without the ``JVM stacktrace:`` block the server sends by default (the rendered file's setting: the same
    session with ``spark.sql.connect.serverStacktrace.enabled=true`` gets the block); pyiceberg sees nothing
    committed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from tests.harness.servers import free_port, listening, stop_group

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SERVER_START_TIMEOUT = 240  # ~20 s on a quiet 2-core machine
CLIENT_TIMEOUT = 300


def _readme_text_block(starting: str) -> str:
    """The README's ```text block whose first line starts with ``starting``."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("```text\n" + starting) + len("```text\n")
    return readme[start:readme.index("```", start)]


def readme_server_command(properties: Path, port: int) -> str:
    """README's Connect server line as a bash command: its properties file and port replaced by the test's."""
    line = _readme_text_block("spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer")
    line = line.replace("\\\n", " ").strip()
    assert line.count("lake/spark-defaults.conf") == 1 and "binding.port=15002" in line, line
    line = line.replace("lake/spark-defaults.conf", shlex.quote(str(properties)))
    return f"exec {BIN}/{line.replace('binding.port=15002', f'binding.port={port}')}"


def readme_client_code(port: int) -> str:
    code = _readme_text_block("from pyspark.sql import SparkSession")
    assert code.count('remote("sc://localhost:15002")') == 1, code
    return code.replace('remote("sc://localhost:15002")', f'remote("sc://127.0.0.1:{port}")')


@dataclass
class Connect:
    root: Path
    lake: Path
    port: int
    log: Path

    def client(self, code: str) -> subprocess.CompletedProcess[str]:
        """``code`` in a new ``python`` of this venv; ``spark`` is a session of the server when it starts."""
        prelude = ("from pyspark.sql import SparkSession\n"
                   f"spark = SparkSession.builder.remote('sc://127.0.0.1:{self.port}').getOrCreate()\n")
        return self.run(prelude + textwrap.dedent(code))

    def run(self, code: str) -> subprocess.CompletedProcess[str]:
        script = self.root / f"client-{time.monotonic_ns()}.py"
        script.write_text(code, encoding="utf-8")
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=CLIENT_TIMEOUT,
                              cwd=self.root, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"client exited {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}\n" \
                                     f"server log:\n{self.server_log()}"
        return done

    def server_log(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def catalog(self) -> SqlCatalog:
        return SqlCatalog("lake", uri=f"sqlite:///{self.lake}/catalog.db", warehouse=f"file://{self.lake}/warehouse")


@pytest.fixture(scope="module")
def connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Connect]:
    pytest.importorskip("grpc", reason="Spark Connect's client needs pyspark[connect] (the dev extra installs it)")
    import pyspark

    from consistent_catalog.spark.session import parse_spark_defaults

    root = tmp_path_factory.mktemp("connect")
    lake = root / "lake"
    lake.mkdir()
    SqlCatalog("lake", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}/warehouse").engine.dispose()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "SPARK_HOME": str(Path(pyspark.__file__).parent), "PYSPARK_PYTHON": sys.executable}
    properties = root / "spark-defaults.conf"
    subprocess.run(
        [str(BIN / "consistent-catalog"), "spark-conf", "--catalog-uri", f"sqlite:///{lake}/catalog.db",
         "--warehouse", str(lake / "warehouse"), "--write", str(properties)],
        check=True, capture_output=True, timeout=120, env=env, cwd=root,
    )
    conf = parse_spark_defaults(properties.read_text(encoding="utf-8"))
    assert conf.get("spark.sql.catalog.lake_consistent") == "io.consistentcatalog.spark.ConsistentSparkCatalog", conf
    assert "spark.jars.packages" not in conf, "the rendered conf needs Maven; this test runs offline"

    port = free_port()
    log = root / "connect-server.log"
    server_dir = root / "server-cwd"
    server_dir.mkdir()
    with log.open("wb") as out:  # SPARK_LOCAL_IP: the driver's own ports on the loopback too
        server = subprocess.Popen(["bash", "-c", readme_server_command(properties, port)], stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env={**env, "SPARK_LOCAL_IP": "127.0.0.1"}, cwd=server_dir, start_new_session=True)
    try:
        started = time.monotonic()
        while not listening(port):
            tail = log.read_text(encoding="utf-8", errors="replace")[-4000:]
            assert server.poll() is None, f"the Connect server exited with {server.returncode}:\n{tail}"
            assert time.monotonic() - started < SERVER_START_TIMEOUT, f"no Connect server on {port}:\n{tail}"
            time.sleep(0.5)
        yield Connect(root, lake, port, log)
    finally:
        stop_group(server)


def _main_summary(catalog: SqlCatalog, table: str) -> tuple[int, dict[str, str]]:
    snapshot = catalog.load_table(table).metadata.snapshot_by_name("main")
    assert snapshot is not None, f"{table} has no main"
    return snapshot.snapshot_id, dict(snapshot.summary.additional_properties)


def test_the_readme_client_ingests_runs_an_epoch_and_reads_one_cut(connect: Connect) -> None:
    out = connect.run(readme_client_code(connect.port)).stdout
    catalog = connect.catalog()
    try:
        orders = catalog.load_table("shop.orders").scan().to_arrow().to_pylist()
        by_customer = catalog.load_table("shop.by_customer").scan().to_arrow().to_pylist()
        _, orders_summary = _main_summary(catalog, "shop.orders")
        _, counts_summary = _main_summary(catalog, "shop.by_customer")
    finally:
        catalog.engine.dispose()
    expected: dict[str, int] = {}
    for row in orders:
        expected[row["customer"]] = expected.get(row["customer"], 0) + row["amount"]
    assert len(orders) == 3 and expected == {"ann": 35, "bob": 12}
    assert {r["customer"]: r["total"] for r in by_customer} == expected
    assert counts_summary["consistent.job"] == "by-customer"
    assert counts_summary["consistent.barrier"] == orders_summary["consistent.barrier"]
    assert "|    47|         47|" in out, out  # the README's last query: both tables at one cut
    log = connect.server_log()
    assert "[lake_consistent] ingest: shop.orders ingest at barrier" in log, log[-4000:]
    assert "[lake_consistent] by-customer: shop.by_customer barrier" in log, log[-4000:]


def test_recent_results_returns_what_the_sessions_statements_did(connect: Connect) -> None:
    out = connect.client("""
        import json
        spark.sql("INSERT INTO lake_consistent.shop.orders VALUES (4, 'cy', 7), (5, 'ann', 1)")
        spark.sql("SET spark.sql.consistent.job=by-customer")
        spark.sql("INSERT OVERWRITE lake_consistent.shop.by_customer "
                  "SELECT customer, sum(amount) AS total FROM lake_consistent.shop.orders GROUP BY customer")
        rows = [r.asDict() for r in spark.sql("CALL lake_consistent.system.recent_results()").collect()]
        print(json.dumps(rows))
        spark.stop()
    """).stdout
    rows = json.loads(out.strip().splitlines()[-1])
    other = connect.client("""
        print(spark.sql("CALL lake_consistent.system.recent_results()").count())
    """).stdout
    catalog = connect.catalog()
    try:
        orders_snapshot, orders_summary = _main_summary(catalog, "shop.orders")
        counts_snapshot, counts_summary = _main_summary(catalog, "shop.by_customer")
        customers = catalog.load_table("shop.by_customer").scan().to_arrow().num_rows
    finally:
        catalog.engine.dispose()
    assert [(r["statement"], r["table"], r["job"], r["action"]) for r in rows] == [
        (1, "shop.orders", None, "ingest"), (2, "shop.by_customer", "by-customer", "published")], rows
    ingest, epoch = rows
    barrier = int(orders_summary["consistent.barrier"])
    assert (ingest["barrier"], ingest["snapshot_id"], ingest["rows"]) == (barrier, orders_snapshot, 2)
    assert (epoch["barrier"], epoch["snapshot_id"], epoch["rows"]) == (barrier, counts_snapshot, customers)
    assert epoch["attempt"] == counts_summary["consistent.attempt"]
    log = connect.server_log()
    assert all(r["line"] in log.splitlines() for r in rows), [r["line"] for r in rows]
    assert other.strip().splitlines()[-1] == "0"  # another client session: its own (no) results


def test_a_refusal_reaches_the_client_as_one_line_without_the_jvm_stack_trace(connect: Connect) -> None:
    catalog = connect.catalog()
    try:
        before = catalog.load_table("shop.orders").metadata_location
    finally:
        catalog.engine.dispose()
    out = connect.client("""
        import json
        from pyspark.errors import PySparkException
        def refusal():
            try:
                spark.sql("DELETE FROM lake_consistent.shop.orders WHERE id = 1")
            except PySparkException as e:
                return {"message": str(e), "condition": e.getCondition()}
            return None
        first = refusal()
        spark.conf.set("spark.sql.connect.serverStacktrace.enabled", "true")  # README: a session that wants it
        print(json.dumps([first, refusal()]))
        spark.stop()
    """).stdout
    refusal, with_trace = json.loads(out.strip().splitlines()[-1])
    assert refusal is not None and with_trace is not None, "the DELETE was not refused"
    # the setting is what keeps the trace off: a session that sets it back gets Spark's default, the JVM's trace
    assert "JVM stacktrace:" in with_trace["message"] and with_trace["condition"] == refusal["condition"], with_trace
    message = refusal["message"].strip()
    assert "JVM stacktrace" not in message and "\tat " not in message, message
    assert len(message.splitlines()) == 1, message
    assert message.startswith("[CONSISTENT_WRITE."), message
    catalog = connect.catalog()
    try:
        assert catalog.load_table("shop.orders").metadata_location == before  # the DELETE committed nothing
    finally:
        catalog.engine.dispose()
