"""Iceberg refs as retention sees them: tags with ref ages (pins, retained cuts), branches. Pure: reads
pyiceberg's metadata model, imports nothing of pyiceberg (``commit.tag_update`` writes a tag)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consistent_catalog import properties as P

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata

PIN_PREFIX = P.TAG_PREFIX + "pin-"
"""Reader pins are tags ``consistent-pin-<id>``; every other ``consistent-`` tag is a retained cut."""


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
        name: RefInfo(name, ref.snapshot_id, ref.snapshot_ref_type.value == "tag", ref.max_ref_age_ms)
        for name, ref in metadata.refs.items()
    }


def ref_age_for(expires_at_ms: int, snapshot_timestamp_ms: int) -> int:
    """The ``max-ref-age-ms`` that makes a tag on a snapshot taken at ``snapshot_timestamp_ms`` expire at ``expires_at_ms``."""
    return max(1, expires_at_ms - snapshot_timestamp_ms)



@dataclass(frozen=True)
class TagInfo:
    """A ``consistent-`` tag over the tables that carry it: a reader pin or a retained cut."""

    tag: str
    tables: Mapping[str, int]
    """Table -> tagged snapshot id."""
    expires_at: int | None
    """The earliest expiry over its tables (None: it never expires)."""
    expired: bool
    """Its ref age has passed: the next ``expire`` drops it."""

    def to_json(self) -> dict[str, Any]:
        return {"tag": self.tag, "tables": dict(self.tables), "expires_at": self.expires_at, "expired": self.expired}


def collect_tags(metadata: Mapping[str, TableMetadata], wanted: Callable[[RefInfo], bool], now: int) -> list[TagInfo]:
    """The tags ``wanted`` selects, grouped by name over the tables' metadata, sorted by name."""
    tables: dict[str, dict[str, int]] = {}
    expiry: dict[str, int | None] = {}
    for name, meta in metadata.items():
        for ref in ref_infos(meta).values():
            if not ref.is_tag or not wanted(ref):
                continue
            snapshot = meta.snapshot_by_id(ref.snapshot_id)
            expires = ref.expires_at(snapshot.timestamp_ms) if snapshot is not None else None
            tables.setdefault(ref.name, {})[name] = ref.snapshot_id
            known = expiry.get(ref.name)
            expiry[ref.name] = expires if known is None else known if expires is None else min(known, expires)
    return [
        TagInfo(tag, tables[tag], expiry[tag], expiry[tag] is not None and expiry[tag] < now)  # type: ignore[operator]
        for tag in sorted(tables)
    ]
