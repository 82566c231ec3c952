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

from consistent_catalog import epoch_commits
from consistent_catalog import properties as P
from consistent_catalog._pyiceberg import empty_snapshot
from consistent_catalog.commit import TableStore, TakeFence, fence_head, refs_at
from consistent_catalog.exceptions import ConsistentCatalogError, FencedError, InvalidInputError, OwnershipError
from consistent_catalog.lineage import LineageGraph, check_not_own_source
from consistent_catalog.state import TableState, encode_table_sources
from consistent_catalog.util.identifiers import normalize_identifier
from consistent_catalog.util.time import fmt_barrier, now_ms

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

DEFAULT_LEASE_MS = 5 * 60 * 1000
_OWNERSHIP_KEYS = (P.JOB, P.LEASE_HOLDER, P.LEASE_UNTIL, P.LEASE_HOLDER_INFO, P.SOURCES)
_LEASE_KEYS = (P.LEASE_HOLDER, P.LEASE_UNTIL, P.LEASE_HOLDER_INFO)


def holder_info(application: str | None = None) -> str:
    """``consistent.lease-holder-info`` of an instance of this process registering now (protocol §6.2)."""
    info: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), "since": now_ms()}
    if application:
        info["app"] = application
    return json.dumps(info, sort_keys=True, separators=(",", ":"))


def describe_holder(state: TableState) -> str:
    """The lease holder as an operator needs it before a takeover: ``instance 6a3b6f0460c5 (host h, pid 1234,
    Spark application local-17…, since <time>)``; just the id where no info was written (earlier versions)."""
    text = f"instance {state.lease_holder}"
    raw = state.properties.get(P.LEASE_HOLDER_INFO)
    try:
        info = json.loads(raw) if raw else {}
    except ValueError:
        info = {}
    if not isinstance(info, dict):
        return text
    parts = []
    if info.get("host"):
        parts.append(f"host {info['host']}")
    if info.get("pid") is not None:
        parts.append(f"pid {info['pid']}")
    if info.get("app"):
        parts.append(f"Spark application {info['app']}")
    if isinstance(info.get("since"), int):
        parts.append(f"since {fmt_barrier(info['since'])}")
    return f"{text} ({', '.join(parts)})" if parts else text


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
    until = now_ms() + lease_ms
    done: list[tuple[str, Mapping[str, str]]] = []
    try:
        for sink in sink_names:
            table, state = store.load(sink)
            check_can_own(state, job, instance, takeover)
            previous = {k: state.properties.get(k) for k in _OWNERSHIP_KEYS}
            # an empty sink gets its genesis in the same commit, with main asserted absent: every catalog
            # checks that (also on a table without snapshots), so of two racing registrations one wins
            genesis = genesis_updates(table, job) if state.head() is None else []
            owned = {P.JOB: job, P.SOURCES: encode_table_sources(list(source_names)), P.LEASE_HOLDER: instance,
                     P.LEASE_UNTIL: str(until), P.LEASE_HOLDER_INFO: info}
            store.commit(
                table,
                refs_at({P.MAIN_BRANCH: None}) if genesis else [],
                [*genesis, SetPropertiesUpdate(updates=owned)],
                what=f"registering job {job!r}",
                take_fence=TakeFence(state.head(P.FENCE_BRANCH), "register", instance, job),
            )
            done.append((sink, {k: v for k, v in previous.items() if v is not None}))
    except FencedError as exc:
        _undo_registration(store, done, instance)
        raise OwnershipError(f"{exc}; another registration of the same sink won the race — retry or pick another sink") from None
    except ConsistentCatalogError:
        _undo_registration(store, done, instance)
        raise
    return Lease(job, instance, sink_names, source_names, until)


