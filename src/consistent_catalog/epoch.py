"""Epochs (docs/protocol.md §5): plan from metadata, stage on ``consistent-staged``, publish fenced.

``plan_epoch`` is pure. ``EpochJob`` runs it with pyiceberg/Arrow writers; the Spark job in
``consistent_catalog.spark`` reuses the plan and the publish step and only writes differently.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from consistent_catalog import epoch_commits, openlineage_events
from consistent_catalog import properties as P
from consistent_catalog.commit import TableStore
from consistent_catalog.definition import job_definition
from consistent_catalog.epoch_plan import EpochPlan, check_append_only, plan_epoch
from consistent_catalog.exceptions import FencedError, InvalidInputError, NotRegisteredError, TableNotFoundError
from consistent_catalog.ingest import advance_idle_roots
from consistent_catalog.loading import Located, table_state
from consistent_catalog.ownership import DEFAULT_LEASE_MS, Lease, genesis_snapshot, register_job, unregister_job
from consistent_catalog.read import empty_read
from consistent_catalog.retention.expire import run_maintenance
from consistent_catalog.retention.policy import RetentionPolicy
from consistent_catalog.state import TableState
from consistent_catalog.util.identifiers import normalize_identifier
from consistent_catalog.util.time import fmt_barrier, fmt_ms, now_ms

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table, Transaction

    from consistent_catalog.catalog import ConsistentCatalog

log = logging.getLogger(__name__)


@dataclass
class EpochContext:
    """What a transform sees: the epoch's barrier and its inputs pinned at ``snap(source, T)``."""

    job: str
    barrier: int
    inputs: Mapping[str, int | None]
    previous_inputs: Mapping[str, int | None]
    _store: TableStore
    _planned: Mapping[str, Located] = field(default_factory=dict)
    """Where the plan found each source: read from that very metadata file, with no catalog round trip."""
    _tables: dict[str, Table] = field(default_factory=dict)
    fresh_sinks: frozenset[str] = frozenset()
    """Sinks whose new generation this epoch computes (protocol §6.10): ``read_sink`` reads them empty."""

    def table(self, name: str) -> Table:
        name = normalize_identifier(name)
        if name not in self._tables:
            planned = self._planned.get(name)
            if planned is None:
                self._tables[name] = self._store.load_table(name)
            else:
                self._tables[name] = planned.table or self._store.loader.open_table(name, planned.location)
        return self._tables[name]

    def _source(self, name: str) -> str:
        name = normalize_identifier(name)
        if name not in self.inputs:
            raise InvalidInputError(f"{name} is not a source of job {self.job!r}; its sources are {sorted(self.inputs)}")
        return name

    def read(self, source: str) -> pa.Table:
        """The source's full content at the epoch's barrier."""
        name = self._source(source)
        snapshot_id = self.inputs[name]
        table = self.table(name)
        if snapshot_id is None:
            return empty_read(table)
        return table.scan(snapshot_id=snapshot_id).to_arrow()

    def read_increment(self, source: str) -> pa.Table:
        """Rows appended to the source since the previous epoch's input (all rows on the first epoch).

        Raises InvalidInputError if the source was overwritten or had rows deleted in that range:
        such a source needs a full (non-incremental) transform.
        """
        name = self._source(source)
        start, end = self.previous_inputs.get(name), self.inputs[name]
        table = self.table(name)
        if end is None or start == end:
            return empty_read(table)
        check_append_only(table_state(name, table.metadata), start, end)
        return table.incremental_append_scan(
            from_snapshot_id_exclusive=start, to_snapshot_id_inclusive=end
        ).to_arrow()

    def read_sink(self, sink: str) -> pa.Table:
        """A sink's published content (for transforms that merge into their previous output); empty while the epoch
        computes the sink's new generation (protocol §6.10: as on its first epoch)."""
        table = self.table(sink)
        if table.metadata.snapshot_by_name(P.MAIN_BRANCH) is None or normalize_identifier(sink) in self.fresh_sinks:
            return empty_read(table)
        return table.scan().to_arrow()


