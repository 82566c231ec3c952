"""The orphan-file sweep (protocol §9.7): files under a table's location that no metadata references.

Iceberg's ``remove_orphan_files``: list every file under each table's location, subtract every
file that the table metadata still references, and delete what is left when it is older than a
threshold. Orphans are what crashed or fenced-out writers leave behind (data files and manifests
written for a commit that never landed), files of snapshots expired without ``delete_files`` and
metadata files that fell out of the metadata log.

Referenced are, over **every snapshot** still in the metadata (not only ``main``'s): the data and
delete files of live manifest entries, the manifests, the manifest lists, the current metadata file
and the previous ones in the metadata log, statistics and partition-statistics files, and a
``version-hint.text``; a Hadoop checksum sidecar (``dir/.name.crc``, written beside every file
when Spark writes ``file:`` paths) goes with its file. Locations are compared as normalised URIs (``retention.files``), so a file
written by Spark as ``file:/w/t/...`` is the file pyiceberg references as ``file:///w/t/...``.

Safety:

- a file younger than the threshold is never deleted: a writer in flight has written files its
  commit does not reference yet. The threshold cannot be below ``SAFETY_FLOOR_MS`` (1 hour)
  unless forced;
- when any snapshot's manifest list or manifest cannot be read, the table is skipped (what it
  references is unknown) and nothing of it is deleted;
- files of another table of the catalog whose location lies inside this table's location are not
  this table's; tables whose locations overlap count each other's references;
- the metadata is loaded after listing, and loaded again just before deleting: files a commit
  referenced meanwhile are kept.

Listing goes through pyarrow file systems: the local file system for ``file:``, otherwise the one
pyiceberg's ``PyArrowFileIO`` builds from the catalog's properties (``s3.endpoint``,
``s3.access-key-id``, ``s3.region``, ...), whatever FileIO the table uses for reading.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from consistent_catalog.exceptions import InvalidInputError, TableNotFoundError
from consistent_catalog.retention.files import Location, checksum_owner, is_inside, normalize_location
from consistent_catalog.retention.scope import targets_and_catalog
from consistent_catalog.util.durations import parse_duration
from consistent_catalog.util.time import fmt_duration, now_ms

if TYPE_CHECKING:
    from pyarrow.fs import FileInfo, FileSystem
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table

    from consistent_catalog.commit import TableStore

log = logging.getLogger(__name__)

SAFETY_FLOOR_MS = 3600_000
"""The youngest files the sweep may delete without ``force``: a writer in flight is younger than this."""
DEFAULT_OLDER_THAN_MS = 3 * 86_400_000
"""Iceberg's default for ``remove_orphan_files`` (3 days); a suggestion, never applied silently."""
VERSION_HINT = "version-hint.text"

__all__ = [
    "DEFAULT_OLDER_THAN_MS",
    "SAFETY_FLOOR_MS",
    "OrphanResult",
    "TableOrphans",
    "check_older_than",
    "remove_orphan_files",
]


@dataclass(frozen=True)
class TableOrphans:
    """What the sweep found under one table's location."""

    location: str
    files: int = 0
    """Files found under the location (files of other tables nested inside it excluded)."""
    referenced: int = 0
    """Of those, referenced by the metadata of this table (or of a table whose location overlaps)."""
    orphaned: int = 0
    """Unreferenced and older than the threshold: deleted (or, in a dry run, to be deleted)."""
    too_young: int = 0
    """Unreferenced but younger than the threshold: kept (a writer may still commit them)."""
    deleted: int = 0
    bytes: int = 0
    """Bytes deleted."""
    orphaned_bytes: int = 0
    failed: int = 0
    """Orphans that could not be deleted (logged)."""
    orphan_files: tuple[str, ...] = ()
    skipped: str | None = None
    """Why the table was not swept (nothing of it deleted), or None."""

    def to_json(self) -> dict[str, Any]:
        return {
            "location": self.location,
            "files": self.files,
            "referenced": self.referenced,
            "orphaned": self.orphaned,
            "too_young": self.too_young,
            "deleted": self.deleted,
            "bytes": self.bytes,
            "orphaned_bytes": self.orphaned_bytes,
            "failed": self.failed,
            "orphan_files": list(self.orphan_files),
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class OrphanResult:
    """The result of ``remove_orphan_files``: per table, files found, referenced, orphaned, deleted."""

    now: int
    older_than_ms: int
    dry_run: bool
    tables: Mapping[str, TableOrphans] = field(default_factory=dict)

    @property
    def threshold(self) -> int:
        """Files modified before this time (ms) and referenced by nothing are orphans."""
        return self.now - self.older_than_ms

    @property
    def deleted(self) -> int:
        return sum(t.deleted for t in self.tables.values())

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.tables.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "now": self.now,
            "older_than_ms": self.older_than_ms,
            "threshold": self.threshold,
            "deleted": self.deleted,
            "bytes": self.bytes,
            "tables": {name: t.to_json() for name, t in self.tables.items()},
        }


