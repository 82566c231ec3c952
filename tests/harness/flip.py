"""Independent checks of the FLIP-276 pipeline (protocol §7) from raw rows, for any engine and storage.

Rows are read with plain pyiceberg scans or DuckDB at a cut's snapshot ids, never with the project's
own reader, and the invariants are recomputed here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from consistent_catalog.demo import COUNTS, HISTOGRAM, TABLES, WORDS


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


@dataclass(frozen=True)
class Contents:
    """The three tables' rows as multisets: words, word -> cnt, cnt -> number of words with that count."""

    words: Counter[str]
    counts: dict[str, int]
    histogram: dict[int, int]

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, str, str]]) -> Contents:
        """From a UNION statement's (kind, value, n) rows."""
        words: Counter[str] = Counter()
        counts: dict[str, int] = {}
        histogram: dict[int, int] = {}
        for kind, value, n in rows:
            if kind == "W":
                words[value] += 1
            elif kind == "C":
                assert value not in counts, f"word_counts holds {value} twice"
                counts[value] = int(n)
            elif kind == "H":
                assert int(value) not in histogram, f"count_histogram holds {value} twice"
                histogram[int(value)] = int(n)
            else:
                raise AssertionError(f"unexpected row kind {kind!r}")
        return cls(words, counts, histogram)

    @classmethod
    def from_pyiceberg(cls, cc: Any, snapshot_ids: dict[str, int | None]) -> Contents:
        """An independent reader: pyiceberg scans of each table at the given snapshot ids (``cc``: anything with
        ``load_table``, a ConsistentCatalog or a pyiceberg catalog)."""
        data = {}
        for table in TABLES:
            snapshot_id = snapshot_ids[table]
            loaded = cc.load_table(table)
            data[table] = (loaded.schema().as_arrow().empty_table() if snapshot_id is None
                           else loaded.scan(snapshot_id=snapshot_id).to_arrow())
        counts = dict(zip(data[COUNTS]["word"].to_pylist(), data[COUNTS]["cnt"].to_pylist()))
        histogram = dict(zip(data[HISTOGRAM]["cnt"].to_pylist(), data[HISTOGRAM]["words"].to_pylist()))
        assert len(counts) == data[COUNTS].num_rows and len(histogram) == data[HISTOGRAM].num_rows
        return cls(Counter(data[WORDS]["word"].to_pylist()), counts, histogram)

    @property
    def count(self) -> int:
        return sum(self.words.values())

    def problems(self) -> list[str]:
        """FLIP-276's invariants (protocol §7), counted here."""
        found = []
        if sum(self.counts.values()) != self.count:
            found.append(f"sum(word_counts.cnt)={sum(self.counts.values())} != count(words)={self.count}")
        if self.counts != dict(self.words):
            wrong = sorted(w for w in set(self.counts) | set(self.words) if self.counts.get(w) != self.words.get(w))
            found.append(f"word_counts differs from a recount of words for {wrong[:5]}")
        if dict(Counter(self.counts.values())) != self.histogram:
            found.append("count_histogram is not the histogram of word_counts")
        return found
