"""Ownership (docs/protocol.md §5.2, §6): a job registers as the single writer of its sinks and holds a lease.

Registration, renewal and unregistration are fenced catalog commits through ``TableStore``:
registering takes the fence (moves ``consistent-fence``), so every commit an earlier holder planned is
refused inside the catalog's compare-and-swap; renewing and unregistering assert the fence as read,
so they fail once somebody else took it. An empty sink gets its *genesis* snapshot (Iceberg branches
need one) in the registration commit itself, with ``main`` asserted absent.

A table belongs to its job (``consistent.job``) also after the job's instance released its lease: another
job's registration is refused, and ``reassign`` is the one way a table changes owner (§6.9).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.table.update import RemovePropertiesUpdate, SetPropertiesUpdate

from consistent_catalog import epoch_commits, write_plans
from consistent_catalog import properties as P
from consistent_catalog._pyiceberg import empty_snapshot
from consistent_catalog.commit import TableStore, TakeFence, fence_head
from consistent_catalog.exceptions import ConsistentCatalogError, FencedError, InvalidInputError, OwnershipError
from consistent_catalog.lineage import LineageGraph, check_not_own_source
from consistent_catalog.state import TableState
from consistent_catalog.util.identifiers import normalize_identifier
from consistent_catalog.util.time import now_ms

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

DEFAULT_LEASE_MS = 5 * 60 * 1000
_OWNERSHIP_KEYS = (P.JOB, P.LEASE_HOLDER, P.LEASE_UNTIL, P.LEASE_HOLDER_INFO, P.SOURCES)
_LEASE_KEYS = write_plans.LEASE_KEYS


def holder_info(application: str | None = None) -> str:
    """``consistent.lease-holder-info`` of an instance of this process registering now (protocol §6.2)."""
    info: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), "since": now_ms()}
    if application:
        info["app"] = application
    return json.dumps(info, sort_keys=True, separators=(",", ":"))


def holder_process_gone(state: TableState) -> bool:
    """Whether the lease holder of ``state`` was a process on this host that exists no more (killed, crashed): its
    ``consistent.lease-holder-info`` names this host (``socket.gethostname()``, as Python and the JVM plugin write
    it) and no process has its pid. False whenever that is not known (no info, another host, the pid in use, not a
    POSIX system): only then does a refusal call the holder gone. A pid reused since reads as alive."""
    info = write_plans.holder_fields(state)
    pid, host = info.get("pid"), info.get("host")
    if state.lease_holder is None or not isinstance(pid, int) or pid <= 0 or host != socket.gethostname():
        return False
    if os.name != "posix":  # os.kill(pid, 0) is no probe on Windows
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: it exists, as another user's
        return False
    try:  # a killed child its parent has not reaped yet still answers the probe
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[:1] == ["Z"]
    except OSError:
        return False


@dataclass(frozen=True)
class Lease:
    """A job instance's claim on its sinks: fences out every other writer until it lapses."""

    job: str
    instance: str
    sinks: tuple[str, ...]
    sources: tuple[str, ...]
    until_ms: int


def genesis_snapshot(table: Table, job: str) -> Snapshot:
    """An empty sink's first snapshot: no data, no parent, untagged but for ``consistent.job`` (Iceberg branches
    need a snapshot; protocol §5.2). Its manifest list is written here."""
    return empty_snapshot(table, {P.JOB: job})


def genesis_updates(table: Table, job: str) -> list[Any]:
    """The updates that give an empty sink its genesis snapshot on ``main``. Commit them with ``main`` asserted absent."""
    return list(epoch_commits.genesis_updates(genesis_snapshot(table, job)))


