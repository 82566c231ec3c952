"""Loading table states fast: one catalog round-trip, concurrent lean reads, a cache keyed by metadata file.

Resolution, epoch planning and status need a ``TableState`` per table, not pyiceberg's ``Table``.
``MetadataLoader.load`` gets them for many tables at once:

1. **One catalog round-trip.** For pyiceberg's ``SqlCatalog``, one query over its ``iceberg_tables``
   table gives every wanted table's current metadata location (``_pyiceberg.sql_metadata_locations``).
   Other catalogs (REST, Glue, Hive, a test double) are asked table by table with ``load_table``.
2. **A cache keyed by metadata file.** A metadata file never changes once written (every commit writes a
   new one and swaps the catalog's pointer), so a state parsed from location L is the state of every
   later read of L. ``StateCache`` keeps parsed states, least recently used first out, bounded by the
   number of snapshots it holds. Since step 1 always asks the catalog for the *current* location, a
   commit by any process is seen by the next load: the cache can only answer for a file the catalog
   still points at.
3. **Concurrent reads.** The files not in the cache are read by a thread pool through the catalog's
   pyiceberg FileIO (every storage pyiceberg supports works), so object-store latency overlaps.
4. **A lean parse.** ``metadata.decode_state`` decodes only what the resolver needs; what it does not
   recognise is parsed by pyiceberg as before (``_pyiceberg.parse_metadata``), so answers, warnings and
   errors stay pyiceberg's.

Errors keep the order of the names asked for: the first missing or unreadable table, in that order,
raises, as when the tables were loaded one after another.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, NamedTuple

from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from consistent_catalog import _pyiceberg
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.exceptions import TableNotFoundError
from consistent_catalog.metadata import LeanDecodeError, decode_state
from consistent_catalog.state import TableState
from consistent_catalog.util.identifiers import normalize_identifier

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

#: Default bound of the shared cache, in snapshots (each costs about 1.4 KiB: its record and summary; 200,000: ~280 MiB).
DEFAULT_MAX_SNAPSHOTS = 200_000
DEFAULT_MAX_ENTRIES = 10_000
#: Default number of threads reading metadata files at once.
DEFAULT_READERS = 16


def table_state(identifier: str, metadata: TableMetadata) -> TableState:
    """The state of a table from pyiceberg's parsed ``metadata`` (the lean decoder, ``metadata.decode_state``,
    gives the same from the metadata file's bytes)."""
    # runs for every snapshot of every table a cut touches: keep it to plain tuple building
    make = tuple.__new__
    snapshots: dict[int, SnapshotRecord] = {}
    for s in metadata.snapshots:
        summary = s.summary
        operation, props = _pyiceberg.summary_parts(summary) if summary is not None else ("append", {})
        snapshots[s.snapshot_id] = make(SnapshotRecord, (s.snapshot_id, s.parent_snapshot_id, s.timestamp_ms, operation, props))
    branches: dict[str, int] = {}
    tags: dict[str, int] = {}
    for name, ref in metadata.refs.items():
        (branches if ref.snapshot_ref_type.value == "branch" else tags)[name] = ref.snapshot_id
    log = tuple((entry.timestamp_ms, entry.snapshot_id) for entry in metadata.snapshot_log)
    return TableState(identifier, snapshots, branches, dict(metadata.properties), tags, log)


def not_found(name: str, catalog_name: str) -> TableNotFoundError:
    return TableNotFoundError(
        f"table {name} does not exist in catalog {catalog_name!r}; check the name "
        "(consistent-catalog status lists the tables)"
    )


class Located(NamedTuple):
    """A table's state, the metadata file it was parsed from, and the loaded ``Table`` when one was loaded."""

    state: TableState
    location: str | None
    """None when the catalog gave a table without a metadata location (then nothing was cached)."""
    table: Table | None = None
    """Set when the catalog was asked for the whole table (catalogs other than SqlCatalog)."""


class StateCache:
    """Parsed table states by (identifier, metadata location), least recently used out first; thread-safe.

    Bounded by the number of snapshots held (a state costs about its snapshot count) and by entries.
    """

    def __init__(self, max_snapshots: int = DEFAULT_MAX_SNAPSHOTS, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_snapshots = max_snapshots
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], TableState] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _cost(state: TableState) -> int:
        return len(state.snapshots) + 1

    def get(self, identifier: str, location: str) -> TableState | None:
        key = (identifier, location)
        with self._lock:
            state = self._entries.get(key)
            if state is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return state

    def put(self, identifier: str, location: str, state: TableState) -> None:
        key = (identifier, location)
        cost = self._cost(state)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return
            if cost > self.max_snapshots:
                return  # larger than the whole cache: not kept
            self._entries[key] = state
            self._weight += cost
            while self._weight > self.max_snapshots or len(self._entries) > self.max_entries:
                _, dropped = self._entries.popitem(last=False)
                self._weight -= self._cost(dropped)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._weight = 0
            self.hits = self.misses = 0

    @property
    def snapshots(self) -> int:
        """Snapshots held (plus one per entry)."""
        return self._weight

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries


SHARED_CACHE = StateCache()
"""The cache every ``TableStore`` of the process shares (metadata files are immutable, so this is safe)."""


