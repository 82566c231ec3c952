"""The catalog façade: ``ConsistentCatalog`` wraps any pyiceberg ``Catalog`` — reads, ingest, ownership, revisions."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    RemovePropertiesUpdate,
    RemoveSnapshotRefUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
)

from consistent_catalog import properties as P
from consistent_catalog._pyiceberg import empty_snapshot
from consistent_catalog.barrier import BarrierLike, to_barrier
from consistent_catalog.commit import RetryPolicy, TableStore, TakeFence, fence_head, refs_at
from consistent_catalog.exceptions import (
    CatalogConfigError,
    ConsistentCatalogError,
    FencedError,
    InvalidBarrierError,
    InvalidInputError,
    OwnershipError,
)
from consistent_catalog.lineage import LineageGraph
from consistent_catalog.report import EpochEntry, HistoryEntry, TableStatus, epochs, history, status
from consistent_catalog.resolver import DEFAULT_LEVEL, Cut, resolve
from consistent_catalog.revision import MODES as REVISION_MODES
from consistent_catalog.revision import RevisionMode, RevisionResult, RevisionStep, affected_tables, plan_step
from consistent_catalog.state import TableState, encode_table_sources
from consistent_catalog.util.durations import parse_duration
from consistent_catalog.util.identifiers import normalize_identifier
from consistent_catalog.util.time import fmt_barrier, fmt_duration, now_ms

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import DataScan, Table

    from consistent_catalog.epoch import EpochJob
    from consistent_catalog.retention import Pins, Retention

DEFAULT_LEASE_MS = 5 * 60 * 1000

_EXTENSIONS: dict[str, Callable[..., Any]] = {}


def register_extension(name: str, factory: Callable[..., Any]) -> None:
    """Attach a higher layer to the façade: ``cc.<name>`` (or ``cc.job(...)``) is built by ``factory(cc, ...)``.

    The epoch and retention layers sit above the façade and register themselves when
    ``consistent_catalog`` is imported (the way pandas registers accessors), so the façade offers
    ``cc.retention``, ``cc.pins`` and ``cc.job(...)`` without importing upwards.
    """
    _EXTENSIONS[name] = factory


def _extension(name: str) -> Callable[..., Any]:
    try:
        return _EXTENSIONS[name]
    except KeyError:
        raise RuntimeError(f"consistent_catalog.{name} is not loaded; import consistent_catalog first") from None


@dataclass(frozen=True)
class Lease:
    """A job instance's claim on its sinks: fences out every other writer until it lapses."""

    job: str
    instance: str
    sinks: tuple[str, ...]
    sources: tuple[str, ...]
    until_ms: int


@dataclass(frozen=True)
class IngestResult:
    table: str
    snapshot_id: int
    barrier: int | None
    key: str | None = None
    skipped: bool = False
    """True when ``key`` had been ingested already: nothing was written, ``snapshot_id`` is that ingest's."""


def check_not_future(state: TableState, barrier: int, *, allow_future: bool, what: str) -> None:
    """Refuse a barrier beyond now plus the table's clock-skew allowance, unless the caller insists."""
    limit = now_ms() + state.clock_skew_ms
    if barrier > limit and not allow_future:
        raise InvalidBarrierError(
            f"{state.identifier}: {what} {fmt_barrier(barrier)} lies {fmt_duration(barrier - now_ms())} in the future "
            f"(allowed: {fmt_duration(state.clock_skew_ms)} of clock skew, table property {P.CLOCK_SKEW}); a barrier "
            "ahead of the clock holds every later ingest there — pass the current time, or insist with "
            + ("allow_future=True (CLI: advance-watermark --allow-future)" if what == "watermark" else "allow_future=True")
        )


def genesis_updates(table: Table, job: str) -> list[Any]:
    """The updates that give an empty sink its first snapshot on ``main``: no data, untagged but for
    ``consistent.job`` (Iceberg branches need a snapshot; protocol §5.2). Commit them with ``main``
    asserted absent."""
    genesis = empty_snapshot(table, {P.JOB: job})
    return [AddSnapshotUpdate(snapshot=genesis),
            SetSnapshotRefUpdate(ref_name=P.MAIN_BRANCH, type=SnapshotRefType.BRANCH, snapshot_id=genesis.snapshot_id)]


