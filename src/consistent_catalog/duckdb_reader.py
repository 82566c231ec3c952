"""DuckDB as an independent reader of a consistent cut (its Iceberg extension, no pyiceberg data path).

A cut is only snapshot ids (protocol §4), so any Iceberg engine can read it. DuckDB reads each table
straight from its ``metadata.json`` with ``iceberg_scan(..., snapshot_from_id => <id>)``: the
manifests, data and delete files are DuckDB's own work, which makes it a check of the cut that shares
no read code with pyiceberg or Spark.

>>> from consistent_catalog.duckdb_reader import read_cut_duckdb      # doctest: +SKIP
>>> tables = read_cut_duckdb(cc, cc.resolve(["demo.words", "demo.word_counts"]))  # doctest: +SKIP
>>> tables["demo.word_counts"].num_rows                                # doctest: +SKIP

Offline: the extensions come from PyPI (``pip install 'consistent-catalog[duckdb]'``: ``duckdb``,
``duckdb-extension-iceberg``, ``-avro`` and, for S3 warehouses, ``-httpfs``, all 1.5.5) and are loaded
from the installed files, so DuckDB never downloads anything and nothing is written under ``~/.duckdb``.
With network access DuckDB's own ``INSTALL iceberg`` works as well.

Also a command that prints the DuckDB SQL (one view per table, pinned at the cut)::

    consistent-catalog --catalog lake duckdb demo.words demo.word_counts > cut.sql
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from consistent_catalog.barrier import BarrierLike
from consistent_catalog.catalog import ConsistentCatalog
from consistent_catalog.exceptions import CatalogConfigError
from consistent_catalog.resolver import DEFAULT_LEVEL, Cut
from consistent_catalog.sql import view_names
from consistent_catalog.util.identifiers import normalize_identifier

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

__all__ = [
    "connect",
    "cut_statements",
    "duckdb_s3_secret",
    "quote_identifier",
    "quote_literal",
    "read_cut_duckdb",
    "register_cut_views",
    "scan_sql",
]

INSTALL_HINT = "pip install 'consistent-catalog[duckdb]' (duckdb==1.5.5 with duckdb-extension-iceberg/-avro/-httpfs==1.5.5)"
# avro before iceberg: iceberg reads manifests through it and would otherwise try to auto-install it.
EXTENSIONS = ("avro", "iceberg")
S3_EXTENSION = "httpfs"
SECRET_NAME = "consistent_catalog_s3"


# --- SQL text ----------------------------------------------------------------------------------------
def quote_literal(text: str) -> str:
    """A SQL string literal (single quotes doubled), e.g. for a metadata location."""
    return "'" + text.replace("'", "''") + "'"


def quote_identifier(name: str) -> str:
    """A DuckDB identifier in double quotes (a double quote inside is doubled)."""
    return '"' + name.replace('"', '""') + '"'


def scan_sql(metadata_location: str, snapshot_id: int | None) -> str:
    """``SELECT`` of one table at one snapshot; ``snapshot_id=None`` gives the table's columns and no rows."""
    args = [quote_literal(metadata_location)]
    if metadata_location.endswith(".gz.metadata.json"):
        args.append("metadata_compression_codec => 'gzip'")
    if snapshot_id is None:
        return f"SELECT * FROM iceberg_scan({', '.join(args)}) LIMIT 0"
    args.append(f"snapshot_from_id => {int(snapshot_id)}")
    return f"SELECT * FROM iceberg_scan({', '.join(args)})"


def metadata_locations(cc: ConsistentCatalog, tables: Iterable[str]) -> dict[str, str]:
    """The current ``metadata.json`` of each table; it lists every snapshot a cut can name (until expiry)."""
    found = {}
    for name in tables:
        location = cc.load_table(name).metadata_location
        if not location:
            raise CatalogConfigError(f"{name} has no metadata location in catalog {cc.name!r}; DuckDB cannot read it")
        found[normalize_identifier(name)] = location
    return found


def cut_statements(cc: ConsistentCatalog, cut: Cut, *, secret: str | None = None) -> list[str]:
    """DuckDB statements creating one view per table of the cut (named as ``resolve --sql`` names them).

    ``secret`` (from ``duckdb_s3_secret``) is put first when the warehouse is on S3. The extensions
    must be loaded first (``connect`` does it; in the DuckDB CLI ``LOAD iceberg;``).
    """
    locations = metadata_locations(cc, cut.tables)
    names = view_names(list(cut.tables))
    statements = [f"-- {cut.level} cut at barrier {cut.barrier}"]
    if secret:
        statements.append(secret)
    for table, part in cut.tables.items():
        statements.append(
            f"CREATE OR REPLACE VIEW {quote_identifier(names[table])} AS {scan_sql(locations[table], part.snapshot_id)};"
        )
    return statements


