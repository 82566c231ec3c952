"""Epoch jobs, root ingestion and consistent reads with PySpark doing the data work.

Planning, ownership and the fenced publish are the pyiceberg ``EpochJob``'s; only the reads and the
staged write go through Spark, with the summary keys set by ``snapshot-property.*`` write options.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Union

from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update import SetPropertiesUpdate, SetSnapshotRefUpdate

from consistent_catalog import openlineage_events, write_plans
from consistent_catalog import properties as P
from consistent_catalog.barrier import BarrierLike, to_barrier
from consistent_catalog.catalog import ConsistentCatalog
from consistent_catalog.commit import RetryPolicy
from consistent_catalog.definition import job_definition, sql_definition
from consistent_catalog.epoch import EpochJob, Staged
from consistent_catalog.epoch_plan import EpochPlan, check_append_only
from consistent_catalog.exceptions import FencedError, InvalidInputError
from consistent_catalog.faults import Fault, unavailable
from consistent_catalog.ingest import IngestResult, contention_policy
from consistent_catalog.resolver import DEFAULT_LEVEL, Cut
from consistent_catalog.spark import _jvm
from consistent_catalog.sql import view_names
from consistent_catalog.util.identifiers import normalize_identifier, qualified_name, quote_identifier
from consistent_catalog.util.time import now_ms

WAP_ENABLED = "write.wap.enabled"
VIEWS_LOCK = threading.RLock()
"""Held from registering an epoch's temp views until its SQL is analysed (jobs sharing a session, ``SparkEpochContext.sql``)."""

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SparkTransform = Union[str, Callable[["SparkEpochContext"], "DataFrame | Mapping[str, DataFrame] | None"]]


def snapshot_options(properties: Mapping[str, str]) -> dict[str, str]:
    """Write options that make Iceberg put ``properties`` into the snapshot summary."""
    return {f"snapshot-property.{k}": v for k, v in properties.items()}


def branch_identifier(spark_catalog: str, table: str, branch: str) -> str:
    return f"{qualified_name(spark_catalog, table)}.{quote_identifier('branch_' + branch)}"



def read_snapshot(spark: SparkSession, qualified: str, snapshot_id: int) -> DataFrame:
    """``qualified`` at snapshot ``snapshot_id``, by Spark's own time travel option (``versionAsOf``).

    Iceberg's ``snapshot-id`` read option is refused by Iceberg 1.12's Spark 4.1 runtime ("use Spark built-in
    versionAsOf instead"); ``versionAsOf`` works on every supported line.
    """
    return spark.read.format("iceberg").option("versionAsOf", str(snapshot_id)).load(qualified)

