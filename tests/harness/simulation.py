"""Property-based simulation of a pipeline of tables (protocol §3-§5), purely as TableState values: the model.

A random DAG of 2-6 tables: roots receive ingests (event-time barriers, sometimes late, or system time)
and watermark advances; every derived table is written by one job from 1-2 earlier tables. Jobs run
epochs at random speeds with the real ``plan_epoch``; the simulation then does to the metadata what
``EpochJob`` does (genesis snapshot on an empty sink, stage on ``consistent-staged`` with one attempt id,
publish by moving ``main`` or, for a ``watermark`` plan, by setting ``consistent.watermark``), is
sometimes killed between stage and publish, and compacts tables (``replace`` snapshots) now and then.
At the end every root's watermark is advanced to one barrier X and every job runs until it is done.

Content is modelled independently of the code under test: every root snapshot adds fresh integer row
ids, a derived table holds the union of its sources' rows at its epoch's inputs. Barriers are fixed when a
snapshot is committed and inputs are remembered per snapshot (``SimTable``'s bookkeeping). From that
bookkeeping alone the oracle (``tests.harness.oracle``: ``Oracle`` for the expected W(X), snap(X, T),
completeness, cuts and plans, ``Checks`` for the comparisons and invariants) recomputes what ``resolve``
and ``plan_epoch`` must return, and checks it after every step (``Simulation.check``).

Root writers behave as the project's tools do unless a scenario says otherwise: a snapshot never lands at
or below W(X) (``ConsistentCatalog.ingest`` raises such a barrier to W(X)+1); late barriers below b(head)
are written only when b(p)+1 still lands above W(X).

Run by ``tests/unit/test_property_dag.py`` (its checks) and ``tests/harness/random_histories.py`` (only the
metadata it builds, for the conformance corpus and the lean decoder).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import event, note
from hypothesis import strategies as st

from consistent_catalog import properties as P
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.epoch_plan import plan_epoch
from consistent_catalog.state import TableState, encode_summary_sources, encode_table_sources
from tests.harness.builders import T0
from tests.harness.oracle import Checks

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
    """Compare barriers, cuts and plans with the ones the oracle recomputes. Off, only the invariants are checked
    ((a)-(e) and the drain): for repeated barriers more than one fix of protocol §3 is sound."""


# --- the simulation -----------------------------------------------------------------------------------


class Simulation:
    """The model: applies each step's action to the tables' metadata and bookkeeping, then runs the oracle's checks."""

    def __init__(self, specs: list[TableSpec], scenario: Scenario) -> None:
        self.tables = {s.name: SimTable(s.name, s.sources, s.mode, s.speed) for s in specs}
        self.order = [s.name for s in specs]  # topological: sources come first
        self.scenario = scenario
        self.clock = T0
        self.next_snapshot = 1
        self.next_row = 1
        self.subsets: list[frozenset[str]] = [frozenset(self.tables)]
        """Sets of tables whose cuts are checked, drawn with the steps."""
        self.checks = Checks(self)
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

    def plan(self, t: SimTable) -> tuple[int | None, Inputs, str]:
        """(T, inputs, action) of ``t``'s next epoch as the real ``plan_epoch`` plans it; the oracle checks the plan."""
        states = self.states()
        plan = plan_epoch(job_of(t.name), {s: states[s] for s in t.sources}, {t.name: states[t.name]}, upstream=states)
        self.checks.check_plan(t, plan)
        if plan.barrier is None:
            return None, {}, "done"
        return plan.barrier, dict(plan.inputs), plan.sinks[t.name].action

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
        _, _, action = self.plan(t)
        self.checks.check_replanned(t, barrier, action)

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
        self.check()
        self.checks.check_drained(final)

    def check(self) -> None:
        """Everything the oracle compares after a step (``tests.harness.oracle.Checks.check``)."""
        self.checks.check()


def simulate(data: st.DataObject, scenario: Scenario) -> None:
    sim = Simulation(data.draw(dags(), label="dag"), scenario)
    for step in data.draw(steps(len(sim.actions()), len(sim.tables)), label="steps"):
        sim.step(step)
    sim.drain()
