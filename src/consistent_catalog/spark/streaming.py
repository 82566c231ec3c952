"""Spark Structured Streaming: streaming roots and streaming epoch jobs (protocol §5.7).

A **streaming root** is a ``foreachBatch`` writer that commits each micro-batch to a root table as
one barrier-tagged snapshot, exactly once across restarts, the way Iceberg's own streaming sink
commits each micro-batch as one snapshot::

    query = start_root_stream(
        spark.readStream.schema("word string, ts timestamp").json("/data/incoming"),
        cc, "demo.words", checkpoint_location="/chk/words", trigger="1 second",
        event_time_column="ts", watermark_delay="10 seconds")       # omit both: processing-time barriers

or, composing the ``writeStream`` yourself::

    writer = RootStreamWriter(cc, "demo.words")
    query = writer.watch(frame.writeStream.foreachBatch(writer).option("checkpointLocation", chk).start())

- Barrier of a batch: with ``event_time_column`` the query's event-time watermark once the batch is
  in, ``max(event time) - watermark_delay`` (what Spark's ``withWatermark`` reports for the next
  batch); rows behind the root's watermark W are late and land with barrier ``W + 1`` (protocol §3.2),
  never changing a completed barrier. Without it, processing time (the commit's clock).
- Exactly once: each batch is ingested with the key ``<query id>/<batch id>`` (``ingest_dataframe``'s
  idempotency key, protocol §5.6). Spark keeps the query id in the checkpoint and replays an
  unfinished batch with the same id and the same rows, so a batch committed before a crash (also
  between the Iceberg commit and Spark's checkpoint commit) is skipped on replay.
- Idle sources (FLIP-276): while the query runs but receives no rows for ``idle_after``, the root's
  watermark follows the clock (``advance_watermark`` to now, minus ``watermark_delay`` for event
  time), so the tables downstream keep moving; rows that arrive later land as late data.

A **streaming epoch job** runs an ``EpochJob``/``SparkEpochJob`` as a Structured Streaming query: a
``rate-micro-batch`` source fires one micro-batch per trigger and ``foreachBatch`` runs one epoch
(``run_epoch``: plan, stage, fenced publish), so the job is managed like any other streaming query
(``awaitTermination``, ``stop``, ``lastProgress``, a checkpoint location)::

    job = SparkEpochJob(cc, spark, "word-count", sources=["demo.words"], sinks=["demo.word_counts"],
                        transform="SELECT word, count(*) AS cnt FROM words GROUP BY word", mode="overwrite")
    query = start_streaming_job(job, checkpoint_location="/chk/word-count", trigger="1 second")
    query.awaitTermination()          # query.stop() elsewhere: stops and unregisters the job

The job is registered when the query starts and unregistered when it stops or fails (a
``StreamingQueryListener``); its lease is renewed while it runs, also when idle. Exactly-once after
``kill -9`` comes from the epoch protocol itself (§5.4): a restart re-plans from metadata. A restart
from the same checkpoint takes over from the instances that checkpoint started before (their ids
are kept in ``<checkpoint>/consistent-catalog/instances``), so resuming after a crash needs no
``takeover=True`` — while another deployment of the job (another checkpoint) is still refused.

Kafka works the same way (``spark.readStream.format("kafka")``: offsets in the checkpoint, replays
with the same batch id); see the README. Only the file and rate sources are exercised by the tests.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, Union

from consistent_catalog.catalog import ConsistentCatalog
from consistent_catalog.epoch import EpochJob, EpochResult
from consistent_catalog.exceptions import FencedError, InvalidBarrierError, InvalidInputError
from consistent_catalog.ownership import Lease
from consistent_catalog.spark import _jvm
from consistent_catalog.spark.job import enable_staged_writes, ingest_dataframe, max_event_time
from consistent_catalog.util.durations import parse_duration
from consistent_catalog.util.identifiers import normalize_identifier
from consistent_catalog.util.time import now_ms
from consistent_catalog.write_plans import LATE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

log = logging.getLogger(__name__)

Duration = Union[int, float, str, timedelta]
Trigger = Union[str, int, float, Mapping[str, Any], None]

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Spark's local property naming the running query (set on the micro-batch thread; stable across restarts)."""
INSTANCES_FILE = "consistent-catalog/instances"
"""Under a streaming job's checkpoint: the lease-holder ids its runs registered with, one per line."""
KEEP_INSTANCES = 20
DEFAULT_IDLE_AFTER = "5s"

