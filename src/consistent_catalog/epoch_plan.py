"""Epoch planning (docs/protocol.md §5.1), pure: table states in, a plan out.

``plan_epoch`` decides, from metadata alone, the barrier of a job's next epoch, the input snapshot
of every source at it, and for every sink what the epoch has to do (``regenerate``, ``done``,
``publish-staged``, ``watermark`` or ``stage``). Re-planning after a crash is the same call. ``EpochJob``
(``consistent_catalog.epoch``) carries a plan out; the Spark jobs reuse it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from consistent_catalog import properties as P
from consistent_catalog.completeness import Completeness
from consistent_catalog.definition import DefinitionChange, definition_change
from consistent_catalog.exceptions import InvalidInputError
from consistent_catalog.state import TableState, parse_summary_sources

SinkAction = Literal["regenerate", "done", "publish-staged", "watermark", "stage"]


@dataclass(frozen=True)
class SinkPlan:
    sink: str
    action: SinkAction
    main_head: int | None
    staged_head: int | None
    previous_inputs: Mapping[str, int | None]
    """``consistent.sources`` of the sink's published head: where the last epoch's inputs ended."""
    revision: str | None = None
    """``consistent.revision`` as planned."""
    fence: int | None = None
    """The fence ref's head as planned, read where this instance was seen holding the lease: every commit of
    the epoch asserts it, so a takeover, revision, tag or expiry meanwhile makes it refused (protocol §6)."""
    change: DefinitionChange | None = None
    """Why the action is ``regenerate`` (protocol §6.10): another definition, schema, a rebuild, a source's switch."""
    replay: bool = False
    """``regenerate`` only: ``consistent-staged`` already holds this regeneration, finished: publish it as it is."""

    @property
    def previous_for_transform(self) -> Mapping[str, int | None]:
        """Where the transform's incremental reads start: nowhere for a new generation (a first epoch, §6.10)."""
        return {} if self.action == "regenerate" else self.previous_inputs


@dataclass(frozen=True)
class EpochPlan:
    job: str
    barrier: int | None
    """T = min over the sources of W(source) on main; None while a source has no watermark."""
    inputs: Mapping[str, int | None]
    """``snap(source, T)`` snapshot id of each source (None: empty at T)."""
    sinks: Mapping[str, SinkPlan]
    definition: str | None = None
    """The job's fingerprint (``consistent.definition``) that its staged snapshots record; None: unknown."""

    @property
    def regenerations(self) -> dict[str, DefinitionChange]:
        """The sinks whose action is ``regenerate``, with why."""
        return {s: p.change for s, p in self.sinks.items() if p.action == "regenerate" and p.change is not None}

    @property
    def pending(self) -> list[str]:
        return [s for s, p in self.sinks.items() if p.action != "done"]

    @property
    def needs_transform(self) -> bool:
        return any(p.action == "stage" or (p.action == "regenerate" and not p.replay) for p in self.sinks.values())


def staged_epoch_matches(
    state: TableState, job: str, barrier: int, inputs: Mapping[str, int | None], regenerate: str | None = None,
    definition: str | None = None,
) -> bool:
    """Whether ``consistent-staged`` holds exactly one finished epoch for ``barrier`` with these inputs; for a new
    generation (``regenerate``: its reason), one whose snapshots all record it and ``definition`` and that is more
    than its first delete (§5.2 step 5: a ``delete`` alone on main's head is a write that stopped half-way)."""
    if not state.staged_ahead:
        return False
    head = state.snapshots.get(state.head(P.STAGED_BRANCH))  # type: ignore[arg-type]
    if regenerate is not None and head is not None and head.parent_id == state.head() and head.operation == "delete":
        return False
    main = state.head()
    current = state.head(P.STAGED_BRANCH)
    attempts = set()
    while current is not None and current != main:
        record = state.snapshots[current]
        if record.barrier != barrier or record.job != job:
            return False
        if record.summary.get(P.REGENERATE) != regenerate:
            return False
        if regenerate is not None and record.summary.get(P.DEFINITION) != definition:
            return False
        attempts.add(record.summary.get(P.ATTEMPT))
        if len(attempts) > 1:  # two writers staged the same epoch on top of each other
            return False
        where = f"{state.identifier} snapshot {current}"
        if parse_summary_sources(record.summary.get(P.SOURCES), where=where) != dict(inputs):
            return False
        current = record.parent_id
    return True


