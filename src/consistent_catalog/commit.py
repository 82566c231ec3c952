"""The commit layer: loading tables, fenced commits and writes, the requirements they carry, retries.

Everything consistent-catalog changes in a catalog goes through ``TableStore.commit`` (metadata
updates) or ``TableStore.write`` (a pyiceberg data write): one atomic catalog commit whose
*requirements* the catalog validates against the metadata it is about to replace, swapping the
metadata pointer only if nothing changed in between (protocol §6). A zombie writer, or a second
instance that lost a race, therefore fails inside the compare-and-swap itself and gets
``FencedError``, never a read-then-write window.

Only the standard Iceberg requirements are sent (``assert-table-uuid`` and ``assert-ref-snapshot-id``),
so every catalog checks them the same way: pyiceberg's SQL catalog on SQLite/PostgreSQL, a REST
server (which must refuse unknown requirement types), Glue, Hive... Table properties cannot be
asserted that way, so whatever changes ownership, revises a table, advances an idle root, adds or
removes tags or expires snapshots *takes the fence* (``TakeFence``): the same commit moves the ref
``consistent-fence`` to a new empty snapshot. Every other commit asserts the fence ref at the value its
writer planned with (``refs_at``), together with the branch heads it builds on.

The list sent is exactly the list intended: ``TableStore`` passes it to ``Catalog.commit_table``
itself (``_pyiceberg.commit_transaction_once`` for data writes), past pyiceberg's ``Transaction._stage``
(which keeps one requirement per type) and its commit-retry path (which drops every ref assertion).

Callers that plan from metadata and may be refused re-plan with ``RetryPolicy.attempts()``
(exponential backoff with jitter, so that two re-planning processes do not collide again).

A commit whose answer was lost (a 504, a timeout, a dropped connection) is settled here, never passed
on: the table is read back and the commit looked for — by the snapshot it adds, or, for a commit that
only changes properties, by its effects — before it is sent again (protocol §6.8, ``faults``). Where a REST
server advertises an ``idempotency-key-lifetime``, every commit carries an ``Idempotency-Key`` (one per
commit, the same on its resends) and a lost answer is first settled by sending the commit again as it is: the
server answers what it answered the first time, and no read-back is needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemovePropertiesUpdate,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
)

from consistent_catalog import _pyiceberg
from consistent_catalog import properties as P
from consistent_catalog._pyiceberg import (
    commit_transaction_once,
    empty_snapshot,
    idempotency_key,
    idempotency_key_lifetime,
    new_idempotency_key,
    open_table,
    remove_snapshots_keeping_parents,
    validates_client_side,
)
from consistent_catalog.exceptions import FencedError
from consistent_catalog.faults import Fault, FaultLog, RetryPolicy, fault_of, resent_by_client, unavailable
from consistent_catalog.lineage import LineageGraph
from consistent_catalog.loading import MetadataLoader
from consistent_catalog.probe import check_property_sizes, require_sound
from consistent_catalog.state import TableState
from consistent_catalog.util.identifiers import normalize_identifier

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import CommitTableResponse, Table, Transaction
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot
    from pyiceberg.table.update import TableRequirement


# --- requirements ---------------------------------------------------------------------------------
def refs_at(heads: Mapping[str, int | None]) -> list[AssertRefSnapshotId]:
    """``assert-ref-snapshot-id`` for each ref: at that snapshot, or (None) absent."""
    return [AssertRefSnapshotId(ref=name, snapshot_id=snapshot_id) for name, snapshot_id in heads.items()]


def tag_update(name: str, snapshot_id: int, max_ref_age_ms: int | None) -> SetSnapshotRefUpdate:
    """Create or move tag ``name`` to ``snapshot_id``, expiring ``max_ref_age_ms`` after that snapshot's timestamp."""
    return SetSnapshotRefUpdate(ref_name=name, type=SnapshotRefType.TAG, snapshot_id=snapshot_id, max_ref_age_ms=max_ref_age_ms)


def fence_head(table: Table) -> int | None:
    """The fence ref's snapshot in ``table`` as loaded (None: the table was never fenced)."""
    ref = table.metadata.refs.get(P.FENCE_BRANCH)
    return None if ref is None else ref.snapshot_id


