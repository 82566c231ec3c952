"""The independent oracle of the pipeline simulation (``tests.harness.simulation``): expected answers and checks.

``Oracle`` recomputes, from the simulation's own bookkeeping only (``SimTable``: the barrier each snapshot
was committed with, the inputs each epoch read, the rows each snapshot holds), which barriers every table
is complete at and so the cut ``resolve`` should give and the barrier and inputs ``plan_epoch`` should
plan. Nothing here asks the code under test for an expectation: ``resolve`` and ``plan_epoch`` are only
called (or handed in) to get the answers being checked.

``Checks`` holds what is compared after every step of a ``Simulation``: the plan of every epoch, the
repeatable-read cut of every subset of tables drawn so far (and the other levels over all of them),
and the invariants (a)-(f): (a) cut contents agree along lineage, (b) recorded inputs lie inside the
cut, (c) T* never decreases, (d) staged epochs are invisible at repeatable-read and visible at
read-committed, (e) a barrier is published at most once, (f) a barrier declared complete never changes
content. (f) is a check of the code under test against its own earlier answers: it remembers the rows
of ``snap(X, W)`` as the library returned them when ``W(X)`` was first seen, and requires the same rows
at every later step.

"Complete at t" is the project's refinement of protocol §4/§5 (``consistent_catalog.completeness``): a table
is complete at t when t <= W(X) and, for a derived table, its sources are complete at t and the inputs of
the epoch behind ``snap(X, t)`` hold the same rows as ``snap(source, t)``. Cuts and plans take the newest
barrier <= min W at which all their tables are complete; with T = min W alone (the letter of protocol §4/§5),
two jobs that skip different barriers give inconsistent cuts (see the examples in
``tests/unit/test_property_dag.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import pytest
from hypothesis import event

from consistent_catalog import properties as P
from consistent_catalog.exceptions import NoWatermarkError, ResolutionError
from consistent_catalog.resolver import resolve

if TYPE_CHECKING:
    from consistent_catalog.epoch_plan import EpochPlan
    from consistent_catalog.state import TableState
    from tests.harness.simulation import Inputs, Scenario, SimTable, Simulation

MAIN = P.MAIN_BRANCH
STAGED = P.STAGED_BRANCH


# --- completeness, recomputed from the bookkeeping ----------------------------------------------------

BranchOf = Callable[["SimTable"], str]


def on_main(table: SimTable) -> str:
    return MAIN


def on_newest(table: SimTable) -> str:
    return table.newest_branch()


class Oracle:
    """The expected answers, from the simulation's own bookkeeping."""

    def __init__(self, tables: Mapping[str, SimTable], branch_of: BranchOf) -> None:
        self.tables = tables
        self.branch_of = branch_of
        self.memo: dict[tuple[str, int], bool] = {}

    def complete(self, name: str, t: int) -> bool:
        key = (name, t)
        if key not in self.memo:
            self.memo[key] = self._complete(name, t)
        return self.memo[key]

    def _complete(self, name: str, t: int) -> bool:
        x = self.tables[name]
        mark = x.watermark(self.branch_of(x))
        if mark is None or t > mark:
            return False
        if x.is_root:
            return True
        at = x.snap(t, self.branch_of(x))
        inputs = (None if at is None else x.inputs[at]) or {}
        for source in x.sources:
            s = self.tables[source]
            if not self.complete(source, t):
                return False
            if s.content(inputs.get(source)) != s.content(s.snap(t, self.branch_of(s))):
                return False
        return True

    def latest(self, names: Iterable[str], upper: int) -> int | None:
        """The newest t <= upper at which all ``names`` are complete."""
        names = list(names)
        candidates = {upper}
        for t in self.tables.values():
            for snapshot_id in t.lineage(t.head(self.branch_of(t))):
                b = t.barrier[snapshot_id]
                if b is not None and b <= upper:
                    candidates.update(v for v in (b, b - 1) if v >= 0)
        for t in sorted(candidates, reverse=True):
            if all(self.complete(n, t) for n in names):
                return t
        return None

    def cut(self, names: Iterable[str]) -> tuple[int | None, dict[str, int | None]]:
        """(T*, snapshot ids); raises NoWatermarkError / ResolutionError like resolve should."""
        tables = [self.tables[n] for n in names]
        marks = [t.watermark(self.branch_of(t)) for t in tables]
        if any(m is None for m in marks):
            raise NoWatermarkError("expected")
        barrier = self.latest([t.name for t in tables], min(m for m in marks if m is not None))
        if barrier is None:
            raise ResolutionError("expected")
        return barrier, {t.name: t.snap(barrier, self.branch_of(t)) for t in tables}


