"""The façade: ``ConsistentCatalog`` wraps any pyiceberg ``Catalog`` and delegates to one module per concept.

Like pyiceberg's ``Table`` (whose ``maintenance`` returns ``MaintenanceTable(self)``), the façade holds
no protocol logic of its own: it imports its helpers and hands them its ``TableStore``.

=====================  ===============================================================
``load``               ``connect``: find the catalog the pyiceberg way, configuration checks
``resolve``/``read``   ``read``: consistent cuts and readers pinned at them (§4)
``changes``            ``changelog_read``: a table's changes between two barriers (§5.10)
``wait_for``           ``read``: block until a cut is fresh enough (§6.7)
``ingest``, watermarks ``ingest``: root tables, idle sources (§5.6)
``register_job`` ...   ``ownership``: single writer, leases, the fence (§5.2, §6)
``revise``             ``revise``: roll back to a barrier, downstream included (§8)
``status`` ...         ``report``: delays, history, epochs
``job``                ``epoch.EpochJob``: plan, stage, publish (§5)
``retention``/``pins`` ``retention``: cut-aware expiry, retained cuts, reader pins (§9)
=====================  ===============================================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from consistent_catalog import ingest as _ingest
from consistent_catalog import openlineage_events, ownership
from consistent_catalog import properties as P
from consistent_catalog import revise as _revise
from consistent_catalog.barrier import BarrierLike
from consistent_catalog.changelog_read import read_changes
from consistent_catalog.commit import TableStore
from consistent_catalog.connect import load_catalog, refuse_unsupported
from consistent_catalog.epoch import EpochJob, Transform
from consistent_catalog.ingest import IngestResult
from consistent_catalog.lineage import LineageGraph
from consistent_catalog.ownership import DEFAULT_LEASE_MS, Lease, Reassignment
from consistent_catalog.read import ConsistentRead, Duration, open_read, resolve_cut, wait_for_fresh
from consistent_catalog.report import EpochEntry, Freshness, HistoryEntry, TableStatus, epochs, history, status
from consistent_catalog.resolver import DEFAULT_LEVEL, Cut
from consistent_catalog.retention import Pins, Retention, RetentionPolicy
from consistent_catalog.revision import RevisionMode, RevisionResult
from consistent_catalog.state import TableState
from consistent_catalog.util.identifiers import normalize_identifier
from consistent_catalog.util.time import now_ms

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table


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
        """Loading and fenced commits (the commit layer) that every helper works through."""

    @classmethod
    def load(cls, name: str | None = None, *, create: bool = False, **properties: str) -> ConsistentCatalog:
        """Load the catalog the pyiceberg way (``.pyiceberg.yaml``, ``PYICEBERG_CATALOG__<NAME>__<KEY>``).

        Loading never creates a catalog unless ``create=True``: a SQLite URI must name an existing
        catalog database (pyiceberg would create a new, empty one), and a SQL catalog that has nothing
        under this name while its database holds other catalog names is refused, naming those.
        """
        return cls(load_catalog(name, create=create, **properties))

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
    def resolve(
        self, tables: Iterable[str], level: str = DEFAULT_LEVEL, as_of: BarrierLike | None = None, *, component: bool = False
    ) -> Cut:
        """The consistent cut of protocol §4 for ``tables``, from metadata alone.

        ``component=True``: the cut of their lineage component (protocol §4.7), the one the Spark plugin
        ``lake_consistent`` serves, reported for ``tables``.
        """
        return resolve_cut(self.store, tables, level, as_of, component=component)

    def read(self, tables: Iterable[str], level: str = DEFAULT_LEVEL, as_of: BarrierLike | None = None) -> ConsistentRead:
        """Resolve a cut and return a reader whose scans are pinned at it.

        Resolving costs what ``resolve`` costs; a table's full pyiceberg metadata is loaded when it is
        first scanned, from the very metadata file the cut was resolved from.
        """
        return open_read(self.store, tables, level, as_of)

    def changes(
        self, table: str, from_barrier: BarrierLike, to_barrier: BarrierLike | None = None, *, key: Iterable[str] | str | None = None
    ) -> pa.Table:
        """The rows that turn ``snap(table, from_barrier)`` into ``snap(table, to_barrier)`` (protocol §5.10), as Arrow.

        The table's columns plus ``_change_type`` (INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER) and ``_barrier``;
        the net difference, with updates paired by ``key`` (default: the table's identifier fields; none: whole
        rows). ``to_barrier`` defaults to the table's watermark and may not exceed it. Only the data files added
        or removed between the two snapshots are read when the table has no delete files.

        >>> cc.changes("demo.word_counts", 1700000000000).to_pylist()  # doctest: +SKIP
        """
        return read_changes(self.store, table, from_barrier, to_barrier, key=None if key is None else (
            key if isinstance(key, str) else list(key)))

    def wait_for(
        self,
        tables: Iterable[str],
        *,
        fresher_than: Duration | None = None,
        barrier: BarrierLike | None = None,
        timeout: Duration | None = None,
        interval: Duration = "5s",
        max_interval: Duration = "60s",
        on_poll: Callable[[Freshness], None] | None = None,
        level: str = DEFAULT_LEVEL,
    ) -> Freshness:
        """Block until the repeatable-read cut of ``tables`` (or the ``level`` given) is fresh enough (protocol §6.7).

        Exactly one target: ``fresher_than`` (``now - barrier <= D``: ``"5m"``, a timedelta, or ms) or
        ``barrier`` (the cut's barrier at least this, any ``as_of`` value). Every poll re-resolves, so
        other processes' commits are seen; polls back off from ``interval`` to ``max_interval`` while the
        cut does not move. ``timeout=None`` waits for as long as it takes, ``0`` measures once. Returns
        the measurement (barrier, delay, the cut); NotFreshError (a TimeoutError, ``.freshness``: the last
        measurement with the bottleneck job and table) when ``timeout`` ends first.

        >>> cc.wait_for(["demo.word_counts"], fresher_than="10m", timeout="1h").cut  # doctest: +SKIP
        """
        return wait_for_fresh(
            self.store, tables, fresher_than=fresher_than, barrier=barrier, timeout=timeout, interval=interval,
            max_interval=max_interval, on_poll=on_poll, level=level,
        )

    def lineage(self, tables: Iterable[str] | None = None) -> LineageGraph:
        """The lineage graph of the whole catalog, or of the tables connected to ``tables``."""
        return self.store.lineage(tables)

    def status(self, tables: Iterable[str] | None = None, *, now: int | None = None) -> list[TableStatus]:
        """Per table: its watermark, own delay, the bottleneck upstream, its job and lease."""
        names = self.list_tables() if tables is None else [normalize_identifier(t) for t in tables]
        states = self.store.upstream_states(names)  # the upstream tables give own delays and bottlenecks
        if tables is not None and any(states[n].head(P.PREVIOUS_BRANCH) is not None for n in names):
            # a previous generation is read by the tables downstream: which of them still read it (§10.2)
            listed = [t for t in self.list_tables() if t not in states]
            states.update((s.identifier, s) for s in self.store.states(listed))
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
        application: str | None = None,
    ) -> Lease:
        """Make ``job`` the single writer of ``sinks``, reading ``sources`` (one fenced commit per sink).

        Refused with OwnershipError while another job, or another live instance of this job, holds a
        lease on a sink (``takeover=True`` takes over from a dead instance of the same job); refused
        with CycleError if the new edges would close a cycle.
        """
        return ownership.register_job(
            self.store, job, sources, sinks, lease_ms=lease_ms, takeover=takeover, instance=instance,
            application=application,
        )

    def unregister_job(self, lease: Lease) -> None:
        """Release the lease's sinks if still held by it; the job keeps owning them (``reassign`` hands them over)."""
        ownership.unregister_job(self.store, lease)

    def reassign(self, table: str, to_job: str, *, takeover: bool = False) -> Reassignment:
        """Hand the derived ``table`` to job ``to_job``: the only way a table changes owner (protocol §6.9).

        Refused for a root, while an instance of the owner holds a live lease (``takeover=True``: it is dead),
        and with CycleError when ``to_job`` would then read its own output.
        """
        return ownership.reassign(self.store, table, to_job, takeover=takeover)

    def renew_lease(self, lease: Lease, lease_ms: int = DEFAULT_LEASE_MS) -> Lease:
        """Extend ``lease``; FencedError when another instance took a sink over."""
        return ownership.renew_lease(self.store, lease, lease_ms)

    # --- roots ------------------------------------------------------------------------------------
    def ingest(
        self,
        table: str,
        data: pa.Table,
        *,
        barrier: BarrierLike | None = None,
        key: str | None = None,
        allow_future: bool = False,
        retries: int | None = None,
    ) -> IngestResult:
        """Append ``data`` to a root table, tagged with an explicit (event-time) barrier or the current time.

        ``key`` makes the ingest idempotent: an ingest whose key is already in ``main``'s history is
        skipped (``IngestResult.skipped``). See ``consistent_catalog.ingest.ingest``.
        """
        return openlineage_events.reporting_ingest(  # with OpenLineage configured: a run of job ingest:<table>
            self.name, self.catalog.properties, table, lambda: self.store.load_table(table).schema(),
            lambda: _ingest.ingest(self.store, table, data, barrier=barrier, key=key, allow_future=allow_future,
                                   retries=retries),
        )

    def advance_watermark(self, table: str, barrier: BarrierLike, *, allow_future: bool = False) -> int:
        """Declare an idle root complete up to ``barrier``; returns the new watermark W(X).

        Refused when the barrier lies beyond now plus the table's clock-skew allowance
        (``allow_future=True`` insists) and when it lies below the current watermark. The same
        barrier again is a no-op.
        """
        return _ingest.advance_watermark(self.store, table, barrier, allow_future=allow_future)

    def set_idle(self, table: str, after: int | str | timedelta | None) -> None:
        """Declare root ``table`` an idle source: its watermark may follow now minus ``after`` (None: undeclare).

        A source that receives no data would otherwise hold back every table downstream. Epoch jobs
        reading (transitively) from a declared root advance it before planning; ``advance_idle_roots``
        does it on demand. Data ingested later with an older barrier lands as late data (protocol §3).
        """
        _ingest.set_idle(self.store, table, after)

    def advance_idle_roots(self, states: Mapping[str, TableState] | None = None, *, now: int | None = None) -> dict[str, int]:
        """Advance every root declared idle (of ``states``, or of the catalog) to now minus its allowance."""
        return _ingest.advance_idle_roots(self.store, states, now=now)

    # --- revisions ----------------------------------------------------------------------------
    def revise(
        self, table: str, barrier: BarrierLike, *, mode: RevisionMode = "incremental", retries: int = 10
    ) -> RevisionResult:
        """Roll ``table`` and everything downstream back to their state at ``barrier`` and bump ``consistent.revision``.

        ``incremental``: derived tables return to ``snap(X, T)`` with watermark T, so their jobs replay
        from T. ``full``: derived tables are emptied and their jobs rebuild them from scratch. Staged
        epochs are discarded; running jobs see their next publish refused and re-plan. A barrier in the
        future (beyond the clock-skew allowance) is refused with InvalidBarrierError.
        """
        return _revise.revise(self.store, table, barrier, mode=mode, retries=retries)

    def abandon_generation(self, table: str, *, retries: int = 10) -> RevisionResult:
        """Return ``table`` and every table downstream of it to the generation before its new definition
        (protocol §6.10 step 6): a staged regeneration is discarded, a published one rolled back to
        ``consistent-previous``. Revert the job's definition too, or its next run regenerates again.
        InvalidInputError when ``table`` has no new generation."""
        return _revise.abandon_generation(self.store, table, retries=retries)

    # --- jobs and maintenance -----------------------------------------------------------------
    def job(
        self,
        job: str,
        *,
        sources: Iterable[str],
        sinks: Iterable[str],
        transform: Transform | None = None,
        mode: str = "append",
        lease_ms: int = DEFAULT_LEASE_MS,
        takeover: bool = False,
        expire_every: int | None = None,
        retention: RetentionPolicy | None = None,
        version: str | None = None,
        rebuild: bool = False,
    ) -> EpochJob:
        """An epoch job writing ``sinks`` from ``sources`` with pyiceberg (``consistent_catalog.epoch.EpochJob``).

        Each epoch records the job's definition: ``version`` when given, else the transform's name and source.
        When it differs from what computed the sinks' last epoch, or with ``rebuild=True``, the next epoch revises
        the sinks (and everything downstream) and recomputes them (protocol §6.10).
        """
        return EpochJob(
            self, job, sources=sources, sinks=sinks, transform=transform, mode=mode, lease_ms=lease_ms,
            takeover=takeover, expire_every=expire_every, retention=retention, version=version, rebuild=rebuild,
        )

    @property
    def retention(self) -> Retention:
        """Cut-aware expiry and retained cuts: ``cc.retention.expire(...)``, ``.retain(...)``, ``.retained_cuts()``."""
        return Retention(self.store)

    @property
    def pins(self) -> Pins:
        """Reader pins: ``with cc.pins.pin(tables, ttl="2h") as pinned: ...``, ``.unpin(tag)``, ``.list()``."""
        return Pins(self.store)