Transform = Callable[[EpochContext], "pa.Table | Mapping[str, pa.Table] | None"]


class Staged(NamedTuple):
    """One sink's staged epoch: the main head it was staged on and the staged head (None: empty epoch)."""

    base: int | None
    head: int | None
    rows: int
    table: Table | None = None
    """The sink as the staging commit left it (the catalog's answer), for the publish to build on; None: load it."""
    attempt: str | None = None
    """``consistent.attempt`` of the staged snapshots (None: nothing staged)."""


@dataclass(frozen=True)
class EpochResult:
    job: str
    barrier: int | None
    actions: Mapping[str, str]
    """Per sink: ``done`` (nothing to do), ``published``, ``republished`` (a staged epoch found after a crash),
    ``watermark`` (inputs unchanged: only the watermark moved), ``regenerated`` (a new generation switched in,
    protocol §6.10) or ``conflict`` (the sink changed meanwhile; re-plan)."""
    snapshots: Mapping[str, int | None]
    rows: Mapping[str, int] = field(default_factory=dict)
    attempts: Mapping[str, str] = field(default_factory=dict)
    """Per published or republished sink: the ``consistent.attempt`` of the epoch now on its ``main``."""
    faults: int = 0
    """Catalog faults (lost answers, an unavailable catalog) settled while this epoch ran (protocol §6.8), as the
    catalog's store counts them: calls of other threads on the same ``ConsistentCatalog`` meanwhile count too."""
    regenerated: Mapping[str, str] = field(default_factory=dict)
    """Per sink whose new generation this epoch computed, and why (protocol §6.10): ``definition changed (python
    3f2a… -> 9b1c…): new generation at barrier …``, ``source db.a switched generations: new generation at …``."""
    warnings: tuple[str, ...] = ()
    """What the epoch published but a person should know: a source read before its first data (§6.10)."""

    @property
    def did_work(self) -> bool:
        return any(a != "done" for a in self.actions.values())

    @property
    def revised(self) -> Mapping[str, str]:
        """The former name of ``regenerated`` (a changed definition revised its sink before protocol §6.10's
        generations); kept for code written against it."""
        return self.regenerated



def lagging_way_out(others: Mapping[str, TableState], first: int) -> str:
    """§6.10: the way out of reading a source before its first data ``first``: bring forward the other inputs whose
    watermark is below it; a root by advancing its watermark, a derived one by its job's next epoch (its watermark
    moves only so). Empty when none lags (the caller chose the barrier)."""
    lagging = {name: state for name, state in others.items() if (mark := state.watermark()) is not None and mark < first}
    if not lagging:
        return ""
    steps = [f"consistent-catalog advance-watermark {name} now" if state.is_root
             else f"an epoch of job {state.owner or '?'}, which writes {name}" for name, state in lagging.items()]
    return (f". If the sources were loaded one after another, bring the lagging source{'s' if len(steps) > 1 else ''} "
            f"forward ({'; '.join(steps)}) and the job computes them together")