_SPARK_UNITS = {
    "ms": "ms", "millisecond": "ms", "milliseconds": "ms",
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "m": "m", "min": "m", "mins": "m", "minute": "m", "minutes": "m",
    "h": "h", "hour": "h", "hours": "h",
    "d": "d", "day": "d", "days": "d",
}
_INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+(?:\.\d+)?)\s*([a-z]+)\s*$", re.IGNORECASE)


def duration_ms(value: Duration) -> int:
    """Milliseconds of a duration in Spark's words (``"10 seconds"``, ``"1 minute"``) or the project's
    (``"10s"``, a timedelta, a bare number of milliseconds: ``util.durations``)."""
    if isinstance(value, str):
        match = _INTERVAL.match(value)
        if match is not None and match.group(2).lower() in _SPARK_UNITS:
            value = f"{match.group(1)}{_SPARK_UNITS[match.group(2).lower()]}"
    return parse_duration(value)


def trigger_ms(trigger: Trigger) -> int | None:
    """The processing-time interval of a trigger (None: once/availableNow/continuous or unparseable)."""
    if trigger is None or isinstance(trigger, Mapping) and "processingTime" not in trigger:
        return 0 if trigger is None else None
    value = trigger["processingTime"] if isinstance(trigger, Mapping) else trigger
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value * 1000)
    try:
        return duration_ms(value)
    except InvalidInputError:
        return None


def _with_trigger(writer: DataStreamWriter, trigger: Trigger) -> DataStreamWriter:
    """``trigger``: a processing-time interval (``"1 second"``, seconds as a number) or ``trigger(**mapping)``."""
    if trigger is None:
        return writer
    if isinstance(trigger, Mapping):
        return writer.trigger(**dict(trigger))
    if isinstance(trigger, (int, float)) and not isinstance(trigger, bool):
        return writer.trigger(processingTime=f"{int(trigger * 1000)} milliseconds")
    return writer.trigger(processingTime=str(trigger))