class MetadataLoader:
    """Table states of a pyiceberg catalog: one catalog round-trip, concurrent lean reads, ``StateCache``."""

    def __init__(self, catalog: Catalog, cache: StateCache | None = None, readers: int = DEFAULT_READERS) -> None:
        self.catalog = catalog
        self.cache = SHARED_CACHE if cache is None else cache
        self.readers = max(1, readers)
        self._file_ios: dict[str, FileIO] = {}

    # --- one table, as load_table gives it ---------------------------------------------------------
    def state_of(self, name: str, table: Table) -> TableState:
        """The state of a loaded pyiceberg ``table`` (from the cache when its metadata file was parsed before)."""
        location = getattr(table, "metadata_location", None)
        if location is None:
            return table_state(name, table.metadata)
        state = self.cache.get(name, location)
        if state is None:
            state = table_state(name, table.metadata)
            self.cache.put(name, location, state)
        return state

    def open_table(self, name: str, location: str | None) -> Table:
        """The pyiceberg ``Table`` as of metadata file ``location`` (a reader's scans at a resolved cut).

        The table as it is now when there is no location, or when that file was removed since.
        """
        if location is not None:
            try:
                return _pyiceberg.open_table(self.catalog, name, location)
            except FileNotFoundError:
                pass
        try:
            return self.catalog.load_table(name)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise not_found(name, self.catalog.name) from None

    # --- many tables ----------------------------------------------------------------------------
    def load(self, names: Sequence[str], *, required: Iterable[str] = ()) -> dict[str, Located]:
        """States of the tables ``names`` (normalized identifiers) that exist, in the order given.

        A table of ``required`` that does not exist raises TableNotFoundError; errors are raised in the
        order of ``names`` (the first missing or unreadable table first).
        """
        names = list(dict.fromkeys(names))
        must = set(required)
        locations = _pyiceberg.sql_metadata_locations(self.catalog, names) if names else {}
        if locations is None:
            return self._load_one_by_one(names, must)
        found: dict[str, Located] = {}
        cached: dict[str, TableState] = {}
        to_read: list[tuple[str, str]] = []
        for name in names:
            location = locations.get(name)
            if location is None:
                continue
            state = self.cache.get(name, location)
            if state is None:
                to_read.append((name, location))
            else:
                cached[name] = state
        reads = self._start_reads(to_read)
        try:
            for name in names:  # parsed here, in order, while the pool still reads the later files
                location = locations.get(name)
                if location is None:
                    if name in must:
                        raise not_found(name, self.catalog.name)
                    continue
                state = cached.get(name)
                if state is None:
                    state = self._parse(name, location, reads[name].result())
                    self.cache.put(name, location, state)
                found[name] = Located(state, location)
        finally:
            for future in reads.values():
                future.cancel()  # after an error: the reads not started yet are not needed
        return found

    def upstream(self, tables: Iterable[str], *, required: bool = True) -> dict[str, Located]:
        """``tables`` and every table they derive from, transitively: one ``load`` per level of the lineage.

        A source that no longer exists is left out; a missing table of ``tables`` itself raises
        TableNotFoundError when ``required``. The result is ordered as a depth-first walk from the
        last table given (the order in which tables used to be loaded one by one).
        """
        first = [normalize_identifier(t) for t in tables]
        must = set(first) if required else set()
        found: dict[str, Located] = {}
        asked: set[str] = set()
        level = list(dict.fromkeys(first))
        while level:
            asked.update(level)
            loaded = self.load(level, required=must)
            found.update(loaded)
            following: dict[str, None] = {}
            for located in loaded.values():
                for source in located.state.sources:
                    if source not in asked:
                        following[source] = None
            level = list(following)
        ordered: dict[str, Located] = {}
        pending = list(first)
        while pending:
            name = pending.pop()
            if name in ordered or name not in found:
                continue
            located = found[name]
            ordered[name] = located
            pending.extend(s for s in located.state.sources if s not in ordered)
        return ordered

    # --- internals --------------------------------------------------------------------------------
    def _load_one_by_one(self, names: list[str], must: set[str]) -> dict[str, Located]:
        found: dict[str, Located] = {}
        for name in names:
            try:
                table = self.catalog.load_table(name)
            except (NoSuchTableError, NoSuchNamespaceError):
                if name in must:
                    raise not_found(name, self.catalog.name) from None
                continue
            found[name] = Located(self.state_of(name, table), getattr(table, "metadata_location", None), table)
        return found

    def _file_io(self, location: str) -> FileIO:
        scheme = location.split("://", 1)[0] if "://" in location else ""
        io = self._file_ios.get(scheme)
        if io is None:
            io = self._file_ios[scheme] = _pyiceberg.metadata_file_io(self.catalog, location)
        return io

    def _start_reads(self, wanted: list[tuple[str, str]]) -> dict[str, Future[bytes]]:
        """Start reading the files; each future holds the bytes or the error of reading them.

        A single file is read at once, without a thread; more go to the process's reader pool.
        """
        inputs = [(name, self._file_io(location).new_input(location)) for name, location in wanted]
        futures: dict[str, Future[bytes]] = {}
        if len(inputs) <= 1:
            for name, input_file in inputs:
                future: Future[bytes] = Future()
                try:
                    future.set_result(_read(input_file))
                except Exception as exc:  # raised when its turn comes, like the others
                    future.set_exception(exc)
                futures[name] = future
            return futures
        pool = _reader_pool(self.readers)
        for name, input_file in inputs:
            futures[name] = pool.submit(_read, input_file)
        return futures

    @staticmethod
    def _parse(name: str, location: str, data: bytes) -> TableState:
        try:
            return decode_state(name, data)
        except LeanDecodeError:
            return table_state(name, _pyiceberg.parse_metadata(data, location))


_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _reader_pool(size: int) -> ThreadPoolExecutor:
    """The process's pool of ``size`` reader threads (threads start on demand and stay for the next load)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(size)
        if pool is None:
            pool = _POOLS[size] = ThreadPoolExecutor(max_workers=size, thread_name_prefix="cc-metadata")
        return pool


def _forget_pools() -> None:
    """In a forked child the parent's threads do not exist: its pools must not be used (new ones start)."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def _read(input_file) -> bytes:  # type: ignore[no-untyped-def]
    with input_file.open() as stream:
        return stream.read()