# --- S3 ----------------------------------------------------------------------------------------------
def duckdb_s3_secret(properties: Mapping[str, str], *, name: str = SECRET_NAME) -> str | None:
    """A ``CREATE SECRET`` for DuckDB's S3 access from pyiceberg's FileIO properties, or None without them.

    Reads ``s3.endpoint``, ``s3.access-key-id``, ``s3.secret-access-key``, ``s3.session-token``,
    ``s3.region``; a custom endpoint (MinIO, moto, ...) gets path-style URLs, and ``http://`` turns TLS off.
    """
    keys = ("s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.session-token", "s3.region")
    if not any(properties.get(k) for k in keys):
        return None
    options = ["TYPE s3"]
    if properties.get("s3.access-key-id"):
        options.append(f"KEY_ID {quote_literal(properties['s3.access-key-id'])}")
    if properties.get("s3.secret-access-key"):
        options.append(f"SECRET {quote_literal(properties['s3.secret-access-key'])}")
    if properties.get("s3.session-token"):
        options.append(f"SESSION_TOKEN {quote_literal(properties['s3.session-token'])}")
    if properties.get("s3.region"):
        options.append(f"REGION {quote_literal(properties['s3.region'])}")
    endpoint = properties.get("s3.endpoint")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        options.append(f"ENDPOINT {quote_literal(parts.netloc + parts.path.rstrip('/'))}")
        options.append(f"USE_SSL {'false' if parts.scheme == 'http' else 'true'}")
        virtual = str(properties.get("s3.force-virtual-addressing", "false")).lower() == "true"
        options.append(f"URL_STYLE {quote_literal('vhost' if virtual else 'path')}")
    return f"CREATE OR REPLACE SECRET {quote_identifier(name)} ({', '.join(options)});"


# --- connections -------------------------------------------------------------------------------------
def _import_duckdb() -> Any:
    try:
        return importlib.import_module("duckdb")
    except ImportError:
        raise ImportError(f"DuckDB is not installed; {INSTALL_HINT}") from None


def _packaged_extension(name: str, version: str) -> Path | None:
    """The extension file shipped by the PyPI package ``duckdb-extension-<name>``, if installed."""
    try:
        module = importlib.import_module(f"duckdb_extension_{name}")
    except ImportError:
        return None
    for location in getattr(module, "__path__", []):
        path = Path(location) / "extensions" / version / f"{name}.duckdb_extension"
        if path.is_file():
            return path
    return None


def load_extension(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Load ``name`` from its PyPI package file, else from DuckDB's own extension directory."""
    version = con.execute("PRAGMA version").fetchone()[0]
    packaged = _packaged_extension(name, version)
    try:
        con.execute(f"LOAD {quote_literal(str(packaged))}" if packaged else f"LOAD {name}")
    except Exception as exc:  # duckdb raises its own IOException/CatalogException hierarchy
        raise CatalogConfigError(
            f"DuckDB {version} cannot load its {name!r} extension ({str(exc).splitlines()[0]}); "
            f"{INSTALL_HINT.replace('pip', 'run: pip', 1)}, or with network access: INSTALL {name}"
        ) from None


def connect(
    properties: Mapping[str, str] | None = None,
    *,
    s3: bool = False,
    connection: duckdb.DuckDBPyConnection | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the Iceberg extension loaded (and S3 configured from ``properties``).

    ``properties`` are the pyiceberg catalog's (``cc.catalog.properties``): when they hold ``s3.*``
    FileIO settings (or ``s3=True``), httpfs is loaded, and a DuckDB secret with the same endpoint and
    keys is created. Without keys DuckDB falls back to its own S3 settings.
    """
    duckdb = _import_duckdb()
    con = connection if connection is not None else duckdb.connect(config={"autoinstall_known_extensions": False})
    secret = duckdb_s3_secret(properties or {})
    for name in (*EXTENSIONS, *((S3_EXTENSION,) if secret or s3 else ())):
        load_extension(con, name)
    if secret:
        con.execute(secret)
    return con


def _needs_s3(locations: Iterable[str]) -> bool:
    return any(loc.split("://", 1)[0].lower() in ("s3", "s3a", "s3n") for loc in locations)


# --- reading -----------------------------------------------------------------------------------------
def read_cut_duckdb(
    cc: ConsistentCatalog,
    cut: Cut | Iterable[str],
    *,
    level: str = DEFAULT_LEVEL,
    as_of: BarrierLike | None = None,
    connection: duckdb.DuckDBPyConnection | None = None,
) -> dict[str, pa.Table]:
    """Every table of ``cut`` read by DuckDB at the cut's snapshot ids, as Arrow tables.

    ``cut`` is a resolved ``Cut`` or table names (resolved here with ``level``/``as_of``). A table empty
    at the cut gives its columns and no rows.
    """
    if not isinstance(cut, Cut):
        cut = cc.resolve(cut, level=level, as_of=as_of)
    locations = metadata_locations(cc, cut.tables)
    s3 = _needs_s3(locations.values())
    con = connect(cc.catalog.properties if s3 else None, s3=s3, connection=connection)
    try:
        return {
            table: con.execute(scan_sql(locations[table], part.snapshot_id)).to_arrow_table()
            for table, part in cut.tables.items()
        }
    finally:
        if connection is None:
            con.close()


def register_cut_views(con: duckdb.DuckDBPyConnection, cc: ConsistentCatalog, cut: Cut) -> dict[str, str]:
    """Create one DuckDB view per table of the cut on ``con`` (``connect()``-ed); returns table -> view name."""
    for statement in cut_statements(cc, cut)[1:]:
        con.execute(statement)
    return view_names(list(cut.tables))