def branch_heads(metadata: TableMetadata) -> dict[str, int]:
    """Every branch of ``metadata`` with its head (tags left out)."""
    return {name: ref.snapshot_id for name, ref in metadata.refs.items() if ref.snapshot_ref_type == SnapshotRefType.BRANCH}


def all_refs(metadata: TableMetadata) -> dict[str, int]:
    """Every ref (branches and tags) of ``metadata`` with its snapshot."""
    return {name: ref.snapshot_id for name, ref in metadata.refs.items()}


def retired_fence(metadata: TableMetadata, expected: int | None) -> Snapshot | None:
    """The fence snapshot a move to a new one makes unreachable: ``expected`` when it is a fence snapshot
    (no data, no parent) that no other ref points at."""
    if expected is None:
        return None
    snapshot = metadata.snapshot_by_id(expected)
    if snapshot is None or snapshot.parent_snapshot_id is not None or snapshot.summary is None:
        return None
    if P.FENCE_REASON not in snapshot.summary.additional_properties:
        return None
    if any(ref.snapshot_id == expected for name, ref in metadata.refs.items() if name != P.FENCE_BRANCH):
        return None
    return snapshot


class RefusedAfterFault(CommitFailedException):
    """The catalog refused a commit that an earlier, faulted attempt may still make land: what it wrote is kept
    (the orphan sweep removes it when nothing references it), never deleted as after a plain refusal."""

    kept_after_refusal = True


def landed_in(metadata: TableMetadata, updates: Sequence[Any]) -> bool:
    """Whether the commit of ``updates`` is in ``metadata`` (protocol §6.8).

    Exact for a commit that adds snapshots (their ids, chosen by the writer, are there); for one that
    only changes properties, refs or removes snapshots, whether all its effects hold. An update of any
    other kind cannot be recognised: False (the caller then reports the outcome as unknown).
    """
    added = [u.snapshot.snapshot_id for u in updates if isinstance(u, AddSnapshotUpdate)]
    if added:
        return all(metadata.snapshot_by_id(snapshot_id) is not None for snapshot_id in added)
    if not recognisable(updates):
        return False
    for update in updates:
        if isinstance(update, SetPropertiesUpdate):
            if any(metadata.properties.get(k) != v for k, v in update.updates.items()):
                return False
        elif isinstance(update, RemovePropertiesUpdate):
            if any(k in metadata.properties for k in update.removals):
                return False
        elif isinstance(update, SetSnapshotRefUpdate):
            ref = metadata.refs.get(update.ref_name)
            if ref is None or ref.snapshot_id != update.snapshot_id:
                return False
        elif isinstance(update, RemoveSnapshotRefUpdate):
            if update.ref_name in metadata.refs:
                return False
        elif isinstance(update, RemoveSnapshotsUpdate):
            if any(metadata.snapshot_by_id(i) is not None for i in update.snapshot_ids):
                return False
    return True


#: updates whose effects tell whether a commit without a snapshot landed (idempotent ones)
_BY_EFFECT = (SetPropertiesUpdate, RemovePropertiesUpdate, SetSnapshotRefUpdate, RemoveSnapshotRefUpdate,
              RemoveSnapshotsUpdate)


def recognisable(updates: Sequence[Any]) -> bool:
    """Whether ``landed_in`` can tell if a commit of ``updates`` landed: it adds a snapshot, or all its updates
    are of the kinds recognised by their effects."""
    return any(isinstance(u, AddSnapshotUpdate) for u in updates) or all(isinstance(u, _BY_EFFECT) for u in updates)


def _pyiceberg_open(catalog: Catalog, current: Table, location: str) -> Table:
    """``current``'s table as of metadata file ``location``, read through ``current``'s FileIO."""
    return open_table(catalog, ".".join(current.name()), location, io=current.io)


def _committed(table: Table, response: CommitTableResponse) -> Table:
    """``table`` as the catalog's commit response describes it: what a load right after would read, without loading."""
    return type(table)(table.name(), response.metadata, response.metadata_location, table.io, table.catalog)


def _delete_quietly(table: Table, path: str) -> None:
    """Delete a fence snapshot's manifest list (empty; nothing else references it); leave it to the orphan sweep on error."""
    try:
        table.io.delete(path)
    except OSError:
        pass


