"""Expiry against a catalog: plan, commit (one fenced commit per table), delete unreferenced files."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.table.update import RemovePropertiesUpdate, RemoveSnapshotRefUpdate

from consistent_catalog import properties as P
from consistent_catalog._pyiceberg import remove_snapshots_keeping_parents
from consistent_catalog.commit import RetryPolicy, TakeFence, refs_at
from consistent_catalog.exceptions import ConsistentCatalogError, FencedError
from consistent_catalog.retention.files import Location, checksum_sidecar, is_inside, normalize_location
from consistent_catalog.retention.plan import ExpiryPlan, TableExpiry, plan_expiry
from consistent_catalog.retention.policy import RetentionPolicy
from consistent_catalog.retention.refs import ref_infos
from consistent_catalog.retention.scope import load_all, targets_and_catalog
from consistent_catalog.retention.tiers import retain
from consistent_catalog.util.time import now_ms

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

    from consistent_catalog.commit import TableStore

log = logging.getLogger(__name__)


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


def plan_from_catalog(
    store: TableStore, tables: Iterable[str] | None = None, policy: RetentionPolicy | None = None, *, now: int | None = None
) -> tuple[ExpiryPlan, dict[str, Table]]:
    """Load the catalog and plan expiry of ``tables`` (all tables when None)."""
    targets, everything = targets_and_catalog(store, tables)
    loaded, states = load_all(store, everything)
    refs = {name: ref_infos(table.metadata) for name, table in loaded.items()}
    return plan_expiry(states, refs, targets, policy or RetentionPolicy(), now_ms() if now is None else now), loaded


def commit_expiry(store: TableStore, table: Table, planned: TableExpiry) -> Table:
    """One fenced catalog commit that drops the planned tags and removes the planned snapshots.

    Refused (FencedError) when any ref differs from the plan: a publish, a new pin or tag, a revision
    or a takeover happened meanwhile (each moves a branch or the fence) and the plan must be made again.
    It takes the fence itself, so a pin or tag planned before it is refused in turn.
    """
    updates: list[Any] = [RemoveSnapshotRefUpdate(ref_name=name) for name in planned.drop_tags]
    if planned.drop_previous:  # no table reads the previous generation any more (protocol §6.10 step 7)
        updates += [RemoveSnapshotRefUpdate(ref_name=P.PREVIOUS_BRANCH), RemovePropertiesUpdate(removals=[P.PREVIOUS])]
    if planned.expire:
        updates.append(remove_snapshots_keeping_parents(planned.expire))
    return store.commit(
        table,
        refs_at(planned.refs),
        updates,
        what=f"expiring {len(planned.expire)} snapshot(s)",
        take_fence=TakeFence.keeping_holder(table.metadata, "expire", planned.refs.get(P.FENCE_BRANCH)),
    )


def expire(
    store: TableStore,
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
    for attempt in RetryPolicy(retries).attempts():
        planned, loaded = plan_from_catalog(store, tables, policy, now=now)
        if dry_run:
            return ExpiryResult(planned, True, {}, {}, attempt)
        try:
            for name, table_plan in planned.tables.items():
                if not table_plan.changes:
                    continue
                before = loaded[name]
                after = commit_expiry(store, before, table_plan)
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


class _Unreadable(Exception):
    """A retained snapshot's manifest list or manifest cannot be read: what it references is unknown."""


def _reachable(
    table: Table, snapshot_ids: Iterable[int], metadata: TableMetadata, *, strict: bool = False
) -> tuple[dict[Location, str], dict[Location, Any]]:
    """(manifest lists, manifests) of the given snapshots, keyed by normalised location.

    Values are the manifest-list path and the ``ManifestFile`` as written (the spelling to delete).
    An unreadable manifest list is skipped, or with ``strict`` raises ``_Unreadable``.
    """
    lists: dict[Location, str] = {}
    manifests: dict[Location, Any] = {}
    wanted = set(snapshot_ids)
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id not in wanted:
            continue
        lists.setdefault(normalize_location(snapshot.manifest_list), snapshot.manifest_list)
        try:
            for manifest in snapshot.manifests(table.io):
                manifests.setdefault(normalize_location(manifest.manifest_path), manifest)
        except FileNotFoundError as exc:
            if strict:
                raise _Unreadable(f"manifest list of snapshot {snapshot.snapshot_id}: {exc}") from exc
            continue
    return lists, manifests


