"""Shared fixtures: a real SQLite-backed pyiceberg catalog per test, and the FLIP-276 tables."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from consistent_catalog import ConsistentCatalog
from tests.servers import postgres_server, postgres_sql_catalog, s3_server  # noqa: F401  (session fixtures)

WORDS_SCHEMA = pa.schema([pa.field("word", pa.string())])
COUNTS_SCHEMA = pa.schema([pa.field("word", pa.string()), pa.field("cnt", pa.int64())])
HIST_SCHEMA = pa.schema([pa.field("cnt", pa.int64()), pa.field("words", pa.int64())])


def sqlite_catalog(directory: Path, name: str = "lake") -> SqlCatalog:
    (directory / "warehouse").mkdir(parents=True, exist_ok=True)
    return SqlCatalog(name, uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/warehouse")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.integration)])
def backend(request: pytest.FixtureRequest) -> str:
    """Catalog backends the behaviour tests run against: SQLite, and PostgreSQL on a server the session starts."""
    return request.param


@pytest.fixture
def catalog(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> SqlCatalog:
    if backend == "postgres":
        cat = postgres_sql_catalog(request.getfixturevalue("postgres_server"), tmp_path / "warehouse")
        request.addfinalizer(cat.engine.dispose)
    else:
        cat = sqlite_catalog(tmp_path)
    cat.create_namespace("demo")
    return cat


@pytest.fixture
def cc(catalog: SqlCatalog) -> ConsistentCatalog:
    return ConsistentCatalog(catalog)


@pytest.fixture
def flip_tables(catalog: SqlCatalog) -> tuple[str, str, str]:
    catalog.create_table("demo.words", schema=WORDS_SCHEMA)
    catalog.create_table("demo.word_counts", schema=COUNTS_SCHEMA)
    catalog.create_table("demo.count_histogram", schema=HIST_SCHEMA)
    return "demo.words", "demo.word_counts", "demo.count_histogram"


def words(*items: str) -> pa.Table:
    return pa.table({"word": list(items)}, schema=WORDS_SCHEMA)


@pytest.fixture
def make_words() -> Callable[..., pa.Table]:
    return words
