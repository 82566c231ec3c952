"""The FLIP-276 tables' schemas and a SQLite-backed pyiceberg catalog, shared by fixtures, tests and workers."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

WORDS_SCHEMA = pa.schema([pa.field("word", pa.string())])
COUNTS_SCHEMA = pa.schema([pa.field("word", pa.string()), pa.field("cnt", pa.int64())])
HIST_SCHEMA = pa.schema([pa.field("cnt", pa.int64()), pa.field("words", pa.int64())])


def sqlite_catalog(directory: Path, name: str = "lake") -> SqlCatalog:
    """A pyiceberg SqlCatalog on ``directory/catalog.db`` with its warehouse in ``directory/warehouse``."""
    (directory / "warehouse").mkdir(parents=True, exist_ok=True)
    return SqlCatalog(name, uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/warehouse")


def words(*items: str) -> pa.Table:
    """A batch of rows for ``demo.words``."""
    return pa.table({"word": list(items)}, schema=WORDS_SCHEMA)