def check_older_than(older_than: int | str | timedelta, *, force: bool = False) -> int:
    """The sweep's age threshold in ms; below ``SAFETY_FLOOR_MS`` only with ``force``."""
    ms = parse_duration(older_than)
    if ms < SAFETY_FLOOR_MS and not force:
        given = older_than if isinstance(older_than, str) else fmt_duration(ms)
        raise InvalidInputError(
            f"refusing an orphan sweep with --older-than {given}: below the 1h safety floor it can delete the files "
            "of a writer still in flight (data files and manifests written but not yet committed look like orphans). "
            "Give --older-than 1h or more (Iceberg's default is 3d), or pass --force (force=True) if no writer "
            "can be running"
        )
    return ms


class _Unreadable(Exception):
    """Part of the metadata cannot be read: what the table references is unknown."""


def referenced_files(table: Table, cache: dict[Location, frozenset[Location]] | None = None) -> set[Location]:
    """Every file ``table``'s metadata references, as normalised locations (see the module docstring).

    ``cache`` (manifest -> its live entries) saves reading a manifest twice across calls. Raises
    ``_Unreadable`` when a manifest list or manifest of any snapshot cannot be read.
    """
    cache = {} if cache is None else cache
    metadata = table.metadata
    io = table.io
    found: set[Location] = set()
    if table.metadata_location:
        found.add(normalize_location(table.metadata_location))
        found.add(normalize_location(table.metadata_location.rsplit("/", 1)[0] + "/" + VERSION_HINT))
    found.update(normalize_location(entry.metadata_file) for entry in metadata.metadata_log)
    found.update(normalize_location(s.statistics_path) for s in metadata.statistics)
    found.update(normalize_location(s.statistics_path) for s in metadata.partition_statistics)
    for snapshot in metadata.snapshots:
        found.add(normalize_location(snapshot.manifest_list))
        try:
            manifests = snapshot.manifests(io)
        except Exception as exc:  # missing, truncated, unreadable: the table cannot be swept
            raise _Unreadable(f"the manifest list of snapshot {snapshot.snapshot_id} ({snapshot.manifest_list}): {exc}") from exc
        for manifest in manifests:
            key = normalize_location(manifest.manifest_path)
            found.add(key)
            if key not in cache:
                try:
                    entries = manifest.fetch_manifest_entry(io, discard_deleted=True)
                except Exception as exc:
                    raise _Unreadable(f"manifest {manifest.manifest_path}: {exc}") from exc
                cache[key] = frozenset(normalize_location(e.data_file.file_path) for e in entries)
            found.update(cache[key])
    return found


def _filesystem(io: FileIO, location: str) -> tuple[FileSystem, str]:
    """(pyarrow file system, path in it) of ``location``, built the way pyiceberg's PyArrowFileIO builds it."""
    from pyarrow.fs import LocalFileSystem
    from pyiceberg.io.pyarrow import PyArrowFileIO

    scheme, netloc, path = PyArrowFileIO.parse_location(location, io.properties)
    if scheme == "file":
        return LocalFileSystem(), path
    arrow_io = io if isinstance(io, PyArrowFileIO) else PyArrowFileIO(io.properties)
    return arrow_io.fs_by_scheme(scheme, netloc), path


def _list(io: FileIO, location: str) -> tuple[FileSystem, list[tuple[str, FileInfo]]]:
    """Every file under ``location``: (its location spelled like the table's, its FileInfo)."""
    from pyarrow.fs import FileSelector, FileType

    fs, root = _filesystem(io, location)
    root = root.rstrip("/") or "/"
    base = location.rstrip("/")
    listed = []
    for info in fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type != FileType.File:
            continue
        if not info.path.startswith(root):
            log.warning("listing %s returned %s, outside it; ignored", location, info.path)
            continue
        listed.append((base + "/" + info.path[len(root):].lstrip("/"), info))
    return fs, listed


def _is_referenced(path: str, referenced: set[Location]) -> bool:
    """Referenced itself, or the Hadoop checksum sidecar (``.name.crc``) of a referenced file."""
    key = normalize_location(path)
    owner = checksum_owner(key)
    return key in referenced or (owner is not None and owner in referenced)


def _mtime_ms(info: FileInfo) -> int | None:
    mtime_ns = info.mtime_ns
    return None if mtime_ns is None else mtime_ns // 1_000_000


