"""Property-based simulation of a pipeline of tables (protocol §3-§5), purely as TableState values.

The simulation (a random DAG of roots and jobs and an independent content model) lives in
``tests/harness/simulation.py``, its oracle (the expected barriers, cuts and plans recomputed from the
model's own bookkeeping, and the invariants checked after every step) in ``tests/harness/oracle.py``;
this module runs it under hypothesis in several
scenarios, through one fixed run, and on the smallest examples of what the random runs check.

"Complete at t" is the project's refinement of protocol §4/§5 (``consistent_catalog.completeness``): cuts
and plans take the newest barrier <= min W at which all their tables are complete; with T = min W alone
(the letter of protocol §4/§5), two jobs that skip different barriers give inconsistent cuts (see the two
examples at the end).

Shrinking a failing simulation takes minutes, so it is off unless CONSISTENT_CATALOG_SHRINK=1 is set;
the notes printed with a failure list every step of the run.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from consistent_catalog.epoch_plan import plan_epoch
from consistent_catalog.resolver import resolve
from consistent_catalog.state import TableState
from tests.harness.builders import T0, compaction, derived_state, root_state, table_state
from tests.harness.simulation import MAIN, Inputs, Scenario, Simulation, Step, TableSpec, job_of, simulate

SIMULATION = settings(
    max_examples=150,
    deadline=None,
    report_multiple_bugs=False,
    phases=tuple(Phase)
    if os.environ.get("CONSISTENT_CATALOG_SHRINK")
    else tuple(p for p in Phase if p != Phase.shrink),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SIMULATION
@given(st.data())
def test_pipeline_simulation(data: st.DataObject) -> None:
    """Roots written with ConsistentCatalog.ingest / advance_watermark semantics, roots compacted.

    After every step: resolve (all three levels) and plan_epoch agree with the expectations the simulation
    recomputes; (a) cut contents agree along lineage; (b) recorded inputs lie inside the cut; (c) T* never
    decreases; (d) staged epochs are invisible at repeatable-read and visible at read-committed;
    (e) a barrier is published at most once. At the end, draining the pipeline brings every cut to X.
    """
    simulate(data, Scenario())


@pytest.mark.slow  # 150 random pipelines, 3-10 s; the base simulation stays in the fast tier
@SIMULATION
@given(st.data())
def test_pipeline_simulation_with_compacted_derived_tables(data: st.DataObject) -> None:
    """The same, with compactions of derived tables (protocol §3: a replace snapshot keeps its parent's barrier;
    it changes no data, so it must change no cut and no plan)."""
    simulate(data, Scenario(compact_derived=True))


@pytest.mark.slow  # 150 random pipelines, 3-10 s; the base simulation stays in the fast tier
@SIMULATION
@given(st.data())
def test_pipeline_simulation_with_foreign_root_writers(data: st.DataObject) -> None:
    """The same, with roots written by plain Iceberg writers whose clocks (or event-time tags) may be behind
    b(head) or the watermark: a barrier already declared complete must still never change content."""
    simulate(data, Scenario(foreign_roots=True))


@pytest.mark.slow  # 150 random pipelines, 3-10 s; the base simulation stays in the fast tier
@SIMULATION
@given(st.data())
def test_pipeline_simulation_with_repeated_root_barriers(data: st.DataObject) -> None:
    """The invariants (a)-(e) and the drain, where a foreign root writer may also commit with exactly
    b(head) = W(X) (two system-time commits in one millisecond, an event-time batch in two commits)."""
    simulate(data, Scenario(foreign_roots=True, repeat_barriers=True, exact=False))


def test_pipeline_simulation_where_a_job_waits_for_its_sources_to_align() -> None:
    """A fixed run through the checks above: db.t3 = f(db.t1, db.t2) with db.t1 = f(db.t0). db.t1's epochs
    at 100 and 500 skip 300 (a row of db.t0 lands there) while W(db.t2) = 400, so db.t3 must not take
    T = min W = 400 (db.t1@400 holds db.t0's rows of 100 only) but the newest barrier where both are complete."""
    specs = [
        TableSpec("db.t0", (), "system", 2),
        TableSpec("db.t1", ("db.t0",), "derived", 1),
        TableSpec("db.t2", (), "system", 2),
        TableSpec("db.t3", ("db.t1", "db.t2"), "derived", 1),
    ]
    script = [
        ("ingest", "db.t0"),
        ("epoch", "db.t1"),
        ("ingest", "db.t0"),
        ("ingest", "db.t2"),
        ("ingest", "db.t0"),
        ("epoch", "db.t1"),
        ("epoch", "db.t3"),
        ("epoch", "db.t3"),
        ("advance-watermark", "db.t2"),
        ("epoch", "db.t3"),
    ]

    @settings(max_examples=1, database=None, phases=[Phase.explicit, Phase.generate])
    @given(st.just(None))
    def run(_: None) -> None:  # note() and event() need a hypothesis test
        sim = Simulation(specs, Scenario())
        actions = sim.actions()
        for action in script:
            sim.step(
                Step(actions.index(action), tick=100, rows=1, late=False, amount=0, split=0, kill=0, subset=0b1110)
            )
        t3 = sim.tables["db.t3"]
        t2 = sim.tables["db.t2"]
        assert t3.published[0] < t2.barrier[t2.head()]  # type: ignore[index]  # its first epoch waited below W(db.t2)
        sim.drain()

    run()


# --- the smallest examples of what the random runs check ------------------------------------------------


def _derived(name: str, sources: list[str], epochs: list[tuple[int, Inputs]], first_id: int) -> TableState:
    return derived_state(name, sources, epochs, first_id, job=job_of(name))


# db.r has one row per snapshot: 1 (b=100), 2 (b=150), 3 (b=200). Job a read db.r at T=100 and at T=200
# (its epochs skip 150); job b ran once, at T=150, when W(db.r) was 150.
R = root_state("db.r", [100, 150, 200])
A = _derived("db.a", ["db.r"], [(100, {"db.r": 1}), (200, {"db.r": 3})], first_id=10)
B = _derived("db.b", ["db.r"], [(150, {"db.r": 2})], first_id=20)
R_ROWS = {None: set(), 1: {1}, 2: {1, 2}, 3: {1, 2, 3}}
A_ROWS = {None: set(), 10: set(), 11: {1}, 12: {1, 2, 3}}
B_ROWS = {None: set(), 20: set(), 21: {1, 2}}


def test_sibling_jobs_at_different_speeds_give_a_consistent_cut() -> None:
    """With T* = min W (the letter of protocol §4) the cut of {db.r, db.a, db.b} is 150 and reads db.a at its
    epoch 100: db.a would miss the row that db.r and db.b hold at 150."""
    for tables in ([R, A, B], [A, B]):
        cut = resolve(tables, upstream=[R, A, B])
        assert cut.barrier is not None and cut.barrier <= 150
        ids = cut.snapshot_ids
        assert A_ROWS[ids["db.a"]] == B_ROWS[ids["db.b"]]
        if "db.r" in ids:
            assert A_ROWS[ids["db.a"]] == R_ROWS[ids["db.r"]]


def test_diamond_job_plans_a_barrier_both_sources_processed() -> None:
    """db.c = union(db.a, db.b): at T = min W(source) = 150, db.a@150 holds db.r's rows of 100 while db.b@150
    holds those of 150; an epoch there would mix two states of db.r."""
    sink = _derived("db.c", ["db.a", "db.b"], [], 30)
    plan = plan_epoch("job-c", {"db.a": A, "db.b": B}, {"db.c": sink}, upstream={"db.r": R, "db.a": A, "db.b": B})
    assert plan.barrier is not None and plan.barrier <= 150
    a_in, b_in = plan.inputs["db.a"], plan.inputs["db.b"]
    assert A_ROWS[a_in] == B_ROWS[b_in], f"plan {plan.barrier} reads db.a@{a_in} and db.b@{b_in}"


def test_previous_inputs_survive_a_compaction_of_the_sink() -> None:
    """Protocol §3 allows ``replace`` snapshots (compaction) on any table; they carry no consistent.* summary keys.
    Protocol §5.1: the previous epoch's inputs are in the sink head's consistent.sources — after a compaction that
    is the snapshot it compacted. Reading only the head's own summary would give {} (read_increment would then
    re-read every source row: duplicates in append mode)."""
    r = root_state("db.r", [100, 200])
    sink = _derived("db.a", ["db.r"], [(100, {"db.r": 1})], first_id=10)
    compacted = table_state("db.a", [*sink.snapshots.values(), compaction(12, 11, T0 + 1)], {MAIN: 12}, sink.properties)
    assert plan_epoch("job-a", {"db.r": r}, {"db.a": sink}).sinks["db.a"].previous_inputs == {"db.r": 1}
    plan = plan_epoch("job-a", {"db.r": r}, {"db.a": compacted})
    assert (plan.barrier, plan.sinks["db.a"].action) == (200, "stage")
    assert plan.sinks["db.a"].previous_inputs == {"db.r": 1}


def test_compaction_of_a_derived_table_does_not_move_the_cut_back() -> None:
    """Protocol §4: T* never decreases. db.a's epoch at 100 read db.r@1; compacting db.a changes no data, but the
    compaction snapshot (b=100, no consistent.sources of its own) is now snap(db.a, 100)."""
    r = root_state("db.r", [100])
    sink = _derived("db.a", ["db.r"], [(100, {"db.r": 1})], first_id=10)
    before = resolve([r, sink])
    assert (before.barrier, before.snapshot_ids) == (100, {"db.r": 1, "db.a": 11})
    compacted = table_state("db.a", [*sink.snapshots.values(), compaction(12, 11, T0 + 1)], {MAIN: 12}, sink.properties)
    after = resolve([r, compacted])
    assert (after.barrier, after.snapshot_ids) == (100, {"db.r": 1, "db.a": 12})