def delete_unreferenced_files(before: Table, after: Table, expired: Iterable[int]) -> DeletedFiles:
    """Delete the files that only the ``expired`` snapshots referenced (all under the table's location).

    A file survives when any retained snapshot references it: its manifest list, its manifests, or a
    live (added or existing) entry of one of those manifests. Files outside the table's location
    (added from elsewhere) are never deleted. Call it with the metadata before and after the expiry commit.

    Locations are compared as normalised URIs (``retention.files``): Spark writes ``file:/w/t/...``
    into a table pyiceberg created at ``file:///w/t``, and a file referenced under one spelling by a
    retained snapshot is kept whatever spelling an expired snapshot used; a ``file:`` file's Hadoop
    checksum sidecar (``.name.crc``, written by Spark) is deleted with it. When a retained snapshot's
    manifest list or manifest cannot be read, what it references is unknown and nothing is deleted.
    """
    io = after.io
    name = ".".join(after.name())
    location = normalize_location(after.metadata.location)
    try:
        keep_lists, keep_manifests = _reachable(
            after, [s.snapshot_id for s in after.metadata.snapshots], after.metadata, strict=True
        )
        live: set[Location] = set()
        for manifest in keep_manifests.values():
            try:
                entries = manifest.fetch_manifest_entry(io, discard_deleted=True)
            except FileNotFoundError as exc:
                raise _Unreadable(f"manifest {manifest.manifest_path}: {exc}") from exc
            live.update(normalize_location(e.data_file.file_path) for e in entries)
    except _Unreadable as exc:
        log.warning("%s: deleting no files: a retained snapshot's metadata cannot be read (%s)", name, exc)
        return DeletedFiles()
    gone_lists, gone_manifests = _reachable(before, expired, before.metadata)
    data: dict[Location, tuple[str, int]] = {}
    for key, manifest in gone_manifests.items():
        if key in keep_manifests:
            continue
        try:
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                data.setdefault(
                    normalize_location(entry.data_file.file_path),
                    (entry.data_file.file_path, entry.data_file.file_size_in_bytes),
                )
        except FileNotFoundError:
            continue
    counts = {"lists": 0, "manifests": 0, "data": 0, "bytes": 0}

    def remove(key: Location, path: str, kind: str, size: int | None) -> None:
        if not is_inside(key, location):
            return
        try:
            if size is None:
                size = len(io.new_input(path))
            io.delete(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("%s: could not delete %s: %s", name, path, exc)
            return
        counts[kind] += 1
        counts["bytes"] += size
        if key[0] == "file":  # Hadoop's local file system (Spark) wrote a checksum beside it: it goes too
            try:
                io.delete(checksum_sidecar(path))
            except OSError:
                pass

    for key in sorted(data.keys() - live):
        remove(key, data[key][0], "data", data[key][1])
    for key in sorted(gone_manifests.keys() - keep_manifests.keys()):
        remove(key, gone_manifests[key].manifest_path, "manifests", gone_manifests[key].manifest_length)
    for key in sorted(gone_lists.keys() - keep_lists.keys()):
        remove(key, gone_lists[key], "lists", None)
    return DeletedFiles(counts["lists"], counts["manifests"], counts["data"], counts["bytes"])


def run_maintenance(store: TableStore, tables: Sequence[str], policy: RetentionPolicy | None) -> ExpiryResult | None:
    """Tag the tiers (when the policy has any) and expire ``tables``; failures are logged, never raised.

    Called by ``EpochJob`` every ``expire_every`` published epochs: maintenance must not stop a job.
    """
    policy = policy or RetentionPolicy()
    try:
        if policy.tiers:
            retain(store, tables, policy)
        return expire(store, tables, policy)
    except (ConsistentCatalogError, OSError) as exc:
        log.warning("retention of %s skipped this time: %s", ", ".join(tables), exc)
        return None