@dataclass(frozen=True)
class TakeFence:
    """Move the fence ref to a new empty snapshot in the same commit (protocol §6).

    ``expected`` is the fence head the change was planned with (None: no fence yet). The commit then
    also asserts every branch head of the table as loaded that the caller did not assert itself, so
    that the empty snapshot's sequence number is exact. ``holder``/``job`` name the lease holder after
    the move (the fence snapshot's summary), ``reason`` why it moved.
    """

    expected: int | None
    reason: str
    holder: str | None = None
    job: str | None = None

    @classmethod
    def keeping_holder(cls, metadata: TableMetadata, reason: str, expected: int | None) -> TakeFence:
        """A move from ``expected`` that keeps the lease holder of ``metadata`` (a revision, tag, expiry...):
        the holder re-reads the fence and carries on."""
        return cls(expected, reason, metadata.properties.get(P.LEASE_HOLDER), metadata.properties.get(P.JOB))

    def summary(self) -> dict[str, str]:
        out = {P.FENCE_REASON: self.reason}
        if self.holder is not None:
            out[P.FENCE_HOLDER] = self.holder
        if self.job is not None:
            out[P.FENCE_JOB] = self.job
        return out


def requirement_list(
    table: Table, requirements: Iterable[TableRequirement], *, fence: TakeFence | None = None
) -> tuple[TableRequirement, ...]:
    """The requirements a commit sends: the caller's, one per ref (the first wins), the fence's, the table uuid."""
    out: list[TableRequirement] = []
    asserted: set[str] = set()
    for requirement in requirements:
        if isinstance(requirement, AssertRefSnapshotId):
            if requirement.ref in asserted:
                continue
            asserted.add(requirement.ref)
        out.append(requirement)
    if fence is not None:
        heads: dict[str, int | None] = {P.FENCE_BRANCH: fence.expected, **branch_heads(table.metadata)}
        out.extend(r for r in refs_at(heads) if r.ref not in asserted)
    if not table.metadata.snapshots and validates_client_side(table.catalog):
        out = [r for r in out if not absent_ref_unassertable(r)]
    out.append(AssertTableUUID(uuid=table.metadata.table_uuid))
    return tuple(out)


def absent_ref_unassertable(requirement: TableRequirement) -> bool:
    """Whether ``requirement`` asserts that a ref other than main is absent, which pyiceberg's client-side
    validation refuses on a table without snapshots (``Table has no snapshots and can only be written to
    the main BRANCH``) although it holds there. Such assertions are left out when the table as planned has
    no snapshot — by catalogs that validate with pyiceberg (``validates_client_side``); a REST server
    validates them itself, correctly. ``register_job`` commits an empty sink's genesis with main asserted
    absent (which is exempt); what stays open is the first idle advance of a root that never had a
    snapshot (protocol §6.4)."""
    return isinstance(requirement, AssertRefSnapshotId) and requirement.snapshot_id is None and requirement.ref != P.MAIN_BRANCH

# --- the store ----------------------------------------------------------------------------------------
class Loaded(NamedTuple):
    """A table as loaded from the catalog, with its consistent-catalog state."""

    table: Table
    state: TableState


