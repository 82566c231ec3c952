"""The crash-injection lake: its tables, jobs, crash points and barriers (shared by worker, oracle and driver).

Standard library only: the worker imports this before its clock starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

WORDS, COUNTS, HISTOGRAM, COPY = "demo.words", "demo.word_counts", "demo.count_histogram", "demo.words_copy"
TABLES = (WORDS, COUNTS, HISTOGRAM, COPY)
JOBS: dict[str, tuple[str, str, str]] = {
    # job id: (source, sink, write mode)
    "word-count": (WORDS, COUNTS, "overwrite"),
    "count-histogram": (COUNTS, HISTOGRAM, "overwrite"),
    "copy": (WORDS, COPY, "append"),
}
JOB_CHOICES = (*JOBS, "all")
SINKS = frozenset(sink for _, sink, _ in JOBS.values())
CRASH_POINTS = ("before-stage", "during-stage", "after-stage", "during-publish", "after-publish")
COLUMNS = {WORDS: ("word",), COUNTS: ("word", "cnt"), HISTOGRAM: ("cnt", "words"), COPY: ("word",)}
# Cuts the independent reader computes itself with protocol §4's T* = min W(X): the FLIP chain, its first
# link, and the append-only copy. Siblings (word_counts next to words_copy) are not mixed in these:
# their jobs choose different epoch boundaries, so T* of a sibling set may be a barrier one of them
# skipped, and the project's resolver then picks an older barrier at which all are complete.
CUT_GROUPS = ((WORDS, COUNTS), (WORDS, COUNTS, HISTOGRAM), (WORDS, COPY))
# The project's resolver is also asked for the cut over all four tables (siblings included), and that
# cut is checked on raw rows too.
READ_GROUPS = (*CUT_GROUPS, TABLES)
BASE_BARRIER = 1_700_000_000_000
BARRIER_STEP = 1_000
ROWS_PER_EPOCH = 12
EXIT_FENCED = 3
REST_NOT_SENT = "rest-request-not-sent"
"""What a worker on a REST lake reports as the metadata file of a commit it was killed inside (the server
writes the file, and never got the request)."""


CATALOG_FILE = "catalog.json"
"""In a lake directory: how to open its catalog when it is not the SQLite ``catalog.db`` next to it (a REST
catalog: pyiceberg catalog properties, plus ``sqlite``: the server-side file holding the catalog rows)."""


def catalog_config(directory: str | Path) -> dict[str, str] | None:
    """The lake's ``catalog.json`` (see ``CATALOG_FILE``), or None for a SQLite lake."""
    path = Path(directory).resolve() / CATALOG_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def write_catalog_config(directory: str | Path, properties: dict[str, str], sqlite: str | Path) -> None:
    """Make ``directory`` a lake on another catalog (e.g. a REST server's), whose rows are in ``sqlite``."""
    root = Path(directory).resolve()
    root.mkdir(parents=True, exist_ok=True)
    (root / CATALOG_FILE).write_text(json.dumps({**properties, "sqlite": str(sqlite)}), encoding="utf-8")


def catalog_db(directory: str | Path) -> Path:
    """The SQLite file holding the lake's ``iceberg_tables`` rows (the independent reader reads it)."""
    config = catalog_config(directory)
    return Path(config["sqlite"]) if config is not None else Path(directory).resolve() / "catalog.db"


def open_catalog(directory: str | Path) -> Any:
    config = catalog_config(directory)
    if config is not None:
        from pyiceberg.catalog import load_catalog

        return load_catalog("lake", **{k: v for k, v in config.items() if k != "sqlite"})
    from pyiceberg.catalog.sql import SqlCatalog

    root = Path(directory).resolve()
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    return SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
