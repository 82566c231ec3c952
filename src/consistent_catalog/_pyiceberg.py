"""Every pyiceberg internal consistent-catalog relies on, in one place.

pyiceberg is pinned to a minor range (``>=0.12,<0.13``); these are the places where we go past its
public API, each with the reason and the assumption it makes. ``tests/catalog/test_pyiceberg_contract.py``
asserts every assumption against the installed pyiceberg, so an upgrade that breaks one fails that
test, by name, instead of corrupting a table. Nothing here runs at import time: the one registration
(``remove_snapshots_keeping_parents``) happens on first use.

1. ``summary_parts``: a snapshot summary's properties from pydantic's private dict (the public
   ``additional_properties`` property costs ~2 µs per snapshot on the resolution hot path) and the
   operation's ``_value_`` (``Enum.value`` goes through a descriptor). Falls back to the public API.
2. ``commit_transaction_once``: commits a pyiceberg ``Transaction`` with extra requirements, once,
   without pyiceberg's commit-retry path. That path (0.12) treats a failed requirement as a
   concurrent update, drops every ``assert-ref-snapshot-id``, rebuilds the snapshot and re-validates
   it, so a fenced-out writer sees ``ValidationException`` instead of ``FencedError`` (or, with a
   fence expressed as a ref assertion, would silently lose the fence). ``Transaction._stage`` also
   keeps only the first requirement of each type; sending the list ourselves keeps every one.
3. ``remove_snapshots_keeping_parents``: ``remove-snapshots`` applied the way Java Iceberg applies
   it (children keep their parent id); pyiceberg 0.12 nulls the parent id of a removed snapshot's
   children, which would make the oldest retained snapshot look like the table's first one.
4. ``sql_metadata_locations``: the metadata locations of many tables of a ``SqlCatalog`` in one
   query over its ``iceberg_tables`` table (``load_table`` asks once per table), with the same row
   filter as ``SqlCatalog.load_table`` (its private ``_iceberg_type_filter``: tables, not views).
   Catalogs of other kinds, or a ``SqlCatalog`` whose ``load_table`` was replaced, get None: the
   caller loads them table by table.
5. ``metadata_file_io`` / ``parse_metadata`` / ``open_table``: read a metadata file the way
   ``SqlCatalog`` reads it (``load_file_io`` with the catalog's properties; pyiceberg's own parser and
   gzip rule), and build the ``Table`` ``load_table`` builds from it (its FileIO comes from the
   private ``Catalog._load_file_io`` with the table's properties) — so a reader can scan exactly the
   metadata file a cut was resolved from.
   ``sql_catalog_names`` and ``sqlite_has_catalog_tables`` read the same schema for the configuration
   checks of ``connect.py`` (which catalog names a database holds; whether a SQLite file is a catalog).
7. ``rest_load_table`` / ``parse_load_result``: a ``RestCatalog``'s loadTable request sent through
   its own session and URL builder (the private ``_session``, ``url``, ``_split_identifier_for_path``,
   ``_check_endpoint``), with the REST spec's ``If-None-Match`` header, handing back the raw answer
   (status, ``ETag``, body bytes) — pyiceberg's ``load_table`` sends no ``If-None-Match`` and always
   builds a whole ``Table`` (pydantic models of every snapshot). Only a plain ``RestCatalog`` (not a
   subclass, ``load_table`` not replaced: ``rest_loads_raw``) is asked so; the caller loads other
   catalogs the public way. ``widen_rest_connections`` gives that session's adapter for the catalog's
   URI a connection pool as large as the loader's concurrency (requests keeps 10 per host; more requests
   in flight would open connections only to drop them): a plain ``HTTPAdapter`` only (pyiceberg mounts
   a SigV4 adapter of its own where configured: that one is left as it is), its settings kept
   (``_pool_*`` are requests' private names for them).
6. ``empty_snapshot``: a snapshot with no data (an empty manifest list written the way
   ``_SnapshotProducer._commit`` writes one), for the fence ref. pyiceberg makes snapshots only
   inside a data write; this builds the same ``Snapshot`` from its public pieces
   (``write_manifest_list``, ``location_provider``, ``new_snapshot_id``).
8. ``write_data_files`` / ``append_data_files``: ``Transaction.append`` in two halves, so that an ingest refused by a
   concurrent commit plans again without writing its Parquet files again: the data files written once (pyiceberg's
   private ``_dataframe_to_data_files``, with the schema check ``append`` makes), then appended by each attempt
   through the snapshot producer ``append`` uses (the private ``_append_snapshot_producer``: a fast or merge append
   as the table's properties say). A refused attempt deletes its manifests, never data files (pyiceberg's
   ``_clean_all_uncommitted``), so the files stay valid for the next one.
9. ``idempotency_key_lifetime`` / ``idempotency_key``: the REST spec's ``Idempotency-Key`` (protocol §6.8), which
   pyiceberg 0.12 never sends. The lifetime a server advertises is read with one ``GET /v1/config`` of the
   catalog's own session and URL builder (pyiceberg parses that answer but keeps no top-level field of it), once
   per catalog object. The key is put on a commit's ``POST`` by the ``TimedAdapter`` mounted on that session for
   the catalog's URI (the hook: requests has no per-request hook before sending), from a thread-local set around
   the ``commit_table`` call only: pyiceberg's code is not changed, and a catalog whose adapter is not a plain
   ``HTTPAdapter`` (pyiceberg's SigV4 adapter) gets no key (its commits are settled by reading back).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.table.refs import MAIN_BRANCH as MAIN_BRANCH_NAME
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import (
    AssertTableUUID,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
    RemoveStatisticsUpdate,
    TableRequirement,
    ValidatableTableRequirement,
)
from requests import Request
from requests.adapters import HTTPAdapter

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import CommitTableResponse, Table, Transaction
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot, Summary
    from pyiceberg.table.update import TableUpdate

R = TypeVar("R")

__all__ = [
    "ValidatableTableRequirement",
    "append_data_files",
    "write_data_files",
    "commit_transaction_once",
    "metadata_file_io",
    "open_table",
    "parse_load_result",
    "parse_metadata",
    "rest_load_table",
    "rest_loads_raw",
    "is_rest_catalog",
    "widen_rest_connections",
    "idempotency_key",
    "idempotency_key_lifetime",
    "new_idempotency_key",
    "parse_iso_duration",
    "RestAnswer",
    "remove_snapshots_keeping_parents",
    "is_sql_catalog",
    "sql_catalog_names",
    "sql_metadata_locations",
    "sqlite_has_catalog_tables",
    "summary_parts",
    "empty_snapshot",
    "validates_client_side",
]


# --- 1. the summary fast path ------------------------------------------------------------------
def summary_parts(summary: Summary) -> tuple[str, Mapping[str, str]]:
    """(operation, summary properties) of a pyiceberg ``Summary``, equal to the public properties."""
    try:
        properties = summary.__pydantic_private__["_additional_properties"]
    except (AttributeError, KeyError, TypeError):
        properties = summary.additional_properties
    operation = summary.operation
    return operation._value_ if isinstance(operation, Operation) else str(operation), properties


# --- 2. one commit, exactly the requirements intended --------------------------------------------
def transaction_requirements(tx: Transaction, extra: Sequence[TableRequirement] = ()) -> tuple[TableRequirement, ...]:
    """The requirement list ``commit_transaction_once`` sends: the writer's own, ``extra``, the table's uuid.

    A requirement equal to one already in the list is sent once (the writer asserts its branch as
    loaded, the caller often the same ref at the same snapshot); two assertions of one ref at
    different snapshots both stay, and the commit is refused.
    """
    out: list[TableRequirement] = []
    for requirement in (*tx._requirements, *extra, AssertTableUUID(uuid=tx.table_metadata.table_uuid)):
        if requirement not in out:
            out.append(requirement)
    return tuple(out)


def commit_transaction_once(
    tx: Transaction,
    extra: Sequence[TableRequirement] = (),
    send: Callable[[tuple[TableRequirement, ...], tuple[TableUpdate, ...]], R] | None = None,
) -> R | CommitTableResponse | None:
    """Commit ``tx`` with ``extra`` requirements in one catalog commit: the catalog's response (the metadata as
    committed), or None when it had nothing to commit.

    ``send(requirements, updates)`` makes the commit when given (the commit layer's, which settles
    faults) and its result is returned; by default ``catalog.commit_table``. Raises whatever that
    raises (``CommitFailedException`` when a requirement fails). Only after a commit that surely did
    not land are the transaction's manifests deleted, as pyiceberg does; after an error of unknown
    outcome (a lost connection) nothing is deleted.
    """
    producers = list(tx._snapshot_producers)
    if not tx._updates:
        for producer in producers:
            producer._clean_all_uncommitted()
        return None
    table = tx._table
    requirements, updates = transaction_requirements(tx, extra), tx._updates
    try:
        if send is None:
            response: Any = table.catalog.commit_table(table, requirements, updates)
        else:
            response = send(requirements, updates)
    except (CommitFailedException, ValidationException) as exc:
        # these guarantee the commit did not land, unless an earlier attempt of it met a fault (the commit
        # layer then says so: ``kept_after_refusal``); after any other error the outcome is unknown and
        # the files may be referenced: they are left to the orphan-file sweep (as pyiceberg does)
        if not getattr(exc, "kept_after_refusal", False):
            for producer in producers:
                producer._clean_all_uncommitted()
        raise
    for producer in producers:
        producer._cleanup_uncommitted()
    tx._updates, tx._requirements, tx._snapshot_producers = (), (), []
    return response


# --- 3. remove-snapshots the Java way ---------------------------------------------------------------
class RemoveSnapshotsKeepingParents(RemoveSnapshotsUpdate):
    """``remove-snapshots``, serialised exactly like it, applied so that children keep their parent id.

    REST servers apply it their own way, which for Java is this one; with the dangling id kept,
    resolution knows the history was cut short and reports a barrier before it as expired history.
    """


def remove_snapshots_keeping_parents(snapshot_ids: Iterable[int]) -> RemoveSnapshotsKeepingParents:
    _register_remove_snapshots_keeping_parents()
    return RemoveSnapshotsKeepingParents(snapshot_ids=list(snapshot_ids))


@functools.cache
def _register_remove_snapshots_keeping_parents() -> None:
    from pyiceberg.table.update import _apply_table_update, _TableMetadataUpdateContext

    @_apply_table_update.register(RemoveSnapshotsKeepingParents)
    def _apply(
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



# --- 4. many metadata locations in one query ----------------------------------------------------------
#: tables per query (two IN lists of at most this many bound parameters: SQLite allows 32,766, PostgreSQL 65,535)
SQL_BATCH = 500


def sql_metadata_locations(catalog: Catalog, identifiers: Sequence[str]) -> dict[str, str | None] | None:
    """``{"ns.table": metadata location}`` of a ``SqlCatalog``, one query per ``SQL_BATCH`` tables.

    A table that does not exist (or is a view, or has no metadata location: ``load_table`` raises
    NoSuchTableError for those) maps to None. None when ``catalog`` is not a plain ``SqlCatalog``.
    """
    from pyiceberg.catalog import Catalog as BaseCatalog
    from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
    from sqlalchemy import select

    if not isinstance(catalog, SqlCatalog) or "load_table" in vars(catalog):
        return None
    if type(catalog).load_table is not SqlCatalog.load_table:
        return None  # a subclass that loads its own way
    wanted: dict[tuple[str, str], str] = {}
    for identifier in identifiers:
        namespace = BaseCatalog.namespace_to_string(BaseCatalog.namespace_from(identifier))
        wanted[(namespace, BaseCatalog.table_name_from(identifier))] = identifier
    found: dict[str, str | None] = dict.fromkeys(identifiers)
    keys = list(wanted)
    type_filter = catalog._iceberg_type_filter()
    mark = _DRIVER_MARKS.get(catalog.engine.dialect.paramstyle)
    with catalog.engine.connect() as connection:
        for start in range(0, len(keys), SQL_BATCH):
            batch = keys[start : start + SQL_BATCH]
            namespaces, names = sorted({ns for ns, _ in batch}), sorted({name for _, name in batch})
            if mark is not None:  # the statement as the driver takes it: SQLAlchemy's binding of long IN lists costs
                # ~15 µs per name (17 ms of the 20 ms of 1,000 tables on SQLite)
                rows = connection.exec_driver_sql(*_pointer_query(catalog.name, namespaces, names, mark, type_filter is not None))
            else:
                stmt = select(IcebergTables.table_namespace, IcebergTables.table_name, IcebergTables.metadata_location).where(
                    IcebergTables.catalog_name == catalog.name,
                    IcebergTables.table_namespace.in_(namespaces),
                    IcebergTables.table_name.in_(names),
                )
                rows = connection.execute(stmt if type_filter is None else stmt.where(type_filter))
            for namespace, name, location in rows:
                identifier = wanted.get((namespace, name))
                if identifier is not None and location:
                    found[identifier] = location
    return found


def sql_table_identifiers(catalog: Catalog) -> list[str] | None:
    """Every Iceberg table of a ``SqlCatalog`` (``"ns.table"``, nested namespaces dotted), in one query: what walking
    ``list_namespaces`` and ``list_tables`` finds (those cost two queries per namespace, plus its existence check).
    None when ``catalog`` is not a plain ``SqlCatalog`` (one that lists its own way walks the namespaces)."""
    from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
    from sqlalchemy import select

    if not isinstance(catalog, SqlCatalog) or {"list_tables", "list_namespaces"} & set(vars(catalog)):
        return None
    if type(catalog).list_tables is not SqlCatalog.list_tables or type(catalog).list_namespaces is not SqlCatalog.list_namespaces:
        return None
    stmt = select(IcebergTables.table_namespace, IcebergTables.table_name).where(IcebergTables.catalog_name == catalog.name)
    type_filter = catalog._iceberg_type_filter()
    with catalog.engine.connect() as connection:
        rows = connection.execute(stmt if type_filter is None else stmt.where(type_filter))
        return [f"{namespace}.{name}" for namespace, name in rows]


_DRIVER_MARKS = {"qmark": "?", "format": "%s", "pyformat": "%s"}
"""The positional placeholder of each DB-API paramstyle that takes a tuple (sqlite3: qmark; psycopg, psycopg2, PyMySQL:
(py)format); a driver of another style gets the SQLAlchemy statement."""


def _pointer_query(
    catalog_name: str, namespaces: Sequence[str], names: Sequence[str], mark: str, typed: bool
) -> tuple[str, tuple[str, ...]]:
    """pyiceberg's pointer lookup (``SqlCatalog.load_table``'s WHERE, its table-type filter when ``typed``) for many
    tables, as SQL text with ``mark`` placeholders and its parameters."""
    from pyiceberg.catalog.sql import ICEBERG_TABLE_TYPE, IcebergTables

    def marks(values: Sequence[str]) -> str:
        return ", ".join([mark] * len(values))

    sql = (
        f"SELECT table_namespace, table_name, metadata_location FROM {IcebergTables.__tablename__} "
        f"WHERE catalog_name = {mark} AND table_namespace IN ({marks(namespaces)}) AND table_name IN ({marks(names)})"
    )
    params = (catalog_name, *namespaces, *names)
    if typed:
        sql += f" AND (iceberg_type = {mark} OR iceberg_type IS NULL)"
        params += (ICEBERG_TABLE_TYPE,)
    return sql, params


def metadata_locations(catalog: Catalog, identifiers: Sequence[str]) -> dict[str, str | None] | None:
    """``{"ns.table": metadata location}`` (None: no such Iceberg table) from the catalog's pointers alone, in a
    few calls for many tables: SQL (``sql_metadata_locations``), a Hive Metastore (one
    ``get_table_objects_by_name`` per database) or Glue (``GetTables`` per database, paginated). None for any other
    catalog, or a subclass that loads its own way: its tables are loaded one by one."""
    found = sql_metadata_locations(catalog, identifiers)
    if found is not None:
        return found
    kind = (type(catalog).__module__, type(catalog).__name__)  # not imported: each needs its extra installed
    for cls, pointers in ((("pyiceberg.catalog.hive", "HiveCatalog"), _hive_pointers),
                          (("pyiceberg.catalog.glue", "GlueCatalog"), _glue_pointers)):
        if kind == cls and "load_table" not in vars(catalog):
            by_database: dict[str, dict[str, str]] = {}
            for identifier in identifiers:
                parts = identifier.split(".")
                if len(parts) == 2:  # Hive and Glue have one level of namespace
                    by_database.setdefault(parts[0], {})[parts[1]] = identifier
            found = dict.fromkeys(identifiers)
            for database, names in by_database.items():
                for name, location in pointers(catalog, database, sorted(names)).items():
                    if name in names:
                        found[names[name]] = location
            return found
    return None


def _iceberg_location(parameters: Mapping[str, str] | None) -> str | None:
    from pyiceberg.catalog import ICEBERG, METADATA_LOCATION, TABLE_TYPE

    parameters = parameters or {}
    if str(parameters.get(TABLE_TYPE, "")).lower() != ICEBERG:
        return None
    return parameters.get(METADATA_LOCATION) or None


def _hive_pointers(catalog: Catalog, database: str, names: Sequence[str]) -> dict[str, str | None]:
    """One Thrift call for the tables ``names`` of ``database`` (names the metastore lower-cased matched back)."""
    from hive_metastore.ttypes import NoSuchObjectException, UnknownDBException

    lowered = {name.lower(): name for name in names}
    with catalog._client as client:  # type: ignore[attr-defined]  # pyiceberg's HiveCatalog: a Thrift client
        try:
            tables = client.get_table_objects_by_name(database, list(names))
        except (NoSuchObjectException, UnknownDBException):
            return {}
    return {lowered.get(t.tableName.lower(), t.tableName): _iceberg_location(t.parameters) for t in tables}


def _glue_pointers(catalog: Catalog, database: str, names: Sequence[str]) -> dict[str, str | None]:
    """``GetTables`` of ``database``, page by page (every table of it: Glue has no batch get by name)."""
    glue = catalog.glue  # type: ignore[attr-defined]  # pyiceberg's GlueCatalog: a boto3 Glue client
    lowered = {name.lower(): name for name in names}
    found: dict[str, str | None] = {}
    try:
        for page in glue.get_paginator("get_tables").paginate(DatabaseName=database):
            for table in page.get("TableList", []):
                name = lowered.get(table["Name"].lower())
                if name is not None:
                    found[name] = _iceberg_location(table.get("Parameters"))
    except glue.exceptions.EntityNotFoundException:
        return {}
    return found


def is_sql_catalog(catalog: Catalog) -> bool:
    """Whether ``catalog`` is pyiceberg's ``SqlCatalog`` (its database has the ``iceberg_tables`` schema)."""
    from pyiceberg.catalog.sql import SqlCatalog

    return isinstance(catalog, SqlCatalog)