class StreamingQueryHandle:
    """A ``StreamingQuery`` with the catalog's part attached; everything else is the query's own.

    ``id``, ``runId``, ``name``, ``isActive``, ``status``, ``lastProgress``, ``recentProgress``,
    ``exception()``, ``processAllAvailable()`` and ``explain()`` are the wrapped query's; ``stop()``
    and ``awaitTermination()`` also finish what the catalog started (threads, registrations).
    """

    def __init__(self, query: StreamingQuery) -> None:
        self.query = query

    def __getattr__(self, name: str) -> Any:
        if name == "query":  # not yet set (during __init__ or unpickling)
            raise AttributeError(name)
        return getattr(self.query, name)

    def awaitTermination(self, timeout: float | None = None) -> bool | None:  # noqa: N802 (Spark's name)
        try:
            return self.query.awaitTermination(timeout)
        finally:
            if not self.query.isActive:
                self._finished()

    def stop(self, timeout: float = 120.0) -> None:
        """Stop the query once its running micro-batch is done (waiting at most ``timeout`` s), then clean up."""
        try:
            with self._quiet(timeout):
                self.query.stop()
        finally:
            self._finished()

    @contextmanager
    def _quiet(self, timeout: float) -> Iterator[None]:
        """Hold off new micro-batch work while the query stops (subclasses: wait for the running one)."""
        yield

    def _finished(self) -> None:
        """Release what the catalog holds for this query (idempotent)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.query.name or self.query.id} active={self.query.isActive}>"


# --- streaming roots ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RootBatch:
    """One micro-batch of a streaming root: where it landed (or that it had landed before: ``skipped``)."""

    batch_id: int
    key: str
    snapshot_id: int | None
    """The root snapshot holding the batch; None: the batch had no rows and nothing was written."""
    barrier: int | None
    skipped: bool
    seconds: float


class RootStreamWriter:
    """``foreachBatch`` writer: each micro-batch becomes one barrier-tagged snapshot of root ``table``, exactly once.

    ``event_time_column`` (a timestamp, date or epoch-ms column) with ``watermark_delay`` gives
    event-time barriers ``max(event time) - delay`` (rows behind the root's watermark land late, one
    above it); without it the barrier is processing time. Durations (``watermark_delay``,
    ``idle_after``) are Spark's ``"10 seconds"``, ``"10s"``, a timedelta or milliseconds. Columns of the batch that the table does
    not have (such as the event time itself) are dropped before writing. Event time costs one more
    pass over each batch (its maximum); ``persist=True`` caches the batch for it, so the source is
    read once — slower where the source is cheap to read again (measured with the rate source).
    """

    def __init__(
        self,
        cc: ConsistentCatalog,
        table: str,
        *,
        event_time_column: str | None = None,
        watermark_delay: Duration = 0,
        allow_future: bool = False,
        persist: bool = False,
        spark_catalog: str = "lake",
        keep: int = 1000,
    ) -> None:
        self.cc = cc
        self.table = normalize_identifier(table)
        loaded, state = cc.store.load(self.table)
        if not state.is_root:
            raise InvalidInputError(f"{self.table} is derived from {', '.join(state.sources)}; a streaming root writes a root table")
        loaded = enable_staged_writes(cc, self.table, loaded)  # before the query's session caches the table
        self.columns = [f.name for f in loaded.schema().fields]
        self.event_time_column = event_time_column
        self.watermark_delay_ms = duration_ms(watermark_delay)
        self.allow_future = allow_future
        self.persist = persist
        self.spark_catalog = spark_catalog
        self.batches: deque[RootBatch] = deque(maxlen=keep)
        self.last_activity = time.monotonic()
        self._query_id: str | None = None
        self._started = threading.Event()
        self.idle_advances: deque[int] = deque(maxlen=keep)
        self.busy = threading.Lock()
        """Held while a micro-batch is being written (``stop()`` waits for it)."""

    # --- foreachBatch ---
    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        with self.busy:
            self._write_batch(frame, batch_id)

    def _write_batch(self, frame: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        self.last_activity = started
        key = f"{self.query_id(frame)}/{batch_id}"
        barrier: int | Literal["late"] | None = None
        cached = False
        try:
            if self.event_time_column is not None:
                if self.persist:
                    frame = frame.persist()
                    cached = True
                latest = max_event_time(frame, self.event_time_column)
                if latest is None and frame.isEmpty():  # a batch without rows (Spark runs some for stateful queries)
                    self.batches.append(RootBatch(batch_id, key, None, None, False, time.monotonic() - started))
                    return
                # rows without an event time are late rows: W + 1 (write_plans.LATE), as the plugin's streaming root
                barrier = LATE if latest is None else max(0, latest - self.watermark_delay_ms)
            extra = [c for c in frame.columns if c not in self.columns]
            out = frame.drop(*extra) if extra else frame
            result = ingest_dataframe(
                self.cc, out, self.table, barrier=barrier, key=key, allow_future=self.allow_future,
                spark_catalog=self.spark_catalog,
            )
        finally:
            if cached:
                frame.unpersist()
        self.batches.append(
            RootBatch(batch_id, key, result.snapshot_id, result.barrier, result.skipped, time.monotonic() - started)
        )
        self.last_activity = time.monotonic()
        log.info("%s: batch %s %s at barrier %s", self.table, key, "skipped (landed before)" if result.skipped else
                 "landed", result.barrier)

    def query_id(self, frame: DataFrame) -> str:
        """The running query's id: Spark's local property on the micro-batch thread, else the watched query's."""
        query_id = frame.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if query_id:
            return str(query_id)
        if self._query_id is None and not self._started.wait(60):
            raise InvalidInputError(
                "the streaming query's id is not visible in foreachBatch (not a PySpark micro-batch thread?); "
                "start the query through RootStreamWriter.watch or start_root_stream"
            )
        assert self._query_id is not None
        return self._query_id

    # --- the query ---
    def watch(self, query: StreamingQuery, *, idle_after: Duration | None = DEFAULT_IDLE_AFTER,
              check_every: float = 1.0) -> StreamingRootQuery:
        """Attach to the started query: its id for the batch keys, and the idle-source rule while it runs."""
        self._query_id = str(query.id)
        self._started.set()
        return StreamingRootQuery(query, self, idle_after=idle_after, check_every=check_every)

    def advance_if_idle(self, query: StreamingQuery, idle_after_ms: int) -> int | None:
        """Advance the root's watermark to the clock if the query is running and has had no rows for ``idle_after_ms``.

        Returns the new watermark, or None when the query is busy, not idle long enough, or an ingest
        got there first. The clock is ``now`` for processing-time barriers and ``now - watermark_delay``
        for event time (what the watermark would be if an event arrived now).
        """
        if not query.isActive:
            return None
        status = query.status
        if status.get("isDataAvailable") or status.get("isTriggerActive"):
            return None
        if (time.monotonic() - self.last_activity) * 1000 < idle_after_ms:
            return None
        lag = self.watermark_delay_ms if self.event_time_column is not None else 0
        target = now_ms() - lag
        current = self.cc.store.state(self.table).watermark()
        if current is not None and target <= current:
            return None
        try:
            value = self.cc.advance_watermark(self.table, target)
        except (FencedError, InvalidBarrierError):
            return None  # a batch landed meanwhile
        self.idle_advances.append(value)
        return value


