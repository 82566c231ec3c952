"""The FLIP-276 tables' schemas and a SQLite-backed pyiceberg catalog, shared by fixtures, tests and workers."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

WORDS_SCHEMA = pa.schema([pa.field("word", pa.string())])
COUNTS_SCHEMA = pa.schema([pa.field("word", pa.string()), pa.field("cnt", pa.int64())])
HIST_SCHEMA = pa.schema([pa.field("cnt", pa.int64()), pa.field("words", pa.int64())])


def sqlite_catalog(directory: Path, name: str = "lake") -> SqlCatalog:
    """A pyiceberg SqlCatalog on ``directory/catalog.db`` with its warehouse in ``directory/warehouse``."""
    (directory / "warehouse").mkdir(parents=True, exist_ok=True)
    return SqlCatalog(name, uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/warehouse")


def spark_on_sqlite(root: Path, app_name: str) -> Iterator[tuple[SqlCatalog, Any]]:
    """A module's SQLite catalog in ``root`` and a Spark session (``build_session``: both catalogs) over it; on exit
    every streaming query still active is stopped, then the session (the body of the streaming tests' fixtures)."""
    from consistent_catalog.spark.session import build_session

    catalog = sqlite_catalog(root)
    spark = build_session(f"sqlite:///{root}/catalog.db", root / "warehouse", app_name=app_name)
    try:
        yield catalog, spark
    finally:
        for query in spark.streams.active:
            query.stop()
        spark.stop()


def open_catalog(lake: str | os.PathLike[str] | Mapping[str, str], name: str = "lake") -> Any:
    """A catalog another process can open too: ``lake`` is a lake directory (``sqlite_catalog``) or
    pyiceberg catalog properties for ``load_catalog`` (``catalog_spec``; e.g. a REST catalog)."""
    if isinstance(lake, Mapping):
        from pyiceberg.catalog import load_catalog

        return load_catalog(name, **dict(lake))
    return sqlite_catalog(Path(lake), name)


def catalog_spec(catalog: Any) -> dict[str, str]:
    """The properties that open ``catalog`` again in another process (``open_catalog``): plain strings."""
    from pyiceberg.catalog.rest import RestCatalog

    kind = "rest" if isinstance(catalog, RestCatalog) else "sql"
    keep = {k: v for k, v in catalog.properties.items() if isinstance(v, str) and k != "prefix"}
    return {**keep, "type": kind}


def words(*items: str) -> pa.Table:
    """A batch of rows for ``demo.words``."""
    return pa.table({"word": list(items)}, schema=WORDS_SCHEMA)


def lagging_word_counts(directory: Path, later: tuple[str, ...], t0: int) -> tuple[Any, Any]:
    """demo.words (W = t0 + 1000) -> demo.word_counts (W = t0) on a SQLite catalog in ``directory``: the job
    word-count (returned, registered) has published t0 but not the ingest of ``later`` at t0 + 1000 yet. The lake of
    the freshness waits (``wait``, the Airflow sensor and trigger)."""
    from consistent_catalog import ConsistentCatalog
    from consistent_catalog.demo import COUNTS, WORDS, count_words

    catalog = sqlite_catalog(directory)
    catalog.create_namespace("demo")
    catalog.create_table(WORDS, schema=WORDS_SCHEMA)
    catalog.create_table(COUNTS, schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    cc.ingest(WORDS, words("a", "b"), barrier=t0)
    job = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
    job.register()
    job.run_epoch()
    cc.ingest(WORDS, words(*later), barrier=t0 + 1_000)
    return cc, job
