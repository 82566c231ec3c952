"""Root tables (docs/protocol.md §5.6): ingests tagged with barriers, watermarks of idle roots.

A root is loaded from outside. Each ingest appends one snapshot tagged with a barrier (the current
time or an event-time barrier the caller gives), committed only if ``main`` and the fence are still as
read, so two concurrent ingests never compute their barriers from the same stale watermark and one
idempotency key lands once. A root that receives nothing declares completeness by advancing its
watermark, explicitly or as a declared idle source. Barriers ahead of the clock are refused
(``write_plans.check_not_future``): one would hold every later ingest there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pyiceberg.table.update import RemovePropertiesUpdate, SetPropertiesUpdate

from consistent_catalog import properties as P
from consistent_catalog import write_plans
from consistent_catalog._pyiceberg import append_data_files, write_data_files
from consistent_catalog.barrier import BarrierLike, to_barrier
from consistent_catalog.commit import RetryPolicy, TableStore
from consistent_catalog.exceptions import FencedError, InvalidBarrierError, InvalidInputError
from consistent_catalog.state import TableState
from consistent_catalog.util.durations import parse_duration
from consistent_catalog.util.identifiers import normalize_identifier
from consistent_catalog.util.time import now_ms

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class IngestResult:
    table: str
    snapshot_id: int
    barrier: int | None
    key: str | None = None
    skipped: bool = False
    """True when ``key`` had been ingested already: nothing was written, ``snapshot_id`` is that ingest's."""


def ingest(
    store: TableStore,
    table: str,
    data: pa.Table,
    *,
    barrier: BarrierLike | None = None,
    key: str | None = None,
    allow_future: bool = False,
    retries: int | None = None,
) -> IngestResult:
    """Append ``data`` to a root table, tagged with an explicit (event-time) barrier or the current time.

    ``key`` makes the ingest idempotent (a source replays the same data for the same key): it is
    recorded in the snapshot summary, an ingest whose key is already in ``main``'s history is
    skipped (``IngestResult.skipped``), and the append commits only if ``main`` is still where it
    was checked, so two concurrent ingests of one key cannot both land.

    A barrier at or below the table's watermark would change content that readers were told is
    complete, so it is raised to W(X) + 1 (the late-snapshot rule of protocol §3). An explicit
    barrier beyond now plus the clock-skew allowance is refused unless ``allow_future``.

    A commit refused because another one landed first (many writers into one root) plans again after a jittered
    wait, with the data files it wrote kept (only the metadata is written again): for ``CONTENTION_SECONDS`` by
    default, or ``retries`` attempts when given; then FencedError (run it again: a key makes that safe).
    """
    if key is not None and not str(key).strip():
        raise InvalidInputError("an ingest key must be a non-empty string (e.g. the source's batch or file id)")
    wanted = None if barrier is None else to_barrier(barrier)
    files, layout = None, None  # written at the first attempt that commits; later attempts append the same files
    attempts = 0
    for attempts in contention_policy(retries).attempts():  # noqa: B007 - named in the error: refused, plan again
        loaded, state = store.load(table)
        plan = write_plans.ingest(state, now=now_ms(), barrier=wanted, key=key, allow_future=allow_future)
        if plan.skipped_by is not None:
            return IngestResult(state.identifier, plan.skipped_by, plan.barrier, key, skipped=True)
        commit = plan.commit
        assert commit is not None
        base = state.head()
        if files is None or layout != (loaded.metadata.current_schema_id, loaded.metadata.default_spec_id):
            files = write_data_files(loaded, data)  # (again only if the schema or partitioning changed meanwhile)
            layout = (loaded.metadata.current_schema_id, loaded.metadata.default_spec_id)
        try:
            # main and the fence as read: another ingest, an idle advance or a revision meanwhile
            # changed the watermark this barrier was computed from (or landed the same key)
            committed = store.write(
                loaded,
                commit.requirements,
                lambda tx, props=dict(commit.summary), written=files: append_data_files(tx, written, props),
                what=commit.what,
            )
        except FencedError:
            continue  # plan again from the new state
        after = store.state_of(committed) if committed is not None else store.state(state.identifier)
        snapshot_id = after.child_on_main(base)  # ours: main moved from base to it in this very commit
        assert snapshot_id is not None
        return IngestResult(state.identifier, snapshot_id, after.branch().barrier_of(snapshot_id), key)
    again = "run it again — the key makes it safe to repeat" if key is not None else "run it again"
    raise FencedError(
        f"{normalize_identifier(table)}: ingest{'' if key is None else f' of key {key!r}'} kept losing the race to "
        f"other commits ({attempts} attempts); {again}"
    )


