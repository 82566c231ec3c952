"""Helpers the benchmarks share: the machine's load, quantiles, a delay sampler, the demo's snapshot logs."""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEMO_TABLES = ("demo.words", "demo.word_counts", "demo.count_histogram")
BARRIER_KEY = "consistent.barrier"


def load() -> str:
    """The 1-, 5- and 15-minute load averages (other agents share these 2 cores: report them with every figure)."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def quantile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def describe(values: Sequence[float], unit: str = "s", *, mean: bool = False) -> str:
    """``n=.. median .. p95 .. min .. max ..`` (and the mean)."""
    if not values:
        return "no samples"
    text = (f"n={len(values)} median {statistics.median(values):.2f}{unit} p95 {quantile(values, 0.95):.2f}{unit} "
            f"min {min(values):.2f}{unit} max {max(values):.2f}{unit}")
    return text + (f" mean {statistics.fmean(values):.2f}{unit}" if mean else "")


def demo_catalog(root: Path) -> Any:
    """pyiceberg's SqlCatalog over a demo directory (``catalog.db``, ``warehouse/``)."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")


class DelaySampler(threading.Thread):
    """Every ``every`` seconds: (wall time, {table: now - W(table) in ms}, seconds the sample took), read with
    pyiceberg by ``ConsistentCatalog.status`` in this process, independently of the process under test."""

    def __init__(self, root: Path, every: float, tables: Sequence[str] = DEMO_TABLES) -> None:
        super().__init__(daemon=True)
        self.root, self.every, self.tables = root, every, list(tables)
        self.samples: list[tuple[float, dict[str, int | None], float]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        from consistent_catalog import ConsistentCatalog

        cc = ConsistentCatalog(demo_catalog(self.root))
        next_at = time.time()
        while not self.stop.is_set():
            started = time.perf_counter()
            try:
                rows = cc.status(self.tables)
                self.samples.append((time.time(), {r.table: r.delay_ms for r in rows}, time.perf_counter() - started))
            except Exception as exc:  # tables not created yet, a SQLite lock: note it and go on
                self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            next_at += self.every
            self.stop.wait(max(0.0, next_at - time.time()))

    def delays(self, table: str, since: float, until: float) -> list[float]:
        """Seconds behind of ``table`` in the samples taken between ``since`` and ``until`` (wall time)."""
        return [d[table] / 1000 for t, d, _ in self.samples if since <= t <= until and d.get(table) is not None]


def barrier_snapshots(catalog: Any, table: str, *, published_only: bool = False) -> tuple[dict[int, Any], dict[int, int]]:
    """Of ``table``: the newest snapshot carrying each barrier (of those ``main`` moved onto, with
    ``published_only``), and when ``main`` moved onto each snapshot (the snapshot log's time of the
    commit that published it), in epoch ms."""
    metadata = catalog.load_table(table).metadata
    published = {e.snapshot_id: e.timestamp_ms for e in metadata.snapshot_log}
    newest: dict[int, Any] = {}
    for snapshot in metadata.snapshots:
        raw = (snapshot.summary.additional_properties if snapshot.summary else {}).get(BARRIER_KEY)
        if raw is None or published_only and snapshot.snapshot_id not in published:
            continue
        barrier = int(raw)
        if barrier not in newest or snapshot.timestamp_ms > newest[barrier].timestamp_ms:
            newest[barrier] = snapshot
    return newest, published