def sql_catalog_names(catalog: Catalog) -> set[str] | None:
    """Every catalog name the database of a ``SqlCatalog`` holds tables or namespaces for (None: not a SqlCatalog).

    A database without pyiceberg's tables (yet) holds no names.
    """
    from pyiceberg.catalog.sql import IcebergNamespaceProperties, IcebergTables, SqlCatalog
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    if not isinstance(catalog, SqlCatalog):
        return None
    names: set[str] = set()
    for column in (IcebergTables.catalog_name, IcebergNamespaceProperties.catalog_name):
        try:
            with catalog.engine.connect() as connection:
                names.update(row[0] for row in connection.execute(select(column).distinct()))
        except SQLAlchemyError:
            pass  # a table the database lacks: what was read is what there is
    return names


def sqlite_has_catalog_tables(path: str) -> bool:
    """Whether the SQLite file at ``path`` holds ``SqlCatalog``'s ``iceberg_tables`` (opened read-only: creates nothing).

    Raises ``sqlite3.Error`` when the file is not a SQLite database.
    """
    import sqlite3
    from contextlib import closing
    from pathlib import Path

    from pyiceberg.catalog.sql import IcebergTables

    with closing(sqlite3.connect(f"{Path(path).as_uri()}?mode=ro", uri=True)) as connection:
        found = connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (IcebergTables.__tablename__,)
        ).fetchone()
    return found is not None


