"""The lineage graph (protocol §6.1) on hand-built TableStates: edges, roots, jobs, walks, order, cycles, components.

The pipeline, each derived table written by the job named after the arrow::

    db.a ──jc──> db.c ──┐
      │                 ├──je──> db.e
      └──jd──> db.d ────┘
    db.b ──jd──┘   └─jd─> db.d2        (jd: one job, two sinks, two sources)
    db.c ──(old-job, unregistered)──> db.f
    db.x ──jy──> db.y                  (a second, separate pipeline)
    db.z0 ──jz──> db.a0                (a source whose name sorts after its sink)

Every expected value below is written out by hand from this picture.
"""

from __future__ import annotations

import pytest

from consistent_catalog import properties as P
from consistent_catalog.exceptions import CycleError
from consistent_catalog.lineage import JobInfo, LineageGraph
from consistent_catalog.state import TableState
from tests.harness.builders import derived_properties, epoch, genesis, ingest, table_state


def root(name: str) -> TableState:
    return table_state(name, [ingest(1, None, 100)], head=1)


def derived(name: str, job: str, *sources: str) -> TableState:
    return table_state(name, [genesis(1, job=job)], properties=derived_properties(job, *sources), head=1)


def unregistered(name: str, last_writer: str, *sources: str) -> TableState:
    """A sink whose job unregistered: consistent.sources stays, consistent.job is gone; its head names the writer."""
    properties = {k: v for k, v in derived_properties(last_writer, *sources).items() if k != P.JOB}
    records = [epoch(1, None, 100, job=last_writer, sources={s: 1 for s in sources})]
    return table_state(name, records, properties=properties, head=1)


STATES = [
    root("db.a"),
    root("db.b"),
    derived("db.c", "jc", "db.a"),
    derived("db.d", "jd", "db.a", "db.b"),
    derived("db.d2", "jd", "db.b", "db.a"),
    derived("db.e", "je", "db.c", "db.d"),
    unregistered("db.f", "old-job", "db.c"),
    root("db.x"),
    derived("db.y", "jy", "db.x"),
    root("db.z0"),
    derived("db.a0", "jz", "db.z0"),
]
FIRST = {"db.a", "db.b", "db.c", "db.d", "db.d2", "db.e", "db.f"}
SECOND = {"db.x", "db.y"}
THIRD = {"db.z0", "db.a0"}


@pytest.fixture
def graph() -> LineageGraph:
    return LineageGraph.from_states(STATES)


def test_from_states_reads_edges_and_owners(graph: LineageGraph) -> None:
    assert graph.tables == FIRST | SECOND | THIRD
    assert dict(graph.upstream) == {
        "db.c": ("db.a",),
        "db.d": ("db.a", "db.b"),
        "db.d2": ("db.a", "db.b"),
        "db.e": ("db.c", "db.d"),
        "db.f": ("db.c",),
        "db.y": ("db.x",),
        "db.a0": ("db.z0",),
    }
    # the owner is the registered job, or the job that wrote the head when none is registered any more
    assert dict(graph.owners) == {
        "db.c": "jc", "db.d": "jd", "db.d2": "jd", "db.e": "je", "db.f": "old-job", "db.y": "jy", "db.a0": "jz",
    }


def test_a_source_without_a_state_is_still_a_table_of_the_graph() -> None:
    graph = LineageGraph.from_states([derived("db.c", "jc", "db.a")])  # db.a not loaded (dropped, or not asked for)
    assert graph.tables == {"db.a", "db.c"}
    assert graph.roots() == ["db.a"]


def test_downstream_and_roots(graph: LineageGraph) -> None:
    assert graph.downstream == {
        "db.a": ("db.c", "db.d", "db.d2"),
        "db.b": ("db.d", "db.d2"),
        "db.c": ("db.e", "db.f"),
        "db.d": ("db.e",),
        "db.x": ("db.y",),
        "db.z0": ("db.a0",),
    }
    assert graph.roots() == ["db.a", "db.b", "db.x", "db.z0"]


def test_jobs_group_sinks_and_union_their_sources(graph: LineageGraph) -> None:
    assert graph.jobs() == [
        JobInfo("jc", ("db.a",), ("db.c",)),
        JobInfo("jd", ("db.a", "db.b"), ("db.d", "db.d2")),
        JobInfo("je", ("db.c", "db.d"), ("db.e",)),
        JobInfo("jy", ("db.x",), ("db.y",)),
        JobInfo("jz", ("db.z0",), ("db.a0",)),
        JobInfo("old-job", ("db.c",), ("db.f",)),
    ]


def test_a_derived_table_nobody_wrote_has_no_job() -> None:
    nobody = {k: v for k, v in derived_properties("x", "db.a").items() if k != P.JOB}
    graph = LineageGraph.from_states([root("db.a"), table_state("db.n", [], properties=nobody)])
    assert dict(graph.owners) == {"db.n": None}
    assert graph.jobs() == []
    assert dict(graph.upstream) == {"db.n": ("db.a",)}