def register_job(
    store: TableStore,
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

    The lease names where this instance runs (``consistent.lease-holder-info``: host, process id, the Spark
    ``application`` id when given, since when), which refusals quote for the operator.

    Refused with OwnershipError when a sink is owned by another job, live or not (``reassign`` hands a table
    over), or another live instance of this job holds it (``takeover=True`` takes over from a dead one);
    refused with CycleError if the new edges would close a cycle or make the job read its own output. A
    registration refused halfway is undone.
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
        store.load_table(source)  # fails with TableNotFoundError
    check_not_own_source(job, source_names, sink_names)
    instance = instance or uuid.uuid4().hex[:12]
    states = {s.identifier: s for s in store.states(store.list_tables())}
    for sink in sink_names:  # whose table it is comes first: a foreign job's name is refused as such, not as a cycle
        if sink in states:
            check_can_own(states[sink], job, instance, takeover)
    graph = LineageGraph.from_states(s for name, s in states.items() if name not in sink_names)
    graph.check_new_edges(job, source_names, sink_names)

    info = holder_info(application)
    now = now_ms()
    done: list[tuple[str, Mapping[str, str]]] = []
    try:
        for sink in sink_names:
            table, state = store.load(sink)
            commit = write_plans.register(state, job=job, sources=source_names, instance=instance, takeover=takeover,
                                          now=now, lease_ms=lease_ms, holder_info=info,
                                          holder_gone=holder_process_gone(state))
            previous = {k: state.properties.get(k) for k in _OWNERSHIP_KEYS}
            # an empty sink gets its genesis in the same commit, with main asserted absent: every catalog
            # checks that (also on a table without snapshots), so of two racing registrations one wins
            genesis = genesis_updates(table, job) if commit.genesis else []
            store.commit(table, commit.requirements, [*genesis, *commit.updates], what=commit.what,
                         take_fence=commit.take_fence)
            done.append((sink, {k: v for k, v in previous.items() if v is not None}))
    except FencedError as exc:
        _undo_registration(store, done, instance)
        raise OwnershipError(f"{exc}; another registration of the same sink won the race — retry or pick another sink") from None
    except ConsistentCatalogError:
        _undo_registration(store, done, instance)
        raise
    return Lease(job, instance, sink_names, source_names, now + lease_ms)


def check_can_own(state: TableState, job: str, instance: str, takeover: bool, *, now: int | None = None) -> None:
    """Refuse a registration of ``job`` (instance ``instance``) on the sink ``state`` while somebody else owns or
    writes it (protocol §6.1-§6.2): ``write_plans.check_can_own`` at ``now`` (default: the clock), told whether the
    lease holder's process is gone from this host."""
    write_plans.check_can_own(state, job, instance, takeover, now=now_ms() if now is None else now,
                              holder_gone=holder_process_gone(state))


def _undo_registration(store: TableStore, done: list[tuple[str, Mapping[str, str]]], instance: str) -> None:
    for sink, previous in done:
        try:
            table = store.load_table(sink)
            if table.metadata.properties.get(P.LEASE_HOLDER) != instance:
                continue  # registered by someone else meanwhile: not ours to undo
            removals = [k for k in _OWNERSHIP_KEYS if k not in previous]
            store.commit(
                table,
                [],
                [SetPropertiesUpdate(updates=dict(previous)), RemovePropertiesUpdate(removals=removals)],
                what="undoing a partial registration",
                take_fence=TakeFence(fence_head(table), "unregister", previous.get(P.LEASE_HOLDER), previous.get(P.JOB)),
            )
        except ConsistentCatalogError:
            pass


def unregister_job(store: TableStore, lease: Lease) -> None:
    """Release the lease on the lease's sinks if still held by it; the job keeps owning them (``consistent.job``
    stays, and lineage in ``consistent.sources``): only ``reassign`` hands a table to another job."""
    for sink in lease.sinks:
        table, state = store.load(sink)
        commit = write_plans.unregister(state, job=lease.job, instance=lease.instance)
        if commit is None:
            continue  # taken over meanwhile: not ours to clear
        try:
            store.commit(table, commit.requirements, commit.updates, what=commit.what)
        except FencedError:
            pass


def renew_lease(store: TableStore, lease: Lease, lease_ms: int = DEFAULT_LEASE_MS) -> Lease:
    """Extend ``lease`` to now + ``lease_ms`` on every sink; FencedError when an instance took a sink over."""
    until = now_ms() + lease_ms
    for sink in lease.sinks:
        table, state = store.load(sink)
        commit = write_plans.renew(state, job=lease.job, instance=lease.instance, until=until)
        store.commit(table, commit.requirements, commit.updates, what=commit.what)  # a takeover after the load moves the fence
    return Lease(lease.job, lease.instance, lease.sinks, lease.sources, until)


@dataclass(frozen=True)
class Reassignment:
    """What ``reassign`` did (protocol §6.9, §10.11)."""

    table: str
    from_job: str | None
    to_job: str
    changed: bool

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "from_job": self.from_job, "to_job": self.to_job, "changed": self.changed}


def reassign(store: TableStore, table: str, to_job: str, *, takeover: bool = False) -> Reassignment:
    """Hand the derived table ``table`` to ``to_job`` (protocol §6.9): the only way a table changes owner.

    Refused for a root, while an instance of the owner holds a live lease (``takeover=True``: it is known
    dead), and when ``to_job`` would then read its own output (CycleError). One commit sets ``consistent.job``,
    removes the lease and takes the fence, so every commit the old owner's instances planned is refused.
    """
    if not to_job or not to_job.strip():
        raise InvalidInputError("reassign needs the job to hand the table to (--to-job J), not an empty id")
    name = normalize_identifier(table)
    tbl, state = store.load(name)  # TableNotFoundError naming it
    commit = write_plans.reassign(state, to_job=to_job, takeover=takeover, now=now_ms())
    owner = state.owner
    if commit is None:
        return Reassignment(name, owner, to_job, False)
    graph = LineageGraph.from_states(s for s in store.states(store.list_tables()) if s.identifier != name)
    graph.check_new_edges(to_job, state.sources, (name,))
    try:
        store.commit(tbl, commit.requirements, commit.updates, what=commit.what, take_fence=commit.take_fence)
    except FencedError as exc:
        raise OwnershipError(f"{exc}; the table changed while it was being reassigned — run reassign again") from None
    return Reassignment(name, owner, to_job, True)
