"""Which barriers a table is *complete* at: its content reflects exactly its sources' state there.

protocol §4's ``T* = min W(X)`` is only consistent when every derived table processed that very barrier.
Jobs take all source progress at once (T = min W(source)), so a job may skip barriers: a table with
epochs at 100 and 300 holds, at barrier 200, its sources' data as of 100. A sibling that did run at
200 would then disagree with it. A derived table X is complete at t when t <= W(X), its sources are
complete at t, and the inputs recorded in ``snap(X, t)``'s ``consistent.sources`` hold the same rows
as each source's ``snap(src, t)``. Roots are complete at every t <= W. Cuts and epoch plans use the
newest barrier at which every table involved is complete. Pure: works on TableStates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from consistent_catalog import properties as P
from consistent_catalog.state import TableState

BranchOf = Callable[[TableState], str]


def main_branch(state: TableState) -> str:
    return P.MAIN_BRANCH


class Completeness:
    """Answers "is table X complete at barrier t?" over a set of states that includes X's upstream tables.

    A source missing from ``states`` (dropped, or not loaded) cannot be checked and is trusted.
    """

    def __init__(self, states: Mapping[str, TableState], branch_of: BranchOf = main_branch) -> None:
        self.states = states
        self.branch_of = branch_of
        self._memo: dict[tuple[str, int], bool] = {}

    def complete(self, name: str, barrier: int) -> bool:
        key = (name, barrier)
        if key not in self._memo:
            self._memo[key] = self._complete(name, barrier)
        return self._memo[key]

    def _complete(self, name: str, barrier: int) -> bool:
        state = self.states.get(name)
        if state is None:
            return True
        branch = self.branch_of(state)
        mark = state.watermark(branch)
        if mark is None or barrier > mark:
            return False
        if state.is_root:
            return True
        point = state.branch(branch).snap_at(barrier)
        content = None if point is None else point[0]
        at_head = content == state.head(branch) or (content is None and state.branch(branch).head_barrier is None)
        if barrier == state.watermark_property and at_head and self._marked_on(state, content):
            # protocol §5.3: an empty epoch published only the watermark on top of this content; the job had
            # read its sources at this very barrier, so the table is complete if they are
            return all(self.complete(source, barrier) for source in state.sources)
        recorded = state.recorded_inputs(content)
        for source in state.sources:
            source_state = self.states.get(source)
            if source_state is None:
                continue
            if not self.complete(source, barrier):
                return False
            history = source_state.branch(self.branch_of(source_state))
            source_point = history.snap_at(barrier)
            if not history.same_data(recorded.get(source), None if source_point is None else source_point[0]):
                return False
        return True

    @staticmethod
    def _marked_on(state: TableState, content: int | None) -> bool:
        marker = state.properties.get(P.WATERMARK_SNAPSHOT)
        return marker is None or marker == str(state.head()) or marker == (P.NO_SNAPSHOT if content is None else str(content))

    def all_complete(self, names: Iterable[str], barrier: int) -> bool:
        return all(self.complete(name, barrier) for name in names)

    def candidates(self, upper: int) -> Iterator[int]:
        """``upper``, then every barrier b and b - 1 below it of the known tables' snapshots, newest first.

        Completeness only changes where some table's snapshot lands, so these are the only barriers
        at which the newest complete point can lie.
        """
        points = {upper}
        for state in self.states.values():
            for value in state.branch(self.branch_of(state)).barriers:
                if value is not None and value <= upper:
                    points.add(value)
                    if value > 0:
                        points.add(value - 1)
        return iter(sorted(points, reverse=True))

    def latest(self, names: Iterable[str], upper: int) -> int | None:
        """The newest barrier <= ``upper`` at which every table in ``names`` is complete (None: none is)."""
        names = list(names)
        if self.all_complete(names, upper):  # the common case: no search
            return upper
        for barrier in self.candidates(upper):
            if self.all_complete(names, barrier):
                return barrier
        return None
