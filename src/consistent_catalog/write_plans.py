"""The protocol's other commits as pure plans (docs/protocol.md §5.6, §6.1-§6.3): state in, the commit out, as data.

``epoch_plan`` and ``epoch_commits`` plan an epoch; this module plans every other commit the protocol makes:
an ingest into a root (keyed, keyless, at an event time or a late one), a watermark advance (explicit, or of an
idle root), a job's registration, the lease's renewal and its release, and a table's reassignment. Each takes a
table's state, the clock (``now``), the writer (job, instance) and the inputs, and returns a ``WriteCommit``: the
refs the commit asserts, the property updates (or, for an ingest, the summary keys of the data snapshot), whether
it takes the fence — or raises the protocol's refusal. No I/O: the writers (``ingest``, ``ownership``, the PySpark
ingest) send what the plan says through ``TableStore``; the JVM plugin's ``core/WritePlanner.java`` is the same
plan in Java, and the conformance corpus (``tests/conformance``, ``"write-commit"`` queries) compares both.

Requirements come in one order everywhere: the fence as read first, then the refs the commit builds on (as in
``epoch_commits.fenced``); a commit that takes the fence carries ``TakeFence`` instead, which asserts the fence
and every branch head when it is sent (``commit.requirement_list``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pyiceberg.table.update import AssertRefSnapshotId, RemovePropertiesUpdate, SetPropertiesUpdate

from consistent_catalog import properties as P
from consistent_catalog.commit import TakeFence, refs_at
from consistent_catalog.exceptions import FencedError, InvalidBarrierError, InvalidInputError, OwnershipError
from consistent_catalog.state import TableState, encode_table_sources
from consistent_catalog.util.time import fmt_barrier, fmt_duration

__all__ = [
    "LATE",
    "LEASE_KEYS",
    "IngestPlan",
    "WriteCommit",
    "advance_watermark",
    "check_can_own",
    "check_not_future",
    "describe_holder",
    "holder_fields",
    "idle_advance",
    "ingest",
    "owner_refusal",
    "reassign",
    "register",
    "renew",
    "unregister",
]

LATE: Literal["late"] = "late"
"""The barrier of rows without an event time: W + 1 (the clock while the table has no watermark)."""
LEASE_KEYS = (P.LEASE_HOLDER, P.LEASE_UNTIL, P.LEASE_HOLDER_INFO)


@dataclass(frozen=True)
class WriteCommit:
    """One catalog commit as planned: what it asserts and what it changes (the table uuid is added when sent)."""

    what: str
    """What the commit does, for messages (``"ingesting key 'k1'"``)."""
    requirements: tuple[AssertRefSnapshotId, ...]
    updates: tuple[Any, ...] = ()
    """Metadata updates (properties); an ingest's data snapshot and its ref are the writer's."""
    take_fence: TakeFence | None = None
    """The fence moves in the same commit (registration, a watermark advance, a reassignment)."""
    summary: Mapping[str, str] = field(default_factory=dict)
    """The summary keys of the data snapshot the commit adds (an ingest's barrier and key)."""
    genesis: bool = False
    """The sink has no snapshot: the sender adds its genesis (an empty snapshot on ``main``; creating it is I/O)."""


@dataclass(frozen=True)
class IngestPlan:
    """An ingest as planned (§5.6): skipped because its key landed, or the commit that lands it at ``barrier``."""

    table: str
    key: str | None
    barrier: int | None
    """The barrier written, ``max(wanted, W + 1)``; for a skipped ingest, that of the snapshot holding the key."""
    skipped_by: int | None = None
    """The snapshot on ``main`` that already holds ``key``: nothing is written."""
    commit: WriteCommit | None = None


def fenced(fence: int | None, refs: Mapping[str, int | None]) -> tuple[AssertRefSnapshotId, ...]:
    """The fence as read, then ``refs`` in order (``epoch_commits.fenced``, without its import)."""
    return tuple(refs_at({P.FENCE_BRANCH: fence, **{k: v for k, v in refs.items() if k != P.FENCE_BRANCH}}))


# --- roots (§5.6) ----------------------------------------------------------------------------------------
def check_not_future(state: TableState, barrier: int, *, allow_future: bool, what: str, now: int,
                     way_out: str | None = None) -> None:
    """Refuse a barrier beyond ``now`` plus the table's clock-skew allowance, unless the caller insists."""
    limit = now + state.clock_skew_ms
    if barrier > limit and not allow_future:
        if way_out is None:
            way_out = "pass the current time, or insist with " + (
                "allow_future=True (CLI: advance-watermark --allow-future)" if what == "watermark" else "allow_future=True")
        raise InvalidBarrierError(
            f"{state.identifier}: {what} {fmt_barrier(barrier)} lies {fmt_duration(barrier - now)} in the future "
            f"(allowed: {fmt_duration(state.clock_skew_ms)} of clock skew, table property {P.CLOCK_SKEW}); a barrier "
            f"ahead of the clock holds every later ingest there — {way_out}"
        )


def ingest(
    state: TableState,
    *,
    now: int,
    barrier: int | Literal["late"] | None = None,
    key: str | None = None,
    allow_future: bool = False,
    way_out: str | None = None,
) -> IngestPlan:
    """Plan one ingest into the root ``state`` (§5.6), keyed or not, at ``barrier`` (None: ``now``; ``LATE``: rows
    without an event time, W + 1 or ``now`` on a table without a watermark).

    A key already on ``main`` skips the ingest. The barrier written is ``max(barrier, W + 1)`` (late rows never
    change a completed barrier, §3.2), refused when beyond ``now`` plus the clock-skew allowance (``way_out`` names
    what to do). The commit asserts the fence and ``main`` as read: another ingest, an idle advance, a revision or
    a takeover meanwhile (all of which may change W or land the key) refuses it, and the writer plans again.
    """
    if key is not None and not str(key).strip():
        raise InvalidInputError("an ingest key must be a non-empty string (e.g. the source's batch or file id)")
    if not state.is_root:
        raise InvalidInputError(
            f"{state.identifier} is derived from {', '.join(state.sources)}; only root tables take ingested data"
        )
    if key is not None:
        done = state.ingested_with_key(key)
        if done is not None:
            return IngestPlan(state.identifier, key, state.branch().barrier_of(done), skipped_by=done)
    current = state.watermark()
    if barrier is None:
        wanted = now
    elif barrier == LATE:
        wanted = now if current is None else current + 1
    else:
        wanted = int(barrier)
    check_not_future(state, wanted, allow_future=allow_future, what="barrier", now=now, way_out=way_out)
    effective = wanted if current is None or wanted > current else current + 1
    summary = {P.BARRIER: str(effective)}
    if key is not None:
        summary[P.INGEST_KEY] = key
    commit = WriteCommit(
        "ingesting" if key is None else f"ingesting key {key!r}",
        fenced(state.head(P.FENCE_BRANCH), {P.MAIN_BRANCH: state.head()}),
        summary=summary,
    )
    return IngestPlan(state.identifier, key, effective, commit=commit)


def _advance(state: TableState, value: int, what: str) -> WriteCommit:
    """The commit of a watermark advance: main as read asserted, the fence taken keeping its holder (the
    advance changes what the holder's next ingest or epoch may assume)."""
    return WriteCommit(
        what,
        tuple(refs_at({P.MAIN_BRANCH: state.head()})),
        (SetPropertiesUpdate(updates=state.watermark_properties(value)),),
        take_fence=TakeFence(state.head(P.FENCE_BRANCH), "advance", state.lease_holder, state.properties.get(P.JOB)),
    )


def advance_watermark(state: TableState, barrier: int, *, now: int, allow_future: bool = False) -> WriteCommit | None:
    """Plan declaring the idle root ``state`` complete up to ``barrier`` (§5.6); None: it already is (the same
    barrier again). Refused on a derived table, beyond ``now`` plus the clock-skew allowance (unless
    ``allow_future``) and below the current watermark (a watermark never moves back)."""
    if not state.is_root:
        raise InvalidInputError(
            f"{state.identifier} is derived (written by job {state.job or state.last_writer or '-'}); its watermark "
            "advances when its job runs an epoch — advance the watermark of its root tables instead"
        )
    check_not_future(state, barrier, allow_future=allow_future, what="watermark", now=now)
    current = state.watermark()
    if current is not None and barrier <= current:
        if barrier == current:
            return None
        raise InvalidBarrierError(
            f"{state.identifier} is already complete up to {fmt_barrier(current)}; a watermark never moves back "
            f"— nothing was changed (a barrier after {current} advances it)"
        )
    return _advance(state, barrier, "advancing the watermark")


def idle_advance(state: TableState, *, now: int, target: int | None = None) -> WriteCommit | None:
    """Plan advancing a root to ``target`` (default: ``now`` minus its declared idle allowance) when it is behind;
    None when it is not a root, not declared idle (without ``target``) or not behind."""
    if not state.is_root:
        return None
    if target is None:
        if state.idle_after_ms is None:
            return None
        target = now - state.idle_after_ms
    current = state.watermark()
    if current is not None and target <= current:
        return None
    return _advance(state, target, f"advancing the watermark of idle root {state.identifier}")


# --- ownership (§6.1-§6.3, §6.9) ------------------------------------------------------------------------
def holder_fields(state: TableState) -> dict[str, Any]:
    """``consistent.lease-holder-info`` of ``state`` as a dict (host, pid, app, since); empty where it is absent or
    not a JSON object (earlier versions wrote none)."""
    raw = state.properties.get(P.LEASE_HOLDER_INFO)
    try:
        info = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def describe_holder(state: TableState) -> str:
    """The lease holder as an operator needs it before a takeover: ``instance 6a3b6f0460c5 (host h, pid 1234,
    Spark application local-17…, since <time>)``; just the id where no info was written (earlier versions)."""
    text = f"instance {state.lease_holder}"
    info = holder_fields(state)
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


def owner_refusal(state: TableState, job: str, *, now: int) -> str | None:
    """Why ``job`` may not write ``state``, owned by another job (None: it may): one line naming the owner, whether
    an instance of it runs, and the ways out."""
    owner = state.owner
    if owner is None or owner == job:
        return None
    live = state.lease_until is not None and state.lease_until > now
    running = (
        f"its {describe_holder(state)} holds a lease until {fmt_barrier(state.lease_until)}"
        if live else "no instance of it is running"
    )
    return (
        f"{state.identifier} is owned by job {owner!r} ({running}), not {job!r}; a table has one writer — run "
        f"this as job {owner!r}, or hand the table over explicitly: consistent-catalog reassign {state.identifier} "
        f"--to-job {job} (cc.reassign, or CALL <catalog>.system.reassign)"
    )


def check_can_own(
    state: TableState, job: str, instance: str, takeover: bool, *, now: int, holder_gone: bool = False
) -> None:
    """Refuse a registration of ``job`` (instance ``instance``) on the sink ``state`` while somebody else owns or
    writes it (protocol §6.1-§6.2). ``holder_gone``: the caller found the lease holder's process gone from this host
    (``ownership.holder_process_gone``); the refusal then says so and names the takeover instead of calling it live."""
    refusal = owner_refusal(state, job, now=now)
    if refusal is not None:
        raise OwnershipError(refusal)
    live = state.lease_until is not None and state.lease_until > now
    if state.job == job and live and state.lease_holder not in (None, instance) and not takeover:
        if holder_gone:
            raise OwnershipError(
                f"{state.identifier} is leased to {describe_holder(state)} of job {job!r} until "
                f"{fmt_barrier(state.lease_until)}, but its process pid {holder_fields(state).get('pid')} on this host "
                "is gone (killed or crashed); take over with takeover=True (register_job / cc.job; the demo: "
                "consistent-catalog demo --takeover), or wait for the lease to lapse"
            )
        raise OwnershipError(
            f"{state.identifier} is being written by another live {describe_holder(state)} of job "
            f"{job!r} until {fmt_barrier(state.lease_until)}; stop it, wait for the lease to lapse, or, if it is "
            "dead, take over with takeover=True (register_job / cc.job; the demo: consistent-catalog demo --takeover)"
        )
    refusal = root_refusal(state, job)
    if refusal is not None:
        raise InvalidInputError(refusal)


def root_refusal(state: TableState, job: str) -> str | None:
    """Why ``job`` may not register on ``state`` because the table is a root with a history (protocol §6.1): rows
    written outside any job, or ingested (tagged with barriers), or a watermark declared. A job's sink starts empty;
    making it derived would put data no epoch computed under barriers its sources never reached, and every cut with
    it would read its sources as empty. None: the table is derived, or an empty root with no watermark."""
    if not state.is_root:
        return None
    way_out = (
        f"a job's sink must start empty — write job {job!r} into a new table, or keep {state.identifier} a root "
        "(ingest into it with no job)"
    )
    if state.head() is not None:
        history = TableState(state.identifier, state.snapshots, state.branches, {P.SOURCES: '["?"]'})
        untracked = history.branch().untracked
        if untracked is not None:
            return f"{state.identifier} already holds data written outside any job (snapshot {untracked}); {way_out}"
        branch = state.branch()
        for snapshot_id, barrier in zip(branch.snapshot_ids, branch.barriers):
            if not branch.same_data(None, snapshot_id):
                return (
                    f"{state.identifier} is a root: it holds rows ingested outside any job (snapshot {snapshot_id}, "
                    f"barrier {fmt_barrier(barrier)}); {way_out}"
                )
    if state.watermark_property is not None:
        return (
            f"{state.identifier} is a root with a declared watermark ({fmt_barrier(state.watermark_property)}): as a "
            f"job's sink it would claim its sources' data up to there before any epoch ran; {way_out}"
        )
    return None


def register(
    state: TableState,
    *,
    job: str,
    sources: Iterable[str],
    instance: str,
    takeover: bool,
    now: int,
    lease_ms: int,
    holder_info: str,
    holder_gone: bool = False,
) -> WriteCommit:
    """Plan registering ``job`` (its instance ``instance``) as the writer of the sink ``state`` (§6.1-§6.2): the
    ownership properties and a lease until ``now + lease_ms``, the fence taken (every commit an earlier holder
    planned is refused); an empty sink gets its genesis in the same commit, with ``main`` asserted absent (of two
    racing registrations one wins). Refused (``check_can_own``) while another job owns the sink or another live
    instance holds it (``holder_gone``: its process gone from this host, as the refusal then says). The lineage check
    (``LineageGraph.check_new_edges``) needs the catalog: the caller's."""
    check_can_own(state, job, instance, takeover, now=now, holder_gone=holder_gone)
    genesis = state.head() is None
    owned = {P.JOB: job, P.SOURCES: encode_table_sources(list(sources)), P.LEASE_HOLDER: instance,
             P.LEASE_UNTIL: str(now + lease_ms), P.LEASE_HOLDER_INFO: holder_info}
    return WriteCommit(
        f"registering job {job!r}",
        tuple(refs_at({P.MAIN_BRANCH: None})) if genesis else (),
        (SetPropertiesUpdate(updates=owned),),
        take_fence=TakeFence(state.head(P.FENCE_BRANCH), "register", instance, job),
        genesis=genesis,
    )


def unregister(state: TableState, *, job: str, instance: str) -> WriteCommit | None:
    """Plan releasing the lease of ``instance`` (§6.1): the lease properties removed, the fence as read asserted (a
    takeover meanwhile refuses it); None when another instance holds the lease now (not ours to clear).
    ``consistent.job`` stays: the job keeps owning the table."""
    if state.lease_holder != instance:
        return None
    return WriteCommit(
        f"unregistering job {job!r}",
        fenced(state.head(P.FENCE_BRANCH), {}),
        (RemovePropertiesUpdate(removals=[k for k in LEASE_KEYS if k in state.properties]),),
    )


def renew(state: TableState, *, job: str, instance: str, until: int) -> WriteCommit:
    """Plan extending the lease of ``instance`` to ``until`` (§6.2), the fence as read asserted; FencedError when the
    table is no longer this instance's (taken over, reassigned)."""
    holder = state.lease_holder
    if state.properties.get(P.JOB) != job or holder != instance:
        raise FencedError(
            f"{state.identifier}: renewing the lease of job {job!r} was refused: the table is now written by job "
            f"{state.properties.get(P.JOB)!r} instance {holder!r}, not by this instance ({instance}); stop this instance"
        )
    return WriteCommit(
        f"renewing the lease of job {job!r}",
        fenced(state.head(P.FENCE_BRANCH), {}),
        (SetPropertiesUpdate(updates={P.LEASE_UNTIL: str(until)}),),
    )


def reassign(state: TableState, *, to_job: str, takeover: bool, now: int) -> WriteCommit | None:
    """Plan handing the derived table ``state`` to ``to_job`` (§6.9): ``consistent.job`` set, the lease removed and
    the fence taken, so that every commit the old owner's instances planned is refused. None when ``to_job`` owns
    it already and no instance holds a live lease. Refused for a root and while an instance of the owner holds a
    live lease (unless ``takeover``). The lineage check needs the catalog: the caller's."""
    if not to_job or not to_job.strip():
        raise InvalidInputError("reassign needs the job to hand the table to (--to-job J), not an empty id")
    name = state.identifier
    if state.is_root:
        raise InvalidInputError(
            f"{name} is a root (no consistent.sources): roots are ingested, not owned by a job — reassign hands "
            "a derived table to another job"
        )
    owner = state.owner
    live = state.lease_until is not None and state.lease_until > now and state.lease_holder is not None
    if live and not takeover:
        raise OwnershipError(
            f"{name} is being written by job {owner!r} ({describe_holder(state)}, lease until "
            f"{fmt_barrier(state.lease_until)}); stop that job first, or if its instance is dead, pass --takeover "
            "(takeover=True)"
        )
    if owner == to_job and not live:
        return None
    updates: list[Any] = [SetPropertiesUpdate(updates={P.JOB: to_job})]
    lease = [k for k in LEASE_KEYS if k in state.properties]
    if lease:
        updates.append(RemovePropertiesUpdate(removals=lease))
    return WriteCommit(
        f"reassigning {name} to job {to_job!r}",
        (),
        tuple(updates),
        take_fence=TakeFence(state.head(P.FENCE_BRANCH), "reassign", None, to_job),
    )