def plan_epoch(
    job: str,
    sources: Mapping[str, TableState],
    sinks: Mapping[str, TableState],
    upstream: Mapping[str, TableState] | None = None,
    *,
    definition: str | None = None,
    rebuild: bool = False,
) -> EpochPlan:
    """Plan the next epoch of ``job`` from metadata alone (re-planning after a crash is the same call).

    T is the newest barrier at or below ``min W(source)`` at which every source is complete (see
    ``completeness``; ``upstream`` holds the sources' own transitive sources), so a multi-source job
    never mixes a source that skipped T with one that processed it. A sink whose inputs at T hold the
    same rows as its previous epoch's only needs its watermark moved (``watermark``). A sink whose last epoch
    was computed by another ``definition`` (or under another schema, or when ``rebuild`` is asked), or one of whose
    sources switched generations since its last epoch, is ``regenerate``: a new generation, computed as a first
    epoch and switched in by its publish (§6.10).
    """
    if not sources:
        raise InvalidInputError(f"job {job!r} has no sources")
    for state in sinks.values():
        if state.branch().untracked is not None:  # never publish on top of a foreign write
            raise state.branch().untracked_error(state.untracked_writer(), state.watermark())
    marks = [state.watermark() for state in sources.values()]
    barrier: int | None = None
    if all(m is not None for m in marks):
        known = {**(upstream or {}), **sources}
        barrier = Completeness(known).latest(sources, min(m for m in marks if m is not None))
    if barrier is None:
        plans = {
            name: SinkPlan(name, "done", state.head(), state.head(P.STAGED_BRANCH), {}, state.properties.get(P.REVISION),
                           state.head(P.FENCE_BRANCH))
            for name, state in sinks.items()
        }
        return EpochPlan(job, None, {}, plans, definition)
    inputs: dict[str, int | None] = {}
    for name, state in sources.items():
        point = state.branch().snap_at(barrier)
        inputs[name] = None if point is None else point[0]
    plans = {}
    for name, state in sinks.items():
        main_head = state.head()
        sink_mark = state.watermark()
        previous = state.recorded_inputs(main_head)
        unchanged = all(
            sources[src].branch().same_data(previous.get(src), snapshot) for src, snapshot in inputs.items()
        )
        change = definition_change(state, job, definition, rebuild=rebuild) or upstream_change(
            sources, previous, inputs
        )
        replay = False
        if change is not None:
            action: SinkAction = "regenerate"
            replay = staged_epoch_matches(state, job, barrier, inputs, change.reason, definition)
        elif sink_mark is not None and barrier <= sink_mark:
            action = "done"
        elif staged_epoch_matches(state, job, barrier, inputs):
            action = "publish-staged"
        elif unchanged and (main_head is not None or sink_mark is not None or all(i is None for i in inputs.values())):
            action = "watermark"
        else:
            action = "stage"
        plans[name] = SinkPlan(
            name, action, main_head, state.head(P.STAGED_BRANCH), previous, state.properties.get(P.REVISION),
            state.head(P.FENCE_BRANCH), change, replay,
        )
    return EpochPlan(job, barrier, inputs, plans, definition)


def upstream_change(
    sources: Mapping[str, TableState], previous: Mapping[str, int | None], inputs: Mapping[str, int | None]
) -> DefinitionChange | None:
    """A source that switched generations since the sink's last epoch (protocol §6.10 step 4): a snapshot carrying
    ``consistent.regenerate`` in ``(previous input, new input]``. Only for a sink with an epoch that read the source."""
    for name, end in sorted(inputs.items()):
        start = previous.get(name)
        if start is None or end is None or start == end:
            continue
        state = sources[name]
        current: int | None = end
        while current is not None and current != start:
            record = state.snapshots.get(current)
            if record is None:
                break
            if record.summary.get(P.REGENERATE) is not None:
                return DefinitionChange("upstream", name, None)
            current = record.parent_id
    return None


def check_append_only(state: TableState, start: int | None, end: int) -> None:
    """Raise InvalidInputError unless the snapshots in (start, end] only append rows (an incremental read is exact)."""
    name = state.identifier
    if not state.is_ancestor(start, end):
        raise InvalidInputError(
            f"{name}: snapshot {start} (the previous epoch's input) is not an ancestor of {end}; the source was "
            "rolled back — run the job with a full read or revise the downstream tables"
        )
    current: int | None = end
    while current is not None and current != start:
        record = state.snapshots.get(current)
        if record is None:
            break
        if record.operation not in ("append", "replace") and record.changes_data:
            raise InvalidInputError(
                f"{name}: snapshot {current} is a {record.operation}, not an append; an incremental read "
                "cannot express it — use a full read of this source"
            )
        current = record.parent_id
