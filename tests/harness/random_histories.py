"""Random pipeline histories as conformance cases: Iceberg metadata JSON plus queries with their expected answers.

``random_case`` draws a run of the pipeline simulation (``tests.harness.simulation``, without its checks),
mixes in what real tables also see (expired history, foreign writes, staged epochs that were never
published, revisions), writes every table as Iceberg metadata JSON and asks the queries a corpus case asks
(single tables, subsets of the simulation at every level and ``as_of``, lineage components), and the writer's
queries (each derived table's next epoch and its commits, a registration's cycle check). The expected answers
come from ``tests.conformance.corpus.make_case``: pyiceberg's parse and the Python resolver and writer.

Used by ``tests/conformance/test_conformance.py`` (the JVM resolver gives the same answers) and
``tests/unit/test_metadata.py`` (the lean decoder reads these files as pyiceberg does).
"""

from __future__ import annotations

import random
from datetime import datetime, timezone
from typing import Any

from hypothesis import strategies as st

from consistent_catalog import properties as P
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.state import TableState, encode_summary_sources
from tests.conformance.corpus import make_case, metadata_json
from tests.conformance.write_plans import new_edges_query, write_plan_query
from tests.harness.simulation import Scenario, Simulation, dags, steps

LEVELS = ("repeatable-read", "read-committed", "read-uncommitted")


class RecordingSimulation(Simulation):
    """The pipeline simulation without its own checks (``tests/unit/test_property_dag.py`` runs those): only the
    metadata it builds."""

    def check(self) -> None:
        pass


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def _expire_prefix(state: TableState, count: int) -> TableState:
    """Remove the ``count`` oldest snapshots of main's ancestry the way Iceberg's expiry does (children keep
    their parent id), unless a ref points at one of them."""
    chain = []
    current = state.head()
    while current is not None and current in state.snapshots:
        chain.append(current)
        current = state.snapshots[current].parent_id
    chain.reverse()
    gone = set(chain[: min(count, len(chain) - 1)])
    if not gone or gone & set(state.branches.values()):
        return state
    kept = {sid: r for sid, r in state.snapshots.items() if sid not in gone}
    return TableState(state.identifier, kept, dict(state.branches), dict(state.properties))


def _foreign_write(state: TableState, snapshot_id: int, ts: int) -> TableState:
    """An append to main without consistent.barrier (another engine wrote the table)."""
    head = state.head()
    summary = {"added-data-files": "1", "added-records": "1", "total-records": "99", "engine-name": "spark"}
    record = SnapshotRecord(snapshot_id, head, ts, "append", summary)
    return TableState(
        state.identifier, {**state.snapshots, snapshot_id: record}, {**state.branches, P.MAIN_BRANCH: snapshot_id},
        dict(state.properties),
    )


def _stage_epoch(state: TableState, states: dict[str, TableState], snapshot_id: int, ts: int) -> TableState:
    """An epoch staged on consistent-staged at T = min W(source) and never published (its job was killed)."""
    marks = [states[s].watermark() for s in state.sources if s in states]
    head = state.head()
    current = state.watermark() if head is not None else None
    if head is None or not marks or any(m is None for m in marks) or (current is not None and min(marks) <= current):
        return state
    inputs = {s: states[s].head() for s in state.sources}
    summary = {
        P.BARRIER: str(min(marks)), P.JOB: state.job or "job", P.SOURCES: encode_summary_sources(inputs),
        "added-data-files": "1", "added-records": "1", "total-records": "99",
    }
    record = SnapshotRecord(snapshot_id, head, ts, "append", summary)
    return TableState(
        state.identifier, {**state.snapshots, snapshot_id: record}, {**state.branches, P.STAGED_BRANCH: snapshot_id},
        dict(state.properties),
    )


def random_case(data: st.DataObject, number: int) -> dict[str, Any]:
    """One random pipeline history as a corpus case (``random history <number>``), its answers computed."""
    scenario = data.draw(
        st.sampled_from(
            [Scenario(), Scenario(compact_derived=True), Scenario(foreign_roots=True),
             Scenario(foreign_roots=True, repeat_barriers=True, exact=False)]
        ),
        label="scenario",
    )
    sim = RecordingSimulation(data.draw(dags(), label="dag"), scenario)
    drawn = data.draw(steps(len(sim.actions()), len(sim.tables)), label="steps")
    stop = data.draw(st.integers(min_value=len(drawn) // 2, max_value=len(drawn)), label="stop after")
    for step in drawn[:stop]:  # stopping early leaves staged epochs and lagging jobs behind
        sim.step(step)
    if data.draw(st.booleans(), label="drain"):
        sim.drain()
    states = sim.states()
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    for name in sorted(states):
        roll = rng.random()
        if roll < 0.15:
            states[name] = _expire_prefix(states[name], rng.randint(1, 3))
        elif roll < 0.3 and not states[name].is_root and states[name].head() is not None:
            states[name] = _foreign_write(states[name], 10_000 + len(states[name].snapshots), sim.clock + 1)
        elif roll < 0.6 and not states[name].is_root:
            states[name] = _stage_epoch(states[name], states, 20_000 + len(states[name].snapshots), sim.clock + 2)
        if rng.random() < 0.1:
            states[name].properties[P.REVISION] = str(rng.randint(1, 3))  # type: ignore[index]
    tables = {name: metadata_json(state) for name, state in states.items()}
    barriers = sorted(
        {int(r.summary[P.BARRIER]) for s in states.values() for r in s.snapshots.values() if P.BARRIER in r.summary}
        | {r.timestamp_ms for s in states.values() for r in s.snapshots.values()}
    )
    queries: list[dict[str, Any]] = [{"tables": [name], "level": level} for name in sorted(states) for level in LEVELS]
    for subset in sim.subsets[:5]:
        names = sorted(subset)
        for level in LEVELS:
            queries.append({"tables": names, "level": level})
            if barriers:
                for as_of in rng.sample(barriers, min(2, len(barriers))):
                    queries.append({"tables": names, "level": level, "as_of": as_of + rng.choice((-1, 0, 1))})
        if barriers:
            queries.append({"tables": names, "as_of": _iso(rng.choice(barriers))})
    for name in rng.sample(sorted(states), min(2, len(states))):
        queries.append({"kind": "component", "table": name, "level": rng.choice(LEVELS)})
        if barriers:
            queries.append({"kind": "component", "table": name, "as_of": rng.choice(barriers)})
    # the writer's side: each derived table's next epoch, and a registration's cycle check with random edges
    for name in sorted(states):
        state = states[name]
        if not state.is_root:
            queries.append(write_plan_query(state.job or "job", state.sources, [name]))
    names = sorted(states)
    queries.append(new_edges_query("job-new", rng.sample(names, min(2, len(names))), rng.sample(names, 1)))
    return make_case(f"random history {number}", tables, queries)