#: How long an ingest refused by concurrent commits to its root keeps planning again (``retries`` not given).
CONTENTION_SECONDS = 60.0


def contention_policy(retries: int | None) -> RetryPolicy:
    """Retries of a commit refused because another landed first: ``retries`` attempts, or (None) as many as fit in
    ``CONTENTION_SECONDS``, waits from Iceberg's ``commit.retry.min-wait-ms`` default (100 ms) doubling to 5 s with
    full jitter: a root takes one commit at a time, and writers that retry at once only refuse each other again
    (docs/scaling.md)."""
    if retries is not None:
        return RetryPolicy(retries)
    return RetryPolicy(attempts_max=1_000_000, base_delay=0.1, max_delay=5.0, deadline=CONTENTION_SECONDS)


def advance_watermark(store: TableStore, table: str, barrier: BarrierLike, *, allow_future: bool = False) -> int:
    """Declare an idle root complete up to ``barrier``; returns the new watermark W(X).

    Refused when the barrier lies beyond now plus the table's clock-skew allowance (a barrier in
    the future would hold every later ingest there; ``allow_future=True`` insists) and when it
    lies below the current watermark (a watermark never moves back). The same barrier again is a
    no-op.
    """
    value = to_barrier(barrier)
    loaded, state = store.load(table)
    commit = write_plans.advance_watermark(state, value, now=now_ms(), allow_future=allow_future)
    if commit is not None:
        send(store, loaded, commit)
    return value


def send(store: TableStore, table: Any, commit: write_plans.WriteCommit) -> Any:
    """Send a planned metadata commit (``write_plans``) to ``table`` as loaded; the table as committed."""
    return store.commit(table, commit.requirements, commit.updates, what=commit.what, take_fence=commit.take_fence)


def set_idle(store: TableStore, table: str, after: int | str | timedelta | None) -> None:
    """Declare root ``table`` an idle source: its watermark may follow now minus ``after`` (None: undeclare)."""
    loaded, state = store.load(table)
    if not state.is_root:
        raise InvalidInputError(f"{state.identifier} is derived; only root tables can be declared idle sources")
    if after is None:
        updates: list[Any] = [RemovePropertiesUpdate(removals=[P.IDLE_AFTER])]
    else:
        updates = [SetPropertiesUpdate(updates={P.IDLE_AFTER: str(parse_duration(after))})]
    store.commit(loaded, [], updates, what="declaring an idle source")


def advance_idle_roots(
    store: TableStore, states: Mapping[str, TableState] | None = None, *, now: int | None = None
) -> dict[str, int]:
    """Advance every root declared idle (of ``states``, or of the catalog) to now minus its allowance.

    Returns the roots advanced, with their new watermark. A concurrent ingest or advance wins:
    the root is then left as it is until the next call.
    """
    moment = now_ms() if now is None else now
    if states is None:
        states = {s.identifier: s for s in store.states(store.list_tables())}
    advanced: dict[str, int] = {}
    for name, state in states.items():
        if write_plans.idle_advance(state, now=moment) is None:
            continue  # not an idle root, or not behind: no load, no commit
        try:
            loaded, current = store.load(name)  # plan again on the table as it is now
            commit = write_plans.idle_advance(current, now=moment)
            if commit is not None:
                send(store, loaded, commit)
                advanced[name] = moment - (current.idle_after_ms or 0)
        except (FencedError, InvalidBarrierError):
            continue  # an ingest or another advance got there first
    return advanced
