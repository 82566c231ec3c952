"""OpenLineage: run events of epochs and the lineage graph as job events (docs/protocol.md §5.8).

Off unless the standard OpenLineage client is configured (``openlineage.yml``, ``OPENLINEAGE_CONFIG``,
``OPENLINEAGE_URL``, ``OPENLINEAGE__TRANSPORT__*``). ``emitter_for`` answers that from the environment
and the file system alone, so an epoch job that is not configured never imports the client nor
constructs one. Events go out through the client's own transports, from one background thread per job
(in order), so a transport that is slow or down (an HTTP endpoint that does not answer costs the
client's timeout times its retries, seconds per event) never holds an epoch up; a failure is logged and
never fails an epoch. ``EpochJob.__exit__`` and the end of the process wait at most
``FLUSH_SECONDS`` for the events still queued.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import queue
import threading
import time
import traceback
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from consistent_catalog.exceptions import NotInstalledError
from consistent_catalog.probe import catalog_kind

if TYPE_CHECKING:
    from consistent_catalog.epoch_plan import EpochPlan
    from consistent_catalog.lineage import LineageGraph

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'consistent-catalog[openlineage]'"
PRODUCER = "https://pypi.org/project/consistent-catalog/"
"""``producer`` of every event and ``_producer`` of our facet: this package."""
EPOCH_FACET = "consistentCatalog_epoch"
"""Key of our run facet in ``run.facets``."""
EPOCH_FACET_SCHEMA = "urn:consistent-catalog:openlineage:ConsistentCatalogEpochRunFacet:1-0-0"
"""``_schemaURL`` of our run facet; the schema itself: docs/openlineage/ConsistentCatalogEpochRunFacet.json."""
INGEST_FACET = "consistentCatalog_ingest"
"""Key of the run facet of a root ingest in ``run.facets``."""
INGEST_FACET_SCHEMA = "urn:consistent-catalog:openlineage:ConsistentCatalogIngestRunFacet:1-0-0"
"""``_schemaURL`` of the ingest facet; the schema: docs/openlineage/ConsistentCatalogIngestRunFacet.json."""
VERSION_TAG = "consistent_catalog_version"
"""The tag of every run's ``tags`` facet: this package's version."""
INGEST_JOB_PREFIX = "ingest:"
"""An ingest into root ``ns.t`` is a run of the job ``ingest:ns.t`` (roots have no job of their own)."""
DEFAULT_JOB_NAMESPACE = "consistent-catalog"
FLUSH_SECONDS = 10.0
"""How long closing a job (and the process's exit) waits for its queued events before dropping them."""


def configured(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> bool:
    """Whether the OpenLineage client would find a transport, checked the way it looks (no import).

    The client's own order: ``OPENLINEAGE_DISABLED=true`` turns it off; a config file (``OPENLINEAGE_CONFIG``,
    ``./openlineage.yml``, ``~/.openlineage/openlineage.yml``), ``OPENLINEAGE__TRANSPORT__*`` variables or
    ``OPENLINEAGE_URL`` configure it. Without any of them the client would print events to the console;
    here that means off.
    """
    env = os.environ if environ is None else environ
    if env.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    config_file = env.get("OPENLINEAGE_CONFIG")
    if env.get("OPENLINEAGE_URL") or (config_file and Path(config_file).is_file()):
        return True  # (a missing OPENLINEAGE_CONFIG file is passed over, as the client does)
    if any(key.startswith("OPENLINEAGE__TRANSPORT") for key in env):
        return True
    here = Path.cwd() if cwd is None else cwd
    return (here / "openlineage.yml").is_file() or (Path.home() / ".openlineage" / "openlineage.yml").is_file()


def require_client() -> Any:
    """The ``openlineage.client`` package, or NotInstalledError naming the extra to install."""
    try:
        import openlineage.client as client
    except ImportError:
        raise NotInstalledError(f"OpenLineage support needs the openlineage-python package: {INSTALL_HINT}") from None
    return client


# --- naming --------------------------------------------------------------------------------------------
def dataset_namespace(catalog_name: str, properties: Mapping[str, Any]) -> str:
    """The OpenLineage namespace of the catalog's tables: the datasource that resolves their names.

    OpenLineage's naming spec (spec/Naming.md, "Datasets"): "Namespace = scheme:[//authority] (the
    datasource), Name = path (the datasets)", and for warehouses the datasource is the service that
    resolves table names (``trino://{host}:{port}`` with name ``{catalog}.{schema}.{table}``). The spec
    has no row for Iceberg catalogs; the datasource of an Iceberg table is its catalog, so the namespace
    is the catalog's ``uri`` (user, password and query left out: a JDBC URI may carry credentials), e.g.
    ``sqlite:////abs/catalog.db``, ``postgresql+psycopg2://db-host:5432/iceberg``, ``http://rest-host:8181``;
    a catalog without a URI (Hadoop-style) is named by its warehouse's scheme and authority
    (``s3://bucket``, the storage rows of the spec), else ``iceberg://<catalog name>``.

    The two catalogs the spec has rows for are named as it says: a Hive Metastore (``thrift://host:port``)
    ``hive://host:port``, and AWS Glue ``arn:aws:glue:<region>:<account id>`` (the account is ``glue.id``, else
    the one STS reports for the catalog's credentials, asked once per process), its tables then named
    ``table/<database>/<table>`` (``dataset_name``).
    """
    if is_glue(properties):
        return f"arn:aws:glue:{_glue_region(properties)}:{_glue_account(properties)}"
    uri = properties.get("uri")
    if isinstance(uri, str) and uri:
        parts = urlsplit(uri.split(",")[0])  # a Hive catalog may list several metastores: the first names it
        if parts.scheme == "thrift":
            return f"hive://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        netloc = host + (f":{parts.port}" if parts.port else "")
        return f"{parts.scheme}://{netloc}{parts.path}"  # not urlunsplit: it turns sqlite:////abs into sqlite://abs
    warehouse = properties.get("warehouse")
    if isinstance(warehouse, str) and "://" in warehouse:
        parts = urlsplit(warehouse)
        return f"{parts.scheme}://{parts.netloc}" if parts.netloc else f"{parts.scheme}://{parts.path}"
    return f"iceberg://{catalog_name}"


def dataset_name(properties: Mapping[str, Any], table: str) -> str:
    """A table's OpenLineage name: its identifier (``db.table``), or for Glue ``table/<database>/<table>`` (the spec's
    row for AWS Glue)."""
    if is_glue(properties):
        database, _, name = table.rpartition(".")
        return f"table/{database}/{name}"
    return table


def is_glue(properties: Mapping[str, Any]) -> bool:
    """An AWS Glue catalog, as the probe tells catalogs apart (``probe.catalog_kind`` of its properties)."""
    return catalog_kind(properties) == "glue"


GLUE_UNKNOWN = "unknown"
"""What a part of Glue's ARN is when nothing names it (the region, the account), in both languages."""


def _glue_region(properties: Mapping[str, Any]) -> str:
    """``glue.region``, ``client.region``, ``AWS_REGION``, ``AWS_DEFAULT_REGION``; ``unknown`` when none says it, as for
    an account STS cannot name: a guessed region would name a dataset in a region the catalog may not be in."""
    return str(properties.get("glue.region") or properties.get("client.region")
               or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or GLUE_UNKNOWN)


_ACCOUNTS: dict[tuple[str, ...], str] = {}


def _glue_account(properties: Mapping[str, Any]) -> str:
    """``glue.id`` (the Data Catalog id is the account id), else the account STS names for the catalog's credentials
    (at the catalog's endpoint when that is not AWS's own: moto, LocalStack), asked once per process; ``unknown``
    when STS cannot answer (as the JVM names it)."""
    if properties.get("glue.id"):
        return str(properties["glue.id"])
    endpoint = properties.get("sts.endpoint") or properties.get("glue.endpoint")
    if endpoint and "amazonaws.com" in str(endpoint):
        endpoint = None
    key = (str(endpoint), str(properties.get("glue.access-key-id") or properties.get("client.access-key-id")),
           _glue_region(properties))
    if key not in _ACCOUNTS:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        # STS is global: with no region known its home region signs the call (the account is the same everywhere)
        signing = "us-east-1" if key[2] == GLUE_UNKNOWN else key[2]
        sts = boto3.client(
            "sts", endpoint_url=endpoint, region_name=signing,
            aws_access_key_id=properties.get("glue.access-key-id") or properties.get("client.access-key-id"),
            aws_secret_access_key=properties.get("glue.secret-access-key") or properties.get("client.secret-access-key"),
            aws_session_token=properties.get("glue.session-token") or properties.get("client.session-token"))
        try:
            _ACCOUNTS[key] = str(sts.get_caller_identity()["Account"])
        except (BotoCoreError, ClientError):  # no credentials, no STS: set glue.id (the account id) to name it
            _ACCOUNTS[key] = GLUE_UNKNOWN
    return _ACCOUNTS[key]


def job_namespace(environ: Mapping[str, str] | None = None) -> str:
    """``OPENLINEAGE_NAMESPACE`` (what the OpenLineage integrations read), else ``consistent-catalog``."""
    env = os.environ if environ is None else environ
    return env.get("OPENLINEAGE_NAMESPACE") or DEFAULT_JOB_NAMESPACE


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@functools.cache
def _epoch_facet_class() -> Any:
    """Our run facet as a subclass of the client's RunFacet (attrs), so the client serialises it like its own."""
    import attr
    from openlineage.client.generated.base import RunFacet

    @attr.define
    class ConsistentCatalogEpochRunFacet(RunFacet):  # type: ignore[misc]
        barrier: int
        instance: str | None = attr.field(default=None)
        sinks: dict[str, dict[str, Any]] = attr.field(factory=dict)

        @staticmethod
        def _get_schema() -> str:
            return EPOCH_FACET_SCHEMA

    return ConsistentCatalogEpochRunFacet


@functools.cache
def _ingest_facet_class() -> Any:
    import attr
    from openlineage.client.generated.base import RunFacet

    @attr.define
    class ConsistentCatalogIngestRunFacet(RunFacet):  # type: ignore[misc]
        barrier: int
        snapshot: int
        key: str | None = attr.field(default=None)

        @staticmethod
        def _get_schema() -> str:
            return INGEST_FACET_SCHEMA

    return ConsistentCatalogIngestRunFacet


def schema_fields(schema: Any) -> list[tuple[str, str]]:
    """An Iceberg schema's top-level columns as (name, type) for the spec's ``schema`` dataset facet."""
    return [(field.name, str(field.field_type)) for field in schema.fields]


# --- epochs ------------------------------------------------------------------------------------------
class EpochEmitter:
    """One job's events: a run per epoch that had work (START, then COMPLETE, FAIL or ABORT)."""

    def __init__(self, client: Any, job: str, namespace: str, job_ns: str,
                 name_of: Callable[[str], str] = str) -> None:
        self.client = client
        self.job = job
        self.namespace = namespace
        self.name_of = name_of
        """A table's dataset name (``dataset_name``)."""
        self.job_namespace = job_ns
        self.work = "ingest" if job.startswith(INGEST_JOB_PREFIX) else "epoch"
        """What a failed event never stops (in warnings)."""
        from openlineage.client import event_v2
        from openlineage.client.facet_v2 import (
            dataset_version_dataset,
            error_message_run,
            schema_dataset,
            sql_job,
            tags_run,
        )

        self._ev = event_v2
        self._version = dataset_version_dataset.DatasetVersionDatasetFacet
        self._error = error_message_run.ErrorMessageRunFacet
        self._facet = _epoch_facet_class()
        self._schema = schema_dataset
        self._sql = sql_job.SQLJobFacet
        self._tags = tags_run
        self.schema_of: Callable[[str], Any] | None = None
        """The Iceberg schema of a table (set by the job): the ``schema`` facet of its datasets; None: no facet."""
        self.sql: str | None = None
        """The job's SQL (a SQL transform): the ``sql`` job facet."""
        self._schemas: dict[str, list[tuple[str, str]]] = {}

        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._sender: threading.Thread | None = None
        _EMITTERS.add(self)

    def new_run(self) -> EpochRun:
        return EpochRun(self, str(_uuid7()))

    def send(self, build: Callable[[], Any], what: str) -> None:
        """Build the event now and queue it for the sending thread; any failure is logged, never raised."""
        try:
            event = build()
        except Exception as exc:  # lineage's problem, never the epoch's
            log.warning("%s: the OpenLineage %s event could not be built (the %s goes on): %s: %s",
                        self.job, what, self.work, type(exc).__name__, exc)
            return
        self._queue.put(functools.partial(self._emit, event, what))
        if self._sender is None or not self._sender.is_alive():  # first event, or after a fork
            self._sender = threading.Thread(target=self._send_queued, name=f"openlineage-{self.job}", daemon=True)
            self._sender.start()

    def _emit(self, event: Any, what: str) -> None:
        try:
            self.client.emit(event)
        except Exception as exc:
            log.warning("%s: the OpenLineage %s event could not be sent (the %s goes on): %s: %s",
                        self.job, what, self.work, type(exc).__name__, exc)

    def _send_queued(self) -> None:
        while True:
            self._queue.get()()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the events queued so far are handed to the transport (at most ``timeout`` seconds,
        default ``FLUSH_SECONDS``); False, with a warning, when the time ran out."""
        timeout = FLUSH_SECONDS if timeout is None else timeout
        if self._sender is None or not self._sender.is_alive():
            return True
        done = threading.Event()
        self._queue.put(done.set)
        if done.wait(timeout):
            return True
        log.warning("%s: OpenLineage events still unsent after %.0f s are dropped (is the transport reachable?)",
                    self.job, timeout)
        return False

    def dataset(self, kind: str, table: str, version: int | None, fields: list[tuple[str, str]] | None = None) -> Any:
        facets: dict[str, Any] = {} if version is None else {
            "version": self._version(datasetVersion=str(version), producer=PRODUCER)}
        fields = fields if fields is not None else self._fields(table)
        if fields:
            facets["schema"] = self._schema.SchemaDatasetFacet(
                fields=[self._schema.SchemaDatasetFacetFields(name=n, type=t) for n, t in fields], producer=PRODUCER)
        cls = self._ev.InputDataset if kind == "input" else self._ev.OutputDataset
        return cls(namespace=self.namespace, name=self.name_of(table), facets=facets)

    def _fields(self, table: str) -> list[tuple[str, str]] | None:
        """The table's columns, read once per emitter (a lineage problem never fails an epoch: None then)."""
        if self.schema_of is None:
            return None
        if table not in self._schemas:
            try:
                self._schemas[table] = schema_fields(self.schema_of(table))
            except Exception as exc:  # lineage's problem, never the epoch's
                log.warning("%s: no schema facet for %s: %s: %s", self.job, table, type(exc).__name__, exc)
                return None
        return self._schemas[table]

    def run_facets(self, facets: Mapping[str, Any]) -> dict[str, Any]:
        """``facets`` and the ``tags`` run facet with this package's version (the JVM's events carry the same tag;
        the client adds its own tags to it)."""
        tag = self._tags.TagsRunFacetFields(key=VERSION_TAG, value=_package_version(), source="CONSISTENT_CATALOG")
        return {**facets, "tags": self._tags.TagsRunFacet(tags=[tag], producer=PRODUCER)}

    def job_facets(self) -> dict[str, Any]:
        return {} if not self.sql else {"sql": self._sql(query=self.sql, dialect="spark", producer=PRODUCER)}


class EpochRun:
    """The events of one epoch attempt (one OpenLineage run)."""

    def __init__(self, emitter: EpochEmitter, run_id: str) -> None:
        self.emitter = emitter
        self.run_id = run_id
        self.started: EpochPlan | None = None
        self.instance: str | None = None

    def _event(self, state: str, plan: EpochPlan | None, outputs: Mapping[str, int | None], sinks: Iterable[str],
               sources: Iterable[str], facets: Mapping[str, Any]) -> Any:
        e = self.emitter
        inputs = plan.inputs if plan is not None else {s: None for s in sources}
        return e._ev.RunEvent(
            eventType=getattr(e._ev.RunState, state),
            eventTime=_now(),
            run=e._ev.Run(runId=self.run_id, facets=e.run_facets(facets)),
            job=e._ev.Job(namespace=e.job_namespace, name=e.job, facets=e.job_facets()),
            inputs=[e.dataset("input", t, v) for t, v in sorted(inputs.items())],
            outputs=[e.dataset("output", t, outputs.get(t)) for t in sorted(sinks)],
            producer=PRODUCER,
        )

    def _epoch_facet(self, barrier: int | None, sinks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        if barrier is None:
            return {}
        facet = self.emitter._facet(barrier=barrier, instance=self.instance,
                                    sinks={k: dict(v) for k, v in sinks.items()}, producer=PRODUCER)
        return {EPOCH_FACET: facet}

    def start(self, plan: EpochPlan, instance: str | None) -> None:
        """START: the epoch's barrier and inputs are planned; outputs named, not yet versioned."""
        self.started, self.instance = plan, instance
        sinks = {s: {"action": p.action} for s, p in plan.sinks.items()}
        self.emitter.send(lambda: self._event("START", plan, {}, plan.sinks, (), self._epoch_facet(plan.barrier, sinks)),
                          "START")

    def complete(self, plan: EpochPlan, actions: Mapping[str, str], snapshots: Mapping[str, int | None],
                 attempts: Mapping[str, str]) -> None:
        """COMPLETE: every output at the snapshot now on its ``main`` (published sinks only)."""
        sinks = {s: {"action": a, **({"attempt": attempts[s]} if s in attempts else {})} for s, a in actions.items()}
        outputs = {s: snapshots.get(s) for s, a in actions.items()
                   if a in ("published", "republished", "regenerated", "watermark")}
        self.emitter.send(
            lambda: self._event("COMPLETE", plan, outputs, actions, (), self._epoch_facet(plan.barrier, sinks)), "COMPLETE")

    def fail(self, exc: BaseException, sources: Iterable[str], sinks: Iterable[str], *, abort: bool = False) -> None:
        """FAIL (an exception) or ABORT (interrupted) with the error; inputs as planned when the plan was made."""
        plan, state = self.started, "ABORT" if abort else "FAIL"

        def build() -> Any:
            facets: dict[str, Any] = {}
            if plan is not None:
                facets.update(self._epoch_facet(plan.barrier, {s: {"action": p.action} for s, p in plan.sinks.items()}))
            facets["errorMessage"] = self.emitter._error(
                message=f"{type(exc).__name__}: {exc}", programmingLanguage="python",
                stackTrace="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), producer=PRODUCER,
            )
            return self._event(state, plan, {}, sinks, sources, facets)

        self.emitter.send(build, state)


_EMITTERS: weakref.WeakSet[EpochEmitter] = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:
    """Events queued by jobs not closed (no ``with``): sent before the process ends, within one FLUSH_SECONDS."""
    deadline = time.monotonic() + FLUSH_SECONDS
    for emitter in list(_EMITTERS):
        emitter.flush(max(0.0, deadline - time.monotonic()))


def emitter_for(job: str, catalog_name: str, properties: Mapping[str, Any]) -> EpochEmitter | None:
    """The job's emitter when OpenLineage is configured, else None (nothing imported, nothing built).

    Configured but the client is not installed, or its configuration does not load: a warning, and no events
    (lineage never stops a pipeline).
    """
    if not configured():
        return None
    try:
        openlineage = require_client()
        client = openlineage.OpenLineageClient()
        return EpochEmitter(client, job, dataset_namespace(catalog_name, properties), job_namespace(),
                            lambda table: dataset_name(properties, table))
    except NotInstalledError as exc:
        log.warning("%s: OpenLineage is configured but no events will be sent: %s", job, exc)
    except Exception as exc:
        log.warning("%s: OpenLineage is configured but its client could not be set up, no events will be sent: "
                    "%s: %s", job, type(exc).__name__, exc)
    return None


# --- root ingests --------------------------------------------------------------------------------------
_INGEST_EMITTERS: dict[tuple[str, str, str], EpochEmitter] = {}
_INGEST_LOCK = threading.Lock()


def _ingest_emitter(table: str, catalog_name: str, properties: Mapping[str, Any]) -> EpochEmitter | None:
    """The emitter of ingests into ``table`` (one per job, namespace and catalog), or None when not configured."""
    if not configured():
        return None
    key = (INGEST_JOB_PREFIX + table, dataset_namespace(catalog_name, properties), job_namespace())
    with _INGEST_LOCK:
        emitter = _INGEST_EMITTERS.get(key)
        if emitter is None:
            emitter = emitter_for(key[0], catalog_name, properties)
            if emitter is None:
                return None
            _INGEST_EMITTERS[key] = emitter
        return emitter


def reporting_ingest(catalog_name: str, properties: Mapping[str, Any], table: str, schema_of: Callable[[], Any],
                     ingest: Callable[[], Any]) -> Any:
    """Run ``ingest`` (returning an ``IngestResult``) and report it (``report_ingest``) when OpenLineage is
    configured: a landed ingest as START and COMPLETE, one that raised as START and FAIL, a skipped key not at all."""
    if not configured():
        return ingest()
    started = _now()
    try:
        result = ingest()
    except Exception as exc:
        report_ingest(catalog_name, properties, table, schema_of, started=started, error=exc)
        raise
    if not result.skipped:
        report_ingest(catalog_name, properties, result.table, schema_of, started=started,
                      snapshot_id=result.snapshot_id, barrier=result.barrier, key=result.key)
    return result


def report_ingest(
    catalog_name: str,
    properties: Mapping[str, Any],
    table: str,
    schema_of: Callable[[], Any],
    *,
    started: str,
    snapshot_id: int | None = None,
    barrier: int | None = None,
    key: str | None = None,
    error: BaseException | None = None,
) -> None:
    """A root ingest as one OpenLineage run of the job ``ingest:<table>``: START (at ``started``, the time the
    ingest began) then COMPLETE with the root at the snapshot it landed (``version``), its columns (``schema``, from
    ``schema_of()``) and our ``consistentCatalog_ingest`` facet; FAIL with the error instead when ``error``."""
    from consistent_catalog.util.identifiers import normalize_identifier

    table = normalize_identifier(table)
    emitter = _ingest_emitter(table, catalog_name, properties)
    if emitter is None:
        return
    run_id = str(_uuid7())
    try:
        fields: list[tuple[str, str]] | None = schema_fields(schema_of())
    except Exception as exc:  # lineage's problem, never the ingest's
        log.warning("%s: no schema facet for %s: %s: %s", emitter.job, table, type(exc).__name__, exc)
        fields = None

    def event(state: str, time: str, facets: Mapping[str, Any], version: int | None) -> Any:
        ev = emitter._ev
        return ev.RunEvent(
            eventType=getattr(ev.RunState, state), eventTime=time, run=ev.Run(runId=run_id, facets=emitter.run_facets(facets)),
            job=ev.Job(namespace=emitter.job_namespace, name=emitter.job), inputs=[],
            outputs=[emitter.dataset("output", table, version, fields)], producer=PRODUCER)

    emitter.send(lambda: event("START", started, {}, None), "START")
    if error is not None:
        message = f"{type(error).__name__}: {error}"
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        emitter.send(lambda: event("FAIL", _now(), {"errorMessage": emitter._error(
            message=message, programmingLanguage="python", stackTrace=trace, producer=PRODUCER)}, None), "FAIL")
        return
    assert snapshot_id is not None and barrier is not None
    facet = _ingest_facet_class()(barrier=barrier, snapshot=snapshot_id, key=key, producer=PRODUCER)
    emitter.send(lambda: event("COMPLETE", _now(), {INGEST_FACET: facet}, snapshot_id), "COMPLETE")


def now_iso() -> str:
    """The current time as an event's ``eventTime`` (what ``report_ingest`` takes as ``started``)."""
    return _now()


# --- the static graph ----------------------------------------------------------------------------------
def graph_events(graph: LineageGraph, catalog_name: str, properties: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The lineage graph as OpenLineage JobEvents (one per job, its sources as inputs, its sinks as outputs),
    serialised the client's way. NotInstalledError without the client."""
    require_client()
    from openlineage.client import event_v2
    from openlineage.client.serde import Serde

    namespace, job_ns, now = dataset_namespace(catalog_name, properties), job_namespace(), _now()
    events = []
    for info in graph.jobs():
        event = event_v2.JobEvent(
            eventTime=now,
            job=event_v2.Job(namespace=job_ns, name=info.job),
            inputs=[event_v2.InputDataset(namespace=namespace, name=dataset_name(properties, t)) for t in info.sources],
            outputs=[event_v2.OutputDataset(namespace=namespace, name=dataset_name(properties, t)) for t in info.sinks],
            producer=PRODUCER,
        )
        events.append(Serde.to_dict(event))
    return events


@functools.cache
def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("consistent-catalog")
    except PackageNotFoundError:
        return "unknown"


def _uuid7() -> uuid.UUID:
    """A UUIDv7 run id (time-ordered, what the OpenLineage client recommends)."""
    from openlineage.client.uuid import generate_new_uuid

    return generate_new_uuid()
