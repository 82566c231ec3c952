"""One algorithm, two languages: the Python resolver and the JVM resolver (the Spark plugin's) agree.

- every case of the checked-in corpus (``cases/*.json``, written by ``generate.py``): the Python
  resolver gives the expected answer, and the JVM resolver gives the same answer (one JVM for all);
- random histories from the pipeline simulation (``tests/harness/random_histories.py``: with
  expired history, foreign writes, staged epochs and revisions mixed in) are written as Iceberg
  metadata and resolved by both on every run (one JVM for all examples).

The writer's side too (``write_plans.py``): for a history and a job, the epoch it plans (protocol §5.1) and
the exact requirements and updates of every commit it sends (§5.2-§5.3), from ``epoch_plan``/``epoch_commits``
and from the plugin's ``EpochPlanner``/``EpochCommits``, in the ``w*`` and ``h14`` cases and for each derived
table of the random histories; and every other commit (ingests, watermark advances, registration, renewal, release,
reassignment) as ``write_plans`` and the plugin's ``WritePlanner`` plan it, in ``h16``. Fault classes and durations
(``fault_cases.py``) in ``h15``.

A disagreement fails: the JVM code (``jvm/spark-plugin/src/main/java/io/consistentcatalog/core``) is
a port of ``barrier.py``, ``state.py``, ``completeness.py``, ``resolver.py``, ``epoch_plan.py``,
``epoch_commits.py``, ``write_plans.py`` and the range of ``changelog.py`` (``ChangeRange``, the ``h17`` case); change
both together and regenerate the corpus (``python -m tests.conformance.generate``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.conformance import write_plans
from tests.conformance.corpus import (
    CASES,
    build_jvm,
    comparable,
    java_answers,
    load_cases,
    python_answer,
    write_case,
)
from tests.harness.random_histories import random_case

CORPUS = load_cases()
RANDOM_EXAMPLES = 50


def _query_text(query: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in query.items() if k != "expected"})


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


def test_write_plans_cover_every_action_and_commit() -> None:
    """The corpus holds a write plan for every action of §5.1, every commit of §5.2-§5.3 and the refusals."""
    seen: set[str] = set()
    for case in CORPUS.values():
        for query in case["queries"]:
            answer = query["expected"]
            if query.get("kind") not in write_plans.KINDS:
                continue
            if "plan" in answer:
                seen.update(p["action"] for p in answer["plan"]["sinks"].values())
                seen.update(c["commit"] for commits in answer["commits"].values() for c in commits)
                if answer["plan"]["barrier"] is None:
                    seen.add("no barrier")
            else:
                seen.add(answer.get("error", "ok"))
    wanted = {"done", "publish-staged", "watermark", "stage", "genesis", "reset", "staged-write", "publish", "no barrier",
              "ok", "CycleError", "UntrackedWriteError", "TableNotFoundError"}
    assert wanted <= seen, f"the write plans of the corpus lack {sorted(wanted - seen)}; run python -m tests.conformance.generate"


def test_write_commits_cover_every_commit_kind() -> None:
    """The corpus plans every commit of ``write_plans``/``WritePlanner`` (§5.6, §6.1-§6.3, §6.9) at least once to a
    commit, and the outcomes without one: a skipped ingest, nothing to commit, each refusal class."""
    committed: set[str] = set()
    outcomes: set[str] = set()
    for case in CORPUS.values():
        for query in case["queries"]:
            if query.get("kind") != "write-commit":
                continue
            answer = query["expected"]
            if answer.get("commit"):
                committed.add(query["commit"])
            elif "skipped_by" in answer:
                outcomes.add("skipped")
            elif "error" in answer:
                outcomes.add(answer["error"])
            else:
                outcomes.add("nothing")
    kinds = {"ingest", "advance", "idle-advance", "register", "unregister", "renew", "reassign"}
    assert kinds <= committed, f"the corpus plans no commit of {sorted(kinds - committed)}"
    wanted = {"skipped", "nothing", "InvalidInputError", "InvalidBarrierError", "OwnershipError", "FencedError",
              "TableNotFoundError"}
    assert wanted <= outcomes, f"the write commits of the corpus lack {sorted(wanted - outcomes)}"


# --- random histories -----------------------------------------------------------------------------------
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
        cases.append(random_case(data, len(cases)))

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
