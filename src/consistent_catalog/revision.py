"""Revisions (protocol §8): roll a table and everything downstream back to barrier T.

``plan_step`` is pure: it decides, per table, the snapshot ``main`` returns to and the watermark
that stays true afterwards. ``ConsistentCatalog.revise`` applies it, one fenced commit per table, in
topological order (a table before the tables derived from it), so that at no moment can a job
replay from an upstream table that is not yet revised.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from consistent_catalog.lineage import LineageGraph
from consistent_catalog.state import TableState

RevisionMode = Literal["incremental", "full"]
MODES: tuple[str, ...] = ("incremental", "full")


@dataclass(frozen=True)
class RevisionStep:
    table: str
    action: str
    """``rolled-back`` (main -> its state at T), ``truncated`` (emptied: its job rebuilds it from scratch),
    ``abandoned`` (back to its previous generation, protocol §6.10) or ``unchanged`` (the table already is its state
    at T, or has no new generation: nothing is committed, the revision is not bumped)."""
    from_snapshot: int | None
    to_snapshot: int | None
    watermark: int | None
    """The table's watermark property after the revision (None: removed)."""
    revision: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RevisionResult:
    table: str
    barrier: int | None
    """The barrier revised to; None when a new generation was abandoned (mode ``abandon``)."""
    mode: str
    steps: tuple[RevisionStep, ...]

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "barrier": self.barrier, "mode": self.mode, "steps": [s.to_json() for s in self.steps]}


def affected_tables(graph: LineageGraph, table: str) -> list[str]:
    """``table`` and every table downstream of it, sources before the tables derived from them."""
    return graph.topological({table} | graph.descendants({table}))


def plan_step(state: TableState, barrier: int, mode: str) -> RevisionStep:
    """What revising ``state`` to ``barrier`` does to it: roots are always rolled back, never truncated.

    ``consistent-staged`` follows ``main`` (staged epochs computed from unrevised data are discarded).
    """
    current = state.head()
    watermark_now = state.watermark()
    unchanged = RevisionStep(state.identifier, "unchanged", current, current, watermark_now, state.revision)
    if mode == "full" and not state.is_root:
        if current is None and watermark_now is None and not state.staged_ahead:
            return unchanged
        return RevisionStep(state.identifier, "truncated", current, None, None, state.revision + 1)
    point = state.branch().snap_at(barrier)
    target = None if point is None else point[0]
    if target == current and (watermark_now is None or barrier >= watermark_now) and not state.staged_ahead:
        return unchanged  # the table holds nothing after the barrier (and no staged epoch to discard)
    # never claim completeness beyond what the table held: a lagging table keeps its lower watermark
    watermark = None if watermark_now is None else min(barrier, watermark_now)
    return RevisionStep(state.identifier, "rolled-back", current, target, watermark, state.revision + 1)