# --- 5. reading a metadata file as SqlCatalog.load_table reads it ---------------------------------------
def metadata_file_io(catalog: Catalog, location: str) -> FileIO:
    """The FileIO ``SqlCatalog`` reads a metadata file with (the catalog's properties, the location's scheme)."""
    from pyiceberg.io import load_file_io

    return load_file_io(properties=catalog.properties, location=location)


def parse_metadata(data: bytes, location: str) -> TableMetadata:
    """pyiceberg's own parse of a metadata file's bytes (its gzip rule: ``*.gz.metadata.json``)."""
    import io

    from pyiceberg.serializers import Compressor, FromByteStream

    return FromByteStream.table_metadata(io.BytesIO(data), compression=Compressor.get_compressor(location=location))


def open_table(catalog: Catalog, identifier: str, location: str, *, io: FileIO | None = None) -> Table:
    """The ``Table`` ``load_table`` returns while ``location`` is the table's current metadata file.

    ``io``: the FileIO to read it and its data with (a REST table's, carrying what its server vended);
    by default the one ``SqlCatalog`` builds from the catalog's and the table's properties.
    """
    from pyiceberg.catalog import Catalog as BaseCatalog
    from pyiceberg.serializers import FromInputFile
    from pyiceberg.table import Table

    metadata = FromInputFile.table_metadata((io or metadata_file_io(catalog, location)).new_input(location))
    return Table(
        identifier=BaseCatalog.identifier_to_tuple(identifier),
        metadata=metadata,
        metadata_location=location,
        io=io or catalog._load_file_io(metadata.properties, location),
        catalog=catalog,
    )


