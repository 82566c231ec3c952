"""One algorithm, two languages: the Python resolver and the JVM resolver (the Spark plugin's) agree.

- every case of the checked-in corpus (``cases/*.json``, written by ``generate.py``): the Python
  resolver gives the expected answer, and the JVM resolver gives the same answer (one JVM for all);
- random histories from the pipeline simulation of ``tests/unit/test_property_dag.py`` (with
  expired history, foreign writes and revisions mixed in) are written as Iceberg metadata and
  resolved by both on every run (one JVM for all examples).

A disagreement fails: the JVM code (``jvm/spark-plugin/src/main/java/io/consistentcatalog/core``) is
a port of ``barrier.py``, ``state.py``, ``completeness.py`` and ``resolver.py``; change both together
and regenerate the corpus (``python -m tests.conformance.generate``).
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from consistent_catalog import properties as P
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.state import TableState, encode_summary_sources
from tests.conformance.corpus import (
    CASES,
    build_jvm,
    comparable,
    java_answers,
    load_cases,
    make_case,
    metadata_json,
    python_answer,
    write_case,
)

try:
    from tests.unit.test_property_dag import Scenario, Simulation, dags, steps
except ImportError:  # before the tests/ reorganisation
    from tests.test_property_dag import Scenario, Simulation, dags, steps  # type: ignore[no-redef]

CORPUS = load_cases()
LEVELS = ("repeatable-read", "read-committed", "read-uncommitted")
RANDOM_EXAMPLES = 50


@pytest.fixture(scope="module")
def jvm_module() -> Path:
    return build_jvm()


def test_corpus_is_there() -> None:
    assert len(CORPUS) >= 15, f"the conformance corpus in {CASES} is missing; run python -m tests.conformance.generate"
    assert sum(len(c["queries"]) for c in CORPUS.values()) >= 300


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_python_resolver_answers_the_corpus(name: str) -> None:
    case = CORPUS[name]
    wrong = []
    for index, query in enumerate(case["queries"]):
        answer = python_answer(case["tables"], query)
        if answer != query["expected"]:
            wrong.append(f"query {index} {_query_text(query)}:\n  expected {query['expected']}\n  python   {answer}")
    assert not wrong, f"{name}: the Python resolver no longer gives the corpus answers " + (
        "(regenerate the corpus if the change is deliberate, and port it to the JVM):\n" + "\n".join(wrong[:10])
    )


def test_jvm_resolver_answers_the_corpus(jvm_module: Path) -> None:
    answers = java_answers([CASES / name for name in sorted(CORPUS)], jvm_module)
    wrong = []
    for name, case in sorted(CORPUS.items()):
        for index, query in enumerate(case["queries"]):
            answer = answers.get((name, index))
            if answer is None or comparable(answer) != query["expected"]:
                wrong.append(f"{name} query {index} {_query_text(query)}:\n  expected {query['expected']}\n  jvm      {answer}")
    total = sum(len(c["queries"]) for c in CORPUS.values())
    assert not wrong, f"the JVM resolver disagrees on {len(wrong)} of {total} queries:\n" + "\n".join(wrong[:10])


# --- random histories -----------------------------------------------------------------------------------
class RecordingSimulation(Simulation):
    """The pipeline simulation without its own checks (test_property_dag runs those): only the metadata it builds."""

    def check(self) -> None:
        pass


def _query_text(query: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in query.items() if k != "expected"})


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


def _random_case(data: st.DataObject, number: int) -> dict[str, Any]:
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
    return make_case(f"random history {number}", tables, queries)


def test_random_histories_agree(tmp_path: Path, jvm_module: Path) -> None:
    """Random pipeline histories (the hypothesis simulation), resolved by both languages on every run."""
    cases: list[dict[str, Any]] = []

    @settings(
        max_examples=RANDOM_EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        cases.append(_random_case(data, len(cases)))

    collect()
    assert len(cases) >= RANDOM_EXAMPLES // 2
    paths = [write_case(tmp_path, f"random_{i:03d}", case) for i, case in enumerate(cases)]
    answers = java_answers(paths, jvm_module)
    wrong = []
    for path, case in zip(paths, cases):
        for index, query in enumerate(case["queries"]):
            answer = answers.get((path.name, index))
            if answer is None or comparable(answer) != query["expected"]:
                wrong.append(f"{path} query {index} {_query_text(query)}:\n  python {query['expected']}\n  jvm    {answer}")
    queries = sum(len(c["queries"]) for c in cases)
    assert not wrong, (
        f"the resolvers disagree on {len(wrong)} of {queries} queries over {len(cases)} random histories (the case "
        f"files stay in {tmp_path}; copy one to {CASES} to keep it):\n" + "\n".join(wrong[:8])
    )
