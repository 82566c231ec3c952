"""Catalog requests counted where they leave Spark: a proxy in front of a catalog server that counts each request
passing through it by kind: a REST server's HTTP request lines (list, load, commit, metrics report), for the
request-count pins (issue 46) and ``bench.bench_sql_writer --count-requests``; a Hive Metastore's Thrift calls
(``THRIFT``: ``get_table``, ``lock``, ``alter_table``...) and Glue's API calls (``GLUE``: ``GetTable``,
``UpdateTable``...), for ``bench.bench_catalog_calls`` (issue 44).

``counted_epochs(spark, server_port, warehouse, catalog, ns)`` registers a plain and a consistent Spark catalog on
that proxy at runtime (Spark loads a catalog on first use), runs one SQL ``INSERT OVERWRITE`` epoch and one streaming
micro-batch into a derived table after a warm-up, and returns what each sent; the rows they wrote are recounted with
pyiceberg, the way the pins' modules check them.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness.proxy import DelayProxy

REQUEST_LINE = re.compile(rb"(GET|POST|HEAD|DELETE|PUT) (/v1/\S*) HTTP/1\.[01]\r\n")


def request_kind(method: str, path: str) -> str:
    """A REST request by what it does (list, load, commit ...), its prefix and names left out."""
    parts = path.split("?")[0].strip("/").split("/")
    if parts[-1] == "config":
        return "config"
    if "transactions" in parts:
        return "commit (multi-table)"
    if parts[-1] == "metrics":
        return "metrics report"
    if "tables" in parts:
        after = parts[parts.index("tables") + 1:]
        if not after:
            return "list tables" if method == "GET" else f"{method} tables"
        return {"GET": "load table", "POST": "commit table", "HEAD": "table exists"}.get(method, f"{method} table")
    if "namespaces" in parts:
        after = parts[parts.index("namespaces") + 1:]
        return "list namespaces" if not after and method == "GET" else f"{method} namespace"
    return f"{method} {parts[-1]}"


def _rest_calls(data: bytes) -> Iterator[tuple[int, str, str]]:
    for match in REQUEST_LINE.finditer(data):
        method, path = match.group(1).decode(), match.group(2).decode()
        yield match.end(), request_kind(method, path), f"{method} {path}"


THRIFT_CALL = re.compile(rb"\x80\x01\x00[\x01\x04]\x00\x00\x00([\x01-\x7f])")
"""A Thrift binary-protocol message that is a call (strict header: version 1, type CALL or ONEWAY), then the one
byte that matters of its name's length (Hive's clients and server speak it unframed)."""


def _thrift_calls(data: bytes) -> Iterator[tuple[int, str, str]]:
    for match in THRIFT_CALL.finditer(data):
        end = match.end() + match.group(1)[0]
        name = data[match.end():end]
        if end <= len(data) and re.fullmatch(rb"[A-Za-z_][A-Za-z0-9_]*", name):
            yield end, name.decode(), name.decode()


GLUE_CALL = re.compile(rb"\r\nX-Amz-Target:\s*AWSGlue\.(\w+)\r\n", re.IGNORECASE)


def _glue_calls(data: bytes) -> Iterator[tuple[int, str, str]]:
    for match in GLUE_CALL.finditer(data):
        yield match.end(), match.group(1).decode(), match.group(1).decode()


Calls = Callable[[bytes], Iterator[tuple[int, str, str]]]
"""What a client sent, read for the calls it makes: (where each ends, its kind, its line for the log)."""
REST, THRIFT, GLUE = _rest_calls, _thrift_calls, _glue_calls
CARRY = 256
"""Bytes of a connection kept to find a call whose header two reads split."""


class _Tap:
    """A stream reader that counts the calls passing through it (one connection's)."""

    def __init__(self, reader: Any, proxy: CountingProxy) -> None:
        self.reader, self.proxy = reader, proxy
        self.carry = b""

    async def read(self, n: int) -> bytes:
        chunk: bytes = await self.reader.read(n)
        data = self.carry + chunk
        for end, kind, line in self.proxy.calls(data):
            if end > len(self.carry):  # not counted with the previous read
                self.proxy.requests[kind] += 1
                self.proxy.log.append((kind, line))
        self.carry = data[-CARRY:]
        return chunk


class CountingProxy(DelayProxy):
    """``tests/harness/proxy.py`` without delay, counting the requests by kind (``requests``; ``log``: each one);
    ``calls``: how to find them in what clients send (``REST``, ``THRIFT``, ``GLUE``)."""

    def __init__(self, target_port: int, calls: Calls = REST) -> None:
        super().__init__(target_port, delay_ms=0)
        self.calls = calls
        self.requests: Counter[str] = Counter()
        self.log: list[tuple[str, str]] = []

    async def _connection(self, client_reader: Any, client_writer: Any) -> None:
        await super()._connection(_Tap(client_reader, self), client_writer)

    def take(self) -> tuple[Counter[str], list[str]]:
        """The requests since the last take, by kind and each one (one list swapped: never half of a request)."""
        log, self.log = self.log, []
        return Counter(kind for kind, _ in log), [line for _, line in log]


@dataclass
class Counted:
    """The requests one SQL epoch and one micro-batch sent (by kind, and each request line), in steady state."""

    epoch: Counter[str]
    epoch_log: list[str]
    micro_batch: Counter[str]
    micro_batch_log: list[str]


PLAIN_CATALOG, CONSISTENT_CATALOG = "org.apache.iceberg.spark.SparkCatalog", "io.consistentcatalog.spark.ConsistentSparkCatalog"


def register_catalogs(spark: Any, plain: str, settings: Mapping[str, str]) -> str:
    """A plain Spark catalog ``plain`` and its consistent catalog ``<plain>_consistent`` registered at run time (Spark
    loads a catalog on first use) with Iceberg's ``settings`` (``type``, ``uri``...); returns the consistent one's."""
    consistent = f"{plain}_consistent"
    for name, impl in ((plain, PLAIN_CATALOG), (consistent, CONSISTENT_CATALOG)):
        spark.conf.set(f"spark.sql.catalog.{name}", impl)
        for key, value in {**settings, "cache-enabled": "false"}.items():
            spark.conf.set(f"spark.sql.catalog.{name}.{key}", value)
    spark.conf.set(f"spark.sql.catalog.{consistent}.plain-catalog", plain)
    return consistent


def counted_sql_epochs(spark: Any, proxy: CountingProxy, consistent: str, catalog: Any, ns: str, *, epochs: int = 1
                       ) -> list[tuple[Counter[str], list[str]]]:
    """``<ns>.words`` and ``<ns>.word_counts`` made with pyiceberg (``catalog``: on the server itself, uncounted), an
    ingest and a first ``INSERT OVERWRITE`` epoch through ``consistent`` (it registers the job, warms the session's
    tables), then ``epochs`` times an ingest and the epoch, each epoch's requests through ``proxy`` counted. The last
    epoch's rows are checked against a recount of the words at the snapshot it recorded (pyiceberg)."""
    import json

    import pyarrow as pa

    from consistent_catalog import ConsistentCatalog
    from consistent_catalog import properties as P
    from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA

    words, counts = f"{ns}.words", f"{ns}.word_counts"
    catalog.create_table(words, schema=WORDS_SCHEMA)
    catalog.create_table(counts, schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    statement = (f"INSERT OVERWRITE {consistent}.{counts} SELECT word, count(*) AS cnt "
                 f"FROM {consistent}.{words} GROUP BY word")
    spark.sql(f"SET spark.sql.consistent.job={ns}-count")
    counted = []
    try:
        cc.ingest(words, pa.table({"word": ["a", "b", "a"]}, schema=WORDS_SCHEMA))
        spark.sql(statement)
        for number in range(epochs):
            more = ["b", "c"] if number == 0 else [f"e{number}"]
            cc.ingest(words, pa.table({"word": more}, schema=WORDS_SCHEMA))
            proxy.take()
            spark.sql(statement)
            counted.append(proxy.take())
    finally:
        spark.sql("RESET spark.sql.consistent.job")
    table = catalog.load_table(counts)
    head = table.metadata.snapshot_by_name("main")
    read = json.loads(head.summary.additional_properties[P.SOURCES])[words]
    recount = Counter(catalog.load_table(words).scan(snapshot_id=read).to_arrow()["word"].to_pylist())
    rows = table.scan(snapshot_id=head.snapshot_id).to_arrow()
    assert dict(zip(rows["word"].to_pylist(), rows["cnt"].to_pylist())) == dict(recount), "the epoch is not its input"
    return counted


def counted_epochs(spark: Any, server_port: int, warehouse: str, catalog: Any, ns: str, checkpoint: Path) -> Counted:
    """One ``INSERT OVERWRITE`` epoch and one complete-mode micro-batch into derived tables of ``ns``, through a
    counting proxy in front of the REST server (``catalog``: pyiceberg on the server itself, uncounted)."""
    import pyarrow as pa

    from consistent_catalog import ConsistentCatalog
    from consistent_catalog import properties as P
    from tests.harness.lake import COUNTS_SCHEMA

    started = time.monotonic()
    timings: dict[str, float] = {}
    proxy = CountingProxy(server_port).start()
    try:
        consistent = register_catalogs(spark, f"counted_{server_port}",
                                       {"type": "rest", "uri": proxy.uri, "warehouse": warehouse})
        # two tables in the catalog: its listing and conditional loads
        ((epoch, epoch_log),) = counted_sql_epochs(spark, proxy, consistent, catalog, ns)
        words, stream_counts = f"{ns}.words", f"{ns}.stream_counts"
        cc = ConsistentCatalog(catalog)
        arrow = catalog.load_table(words).schema().as_arrow()

        def ingest(*batch: str) -> None:
            cc.ingest(words, pa.table({"word": list(batch)}, schema=arrow))

        catalog.create_table(stream_counts, schema=COUNTS_SCHEMA)
        timings["sql"] = time.monotonic() - started

        def head() -> int | None:
            snapshot = catalog.load_table(stream_counts).current_snapshot()
            return None if snapshot is None else snapshot.snapshot_id

        def first_epoch() -> None:  # its registration's genesis comes first: wait for the epoch's rows
            deadline = time.monotonic() + 120
            while catalog.load_table(stream_counts).scan().to_arrow().num_rows == 0:
                assert query.exception() is None and time.monotonic() < deadline, query.exception() or "no epoch"
                time.sleep(0.1)

        def wait_for_new_head(before: int | None) -> None:
            deadline = time.monotonic() + 120
            while head() == before:
                assert query.exception() is None and time.monotonic() < deadline, query.exception() or "no epoch"
                time.sleep(0.1)

        frame = (spark.readStream.table(f"{consistent}.{words}").groupBy("word").count()
                 .withColumnRenamed("count", "cnt"))
        query = (frame.writeStream.outputMode("complete").option("checkpointLocation", str(checkpoint))
                 .option("consistent.job", f"{ns}-stream").trigger(processingTime="3 seconds")
                 .toTable(f"{consistent}.{stream_counts}"))
        try:
            first_epoch()  # registration and the first epoch
            for attempt in range(3):
                before = head()
                proxy.take()
                ingest("c", f"d{attempt}")  # pyiceberg, straight to the server: not counted
                wait_for_new_head(before)  # one trigger finds the new barrier, its batch is the epoch of it
                micro_batch, micro_batch_log = proxy.take()
                if _source_polls(micro_batch_log, words) <= 1 and not _polled_after(micro_batch_log, words):
                    break  # else a trigger before the ingest landed, or the next one (a batch slower than the
                    # trigger on a loaded machine), polled the source too (timing): measure again
        finally:
            query.stop()
            timings["stream"] = time.monotonic() - started
            # the query's end releases its lease through the proxy (a listener, after stop() returned): wait for it
            deadline = time.monotonic() + 30
            while P.LEASE_HOLDER in catalog.load_table(stream_counts).properties and time.monotonic() < deadline:
                time.sleep(0.1)
        print("counted_epochs timings", timings)
        return Counted(epoch, epoch_log, micro_batch, micro_batch_log)
    except BaseException:
        proxy.stop()
        raise
    # else the proxy stays up (a daemon thread): the session keeps the catalogs, and the SQL job's lease is released
    # through it when the JVM stops


def _source_polls(log: list[str], table: str) -> int:
    """How many loads of ``table`` come before the window's first commit (a trigger's look for a new barrier)."""
    path = "/tables/" + table.split(".")[-1] + "?"
    polls = 0
    for line in log:
        if line.startswith("POST") and "/transactions/commit" in line:
            break
        polls += line.startswith("GET") and path in line
    return polls


def _polled_after(log: list[str], table: str) -> bool:
    """Whether ``table`` was loaded after the window's last commit (the next trigger's look, not this batch's)."""
    path = "/tables/" + table.split(".")[-1] + "?"
    commits = [i for i, line in enumerate(log) if line.startswith("POST") and "/transactions/commit" in line]
    return bool(commits) and any(line.startswith("GET") and path in line for line in log[commits[-1] + 1:])