class StreamingRootQuery(StreamingQueryHandle):
    """A streaming root's query: the Spark query plus the idle-source rule running beside it."""

    def __init__(self, query: StreamingQuery, writer: RootStreamWriter, *, idle_after: Duration | None,
                 check_every: float) -> None:
        super().__init__(query)
        self.writer = writer
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if idle_after is not None:
            idle_ms = duration_ms(idle_after)
            self._thread = threading.Thread(
                target=self._idle_loop, args=(idle_ms, check_every), name=f"idle-{writer.table}", daemon=True
            )
            self._thread.start()

    @property
    def batches(self) -> list[RootBatch]:
        return list(self.writer.batches)

    def _idle_loop(self, idle_ms: int, check_every: float) -> None:
        failures = 0
        while not self._stop.wait(check_every):
            try:
                if not self.query.isActive:
                    return
                self.writer.advance_if_idle(self.query, idle_ms)
                failures = 0
            except Exception as exc:  # a catalog hiccup: try again next tick; the JVM gone (spark.stop()): give up
                failures += 1
                if self._stop.is_set() or failures >= 5:
                    return
                log.warning("%s: idle-source check failed: %s", self.writer.table, exc)

    @contextmanager
    def _quiet(self, timeout: float) -> Iterator[None]:
        # Wait for the batch being written, so it lands rather than being cancelled half-way (that
        # would be safe too: Spark replays it on restart and its key makes it land once).
        if self.writer.busy.acquire(timeout=timeout):
            self.writer.busy.release()
        yield

    def _finished(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)