# --- 7. a REST catalog's loadTable, conditional and raw ----------------------------------------------
class RestAnswer(NamedTuple):
    """A loadTable answer: ``status`` 200 (``body`` holds the LoadTableResult) or 304 (unchanged since ``etag``)."""

    status: int
    etag: str | None
    body: bytes


def is_rest_catalog(catalog: Catalog) -> bool:
    """Whether ``catalog`` is pyiceberg's ``RestCatalog`` (or a subclass): a requests session to its URI."""
    from pyiceberg.catalog.rest import RestCatalog

    return isinstance(catalog, RestCatalog) and hasattr(catalog, "_session")


def rest_loads_raw(catalog: Catalog) -> bool:
    """Whether ``rest_load_table`` may ask ``catalog``: a plain ``RestCatalog`` (not a subclass, ``load_table``
    not replaced) with a snapshot-loading mode ``load_table`` accepts."""
    from pyiceberg.catalog.rest import SNAPSHOT_LOADING_MODE, RestCatalog

    if type(catalog) is not RestCatalog or "load_table" in vars(catalog):
        return False
    return catalog.properties.get(SNAPSHOT_LOADING_MODE) in (None, "", "all", "refs")


def rest_load_table(catalog: Catalog, identifier: str, etag: str | None) -> RestAnswer | None:
    """One loadTable request of a ``RestCatalog`` (``rest_loads_raw``), ``If-None-Match: etag`` when given.

    It answers 200 and 304 only; any other answer (404, an expired token, a server error) is None, and
    the caller asks ``catalog.load_table``, which raises or retries exactly as pyiceberg does. Safe to
    call from several threads (requests' connection pool is).
    """
    from pyiceberg.catalog.rest import SNAPSHOT_LOADING_MODE, Capability, Endpoints

    catalog._check_endpoint(Capability.V1_LOAD_TABLE)  # type: ignore[attr-defined]
    mode = catalog.properties.get(SNAPSHOT_LOADING_MODE)
    params = {"snapshots": mode} if mode else {}  # as load_table sends it
    url = catalog.url(Endpoints.load_table, prefixed=True, **catalog._split_identifier_for_path(identifier))  # type: ignore[attr-defined]
    session = catalog._session  # type: ignore[attr-defined]
    request = Request("GET", url, params=params, headers={"If-None-Match": etag} if etag else None)
    # what Session.get does, but the environment's proxy and CA settings (requests reads all of os.environ
    # for them, twice a request: a quarter of a conditional load) are read once per session and host
    response = session.send(session.prepare_request(request), allow_redirects=True,
                            **_environment_settings(session, catalog.uri))  # type: ignore[attr-defined]
    if response.status_code == 304 and etag:
        return RestAnswer(304, answer_etag(response) or etag, b"")  # a server may omit it on a 304
    if response.status_code == 200:
        return RestAnswer(200, answer_etag(response), response.content)
    return None