class SparkEpochContext:
    """What a Spark transform sees: DataFrames of the sources pinned at ``snap(source, T)``."""

    def __init__(
        self, job: SparkEpochJob, plan: EpochPlan, previous: Mapping[str, int | None], fresh: frozenset[str] = frozenset()
    ) -> None:
        assert plan.barrier is not None
        self.spark = job.spark
        self.job = job.job
        self.barrier = plan.barrier
        self.inputs = dict(plan.inputs)
        self.previous_inputs = dict(previous)
        self.fresh_sinks = fresh
        """Sinks whose new generation this epoch computes (protocol §6.10): ``read_sink`` reads them empty."""
        self.epoch_job = job

    def _source(self, source: str) -> str:
        name = normalize_identifier(source)
        if name not in self.inputs:
            raise InvalidInputError(f"{name} is not a source of job {self.job!r}; its sources are {sorted(self.inputs)}")
        return name

    def _qualified(self, table: str) -> str:
        return qualified_name(self.epoch_job.spark_catalog, table)

    def read(self, source: str) -> DataFrame:
        """The source's full content at the epoch's barrier."""
        name = self._source(source)
        snapshot_id = self.inputs[name]
        if snapshot_id is None:
            return self.spark.table(self._qualified(name)).limit(0)
        return read_snapshot(self.spark, self._qualified(name), snapshot_id)

    def read_increment(self, source: str) -> DataFrame:
        """Rows appended since the previous epoch's input (Iceberg incremental read; appends only)."""
        name = self._source(source)
        start, end = self.previous_inputs.get(name), self.inputs[name]
        if end is None or start == end:
            return self.spark.table(self._qualified(name)).limit(0)
        if start is None:
            return self.read(name)
        check_append_only(self.epoch_job.cc.store.state(name), start, end)
        return (
            self.spark.read.format("iceberg")
            .option("start-snapshot-id", str(start))
            .option("end-snapshot-id", str(end))
            .load(self._qualified(name))
        )

    def read_sink(self, sink: str) -> DataFrame:
        """A sink's published content (main), e.g. to merge into; empty while the epoch computes its new generation."""
        name = normalize_identifier(sink)
        head = self.epoch_job.cc.store.state(name).head()
        if head is None or name in self.fresh_sinks:
            return self.spark.table(self._qualified(name)).limit(0)
        return read_snapshot(self.spark, self._qualified(name), head)

    def register_views(self, incremental: bool = False) -> dict[str, str]:
        """Temp views named after the sources (``words`` for ``demo.words``) at the epoch's snapshots.

        The names are the session's: two jobs sharing a SparkSession (streaming jobs run side by side)
        replace each other's ``words``. ``sql`` is safe (it holds ``VIEWS_LOCK`` until the query is
        analysed); a callable transform that registers views and then runs SQL should hold it too.
        """
        names = view_names(sorted(self.inputs))
        for table, view in names.items():
            frame = self.read_increment(table) if incremental else self.read(table)
            frame.createOrReplaceTempView(quote_identifier(view))
        return names

    def sql(self, query: str, incremental: bool = False) -> DataFrame:
        """``query`` over the sources' views; the views are resolved before another job can replace them.

        ``spark.sql`` analyses the query at once, binding each view name to the plan registered just
        before (a pinned snapshot or an increment), so the returned DataFrame no longer depends on the
        names; ``VIEWS_LOCK`` keeps another job's ``register_views`` out of that window.
        """
        with VIEWS_LOCK:
            self.register_views(incremental)
            return self.spark.sql(query)