class TableStore:
    """Reads tables from a pyiceberg catalog and commits to them with requirements (fenced).

    Catalog faults are settled here (protocol §6.8): reads are retried, commits of unknown outcome are
    looked for before they are sent again, all under ``faults`` (by default the catalog property
    ``consistent.retry-deadline``); ``fault_log`` counts what was settled.
    """

    def __init__(self, catalog: Catalog, *, faults: RetryPolicy | None = None) -> None:
        self.catalog = catalog
        self.fault_log = FaultLog()
        """The faults this store's reads and commits met and settled."""
        self.loader = MetadataLoader(catalog, faults=faults, fault_log=self.fault_log)
        """States for reading: one catalog round-trip, concurrent lean reads, a cache by metadata file."""
        self._sound = False  # whether the catalog passed the probe (checked before this store's first commit)

    def require_sound(self) -> None:
        """Refuse a catalog that failed the catalog probe before anything is written (protocol §6.5): once per store,
        and per catalog and process at most one catalog read (``probe.require_sound``)."""
        if not self._sound:
            require_sound(self.catalog)
            self._sound = True

    @property
    def faults(self) -> RetryPolicy:
        """How long calls wait out a catalog fault before ``CatalogUnavailableError``."""
        return self.loader.faults

    @property
    def name(self) -> str:
        return self.catalog.name

    # --- loading ----------------------------------------------------------------------------------
    def load_table(self, identifier: str | Sequence[str]) -> Table:
        """The pyiceberg table, faults waited out; TableNotFoundError (with the way out) when it does not exist."""
        return self.loader.load_table(normalize_identifier(identifier))

    def load(self, identifier: str | Sequence[str]) -> Loaded:
        """The pyiceberg table (for writers) and its state, from one metadata load."""
        name = normalize_identifier(identifier)
        table = self.load_table(name)
        return Loaded(table, self.loader.state_of(name, table))

    def state_of(self, table: Table) -> TableState:
        """The state of ``table`` as given (loaded, or as a commit returned it): no catalog round trip."""
        return self.loader.state_of(".".join(table.name()), table)

    def state(self, identifier: str | Sequence[str]) -> TableState:
        name = normalize_identifier(identifier)
        return self.loader.load([name], required=[name])[name].state

    def states(self, identifiers: Iterable[str]) -> list[TableState]:
        names = list(dict.fromkeys(normalize_identifier(i) for i in identifiers))
        found = self.loader.load(names, required=names)
        return [found[n].state for n in names]

    def upstream_states(self, tables: Iterable[str], *, required: bool = True) -> dict[str, TableState]:
        """States of ``tables`` and of every table they are derived from, transitively (one load per lineage level).

        A source that no longer exists is left out (and so cannot be checked for completeness); a
        missing table of ``tables`` itself raises TableNotFoundError when ``required``.
        """
        located = self.loader.upstream(tables, required=required)
        return {name: found.state for name, found in located.items()}

    def list_tables(self) -> list[str]:
        """Every table of the catalog, in every (nested) namespace."""
        return self.loader.retrying(self._list_tables, "listing tables")

    def _list_tables(self) -> list[str]:
        listed = _pyiceberg.sql_table_identifiers(self.catalog)  # SQL catalogs: one query, not two per namespace
        if listed is not None:
            return sorted(set(listed))
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

    def lineage(self, tables: Iterable[str] | None = None) -> LineageGraph:
        """The lineage graph of the whole catalog, or of the tables connected to ``tables``."""
        listed = self.list_tables()
        graph = LineageGraph.from_states(self.states(listed))
        if tables is None:
            return graph
        names = [normalize_identifier(t) for t in tables]
        for name in set(names) - set(listed):
            self.load_table(name)  # TableNotFoundError naming it (never shown as a root of its own)
        return graph.subgraph(graph.connected(names))

    # --- committing -------------------------------------------------------------------------------
    def commit(
        self,
        table: Table,
        requirements: Sequence[TableRequirement],
        updates: Sequence[Any],
        *,
        what: str,
        take_fence: TakeFence | None = None,
    ) -> Table:
        """One atomic catalog commit of metadata ``updates``; a failed requirement or lost race is FencedError.

        ``take_fence`` also moves the fence ref (see ``TakeFence``). Returns the table as committed: the
        metadata the catalog's response carries (what a load right after would read, without loading it
        again; ``table`` itself is left as it was).
        """
        self.require_sound()
        sent = requirement_list(table, requirements, fence=take_fence)
        retired = None
        if take_fence is not None:
            added = [u.snapshot.sequence_number or 0 for u in updates if isinstance(u, AddSnapshotUpdate)]
            sequence = max([table.metadata.last_sequence_number, *added]) + 1
            snapshot = empty_snapshot(table, take_fence.summary(), sequence_number=sequence)
            updates = (
                *updates,
                AddSnapshotUpdate(snapshot=snapshot),
                SetSnapshotRefUpdate(ref_name=P.FENCE_BRANCH, type=SnapshotRefType.BRANCH, snapshot_id=snapshot.snapshot_id),
            )
            retired = retired_fence(table.metadata, take_fence.expected)
            if retired is not None:  # one fence snapshot at a time: the old one goes in the same commit
                updates = (*updates, remove_snapshots_keeping_parents([retired.snapshot_id]))
        updates = tuple(updates)
        try:
            committed = self._send(table, updates, lambda: self.catalog.commit_table(table, sent, updates), what=what)
        except CommitFailedException as exc:
            if take_fence is not None and not isinstance(exc, RefusedAfterFault):
                _delete_quietly(table, snapshot.manifest_list)
            raise self._refused(table, what, exc, sent) from None
        if retired is not None:
            _delete_quietly(table, retired.manifest_list)
        return committed

    def write(
        self, table: Table, requirements: Sequence[TableRequirement], write: Callable[[Transaction], Any], *, what: str
    ) -> Table | None:
        """A pyiceberg data write (``write(tx)`` appends/overwrites) committed only if ``requirements`` hold.

        One catalog commit, without pyiceberg's retry path: a writer that was fenced out fails at
        once with FencedError in every write mode (its written files are deleted). Returns the table
        as committed (from the catalog's response, like ``commit``), or None when the write produced
        no change to commit (e.g. overwriting nothing with nothing).
        """
        self.require_sound()
        if not table.metadata.snapshots and validates_client_side(table.catalog):
            requirements = [r for r in requirements if not absent_ref_unassertable(r)]
        def send(sent: tuple[TableRequirement, ...], updates: tuple[Any, ...]) -> Table:
            return self._send(table, updates, lambda: self.catalog.commit_table(table, sent, updates), what=what)

        try:
            tx = table.transaction()
            write(tx)
            return commit_transaction_once(tx, requirements, send)
        except CommitFailedException as exc:
            raise self._refused(table, what, exc, requirements) from None

    # --- faults (protocol §6.8) --------------------------------------------------------------------
    def _send(self, table: Table, updates: tuple[Any, ...], send: Callable[[], CommitTableResponse], *, what: str) -> Table:
        """``send()`` (one commit of ``updates`` to ``table``), settled: the table as that commit left it.

        Any fault while committing may have come after the commit landed (a gateway's 503 too): before
        the commit is sent again, and before a refusal that follows such a fault is believed, the table
        is read back and the commit looked for (``_look``), all under one deadline. A refusal after
        such a fault is ``RefusedAfterFault``: nothing the commit wrote is deleted (it may be
        referenced, by an attempt landing later still). Past the deadline, ``CatalogUnavailableError``
        says whether anything landed. ``CommitFailedException`` (a refusal) is the caller's.

        A REST server that de-duplicates ``Idempotency-Key`` (``idempotency_key_lifetime``) gets one key for this
        commit on every send; after a fault, while the key is within its lifetime, the commit is sent again as it
        is before any read-back (the server answers what it answered the first time).
        """
        name = ".".join(table.name())
        set_properties = {k: v for u in updates if isinstance(u, SetPropertiesUpdate) for k, v in u.updates.items()}
        if set_properties:
            check_property_sizes(self.catalog, name, set_properties)
        lifetime = idempotency_key_lifetime(self.catalog)
        key = new_idempotency_key() if lifetime is not None else None
        first_sent: float | None = None  # when the key was first sent (its lifetime counts from there)
        unsure = False  # whether an attempt may have landed
        resend = False  # whether the server settles the unknown outcome itself: send again under the same key
        looked_after_last = False  # whether the table was read back after the last failed attempt
        last: BaseException | None = None
        attempts = self.faults.attempts()
        for _ in attempts:
            if unsure and not resend:
                found, fault = self._look(table, updates, name, what)
                if fault is not None:
                    last = fault
                    continue
                looked_after_last = True
                if found is not None:
                    return found
            try:
                if first_sent is None:
                    first_sent = time.monotonic()
                with idempotency_key(key):
                    return _committed(table, send())
            except CommitFailedException as exc:
                if not unsure and resent_by_client(exc):  # Glue's boto3 client sent it again itself: the first
                    self.fault_log.record(Fault.UNKNOWN, exc, f"{what} on {name} (sent again by the catalog client)")
                    unsure = True  # attempt may have landed, its answer lost; its own retry then refused
                if not unsure:
                    raise
                for _ in attempts:  # refused: by our own earlier attempt, landed? Look, under the same deadline
                    found, fault = self._look(table, updates, name, what)
                    if fault is None:
                        break
                    last = fault
                else:
                    raise unavailable(self.name, f"{what} on {name}", last or exc, self.faults, landed="unknown",
                                      hint=self._look_for(updates, what, name)) from None
                if found is not None:
                    return found
                raise RefusedAfterFault(str(exc)) from exc
            except Exception as exc:
                fault = fault_of(exc)
                if fault is None:
                    raise
                self.fault_log.record(fault, exc, f"{what} on {name}")
                last, unsure, looked_after_last = exc, True, False
                # the key's lifetime counts from its first send; half of it left as margin for this resend's way
                resend = lifetime is not None and first_sent is not None and time.monotonic() - first_sent < lifetime / 2
                if not recognisable(updates):
                    break  # it cannot be looked for: never sent again (a server that forgot its key would apply it)
        if unsure and recognisable(updates):  # one last look: the deadline may have passed with the commit in
            found, fault = self._look(table, updates, name, what)
            if fault is None:
                looked_after_last = True
                if found is not None:
                    return found
        assert last is not None
        # "no" only when the table was read back after the last attempt and that attempt was refused before
        # it was applied (a 503 from a gateway, a refused connection may not have been): else "unknown"
        landed = "no" if looked_after_last and fault_of(last) is Fault.UNAVAILABLE else "unknown"
        raise unavailable(self.name, f"{what} on {name}", last, self.faults, landed=landed,
                          hint="" if landed == "no" else self._look_for(updates, what, name))

    def _look(self, planned: Table, updates: Sequence[Any], name: str, what: str) -> tuple[Table | None, BaseException | None]:
        """Read ``name`` back once and look for the commit: (the table as it left it or None, None), or
        (None, the fault) when the read itself met one."""
        try:
            return self._landed(planned, updates, self.catalog.load_table(name)), None
        except Exception as exc:
            fault = fault_of(exc)
            if fault is None:
                raise
            self.fault_log.record(fault, exc, f"looking for {what} on {name}")
            return None, exc

    @staticmethod
    def _look_for(updates: Sequence[Any], what: str, name: str) -> str:
        """How a user tells whether a commit of unknown outcome landed."""
        added = [u.snapshot.snapshot_id for u in updates if isinstance(u, AddSnapshotUpdate)]
        if added:
            return (f"{what} added snapshot {added[-1]}: if `consistent-catalog history {name}` lists it, the commit "
                    "landed; otherwise nothing changed")
        return f"{what} only sets properties: `consistent-catalog status {name}` shows whether they hold"

    def _landed(self, planned: Table, updates: Sequence[Any], current: Table) -> Table | None:
        """The table as the commit of ``updates`` (planned on ``planned``) left it, if it is in ``current``; else None.

        A commit that adds a snapshot is recognised by that snapshot's id; one that only changes
        properties or refs by its effects (idempotent: a second send changes nothing). The table
        returned is the first metadata file after ``planned``'s, in ``current``'s metadata log, that
        holds the commit (the commit's own, even when others committed before or after it), or
        ``current`` when the log does not reach back that far.
        """
        if not landed_in(current.metadata, updates):
            return None
        log = [entry.metadata_file for entry in current.metadata.metadata_log]
        base = planned.metadata_location
        if base not in log:
            return current
        for location in log[log.index(base) + 1:]:
            try:
                candidate = _pyiceberg_open(self.catalog, current, location)
            except FileNotFoundError:
                continue
            if landed_in(candidate.metadata, updates):
                return candidate
        return current

    def _refused(self, table: Table, what: str, exc: Exception, sent: Iterable[TableRequirement]) -> FencedError:
        """FencedError for a refused commit; when it asserted the fence, naming who holds the table now."""
        name = ".".join(table.name())
        message = f"{name}: {what} was refused by the catalog: {exc}"
        if any(isinstance(r, AssertRefSnapshotId) and r.ref == P.FENCE_BRANCH for r in sent):
            try:
                now = self.load_table(name).metadata
            except Exception:  # noqa: BLE001 - the refusal is the error; who holds the table is a hint
                return FencedError(message)
            ref = now.refs.get(P.FENCE_BRANCH)
            moved = now.snapshot_by_id(ref.snapshot_id) if ref is not None else None
            reason = (moved.summary or {}).get(P.FENCE_REASON) if moved is not None and moved.summary else None
            holder, job = now.properties.get(P.LEASE_HOLDER), now.properties.get(P.JOB)
            message += (f" — {P.FENCE_BRANCH} moved{f' ({reason})' if reason else ''}; {P.LEASE_HOLDER} is now "
                        f"{holder or '-'} (job {job or '-'})")
        return FencedError(message)
