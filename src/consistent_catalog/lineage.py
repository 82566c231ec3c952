"""The lineage graph: which job writes which table from which sources (protocol §6). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from consistent_catalog import properties as P
from consistent_catalog.exceptions import CycleError
from consistent_catalog.state import TableState


def check_not_own_source(job: str, sources: Iterable[str], sinks: Iterable[str]) -> None:
    """Raise CycleError when a table is both a source and a sink of ``job``."""
    both = set(sources) & set(sinks)
    if both:
        raise CycleError(
            f"job {job!r} would read and write {sorted(both)[0]}: a table cannot be its own source; "
            "write to a new table instead"
        )


@dataclass(frozen=True)
class JobInfo:
    job: str
    sources: tuple[str, ...]
    sinks: tuple[str, ...]


@dataclass(frozen=True)
class LineageGraph:
    """Edges source -> sink, taken from each derived table's ``consistent.sources``/``consistent.job``."""

    tables: frozenset[str]
    upstream: Mapping[str, tuple[str, ...]]
    """Derived table -> its direct sources."""
    owners: Mapping[str, str | None] = field(default_factory=dict)
    """Derived table -> its owning job (``TableState.owner``: kept while no instance runs, protocol §6.2)."""
    generations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Table with a previous generation (protocol §6.10) -> ``{"previous_snapshot", "read_by"}``: the head of
    ``consistent-previous`` and the tables derived from it whose ``main`` still reads that generation."""

    @classmethod
    def from_states(cls, states: Iterable[TableState]) -> LineageGraph:
        upstream: dict[str, tuple[str, ...]] = {}
        owners: dict[str, str | None] = {}
        names: set[str] = set()
        states = list(states)
        for state in states:
            names.add(state.identifier)
            if state.sources:
                upstream[state.identifier] = state.sources
                owners[state.identifier] = state.owner
                names.update(state.sources)
        generations = {
            state.identifier: {
                "previous_snapshot": state.head(P.PREVIOUS_BRANCH),
                "read_by": sorted(o.identifier for o in states
                                  if state.identifier in upstream.get(o.identifier, ()) and o.reads_previous_generation(state)),
            }
            for state in states if state.head(P.PREVIOUS_BRANCH) is not None
        }
        return cls(frozenset(names), upstream, owners, generations)

    @property
    def downstream(self) -> dict[str, tuple[str, ...]]:
        result: dict[str, list[str]] = {}
        for sink, sources in self.upstream.items():
            for source in sources:
                result.setdefault(source, []).append(sink)
        return {k: tuple(sorted(v)) for k, v in result.items()}

    def roots(self) -> list[str]:
        return sorted(t for t in self.tables if t not in self.upstream)

    def jobs(self) -> list[JobInfo]:
        by_job: dict[str | None, list[str]] = {}
        for sink, job in self.owners.items():
            by_job.setdefault(job, []).append(sink)
        infos = []
        for job, sinks in by_job.items():
            if job is None:
                continue
            sources = sorted({s for sink in sinks for s in self.upstream[sink]})
            infos.append(JobInfo(job, tuple(sources), tuple(sorted(sinks))))
        return sorted(infos, key=lambda j: j.job)

    def _walk(self, start: Iterable[str], edges: Mapping[str, tuple[str, ...]]) -> set[str]:
        seen: set[str] = set()
        stack = list(start)
        while stack:
            node = stack.pop()
            for nxt in edges.get(node, ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    def descendants(self, tables: Iterable[str]) -> set[str]:
        """Every table downstream of ``tables`` (transitively), excluding the tables themselves unless in a cycle."""
        return self._walk(tables, self.downstream)

    def ancestors(self, tables: Iterable[str]) -> set[str]:
        return self._walk(tables, self.upstream)

    def connected(self, tables: Iterable[str]) -> set[str]:
        """The given tables plus everything upstream and downstream of them."""
        tables = set(tables)
        return tables | self.ancestors(tables) | self.descendants(tables)

    def components(self, tables: Iterable[str]) -> list[set[str]]:
        """The weakly connected components containing ``tables`` (siblings of a shared source included).

        Unlike ``connected`` (ancestors and descendants only), a component also holds the other tables
        derived from a shared source: every table whose cut can depend on the same root data.
        """
        undirected: dict[str, set[str]] = {}
        for sink, sources in self.upstream.items():
            for source in sources:
                undirected.setdefault(sink, set()).add(source)
                undirected.setdefault(source, set()).add(sink)
        found: list[set[str]] = []
        seen: set[str] = set()
        for table in tables:
            if table in seen:
                continue
            component = {table}
            stack = [table]
            while stack:
                for nxt in undirected.get(stack.pop(), ()):
                    if nxt not in component:
                        component.add(nxt)
                        stack.append(nxt)
            seen |= component
            found.append(component)
        return found

    def subgraph(self, tables: Iterable[str]) -> LineageGraph:
        """The graph restricted to ``tables`` (edges and owners of those tables only)."""
        keep = frozenset(tables)
        return LineageGraph(
            keep,
            {k: v for k, v in self.upstream.items() if k in keep},
            {k: v for k, v in self.owners.items() if k in keep},
            {k: v for k, v in self.generations.items() if k in keep},
        )

    def topological(self, tables: Iterable[str] | None = None) -> list[str]:
        """Tables ordered so that every source comes before the tables derived from it."""
        wanted = set(self.tables if tables is None else tables)
        order: list[str] = []
        done: set[str] = set()

        def visit(node: str) -> None:
            if node in done:
                return
            done.add(node)
            for source in self.upstream.get(node, ()):
                if source in wanted:
                    visit(source)
            order.append(node)

        for node in sorted(wanted):
            visit(node)
        return order

    def owned_by(self, job: str) -> list[str]:
        """The derived tables ``job`` owns."""
        return sorted(t for t, owner in self.owners.items() if owner == job)

    def check_new_edges(self, job: str, sources: Iterable[str], sinks: Iterable[str]) -> None:
        """Raise CycleError if registering ``job`` with edges source -> sink (for every pair) would close a cycle,
        or make the job read its own output: the job's sources (these plus those of every other table it owns,
        over any number of registrations or statements) may not include its sinks or anything downstream of
        them (protocol §6.1). The graph holds the catalog's tables without ``sinks``' own edges."""
        sources, sinks = set(sources), set(sinks)
        check_not_own_source(job, sources, sinks)
        reachable = self.descendants(sinks) | sinks
        closing = sorted(sources & reachable)
        if closing:
            raise CycleError(
                f"registering job {job!r} would close a cycle: source {closing[0]} is already downstream of "
                f"its sink(s) {', '.join(sorted(sinks))}; a pipeline must be a DAG — read from an upstream table instead"
            )
        owned = set(self.owned_by(job)) - sinks
        if not owned:
            return
        all_sinks = owned | sinks
        job_sources = sources | {s for table in owned for s in self.upstream.get(table, ())}
        produced = self.descendants(all_sinks) | all_sinks
        reading_own = sorted(job_sources & produced)
        if reading_own:
            table = reading_own[0]
            how = "is its own sink" if table in all_sinks else "is downstream of its sinks"
            raise CycleError(
                f"job {job!r} would read its own output: {table} {how} ({', '.join(sorted(all_sinks))}); a job's "
                "epoch reads its sources at a barrier it has not written yet — compute this table in another job, "
                "or read from the tables upstream of it"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "tables": sorted(self.tables),
            "roots": self.roots(),
            "edges": [{"source": s, "sink": t} for t, srcs in sorted(self.upstream.items()) for s in srcs],
            "jobs": [{"job": j.job, "sources": list(j.sources), "sinks": list(j.sinks)} for j in self.jobs()],
            "generations": {t: dict(g) for t, g in sorted(self.generations.items())},
        }
