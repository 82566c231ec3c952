"""Loading table states fast: one catalog round-trip, concurrent lean reads, a cache keyed by metadata file.

Resolution, epoch planning and status need a ``TableState`` per table, not pyiceberg's ``Table``.
``MetadataLoader.load`` gets them for many tables at once:

1. **One catalog round-trip.** For pyiceberg's ``SqlCatalog``, one query over its ``iceberg_tables``
   table gives every wanted table's current metadata location (``_pyiceberg.sql_metadata_locations``); for a
   Hive Metastore one ``get_table_objects_by_name`` per database, for Glue ``GetTables`` per database
   (``_pyiceberg.metadata_locations``).
   A ``RestCatalog`` is asked for every table at once: concurrent loadTable requests (at most
   ``REST_CONNECTIONS``, the connection pool its session is given), each answer's inline metadata
   decoded by the lean decoder, and, where the server answers the REST spec's ``ETag``, the next
   request for the table carries ``If-None-Match``: an unchanged table then costs a ``304 Not
   Modified`` with no body (an ETag Jetty's gzip suffixed with ``--gzip`` is sent back without the suffix:
   ``_pyiceberg.answer_etag``, docs/catalogs.md). A server without ETags still saves the decode: the answer's
   ``metadata-location`` is read first, and a state parsed from that file before is taken from the
   cache. Other catalogs (Glue, Hive, a test double) are asked table by table with ``load_table``.
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

A REST answer other than 200 or 304 (404, an expired token, a server error) is left to pyiceberg: the
table is asked again with ``load_table``, which raises or retries exactly as it always did.

Faults (a catalog that is unavailable or whose answer is lost, ``faults.fault_of``) are retried under
the loader's ``RetryPolicy`` until its deadline, then raised as ``CatalogUnavailableError`` (§6.8):
``load`` and ``open_table`` are reads, safe to repeat whole.

Errors keep the order of the names asked for: the first missing or unreadable table, in that order,
raises, as when the tables were loaded one after another.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from consistent_catalog import _pyiceberg
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.exceptions import ConsistentCatalogError, TableNotFoundError
from consistent_catalog.faults import FaultLog, RetryPolicy, request_timeout, retrying
from consistent_catalog.metadata import LeanDecodeError, decode_load_result, decode_state, load_result_head
from consistent_catalog.state import TableState
from consistent_catalog.util.identifiers import normalize_identifier

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

T = TypeVar("T")

#: Default bound of the shared cache, in snapshots (each costs about 1.4 KiB: its record and summary; 200,000: ~280 MiB).
DEFAULT_MAX_SNAPSHOTS = 200_000
DEFAULT_MAX_ENTRIES = 10_000
#: Default number of threads reading metadata files at once.
DEFAULT_READERS = 16
#: Most loadTable requests in flight at once to a REST catalog (its session's connection pool is widened to
#: this: requests keeps 10 per host, and more threads would open connections only to drop them).
REST_CONNECTIONS = 16


def table_state(identifier: str, metadata: TableMetadata) -> TableState:
    """The state of a table from pyiceberg's parsed ``metadata`` (the lean decoder, ``metadata.decode_state``,
    gives the same from the metadata file's bytes)."""
    # runs for every snapshot of every table a cut touches: keep it to plain tuple building
    make = tuple.__new__
    snapshots: dict[int, SnapshotRecord] = {}
    for s in metadata.snapshots:
        summary = s.summary
        operation, props = _pyiceberg.summary_parts(summary) if summary is not None else ("append", {})
        snapshots[s.snapshot_id] = make(
            SnapshotRecord, (s.snapshot_id, s.parent_snapshot_id, s.timestamp_ms, operation, props, s.schema_id)
        )
    branches: dict[str, int] = {}
    tags: dict[str, int] = {}
    for name, ref in metadata.refs.items():
        (branches if ref.snapshot_ref_type.value == "branch" else tags)[name] = ref.snapshot_id
    log = tuple((entry.timestamp_ms, entry.snapshot_id) for entry in metadata.snapshot_log)
    return TableState(identifier, snapshots, branches, dict(metadata.properties), tags, log, metadata.current_schema_id)


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
    """Set when the catalog was asked for the whole table with ``load_table`` (catalogs other than SQL and REST)."""