def start_root_stream(
    frame: DataFrame,
    cc: ConsistentCatalog,
    table: str,
    *,
    checkpoint_location: str,
    trigger: Trigger = "1 second",
    event_time_column: str | None = None,
    watermark_delay: Duration = 0,
    idle_after: Duration | None = DEFAULT_IDLE_AFTER,
    query_name: str | None = None,
    allow_future: bool = False,
    persist: bool = False,
    spark_catalog: str = "lake",
) -> StreamingRootQuery:
    """Start a streaming query that lands every micro-batch of ``frame`` in root ``table`` (see ``RootStreamWriter``).

    ``trigger``: a processing-time interval (``"1 second"``, or seconds as a number), or keyword
    arguments of ``DataStreamWriter.trigger`` (``{"availableNow": True}``). With ``event_time_column``
    the stream also gets ``withWatermark(event_time_column, watermark_delay)``, so Spark's progress
    reports the same watermark the barriers follow. ``idle_after=None`` turns the idle-source rule off.
    The query's own session caches the table it writes (``_stream_catalog_cache``); a query started
    by hand with ``writeStream.foreachBatch(RootStreamWriter(...))`` works the same, with one catalog
    load per micro-batch more.
    """
    writer = RootStreamWriter(cc, table, event_time_column=event_time_column, watermark_delay=watermark_delay,
                              allow_future=allow_future, persist=persist, spark_catalog=spark_catalog)
    if event_time_column is not None:
        frame = frame.withWatermark(event_time_column, f"{writer.watermark_delay_ms} milliseconds")
    stream = frame.writeStream.foreachBatch(writer).option("checkpointLocation", checkpoint_location)
    stream = stream.queryName(query_name or f"consistent-root-{writer.table}")
    with _stream_catalog_cache(frame.sparkSession, spark_catalog):
        query = _with_trigger(stream, trigger).start()
    return writer.watch(query, idle_after=idle_after)


@contextmanager
def _stream_catalog_cache(spark: SparkSession, catalog: str) -> Iterator[None]:
    """Start a query whose own session caches ``catalog``'s tables; the caller's session keeps its setting.

    A streaming query runs on a clone of the session, taken when it starts, with catalogs of its own.
    The root writer's clone only writes: every micro-batch's ``writeTo`` would otherwise load the
    table from the catalog again (one catalog query and a metadata parse in the JVM, about a tenth of
    a 100k-row batch); Iceberg's commit refreshes the metadata anyway, and the cached table already
    has staged writes enabled (``RootStreamWriter`` sets it before the query starts).
    """
    key = f"spark.sql.catalog.{catalog}.cache-enabled"
    with _CONF_LOCK:
        _jvm.catalog_plugin(spark, catalog)  # the caller's own catalog exists before the flip and keeps its setting
        previous = spark.conf.get(key, None)
        spark.conf.set(key, "true")
        try:
            yield
        finally:
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)


_CONF_LOCK = threading.Lock()


# --- streaming epoch jobs ----------------------------------------------------------------------------


class StreamingJobQuery(StreamingQueryHandle):
    """A streaming epoch job's query: one epoch per micro-batch; ``stop()`` stops it and unregisters the job."""

    def __init__(self, query: StreamingQuery, driver: _EpochDriver) -> None:
        super().__init__(query)
        self.driver = driver

    @property
    def job(self) -> EpochJob:
        return self.driver.job

    @property
    def results(self) -> list[EpochResult]:
        """The latest epochs (one per micro-batch), oldest first."""
        return list(self.driver.results)

    @property
    def lease(self) -> Lease | None:
        return self.driver.job.lease

    @contextmanager
    def _quiet(self, timeout: float) -> Iterator[None]:
        # No new epoch starts (skipping one is safe: the next run plans from metadata) and the running
        # one finishes, so stopping cancels no half-written epoch.
        self.driver.stopping.set()
        acquired = self.driver.busy.acquire(timeout=timeout)
        try:
            yield
        finally:
            if acquired:
                self.driver.busy.release()

    def _finished(self) -> None:
        self.driver.release()


