"""Independent checks of the FLIP-276 pipeline (protocol §7) from raw rows, for any engine and storage.

Rows are read with plain pyiceberg scans or DuckDB at a cut's snapshot ids, never with the project's
own reader, and the invariants are recomputed here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from consistent_catalog.demo import COUNTS, HISTOGRAM, WORDS


def rows(table: Any) -> list[tuple]:
    """Order-independent, type-independent form of an Arrow table: sorted tuples of Python values."""
    return sorted(tuple(r.values()) for r in table.to_pylist())


def pyiceberg_rows(cc: Any, table: str, snapshot_id: int | None) -> list[tuple]:
    """Independent read: a plain pyiceberg scan at the snapshot id (no project code)."""
    if snapshot_id is None:
        return []
    return rows(cc.catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow())


def flip_problems(data: dict[str, list[tuple]]) -> list[str]:
    """Protocol §7 from raw rows (words: (word,), counts: (word, cnt), histogram: (cnt, words))."""
    expected_counts = dict(Counter(w for (w,) in data[WORDS]))
    counts = dict(data[COUNTS])
    expected_hist = dict(Counter(counts.values()))
    problems = []
    if counts != expected_counts:
        problems.append("word_counts is not the count of words")
    if dict(data[HISTOGRAM]) != expected_hist:
        problems.append("count_histogram is not the histogram of word_counts")
    return problems


def check_cut_with_duckdb(cc: Any, cut: Any) -> None:
    """DuckDB's rows equal pyiceberg's for every table of the cut, and satisfy protocol §7."""
    from consistent_catalog.duckdb_reader import read_cut_duckdb

    duck = read_cut_duckdb(cc, cut)
    for table, part in cut.tables.items():
        assert rows(duck[table]) == pyiceberg_rows(cc, table, part.snapshot_id), (cut, table)
    assert flip_problems({t: rows(d) for t, d in duck.items()}) == [], cut