class EpochJob:
    """A job that writes its sinks in epochs with pyiceberg, per protocol §5.

    >>> job = cc.job("word-count", sources=["demo.words"], sinks=["demo.word_counts"],
    ...              transform=count_words, mode="overwrite")           # doctest: +SKIP
    >>> with job:                                                       # doctest: +SKIP
    ...     job.run_until_caught_up()
    """

    MODES: tuple[str, ...] = ("append", "overwrite")

    def __init__(
        self,
        cc: ConsistentCatalog,
        job: str,
        *,
        sources: Iterable[str],
        sinks: Iterable[str],
        transform: Transform | None = None,
        mode: str = "append",
        lease_ms: int = DEFAULT_LEASE_MS,
        takeover: bool = False,
        expire_every: int | None = None,
        retention: RetentionPolicy | None = None,
        version: str | None = None,
        rebuild: bool = False,
    ) -> None:
        if mode not in self.MODES:
            raise InvalidInputError(f"write mode {mode!r} is not one of {', '.join(self.MODES)}")
        self.cc = cc
        self.store = cc.store
        """What the job loads and commits through (the façade's ``TableStore``)."""
        self.job = job
        self.sources = tuple(normalize_identifier(s) for s in sources)
        self.sinks = tuple(normalize_identifier(s) for s in sinks)
        self.transform = transform
        self.mode = mode
        self.lease_ms = lease_ms
        self.takeover = takeover
        self.lease: Lease | None = None
        self.application: str | None = None
        """The Spark application this job runs in (``SparkEpochJob``), named with its lease for operators."""
        # --- the definition every staged snapshot records; a changed one revises the sinks (protocol §6.10) ---
        self.definition = job_definition(version=version, transform=transform)
        self.rebuild = rebuild
        """Revise the sinks at the next epoch that has a barrier, whatever the definition (then cleared)."""
        # --- retention: every `expire_every` published epochs, tag tiers and expire the sinks (retention.py) ---
        if expire_every is not None and expire_every < 1:
            raise InvalidInputError(f"expire_every must be a positive number of epochs, got {expire_every}")
        self.expire_every = expire_every
        self.retention = retention
        self._published_epochs = 0
        self._planned: dict[str, Located] = {}
        """The sources as the last ``plan`` located them (metadata file, and the table when one was loaded)."""
        self._sink_states: dict[str, TableState] = {}
        """The sinks as the last ``plan`` read them."""
        self._source_states: dict[str, TableState] = {}
        """The sources as the last ``plan`` read them."""
        # OpenLineage run events (protocol §5.8): None unless the OpenLineage client is configured, so an
        # unconfigured job neither imports nor builds a client
        self.lineage_events = openlineage_events.emitter_for(job, cc.name, cc.catalog.properties)
        if self.lineage_events is not None:  # the datasets' schema facets: each table's columns, read once
            self.lineage_events.schema_of = lambda table: cc.store.load_table(table).schema()

    # --- ownership ---------------------------------------------------------------------------
    def register(self) -> Lease:
        self.lease = register_job(self.store, self.job, self.sources, self.sinks, lease_ms=self.lease_ms,
                                  takeover=self.takeover, application=self.application)
        return self.lease

    def unregister(self) -> None:
        if self.lease is not None:
            unregister_job(self.store, self.lease)
            self.lease = None

    def __enter__(self) -> EpochJob:
        self.register()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unregister()
        if self.lineage_events is not None:
            self.lineage_events.flush()

    def _require_lease(self) -> Lease:
        if self.lease is None:
            raise NotRegisteredError(f"job {self.job!r} is not registered; call register() or use it as a context manager")
        return self.lease

    # --- the epoch --------------------------------------------------------------------------
    def plan(self, *, advance_idle: bool = True) -> EpochPlan:
        """Plan the next epoch from the catalog; first advances the idle roots upstream (``advance_idle``)."""
        try:
            states = {s.identifier: s for s in self.store.states(self.sinks)}
        except TableNotFoundError as exc:
            raise TableNotFoundError(
                f"job {self.job!r} cannot find one of its sinks {list(self.sinks)} (renamed or dropped while it ran?): "
                f"{exc}; stop the job and register it again with the table's current name"
            ) from None
        for sink in self.sinks:
            self._check_owner(states[sink])
        self._sink_states = states
        try:
            located = self.store.loader.upstream(self.sources)
        except TableNotFoundError as exc:
            raise TableNotFoundError(
                f"job {self.job!r} cannot find one of its sources {list(self.sources)} (renamed or dropped?): {exc}; "
                "recreate it, or register the job again with its new sources (nothing was written)"
            ) from None
        closure = {name: found.state for name, found in located.items()}
        idle = {name: state for name, state in closure.items() if state.is_root and state.idle_after_ms is not None}
        for name in advance_idle_roots(self.store, idle if advance_idle else {}):  # idle sources keep the DAG moving (protocol §5.6)
            closure[name] = self.store.state(name)
            located.pop(name)
        self._planned = {name: located[name] for name in self.sources if name in located}
        self._source_states = {s: closure[s] for s in self.sources}
        return plan_epoch(
            self.job, self._source_states, {s: states[s] for s in self.sinks}, upstream=closure,
            definition=self.definition, rebuild=self.rebuild,
        )

    def regenerations(self, plan: EpochPlan) -> dict[str, str]:
        """Per sink whose new generation ``plan``'s epoch computes (protocol §6.10), the line that says why."""
        found = {}
        for sink, change in plan.regenerations.items():
            found[sink] = f"{change.describe()}: new generation at barrier {fmt_barrier(plan.barrier)}"
            log.warning("%s: %s %s", self.job, sink, found[sink])
        return found

    def source_warnings(self, plan: EpochPlan) -> tuple[str, ...]:
        """§6.10: a staged epoch that read a source empty at T although it holds data at a later barrier."""
        if not plan.needs_transform:
            return ()
        found = []
        for name, snapshot in plan.inputs.items():
            state = self._source_states.get(name)
            first = None if state is None or snapshot is not None else state.first_barrier()
            if first is not None and plan.barrier is not None and first > plan.barrier:
                found.append(
                    f"{self.job}: read {name} empty at barrier {fmt_barrier(plan.barrier)}; its first data is at "
                    f"barrier {fmt_barrier(first)}: its rows reach the sinks at a later epoch"
                    + lagging_way_out({s: st for s, st in self._source_states.items() if s != name}, first)
                )
        return tuple(found)

    def _check_owner(self, state: TableState) -> None:
        lease = self._require_lease()
        if state.job != self.job or state.lease_holder != lease.instance:
            raise FencedError(
                f"{state.identifier} is now written by job {state.job!r} instance {state.lease_holder!r}, not by this "
                f"instance ({lease.instance}) of {self.job!r}: its lease was taken over; stop this instance"
            )

    def run_epoch(self, *, advance_idle: bool = True) -> EpochResult:
        """Plan, stage and publish one epoch; a no-op (all sinks ``done``) when no source advanced.

        With OpenLineage configured, an epoch that has work is one run: START once planned, COMPLETE after
        the publish, FAIL (or ABORT when interrupted) when it raises; a no-op epoch sends nothing.
        """
        before = self.store.fault_log.total
        result = self._run_epoch(advance_idle)
        faults = self.store.fault_log.total - before
        return dataclasses.replace(result, faults=faults) if faults else result

    def _run_epoch(self, advance_idle: bool) -> EpochResult:
        if self.lineage_events is None:
            plan = self.plan(advance_idle=advance_idle)
            return self._with_notes(self._run_planned(plan), plan)
        run = self.lineage_events.new_run()
        try:
            plan = self.plan(advance_idle=advance_idle)
            if plan.barrier is None or not plan.pending:
                return self._with_notes(self._run_planned(plan), plan)
            run.start(plan, self.lease.instance if self.lease is not None else None)
            result = self._with_notes(self._run_planned(plan), plan)
        except Exception as exc:
            run.fail(exc, self.sources, self.sinks)
            raise
        except BaseException as exc:  # Ctrl-C, SIGTERM (SystemExit) while a started epoch runs
            if run.started is not None:
                run.fail(exc, self.sources, self.sinks, abort=True)
            raise
        run.complete(plan, result.actions, result.snapshots, result.attempts)
        return result

    def _with_notes(self, result: EpochResult, plan: EpochPlan) -> EpochResult:
        notes = self.source_warnings(plan)
        for note in notes:
            log.warning("%s", note)
        regenerated = {
            sink: why for sink, why in self.regenerations(plan).items() if result.actions.get(sink) == "regenerated"
        }
        if self.rebuild and not any(p.action == "regenerate" and result.actions.get(s) != "regenerated"
                                    for s, p in plan.sinks.items()):
            self.rebuild = False  # rebuilt (or nothing to rebuild: a sink's first epoch is its build)
        if not regenerated and not notes:
            return result
        return dataclasses.replace(result, regenerated=regenerated, warnings=notes)

    def _run_planned(self, plan: EpochPlan) -> EpochResult:
        if plan.barrier is None or not plan.pending:
            return EpochResult(self.job, plan.barrier, {s: "done" for s in self.sinks}, {})
        outputs: Mapping[str, Any] = {}
        if plan.needs_transform:
            outputs = self.run_transform(plan)
        actions: dict[str, str] = {}
        snapshots: dict[str, int | None] = {}
        rows: dict[str, int] = {}
        attempts: dict[str, str] = {}
        for sink, sink_plan in plan.sinks.items():
            if sink_plan.action == "done":
                actions[sink] = "done"
                continue
            try:
                if sink_plan.action == "publish-staged" or sink_plan.replay:
                    staged = Staged(sink_plan.main_head, sink_plan.staged_head, 0,
                                    attempt=self._staged_attempt(sink, sink_plan.staged_head))
                    actions[sink] = "regenerated" if sink_plan.replay else "republished"
                elif sink_plan.action == "watermark":
                    staged = Staged(sink_plan.main_head, None, 0)
                    actions[sink] = "watermark"
                else:
                    staged = self.stage(sink, plan, outputs.get(sink))
                    rows[sink] = staged.rows
                    actions[sink] = "regenerated" if sink_plan.action == "regenerate" else "published"
                snapshots[sink] = self.publish(sink, plan, staged.base, staged.head, table=staged.table)
                if staged.attempt is not None:
                    attempts[sink] = staged.attempt
            except FencedError:
                # main moved under us (a revision, or another writer's staging) while we still own the
                # sink: nothing was published; the next epoch re-plans from the new state
                self._check_owner(self.store.state(sink))
                actions[sink] = "conflict"
                log.warning("%s: %s changed while barrier %s was being written; re-planning", self.job, sink, plan.barrier)
        log.info("%s: barrier %s %s", self.job, plan.barrier, actions)
        # --- retention: cut-aware expiry of the sinks every `expire_every` published epochs ---
        if self.expire_every and any(a in ("published", "republished", "regenerated") for a in actions.values()):
            self._published_epochs += 1
            if self._published_epochs % self.expire_every == 0:
                run_maintenance(self.store, self.sinks, self.retention)
        return EpochResult(self.job, plan.barrier, actions, snapshots, rows, attempts)

    def _staged_attempt(self, sink: str, head: int | None) -> str | None:
        """The attempt id of the staged epoch found at plan time (a replay publishes it unchanged)."""
        state = self._sink_states.get(sink)
        record = state.snapshots.get(head) if state is not None and head is not None else None
        return None if record is None else record.summary.get(P.ATTEMPT)

    def run(self, epochs: int) -> list[EpochResult]:
        return [self.run_epoch() for _ in range(epochs)]

    def run_until_caught_up(self, max_epochs: int = 1000) -> list[EpochResult]:
        """Run epochs until there is nothing left to do (each epoch takes all source progress at once)."""
        results = []
        for index in range(max_epochs):
            result = self.run_epoch(advance_idle=index == 0)  # idle roots move with the clock: once, or never done
            if not result.did_work:
                break
            results.append(result)
        return results

    def run_continuously(
        self,
        interval: float,
        *,
        max_epochs: int | None = None,
        until: Callable[[], bool] | None = None,
        echo: Callable[[str], Any] = print,
    ) -> list[EpochResult]:
        """Run an epoch every ``interval`` seconds; return the epochs that did work.

        Stops after ``max_epochs`` epochs (attempted, whether or not there was new input: with
        ``interval=5, max_epochs=10`` it runs for about 50 s), when ``until()`` is true, or on
        SIGTERM/Ctrl-C; ``max_epochs=None`` runs until stopped. Prints one progress line per epoch
        that did work. SIGTERM ends the loop like Ctrl-C does (SystemExit), so a ``with job:`` block
        around it unregisters the job; a job killed outright keeps its lease until it lapses.
        """
        if max_epochs is not None and max_epochs < 1:
            raise InvalidInputError(f"max_epochs must be at least 1 (or None: run until stopped), got {max_epochs}")
        results: list[EpochResult] = []
        previous = _terminate_on_sigterm()
        try:
            attempted = 0
            while True:
                started = time.monotonic()
                result = self.run_epoch()
                attempted += 1
                if result.did_work:
                    results.append(result)
                    echo(progress_line(result, time.monotonic() - started))
                if (max_epochs is not None and attempted >= max_epochs) or (until is not None and until()):
                    break
                time.sleep(max(0.0, interval - (time.monotonic() - started)))
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        return results

    def run_transform(self, plan: EpochPlan) -> dict[str, Any]:
        """Run the transform for ``plan``'s epoch and return its output per sink (nothing is written).

        The sinks to stage usually share their previous inputs (where their last epoch ended); when
        they do not (one sink starts a new generation, or joined the job later), the transform runs once per
        group, so each sink's incremental read starts where its own last epoch ended.
        """
        assert plan.barrier is not None
        groups: dict[tuple[tuple[str, int | None], ...], list[str]] = {}
        for sink, sink_plan in plan.sinks.items():
            if sink_plan.action == "stage" or (sink_plan.action == "regenerate" and not sink_plan.replay):
                groups.setdefault(tuple(sorted(sink_plan.previous_for_transform.items())), []).append(sink)
        outputs: dict[str, Any] = {}
        for previous, sinks in groups.items():
            fresh = frozenset(s for s in sinks if plan.sinks[s].action == "regenerate")
            produced = self._outputs_per_sink(self._call_transform(plan, dict(previous), fresh))
            outputs.update({sink: produced[sink] for sink in sinks if sink in produced})
        return outputs

    def _outputs_per_sink(self, output: Any) -> dict[str, Any]:
        if output is None:
            return {}
        if isinstance(output, Mapping):
            unknown = {normalize_identifier(k) for k in output} - set(self.sinks)
            if unknown:
                raise InvalidInputError(f"transform of {self.job!r} returned data for {sorted(unknown)}, which are not its sinks")
            return {normalize_identifier(k): v for k, v in output.items()}
        if len(self.sinks) != 1:
            raise InvalidInputError(f"job {self.job!r} has {len(self.sinks)} sinks; the transform must return a dict sink -> data")
        return {self.sinks[0]: output}

    def _call_transform(
        self, plan: EpochPlan, previous: Mapping[str, int | None], fresh: frozenset[str] = frozenset()
    ) -> Any:
        if self.transform is None:
            raise InvalidInputError(f"job {self.job!r} has no transform; pass transform= to the job")
        assert plan.barrier is not None
        return self.transform(
            EpochContext(self.job, plan.barrier, plan.inputs, previous, self.store, self._planned, fresh_sinks=fresh)
        )

    def summary_properties(self, plan: EpochPlan, sink: str | None = None) -> dict[str, str]:
        """The summary keys every snapshot of one staging attempt carries (a fresh attempt id per call); a sink's new
        generation also records why (``consistent.regenerate``, protocol §6.10)."""
        sink_plan = plan.sinks.get(sink) if sink is not None else None
        regenerate = sink_plan.change.reason if sink_plan is not None and sink_plan.action == "regenerate" and sink_plan.change else None
        return epoch_commits.summary(plan, self.job, uuid.uuid4().hex[:12], regenerate)

    def write_mode(self, plan: EpochPlan, sink: str) -> str:
        """How the epoch writes ``sink``: the job's mode, or ``overwrite`` for a new generation (its output replaces
        every row, protocol §6.10)."""
        return "overwrite" if plan.sinks[sink].action == "regenerate" else self.mode

    def _commit(self, table: Table, commit: epoch_commits.Commit) -> Table:
        """Send one of this instance's epoch commits (``epoch_commits``: the fence as planned among its requirements)."""
        self._require_lease()
        return self.store.commit(table, commit.requirements, commit.updates, what=commit.what)

    def prepare_staged_branch(self, sink: str, plan: EpochPlan) -> tuple[Table, int]:
        """Point ``consistent-staged`` at main's head (discarding any stale staged epoch); returns (table, base).

        ``base`` is the snapshot the epoch is staged on: main's head as planned (``plan``), which every
        later commit of the epoch requires, so a revision or foreign write that moved main in between
        is refused inside the catalog's compare-and-swap and the epoch is re-planned. An empty sink
        first gets an empty, untagged "genesis" snapshot: Iceberg branches need a snapshot.
        """
        table, state = self.store.load(sink)
        sink_plan = plan.sinks[sink]
        expected = sink_plan.main_head
        if expected is None:
            self._require_lease()  # before the genesis' manifest list is written
            table = self._commit(table, epoch_commits.genesis(sink_plan, genesis_snapshot(table, self.job)))
            state = self.store.state_of(table)
            expected = state.head()
            assert expected is not None
        staged = state.head(P.STAGED_BRANCH)
        if staged != expected:
            table = self._commit(table, epoch_commits.reset(sink_plan, expected, staged))
        return table, expected

    def stage(self, sink: str, plan: EpochPlan, data: pa.Table | None) -> Staged:
        """Write one epoch's output to ``consistent-staged`` with pyiceberg (one fenced transaction).

        An epoch whose output is empty is still staged, as an empty snapshot: it records the epoch's
        barrier and inputs, which is what tells readers the table is complete at that barrier.
        """
        table, base = self.prepare_staged_branch(sink, plan)
        data = _conform(table.schema().as_arrow().empty_table() if data is None else data, table)
        properties = self.summary_properties(plan, sink)
        committed = self._write_staged(table, base, properties, data, self.write_mode(plan, sink), plan)
        if committed is None:  # overwriting nothing with nothing
            committed = self.record_empty_epoch(sink, base, properties, plan, table)
        return self.verify_staged(sink, plan, base, properties[P.ATTEMPT], committed)

    def verify_staged(
        self, sink: str, plan: EpochPlan, base_id: int, attempt: str, committed: Table | None = None
    ) -> Staged:
        """The staged epoch as committed: every snapshot from main's head up must carry this attempt's id.

        Anything else on ``consistent-staged`` (a writer that cannot carry our fence, such as a Spark
        zombie) means another writer interfered: FencedError, and the epoch is re-planned. ``committed``
        is the sink as this attempt's own (fenced) commit returned it; without it the sink is loaded
        (Spark's commits return nothing to us). A writer that comes after ``committed`` moves the staged
        branch, which the publish asserts.
        """
        state = self.store.state(sink) if committed is None else self.store.state_of(committed)
        head = state.head(P.STAGED_BRANCH)
        rows = 0
        current = head
        while current is not None and current != base_id:
            record = state.snapshots.get(current)
            if record is None or record.summary.get(P.ATTEMPT) != attempt:
                raise FencedError(
                    f"{sink}: snapshot {current} on {P.STAGED_BRANCH} was not written by this attempt at barrier "
                    f"{fmt_barrier(plan.barrier)}: another writer interfered; the epoch will be re-planned"
                )
            rows += int(record.summary.get("added-records", "0") or 0)
            current = record.parent_id
        if current != base_id or head == base_id:
            raise FencedError(f"{sink}: {P.STAGED_BRANCH} no longer descends from main's head {base_id}; re-plan")
        return Staged(base_id, head, rows, committed, attempt)

    def record_empty_epoch(
        self, sink: str, base_id: int, properties: Mapping[str, str], plan: EpochPlan, table: Table | None = None
    ) -> Table:
        """Stage an empty snapshot tagged with this epoch's summary keys on top of ``base_id``; returns the sink
        as committed. ``table`` is the sink as last committed by this epoch (None: load it)."""
        table = self.store.load_table(sink) if table is None else table
        committed = self._write_staged(table, base_id, properties, table.schema().as_arrow().empty_table(), "append", plan)
        assert committed is not None  # an append always commits a snapshot
        return committed

    def _write_staged(
        self, table: Table, base_id: int, properties: Mapping[str, str], data: pa.Table, mode: str, plan: EpochPlan
    ) -> Table | None:
        """One fenced write onto ``consistent-staged`` at ``base_id``: the sink as committed, or None when it had
        nothing to commit."""
        def write(tx: Transaction) -> None:
            with warnings.catch_warnings():
                # overwriting an empty table: pyiceberg warns that its delete matched nothing, which is expected
                warnings.filterwarnings("ignore", "Delete operation did not match any records")
                (tx.append if mode == "append" else tx.overwrite)(
                    data, snapshot_properties=dict(properties), branch=P.STAGED_BRANCH
                )
                if P.REGENERATE in properties and mode == "overwrite" and data.num_rows == 0:
                    # a new generation without rows: its delete and an empty write, never a delete alone (which
                    # is a regeneration stopped half-way, protocol §6.10 step 2)
                    tx.append(data, snapshot_properties=dict(properties), branch=P.STAGED_BRANCH)

        self._require_lease()
        return self.store.write(
            table,
            epoch_commits.staged_write(plan.sinks[".".join(table.name())], base_id),
            write,
            what=f"staging barrier {fmt_barrier(plan.barrier)}",
        )

    def publish(
        self, sink: str, plan: EpochPlan, main_head: int | None, staged_head: int | None, *, table: Table | None = None
    ) -> int | None:
        """One fenced catalog commit: main -> staged head (or watermark = T for an empty epoch), lease renewed.

        ``table`` is the sink as this epoch's staging commit returned it (None: load it); the commit's
        requirements, not that copy, decide whether the publish lands.
        """
        lease = self._require_lease()
        if table is None:
            table, state = self.store.load(sink)
        else:
            state = self.store.state_of(table)
        renewed = now_ms() + self.lease_ms
        self._commit(table, epoch_commits.publish(plan, sink, state, main_head, staged_head, lease_until=renewed))
        self.lease = Lease(lease.job, lease.instance, lease.sinks, lease.sources, renewed)
        return staged_head if staged_head is not None else main_head


def _terminate_on_sigterm() -> Any:
    """Turn SIGTERM into SystemExit (main thread only); returns the handler to restore, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


def progress_line(result: EpochResult, seconds: float) -> str:
    parts = ", ".join(f"{s}: {a} ({result.rows.get(s, 0)} rows)" for s, a in result.actions.items())
    faults = f", {result.faults} catalog fault{'s' if result.faults != 1 else ''} settled" if result.faults else ""
    line = f"[{result.job}] barrier {result.barrier} ({fmt_ms(result.barrier)}) {parts} in {seconds:.1f}s{faults}"
    notes = [f"[{result.job}] {sink} {why}" for sink, why in result.regenerated.items()]
    notes += [f"[warning] {w}" for w in result.warnings]
    return "\n".join([*notes, line])


def _conform(data: pa.Table, table: Table) -> pa.Table:
    """Select and cast the transform's columns to the sink's schema, so int32/int64 and order differences pass."""
    target = table.schema().as_arrow()
    missing = [f.name for f in target if f.name not in data.column_names]
    if missing:
        raise InvalidInputError(
            f"{'.'.join(table.name())}: the transform's output lacks column(s) {missing}; it has {data.column_names}"
        )
    return data.select(target.names).cast(target)

