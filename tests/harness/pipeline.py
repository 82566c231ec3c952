"""The FLIP pipeline driven round by round, and independent checks of what landed: for fault tests and benchmarks.

``Pipeline(cc)`` runs rounds of: a keyed root ingest into ``demo.words``, an epoch of ``word-count``
(``demo.word_counts``) and one of ``histogram`` (``demo.count_histogram``), both overwrite-mode jobs kept
registered between rounds. ``pin``, ``expire`` and ``revise`` are the maintenance steps a fault test
mixes in. ``check(catalog)`` reads the catalog through another client (a direct connection, not the
one that met the faults) with plain pyiceberg and says what is wrong:

- every ingest key the pipeline still expects is on ``main`` exactly once (at most once where expiry
  cut the history short), and the rows of ``words`` at its head are exactly those batches (a doubled or
  lost ingest shows);
- every barrier on the derived tables' ``main`` was published by one attempt (an epoch done twice shows);
- the cut ``resolve`` gives through that client satisfies the FLIP invariants on rows read at its ids.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from consistent_catalog import ConsistentCatalog, EpochJob
from consistent_catalog import properties as P
from consistent_catalog.demo import count_words, histogram
from tests.harness.lake import COUNTS_SCHEMA, HIST_SCHEMA, WORDS_SCHEMA, words

WORDS, COUNTS, HIST = "demo.words", "demo.word_counts", "demo.count_histogram"
TABLES = (WORDS, COUNTS, HIST)
VOCABULARY = [f"w{i}" for i in range(12)]


def create_tables(catalog: Any) -> None:
    if ("demo",) not in catalog.list_namespaces():
        catalog.create_namespace("demo")
    catalog.create_table(WORDS, schema=WORDS_SCHEMA)
    catalog.create_table(COUNTS, schema=COUNTS_SCHEMA)
    catalog.create_table(HIST, schema=HIST_SCHEMA)


@dataclass
class Pipeline:
    cc: ConsistentCatalog
    seed: int = 0
    rows: int = 20
    base: int = field(default_factory=lambda: (int(time.time() * 1000) // 1000 - 3600) * 1000)
    """Barrier of round 0: an hour ago, so no barrier lies in the future."""
    expected: dict[str, list[str]] = field(default_factory=dict)
    """Ingest key -> the words of that batch, for every batch that should be on ``main``."""
    jobs: list[EpochJob] = field(default_factory=list)
    rounds: int = 0
    publish_ms: list[float] = field(default_factory=list)

    def __enter__(self) -> Pipeline:
        first = self.cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite")
        second = self.cc.job("histogram", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite")
        self.jobs = [first.__enter__(), second.__enter__()]
        return self

    def __exit__(self, *exc: Any) -> None:
        for job in reversed(self.jobs):
            job.__exit__(*exc)

    def barrier(self, round_: int) -> int:
        return self.base + round_ * 1000

    def batch(self, round_: int) -> list[str]:
        rng = random.Random(self.seed * 100_003 + round_)
        return [rng.choice(VOCABULARY) for _ in range(self.rows)]

    def run_round(self) -> None:
        """One keyed ingest and one epoch of each job."""
        round_ = self.rounds
        key = f"batch-{round_}"
        batch = self.batch(round_)
        self.cc.ingest(WORDS, words(*batch), barrier=self.barrier(round_), key=key)
        self.expected[key] = batch
        for job in self.jobs:
            started = time.perf_counter()
            job.run_epoch()
            self.publish_ms.append((time.perf_counter() - started) * 1000)
        self.rounds += 1

    def pin(self) -> Any:
        return self.cc.pins.pin(TABLES, ttl="1h")

    def expire(self) -> Any:
        from consistent_catalog.retention import RetentionPolicy

        return self.cc.retention.expire(policy=RetentionPolicy(older_than=0, keep_last=2))

    def revise_to(self, round_: int) -> Any:
        """Roll ``words`` (and downstream) back to round ``round_``'s barrier: later batches leave ``expected``."""
        result = self.cc.revise(WORDS, self.barrier(round_))
        for later in range(round_ + 1, self.rounds):
            self.expected.pop(f"batch-{later}", None)
        return result


def main_ancestry(table: Any) -> list[Any]:
    """Snapshots of ``main`` from its head back (plain pyiceberg)."""
    metadata = table.metadata
    head = metadata.refs.get(P.MAIN_BRANCH)
    out = []
    snapshot = None if head is None else metadata.snapshot_by_id(head.snapshot_id)
    while snapshot is not None:
        out.append(snapshot)
        snapshot = None if snapshot.parent_snapshot_id is None else metadata.snapshot_by_id(snapshot.parent_snapshot_id)
    return out


def check(catalog: Any, expected: dict[str, list[str]]) -> list[str]:
    """What is wrong with the pipeline's tables, read through ``catalog`` (see the module docstring)."""
    problems: list[str] = []
    words_table = catalog.load_table(WORDS)
    ancestry = main_ancestry(words_table)
    whole = not ancestry or ancestry[-1].parent_snapshot_id is None  # else expiry removed the oldest part
    keys = Counter((s.summary or {}).get(P.INGEST_KEY) for s in ancestry)
    keys.pop(None, None)
    for key in expected:
        if keys[key] > 1 or (whole and keys[key] != 1):
            problems.append(f"ingest key {key} is on main {keys[key]} times")
    for key in set(keys) - set(expected):
        problems.append(f"ingest key {key} is on main but should not be")
    head = words_table.metadata.refs[P.MAIN_BRANCH].snapshot_id if P.MAIN_BRANCH in words_table.metadata.refs else None
    got = Counter(r["word"] for r in _rows(catalog, WORDS, head))
    want = Counter(w for batch in expected.values() for w in batch)
    if got != want:
        problems.append(f"words at main holds {sum(got.values())} rows, the batches expected {sum(want.values())}")
    for table in (COUNTS, HIST):
        attempts: dict[str, set[str]] = {}
        for snapshot in main_ancestry(catalog.load_table(table)):
            summary = snapshot.summary or {}
            if summary.get(P.BARRIER) and summary.get(P.ATTEMPT):
                attempts.setdefault(summary[P.BARRIER], set()).add(summary[P.ATTEMPT])
        for barrier, found in attempts.items():
            if len(found) != 1:
                problems.append(f"{table}: barrier {barrier} published by {len(found)} attempts")
    cut = ConsistentCatalog(catalog).resolve(list(TABLES))
    problems += flip_problems(catalog, {name: part.snapshot_id for name, part in cut.tables.items()})
    return problems


def flip_problems(catalog: Any, ids: dict[str, int | None]) -> list[str]:
    w = _rows(catalog, WORDS, ids[WORDS])
    c = _rows(catalog, COUNTS, ids[COUNTS])
    h = _rows(catalog, HIST, ids[HIST])
    problems = []
    if Counter(r["word"] for r in w) != {r["word"]: r["cnt"] for r in c}:
        problems.append(f"cut {ids}: word_counts is not the count of words")
    if Counter(r["cnt"] for r in c) != {r["cnt"]: r["words"] for r in h}:
        problems.append(f"cut {ids}: count_histogram is not the histogram of word_counts")
    return problems


def _rows(catalog: Any, table: str, snapshot_id: int | None) -> list[dict]:
    if snapshot_id is None:
        return []
    return catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


__all__ = ["Pipeline", "check", "create_tables", "TABLES", "WORDS", "COUNTS", "HIST"]
