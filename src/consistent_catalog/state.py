"""A table's consistent-catalog state as plain data, parsed from Iceberg metadata without I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from consistent_catalog import properties as P
from consistent_catalog.barrier import BranchBarriers, SnapshotRecord, branch_barriers, parse_barrier_value, watermark
from consistent_catalog.exceptions import MalformedMetadataError

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata


def parse_summary_sources(value: str | None, *, where: str) -> dict[str, int | None]:
    """Parse a snapshot's ``consistent.sources`` JSON object ``{"ns.src": snapshot_id}``."""
    if value is None:
        return {}
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise MalformedMetadataError(f"{where}: {P.SOURCES} is not valid JSON ({exc}): {value[:80]!r}") from None
    if not isinstance(parsed, dict) or not all(
        isinstance(k, str) and (v is None or (isinstance(v, int) and not isinstance(v, bool))) for k, v in parsed.items()
    ):
        raise MalformedMetadataError(f"{where}: {P.SOURCES} must be a JSON object of table -> snapshot id, got {value[:80]!r}")
    return parsed


def encode_summary_sources(sources: Mapping[str, int | None]) -> str:
    return json.dumps(dict(sorted(sources.items())), separators=(",", ":"))


def encode_table_sources(sources: tuple[str, ...] | list[str]) -> str:
    return json.dumps(sorted(set(sources)), separators=(",", ":"))


@dataclass(frozen=True)
class TableState:
    """Everything the resolver, planner and lineage code need to know about one table."""

    identifier: str
    snapshots: Mapping[int, SnapshotRecord]
    branches: Mapping[str, int]
    """Branch name -> head snapshot id (tags excluded)."""
    properties: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_metadata(cls, identifier: str, metadata: TableMetadata) -> TableState:
        snapshots = {
            s.snapshot_id: SnapshotRecord(
                snapshot_id=s.snapshot_id,
                parent_id=s.parent_snapshot_id,
                timestamp_ms=s.timestamp_ms,
                operation=s.summary.operation.value if s.summary is not None else "append",
                summary=s.summary.additional_properties if s.summary is not None else {},
            )
            for s in metadata.snapshots
        }
        branches: dict[str, int] = {}
        tags: dict[str, int] = {}
        for name, ref in metadata.refs.items():
            (branches if ref.snapshot_ref_type.value == "branch" else tags)[name] = ref.snapshot_id
        return cls(identifier, snapshots, branches, dict(metadata.properties), tags)

    # --- table properties ------------------------------------------------------------------
    def _int_property(self, key: str) -> int | None:
        value = self.properties.get(key)
        if value is None:
            return None
        return parse_barrier_value(value, where=f"{self.identifier} table property {key}")

    @cached_property
    def sources(self) -> tuple[str, ...]:
        value = self.properties.get(P.SOURCES)
        if value is None or value.strip() == "":
            return ()
        try:
            parsed: Any = json.loads(value)
        except ValueError as exc:
            raise MalformedMetadataError(
                f"{self.identifier}: table property {P.SOURCES} is not valid JSON ({exc}); "
                "re-register the table's job to rewrite it"
            ) from None
        if not isinstance(parsed, list) or not all(isinstance(s, str) for s in parsed):
            raise MalformedMetadataError(
                f"{self.identifier}: table property {P.SOURCES} must be a JSON array of table names, got {value[:80]!r}; "
                "re-register the table's job to rewrite it"
            )
        return tuple(parsed)

    @property
    def is_root(self) -> bool:
        return not self.sources

    @property
    def job(self) -> str | None:
        return self.properties.get(P.JOB) or None

    @property
    def last_writer(self) -> str | None:
        """``consistent.job`` of main's head snapshot: who wrote the table last."""
        head = self.head()
        record = self.snapshots.get(head) if head is not None else None
        return record.job if record else None

    @property
    def lease_holder(self) -> str | None:
        return self.properties.get(P.LEASE_HOLDER) or None

    @cached_property
    def lease_until(self) -> int | None:
        return self._int_property(P.LEASE_UNTIL)

    @cached_property
    def watermark_property(self) -> int | None:
        return self._int_property(P.WATERMARK)

    @cached_property
    def revision(self) -> int:
        return self._int_property(P.REVISION) or 0

    # --- branches ----------------------------------------------------------------------------
    def head(self, branch: str = P.MAIN_BRANCH) -> int | None:
        return self.branches.get(branch)

    def branch(self, branch: str = P.MAIN_BRANCH) -> BranchBarriers:
        cache: dict[str, BranchBarriers] = self.__dict__.setdefault("_branch_cache", {})
        if branch not in cache:
            cache[branch] = branch_barriers(
                self.identifier, branch, self.branches.get(branch), self.snapshots, is_root=self.is_root
            )
        return cache[branch]

    def is_ancestor(self, ancestor_id: int | None, snapshot_id: int | None) -> bool:
        """Whether ``ancestor_id`` is ``snapshot_id`` or one of its ancestors (None is everyone's ancestor)."""
        if ancestor_id is None:
            return True
        current = snapshot_id
        while current is not None:
            if current == ancestor_id:
                return True
            record = self.snapshots.get(current)
            current = record.parent_id if record else None
        return False

    @property
    def staged_ahead(self) -> bool:
        """True when ``consistent-staged`` holds processed snapshots that ``main`` does not have yet."""
        staged = self.branches.get(P.STAGED_BRANCH)
        main = self.branches.get(P.MAIN_BRANCH)
        return staged is not None and staged != main and self.is_ancestor(main, staged)

    def newest_branch(self) -> str:
        return P.STAGED_BRANCH if self.staged_ahead else P.MAIN_BRANCH

    def watermark(self, branch: str = P.MAIN_BRANCH) -> int | None:
        """``W(X)`` on ``branch``: max of its head barrier and the watermark property."""
        return watermark(self.branch(branch).head_barrier, self.watermark_property)