class StateCache:
    """Parsed table states by (identifier, metadata location), least recently used out first; thread-safe.

    Bounded by the number of snapshots held (a state costs about its snapshot count) and by entries. A table's
    newer metadata file replaces the state of its older one (same table: same identifier and metadata folder):
    loads always ask for the current file, so an older one is not asked again, and a lake under constant commits
    keeps one state per table instead of filling the bound with superseded ones (whose objects every full garbage
    collection of the process walks).
    """

    def __init__(self, max_snapshots: int = DEFAULT_MAX_SNAPSHOTS, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_snapshots = max_snapshots
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], TableState] = OrderedDict()
        self._newest: dict[tuple[str, str], str] = {}
        """(identifier, metadata folder) -> the location last put for that table."""
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
            table = (identifier, location.rpartition("/")[0])
            superseded = self._newest.get(table)
            if superseded is not None:
                replaced = self._entries.pop((identifier, superseded), None)
                if replaced is not None:
                    self._weight -= self._cost(replaced)
            self._newest[table] = location
            self._entries[key] = state
            self._weight += cost
            while self._weight > self.max_snapshots or len(self._entries) > self.max_entries:
                (name, dropped_location), dropped = self._entries.popitem(last=False)
                self._weight -= self._cost(dropped)
                folder = (name, dropped_location.rpartition("/")[0])
                if self._newest.get(folder) == dropped_location:
                    del self._newest[folder]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._newest.clear()
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

    def __init__(
        self,
        catalog: Catalog,
        cache: StateCache | None = None,
        readers: int = DEFAULT_READERS,
        *,
        faults: RetryPolicy | None = None,
        fault_log: FaultLog | None = None,
    ) -> None:
        self.catalog = catalog
        self.cache = SHARED_CACHE if cache is None else cache
        self.readers = max(1, readers)
        properties = getattr(catalog, "properties", None) or {}  # a test double may have none
        self.faults = RetryPolicy.from_properties(properties) if faults is None else faults
        """How long reads wait out a catalog fault (catalog property ``consistent.retry-deadline``)."""
        self.fault_log = FaultLog() if fault_log is None else fault_log
        """The faults this loader's reads met and settled."""
        self._file_ios: dict[str, FileIO] = {}
        self._rest = _pyiceberg.rest_loads_raw(catalog)
        self._rest_connections = 1
        if _pyiceberg.is_rest_catalog(catalog):  # any RestCatalog gets the timeout; the pool matters for raw loads
            widened = _pyiceberg.widen_rest_connections(catalog, REST_CONNECTIONS, request_timeout(properties))
            self._rest_connections = widened if self._rest else 1
        self._etags: dict[str, tuple[str, str]] = {}
        """REST: table -> (the ETag of its last answer, the metadata file that answer held)."""
        self._vended: set[str] = set()
        """REST: tables whose last answer carried config or storage credentials (their FileIO is pyiceberg's to build)."""
        self._sources: dict[str, tuple[str, ...]] = {}
        """Table -> the sources it named when last loaded: ``upstream``'s guess at what it will ask next."""

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

        The table as it is now when there is no location, or when that file was removed since. A REST
        table whose server handed out config or storage credentials with it is loaded with ``load_table``
        first, so its FileIO carries them; when the table moved since the cut, that FileIO reads the older
        metadata file.
        """
        current = None
        if self._rest and name in self._vended:
            current = self.load_table(name)
            if location is None or current.metadata_location == location:
                return current
        if location is not None:
            io = None if current is None else current.io
            try:
                return self.retrying(lambda: _pyiceberg.open_table(self.catalog, name, location, io=io),
                                     f"reading {name}'s metadata")
            except FileNotFoundError:
                pass
        return current if current is not None else self.load_table(name)

    def load_table(self, name: str) -> Table:
        """``catalog.load_table(name)``, faults waited out; TableNotFoundError (with the way out) when it does not exist."""
        try:
            return self.retrying(lambda: self.catalog.load_table(name), f"loading {name}")
        except (NoSuchTableError, NoSuchNamespaceError):
            raise not_found(name, self.catalog.name) from None

    def retrying(self, call: Callable[[], T], what: str) -> T:
        """``call()`` with faults waited out under this loader's policy (``faults.retrying``)."""
        return retrying(self.faults, call, catalog=self.catalog.name, what=what, fault_log=self.fault_log)

    # --- many tables ----------------------------------------------------------------------------
    def load(self, names: Sequence[str], *, required: Iterable[str] = ()) -> dict[str, Located]:
        """States of the tables ``names`` (normalized identifiers) that exist, in the order given.

        A table of ``required`` that does not exist raises TableNotFoundError; errors are raised in the
        order of ``names`` (the first missing or unreadable table first).
        """
        names = list(dict.fromkeys(names))
        what = f"loading {', '.join(names)}" if len(names) <= 3 else f"loading {names[0]} and {len(names) - 1} more tables"
        found = self.retrying(lambda: self._load(names, set(required)), what)
        for name, located in found.items():
            try:
                self._sources[name] = located.state.sources
            except ConsistentCatalogError:
                self._sources.pop(name, None)  # unreadable lineage: whoever reads it raises, not the guess
        return found

    def _load(self, names: list[str], must: set[str]) -> dict[str, Located]:
        locations = _pyiceberg.metadata_locations(self.catalog, names) if names else {}
        if locations is None:
            if self._rest:
                return self._load_rest(names, must)
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

        Each level's load also asks for the tables its tables named as sources when this loader last
        loaded them, transitively: with a lineage that has not changed, the whole closure is one load
        (one SQL query; one round of concurrent REST requests) instead of one per level. A source that
        is new is found in the level after, as before; a guessed table that is no longer upstream is
        loaded for nothing and left out of the result.
        """
        first = [normalize_identifier(t) for t in tables]
        must = set(first) if required else set()
        found: dict[str, Located] = {}
        asked: set[str] = set()
        walked: set[str] = set()
        level = list(dict.fromkeys(first))
        while level:
            asked.update(level)
            guessed = self._known_upstream(level, asked)
            try:
                loaded = self.load(level + guessed, required=must)
                asked.update(guessed)
            except TableNotFoundError:
                raise  # a required table of the level itself (a guess is never required)
            except Exception:
                if not guessed:
                    raise
                # a guessed table may no longer be upstream: only the level's own tables may raise
                loaded = self.load(level, required=must)
            found.update(loaded)
            # follow sources from the level's tables only, through what is loaded: a guess that is no longer
            # upstream is never walked (nor its sources asked for, nor its properties read)
            following: dict[str, None] = {}
            pending = [name for name in level if name in found]
            while pending:
                name = pending.pop()
                if name in walked:
                    continue
                walked.add(name)
                for source in found[name].state.sources:
                    if source in found:
                        pending.append(source)
                    elif source not in asked:
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
    def _known_upstream(self, level: list[str], asked: set[str]) -> list[str]:
        """The sources the tables of ``level`` named when last loaded, transitively, not ``asked`` yet."""
        guessed: dict[str, None] = {}
        pending = [source for name in level for source in self._sources.get(name, ())]
        while pending:
            name = pending.pop()
            if name not in asked and name not in guessed:
                guessed[name] = None
                pending.extend(self._sources.get(name, ()))
        return list(guessed)

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

    def _load_rest(self, names: list[str], must: set[str]) -> dict[str, Located]:
        """Every table's loadTable at once (conditional where an ETag is known); answers decoded in order."""
        sent: dict[str, tuple[str, str] | None] = {}
        for name in names:
            known = self._etags.get(name)
            # an ETag is worth sending only while the state it stands for is still cached
            sent[name] = known if known is not None and (name, known[1]) in self.cache else None
        get = _pyiceberg.rest_load_table
        answers = _run_all([(name, functools.partial(get, self.catalog, name, None if sent[name] is None else sent[name][0]))
                            for name in names], min(self.readers, self._rest_connections))
        found: dict[str, Located] = {}
        try:
            for name in names:
                located = self._from_answer(name, answers[name].result(), sent[name])
                if located is None:  # not a 200 or 304: pyiceberg asks again, and raises or retries its way
                    try:
                        table = self.catalog.load_table(name)
                    except (NoSuchTableError, NoSuchNamespaceError):
                        self._etags.pop(name, None)
                        if name in must:
                            raise not_found(name, self.catalog.name) from None
                        continue
                    located = Located(self.state_of(name, table), getattr(table, "metadata_location", None), table)
                found[name] = located
        finally:
            for future in answers.values():
                future.cancel()
        return found

    def _from_answer(self, name: str, answer: _pyiceberg.RestAnswer | None, sent: tuple[str, str] | None) -> Located | None:
        """The table as ``answer`` gives it; ``sent``: the (ETag, metadata location) the request was conditional on."""
        if answer is not None and answer.status == 304 and sent is not None:
            location = sent[1]  # the file of the ETag sent (another thread may have moved _etags since)
            state = self.cache.get(name, location)
            if state is not None:
                return Located(state, location)
            answer = _pyiceberg.rest_load_table(self.catalog, name, None)  # evicted since it was sent: the body
        if answer is None or answer.status != 200:
            return None
        try:
            location, vended = load_result_head(answer.body)
        except LeanDecodeError:
            location, vended = None, True  # pyiceberg parses it below; its FileIO is pyiceberg's to build
        (self._vended.add if vended else self._vended.discard)(name)
        state = self.cache.get(name, location) if location is not None else None
        if state is None:
            try:
                location, state = decode_load_result(name, answer.body)
            except LeanDecodeError:
                location, metadata = _pyiceberg.parse_load_result(answer.body)
                state = table_state(name, metadata)
            if location is not None:
                self.cache.put(name, location, state)
        if answer.etag and location is not None:
            self._etags[name] = (answer.etag, location)
        else:
            self._etags.pop(name, None)
        return Located(state, location)

    def _file_io(self, location: str) -> FileIO:
        scheme = location.split("://", 1)[0] if "://" in location else ""
        io = self._file_ios.get(scheme)
        if io is None:
            io = self._file_ios[scheme] = _pyiceberg.metadata_file_io(self.catalog, location)
        return io

    def _start_reads(self, wanted: list[tuple[str, str]]) -> dict[str, Future[bytes]]:
        """Start reading the files; each future holds the bytes or the error of reading them."""
        inputs = [(name, self._file_io(location).new_input(location)) for name, location in wanted]
        return _run_all([(name, functools.partial(_read, input_file)) for name, input_file in inputs], self.readers)

    @staticmethod
    def _parse(name: str, location: str, data: bytes) -> TableState:
        try:
            return decode_state(name, data)
        except LeanDecodeError:
            return table_state(name, _pyiceberg.parse_metadata(data, location))


def _run_all(calls: list[tuple[str, Callable[[], T]]], threads: int) -> dict[str, Future[T]]:
    """Start every call; each future holds its result or its error (raised when its turn comes).

    A single call runs at once, without a thread; more go to the process's pool of ``threads``.
    """
    futures: dict[str, Future[T]] = {}
    if len(calls) <= 1:
        for name, call in calls:
            future: Future[T] = Future()
            try:
                future.set_result(call())
            except Exception as exc:
                future.set_exception(exc)
            futures[name] = future
        return futures
    pool = _reader_pool(threads)
    for name, call in calls:
        futures[name] = pool.submit(call)
    return futures


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
