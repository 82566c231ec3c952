"""Tiered retention: the latest cut tagged hourly/daily/weekly, with Iceberg ref ages (protocol §9)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal

from pyiceberg.table.update import AssertRefSnapshotId

from consistent_catalog import properties as P
from consistent_catalog.commit import TakeFence, fence_head, tag_update
from consistent_catalog.exceptions import FencedError, InvalidInputError
from consistent_catalog.lineage import LineageGraph
from consistent_catalog.retention.plan import latest_cut
from consistent_catalog.retention.policy import TIER_MS, TIERS, RetentionPolicy, Tier
from consistent_catalog.retention.refs import PIN_PREFIX, TagInfo, collect_tags, ref_age_for
from consistent_catalog.retention.scope import load_all, targets_and_catalog
from consistent_catalog.util.time import now_ms

if TYPE_CHECKING:
    from consistent_catalog.commit import TableStore

log = logging.getLogger(__name__)


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
    return name, start + count * TIER_MS[tier]




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
    store: TableStore,
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
    policy = policy or RetentionPolicy()
    if not policy.tiers:
        return []
    now = now_ms() if now is None else now
    targets, everything = targets_and_catalog(store, tables)
    loaded, states = load_all(store, everything)
    graph = LineageGraph.from_states(states.values())
    results: list[RetainedCut] = []
    for component in graph.components([t for t in targets if t in states]):
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
                    if table.metadata.snapshot_by_id(snapshot_id) is None:
                        raise FencedError(f"{name}: snapshot {snapshot_id} of the cut was expired")
                    loaded[name] = store.commit(
                        table,
                        [AssertRefSnapshotId(ref=tag, snapshot_id=None if ref is None else ref.snapshot_id)],
                        [tag_update(tag, snapshot_id, ref_age_for(expires_at, timestamp))],
                        what=f"tagging the {tier} cut {tag}",
                        take_fence=TakeFence.keeping_holder(table.metadata, "tag", fence_head(table)),  # refuses an expiry planned before
                    )
                except FencedError as exc:
                    raise FencedError(f"{exc}; another process tagged or expired it meanwhile — run retain again") from None
            results.append(RetainedCut(tag, tier, cut.barrier, expires_at, points, action))
    return results


def retained_cuts(store: TableStore, tables: Iterable[str] | None = None, *, now: int | None = None) -> list[TagInfo]:
    """Every ``consistent-`` tag other than pins, with the tables it is on, its expiry and whether it expired."""
    targets, _ = targets_and_catalog(store, tables)
    metadata = {name: store.load_table(name).metadata for name in targets}
    return collect_tags(metadata, lambda ref: ref.managed and not ref.name.startswith(PIN_PREFIX),
                        now_ms() if now is None else now)