def test_descendants_ancestors_connected(graph: LineageGraph) -> None:
    assert graph.descendants(["db.a"]) == {"db.c", "db.d", "db.d2", "db.e", "db.f"}
    assert graph.descendants(["db.d"]) == {"db.e"}
    assert graph.descendants(["db.e"]) == set()
    assert graph.ancestors(["db.e"]) == {"db.a", "db.b", "db.c", "db.d"}
    assert graph.ancestors(["db.f", "db.y"]) == {"db.a", "db.c", "db.x"}
    assert graph.ancestors(["db.a"]) == set()
    # connected: the tables themselves, their ancestors and descendants, but not siblings (db.d, db.b here)
    assert graph.connected(["db.c"]) == {"db.a", "db.c", "db.e", "db.f"}
    assert graph.connected(["db.y"]) == {"db.x", "db.y"}


def test_components_include_siblings_of_a_shared_source(graph: LineageGraph) -> None:
    # unlike connected(), a component also holds db.b and db.d, db.d2 (they share db.a with db.c)
    assert graph.components(["db.c"]) == [FIRST]
    assert graph.components(["db.y", "db.e", "db.c", "db.x"]) == [SECOND, FIRST]  # one entry per component, in order
    assert graph.components(["db.a0"]) == [THIRD]
    assert graph.components([]) == []
    assert graph.components(["db.unknown"]) == [{"db.unknown"}]  # a table without edges is its own component


def test_topological_order(graph: LineageGraph) -> None:
    order = graph.topological()
    assert sorted(order) == sorted(graph.tables)
    position = {table: i for i, table in enumerate(order)}
    # every edge, written out from the picture: the source comes first (db.z0 although it sorts after db.a0)
    for source, sink in [("db.a", "db.c"), ("db.a", "db.d"), ("db.b", "db.d"), ("db.a", "db.d2"), ("db.b", "db.d2"),
                         ("db.c", "db.e"), ("db.d", "db.e"), ("db.c", "db.f"), ("db.x", "db.y"), ("db.z0", "db.a0")]:
        assert position[source] < position[sink], (source, sink, order)
    # a subset keeps only its own tables; where only one order is possible, that is the one
    assert graph.topological(["db.a0", "db.z0"]) == ["db.z0", "db.a0"]
    assert graph.topological(["db.e", "db.c", "db.a"]) == ["db.a", "db.c", "db.e"]
    assert sorted(graph.topological(["db.e", "db.a0", "db.c", "db.z0"])) == ["db.a0", "db.c", "db.e", "db.z0"]


def test_check_new_edges_refuses_a_table_that_reads_itself(graph: LineageGraph) -> None:
    with pytest.raises(CycleError, match="its own source") as raised:
        graph.check_new_edges("loop", ["db.a", "db.e"], ["db.e"])
    assert "db.e" in str(raised.value)


@pytest.mark.parametrize(
    ("sources", "sinks", "closing"),
    [
        (["db.e"], ["db.a"], "db.e"),  # db.e is downstream of db.a
        (["db.d2"], ["db.b"], "db.d2"),
        (["db.x", "db.f"], ["db.c"], "db.f"),  # only db.f closes the cycle
    ],
)
def test_check_new_edges_refuses_a_cycle(graph: LineageGraph, sources: list[str], sinks: list[str], closing: str) -> None:
    with pytest.raises(CycleError, match="close a cycle") as raised:
        graph.check_new_edges("feedback", sources, sinks)
    assert f"source {closing} is already downstream" in str(raised.value)


@pytest.mark.parametrize(
    ("sources", "sinks"),
    [
        (["db.e"], ["db.x"]),  # joins the two pipelines; nothing flows back
        (["db.y"], ["db.c"]),
        (["db.a", "db.b"], ["db.new"]),
        (["db.c"], ["db.e"]),  # an edge that already exists
    ],
)
def test_check_new_edges_accepts_a_dag(graph: LineageGraph, sources: list[str], sinks: list[str]) -> None:
    graph.check_new_edges("ok", sources, sinks)  # no CycleError


def test_to_json(graph: LineageGraph) -> None:
    small = LineageGraph.from_states([root("db.x"), derived("db.y", "jy", "db.x")])
    assert small.to_json() == {
        "tables": ["db.x", "db.y"],
        "roots": ["db.x"],
        "edges": [{"source": "db.x", "sink": "db.y"}],
        "jobs": [{"job": "jy", "sources": ["db.x"], "sinks": ["db.y"]}],
        "generations": {},
    }
    assert len(graph.to_json()["edges"]) == 1 + 2 + 2 + 2 + 1 + 1 + 1
