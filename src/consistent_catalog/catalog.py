"""``ConsistentCatalog``: wraps any pyiceberg ``Catalog`` and does the I/O the pure modules leave out."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update import (
    AssertTableUUID,
    RemovePropertiesUpdate,
    RemoveSnapshotRefUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
)

from consistent_catalog import properties as P
from consistent_catalog.barrier import BarrierLike, to_barrier
from consistent_catalog.exceptions import (
    CatalogConfigError,
    ConsistentCatalogError,
    FencedError,
    InvalidBarrierError,
    InvalidInputError,
    OwnershipError,
    TableNotFoundError,
)
from consistent_catalog.fencing import fence
from consistent_catalog.lineage import LineageGraph
from consistent_catalog.report import EpochEntry, HistoryEntry, TableStatus, epochs, history, status
from consistent_catalog.resolver import DEFAULT_LEVEL, Cut, resolve
from consistent_catalog.revision import MODES as REVISION_MODES
from consistent_catalog.revision import RevisionMode, RevisionResult, RevisionStep, affected_tables, plan_step
from consistent_catalog.state import TableState, encode_table_sources

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import DataScan, Table, Transaction

    from consistent_catalog.epoch import EpochJob

DEFAULT_LEASE_MS = 5 * 60 * 1000


def now_ms() -> int:
    return int(time.time() * 1000)


def normalize_identifier(identifier: str | Sequence[str]) -> str:
    """``"ns.table"`` for a string or tuple identifier (nested namespaces joined with ``.``)."""
    if isinstance(identifier, str):
        parts = identifier.split(".")
    else:
        parts = list(identifier)
        dotted = [p for p in parts if "." in p]
        if dotted:
            raise InvalidInputError(
                f"table identifier {tuple(identifier)!r}: the name part {dotted[0]!r} contains a dot, which cannot be "
                "told apart from a namespace separator in consistent.sources (SPEC 2); rename the table or namespace"
            )
    if len(parts) < 2 or any(not p.strip() for p in parts):
        raise InvalidInputError(f"table identifier {identifier!r} must look like namespace.table")
    return ".".join(parts)


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
    barrier: int


class ConsistentCatalog:
    """Consistent reads and epoch-tagged writes over a pyiceberg catalog.

    >>> cc = ConsistentCatalog.load("lake")                  # doctest: +SKIP
    >>> cut = cc.resolve(["demo.words", "demo.word_counts"])  # doctest: +SKIP
    """

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    @classmethod
    def load(cls, name: str | None = None, **properties: str) -> ConsistentCatalog:
        """Load the catalog the pyiceberg way (``.pyiceberg.yaml``, ``PYICEBERG_CATALOG__<NAME>__<KEY>``)."""
        from pyiceberg.catalog import load_catalog

        try:
            return cls(load_catalog(name, **properties))
        except (ValueError, NotImplementedError) as exc:
            raise CatalogConfigError(
                f"cannot load catalog {name or 'default'!r}: {exc}; configure it in ~/.pyiceberg.yaml or with "
                f"PYICEBERG_CATALOG__{(name or 'default').upper()}__URI=... (see README)"
            ) from None

    @property
    def name(self) -> str:
        return self.catalog.name

    # --- loading ----------------------------------------------------------------------------------
    def load_table(self, identifier: str) -> Table:
        name = normalize_identifier(identifier)
        try:
            return self.catalog.load_table(name)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise TableNotFoundError(
                f"table {name} does not exist in catalog {self.name!r}; check the name "
                "(consistent-catalog status lists the tables)"
            ) from None

    def state(self, identifier: str) -> TableState:
        table = self.load_table(identifier)
        return TableState.from_metadata(normalize_identifier(identifier), table.metadata)

    def states(self, identifiers: Iterable[str]) -> list[TableState]:
        return [self.state(i) for i in dict.fromkeys(normalize_identifier(i) for i in identifiers)]

    def upstream_states(self, tables: Iterable[str], *, required: bool = True) -> dict[str, TableState]:
        """States of ``tables`` and of every table they are derived from, transitively (one load each).

        A source that no longer exists is left out (and so cannot be checked for completeness); a
        missing table of ``tables`` itself raises TableNotFoundError when ``required``.
        """
        found: dict[str, TableState] = {}
        pending = [normalize_identifier(t) for t in tables]
        first = set(pending) if required else set()
        while pending:
            name = pending.pop()
            if name in found:
                continue
            try:
                state = self.state(name)
            except TableNotFoundError:
                if name in first:
                    raise
                continue
            found[name] = state
            pending.extend(s for s in state.sources if s not in found)
        return found

    def list_tables(self) -> list[str]:
        """Every table of the catalog, in every (nested) namespace."""
        found: list[str] = []
        pending: list[tuple[str, ...]] = list(self.catalog.list_namespaces())
        while pending:
            namespace = pending.pop()
            found.extend(".".join(ident) for ident in self.catalog.list_tables(namespace))
            try:
                pending.extend(self.catalog.list_namespaces(namespace))
            except (NotImplementedError, NoSuchNamespaceError):
                pass
        return sorted(set(found))

    # --- reading --------------------------------------------------------------------------------
    def resolve(self, tables: Iterable[str], level: str = DEFAULT_LEVEL, as_of: BarrierLike | None = None) -> Cut:
        """The consistent cut of SPEC 4 for ``tables`` (one metadata load per table and per upstream table)."""
        names = list(dict.fromkeys(normalize_identifier(t) for t in tables))
        closure = self.upstream_states(names)
        return resolve([closure[n] for n in names], level, as_of, upstream=closure.values())

    def read(self, tables: Iterable[str], level: str = DEFAULT_LEVEL, as_of: BarrierLike | None = None) -> ConsistentRead:
        """Resolve a cut and return a reader whose scans are pinned at it."""
        loaded = {normalize_identifier(t): self.load_table(t) for t in tables}
        states = {name: TableState.from_metadata(name, table.metadata) for name, table in loaded.items()}
        upstream = dict(states)
        pending = [src for st in states.values() for src in st.sources if src not in upstream]
        upstream.update(self.upstream_states(pending, required=False))
        return ConsistentRead(resolve(list(states.values()), level, as_of, upstream=upstream.values()), loaded)

    def lineage(self, tables: Iterable[str] | None = None) -> LineageGraph:
        """The lineage graph of the whole catalog, or of the tables connected to ``tables``."""
        graph = LineageGraph.from_states(self.states(self.list_tables()))
        if tables is None:
            return graph
        keep = graph.connected(normalize_identifier(t) for t in tables)
        return LineageGraph(
            frozenset(keep),
            {k: v for k, v in graph.upstream.items() if k in keep},
            {k: v for k, v in graph.owners.items() if k in keep},
        )

    def status(self, tables: Iterable[str] | None = None, *, now: int | None = None) -> list[TableStatus]:
        names = self.list_tables() if tables is None else [normalize_identifier(t) for t in tables]
        states = self.upstream_states(names)  # the upstream tables give own delays and bottlenecks
        return status(states, names, now=now_ms() if now is None else now)

    def history(self, table: str) -> list[HistoryEntry]:
        """Every snapshot of the table's newest branch, newest first, with its effective barrier."""
        return history(self.state(table))

    def epochs(self, table: str) -> list[EpochEntry]:
        """The table's epochs, newest first: barrier, when staged and published, latency, rows."""
        return epochs(self.state(table))

    # --- committing -----------------------------------------------------------------------------
    def commit(self, table: Table, requirements: Sequence[Any], updates: Sequence[Any], *, what: str) -> Table:
        """One atomic catalog commit; a failed requirement or lost race becomes FencedError."""
        try:
            self.catalog.commit_table(
                table, (AssertTableUUID(uuid=table.metadata.table_uuid), *requirements), tuple(updates)
            )
        except CommitFailedException as exc:
            raise FencedError(f"{'.'.join(table.name())}: {what} was refused by the catalog: {exc}") from None
        return self.load_table(".".join(table.name()))

    def write(self, table: Table, requirement: Any, write: Callable[[Transaction], Any], *, what: str) -> None:
        """A pyiceberg data write (``write(tx)`` appends/overwrites) that commits only if ``requirement`` holds.

        The requirement is checked by the catalog inside its compare-and-swap, also on pyiceberg's retries.
        """
        try:
            tx = table.transaction()
            tx._apply((), (requirement,))
            write(tx)
            tx.commit_transaction()
        except CommitFailedException as exc:
            raise FencedError(f"{'.'.join(table.name())}: {what} was refused by the catalog: {exc}") from None

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
            s for s in self.states(self.list_tables()) if s.identifier not in sink_names
        )
        graph.check_new_edges(job, source_names, sink_names)

        instance = instance or uuid.uuid4().hex[:12]
        until = now_ms() + lease_ms
        done: list[tuple[str, Mapping[str, str]]] = []
        try:
            for sink in sink_names:
                table = self.load_table(sink)
                state = TableState.from_metadata(sink, table.metadata)
                self._check_can_own(state, job, instance, takeover)
                previous = {k: state.properties.get(k) for k in (P.JOB, P.LEASE_HOLDER, P.LEASE_UNTIL, P.SOURCES)}
                self.commit(
                    table,
                    [fence(previous)],
                    [
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
                f"{state.identifier} is owned by job {state.job!r} whose lease runs until {state.lease_until}; "
                f"a table has a single writer — unregister that job first or wait for its lease to lapse"
            )
        if state.job == job and live and state.lease_holder not in (None, instance) and not takeover:
            raise OwnershipError(
                f"{state.identifier} is being written by another live instance ({state.lease_holder}) of job "
                f"{job!r} until {state.lease_until}; stop it, wait for the lease to lapse, or take over "
                "with takeover=True (--takeover) if it is dead"
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
                removals = [k for k in (P.JOB, P.LEASE_HOLDER, P.LEASE_UNTIL, P.SOURCES) if k not in previous]
                self.commit(
                    table,
                    [fence({P.LEASE_HOLDER: instance})],
                    [SetPropertiesUpdate(updates=dict(previous)), RemovePropertiesUpdate(removals=removals)],
                    what="undoing a partial registration",
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
                self.commit(
                    table,
                    [fence({P.LEASE_HOLDER: lease.instance})],
                    [RemovePropertiesUpdate(removals=[P.JOB, P.LEASE_HOLDER, P.LEASE_UNTIL])],
                    what=f"unregistering job {lease.job!r}",
                )
            except FencedError:
                pass

    def renew_lease(self, lease: Lease, lease_ms: int = DEFAULT_LEASE_MS) -> Lease:
        until = now_ms() + lease_ms
        for sink in lease.sinks:
            table = self.load_table(sink)
            self.commit(
                table,
                [fence({P.JOB: lease.job, P.LEASE_HOLDER: lease.instance})],
                [SetPropertiesUpdate(updates={P.LEASE_UNTIL: str(until)})],
                what=f"renewing the lease of job {lease.job!r}",
            )
        return Lease(lease.job, lease.instance, lease.sinks, lease.sources, until)

    def advance_watermark(self, table: str, barrier: BarrierLike) -> int:
        """Declare an idle root complete up to ``barrier``; returns the new watermark W(X)."""
        value = to_barrier(barrier)
        loaded = self.load_table(table)
        state = TableState.from_metadata(normalize_identifier(table), loaded.metadata)
        if not state.is_root:
            raise InvalidInputError(
                f"{state.identifier} is derived (written by job {state.job!r}); its watermark advances when its job "
                "runs an epoch — advance the watermark of its root tables instead"
            )
        current = state.watermark()
        if current is not None and value <= current:
            if state.watermark_property is not None and value < state.watermark_property:
                raise InvalidBarrierError(
                    f"{state.identifier} already has watermark {state.watermark_property}; a watermark never moves back"
                )
            return current
        self.commit(
            loaded,
            [fence({P.WATERMARK: state.properties.get(P.WATERMARK)}, {P.MAIN_BRANCH: state.head()})],
            [SetPropertiesUpdate(updates=state.watermark_properties(value))],
            what="advancing the watermark",
        )
        return value

    def ingest(self, table: str, data: pa.Table, *, barrier: BarrierLike | None = None) -> IngestResult:
        """Append ``data`` to a root table, tagged with an explicit (event-time) barrier or the current time.

        A barrier at or below the table's watermark would change content that readers were told is
        complete, so it is raised to W(X) + 1 (the late-snapshot rule of SPEC 3).
        """
        loaded = self.load_table(table)
        state = TableState.from_metadata(normalize_identifier(table), loaded.metadata)
        if not state.is_root:
            raise InvalidInputError(
                f"{state.identifier} is derived from {', '.join(state.sources)}; only root tables take ingested data"
            )
        wanted = now_ms() if barrier is None else to_barrier(barrier)
        current = state.watermark()
        effective = wanted if current is None or wanted > current else current + 1
        loaded.append(data, snapshot_properties={P.BARRIER: str(effective)})
        refreshed = self.load_table(table)
        snapshot = refreshed.metadata.snapshot_by_name(P.MAIN_BRANCH)
        assert snapshot is not None
        return IngestResult(state.identifier, snapshot.snapshot_id, effective)

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
        steps = tuple(self._revise_table(t, value, mode, retries) for t in affected_tables(graph, name))
        return RevisionResult(name, value, mode, steps)

    def _revise_table(self, name: str, barrier: int, mode: str, retries: int) -> RevisionStep:
        for _ in range(retries):
            table = self.load_table(name)
            state = TableState.from_metadata(name, table.metadata)
            step = plan_step(state, barrier, mode)
            updates: list[Any] = []
            for branch in (P.MAIN_BRANCH, P.STAGED_BRANCH):
                if step.to_snapshot is not None:
                    updates.append(SetSnapshotRefUpdate(ref_name=branch, type=SnapshotRefType.BRANCH, snapshot_id=step.to_snapshot))
                elif branch in state.branches:
                    updates.append(RemoveSnapshotRefUpdate(ref_name=branch))
            properties = {P.REVISION: str(step.revision)}
            if step.watermark is not None:
                properties[P.WATERMARK] = str(step.watermark)
                properties[P.WATERMARK_SNAPSHOT] = P.NO_SNAPSHOT if step.to_snapshot is None else str(step.to_snapshot)
            else:
                removals = [k for k in (P.WATERMARK, P.WATERMARK_SNAPSHOT) if k in state.properties]
                if removals:
                    updates.append(RemovePropertiesUpdate(removals=removals))
            updates.append(SetPropertiesUpdate(updates=properties))
            expected_refs = {b: state.head(b) for b in (P.MAIN_BRANCH, P.STAGED_BRANCH)}
            expected = {k: state.properties.get(k) for k in (P.REVISION, P.WATERMARK)}
            try:
                self.commit(table, [fence(expected, expected_refs)], updates, what=f"revising to barrier {barrier}")
                return step
            except FencedError:
                continue  # a job or ingest committed meanwhile: plan this table again
        raise FencedError(f"{name}: revision to barrier {barrier} kept conflicting with other commits; retry it")

    def pin(self, tables: Iterable[str], *, level: str = DEFAULT_LEVEL, as_of: BarrierLike | None = None, ttl: Any = "1h") -> Any:
        """Pin a cut while a long read runs: ``with cc.pin(tables, ttl="2h") as pinned: pinned.read...`` (pins.py)."""
        from consistent_catalog.pins import pin

        return pin(self, tables, level=level, as_of=as_of, ttl=ttl)

    def expire(self, tables: Iterable[str] | None = None, policy: Any = None, *, dry_run: bool = False) -> Any:
        """Cut-aware snapshot expiry (retention.py): never removes what a cut, pin or retained tier needs."""
        from consistent_catalog.retention import expire

        return expire(self, tables, policy, dry_run=dry_run)

    def retain(self, tables: Iterable[str] | None = None, policy: Any = None) -> Any:
        """Tag the latest cut as this hour's/day's/week's retained cut on every table (retention.py)."""
        from consistent_catalog.retention import retain

        return retain(self, tables, policy)

    def job(self, job: str, *, sources: Iterable[str], sinks: Iterable[str], **options: Any) -> EpochJob:
        """An epoch job writing ``sinks`` from ``sources`` with pyiceberg (see ``consistent_catalog.epoch``)."""
        from consistent_catalog.epoch import EpochJob

        return EpochJob(self, job, sources=sources, sinks=sinks, **options)


class ConsistentRead:
    """A resolved cut plus the loaded tables: scans and Arrow data pinned at the cut."""

    def __init__(self, cut: Cut, tables: Mapping[str, Table]) -> None:
        self.cut = cut
        self._tables = dict(tables)

    def table(self, name: str) -> Table:
        return self._tables[normalize_identifier(name)]

    def scan(self, name: str, **options: Any) -> DataScan | None:
        """A pyiceberg scan at the cut's snapshot, or None when the table is empty at the cut."""
        snapshot_id = self.cut[normalize_identifier(name)].snapshot_id
        if snapshot_id is None:
            return None
        return self.table(name).scan(snapshot_id=snapshot_id, **options)

    def to_arrow(self, name: str, **options: Any) -> pa.Table:
        scan = self.scan(name, **options)
        if scan is None:
            return self.table(name).schema().as_arrow().empty_table()
        return scan.to_arrow()

    def to_arrow_all(self) -> dict[str, pa.Table]:
        return {name: self.to_arrow(name) for name in self.cut.tables}
