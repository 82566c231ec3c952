"""Property-based simulation of a pipeline of tables (protocol §3-§5), purely as TableState values.

A random DAG of 2-6 tables: roots receive ingests (event-time barriers, sometimes late, or system time)
and watermark advances; every derived table is written by one job from 1-2 earlier tables. Jobs run
epochs at random speeds with the real ``plan_epoch``; the simulation then does to the metadata what
``EpochJob`` does (genesis snapshot on an empty sink, stage on ``consistent-staged`` with one attempt id,
publish by moving ``main`` or, for a ``watermark`` plan, by setting ``consistent.watermark``), is
sometimes killed between stage and publish, and compacts tables (``replace`` snapshots) now and then.
At the end every root's watermark is advanced to one barrier X and every job runs until it is done.

Content is modelled independently of the code under test: every root snapshot adds fresh integer row
ids, a derived table holds the union of its sources' rows at its epoch's inputs. Effective barriers,
W(X), snap(X, T), completeness and the expected cuts and plans are recomputed here from this module's own
bookkeeping (barriers are fixed when a snapshot is committed, inputs are remembered per snapshot) and
compared with what ``resolve`` and ``plan_epoch`` return (``Simulation.check``, after every step).

Root writers behave as the project's tools do unless a scenario says otherwise: a snapshot never lands at
or below W(X) (``ConsistentCatalog.ingest`` raises such a barrier to W(X)+1); late barriers below b(head)
are written only when b(p)+1 still lands above W(X).

"Complete at t" is the project's refinement of protocol §4/§5 (``consistent_catalog.completeness``): a table is
complete at t when t <= W(X) and, for a derived table, its sources are complete at t and the inputs of
the epoch behind ``snap(X, t)`` hold the same rows as ``snap(source, t)``. Cuts and plans take the newest
barrier <= min W at which all their tables are complete; with T = min W alone (the letter of protocol §4/§5),
two jobs that skip different barriers give inconsistent cuts (see the examples in
``tests/unit/test_property_dag.py``).

Run by ``tests/unit/test_property_dag.py`` (its checks) and ``tests/harness/random_histories.py`` (only the
metadata it builds, for the conformance corpus and the lean decoder).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import pytest
from hypothesis import event, note
from hypothesis import strategies as st

from consistent_catalog import properties as P
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.epoch import plan_epoch
from consistent_catalog.exceptions import NoWatermarkError, ResolutionError
from consistent_catalog.resolver import resolve
from consistent_catalog.state import TableState, encode_summary_sources, encode_table_sources
from tests.harness.builders import T0

MAIN = P.MAIN_BRANCH
STAGED = P.STAGED_BRANCH
Inputs = dict[str, int | None]


def job_of(table: str) -> str:
    return f"job-{table.split('.')[-1]}"


# --- one table: its metadata and this file's own bookkeeping ------------------------------------------


@dataclass
class SimTable:
    name: str
    sources: tuple[str, ...]
    mode: str
    """``system`` or ``event`` for roots, ``derived`` for job-written tables."""
    speed: int = 1
    """Epoch (derived) or ingest (root) actions per turn: how often it gets to work."""
    snapshots: dict[int, SnapshotRecord] = field(default_factory=dict)
    branches: dict[str, int] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    rows: dict[int, frozenset[int]] = field(default_factory=dict)
    """Row ids held at each snapshot (the independent content model)."""
    barrier: dict[int, int | None] = field(default_factory=dict)
    """Effective barrier of each snapshot, fixed when it was committed (a completed barrier never changes)."""
    inputs: dict[int, Inputs | None] = field(default_factory=dict)
    """Inputs of the epoch whose output each snapshot holds (None: no epoch yet, e.g. the genesis)."""
    ingested: set[int] = field(default_factory=set)
    """Every row id ever ingested into this root."""
    event_time: int = T0
    published: list[int] = field(default_factory=list)
    """Barriers published on this sink, in order (protocol §5.4: at most once each)."""
    staged_epoch: tuple[int, Inputs] | None = None
    """(barrier, inputs) of an epoch staged by a job that was killed before publishing."""

    def __post_init__(self) -> None:
        if self.sources:
            self.properties[P.JOB] = job_of(self.name)
            self.properties[P.SOURCES] = encode_table_sources(list(self.sources))

    @property
    def is_root(self) -> bool:
        return not self.sources

    def state(self) -> TableState:
        return TableState(self.name, dict(self.snapshots), dict(self.branches), dict(self.properties))

    def head(self, branch: str = MAIN) -> int | None:
        return self.branches.get(branch)

    def content(self, snapshot_id: int | None) -> frozenset[int]:
        return frozenset() if snapshot_id is None else self.rows[snapshot_id]

    def lineage(self, snapshot_id: int | None) -> list[int]:
        """``snapshot_id`` and its ancestors, newest first."""
        found = []
        while snapshot_id is not None:
            found.append(snapshot_id)
            snapshot_id = self.snapshots[snapshot_id].parent_id
        return found

    def is_ancestor(self, ancestor: int | None, snapshot_id: int | None) -> bool:
        return ancestor is None or ancestor in self.lineage(snapshot_id)

    def staged_ahead(self) -> bool:
        staged, main = self.head(STAGED), self.head()
        return staged is not None and staged != main and self.is_ancestor(main, staged)

    def newest_branch(self) -> str:
        return STAGED if self.staged_ahead() else MAIN

    def watermark_property(self) -> int | None:
        value = self.properties.get(P.WATERMARK)
        return None if value is None else int(value)

    def watermark(self, branch: str = MAIN) -> int | None:
        """W(X) = max(b(head), consistent.watermark)."""
        head = self.head(branch)
        marks = [m for m in (None if head is None else self.barrier[head], self.watermark_property()) if m is not None]
        return max(marks) if marks else None

    def set_watermark(self, value: int) -> None:
        """What ``advance_watermark`` and an empty epoch's publish write: the library's writer-side helper
        (the marker and the barrier overrides are the project's extension, see docs/protocol.md)."""
        self.properties.update(self.state().watermark_properties(value))

    def snap(self, barrier: int, branch: str = MAIN) -> int | None:
        """snap(X, T): newest snapshot of the branch with b <= T."""
        for snapshot_id in self.lineage(self.head(branch)):
            b = self.barrier[snapshot_id]
            if b is not None and b <= barrier:
                return snapshot_id
        return None

    def rule(self, parent: int | None, raw: int) -> int:
        """Protocol §3 for a data-changing snapshot: raw, or b(p)+1 when late."""
        previous = None if parent is None else self.barrier[parent]
        return raw if previous is None or raw >= previous else previous + 1

    def add(
        self, record: SnapshotRecord, rows: frozenset[int], branch: str, barrier: int | None, inputs: Inputs | None
    ) -> None:
        self.snapshots[record.snapshot_id] = record
        self.rows[record.snapshot_id] = rows
        self.barrier[record.snapshot_id] = barrier
        self.inputs[record.snapshot_id] = inputs
        self.branches[branch] = record.snapshot_id


# --- the DAG ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableSpec:
    name: str
    sources: tuple[str, ...]
    mode: str
    speed: int


@st.composite
def dags(draw: st.DrawFn) -> list[TableSpec]:
    count = draw(st.integers(min_value=2, max_value=6), label="tables")
    specs: list[TableSpec] = []
    for i in range(count):
        name = f"db.t{i}"
        earlier = [s.name for s in specs]
        if i == 0 or (i < count - 1 and draw(st.booleans(), label=f"{name} is a root")):
            mode = draw(st.sampled_from(["event", "system"]), label=f"{name} mode")
            specs.append(TableSpec(name, (), mode, 2))
            continue
        width = min(len(earlier), draw(st.sampled_from([2, 1, 2]), label=f"{name} sources"))  # mostly two: alignment
        sources = tuple(draw(st.lists(st.sampled_from(earlier), min_size=width, max_size=width, unique=True)))
        speed = draw(st.integers(min_value=1, max_value=4), label=f"{name} speed")
        specs.append(TableSpec(name, sources, "derived", speed))
    return specs


@dataclass(frozen=True)
class Step:
    """One step of the simulation, drawn up front with a fixed shape (fields that only make sense in some
    states are read modulo what is possible)."""

    action: int
    """Index into ``Simulation.actions()``."""
    tick: int
    """Milliseconds of system time that pass before the step."""
    rows: int
    """Rows an ingest adds."""
    late: bool
    """Ingest at or below b(head): a late event-time barrier, or a system-time writer whose clock is behind."""
    amount: int
    """Lateness or clock skew below b(head); how far event time trails the clock."""
    split: int
    """Where an epoch's rows are split into two staged snapshots (0: one snapshot)."""
    kill: int
    """3: the job is killed between stage and publish."""
    subset: int
    """Bit mask of tables: one more set of tables to resolve cuts for from this step on."""


def steps(action_count: int, table_count: int) -> st.SearchStrategy[list[Step]]:
    step = st.builds(
        Step,
        action=st.integers(min_value=0, max_value=action_count - 1),
        tick=st.integers(min_value=1, max_value=400),
        rows=st.integers(min_value=1, max_value=3),
        late=st.booleans(),
        amount=st.integers(min_value=0, max_value=300),
        split=st.integers(min_value=0, max_value=3),
        kill=st.integers(min_value=0, max_value=3),
        subset=st.integers(min_value=0, max_value=2**table_count - 1),
    )
    return st.lists(step, min_size=10, max_size=40)


@dataclass(frozen=True)
class Scenario:
    foreign_roots: bool = False
    """Roots are written by plain Iceberg writers: system time from clocks that may be behind (even behind
    the watermark), or event-time tags that may be late, instead of ``ConsistentCatalog.ingest`` (which
    never tags at or below W(X))."""
    repeat_barriers: bool = False
    """Foreign root writers may also commit with exactly the head's barrier (two commits in the same
    millisecond, or one event-time batch in two commits)."""
    compact_derived: bool = False
    """Derived tables are compacted too (``replace`` snapshots carry no consistent.* summary keys)."""
    exact: bool = True
    """Compare barriers, cuts and plans with the ones recomputed here. Off, only the invariants are checked
    ((a)-(e) and the drain): for repeated barriers more than one fix of protocol §3 is sound."""


# --- completeness, recomputed from the bookkeeping ----------------------------------------------------

BranchOf = Callable[[SimTable], str]


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


# --- the simulation -----------------------------------------------------------------------------------


class Simulation:
    def __init__(self, specs: list[TableSpec], scenario: Scenario) -> None:
        self.tables = {s.name: SimTable(s.name, s.sources, s.mode, s.speed) for s in specs}
        self.order = [s.name for s in specs]  # topological: sources come first
        self.scenario = scenario
        self.clock = T0
        self.next_snapshot = 1
        self.next_row = 1
        self.subsets: list[frozenset[str]] = [frozenset(self.tables)]
        self.cut_barriers: dict[frozenset[str], int] = {}
        self.completed: dict[tuple[str, int], frozenset[int]] = {}
        """(table, W(table) at some step) -> rows of snap(table, W) then: they must never change."""
        note(f"DAG: {[(s.name, s.sources or s.mode) for s in specs]}")

    def snapshot_id(self) -> int:
        self.next_snapshot += 1
        return self.next_snapshot

    def states(self) -> dict[str, TableState]:
        return {name: t.state() for name, t in self.tables.items()}

    # --- actions ----------------------------------------------------------------------------------
    def actions(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for name in self.order:
            t = self.tables[name]
            if t.is_root:  # speed: ingests per advance-watermark
                found += [("ingest", name)] * t.speed + [("advance-watermark", name), ("compact", name)]
            else:
                found += [("epoch", name)] * t.speed
                if self.scenario.compact_derived:
                    found.append(("compact", name))
        return found

    def step(self, step: Step) -> None:
        self.clock += step.tick
        action, name = self.actions()[step.action]
        table = self.tables[name]
        if action == "ingest":
            self.ingest(table, step)
        elif action == "advance-watermark":
            self.advance_watermark(table, step)
        elif action == "compact":
            self.compact(table)
        else:
            self.epoch(table, step)
        subset = frozenset(n for i, n in enumerate(self.order) if step.subset >> i & 1)
        if subset and subset not in self.subsets:
            self.subsets.append(subset)
        self.check()

    def ingest(self, t: SimTable, step: Step) -> None:
        rows = frozenset(range(self.next_row, self.next_row + step.rows))
        self.next_row += step.rows
        parent = t.head()
        current = t.watermark()
        head_barrier = None if parent is None else t.barrier[parent]
        if head_barrier is not None and step.late:  # a clock behind, or a late event-time tag
            raw = max(0, head_barrier - step.amount)
        elif t.mode == "system":
            raw = self.clock
        else:
            raw = max(t.event_time, self.clock - step.amount)  # event time trails the clock by up to 300 ms
        if self.scenario.foreign_roots:
            if raw == head_barrier and not self.scenario.repeat_barriers:
                raw += 1
        elif current is not None and t.rule(parent, raw) <= current:
            raw = current + 1  # what ConsistentCatalog.ingest does (a system-time writer: wait for the clock)
        summary = {"added-data-files": "1", "added-records": str(len(rows))}
        if t.mode == "system":
            timestamp = raw
            self.clock = max(self.clock, raw)
        else:
            timestamp = self.clock
            t.event_time = max(t.event_time, raw)
            summary[P.BARRIER] = str(raw)
        if raw == head_barrier:
            event("snapshot with the head's barrier")
        barrier = t.rule(parent, raw)
        if current is not None and barrier <= current:
            # a foreign writer at or below W(X): the snapshot must still land above the completed barrier
            barrier = current + 1
            event("foreign snapshot at or below W(X)")
        elif barrier != raw:
            event("late snapshot: b(p)+1")
        total = t.content(parent) | rows
        summary["total-records"] = str(len(total))
        t.ingested |= rows
        t.add(SnapshotRecord(self.snapshot_id(), parent, timestamp, "append", summary), total, MAIN, barrier, None)
        note(f"ingest {t.name}: snapshot {t.head()} rows {sorted(rows)} raw {raw} b={barrier} (W was {current})")

    def advance_watermark(self, t: SimTable, step: Step) -> None:
        current = t.watermark()
        if t.mode == "system":
            value = self.clock
        else:
            value = max(t.event_time, current or 0, self.clock - step.amount) + 1
            t.event_time = value
        if current is not None and value <= current:
            return  # a watermark never moves back
        t.set_watermark(value)
        note(f"advance {t.name} watermark to {value} at head {t.head()}")

    def compact(self, t: SimTable) -> None:
        parent = t.head()
        if parent is None:
            return
        rows = t.content(parent)
        summary = {"added-data-files": "1", "deleted-data-files": "2", "total-records": str(len(rows))}
        record = SnapshotRecord(self.snapshot_id(), parent, self.clock, "replace", summary)
        t.add(record, rows, MAIN, t.barrier[parent], t.inputs[parent])
        note(f"compact {t.name}: snapshot {t.head()}")

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

    def plan(self, t: SimTable) -> tuple[int | None, Inputs, str]:
        states = self.states()
        plan = plan_epoch(job_of(t.name), {s: states[s] for s in t.sources}, {t.name: states[t.name]}, upstream=states)
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
            return None, {}, "done"
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
        return barrier, inputs, sink.action

    def output(self, t: SimTable, inputs: Inputs) -> frozenset[int]:
        return frozenset().union(*(self.tables[s].content(i) for s, i in inputs.items()))

    def epoch(self, t: SimTable, step: Step | None) -> str:
        barrier, inputs, action = self.plan(t)
        event(f"plan: {action}")
        if action == "done":
            return action
        assert barrier is not None
        job = job_of(t.name)
        if action == "publish-staged":
            t.branches[MAIN] = t.branches[STAGED]
            self.published(t, barrier, f"{t.name}: published the staged epoch at {barrier}")
            return action
        if action == "watermark":
            t.set_watermark(barrier)
            self.published(t, barrier, f"{t.name}: epoch at {barrier} changes nothing, watermark only")
            return action
        output = self.output(t, inputs)
        current = t.content(t.head())
        assert current <= output, "a sink's inputs only grow, so its output does too"
        new = sorted(output - current)
        if t.staged_epoch is not None:
            event("stale staged epoch discarded")
        if t.head() is None:  # prepare_staged_branch: Iceberg branches need a snapshot
            genesis = {P.JOB: job, "total-records": "0", "total-data-files": "0"}
            t.add(
                SnapshotRecord(self.snapshot_id(), None, self.clock, "append", genesis), frozenset(), MAIN, None, None
            )
        t.branches[STAGED] = t.branches[MAIN]
        cut = 0 if step is None or not new else step.split % len(new)
        parts = [new[:cut], new[cut:]] if cut else [new]  # [[]]: an empty epoch is staged as an empty snapshot
        attempt = f"attempt-{self.next_snapshot}"
        rows = current
        for part in parts:
            rows = rows | frozenset(part)
            summary = {
                P.BARRIER: str(barrier),
                P.JOB: job,
                P.SOURCES: encode_summary_sources(inputs),
                P.ATTEMPT: attempt,
                "total-records": str(len(rows)),
            }
            if part:
                summary.update({"added-data-files": "1", "added-records": str(len(part))})
            record = SnapshotRecord(self.snapshot_id(), t.head(STAGED), self.clock, "append", summary)
            t.add(record, rows, STAGED, barrier, dict(inputs))
        if step is not None and step.kill == 3:
            t.staged_epoch = (barrier, dict(inputs))
            event("job killed after staging")
            note(f"{t.name}: staged {t.head(STAGED)} at {barrier} inputs {inputs} rows {new}, then killed")
            return action
        t.branches[MAIN] = t.branches[STAGED]
        self.published(t, barrier, f"{t.name}: published {t.head()} at {barrier} inputs {inputs} rows {new}")
        return action

    def published(self, t: SimTable, barrier: int, message: str) -> None:
        note(message)
        t.published.append(barrier)
        t.staged_epoch = None
        _, _, action = self.plan(t)  # (e) re-planning right after a publish has nothing to do
        assert action == "done", f"{t.name}: re-planning after publishing {barrier} gives {action!r}"

    def drain(self) -> None:
        """Every root complete up to one barrier X, every job run until done: every cut reaches X."""
        marks = [b for t in self.tables.values() for b in t.barrier.values() if b is not None]
        marks += [m for t in self.tables.values() if (m := t.watermark_property()) is not None]
        final = max(marks, default=T0) + 1
        for name in self.order:
            if self.tables[name].is_root:
                self.tables[name].set_watermark(final)
        note(f"drain: every root's watermark set to {final}")
        for name in self.order:
            t = self.tables[name]
            if not t.is_root:
                while self.epoch(t, None) != "done":
                    pass
        self.check()
        cut = resolve(self.states().values(), upstream=self.states().values())
        assert cut.barrier == final, f"after draining, the cut over every table is at {cut.barrier}, not {final}"

    # --- properties -------------------------------------------------------------------------------
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


def simulate(data: st.DataObject, scenario: Scenario) -> None:
    sim = Simulation(data.draw(dags(), label="dag"), scenario)
    for step in data.draw(steps(len(sim.actions()), len(sim.tables)), label="steps"):
        sim.step(step)
    sim.drain()