def answer_etag(response: Any) -> str | None:
    """The answer's ``ETag`` as the next ``If-None-Match`` must carry it.

    Jetty's ``CompressionHandler`` (Iceberg's REST fixture, and any server behind Jetty's gzip) appends
    ``--<coding>`` to the ETag of an answer it compressed, and removes that suffix from a later
    ``If-None-Match`` only when the tag is a quoted entity-tag. Iceberg 1.11's servlet sends its ETags
    unquoted, so the suffixed tag sent back never matches and every conditional load is answered with a
    whole 200 (docs/catalogs.md). The tag the server's application compares is that of the unencoded
    answer: a suffix naming the answer's own ``Content-Encoding`` is dropped (quoted or not). Harmless
    elsewhere: a tag that did end so would only miss its 304 and be answered whole, never wrongly.
    """
    etag = response.headers.get("ETag")
    coding = (response.headers.get("Content-Encoding") or "").strip().lower()
    if not etag or not coding or "," in coding:
        return etag
    quote = '"' if etag.endswith('"') else ""
    core = etag[: len(etag) - len(quote)]
    suffix = f"--{coding}"
    if core.endswith(suffix) and len(core) > len(suffix) + (1 if quote else 0):
        return core[: -len(suffix)] + quote
    return etag


_SETTINGS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], dict[str, Any]]] = weakref.WeakKeyDictionary()