# --- the checks -------------------------------------------------------------------------------------


class Checks:
    """What a ``Simulation`` compares with ``resolve`` and ``plan_epoch``, and its invariants, after every step."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.cut_barriers: dict[frozenset[str], int] = {}
        self.completed: dict[tuple[str, int], frozenset[int]] = {}
        """(table, W(table) at some step) -> rows of snap(table, W) then: they must never change."""

    @property
    def tables(self) -> Mapping[str, SimTable]:
        return self.sim.tables

    @property
    def order(self) -> list[str]:
        return self.sim.order

    @property
    def scenario(self) -> Scenario:
        return self.sim.scenario

    @property
    def subsets(self) -> list[frozenset[str]]:
        return self.sim.subsets

    def states(self) -> dict[str, TableState]:
        return self.sim.states()

    def output(self, t: SimTable, inputs: Inputs) -> frozenset[int]:
        return self.sim.output(t, inputs)

    # --- expected plans ---------------------------------------------------------------------------
    def previous_inputs(self, t: SimTable) -> Inputs:
        """Inputs of the sink's last published epoch (what protocol §5.1 reads from the head's consistent.sources)."""
        head = t.head()
        return dict((None if head is None else t.inputs[head]) or {})

    def expected_plan(self, t: SimTable) -> tuple[int | None, Inputs]:
        marks = [self.tables[s].watermark() for s in t.sources]
        if any(m is None for m in marks):
            return None, {}
        barrier = Oracle(self.tables, on_main).latest(t.sources, min(m for m in marks if m is not None))
        if barrier is None:
            return None, {}
        return barrier, {s: self.tables[s].snap(barrier) for s in t.sources}

    # --- the plans and the drain, against plan_epoch and resolve --------------------------------------
    def check_plan(self, t: SimTable, plan: EpochPlan) -> None:
        """The plan ``plan_epoch`` made for ``t``'s next epoch, against the expected one and invariant (e)."""
        sink = plan.sinks[t.name]
        inputs = dict(plan.inputs)
        if self.scenario.exact:
            expected_barrier, expected_inputs = self.expected_plan(t)
            assert (plan.barrier, inputs) == (expected_barrier, expected_inputs), (
                f"{t.name}: planned T={plan.barrier} inputs {inputs}, "
                f"expected T={expected_barrier} inputs {expected_inputs}"
            )
        assert sink.main_head == t.head()
        assert sink.staged_head == t.head(STAGED)
        assert dict(sink.previous_inputs) == self.previous_inputs(t), (
            f"{t.name}: previous_inputs {dict(sink.previous_inputs)}, but its last epoch read {self.previous_inputs(t)}"
        )
        if plan.barrier is None:
            assert sink.action == "done"
            return
        barrier = plan.barrier
        if barrier < min(m for s in t.sources if (m := self.tables[s].watermark()) is not None):
            event("plan: T below min W(source)")
        sink_mark = t.watermark()
        if sink_mark is not None and barrier <= sink_mark:
            assert sink.action == "done"
        elif t.staged_ahead() and t.staged_epoch == (barrier, inputs):
            assert sink.action == "publish-staged"
        elif self.output(t, inputs) - t.content(t.head()):
            assert sink.action == "stage", (
                f"{t.name}: the epoch at {barrier} has new rows, but the plan is {sink.action}"
            )
        else:
            assert sink.action in ("stage", "watermark"), sink.action
        if sink.action != "done":  # (e) a barrier is published at most once, and barriers only grow
            assert barrier not in t.published
            assert not t.published or barrier > t.published[-1]

    def check_replanned(self, t: SimTable, barrier: int, action: str) -> None:
        """(e) re-planning right after a publish has nothing to do."""
        assert action == "done", f"{t.name}: re-planning after publishing {barrier} gives {action!r}"

    def check_drained(self, final: int) -> None:
        """After the drain (every root complete up to ``final``, every job done) the cut over every table is at it."""
        cut = resolve(self.states().values(), upstream=self.states().values())
        assert cut.barrier == final, f"after draining, the cut over every table is at {cut.barrier}, not {final}"

    # --- after every step ---------------------------------------------------------------------------
    def check(self) -> None:
        states = self.states()
        everything = list(states.values())
        for (name, mark), rows in self.completed.items():  # (f) a barrier declared complete never changes content
            t = self.tables[name]
            point = states[name].branch().snap_at(mark)
            now = t.content(None if point is None else point[0])
            assert now == rows, (
                f"{name} was complete up to {mark} with rows {sorted(rows)}; "
                f"snap({name}, {mark}) now holds {sorted(now)}"
            )
        for t in self.tables.values():
            mark = t.watermark()
            if mark is not None and (t.name, mark) not in self.completed:
                point = states[t.name].branch().snap_at(mark)
                self.completed[(t.name, mark)] = t.content(None if point is None else point[0])
        for t in self.tables.values() if self.scenario.exact else ():  # protocol §3: barriers never change
            for branch in t.branches:
                history = states[t.name].branch(branch)
                expected = tuple(t.barrier[i] for i in history.snapshot_ids)
                assert history.barriers == expected, (
                    f"{t.name} {branch}: barriers {history.barriers}, committed as {expected}"
                )
        main, newest = Oracle(self.tables, on_main), Oracle(self.tables, on_newest)
        for names in self.subsets:
            ordered = sorted(names)
            try:
                expected_barrier, expected_ids = main.cut(ordered)
            except (NoWatermarkError, ResolutionError) as expected:
                if self.scenario.exact:
                    with pytest.raises(type(expected)):
                        resolve([states[n] for n in ordered], upstream=everything)
                    continue
            try:
                cut = resolve([states[n] for n in ordered], upstream=everything)
            except NoWatermarkError:
                assert any(self.tables[n].watermark() is None for n in ordered)
                continue
            ids = {n: cut[n].snapshot_id for n in ordered}
            lowest = min(m for n in ordered if (m := self.tables[n].watermark()) is not None)
            if cut.barrier is not None and cut.barrier < lowest:
                event("cut: T* below min W")
            if self.scenario.exact:
                assert (cut.barrier, ids) == (expected_barrier, expected_ids), f"repeatable-read cut of {ordered}"
            # (c) for the same tables, T* never decreases
            previous = self.cut_barriers.get(names)
            assert previous is None or cut.barrier >= previous, (
                f"T* of {ordered} went back from {previous} to {cut.barrier}"
            )
            self.cut_barriers[names] = cut.barrier  # type: ignore[assignment]
            # (d) a staged, unpublished epoch is never visible at repeatable-read
            for n in ordered:
                assert self.tables[n].is_ancestor(ids[n], self.tables[n].head())
            self.check_contents(names, ids, cut.barrier)
            self.check_recorded_inputs(names, ids, cut.barrier)
        if self.scenario.exact:
            self.check_other_levels(states, newest)

    def check_other_levels(self, states: Mapping[str, TableState], newest: Oracle) -> None:
        everything = list(states.values())
        try:
            expected_barrier, expected_ids = newest.cut(self.order)
        except (NoWatermarkError, ResolutionError) as expected:
            with pytest.raises(type(expected)):
                resolve(everything, "read-committed", upstream=everything)
        else:
            cut = resolve(everything, "read-committed", upstream=everything)
            assert (cut.barrier, {n: cut[n].snapshot_id for n in self.order}) == (expected_barrier, expected_ids)
        uncommitted = resolve(everything, "read-uncommitted")
        assert uncommitted.barrier is None
        for t in self.tables.values():
            head = t.head(t.newest_branch())
            assert uncommitted[t.name].snapshot_id == (None if head is None or t.barrier[head] is None else head)
            if t.staged_ahead():
                # (d) visible at read-committed (and read-uncommitted), not at repeatable-read
                assert t.staged_epoch is not None
                alone = resolve([states[t.name]], "read-committed", upstream=everything)
                assert (alone.barrier, alone[t.name].snapshot_id) == (t.staged_epoch[0], t.head(STAGED))
                assert alone[t.name].branch == STAGED
                assert uncommitted[t.name].snapshot_id == t.head(STAGED)

    def upstream_roots(self, name: str) -> set[str]:
        t = self.tables[name]
        return {name} if t.is_root else set().union(*(self.upstream_roots(s) for s in t.sources))

    def check_contents(self, names: frozenset[str], ids: Mapping[str, int | None], barrier: int | None) -> None:
        """(a) rows at the cut agree along every lineage edge inside the cut, and every two tables of the cut
        hold the same rows of every root they both derive from (protocol §1: "all reflect the same root data")."""
        for name in sorted(names):
            t = self.tables[name]
            if t.is_root or not all(s in names for s in t.sources):
                continue
            rows = t.content(ids[name])
            expected = frozenset().union(*(self.tables[s].content(ids[s]) for s in t.sources))
            assert rows == expected, (
                f"cut {sorted(names)} at T*={barrier}: {name}@{ids[name]} holds rows {sorted(rows)}, but its sources "
                f"at the cut hold {sorted(expected)} ({ {s: ids[s] for s in t.sources} })"
            )
        for a in sorted(names):
            for b in sorted(names):
                if a >= b:
                    continue
                for root in sorted(self.upstream_roots(a) & self.upstream_roots(b)):
                    universe = self.tables[root].ingested
                    rows_a = self.tables[a].content(ids[a]) & universe
                    rows_b = self.tables[b].content(ids[b]) & universe
                    assert rows_a == rows_b, (
                        f"cut {sorted(names)} at T*={barrier}: of root {root}'s rows "
                        f"{a}@{ids[a]} holds {sorted(rows_a)} "
                        f"but {b}@{ids[b]} holds {sorted(rows_b)}"
                    )

    def check_recorded_inputs(self, names: frozenset[str], ids: Mapping[str, int | None], barrier: int | None) -> None:
        """(b) the consistent.sources on a derived table's cut snapshot (or, for a compaction, on the snapshot it
        compacted) are the sources' cut snapshots, or ancestors of them with no rows added in between."""
        for name in sorted(names):
            t = self.tables[name]
            if t.is_root or ids[name] is None:
                continue
            recorded = next(
                (
                    value
                    for sid in t.lineage(ids[name])
                    if (value := t.snapshots[sid].summary.get(P.SOURCES)) is not None
                ),
                None,
            )
            if recorded is None:
                continue  # only the empty genesis snapshot so far
            read = json.loads(recorded)
            for source in t.sources:
                if source not in names:
                    continue
                s = self.tables[source]
                assert s.is_ancestor(read[source], ids[source]), (
                    f"cut at T*={barrier}: {name}@{ids[name]} read {source}@{read[source]}, "
                    f"which is not an ancestor of the cut's {source}@{ids[source]}"
                )
                assert s.content(read[source]) == s.content(ids[source]), (
                    f"cut {sorted(names)} at T*={barrier}: {name}@{ids[name]} read {source}@{read[source]}, but the "
                    f"cut's {source}@{ids[source]} holds "
                    f"rows {sorted(s.content(ids[source]) - s.content(read[source]))} more"
                )