class SparkEpochJob(EpochJob):
    """An epoch job whose transform is a function of DataFrames or SQL over the sources' names.

    >>> job = SparkEpochJob(cc, spark, "word-count", sources=["demo.words"], sinks=["demo.word_counts"],
    ...     transform="SELECT word, count(*) AS cnt FROM words GROUP BY word", mode="overwrite")  # doctest: +SKIP
    >>> with job:                                                                                # doctest: +SKIP
    ...     job.run_continuously(interval=5)

    Modes: ``append``, ``overwrite`` (replace the sink's content), ``merge`` (upsert by ``keys``).
    With ``incremental=True`` a SQL transform sees only the rows appended since the last epoch.
    """

    MODES = ("append", "overwrite", "merge")

    def __init__(
        self,
        cc: ConsistentCatalog,
        spark: SparkSession,
        job: str,
        *,
        sources: Iterable[str],
        sinks: Iterable[str],
        transform: SparkTransform,
        mode: str = "append",
        keys: Iterable[str] = (),
        incremental: bool = False,
        spark_catalog: str = "lake",
        **options: Any,
    ) -> None:
        super().__init__(cc, job, sources=sources, sinks=sinks, transform=None, mode=mode, **options)
        self.spark = spark
        self.spark_transform = transform
        self.application = spark.sparkContext.applicationId
        if self.definition is None:  # no declared version: the SQL text, or the function's name and source (§6.10)
            self.definition = sql_definition(transform) if isinstance(transform, str) else job_definition(transform=transform)
        if isinstance(transform, str) and self.lineage_events is not None:
            self.lineage_events.sql = transform  # the job's SQL: the spec's ``sql`` job facet
        self.keys = tuple(keys)
        self.incremental = incremental
        self.spark_catalog = spark_catalog
        if mode == "merge" and not self.keys:
            raise InvalidInputError(f"job {job!r}: merge mode needs keys=[...] naming the columns rows are matched on")

    def _call_transform(
        self, plan: EpochPlan, previous: Mapping[str, int | None], fresh: frozenset[str] = frozenset()
    ) -> Any:
        ctx = SparkEpochContext(self, plan, previous, fresh)
        if isinstance(self.spark_transform, str):
            return ctx.sql(self.spark_transform, incremental=self.incremental)
        return self.spark_transform(ctx)

    def stage(self, sink: str, plan: EpochPlan, data: DataFrame | None) -> Staged:
        """Spark writes the epoch onto ``consistent-staged``; the result is then verified from metadata.

        Spark's own commit cannot carry our fencing requirement, so afterwards every snapshot between
        main's head and the staged head must carry this attempt's id; anything else means another
        writer interfered, and the epoch is refused (re-planning discards it).
        """
        table, base_id = self.prepare_staged_branch(sink, plan)
        properties = self.summary_properties(plan, sink)
        mode = self.write_mode(plan, sink)
        if data is None:  # nothing to write: the empty snapshot still records barrier and inputs
            emptied = None
            if mode == "overwrite" and plan.sinks[sink].action == "regenerate":  # a new generation without rows
                emptied = self._write_staged(table, base_id, properties, table.schema().as_arrow().empty_table(),
                                             "overwrite", plan)
            if emptied is None:
                self.record_empty_epoch(sink, base_id, properties, plan)
            return self.verify_staged(sink, plan, base_id, properties[P.ATTEMPT])
        target = branch_identifier(self.spark_catalog, sink, P.STAGED_BRANCH)
        columns = [f.name for f in table.schema().fields]
        missing = [c for c in columns if c not in data.columns]
        if missing:
            raise InvalidInputError(f"{sink}: the transform's output lacks column(s) {missing}; it has {data.columns}")
        frame = data.select(*columns)

        def write() -> None:
            if mode == "merge":
                self._merge(frame, target, properties)
            else:
                writer = frame.writeTo(target).options(**snapshot_options(properties))
                if mode == "append":
                    writer.append()
                else:
                    from pyspark.sql.functions import lit

                    writer.overwrite(lit(True))

        self._settled_write(sink, base_id, properties[P.ATTEMPT], write)
        if self.cc.store.state(sink).head(P.STAGED_BRANCH) == base_id:
            self.record_empty_epoch(sink, base_id, properties, plan)  # Spark committed nothing
        return self.verify_staged(sink, plan, base_id, properties[P.ATTEMPT])

    def _settled_write(self, sink: str, base_id: int, attempt: str, write: Callable[[], None]) -> None:
        """Spark's commit of the staged epoch, its catalog faults settled (protocol §6.8).

        Spark's Iceberg client raises ``CommitStateUnknownException`` for an answer it lost. Before
        writing again, the sink is read back: a ``consistent-staged`` head above ``base_id`` that carries
        this attempt's id is the write, landed. Until the store's deadline, then
        ``CatalogUnavailableError``.
        """
        store = self.cc.store
        last: BaseException | None = None
        for _ in store.faults.attempts():
            if last is not None:
                state = store.state(sink)  # faults of the read itself are waited out there
                head = state.head(P.STAGED_BRANCH)
                record = state.snapshots.get(head) if head is not None and head != base_id else None
                if record is not None and record.summary.get(P.ATTEMPT) == attempt:
                    return
            try:
                write()
                return
            except Exception as exc:
                cause = spark_fault(exc)
                if cause is None:
                    raise
                store.fault_log.record(Fault.UNKNOWN, exc, f"Spark's staged write of {sink}", detail=cause)
                last = exc
        assert last is not None
        raise unavailable(store.name, f"Spark's staged write of {sink}", last, store.faults, landed="unknown",
                          hint=f"`consistent-catalog history {sink} --epochs` shows whether attempt {attempt} landed; "
                               "the next run of the job re-plans either way")

    def _merge(self, frame: DataFrame, target: str, properties: Mapping[str, str]) -> None:
        """``MERGE INTO`` the staged branch by ``keys`` (update matched rows, insert the rest).

        SQL statements take no write options, so the summary keys travel through Iceberg's
        ``CommitMetadata.withCommitProperties`` (a thread-local on the JVM side, set around the MERGE).
        """
        view = f"consistent_merge_source_{properties[P.ATTEMPT]}"
        # The source is computed first (a local checkpoint: no table left in the view's plan). Spark 4.1 keeps a
        # DataFrame's Iceberg tables in a temp view as TableReference nodes that MERGE's rewrite leaves unresolved
        # ("No plan for TableReference": apache/spark#56515, apache/iceberg#16451); every line gets the same plan.
        frame = frame.localCheckpoint(eager=True)
        frame.createOrReplaceTempView(view)
        on = " AND ".join(f"t.{quote_identifier(k)} = s.{quote_identifier(k)}" for k in self.keys)
        statement = (
            f"MERGE INTO {target} AS t USING {quote_identifier(view)} AS s ON {on} "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        try:
            with_commit_properties(self.spark, properties, lambda: self.spark.sql(statement))
        finally:
            self.spark.catalog.dropTempView(view)


#: Java exceptions (by name, anywhere in the cause chain Spark reports) that are catalog faults
_JAVA_FAULTS = (
    "org.apache.iceberg.exceptions.CommitStateUnknownException", "org.apache.iceberg.exceptions.ServiceFailureException",
    "org.apache.iceberg.exceptions.ServiceUnavailableException", "org.apache.iceberg.exceptions.RESTException:",
    "java.net.SocketException", "java.net.SocketTimeoutException", "java.net.ConnectException",
    "NoHttpResponseException", "SQLTransientConnectionException", "database is locked",
)


def spark_fault(exc: BaseException) -> str | None:
    """The Java exception (its ``toString``) that makes a failed Spark write a catalog fault, read from the
    causes Spark reports; None when it is not one. Spark's Iceberg client has retried 429/503 itself
    already; what reaches Python may have landed, so every such fault is of unknown outcome."""
    texts: list[str] = []
    seen: set[int] = set()
    current: Any = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts.append(str(current))
        java = getattr(current, "java_exception", None)  # py4j's Py4JJavaError
        if java is not None:
            texts.append(str(java.toString()))
            cause = java.getCause()
            while cause is not None:
                texts.append(str(cause.toString()))
                cause = cause.getCause()
        texts.append(str(getattr(current, "_stackTrace", "") or ""))  # pyspark's CapturedException
        current = getattr(current, "cause", None) or current.__cause__
    for line in "\n".join(texts).splitlines():
        if any(marker in line for marker in _JAVA_FAULTS):
            return line.strip()
    return None


class _JavaCallable:
    """A Python function the JVM can call as a ``java.util.concurrent.Callable`` (py4j callback)."""

    def __init__(self, function: Callable[[], Any]) -> None:
        self.function = function

    def call(self) -> None:
        self.function()

    class Java:
        implements = ["java.util.concurrent.Callable"]


def with_commit_properties(spark: SparkSession, properties: Mapping[str, str], run: Callable[[], Any]) -> None:
    """Run ``run`` (e.g. a SQL MERGE) so that every Iceberg commit it makes carries ``properties`` in its summary.

    Relies on PySpark's pinned threads (the default): the callback runs Spark SQL on the JVM thread
    that set Iceberg's commit-properties thread-local.
    """
    _jvm.start_callback_server(spark)
    jvm = _jvm.jvm(spark)
    jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
        jvm.java.util.HashMap(dict(properties)),
        _JavaCallable(run),
        jvm.java.lang.Class.forName("java.lang.RuntimeException"),
    )