class _EpochDriver:
    """The ``foreachBatch`` function of a streaming epoch job, and its registration."""

    def __init__(self, job: EpochJob, *, keep: int = 1000, on_epoch: Callable[[EpochResult], Any] | None = None,
                 wait_ms: int = 0, poll_ms: int = 50) -> None:
        self.job = job
        self.wait_ms = wait_ms
        """How long an epoch that found no new input waits for a source to move (within the trigger interval)."""
        self.poll_ms = poll_ms
        self.results: deque[EpochResult] = deque(maxlen=keep)
        self.on_epoch = on_epoch
        self.run_id: str | None = None
        self._lock = threading.Lock()
        self._released = False
        self.busy = threading.Lock()
        """Held while an epoch runs."""
        self.stopping = threading.Event()

    def __call__(self, frame: DataFrame, batch_id: int) -> None:  # the micro-batch's rows are only its clock
        if self.stopping.is_set() or self._released:
            return
        deadline = time.monotonic() + self.wait_ms / 1000
        with self.busy:
            if self.stopping.is_set():
                return
            result = self._epoch()
            if not result.did_work and self.wait_ms > 0:
                # Nothing new: rather than idle until the next trigger, watch the sources (one catalog
                # query per poll) and run the epoch as soon as one moves, so a hop of the DAG costs
                # its epoch, not also the wait for the next trigger.
                seen = self._sources()
                while time.monotonic() + self.poll_ms / 1000 < deadline and not self.stopping.wait(self.poll_ms / 1000):
                    if self._sources() != seen:
                        result = self._epoch()
                        break
        if self.on_epoch is not None:
            self.on_epoch(result)

    def _epoch(self) -> EpochResult:
        result = self.job.run_epoch()
        self.results.append(result)
        self.renew_if_due()
        return result

    def _sources(self) -> tuple[tuple[int | None, int | None], ...]:
        """Where the job's sources stand: (main's head, watermark) of each."""
        return tuple((s.head(), s.watermark()) for s in self.job.cc.store.states(self.job.sources))

    def renew_if_due(self) -> None:
        """Renew the lease once half of it is gone (a publish renews it too; an idle job only here)."""
        lease = self.job.lease
        if lease is not None and lease.until_ms - now_ms() < self.job.lease_ms / 2:
            self.job.lease = self.job.cc.renew_lease(lease, self.job.lease_ms)

    def release(self) -> None:
        """Unregister the job, once. ``stop()`` and the query-terminated listener both call it: the lock is held
        for the whole release, so the second caller returns only once the first has unregistered."""
        with self._lock:
            if self._released:
                return
            self._released = True  # set first: an epoch that starts meanwhile is skipped (__call__)
            try:
                self.job.unregister()
            except Exception as exc:  # the catalog unreachable at shutdown: the lease lapses on its own
                log.warning("%s: unregistering after the query ended failed: %s", self.job.job, exc)


def start_streaming_job(
    job: EpochJob,
    *,
    checkpoint_location: str,
    trigger: Trigger = "5 seconds",
    spark: SparkSession | None = None,
    query_name: str | None = None,
    takeover: bool | None = None,
    on_epoch: Callable[[EpochResult], Any] | None = None,
) -> StreamingJobQuery:
    """Run ``job`` as a Structured Streaming query: one epoch per trigger; returns the query.

    The job is registered first (refused like any registration while another instance holds its
    sinks; ``takeover`` defaults to the job's own setting, and a restart from the same checkpoint
    always takes over from that checkpoint's earlier instances). ``trigger``: a processing-time
    interval (``"1 second"``) or ``DataStreamWriter.trigger`` keywords (``{"availableNow": True}``
    runs one epoch). With a processing-time trigger, an epoch that finds no new input watches the
    sources (a catalog query every 50 ms) for most of the interval and runs once one moves, so a job
    follows its upstream within ~50 ms instead of at its next trigger. The lease must outlast two
    triggers; it is renewed once half of it is gone.
    A job already registered (``job.register()``, ``with job:``) keeps its registration, which the
    query's end then releases. ``spark``: the session to run the query in (default: a
    ``SparkEpochJob``'s own). Jobs running side by side in one session (one application) never read
    each other's source views: ``SparkEpochContext.sql`` resolves its views before another job may
    replace them. ``on_epoch`` is called with each epoch's ``EpochResult`` on the micro-batch thread.
    """
    spark = spark if spark is not None else getattr(job, "spark", None)
    if spark is None:
        raise InvalidInputError(f"job {job.job!r} is not a SparkEpochJob; pass spark= (the session to run its query in)")
    interval = trigger_ms(trigger)
    if interval is not None and interval * 2 >= job.lease_ms:
        raise InvalidInputError(
            f"job {job.job!r}: a trigger every {interval} ms would let its lease ({job.lease_ms} ms) lapse between "
            "epochs; use a shorter trigger or a longer lease_ms (more than two triggers)"
        )
    checkpoint = CheckpointInstances(spark, checkpoint_location)
    if job.lease is None:
        _register_from_checkpoint(job, checkpoint, job.takeover if takeover is None else takeover)
    # an epoch without new input waits for its sources during most of a processing-time trigger's interval
    driver = _EpochDriver(job, on_epoch=on_epoch, wait_ms=int(interval * 0.8) if interval else 0)
    # one new offset per trigger, whatever the interval: every trigger runs a micro-batch (its row is never read)
    ticks = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).option("numPartitions", 1).load()
    stream = ticks.writeStream.foreachBatch(driver).option("checkpointLocation", checkpoint_location)
    stream = stream.queryName(query_name or f"consistent-job-{job.job}")
    try:
        query = _with_trigger(stream, trigger).start()
    except BaseException:
        driver.release()
        raise
    driver.run_id = str(query.runId)
    _ReleaseOnTermination.attach(spark, query, driver.release)
    return StreamingJobQuery(query, driver)