def refuse_unsupported(catalog: Catalog) -> None:
    """Refuse a catalog that cannot host the protocol before anything is written (docs/protocol.md §6.5).

    Nessie (behind its Iceberg REST API, which says so in its config: ``nessie.is-nessie-catalog``)
    versions the whole catalog on its own ``main`` and accepts no other Iceberg ref of a table: no
    ``consistent-staged`` branch, no ``consistent-fence``, no tags, so neither staged epochs nor fencing nor
    pins could work; commits would fail halfway through the first epoch.
    """
    if str(getattr(catalog, "properties", {}).get("nessie.is-nessie-catalog", "")).lower() == "true":
        raise CatalogConfigError(
            f"catalog {catalog.name!r} is a Nessie catalog, which accepts only a table's main ref (no branches or "
            "tags): consistent-catalog needs the branches consistent-staged and consistent-fence and tags for pins. "
            "Use Nessie's own commits for cross-table consistency, or put the tables in a catalog that keeps Iceberg "
            "refs (a SQL catalog, Polaris, Lakekeeper, Gravitino, Glue, Hive)"
        )


class ConsistentCatalog:
    """Consistent reads and epoch-tagged writes over a pyiceberg catalog.

    >>> cc = ConsistentCatalog.load("lake")                  # doctest: +SKIP
    >>> cut = cc.resolve(["demo.words", "demo.word_counts"])  # doctest: +SKIP
    """

    def __init__(self, catalog: Catalog) -> None:
        refuse_unsupported(catalog)
        self.catalog = catalog
        """The pyiceberg catalog wrapped."""
        self.store = TableStore(catalog)
        """Loading and fenced commits (the commit layer)."""

    @classmethod
    def load(cls, name: str | None = None, *, create: bool = False, **properties: str) -> ConsistentCatalog:
        """Load the catalog the pyiceberg way (``.pyiceberg.yaml``, ``PYICEBERG_CATALOG__<NAME>__<KEY>``).

        Loading never creates a catalog unless ``create=True``: a SQLite URI must name an existing
        catalog database (pyiceberg would create a new, empty one), and a SQL catalog that has nothing
        under this name while its database holds other catalog names is refused, naming those.
        """
        import os
        import re

        from pyiceberg.catalog import load_catalog
        from pyiceberg.utils.config import Config
        from sqlalchemy.exc import SQLAlchemyError

        try:
            config = Config()
            label = name if name is not None else config.get_default_catalog_name()
            given = {k: v for k, v in properties.items() if v is not None}
            conf = {**(config.get_catalog_config(label) or {}), **given}
        except ValueError as exc:
            raise CatalogConfigError(f"cannot read the pyiceberg configuration: {exc}") from None
        env = f"PYICEBERG_CATALOG__{label.upper().replace('-', '_')}__"
        if not conf.get("uri") and not conf.get("type") and "py-catalog-impl" not in conf:
            known = [c for c in config.get_known_catalogs() if c != label.lower()]
            hint = f" (configured: {', '.join(known)} — pass --catalog {known[0]})" if known else ""
            raise CatalogConfigError(
                f"cannot load catalog {label!r}: it is not configured{hint}; set {env}URI (e.g. "
                f"sqlite:////path/catalog.db) and {env}WAREHOUSE, or add it under `catalog:` in .pyiceberg.yaml "
                "(in ~, the current directory or $PYICEBERG_HOME); `consistent-catalog demo` builds a demo catalog"
            )
        uri = conf.get("uri")
        if "uri" in given:
            source = "the uri passed to ConsistentCatalog.load"
        else:
            source = next((k for k in os.environ if k.upper() == f"{env}URI"), f"catalog {label!r} in .pyiceberg.yaml")
        if isinstance(uri, str) and uri.startswith("sqlite") and not create:
            cls._check_sqlite_catalog(label, uri, source)
        try:
            catalog = load_catalog(label, **conf)  # the configuration as read now (pyiceberg's is read at import)
        except (ValueError, NotImplementedError) as exc:
            detail = re.sub(r"using -+uri, ", "using ", str(exc))  # pyiceberg's CLI option; ours has none
            raise CatalogConfigError(f"cannot load catalog {label!r}: {detail}") from None
        except SQLAlchemyError as exc:
            first = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise CatalogConfigError(f"cannot open the database of catalog {label!r} ({source}): {first}") from None
        if not create:
            cls._check_catalog_name(catalog)
        return cls(catalog)

    @staticmethod
    def _check_sqlite_catalog(label: str, uri: str, source: str) -> None:
        """Refuse a SQLite URI that names no catalog database (before pyiceberg creates one there)."""
        import os
        import sqlite3
        from contextlib import closing
        from pathlib import Path

        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            url = make_url(uri)
        except ArgumentError as exc:
            raise CatalogConfigError(f"catalog {label!r}: {uri!r} ({source}) is not a database URL: {exc}") from None
        database = url.database or ""
        if database.startswith("file:"):  # sqlite:///file:PATH?mode=...&uri=true
            if "memory" in str(url.query.get("mode", "")):
                return
            database = database[len("file:"):]
        if database in ("", ":memory:"):
            return  # in memory: nothing is created on disk
        path = os.path.abspath(database)
        way_out = (
            f"check {source}; a read never creates a catalog — create one with `consistent-catalog demo --dir DIR` "
            "(DIR/catalog.db), `consistent-catalog spark-conf --catalog-uri URI`, pyiceberg's SqlCatalog or "
            "ConsistentCatalog.load(..., create=True)"
        )
        if not os.path.exists(path):
            missing = os.path.dirname(path)
            why = f" (directory {missing} does not exist either)" if not os.path.isdir(missing) else ""
            raise CatalogConfigError(f"no catalog database at {path}{why}; {way_out}")
        if os.path.isdir(path):
            raise CatalogConfigError(f"{path} is a directory, not a catalog database; {way_out}")
        try:
            with closing(sqlite3.connect(f"{Path(path).as_uri()}?mode=ro", uri=True)) as connection:  # creates nothing
                found = connection.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'iceberg_tables'"
                ).fetchone()
        except sqlite3.Error as exc:
            raise CatalogConfigError(f"{path} is not a SQLite catalog database ({exc}); {way_out}") from None
        if found is None:
            raise CatalogConfigError(f"{path} is a SQLite database without an Iceberg catalog (no iceberg_tables); {way_out}")

    @staticmethod
    def _check_catalog_name(catalog: Catalog) -> None:
        """A SQL catalog with nothing under its name, in a database that holds other catalog names: refuse it."""
        import os

        from pyiceberg.catalog.sql import SqlCatalog
        from sqlalchemy import text
        from sqlalchemy.exc import SQLAlchemyError

        if not isinstance(catalog, SqlCatalog):
            return
        names: set[str] = set()
        try:
            if catalog.list_namespaces():
                return  # cheap: the names are read only when this catalog shows nothing
            for table in ("iceberg_tables", "iceberg_namespace_properties"):
                with catalog.engine.connect() as connection:
                    names.update(row[0] for row in connection.execute(text(f"SELECT DISTINCT catalog_name FROM {table}")))
        except SQLAlchemyError:
            pass  # a table the catalog lacks: what was read is what there is
        names.discard(catalog.name)
        if not names:
            return  # an empty catalog, not a wrong name
        url = catalog.engine.url
        if url.get_backend_name() == "sqlite":
            where = os.path.abspath(url.database or "")
        else:
            where = url.render_as_string(hide_password=True)
        first = sorted(names)[0]
        env = f"PYICEBERG_CATALOG__{first.upper().replace('-', '_')}__URI"
        raise CatalogConfigError(
            f"catalog {catalog.name!r} has no tables in {where}; the database holds catalogs named "
            f"{', '.join(sorted(names))} — use --catalog {first} (configured with {env} or under `catalog:` in "
            f".pyiceberg.yaml), or ConsistentCatalog.load({first!r})"
        )

    @property
    def name(self) -> str:
        return self.catalog.name

    # --- tables ------------------------------------------------------------------------------------
    def load_table(self, identifier: str) -> Table:
        """The pyiceberg table; TableNotFoundError (with the way out) when it does not exist."""
        return self.store.load_table(identifier)

    def list_tables(self) -> list[str]:
        """Every table of the catalog, in every (nested) namespace."""
        return self.store.list_tables()

    # --- reading --------------------------------------------------------------------------------
    def resolve(self, tables: Iterable[str], level: str = DEFAULT_LEVEL, as_of: BarrierLike | None = None) -> Cut:
        """The consistent cut of protocol §4 for ``tables`` (one metadata load per table and per upstream table)."""
        names = list(dict.fromkeys(normalize_identifier(t) for t in tables))
        closure = self.store.upstream_states(names)
        return resolve([closure[n] for n in names], level, as_of, upstream=closure.values())

    def read(self, tables: Iterable[str], level: str = DEFAULT_LEVEL, as_of: BarrierLike | None = None) -> ConsistentRead:
        """Resolve a cut and return a reader whose scans are pinned at it.

        Resolving costs what ``resolve`` costs; a table's full pyiceberg metadata is loaded when it is
        first scanned, from the very metadata file the cut was resolved from.
        """
        names = list(dict.fromkeys(normalize_identifier(t) for t in tables))
        closure = self.store.loader.upstream(names)
        cut = resolve([closure[n].state for n in names], level, as_of, upstream=[c.state for c in closure.values()])
        loaded = {n: closure[n].table for n in names if closure[n].table is not None}
        locations = {n: closure[n].location for n in names}
        return ConsistentRead(cut, loaded, opener=lambda name: self.store.loader.open_table(name, locations.get(name)))

    def lineage(self, tables: Iterable[str] | None = None) -> LineageGraph:
        """The lineage graph of the whole catalog, or of the tables connected to ``tables``."""
        listed = self.list_tables()
        graph = LineageGraph.from_states(self.store.states(listed))
        if tables is None:
            return graph
        names = [normalize_identifier(t) for t in tables]
        for name in set(names) - set(listed):
            self.load_table(name)  # TableNotFoundError naming it (never shown as a root of its own)
        return graph.subgraph(graph.connected(names))

    def status(self, tables: Iterable[str] | None = None, *, now: int | None = None) -> list[TableStatus]:
        names = self.list_tables() if tables is None else [normalize_identifier(t) for t in tables]
        states = self.store.upstream_states(names)  # the upstream tables give own delays and bottlenecks
        return status(states, names, now=now_ms() if now is None else now)

    def history(self, table: str) -> list[HistoryEntry]:
        """Every snapshot of the table's newest branch, newest first, with its effective barrier."""
        return history(self.store.state(table))

    def epochs(self, table: str) -> list[EpochEntry]:
        """The table's epochs, newest first: barrier, when staged and published, latency, rows."""
        return epochs(self.store.state(table))

    # --- ownership -----------------------------------------------------------------------------
    def register_job(
        self,
        job: str,
        sources: Iterable[str],
        sinks: Iterable[str],
        *,
        lease_ms: int = DEFAULT_LEASE_MS,
        takeover: bool = False,
        instance: str | None = None,
    ) -> Lease:
        """Make ``job`` the single writer of ``sinks``, reading ``sources`` (one fenced commit per sink).

        Refused with OwnershipError while another job, or another live instance of this job, holds a
        lease on a sink (``takeover=True`` takes over from a dead instance of the same job); refused
        with CycleError if the new edges would close a cycle.
        """
        if not job or not job.strip():
            raise InvalidInputError("a job needs a non-empty id")
        if lease_ms <= 0:
            raise InvalidInputError(f"lease_ms must be positive, got {lease_ms}")
        source_names = tuple(dict.fromkeys(normalize_identifier(s) for s in sources))
        sink_names = tuple(dict.fromkeys(normalize_identifier(s) for s in sinks))
        if not sink_names:
            raise InvalidInputError(f"job {job!r} has no sinks; name at least one table it writes")
        for source in source_names:
            self.load_table(source)  # fails with TableNotFoundError
        graph = LineageGraph.from_states(
            s for s in self.store.states(self.list_tables()) if s.identifier not in sink_names
        )
        graph.check_new_edges(job, source_names, sink_names)

        instance = instance or uuid.uuid4().hex[:12]
        until = now_ms() + lease_ms
        done: list[tuple[str, Mapping[str, str]]] = []
        try:
            for sink in sink_names:
                table, state = self.store.load(sink)
                self._check_can_own(state, job, instance, takeover)
                previous = {k: state.properties.get(k) for k in (P.JOB, P.LEASE_HOLDER, P.LEASE_UNTIL, P.SOURCES)}
                # an empty sink gets its genesis in the same commit, with main asserted absent: every catalog
                # checks that (also on a table without snapshots), so of two racing registrations one wins
                genesis = genesis_updates(table, job) if state.head() is None else []
                self.store.commit(
                    table,
                    refs_at({P.MAIN_BRANCH: None}) if genesis else [],
                    [
                        *genesis,
                        SetPropertiesUpdate(
                            updates={
                                P.JOB: job,
                                P.SOURCES: encode_table_sources(list(source_names)),
                                P.LEASE_HOLDER: instance,
                                P.LEASE_UNTIL: str(until),
                            }
                        )
                    ],
                    what=f"registering job {job!r}",
                    take_fence=TakeFence(state.head(P.FENCE_BRANCH), "register", instance, job),
                )
                done.append((sink, {k: v for k, v in previous.items() if v is not None}))
        except FencedError as exc:
            self._undo_registration(done, instance)
            raise OwnershipError(f"{exc}; another registration of the same sink won the race — retry or pick another sink") from None
        except ConsistentCatalogError:
            self._undo_registration(done, instance)
            raise
        return Lease(job, instance, sink_names, source_names, until)

    def _check_can_own(self, state: TableState, job: str, instance: str, takeover: bool) -> None:
        live = state.lease_until is not None and state.lease_until > now_ms()
        if state.job and state.job != job and live:
            raise OwnershipError(
                f"{state.identifier} is owned by job {state.job!r} whose lease runs until {fmt_barrier(state.lease_until)}; "
                f"a table has a single writer — unregister that job first or wait for its lease to lapse"
            )
        if state.job == job and live and state.lease_holder not in (None, instance) and not takeover:
            raise OwnershipError(
                f"{state.identifier} is being written by another live instance ({state.lease_holder}) of job "
                f"{job!r} until {fmt_barrier(state.lease_until)}; stop it, wait for the lease to lapse, or, if it is "
                "dead, take over with takeover=True (register_job / cc.job; the demo: consistent-catalog demo --takeover)"
            )
        if state.is_root and state.head() is not None:
            history = TableState(state.identifier, state.snapshots, state.branches, {P.SOURCES: '["?"]'})
            untracked = history.branch().untracked
            if untracked is not None:
                raise InvalidInputError(
                    f"{state.identifier} already holds data written outside any job (snapshot {untracked}); "
                    "a job's sink must start empty — create a new table for the job"
                )

    def _undo_registration(self, done: list[tuple[str, Mapping[str, str]]], instance: str) -> None:
        for sink, previous in done:
            try:
                table = self.load_table(sink)
                if table.metadata.properties.get(P.LEASE_HOLDER) != instance:
                    continue  # registered by someone else meanwhile: not ours to undo
                removals = [k for k in (P.JOB, P.LEASE_HOLDER, P.LEASE_UNTIL, P.SOURCES) if k not in previous]
                self.store.commit(
                    table,
                    [],
                    [SetPropertiesUpdate(updates=dict(previous)), RemovePropertiesUpdate(removals=removals)],
                    what="undoing a partial registration",
                    take_fence=TakeFence(fence_head(table), "unregister", previous.get(P.LEASE_HOLDER), previous.get(P.JOB)),
                )
            except ConsistentCatalogError:
                pass

    def unregister_job(self, lease: Lease) -> None:
        """Clear ownership of the lease's sinks (lineage stays in ``consistent.sources``) if still held by it."""
        for sink in lease.sinks:
            table = self.load_table(sink)
            if table.metadata.properties.get(P.LEASE_HOLDER) != lease.instance:
                continue  # taken over meanwhile: not ours to clear
            try:
                self.store.commit(
                    table,
                    refs_at({P.FENCE_BRANCH: fence_head(table)}),
                    [RemovePropertiesUpdate(removals=[P.JOB, P.LEASE_HOLDER, P.LEASE_UNTIL])],
                    what=f"unregistering job {lease.job!r}",
                )
            except FencedError:
                pass

    def renew_lease(self, lease: Lease, lease_ms: int = DEFAULT_LEASE_MS) -> Lease:
        until = now_ms() + lease_ms
        for sink in lease.sinks:
            table = self.load_table(sink)
            found = table.metadata.properties
            if found.get(P.JOB) != lease.job or found.get(P.LEASE_HOLDER) != lease.instance:
                raise FencedError(
                    f"{sink}: renewing the lease of job {lease.job!r} was refused: the table is now written by job "
                    f"{found.get(P.JOB)!r} instance {found.get(P.LEASE_HOLDER)!r}, not by this instance ({lease.instance}); "
                    "stop this instance"
                )
            self.store.commit(
                table,
                refs_at({P.FENCE_BRANCH: fence_head(table)}),  # a takeover after this read moves the fence
                [SetPropertiesUpdate(updates={P.LEASE_UNTIL: str(until)})],
                what=f"renewing the lease of job {lease.job!r}",
            )
        return Lease(lease.job, lease.instance, lease.sinks, lease.sources, until)

    def advance_watermark(self, table: str, barrier: BarrierLike, *, allow_future: bool = False) -> int:
        """Declare an idle root complete up to ``barrier``; returns the new watermark W(X).

        Refused when the barrier lies beyond now plus the table's clock-skew allowance (a barrier in
        the future would hold every later ingest there; ``allow_future=True`` insists) and when it
        lies below the current watermark (a watermark never moves back). The same barrier again is a
        no-op.
        """
        value = to_barrier(barrier)
        loaded, state = self.store.load(table)
        if not state.is_root:
            raise InvalidInputError(
                f"{state.identifier} is derived (written by job {state.job or state.last_writer or '-'}); its watermark "
                "advances when its job runs an epoch — advance the watermark of its root tables instead"
            )
        check_not_future(state, value, allow_future=allow_future, what="watermark")
        current = state.watermark()
        if current is not None and value <= current:
            if value == current:
                return current
            raise InvalidBarrierError(
                f"{state.identifier} is already complete up to {fmt_barrier(current)}; a watermark never moves back "
                f"— nothing was changed (a barrier after {current} advances it)"
            )
        self.store.commit(
            loaded,
            refs_at({P.MAIN_BRANCH: state.head()}),
            [SetPropertiesUpdate(updates=state.watermark_properties(value))],
            what="advancing the watermark",
            take_fence=TakeFence.keeping_holder(loaded.metadata, "advance", state.head(P.FENCE_BRANCH)),
        )
        return value

    def set_idle(self, table: str, after: int | str | timedelta | None) -> None:
        """Declare root ``table`` an idle source: its watermark may follow now minus ``after`` (None: undeclare).

        A source that receives no data would otherwise hold back every table downstream. Epoch jobs
        reading (transitively) from a declared root advance it before planning; ``advance_idle_roots``
        does it on demand. Data ingested later with an older barrier lands as late data (protocol §3).
        """
        loaded, state = self.store.load(table)
        if not state.is_root:
            raise InvalidInputError(f"{state.identifier} is derived; only root tables can be declared idle sources")
        if after is None:
            updates: list[Any] = [RemovePropertiesUpdate(removals=[P.IDLE_AFTER])]
        else:
            updates = [SetPropertiesUpdate(updates={P.IDLE_AFTER: str(parse_duration(after))})]
        self.store.commit(loaded, [], updates, what="declaring an idle source")

    def advance_idle_roots(self, states: Mapping[str, TableState] | None = None, *, now: int | None = None) -> dict[str, int]:
        """Advance every root declared idle (of ``states``, or of the catalog) to now minus its allowance.

        Returns the roots advanced, with their new watermark. A concurrent ingest or advance wins:
        the root is then left as it is until the next call.
        """
        moment = now_ms() if now is None else now
        if states is None:
            states = {s.identifier: s for s in self.store.states(self.list_tables())}
        advanced: dict[str, int] = {}
        for name, state in states.items():
            if not state.is_root or state.idle_after_ms is None:
                continue
            target = moment - state.idle_after_ms
            current = state.watermark()
            if current is not None and target <= current:
                continue
            try:
                advanced[name] = self.advance_watermark(name, target)
            except (FencedError, InvalidBarrierError):
                continue  # an ingest or another advance got there first
        return advanced

    def ingest(
        self,
        table: str,
        data: pa.Table,
        *,
        barrier: BarrierLike | None = None,
        key: str | None = None,
        allow_future: bool = False,
        retries: int = 10,
    ) -> IngestResult:
        """Append ``data`` to a root table, tagged with an explicit (event-time) barrier or the current time.

        ``key`` makes the ingest idempotent (a source replays the same data for the same key): it is
        recorded in the snapshot summary, an ingest whose key is already in ``main``'s history is
        skipped (``IngestResult.skipped``), and the append commits only if ``main`` is still where it
        was checked, so two concurrent ingests of one key cannot both land.

        A barrier at or below the table's watermark would change content that readers were told is
        complete, so it is raised to W(X) + 1 (the late-snapshot rule of protocol §3). An explicit
        barrier beyond now plus the clock-skew allowance is refused unless ``allow_future``.
        """
        if key is not None and not str(key).strip():
            raise InvalidInputError("an ingest key must be a non-empty string (e.g. the source's batch or file id)")
        for _ in RetryPolicy(retries).attempts():
            loaded, state = self.store.load(table)
            if not state.is_root:
                raise InvalidInputError(
                    f"{state.identifier} is derived from {', '.join(state.sources)}; only root tables take ingested data"
                )
            if key is not None:
                done = state.ingested_with_key(key)
                if done is not None:
                    return IngestResult(state.identifier, done, state.branch().barrier_of(done), key, skipped=True)
            wanted = now_ms() if barrier is None else to_barrier(barrier)
            check_not_future(state, wanted, allow_future=allow_future, what="barrier")
            current = state.watermark()
            effective = wanted if current is None or wanted > current else current + 1
            properties = {P.BARRIER: str(effective)}
            if key is not None:
                properties[P.INGEST_KEY] = key
            base = state.head()
            try:
                # main and the fence as read: another ingest, an idle advance or a revision meanwhile
                # changed the watermark this barrier was computed from (or landed the same key)
                self.store.write(
                    loaded,
                    refs_at({P.MAIN_BRANCH: base, P.FENCE_BRANCH: state.head(P.FENCE_BRANCH)}),
                    lambda tx, props=properties: tx.append(data, snapshot_properties=props),
                    what="ingesting" if key is None else f"ingesting key {key!r}",
                )
            except FencedError:
                continue  # plan again from the new state
            committed = self.store.state(state.identifier)
            snapshot_id = committed.child_on_main(base)  # ours, even if another ingest followed it
            assert snapshot_id is not None
            return IngestResult(state.identifier, snapshot_id, committed.branch().barrier_of(snapshot_id), key)
        again = "run it again — the key makes it safe to repeat" if key is not None else "run it again"
        raise FencedError(
            f"{normalize_identifier(table)}: ingest{'' if key is None else f' of key {key!r}'} kept losing the race to "
            f"other commits ({retries} attempts); {again}"
        )

    def revise(
        self, table: str, barrier: BarrierLike, *, mode: RevisionMode = "incremental", retries: int = 10
    ) -> RevisionResult:
        """Roll ``table`` and everything downstream back to their state at ``barrier`` and bump ``consistent.revision``.

        ``incremental``: derived tables return to ``snap(X, T)`` with watermark T, so their jobs replay
        from T. ``full``: derived tables are emptied and their jobs rebuild them from scratch. A root
        (the revised table itself) is always rolled back. Staged epochs are discarded. Running jobs
        see their next publish refused (main moved) and re-plan.
        """
        if mode not in REVISION_MODES:
            raise InvalidInputError(f"revision mode {mode!r} is not one of {', '.join(REVISION_MODES)}")
        value = to_barrier(barrier)
        name = normalize_identifier(table)
        self.load_table(name)
        graph = self.lineage([name])
        policy = RetryPolicy(retries)
        steps = tuple(self._revise_table(t, value, mode, policy) for t in affected_tables(graph, name))
        return RevisionResult(name, value, mode, steps)

    def _revise_table(self, name: str, barrier: int, mode: str, policy: RetryPolicy) -> RevisionStep:
        for _ in policy.attempts():
            table, state = self.store.load(name)
            step = plan_step(state, barrier, mode)
            if step.action == "unchanged":
                return step  # nothing to roll back: no commit, no revision bump
            updates: list[Any] = []
            for branch in (P.MAIN_BRANCH, P.STAGED_BRANCH):
                if step.to_snapshot is not None:
                    updates.append(SetSnapshotRefUpdate(ref_name=branch, type=SnapshotRefType.BRANCH, snapshot_id=step.to_snapshot))
                elif branch in state.branches:
                    updates.append(RemoveSnapshotRefUpdate(ref_name=branch))
            properties = {P.REVISION: str(step.revision)}
            if step.watermark is not None:  # keeps barriers an earlier floor raised (protocol §3.6)
                properties.update(state.watermark_properties(step.watermark, head=step.to_snapshot))
            else:
                removals = [k for k in (P.WATERMARK, P.WATERMARK_SNAPSHOT) if k in state.properties]
                if removals:
                    updates.append(RemovePropertiesUpdate(removals=removals))
            updates.append(SetPropertiesUpdate(updates=properties))
            expected_refs = {b: state.head(b) for b in (P.MAIN_BRANCH, P.STAGED_BRANCH)}
            try:
                self.store.commit(
                    table,
                    refs_at(expected_refs),
                    updates,
                    what=f"revising to barrier {fmt_barrier(barrier)}",
                    take_fence=TakeFence.keeping_holder(table.metadata, "revise", state.head(P.FENCE_BRANCH)),
                )
                return step
            except FencedError:
                continue  # a job or ingest committed meanwhile: plan this table again
        raise FencedError(f"{name}: revision to barrier {fmt_barrier(barrier)} kept conflicting with other commits; retry it")

    # --- higher layers ---------------------------------------------------------------------------
    @property
    def retention(self) -> Retention:
        """Cut-aware expiry and retained cuts: ``cc.retention.expire(...)``, ``.retain(...)``, ``.retained_cuts()``."""
        return _extension("retention")(self)

    @property
    def pins(self) -> Pins:
        """Reader pins: ``with cc.pins.pin(tables, ttl="2h") as pinned: ...``, ``.unpin(tag)``, ``.list()``."""
        return _extension("pins")(self)

    def job(self, job: str, *, sources: Iterable[str], sinks: Iterable[str], **options: Any) -> EpochJob:
        """An epoch job writing ``sinks`` from ``sources`` with pyiceberg (see ``consistent_catalog.epoch``)."""
        return _extension("job")(self, job, sources=sources, sinks=sinks, **options)