# --- roots -----------------------------------------------------------------------------------------


def ingest_dataframe(
    cc: ConsistentCatalog,
    frame: DataFrame,
    table: str,
    *,
    barrier: BarrierLike | Literal["late"] | None = None,
    event_time_column: str | None = None,
    key: str | None = None,
    allow_future: bool = False,
    spark_catalog: str = "lake",
    retries: int | None = None,
) -> IngestResult:
    """Append ``frame`` to a root table with Spark, tagged with a barrier.

    The barrier is, in order: ``barrier`` if given (``"late"``: rows without an event time, W(X) + 1); the maximum of ``event_time_column`` (a timestamp,
    date or epoch-milliseconds column) for event-time barriers; otherwise the current time. It is
    raised to W(X) + 1 if it would fall at or below the table's watermark (see ``ConsistentCatalog.ingest``).

    The ingest is planned by ``write_plans.ingest``, as ``ConsistentCatalog.ingest``'s: Spark writes the rows
    as a staged (write-audit-publish) snapshot that one catalog commit publishes, requiring the fence and
    ``main`` where the barrier and the key were checked (so a concurrent ingest, idle advance, revision or
    takeover makes it plan again). ``key`` makes the ingest idempotent: an ingest of a key already on
    ``main`` is skipped, and two concurrent ingests of one key cannot both land.
    With OpenLineage configured, an ingest that lands is a run of the job ``ingest:<table>`` (protocol §5.8).
    """
    name = normalize_identifier(table)
    return openlineage_events.reporting_ingest(
        cc.name, cc.catalog.properties, name, lambda: cc.store.load_table(name).schema(),
        lambda: _ingest_dataframe(cc, frame, name, barrier=barrier, event_time_column=event_time_column, key=key,
                                  allow_future=allow_future, spark_catalog=spark_catalog, retries=retries),
    )


