"""A table's consistent-catalog state as plain data (``loading.table_state`` and ``metadata.decode_state`` build it)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from consistent_catalog import properties as P
from consistent_catalog.barrier import BranchBarriers, SnapshotRecord, branch_barriers, parse_barrier_value, watermark
from consistent_catalog.exceptions import MalformedMetadataError


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
    main_log: tuple[tuple[int, int], ...] = ()
    """Iceberg's snapshot log: (time main moved, snapshot id), oldest first — when epochs were published."""
    current_schema_id: int | None = None
    """Iceberg's ``current-schema-id``: the schema the next write uses (None: not known to the builder)."""

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
    def owner(self) -> str | None:
        """The job that owns a derived table (protocol §6.2): ``consistent.job``, kept while no instance runs; on
        a table unregistered by an earlier version (which removed it), the job of main's head snapshot."""
        return self.job or (self.last_writer if self.sources else None)

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
    def floor(self) -> tuple[int | None, int] | None:
        """(main head when the watermark was set, watermark): later snapshots must land above it."""
        marker = self.properties.get(P.WATERMARK_SNAPSHOT)
        value = self.watermark_property
        if marker is None or value is None:
            return None
        if marker == P.NO_SNAPSHOT:
            return (None, value)
        try:
            return (int(marker), value)
        except ValueError:
            raise MalformedMetadataError(
                f"{self.identifier}: table property {P.WATERMARK_SNAPSHOT} is {marker!r}, not a snapshot id; "
                "advance the watermark again to rewrite it"
            ) from None

    @cached_property
    def barrier_overrides(self) -> dict[int, int]:
        value = self.properties.get(P.BARRIER_OVERRIDES)
        if not value:
            return {}
        try:
            parsed = json.loads(value)
            return {int(k): parse_barrier_value(v, where=f"{self.identifier} {P.BARRIER_OVERRIDES}") for k, v in parsed.items()}
        except (ValueError, AttributeError):
            raise MalformedMetadataError(
                f"{self.identifier}: table property {P.BARRIER_OVERRIDES} must be a JSON object of snapshot id -> "
                f"barrier, got {value[:80]!r}; remove it to fall back to the snapshots' own barriers"
            ) from None

    def watermark_properties(self, value: int, head: int | None | str = "main") -> dict[str, str]:
        """The table properties that set the watermark to ``value`` on ``head`` (default: main's current head).

        The floor of the watermark being replaced may have raised the barriers of snapshots committed
        since it was set (a late foreign writer); those barriers are kept as overrides so that a barrier
        once complete never changes content. A revision passes the snapshot main returns to.
        """
        head = self.head() if head == "main" else head
        properties = {P.WATERMARK: str(value), P.WATERMARK_SNAPSHOT: P.NO_SNAPSHOT if head is None else str(head)}
        overrides = {k: v for k, v in self.barrier_overrides.items() if k in self.snapshots}
        if self.floor is not None:
            with_floor = self.branch(P.MAIN_BRANCH)
            without = branch_barriers(
                self.identifier, P.MAIN_BRANCH, head, self.snapshots, is_root=self.is_root, overrides=overrides
            )
            for snapshot_id, kept, plain in zip(with_floor.snapshot_ids, with_floor.barriers, without.barriers):
                if kept is not None and kept != plain:
                    overrides[snapshot_id] = kept
        if overrides or P.BARRIER_OVERRIDES in self.properties:
            properties[P.BARRIER_OVERRIDES] = json.dumps({str(k): v for k, v in sorted(overrides.items())}, separators=(",", ":"))
        return properties

    @cached_property
    def revision(self) -> int:
        return self._int_property(P.REVISION) or 0

    @cached_property
    def clock_skew_ms(self) -> int:
        """How far ahead of now a barrier written to this table may lie (table property, else the default)."""
        value = self._int_property(P.CLOCK_SKEW)
        return P.DEFAULT_CLOCK_SKEW_MS if value is None else value

    @cached_property
    def idle_after_ms(self) -> int | None:
        """For a root declared an idle source: its watermark may follow now minus this (None: not declared)."""
        return self._int_property(P.IDLE_AFTER)

    def ingested_with_key(self, key: str) -> int | None:
        """The snapshot in ``main``'s retained ancestry written by the ingest with idempotency ``key``, if any."""
        current = self.head()
        while current is not None:
            record = self.snapshots.get(current)
            if record is None:
                return None
            if record.summary.get(P.INGEST_KEY) == key:
                return current
            current = record.parent_id
        return None

    def child_on_main(self, parent: int | None) -> int | None:
        """The snapshot of ``main``'s retained ancestry whose parent is ``parent`` (None: main's first snapshot)."""
        current = self.head()
        while current is not None:
            record = self.snapshots.get(current)
            if record is None:
                return None
            if record.parent_id == parent:
                return current
            current = record.parent_id
        return None

    def first_barrier(self) -> int | None:
        """The oldest effective barrier of ``main``'s retained history (None: no barrier yet)."""
        barriers = [b for b in self.branch().barriers if b is not None] if self.head() is not None else []
        return min(barriers) if barriers else None

    # --- generations (protocol §6.10, §4.8) ----------------------------------------------------
    @cached_property
    def previous_record(self) -> dict[str, int | None] | None:
        """``consistent.previous`` parsed: ``{"snapshot", "watermark", "watermark-snapshot"}`` (None: absent)."""
        value = self.properties.get(P.PREVIOUS)
        if value is None:
            return None
        try:
            parsed = json.loads(value)
            record = {key: parsed.get(key) for key in ("snapshot", "watermark", "watermark-snapshot")}
            if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in record.values()):
                raise ValueError("not integers")
        except (ValueError, AttributeError):
            raise MalformedMetadataError(
                f"{self.identifier}: table property {P.PREVIOUS} must be a JSON object of snapshot, watermark and "
                f"watermark-snapshot, got {value[:80]!r}; abandon the previous generation (abandon_generation) or "
                "remove the property"
            ) from None
        return record

    def previous_view(self) -> TableState | None:
        """The table as it was before its generation switch (protocol §4.8): main at ``consistent-previous``, the
        watermark properties recorded in ``consistent.previous``, no staged branch. None without a previous
        generation."""
        head = self.branches.get(P.PREVIOUS_BRANCH)
        if head is None:
            return None
        cache = self.__dict__.setdefault("_previous_view", [])
        if cache:
            return cache[0]
        record = self.previous_record or {}
        properties = {k: v for k, v in self.properties.items() if k not in (P.WATERMARK, P.WATERMARK_SNAPSHOT, P.PREVIOUS)}
        if record.get("watermark") is not None:
            properties[P.WATERMARK] = str(record["watermark"])
        if record.get("watermark-snapshot") is not None:
            properties[P.WATERMARK_SNAPSHOT] = str(record["watermark-snapshot"])
        branches = {
            name: value for name, value in self.branches.items()
            if name not in (P.MAIN_BRANCH, P.STAGED_BRANCH, P.PREVIOUS_BRANCH)
        }
        branches[P.MAIN_BRANCH] = head
        view = dataclasses.replace(self, branches=branches, properties=properties)
        cache.append(view)
        return view

    def reads_previous_generation(self, source: TableState) -> bool:
        """Whether this table's ``main`` head was computed from ``source``'s previous generation (protocol §6.10 step
        7): it records an input of ``source`` at the head of ``consistent-previous`` or before it (or read it empty)."""
        previous = source.head(P.PREVIOUS_BRANCH)
        if previous is None:
            return False
        recorded = self.recorded_inputs(self.head())
        input_id = recorded.get(source.identifier)
        return bool(recorded) and (input_id is None or source.is_ancestor(input_id, previous))

    def previous_properties(self) -> dict[str, str]:
        """``consistent.previous`` for a switch of this table (protocol §6.10 step 3): main's head now and the
        watermark properties it has."""
        marker = self.properties.get(P.WATERMARK_SNAPSHOT)
        record = {
            "snapshot": self.head(),
            "watermark": self.watermark_property,
            "watermark-snapshot": None if marker is None else int(marker),
        }
        return {P.PREVIOUS: json.dumps(dict(sorted(record.items())), separators=(",", ":"))}

    # --- branches ----------------------------------------------------------------------------
    def head(self, branch: str = P.MAIN_BRANCH) -> int | None:
        return self.branches.get(branch)

    def branch(self, branch: str = P.MAIN_BRANCH) -> BranchBarriers:
        cache: dict[str, BranchBarriers] = self.__dict__.setdefault("_branch_cache", {})
        if branch not in cache:
            cache[branch] = branch_barriers(
                self.identifier,
                branch,
                self.branches.get(branch),
                self.snapshots,
                is_root=self.is_root,
                floor=self.floor,
                overrides=self.barrier_overrides,
            )
        return cache[branch]

    def epoch_writes(self, branch: str = P.MAIN_BRANCH) -> tuple[bool, tuple[int, int] | None]:
        """Over the tracked history of ``branch``: whether an epoch wrote any of it (a snapshot with
        ``consistent.sources``), and the first data-changing snapshot with a barrier but no ``consistent.job`` nor
        sources, with its barrier (rows ingested while the table was a root), if any. Cached: ``status`` asks it of
        every table at every call, and the history only grows with the table's age."""
        cache: dict[str, tuple[bool, tuple[int, int] | None]] = self.__dict__.setdefault("_epoch_writes_cache", {})
        found = cache.get(branch)
        if found is None:
            history = self.branch(branch)
            epochs, ingested = False, None
            for snapshot_id, barrier in zip(history.snapshot_ids[: history.tracked], history.barriers[: history.tracked]):
                record = self.snapshots[snapshot_id]
                if P.SOURCES in record.summary:
                    epochs = True
                elif barrier is not None and record.job is None and record.changes_data and record.operation != "replace":
                    ingested = (snapshot_id, barrier)
                    break
            found = cache[branch] = (epochs, ingested)
        return found

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

    def recorded_inputs(self, snapshot_id: int | None) -> dict[str, int | None]:
        """The epoch inputs (``consistent.sources``) that the table's content at ``snapshot_id`` reflects.

        Snapshots that change no data and carry no sources (compaction, manifest rewrites) inherit
        those of their parent. ``{}`` when no epoch produced the content yet. Parsed once per snapshot (cuts ask it of
        every table at every resolve); each call gets its own dict.
        """
        cache: dict[int | None, dict[str, int | None]] = self.__dict__.setdefault("_recorded_cache", {})
        found = cache.get(snapshot_id)
        if found is None:
            found = cache[snapshot_id] = self._recorded_inputs(snapshot_id)
        return dict(found)

    def _recorded_inputs(self, snapshot_id: int | None) -> dict[str, int | None]:
        current = snapshot_id
        while current is not None:
            record = self.snapshots.get(current)
            if record is None:
                return {}
            value = record.summary.get(P.SOURCES)
            if value is not None:
                return parse_summary_sources(value, where=f"{self.identifier} snapshot {current}")
            if record.changes_data and record.operation != "replace":
                return {}
            current = record.parent_id
        return {}

    @property
    def staged_ahead(self) -> bool:
        """True when ``consistent-staged`` holds processed snapshots that ``main`` does not have yet."""
        staged = self.branches.get(P.STAGED_BRANCH)
        main = self.branches.get(P.MAIN_BRANCH)
        return staged is not None and staged != main and self.is_ancestor(main, staged)

    def newest_branch(self) -> str:
        return P.STAGED_BRANCH if self.staged_ahead else P.MAIN_BRANCH

    def watermark(self, branch: str = P.MAIN_BRANCH) -> int | None:
        """``W(X)`` on ``branch``: max of its head barrier and the watermark property.

        After an untracked write the table is complete only up to its newest tracked snapshot: the
        watermark property counts only if it was set on top of that snapshot.
        """
        history = self.branch(branch)
        if history.untracked is not None:
            floor = self.floor
            if floor is None or floor[0] != history.tracked_head:
                return history.head_barrier
        return watermark(history.head_barrier, self.watermark_property)

    def untracked_writer(self, branch: str = P.MAIN_BRANCH) -> str | None:
        """Who made the untracked write on ``branch``, from its snapshot summary (engine, app id), if known."""
        untracked = self.branch(branch).untracked
        if untracked is None:
            return None
        summary = self.snapshots[untracked].summary
        parts = [
            " ".join(v for v in (summary.get("engine-name"), summary.get("engine-version")) if v),
            f"app {summary['spark.app.id']}" if summary.get("spark.app.id") else "",
            f"app {summary['app-id']}" if summary.get("app-id") else "",
        ]
        found = ", ".join(dict.fromkeys(p for p in parts if p))  # Spark writes its app id under both keys: once
        return found or None