#: what requests reads from the environment for a request (proxies, CA bundles), in either case
_ENVIRONMENT = tuple(name for base in ("http_proxy", "https_proxy", "all_proxy", "no_proxy") for name in (base, base.upper())) \
    + ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


def _environment_settings(session: Any, uri: str) -> dict[str, Any]:
    """``session.merge_environment_settings`` for requests to ``uri`` (proxies, verify, cert, stream), kept per
    session while the environment variables it reads keep their values."""
    key = (uri, session.trust_env, tuple(os.environ.get(name) for name in _ENVIRONMENT))
    per_session = _SETTINGS.setdefault(session, {})
    settings = per_session.get(key)
    if settings is None:
        settings = per_session[key] = session.merge_environment_settings(uri, {}, None, None, None)
    return settings


IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
IDEMPOTENCY_KEY_LIFETIME = "idempotency-key-lifetime"
"""The top-level field of ``GET /v1/config`` by which a REST server says it de-duplicates keyed mutations."""
_KEY = threading.local()
"""The Idempotency-Key of the commit this thread is sending (``idempotency_key``), or none."""
_LIFETIMES: weakref.WeakKeyDictionary[Any, float | None] = weakref.WeakKeyDictionary()


class TimedAdapter(HTTPAdapter):
    """requests' ``HTTPAdapter`` with a default timeout: a request nobody answers fails with ``Timeout``
    after ``timeout`` seconds instead of hanging (requests' default: wait forever). It also puts the
    thread's ``Idempotency-Key`` (``idempotency_key``) on the POST it sends while one is set."""

    def __init__(self, *args: Any, timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout = timeout

    def send(self, request: Any, stream: bool = False, timeout: Any = None, *args: Any, **kwargs: Any) -> Any:
        key = getattr(_KEY, "value", None)
        if key is not None and request.method == "POST":
            request.headers[IDEMPOTENCY_KEY_HEADER] = key
        return super().send(request, stream, self.timeout if timeout is None else timeout, *args, **kwargs)


_ISO_DURATION = re.compile(
    r"P(?:(?P<days>\d+(?:\.\d+)?)D)?(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?"
)


def parse_iso_duration(text: str) -> float | None:
    """Seconds of an ISO-8601 duration of days and time (``PT30M``, ``P1DT2H``, ``PT0.5S``), as Java's
    ``Duration.parse`` reads them; None when ``text`` is not one, or is not positive."""
    match = _ISO_DURATION.fullmatch(text.strip().upper()) if isinstance(text, str) else None
    if match is None or text.strip().upper().endswith(("P", "T")):
        return None
    parts = {name: float(value) for name, value in match.groupdict().items() if value is not None}
    seconds = (parts.get("days", 0) * 86400 + parts.get("hours", 0) * 3600 + parts.get("minutes", 0) * 60
               + parts.get("seconds", 0))
    return seconds if seconds > 0 else None


def idempotency_key_lifetime(catalog: Catalog) -> float | None:
    """Seconds for which ``catalog``'s REST server de-duplicates a keyed commit (its config's
    ``idempotency-key-lifetime``), or None: not a REST catalog, no lifetime advertised, or a session adapter
    that cannot carry the key. One ``GET /v1/config`` per catalog object; a fault on it is not kept (None now,
    asked again at the next commit)."""
    if not is_rest_catalog(catalog):
        return None
    if catalog in _LIFETIMES:
        return _LIFETIMES[catalog]
    from pyiceberg.catalog import WAREHOUSE_LOCATION
    from pyiceberg.catalog.rest import Endpoints

    session = catalog._session  # type: ignore[attr-defined]
    params = {}
    if warehouse := catalog.properties.get(WAREHOUSE_LOCATION):
        params[WAREHOUSE_LOCATION] = warehouse
    try:
        response = session.get(catalog.url(Endpoints.get_config, prefixed=False), params=params)  # type: ignore[attr-defined]
    except OSError:  # requests' ConnectionError, Timeout...: a fault, asked again next time
        return None
    if response.status_code >= 500 or response.status_code == 429:
        return None
    lifetime = None
    if response.status_code == 200:
        try:
            advertised = response.json().get(IDEMPOTENCY_KEY_LIFETIME)
        except ValueError:
            advertised = None
        lifetime = parse_iso_duration(advertised) if isinstance(advertised, str) else None
    if lifetime is not None and not _keying_adapter(catalog):
        lifetime = None
    _LIFETIMES[catalog] = lifetime
    return lifetime


def _keying_adapter(catalog: Catalog) -> bool:
    """Whether the session adapter for ``catalog``'s URI puts the key on (a ``TimedAdapter``, mounted in place of
    a plain ``HTTPAdapter`` with its settings); another adapter (SigV4) is left alone: False."""
    session = catalog._session  # type: ignore[attr-defined]
    uri = catalog.uri  # type: ignore[attr-defined]
    adapter = session.get_adapter(uri)
    if type(adapter) is TimedAdapter:
        return True
    if type(adapter) is not HTTPAdapter:
        return False
    session.mount(uri, TimedAdapter(pool_connections=adapter._pool_connections, pool_maxsize=adapter._pool_maxsize,
                                    max_retries=adapter.max_retries, pool_block=adapter._pool_block))
    return True


def new_idempotency_key() -> str:
    """A UUIDv7 (RFC 9562: 48 bits of Unix milliseconds, then random bits), as Iceberg's Java client makes them."""
    value = (time.time_ns() // 1_000_000) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # variant 10
    return str(uuid.UUID(int=value))


@contextlib.contextmanager
def idempotency_key(key: str | None) -> Iterator[None]:
    """Within the block, this thread's POSTs through a ``TimedAdapter`` carry ``Idempotency-Key: key`` (None: none)."""
    before = getattr(_KEY, "value", None)
    _KEY.value = key
    try:
        yield
    finally:
        _KEY.value = before


def widen_rest_connections(catalog: Catalog, connections: int, timeout: float | None = None) -> int:
    """Let ``connections`` requests to a ``RestCatalog`` be in flight at once, each answered within ``timeout``
    seconds (None: as configured before); the pool size it ends up with."""
    session = catalog._session  # type: ignore[attr-defined]
    uri = catalog.uri  # type: ignore[attr-defined]
    adapter = session.get_adapter(uri)
    if type(adapter) not in (HTTPAdapter, TimedAdapter):
        return 10 if not hasattr(adapter, "_pool_maxsize") else adapter._pool_maxsize
    size = max(connections, adapter._pool_maxsize)
    before = getattr(adapter, "timeout", None)
    if size == adapter._pool_maxsize and (timeout is None or timeout == before):
        return size
    session.mount(uri, TimedAdapter(pool_connections=adapter._pool_connections, pool_maxsize=size,
                                    max_retries=adapter.max_retries, pool_block=adapter._pool_block,
                                    timeout=before if timeout is None else timeout))
    return size


def parse_load_result(data: bytes) -> tuple[str | None, TableMetadata]:
    """pyiceberg's own parse of a LoadTableResult body: (metadata location, metadata)."""
    from pyiceberg.catalog.rest import TableResponse

    response = TableResponse.model_validate_json(data)
    return response.metadata_location, response.metadata


# --- 6. a snapshot without data ------------------------------------------------------------------------
#: the totals a snapshot summary carries (Iceberg spec, "Snapshot summary"), all zero for no data
EMPTY_TOTALS = {key: "0" for key in ("total-records", "total-files-size", "total-data-files", "total-delete-files",
                                     "total-position-deletes", "total-equality-deletes")}

def empty_snapshot(
    table: Table, summary: Mapping[str, str], *, metadata: TableMetadata | None = None, sequence_number: int | None = None
) -> Snapshot:
    """A new snapshot of ``table`` holding no data, without a parent, its empty manifest list written.

    Without a parent it starts no history of its own (expiry keeps only what a ref points at) and the
    catalogs accept any sequence number for it (``parent-snapshot-id`` null is exempt from the
    "older than last sequence number" check in pyiceberg and Java); it takes ``last-sequence-number + 1``
    of ``metadata`` (default: the table's) unless ``sequence_number`` is given (a second snapshot of the
    same commit), which is exact as long as the commit also asserts every branch head of that metadata
    (no other snapshot can land in between).
    """
    import uuid

    from pyiceberg.manifest import write_manifest_list
    from pyiceberg.table.snapshots import Snapshot, Summary

    base = table.metadata if metadata is None else metadata
    snapshot_id = base.new_snapshot_id()
    sequence = (sequence_number or base.next_sequence_number()) if base.format_version >= 2 else None
    path = table.location_provider().new_metadata_location(f"snap-{snapshot_id}-0-{uuid.uuid4()}.avro")
    with write_manifest_list(
        format_version=base.format_version,
        output_file=table.io.new_output(path),
        snapshot_id=snapshot_id,
        parent_snapshot_id=None,
        sequence_number=sequence,
        avro_compression="deflate",
    ):
        pass
    extra: dict[str, int | None] = {}
    if base.format_version >= 3:
        extra = {"first_row_id": base.next_row_id, "added_rows": 0}
    return Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=None,
        sequence_number=sequence,
        manifest_list=path,
        summary=Summary(Operation.APPEND, **EMPTY_TOTALS, **summary),
        schema_id=base.current_schema_id,
        **extra,
    )


def validates_client_side(catalog: Catalog) -> bool:
    """Whether pyiceberg validates the requirements of ``catalog``'s commits (``update_table_metadata``),
    as the SQL, Glue, Hive and DynamoDB catalogs do; a REST catalog sends them to its server."""
    from pyiceberg.catalog.rest import RestCatalog

    return not isinstance(catalog, RestCatalog)


# --- 8. an append whose data files are written once ------------------------------------------------
def write_data_files(table: Table, data: pa.Table) -> list[DataFile]:
    """``data`` written as the table's data files (Parquet), not yet part of any snapshot (``append`` checks the
    schema the same way first). None for no rows: an append of nothing still commits a snapshot."""
    import uuid

    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible, _dataframe_to_data_files

    metadata = table.metadata
    _check_pyarrow_schema_compatible(metadata.schema(), provided_schema=data.schema,
                                     format_version=metadata.format_version)
    if data.num_rows == 0:
        return []
    return list(_dataframe_to_data_files(table_metadata=metadata, write_uuid=uuid.uuid4(), df=data, io=table.io))


def append_data_files(tx: Transaction, files: Sequence[DataFile], snapshot_properties: Mapping[str, str]) -> None:
    """Append already written data ``files`` to ``main`` in ``tx``: the snapshot ``tx.append`` would make."""
    with tx._append_snapshot_producer(dict(snapshot_properties), branch=MAIN_BRANCH_NAME) as append:
        for data_file in files:
            append.append_data_file(data_file)