def empty_read(table: Table) -> pa.Table:
    """No rows of ``table``, typed the way its scans come back, so empty and non-empty reads concatenate.

    pyiceberg scans return ``string``/``binary``/``list`` columns while its schema conversion (and an
    empty scan) gives ``large_string``/``large_binary``/``large_list``.
    """
    import pyarrow as pa

    def small(field: pa.Field) -> pa.Field:
        kind = field.type
        if pa.types.is_large_string(kind):
            kind = pa.string()
        elif pa.types.is_large_binary(kind):
            kind = pa.binary()
        elif pa.types.is_large_list(kind) or pa.types.is_list(kind):
            kind = pa.list_(small(kind.value_field))
        elif pa.types.is_struct(kind):
            kind = pa.struct([small(child) for child in kind])
        elif pa.types.is_map(kind):
            kind = pa.map_(small(kind.key_field), small(kind.item_field))
        return field.with_type(kind).remove_metadata()

    return pa.schema([small(field) for field in table.schema().as_arrow()]).empty_table()


class ConsistentRead:
    """A resolved cut plus its tables: scans and Arrow data pinned at the cut.

    ``opener(name)`` loads a table of the cut not given in ``tables`` on first use (once).
    """

    def __init__(self, cut: Cut, tables: Mapping[str, Table], *, opener: Callable[[str], Table] | None = None) -> None:
        self.cut = cut
        self._tables = dict(tables)
        self._opener = opener

    def table(self, name: str) -> Table:
        key = normalize_identifier(name)
        table = self._tables.get(key)
        if table is None:
            if self._opener is None or key not in self.cut.tables:
                raise KeyError(key)
            table = self._tables[key] = self._opener(key)
        return table

    def scan(self, name: str, **options: Any) -> DataScan | None:
        """A pyiceberg scan at the cut's snapshot, or None when the table is empty at the cut."""
        snapshot_id = self.cut[normalize_identifier(name)].snapshot_id
        if snapshot_id is None:
            return None
        return self.table(name).scan(snapshot_id=snapshot_id, **options)

    def to_arrow(self, name: str, **options: Any) -> pa.Table:
        scan = self.scan(name, **options)
        if scan is None:
            return empty_read(self.table(name))
        return scan.to_arrow()

    def to_arrow_all(self) -> dict[str, pa.Table]:
        return {name: self.to_arrow(name) for name in self.cut.tables}