class _Sweep:
    """One sweep: the catalog's table locations and a manifest cache shared by every table."""

    def __init__(self, store: TableStore, everything: Iterable[str]) -> None:
        self.store = store
        self.cache: dict[Location, frozenset[Location]] = {}
        self.locations: dict[str, Location] = {}
        for name in everything:
            table = self._load(name)
            if table is not None:
                self.locations[name] = normalize_location(table.metadata.location)

    def _load(self, name: str) -> Table | None:
        try:
            return self.store.load_table(name)
        except TableNotFoundError:
            return None  # dropped meanwhile

    def overlapping(self, name: str) -> list[str]:
        """``name`` and every table whose location equals, contains or lies inside ``name``'s."""
        mine = self.locations[name]
        return [other for other, loc in self.locations.items()
                if other == name or loc == mine or is_inside(loc, mine) or is_inside(mine, loc)]

    def nested(self, name: str) -> list[Location]:
        """Locations of other tables strictly inside ``name``'s: their files are theirs."""
        mine = self.locations[name]
        return [loc for other, loc in self.locations.items() if other != name and is_inside(loc, mine)]

    def references(self, names: Iterable[str]) -> tuple[set[Location], dict[str, str | None]]:
        """(files referenced by any of ``names``, each table's metadata location as loaded now)."""
        found: set[Location] = set()
        versions: dict[str, str | None] = {}
        for name in names:
            table = self._load(name)
            if table is None:
                continue
            versions[name] = table.metadata_location
            found |= referenced_files(table, self.cache)
        return found, versions

    def table(self, name: str, threshold: int, dry_run: bool) -> TableOrphans:
        table = self._load(name)
        if table is None:
            return TableOrphans("", skipped="the table was dropped during the sweep")
        location = table.metadata.location
        fs, listed = _list(table.io, location)  # listed first: what is committed before the load below is referenced
        nested = self.nested(name)
        listed = [(path, info) for path, info in listed if not any(is_inside(path, loc) for loc in nested)]
        related = self.overlapping(name)
        try:
            referenced, versions = self.references(related)
        except _Unreadable as exc:
            return TableOrphans(location, files=len(listed), skipped=f"nothing deleted: cannot read {exc}")
        unreferenced = [(path, info) for path, info in listed if not _is_referenced(path, referenced)]
        old, young = [], 0
        for path, info in unreferenced:
            mtime = _mtime_ms(info)
            if mtime is None or mtime >= threshold:
                young += 1
            else:
                old.append((path, info))
        if old and not dry_run:
            # a commit since the load above may reference some of them: load again just before deleting
            try:
                again, now_versions = self.references(related)
            except _Unreadable as exc:
                return TableOrphans(location, files=len(listed), skipped=f"nothing deleted: cannot read {exc}")
            if now_versions != versions:
                old = [(path, info) for path, info in old if not _is_referenced(path, again)]
        deleted = failed = deleted_bytes = 0
        if not dry_run:
            for path, info in old:
                try:
                    fs.delete_file(info.path)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    log.warning("%s: could not delete orphan %s: %s", name, path, exc)
                    failed += 1
                    continue
                deleted += 1
                deleted_bytes += info.size or 0
        return TableOrphans(
            location,
            files=len(listed),
            referenced=len(listed) - len(unreferenced),
            orphaned=len(old),
            too_young=young,
            deleted=deleted,
            bytes=deleted_bytes,
            orphaned_bytes=sum(info.size or 0 for _, info in old),
            failed=failed,
            orphan_files=tuple(sorted(path for path, _ in old)),
        )


def remove_orphan_files(
    store: TableStore,
    tables: Iterable[str] | None = None,
    *,
    older_than_ms: int | str | timedelta,
    now: int | None = None,
    dry_run: bool = False,
    force: bool = False,
) -> OrphanResult:
    """Delete files under the locations of ``tables`` (all when None) that no metadata references.

    Only files last modified more than ``older_than_ms`` before ``now`` are deleted (a duration:
    ms, ``"3d"``, a timedelta); below one hour it is refused unless ``force`` (a writer in flight
    has unreferenced files). ``dry_run`` lists the orphans and deletes nothing. Tables whose
    metadata cannot be read completely are skipped (``skipped``), never swept blind.
    """
    age = check_older_than(older_than_ms, force=force)
    at = now_ms() if now is None else now
    targets, everything = targets_and_catalog(store, tables)
    sweep = _Sweep(store, everything)
    swept: dict[str, TableOrphans] = {}
    for name in targets:
        if name not in sweep.locations:
            continue  # dropped meanwhile
        swept[name] = result = sweep.table(name, at - age, dry_run)
        log.info("%s: %d orphan(s) of %d file(s), %d deleted%s", name, result.orphaned, result.files, result.deleted,
                 f" (skipped: {result.skipped})" if result.skipped else "")
    return OrphanResult(at, age, dry_run, swept)