def owner_refusal(state: TableState, job: str, *, now: int | None = None) -> str | None:
    """Why ``job`` may not write ``state``, owned by another job (None: it may): one line naming the owner, whether
    an instance of it runs, and the ways out."""
    owner = state.owner
    if owner is None or owner == job:
        return None
    live = state.lease_until is not None and state.lease_until > (now_ms() if now is None else now)
    running = (
        f"its {describe_holder(state)} holds a lease until {fmt_barrier(state.lease_until)}"
        if live else "no instance of it is running"
    )
    return (
        f"{state.identifier} is owned by job {owner!r} ({running}), not {job!r}; a table has one writer — run "
        f"this as job {owner!r}, or hand the table over explicitly: consistent-catalog reassign {state.identifier} "
        f"--to-job {job} (cc.reassign, or CALL <catalog>.system.reassign)"
    )


def check_can_own(state: TableState, job: str, instance: str, takeover: bool, *, now: int | None = None) -> None:
    """Refuse a registration of ``job`` (instance ``instance``) on the sink ``state`` while somebody else owns or
    writes it (protocol §6.1-§6.2)."""
    refusal = owner_refusal(state, job, now=now)
    if refusal is not None:
        raise OwnershipError(refusal)
    live = state.lease_until is not None and state.lease_until > (now_ms() if now is None else now)
    if state.job == job and live and state.lease_holder not in (None, instance) and not takeover:
        raise OwnershipError(
            f"{state.identifier} is being written by another live {describe_holder(state)} of job "
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
        table = store.load_table(sink)
        if table.metadata.properties.get(P.LEASE_HOLDER) != lease.instance:
            continue  # taken over meanwhile: not ours to clear
        try:
            store.commit(
                table,
                refs_at({P.FENCE_BRANCH: fence_head(table)}),
                [RemovePropertiesUpdate(removals=[k for k in _LEASE_KEYS if k in table.metadata.properties])],
                what=f"unregistering job {lease.job!r}",
            )
        except FencedError:
            pass


def renew_lease(store: TableStore, lease: Lease, lease_ms: int = DEFAULT_LEASE_MS) -> Lease:
    """Extend ``lease`` to now + ``lease_ms`` on every sink; FencedError when an instance took a sink over."""
    until = now_ms() + lease_ms
    for sink in lease.sinks:
        table = store.load_table(sink)
        found = table.metadata.properties
        if found.get(P.JOB) != lease.job or found.get(P.LEASE_HOLDER) != lease.instance:
            raise FencedError(
                f"{sink}: renewing the lease of job {lease.job!r} was refused: the table is now written by job "
                f"{found.get(P.JOB)!r} instance {found.get(P.LEASE_HOLDER)!r}, not by this instance ({lease.instance}); "
                "stop this instance"
            )
        store.commit(
            table,
            refs_at({P.FENCE_BRANCH: fence_head(table)}),  # a takeover after this read moves the fence
            [SetPropertiesUpdate(updates={P.LEASE_UNTIL: str(until)})],
            what=f"renewing the lease of job {lease.job!r}",
        )
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
    if state.is_root:
        raise InvalidInputError(
            f"{name} is a root (no consistent.sources): roots are ingested, not owned by a job — reassign hands "
            "a derived table to another job"
        )
    owner = state.owner
    live = state.lease_until is not None and state.lease_until > now_ms() and state.lease_holder is not None
    if live and not takeover:
        raise OwnershipError(
            f"{name} is being written by job {owner!r} ({describe_holder(state)}, lease until "
            f"{fmt_barrier(state.lease_until)}); stop that job first, or if its instance is dead, pass --takeover "
            "(takeover=True)"
        )
    if owner == to_job and not live:
        return Reassignment(name, owner, to_job, False)
    graph = LineageGraph.from_states(s for s in store.states(store.list_tables()) if s.identifier != name)
    graph.check_new_edges(to_job, state.sources, (name,))
    try:
        store.commit(
            tbl,
            [],
            [SetPropertiesUpdate(updates={P.JOB: to_job}),
             RemovePropertiesUpdate(removals=[k for k in _LEASE_KEYS if k in state.properties])],
            what=f"reassigning {name} to job {to_job!r}",
            take_fence=TakeFence(state.head(P.FENCE_BRANCH), "reassign", None, to_job),
        )
    except FencedError as exc:
        raise OwnershipError(f"{exc}; the table changed while it was being reassigned — run reassign again") from None
    return Reassignment(name, owner, to_job, True)
