"""Cut-aware snapshot expiry and tiered retention of consistent cuts (shared/SPEC.md section 6, "Retention").

Expiry never removes a snapshot that something still needs:

- the snapshots of the latest repeatable-read cut over each connected lineage component of the
  tables being expired, so that every subset of those tables still resolves to the same cut;
- the epoch inputs (``consistent.sources``) recorded by every snapshot a downstream table keeps (or
  would keep under the same policy, when it is not expired in this run): completeness compares them
  with the source's state, and the next epoch's incremental read starts at the inputs of the sink's head;
- branch heads and everything a staged epoch (``consistent-staged`` ahead of ``main``) sits on;
- snapshots tagged by a live ``consistent-`` tag (reader pins, retained cuts) or by a foreign tag;
- the newest ``keep_last`` snapshots of ``main``, and every snapshot newer than ``older_than``.

Resolution walks ``main``'s ancestry from the head back and stops at the first missing parent, so
the retained history of a table is a *contiguous suffix* of ``main``'s ancestry: expiry removes only
snapshots older than the oldest one needed (plus unreachable ones: rolled back, discarded staged
attempts). Tagged snapshots older than that stay readable by tag or snapshot id on their own. The
suffix is extended backwards until every retained snapshot keeps exactly the effective barrier it
had (a late snapshot's barrier depends on its parent's), so a barrier once complete never changes.

``plan_expiry`` is pure (states in, plan out); ``expire`` loads the catalog, plans, commits one fenced
catalog commit per table (refs and barrier-relevant properties must be as planned, so a concurrent
publish or a new pin makes it re-plan instead of being lost) and optionally deletes the files that no
retained snapshot references. ``retain`` tags the latest cut with hourly/daily/weekly tags whose
Iceberg ref age makes every engine's expiry drop them on time.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update import (
    AssertRefSnapshotId,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
    RemoveStatisticsUpdate,
    SetSnapshotRefUpdate,
    ValidatableTableRequirement,
    _apply_table_update,
    _TableMetadataUpdateContext,
)

from consistent_catalog import properties as P
from consistent_catalog.barrier import branch_barriers
from consistent_catalog.exceptions import ConsistentCatalogError, FencedError, InvalidInputError
from consistent_catalog.fencing import fence
from consistent_catalog.lineage import LineageGraph
from consistent_catalog.resolver import Cut, resolve
from consistent_catalog.state import TableState

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

    from consistent_catalog.catalog import ConsistentCatalog

log = logging.getLogger(__name__)

#: Iceberg's own expiry settings (table properties), honoured as defaults.
MAX_SNAPSHOT_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_PROPERTY = "history.expire.min-snapshots-to-keep"
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000  # Iceberg's default: 5 days
DEFAULT_MIN_SNAPSHOTS = 1

PIN_PREFIX = P.TAG_PREFIX + "pin-"
Tier = Literal["hourly", "daily", "weekly"]
TIERS: tuple[Tier, ...] = ("hourly", "daily", "weekly")
_TIER_MS = {"hourly": 3600_000, "daily": 86_400_000, "weekly": 7 * 86_400_000}

#: Table properties whose change alters effective barriers or lineage: an expiry planned against
#: other values must be re-planned.
_FENCED_PROPERTIES = (P.SOURCES, P.WATERMARK, P.WATERMARK_SNAPSHOT, P.BARRIER_OVERRIDES, P.REVISION)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d|w)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def parse_duration(value: int | float | timedelta | str) -> int:
    """Milliseconds of a duration: an int (ms), a timedelta, or text like ``90s``, ``30m``, ``12h``, ``7d``, ``2w``."""
    if isinstance(value, bool):
        raise InvalidInputError(f"duration {value!r} is a boolean; give e.g. 12h, 7d or milliseconds")
    if isinstance(value, timedelta):
        ms = int(value / timedelta(milliseconds=1))
    elif isinstance(value, (int, float)):
        ms = int(value)
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise InvalidInputError(
                f"duration {value!r} is not understood; write a number with a unit: 500ms, 90s, 30m, 12h, 7d, 2w "
                "(a bare number is milliseconds)"
            )
        ms = int(float(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()])
    if ms < 0:
        raise InvalidInputError(f"duration {value!r} is negative; give a positive age such as 7d")
    return ms


def fmt_time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class RetentionPolicy:
    """How much history to keep. Durations are ms (``RetentionPolicy.of(older_than="7d")`` parses text).

    ``older_than``: snapshots newer than this are never expired (None: the table property
    ``history.expire.max-snapshot-age-ms``, else Iceberg's default of 5 days). ``keep_last``: the newest
    snapshots of ``main`` always kept (None: ``history.expire.min-snapshots-to-keep``, else 1).
    ``hourly``/``daily``/``weekly``: how many hours/days/weeks each tier of retained cuts lives
    (0: no such tier). ``delete_files``: also delete data, manifest and manifest-list files that no
    retained snapshot references.
    """

    older_than: int | None = None
    keep_last: int | None = None
    hourly: int = 0
    daily: int = 0
    weekly: int = 0
    delete_files: bool = False

    def __post_init__(self) -> None:
        if self.older_than is not None and self.older_than < 0:
            raise InvalidInputError(f"older_than must be >= 0 ms, got {self.older_than}")
        if self.keep_last is not None and self.keep_last < 1:
            raise InvalidInputError(f"keep_last must be >= 1 (main's head is always kept), got {self.keep_last}")
        for tier in TIERS:
            if getattr(self, tier) < 0:
                raise InvalidInputError(f"{tier} must be >= 0, got {getattr(self, tier)}")

    @classmethod
    def of(cls, *, older_than: int | str | timedelta | None = None, **options: Any) -> RetentionPolicy:
        return cls(older_than=None if older_than is None else parse_duration(older_than), **options)

    @property
    def tiers(self) -> dict[Tier, int]:
        return {tier: getattr(self, tier) for tier in TIERS if getattr(self, tier) > 0}

    def max_age_ms(self, state: TableState) -> int:
        if self.older_than is not None:
            return self.older_than
        return _int_property(state, MAX_SNAPSHOT_AGE_PROPERTY, DEFAULT_MAX_SNAPSHOT_AGE_MS)

    def min_snapshots(self, state: TableState) -> int:
        if self.keep_last is not None:
            return self.keep_last
        return max(1, _int_property(state, MIN_SNAPSHOTS_PROPERTY, DEFAULT_MIN_SNAPSHOTS))


def _int_property(state: TableState, key: str, default: int) -> int:
    value = state.properties.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidInputError(
            f"{state.identifier}: table property {key} is {value!r}, not an integer; fix it or pass the value explicitly"
        ) from None


# --- refs ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RefInfo:
    """One Iceberg ref (branch or tag) with its max ref age (Iceberg: age = now - the snapshot's timestamp)."""

    name: str
    snapshot_id: int
    is_tag: bool
    max_ref_age_ms: int | None = None

    def expires_at(self, snapshot_timestamp_ms: int) -> int | None:
        """When every Iceberg engine's expiry may drop the ref (None: never)."""
        if self.max_ref_age_ms is None or not self.is_tag:
            return None
        return snapshot_timestamp_ms + self.max_ref_age_ms

    @property
    def managed(self) -> bool:
        """A ``consistent-`` tag (pin or retained cut) that ``expire`` drops once its ref age has passed."""
        return self.is_tag and self.name.startswith(P.TAG_PREFIX)


def ref_infos(metadata: TableMetadata) -> dict[str, RefInfo]:
    return {
        name: RefInfo(name, ref.snapshot_id, ref.snapshot_ref_type == SnapshotRefType.TAG, ref.max_ref_age_ms)
        for name, ref in metadata.refs.items()
    }


def ref_age_for(expires_at_ms: int, snapshot_timestamp_ms: int) -> int:
    """The ``max-ref-age-ms`` that makes a tag on a snapshot taken at ``snapshot_timestamp_ms`` expire at ``expires_at_ms``."""
    return max(1, expires_at_ms - snapshot_timestamp_ms)


# --- commit pieces ---------------------------------------------------------------------------------
class RemoveSnapshotsKeepingParents(RemoveSnapshotsUpdate):
    """``remove-snapshots`` applied the way Java Iceberg applies it: children keep their parent id.

    pyiceberg 0.12 rewrites the parent id of a removed snapshot's children to null, which would make
    the oldest retained snapshot look like the table's first one; with the dangling id kept,
    resolution knows the history was cut short and reports a barrier before it as expired history
    (SPEC 3) instead of "empty". Serialised exactly like ``remove-snapshots`` (REST servers apply it
    their own way, which for Java is this one).
    """


@_apply_table_update.register(RemoveSnapshotsKeepingParents)
def _remove_snapshots_keeping_parents(
    update: RemoveSnapshotsKeepingParents, base_metadata: TableMetadata, context: _TableMetadataUpdateContext
) -> TableMetadata:
    # idempotent: a snapshot that a concurrent expiry removed already is simply gone
    removed = set(update.snapshot_ids) & {s.snapshot_id for s in base_metadata.snapshots}
    metadata = base_metadata
    for name, ref in base_metadata.refs.items():
        if ref.snapshot_id in removed:
            metadata = _apply_table_update(RemoveSnapshotRefUpdate(ref_name=name), metadata, context)
    for statistics in base_metadata.statistics:
        if statistics.snapshot_id in removed:
            metadata = _apply_table_update(RemoveStatisticsUpdate(snapshot_id=statistics.snapshot_id), metadata, context)
    context.add_update(update)
    return metadata.model_copy(
        update={
            "snapshots": [s for s in metadata.snapshots if s.snapshot_id not in removed],
            "snapshot_log": [e for e in metadata.snapshot_log if e.snapshot_id not in removed],
        }
    )


class AssertRefsExactly(ValidatableTableRequirement):
    """The table's refs (branches and tags) must be exactly these: none moved, none added, none removed."""

    type: Literal["consistent-assert-refs"] = Field(default="consistent-assert-refs")
    refs: dict[str, int] = Field(default_factory=dict)

    def validate(self, base_metadata: TableMetadata | None) -> None:
        if base_metadata is None:
            raise CommitFailedException("consistent-catalog: the table was dropped while expiry was being planned")
        found = {name: ref.snapshot_id for name, ref in base_metadata.refs.items()}
        if found != self.refs:
            changed = sorted(set(found.items()) ^ set(self.refs.items()))
            raise CommitFailedException(f"consistent-catalog fence: refs changed since planning ({changed[:4]})")


class AssertSnapshotsExist(ValidatableTableRequirement):
    """Every given snapshot must still be in the table (not expired meanwhile)."""

    type: Literal["consistent-assert-snapshots"] = Field(default="consistent-assert-snapshots")
    snapshot_ids: list[int] = Field(default_factory=list)

    def validate(self, base_metadata: TableMetadata | None) -> None:
        if base_metadata is None:
            raise CommitFailedException("consistent-catalog: the table was dropped")
        existing = {s.snapshot_id for s in base_metadata.snapshots}
        gone = [s for s in self.snapshot_ids if s not in existing]
        if gone:
            raise CommitFailedException(f"consistent-catalog: snapshot(s) {gone} were expired meanwhile")


def tag_update(name: str, snapshot_id: int, max_ref_age_ms: int | None) -> SetSnapshotRefUpdate:
    return SetSnapshotRefUpdate(
        ref_name=name, type=SnapshotRefType.TAG, snapshot_id=snapshot_id, max_ref_age_ms=max_ref_age_ms
    )


# --- the plan (pure) -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableExpiry:
    """What expiry does to one table, and why each kept snapshot stays."""

    table: str
    snapshots: int
    """Snapshots before expiry."""
    expire: tuple[int, ...]
    keep: Mapping[int, tuple[str, ...]]
    """Snapshot id -> why it stays."""
    drop_tags: Mapping[str, int]
    """``consistent-`` tags whose ref age has passed -> the snapshot they pointed at."""
    refs: Mapping[str, int]
    """Every ref as planned: the commit requires exactly these."""
    properties: Mapping[str, str | None]
    """Barrier-relevant table properties as planned: the commit requires exactly these."""
    history_start: int | None
    """Oldest snapshot of main's retained ancestry (None: main has no snapshot)."""
    timestamps: Mapping[int, int] = field(default_factory=dict, repr=False)
    barriers: Mapping[int, int | None] = field(default_factory=dict, repr=False)

    @property
    def changes(self) -> bool:
        return bool(self.expire or self.drop_tags)

    @property
    def held_by(self) -> tuple[str, ...]:
        """Why main's history cannot start later: the reasons the oldest retained snapshot stays."""
        return () if self.history_start is None else self.keep.get(self.history_start, ())

    def to_json(self, *, details: bool = True) -> dict[str, Any]:
        start = self.history_start
        out: dict[str, Any] = {
            "snapshots": self.snapshots,
            "expire": list(self.expire),
            "kept": len(self.keep),
            "drop_tags": dict(self.drop_tags),
            "history_start": None
            if start is None
            else {
                "snapshot_id": start,
                "barrier": self.barriers.get(start),
                "timestamp_ms": self.timestamps.get(start),
                "reasons": list(self.held_by),
            },
        }
        if details:
            out["keep"] = [{"snapshot_id": s, "reasons": list(r)} for s, r in self.keep.items()]
        return out


@dataclass(frozen=True)
class ExpiryPlan:
    now: int
    tables: Mapping[str, TableExpiry]
    cuts: Mapping[str, Cut]
    """Component (its first table, sorted) -> the latest repeatable-read cut that expiry preserves."""
    skipped: Mapping[str, str]
    """Tables left untouched, with the reason (their component's cut cannot be resolved)."""

    @property
    def changes(self) -> bool:
        return any(t.changes for t in self.tables.values())

    def to_json(self, *, details: bool = True) -> dict[str, Any]:
        return {
            "now": self.now,
            "tables": {name: t.to_json(details=details) for name, t in self.tables.items()},
            "cuts": {name: cut.to_json() for name, cut in self.cuts.items()},
            "skipped": dict(self.skipped),
        }


def components(graph: LineageGraph, tables: Iterable[str]) -> list[set[str]]:
    """The weakly connected lineage components containing ``tables`` (siblings of a shared source included)."""
    undirected: dict[str, set[str]] = {}
    for sink, sources in graph.upstream.items():
        for source in sources:
            undirected.setdefault(sink, set()).add(source)
            undirected.setdefault(source, set()).add(sink)
    found: list[set[str]] = []
    seen: set[str] = set()
    for table in tables:
        if table in seen:
            continue
        component = {table}
        stack = [table]
        while stack:
            for nxt in undirected.get(stack.pop(), ()):
                if nxt not in component:
                    component.add(nxt)
                    stack.append(nxt)
        seen |= component
        found.append(component)
    return found


def latest_cut(component: Iterable[str], states: Mapping[str, TableState]) -> tuple[Cut | None, dict[str, str]]:
    """The latest repeatable-read cut over a component's tables that can take part in one.

    Tables that are empty without a watermark (they block every cut that includes them), and tables
    that cannot be resolved (untracked writes, malformed metadata) together with everything downstream
    of them, are left out and returned as ``blocked`` (expiry keeps all their snapshots). When no cut
    exists at all, the whole component is blocked.
    """
    present = sorted(t for t in component if t in states)
    blocked: dict[str, str] = {}
    for name in present:
        state = states[name]
        try:
            if state.watermark() is None:
                blocked[name] = "empty without a watermark: no cut includes it yet"
        except ConsistentCatalogError as exc:
            blocked[name] = f"cannot be resolved: {exc}"
    changed = True
    while changed:  # a table derived from a blocked table cannot be in the cut either
        changed = False
        for name in present:
            if name not in blocked:
                bad = [s for s in states[name].sources if s in blocked]
                if bad:
                    blocked[name] = f"derived from {bad[0]}, which is left out of the cut"
                    changed = True
    members = [states[n] for n in present if n not in blocked]
    if not members:
        return None, blocked
    try:
        cut = resolve(members, "repeatable-read", upstream=[states[n] for n in present])
    except ConsistentCatalogError as exc:
        return None, {**blocked, **{m.identifier: f"the component's latest cut cannot be resolved: {exc}" for m in members}}
    return cut, blocked


def _add(needs: dict[int, list[str]], snapshot_id: int, reason: str, limit: int = 4) -> None:
    reasons = needs.setdefault(snapshot_id, [])
    if len(reasons) < limit:
        if reason not in reasons:
            reasons.append(reason)
    elif len(reasons) == limit:
        reasons.append("...")


def _history_chain(state: TableState, branch: str) -> list[int]:
    """Snapshot ids of ``branch``'s retained ancestry, oldest first."""
    return list(state.branch(branch).snapshot_ids) if state.head(branch) is not None else []


def _reproduces(state: TableState, removed: set[int], branches: Sequence[str]) -> bool:
    """Whether every retained snapshot of ``branches`` keeps its effective barrier once ``removed`` are gone."""
    kept = {sid: record for sid, record in state.snapshots.items() if sid not in removed}
    for branch in branches:
        head = state.head(branch)
        if head is None:
            continue
        before = state.branch(branch)
        old = dict(zip(before.snapshot_ids, before.barriers))
        after = branch_barriers(
            state.identifier,
            branch,
            head,
            kept,
            is_root=state.is_root,
            floor=state.floor,
            overrides=state.barrier_overrides,
        )
        if (after.untracked is None) != (before.untracked is None):
            return False
        if any(old.get(sid) != barrier for sid, barrier in zip(after.snapshot_ids, after.barriers)):
            return False
    return True


def _inherits_inputs(state: TableState, snapshot_id: int) -> bool:
    """A derived table's snapshot that takes its recorded inputs from its parent (compaction, empty commit)."""
    record = state.snapshots[snapshot_id]
    return not state.is_root and P.SOURCES not in record.summary and not record.changes_data


def plan_table(
    state: TableState,
    refs: Mapping[str, RefInfo],
    needs: Mapping[int, Sequence[str]],
    policy: RetentionPolicy,
    now: int,
) -> tuple[TableExpiry, list[int]]:
    """Plan one table; returns the plan and the retained history (main and staged) whose inputs the sources must keep.

    ``needs`` are snapshots other tables or the latest cut require, with reasons.
    """
    keep: dict[int, list[str]] = {sid: list(reasons) for sid, reasons in needs.items() if sid in state.snapshots}
    threshold = now - policy.max_age_ms(state)
    main = _history_chain(state, P.MAIN_BRANCH)
    position = {sid: i for i, sid in enumerate(main)}
    snapshots = state.snapshots

    drop_tags: dict[str, int] = {}
    for ref in refs.values():
        record = snapshots.get(ref.snapshot_id)
        if not ref.is_tag:
            _add(keep, ref.snapshot_id, f"head of branch {ref.name}")
            continue
        expires = ref.expires_at(record.timestamp_ms) if record is not None else None
        if ref.managed and expires is not None and expires < now:
            drop_tags[ref.name] = ref.snapshot_id
        else:
            until = f" (until {fmt_time(expires)})" if expires is not None else ""
            _add(keep, ref.snapshot_id, f"tag {ref.name}{until}")

    start = len(main) - 1 if main else 0
    if main:
        start = min(start, max(0, len(main) - policy.min_snapshots(state)))
        for sid in needs:  # the cut and recorded inputs need history; tags and other heads only their snapshot
            if sid in position:
                start = min(start, position[sid])
        for i, sid in enumerate(main):
            if snapshots[sid].timestamp_ms >= threshold:
                start = min(start, i)
                break
        # recorded inputs inherited from an older snapshot, and barriers that depend on older snapshots,
        # must not change: extend the retained history backwards until both hold
        staged_ahead = [P.STAGED_BRANCH] if state.staged_ahead else []
        while True:
            while start > 0 and _inherits_inputs(state, main[start]):
                _add(keep, main[start - 1], f"snapshot {main[start]} inherits its epoch inputs from it")
                start -= 1
            removed = set(main[:start])
            if start == 0 or _reproduces(state, removed, [P.MAIN_BRANCH, *staged_ahead]):
                break
            _add(keep, main[start - 1], f"barrier continuity: snapshot {main[start]}'s barrier depends on it")
            start -= 1
        for i, sid in enumerate(main[start:], start):
            if sid in keep:
                continue
            if i >= len(main) - policy.min_snapshots(state):
                _add(keep, sid, f"one of the newest {policy.min_snapshots(state)} snapshot(s) of main")
            elif snapshots[sid].timestamp_ms >= threshold:
                _add(keep, sid, f"newer than the expiry threshold {fmt_time(threshold)}")
            else:
                _add(keep, sid, "main's history between the oldest needed snapshot and the head")
    history = list(main[start:]) if main else []

    # other branches: a staged epoch (and any foreign branch) keeps what it adds on top of main
    on_main = set(history)
    for name, ref in refs.items():
        if ref.is_tag or name == P.MAIN_BRANCH:
            continue
        current: int | None = ref.snapshot_id
        while current is not None and current in snapshots and current not in on_main and current not in position:
            _add(keep, current, "staged epoch ahead of main" if name == P.STAGED_BRANCH and state.staged_ahead
                 else f"on branch {name}")
            if name == P.STAGED_BRANCH and state.staged_ahead:  # read-committed cuts read it
                history.append(current)
            current = snapshots[current].parent_id

    for sid, record in snapshots.items():
        if sid not in keep and record.timestamp_ms >= threshold:
            _add(keep, sid, f"newer than the expiry threshold {fmt_time(threshold)}")

    expire = tuple(sid for sid in snapshots if sid not in keep)
    main_barriers = state.branch(P.MAIN_BRANCH) if main else None
    barriers: dict[int, int | None] = {}
    if main_barriers is not None:
        barriers = dict(zip(main_barriers.snapshot_ids, main_barriers.barriers))
    plan = TableExpiry(
        table=state.identifier,
        snapshots=len(snapshots),
        expire=expire,
        keep={sid: tuple(reasons) for sid, reasons in sorted(keep.items(), key=lambda kv: snapshots[kv[0]].timestamp_ms)},
        drop_tags=drop_tags,
        refs={name: ref.snapshot_id for name, ref in refs.items()},
        properties={k: state.properties.get(k) for k in _FENCED_PROPERTIES},
        history_start=main[start] if main else None,
        timestamps={sid: snapshots[sid].timestamp_ms for sid in keep},
        barriers={sid: barriers.get(sid) for sid in keep},
    )
    return plan, history


def plan_expiry(
    states: Mapping[str, TableState],
    refs: Mapping[str, Mapping[str, RefInfo]],
    targets: Iterable[str],
    policy: RetentionPolicy,
    now: int,
) -> ExpiryPlan:
    """Which snapshots of ``targets`` to expire, and why every other one stays. Pure.

    ``states`` must hold every table of the targets' lineage components (``refs`` their refs with
    ages). Tables are planned downstream first, so that each source learns which of its snapshots
    the history of the tables derived from it recorded as epoch inputs. A downstream table that is
    not expired in this run is planned all the same (but not committed): its sources keep the inputs
    of the history it *would* retain under the same policy, so historical cuts within that window
    stay resolvable without one unexpired table pinning its sources' whole history. Tables whose
    cut cannot be resolved keep their whole history, and so do their inputs.
    """
    targets = list(dict.fromkeys(t for t in targets if t in states))
    graph = LineageGraph.from_states(states.values())
    needs: dict[str, dict[int, list[str]]] = {name: {} for name in states}
    cuts: dict[str, Cut] = {}
    blocked: dict[str, str] = {}
    scope: set[str] = set()
    for component in components(graph, targets):
        scope |= component
        cut, left_out = latest_cut(component, states)
        blocked.update(left_out)
        if cut is None:
            continue
        cuts[min(cut.tables)] = cut
        for name, table_cut in cut.tables.items():
            if table_cut.snapshot_id is not None:
                _add(needs[name], table_cut.snapshot_id, f"latest repeatable-read cut (barrier {cut.barrier})")

    plans: dict[str, TableExpiry] = {}
    for name in reversed(graph.topological(scope)):
        state = states.get(name)
        if state is None:
            continue
        if name in blocked:  # left out of the cut: everything stays, and so does every input it recorded
            history = [*_history_chain(state, P.MAIN_BRANCH)]
            history += [s for s in _history_chain(state, P.STAGED_BRANCH) if s not in set(history)]
        else:
            table_plan, history = plan_table(state, refs.get(name, {}), needs[name], policy, now)
            plans[name] = table_plan
        for snapshot_id in history:
            for source, input_id in state.recorded_inputs(snapshot_id).items():
                if input_id is not None and source in needs:
                    _add(needs[source], input_id, f"inputs of {name} snapshot {snapshot_id}")
    wanted = set(targets)
    ordered = {t: table_plan for t, table_plan in plans.items() if t in wanted}  # downstream first: commit order
    return ExpiryPlan(now, ordered, cuts, {t: reason for t, reason in blocked.items() if t in targets})


# --- tiers (pure) ----------------------------------------------------------------------------------
def tier_period(tier: Tier, now: int) -> tuple[str, int]:
    """(tag name, start of the period in ms) of the ``tier`` period containing ``now`` (UTC)."""
    moment = datetime.fromtimestamp(now / 1000, tz=timezone.utc)
    if tier == "hourly":
        start = moment.replace(minute=0, second=0, microsecond=0)
        name = start.strftime("%Y%m%dT%H")
    elif tier == "daily":
        start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        name = start.strftime("%Y%m%d")
    elif tier == "weekly":
        day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        start = day - timedelta(days=day.isoweekday() - 1)
        year, week, _ = start.isocalendar()
        name = f"{year}W{week:02d}"
    else:
        raise InvalidInputError(f"unknown retention tier {tier!r}; use one of {', '.join(TIERS)}")
    return f"{P.TAG_PREFIX}{tier}-{name}", int(start.timestamp() * 1000)


def tier_expiry(tier: Tier, count: int, now: int) -> tuple[str, int]:
    """(tag name, expiry ms) of the current period's tag when ``count`` periods of the tier are kept."""
    name, start = tier_period(tier, now)
    return name, start + count * _TIER_MS[tier]


# --- I/O ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeletedFiles:
    manifest_lists: int = 0
    manifests: int = 0
    data_files: int = 0
    bytes: int = 0

    def __add__(self, other: DeletedFiles) -> DeletedFiles:
        return DeletedFiles(
            self.manifest_lists + other.manifest_lists,
            self.manifests + other.manifests,
            self.data_files + other.data_files,
            self.bytes + other.bytes,
        )

    def to_json(self) -> dict[str, int]:
        return {"manifest_lists": self.manifest_lists, "manifests": self.manifests, "data_files": self.data_files, "bytes": self.bytes}


@dataclass(frozen=True)
class ExpiryResult:
    plan: ExpiryPlan
    """The plan of the last attempt (after a conflict, expiry plans again)."""
    dry_run: bool
    expired: Mapping[str, int]
    """Table -> snapshots removed (over all attempts)."""
    dropped_tags: Mapping[str, tuple[str, ...]]
    attempts: int
    deleted: Mapping[str, DeletedFiles] = field(default_factory=dict)

    def to_json(self, *, details: bool = False) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "expired": dict(self.expired),
            "dropped_tags": {name: list(tags) for name, tags in self.dropped_tags.items()},
            "attempts": self.attempts,
            "deleted_files": {name: d.to_json() for name, d in self.deleted.items()},
            **self.plan.to_json(details=details),
        }


def _load_all(cc: ConsistentCatalog, names: Iterable[str]) -> tuple[dict[str, Table], dict[str, TableState]]:
    from consistent_catalog.exceptions import TableNotFoundError

    tables: dict[str, Table] = {}
    states: dict[str, TableState] = {}
    for name in names:
        try:
            table = cc.load_table(name)
        except TableNotFoundError:
            continue  # dropped meanwhile
        tables[name] = table
        states[name] = TableState.from_metadata(name, table.metadata)
    return tables, states


def _targets(cc: ConsistentCatalog, tables: Iterable[str] | None) -> tuple[list[str], list[str]]:
    """(targets, every table of the catalog); named targets must exist."""
    from consistent_catalog.catalog import normalize_identifier

    everything = cc.list_tables()
    if tables is None:
        return everything, everything
    targets = list(dict.fromkeys(normalize_identifier(t) for t in tables))
    for name in targets:
        if name not in everything:
            cc.load_table(name)  # raises TableNotFoundError with the usual message
            everything.append(name)
    return targets, everything


def plan(
    cc: ConsistentCatalog, tables: Iterable[str] | None = None, policy: RetentionPolicy | None = None, *, now: int | None = None
) -> tuple[ExpiryPlan, dict[str, Table]]:
    """Load the catalog and plan expiry of ``tables`` (all tables when None)."""
    from consistent_catalog.catalog import now_ms

    targets, everything = _targets(cc, tables)
    loaded, states = _load_all(cc, everything)
    refs = {name: ref_infos(table.metadata) for name, table in loaded.items()}
    return plan_expiry(states, refs, targets, policy or RetentionPolicy(), now_ms() if now is None else now), loaded


def commit_expiry(cc: ConsistentCatalog, table: Table, planned: TableExpiry) -> Table:
    """One fenced catalog commit that drops the planned tags and removes the planned snapshots.

    Refused (FencedError) when any ref or barrier-relevant property differs from the plan: a publish,
    a new pin or a revision happened meanwhile and the plan must be made again.
    """
    updates: list[Any] = [RemoveSnapshotRefUpdate(ref_name=name) for name in planned.drop_tags]
    if planned.expire:
        updates.append(RemoveSnapshotsKeepingParents(snapshot_ids=list(planned.expire)))
    return cc.commit(
        table,
        [AssertRefsExactly(refs=dict(planned.refs)), fence(planned.properties)],
        updates,
        what=f"expiring {len(planned.expire)} snapshot(s)",
    )


def expire(
    cc: ConsistentCatalog,
    tables: Iterable[str] | None = None,
    policy: RetentionPolicy | None = None,
    *,
    now: int | None = None,
    dry_run: bool = False,
    retries: int = 5,
) -> ExpiryResult:
    """Expire snapshots of ``tables`` (all tables when None) that no cut, pin or retained cut needs.

    Tables are committed downstream first, one fenced commit each; a commit that is refused (a
    publish, pin or revision happened since planning) makes expiry plan again from fresh metadata,
    up to ``retries`` times. ``policy.delete_files`` also deletes the files that only expired
    snapshots referenced. ``dry_run`` returns the plan without committing anything.
    """
    policy = policy or RetentionPolicy()
    expired: dict[str, int] = {}
    dropped: dict[str, tuple[str, ...]] = {}
    deleted: dict[str, DeletedFiles] = {}
    for attempt in range(1, retries + 1):
        planned, loaded = plan(cc, tables, policy, now=now)
        if dry_run:
            return ExpiryResult(planned, True, {}, {}, attempt)
        try:
            for name, table_plan in planned.tables.items():
                if not table_plan.changes:
                    continue
                before = loaded[name]
                after = commit_expiry(cc, before, table_plan)
                expired[name] = expired.get(name, 0) + len(table_plan.expire)
                if table_plan.drop_tags:
                    dropped[name] = (*dropped.get(name, ()), *table_plan.drop_tags)
                log.info("%s: expired %d snapshot(s), dropped tags %s", name, len(table_plan.expire), list(table_plan.drop_tags))
                if policy.delete_files and table_plan.expire:
                    deleted[name] = deleted.get(name, DeletedFiles()) + delete_unreferenced_files(before, after, table_plan.expire)
        except FencedError as exc:
            log.info("expiry plans again (attempt %d of %d): %s", attempt, retries, exc)
            continue
        return ExpiryResult(planned, False, expired, dropped, attempt, deleted)
    raise FencedError(
        f"expiry kept conflicting with concurrent commits ({retries} attempts); run it again, or when the pipeline is quieter"
    )


def _reachable(table: Table, snapshot_ids: Iterable[int], metadata: TableMetadata) -> tuple[set[str], dict[str, Any]]:
    """(manifest-list paths, manifest path -> ManifestFile) of the given snapshots."""
    lists: set[str] = set()
    manifests: dict[str, Any] = {}
    wanted = set(snapshot_ids)
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id not in wanted:
            continue
        lists.add(snapshot.manifest_list)
        try:
            for manifest in snapshot.manifests(table.io):
                manifests.setdefault(manifest.manifest_path, manifest)
        except FileNotFoundError:
            continue
    return lists, manifests


def delete_unreferenced_files(before: Table, after: Table, expired: Iterable[int]) -> DeletedFiles:
    """Delete the files that only the ``expired`` snapshots referenced (all under the table's location).

    A file survives when any retained snapshot references it: its manifest list, its manifests, or a
    live (added or existing) entry of one of those manifests. Files outside the table's location
    (added from elsewhere) are never deleted. Call it with the metadata before and after the expiry commit.
    """
    io = after.io
    location = after.metadata.location.rstrip("/") + "/"
    keep_lists, keep_manifests = _reachable(after, [s.snapshot_id for s in after.metadata.snapshots], after.metadata)
    gone_lists, gone_manifests = _reachable(before, expired, before.metadata)
    live: set[str] = set()
    for manifest in keep_manifests.values():
        live.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=True))
    data: dict[str, int] = {}
    for path, manifest in gone_manifests.items():
        if path in keep_manifests:
            continue
        try:
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                data[entry.data_file.file_path] = entry.data_file.file_size_in_bytes
        except FileNotFoundError:
            continue
    counts = {"lists": 0, "manifests": 0, "data": 0, "bytes": 0}

    def remove(path: str, kind: str, size: int | None) -> None:
        if not path.startswith(location):
            return
        try:
            if size is None:
                size = len(io.new_input(path))
            io.delete(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("%s: could not delete %s: %s", ".".join(after.name()), path, exc)
            return
        counts[kind] += 1
        counts["bytes"] += size

    for path in sorted(set(data) - live):
        remove(path, "data", data[path])
    for path in sorted(set(gone_manifests) - set(keep_manifests)):
        remove(path, "manifests", gone_manifests[path].manifest_length)
    for path in sorted(gone_lists - keep_lists):
        remove(path, "lists", None)
    return DeletedFiles(counts["lists"], counts["manifests"], counts["data"], counts["bytes"])


# --- tiered retention (I/O) ------------------------------------------------------------------------
@dataclass(frozen=True)
class RetainedCut:
    """A tier tag on every table of one component's cut."""

    tag: str
    tier: Tier
    barrier: int | None
    expires_at: int
    tables: Mapping[str, int]
    """Table -> tagged snapshot id."""
    action: Literal["created", "exists", "repaired"]

    def to_json(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "tier": self.tier,
            "barrier": self.barrier,
            "expires_at": self.expires_at,
            "tables": dict(self.tables),
            "action": self.action,
        }


def retain(
    cc: ConsistentCatalog,
    tables: Iterable[str] | None = None,
    policy: RetentionPolicy | None = None,
    *,
    now: int | None = None,
) -> list[RetainedCut]:
    """Tag the latest repeatable-read cut of each lineage component with the current hourly/daily/weekly tags.

    A period's tag is created once, by the first call in that period, on every table of the cut that
    is not empty at it (``consistent-daily-20261122`` etc.), with the Iceberg ref age that makes it
    expire ``policy.daily`` days after the period started. If some tables of the cut lack the tag
    (a failed earlier call, or a table that joined the pipeline), the tag is set on every table to
    the current cut so that it stays one consistent cut.
    """
    from consistent_catalog.catalog import now_ms

    policy = policy or RetentionPolicy()
    if not policy.tiers:
        return []
    now = now_ms() if now is None else now
    targets, everything = _targets(cc, tables)
    loaded, states = _load_all(cc, everything)
    graph = LineageGraph.from_states(states.values())
    results: list[RetainedCut] = []
    for component in components(graph, [t for t in targets if t in states]):
        cut, left_out = latest_cut(component, states)
        if cut is None:
            log.info("no retained cut for %s: %s", ", ".join(sorted(component)), "; ".join(left_out.values()))
            continue
        points = {name: t.snapshot_id for name, t in cut.tables.items() if t.snapshot_id is not None}
        for tier, count in policy.tiers.items():
            tag, expires_at = tier_expiry(tier, count, now)
            if expires_at <= now:
                continue
            existing = {name: loaded[name].metadata.refs.get(tag) for name in points}
            if all(ref is not None for ref in existing.values()):
                tagged = {name: ref.snapshot_id for name, ref in existing.items() if ref is not None}
                results.append(RetainedCut(tag, tier, None, expires_at, tagged, "exists"))
                continue
            action: Literal["created", "repaired"] = "repaired" if any(existing.values()) else "created"
            for name, snapshot_id in points.items():
                table = loaded[name]
                ref = existing[name]
                if ref is not None and ref.snapshot_id == snapshot_id:
                    continue
                timestamp = states[name].snapshots[snapshot_id].timestamp_ms
                try:
                    loaded[name] = cc.commit(
                        table,
                        [AssertRefSnapshotId(ref=tag, snapshot_id=None if ref is None else ref.snapshot_id),
                         AssertSnapshotsExist(snapshot_ids=[snapshot_id])],
                        [tag_update(tag, snapshot_id, ref_age_for(expires_at, timestamp))],
                        what=f"tagging the {tier} cut {tag}",
                    )
                except FencedError as exc:
                    raise FencedError(f"{exc}; another process tagged or expired it meanwhile — run retain again") from None
            results.append(RetainedCut(tag, tier, cut.barrier, expires_at, points, action))
    return results


def retained_cuts(cc: ConsistentCatalog, tables: Iterable[str] | None = None, *, now: int | None = None) -> list[dict[str, Any]]:
    """Every ``consistent-`` tag other than pins: tag, tables -> snapshot id, expiry, and whether it expired."""
    from consistent_catalog.catalog import now_ms

    now = now_ms() if now is None else now
    targets, _ = _targets(cc, tables)
    found: dict[str, dict[str, Any]] = {}
    for name in targets:
        table = cc.load_table(name)
        for ref in ref_infos(table.metadata).values():
            if not ref.managed or ref.name.startswith(PIN_PREFIX):
                continue
            snapshot = table.metadata.snapshot_by_id(ref.snapshot_id)
            expires = ref.expires_at(snapshot.timestamp_ms) if snapshot is not None else None
            entry = found.setdefault(ref.name, {"tag": ref.name, "tables": {}, "expires_at": expires})
            entry["tables"][name] = ref.snapshot_id
            if expires is not None:
                entry["expires_at"] = min(entry["expires_at"] or expires, expires)
    for entry in found.values():
        entry["expired"] = entry["expires_at"] is not None and entry["expires_at"] < now
    return sorted(found.values(), key=lambda e: e["tag"])


# --- maintenance hook for epoch jobs ---------------------------------------------------------------
def run_maintenance(cc: ConsistentCatalog, tables: Sequence[str], policy: RetentionPolicy | None) -> ExpiryResult | None:
    """Tag the tiers (when the policy has any) and expire ``tables``; failures are logged, never raised.

    Called by ``EpochJob`` every ``expire_every`` published epochs: maintenance must not stop a job.
    """
    policy = policy or RetentionPolicy()
    try:
        if policy.tiers:
            retain(cc, tables, policy)
        return expire(cc, tables, policy)
    except (ConsistentCatalogError, OSError) as exc:
        log.warning("retention of %s skipped this time: %s", ", ".join(tables), exc)
        return None


__all__ = [
    "DEFAULT_MAX_SNAPSHOT_AGE_MS",
    "PIN_PREFIX",
    "TIERS",
    "AssertRefsExactly",
    "AssertSnapshotsExist",
    "DeletedFiles",
    "ExpiryPlan",
    "ExpiryResult",
    "RefInfo",
    "RemoveSnapshotsKeepingParents",
    "RetainedCut",
    "RetentionPolicy",
    "TableExpiry",
    "commit_expiry",
    "components",
    "delete_unreferenced_files",
    "expire",
    "latest_cut",
    "parse_duration",
    "plan",
    "plan_expiry",
    "plan_table",
    "ref_age_for",
    "ref_infos",
    "retain",
    "retained_cuts",
    "run_maintenance",
    "tier_expiry",
    "tier_period",
]