def _ingest_dataframe(
    cc: ConsistentCatalog, frame: DataFrame, name: str, *, barrier: BarrierLike | Literal["late"] | None,
    event_time_column: str | None,
    key: str | None, allow_future: bool, spark_catalog: str, retries: int | None,
) -> IngestResult:
    fixed: int | Literal["late"] | None = (
        None if barrier is None else write_plans.LATE if barrier == write_plans.LATE else to_barrier(barrier))
    attempts = 0
    for attempts in contention_policy(retries).attempts():  # noqa: B007 - named in the error: refused, plan again
        loaded, state = cc.store.load(name)
        if fixed is None and event_time_column is not None and state.is_root and (
                key is None or state.ingested_with_key(key) is None):  # one Spark job, only when rows may land
            fixed = max_event_time(frame, event_time_column)
            if fixed is None:
                raise InvalidInputError(f"event-time column {event_time_column!r} has no values; pass barrier= explicitly")
        plan = write_plans.ingest(state, now=now_ms(), barrier=fixed, key=key, allow_future=allow_future)
        if plan.skipped_by is not None:
            return IngestResult(name, plan.skipped_by, plan.barrier, key, skipped=True)
        commit = plan.commit
        assert commit is not None and plan.barrier is not None
        # Spark writes the rows as a staged (write-audit-publish) snapshot; one catalog commit publishes it,
        # asserting what the plan asserts (the fence and main as read), keyed or not
        staged, loaded = _stage_with_wap(cc, frame, name, qualified_name(spark_catalog, name), commit.summary, loaded)
        try:
            cc.store.commit(  # the catalog validates the fence against its current metadata, not ``loaded``'s
                loaded,
                commit.requirements,
                [SetSnapshotRefUpdate(ref_name=P.MAIN_BRANCH, type=SnapshotRefType.BRANCH, snapshot_id=staged)],
                what=f"publishing {commit.what}",
            )
        except FencedError:
            continue  # main moved: another ingest landed; plan again (the staged snapshot is left to expiry)
        return IngestResult(name, staged, plan.barrier, key)
    again = " — the key makes it safe to repeat" if key is not None else ""
    raise FencedError(
        f"{name}: ingest{'' if key is None else f' of key {key!r}'} kept losing the race to other ingests "
        f"({attempts} attempts); run it again{again}"
    )