def _register_from_checkpoint(job: EpochJob, checkpoint: CheckpointInstances, takeover: bool) -> None:
    """Register ``job`` with a new instance id recorded in the checkpoint first; take over from the checkpoint's own."""
    earlier = checkpoint.read()
    holders = {s.lease_holder for s in job.cc.store.states(job.sinks)}
    ours = bool(holders & set(earlier))
    instance = uuid.uuid4().hex[:12]
    checkpoint.write([*earlier, instance])  # before registering: a crash right after must still count as ours
    job.lease = job.cc.register_job(
        job.job, job.sources, job.sinks, lease_ms=job.lease_ms, takeover=takeover or ours, instance=instance,
        application=job.application,
    )


class CheckpointInstances:
    """The lease-holder ids a streaming job's runs used, kept in its checkpoint (any Hadoop file system)."""

    def __init__(self, spark: SparkSession, checkpoint_location: str) -> None:
        self.spark = spark
        self.location = checkpoint_location.rstrip("/") + "/" + INSTANCES_FILE

    def _fs(self) -> tuple[Any, Any]:
        path = _jvm.jvm(self.spark).org.apache.hadoop.fs.Path(self.location)
        return path.getFileSystem(_jvm.hadoop_configuration(self.spark)), path

    def read(self) -> list[str]:
        fs, path = self._fs()
        if not fs.exists(path):
            return []
        stream = fs.open(path)
        try:
            text = _jvm.jvm(self.spark).org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()
        return [line for line in str(text).split() if re.fullmatch(r"[0-9a-f]{12}", line)]

    def write(self, instances: Iterable[str]) -> None:
        fs, path = self._fs()
        fs.mkdirs(path.getParent())
        kept = list(dict.fromkeys(instances))[-KEEP_INSTANCES:]
        stream = fs.create(path, True)
        try:
            stream.write(bytearray("".join(f"{i}\n" for i in kept).encode()))
        finally:
            stream.close()


class _ReleaseOnTermination:
    """One ``StreamingQueryListener`` per session: runs a query's release when it terminates (stop, failure)."""

    _by_session: dict[int, _ReleaseOnTermination] = {}
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.callbacks: dict[str, Callable[[], None]] = {}

    @classmethod
    def attach(cls, spark: SparkSession, query: StreamingQuery, release: Callable[[], None]) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        outer = cls
        with cls._lock:
            key = id(_jvm.java_session(spark))
            registry = cls._by_session.get(key)
            if registry is None:
                registry = cls._by_session[key] = outer()

                class Listener(StreamingQueryListener):
                    def onQueryStarted(self, event: Any) -> None:  # noqa: N802
                        pass

                    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
                        pass

                    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
                        pass

                    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
                        callback = registry.callbacks.pop(str(event.runId), None)
                        if callback is not None:
                            callback()

                spark.streams.addListener(Listener())
            registry.callbacks[str(query.runId)] = release
        if not query.isActive:  # ended before the listener knew it
            registry.callbacks.pop(str(query.runId), None)
            release()