def enable_staged_writes(cc: ConsistentCatalog, name: str, table: Any = None) -> Any:
    """Set ``write.wap.enabled`` on root ``name`` if it is not set; returns the table (as committed, if it changed)."""
    table = cc.load_table(name) if table is None else table
    for _ in RetryPolicy(5).attempts():  # another ingester may be enabling it at the same moment
        if table.metadata.properties.get(WAP_ENABLED) == "true":
            break
        try:
            table = cc.store.commit(table, [], [SetPropertiesUpdate(updates={WAP_ENABLED: "true"})],
                                    what="enabling staged writes")
            break
        except FencedError:
            table = cc.load_table(name)
    return table


def _stage_with_wap(
    cc: ConsistentCatalog, frame: DataFrame, name: str, target: str, properties: Mapping[str, str], table: Any
) -> tuple[int, Any]:
    """Write ``frame`` as a staged snapshot (Iceberg's write-audit-publish) on top of main.

    Returns its id and ``table`` (as committed, if staged writes had to be enabled first).
    """
    table = enable_staged_writes(cc, name, table)
    spark = frame.sparkSession
    wap_id = f"consistent-{uuid.uuid4().hex[:16]}"
    previous = spark.conf.get("spark.wap.id", None)
    spark.conf.set("spark.wap.id", wap_id)
    try:
        frame.writeTo(target).options(**snapshot_options(properties)).append()
    finally:
        if previous is None:
            spark.conf.unset("spark.wap.id")
        else:
            spark.conf.set("spark.wap.id", previous)
    staged = [s for s in cc.store.state(name).snapshots.values() if s.summary.get("wap.id") == wap_id]
    if len(staged) != 1:
        raise FencedError(f"{name}: Spark's staged write {wap_id} left {len(staged)} snapshot(s), expected 1; retry")
    return staged[0].snapshot_id, table


def max_event_time(frame: DataFrame, column: str) -> int | None:
    """The largest value of ``column`` in ``frame`` as a barrier (epoch ms); None when it has no rows (one Spark job).

    ``column``: a timestamp, date or epoch-milliseconds column. Serves ``ingest_dataframe``'s
    ``event_time_column`` and the streaming root's event-time barriers.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, NumericType, TimestampNTZType, TimestampType

    if column not in frame.columns:
        raise InvalidInputError(f"event-time column {column!r} is not in the DataFrame (columns: {frame.columns})")
    dtype = frame.schema[column].dataType
    if isinstance(dtype, (TimestampType, TimestampNTZType, DateType)):
        value = frame.select(F.max(F.unix_millis(F.col(column).cast("timestamp")))).first()[0]
    elif isinstance(dtype, NumericType):
        value = frame.select(F.max(F.col(column))).first()[0]
    else:
        raise InvalidInputError(f"event-time column {column!r} has type {dtype.simpleString()}; use a timestamp or epoch ms")
    return None if value is None else to_barrier(int(value))


# --- consistent reads ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SparkCut:
    cut: Cut
    frames: Mapping[str, DataFrame]
    views: Mapping[str, str]

    def __getitem__(self, table: str) -> DataFrame:
        return self.frames[normalize_identifier(table)]


def read_cut(
    cc: ConsistentCatalog,
    spark: SparkSession,
    tables: Iterable[str],
    *,
    level: str = DEFAULT_LEVEL,
    as_of: BarrierLike | None = None,
    spark_catalog: str = "lake",
    register_views: bool = False,
) -> SparkCut:
    """DataFrames of ``tables`` pinned at one consistent cut (optionally also registered as temp views)."""
    cut = cc.resolve(tables, level=level, as_of=as_of)
    frames = {}
    for name, part in cut.tables.items():
        qualified = qualified_name(spark_catalog, name)
        if part.snapshot_id is None:
            frames[name] = spark.table(qualified).limit(0)
        else:
            frames[name] = read_snapshot(spark, qualified, part.snapshot_id)
    views = view_names(list(cut.tables))
    if register_views:
        for name, frame in frames.items():
            frame.createOrReplaceTempView(quote_identifier(views[name]))
    return SparkCut(cut, frames, views)
