"""Root tables (docs/protocol.md §5.6): ingests tagged with barriers, watermarks of idle roots.

A root is loaded from outside. Each ingest appends one snapshot tagged with a barrier (the current
time or an event-time barrier the caller gives), committed only if ``main`` and the fence are still as
read, so two concurrent ingests never compute their barriers from the same stale watermark and one
idempotency key lands once. A root that receives nothing declares completeness by advancing its
watermark, explicitly or as a declared idle source. Barriers ahead of the clock are refused
(``check_not_future``): one would hold every later ingest there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pyiceberg.table.update import RemovePropertiesUpdate, SetPropertiesUpdate

from consistent_catalog import properties as P
from consistent_catalog.barrier import BarrierLike, to_barrier
from consistent_catalog.commit import RetryPolicy, TableStore, TakeFence, refs_at
from consistent_catalog.exceptions import FencedError, InvalidBarrierError, InvalidInputError
from consistent_catalog.state import TableState
from consistent_catalog.util.durations import parse_duration
from consistent_catalog.util.identifiers import normalize_identifier
from consistent_catalog.util.time import fmt_barrier, fmt_duration, now_ms

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


def check_not_future(state: TableState, barrier: int, *, allow_future: bool, what: str) -> None:
    """Refuse a barrier beyond now plus the table's clock-skew allowance, unless the caller insists."""
    limit = now_ms() + state.clock_skew_ms
    if barrier > limit and not allow_future:
        raise InvalidBarrierError(
            f"{state.identifier}: {what} {fmt_barrier(barrier)} lies {fmt_duration(barrier - now_ms())} in the future "
            f"(allowed: {fmt_duration(state.clock_skew_ms)} of clock skew, table property {P.CLOCK_SKEW}); a barrier "
            "ahead of the clock holds every later ingest there — pass the current time, or insist with "
            + ("allow_future=True (CLI: advance-watermark --allow-future)" if what == "watermark" else "allow_future=True")
        )


def ingest(
    store: TableStore,
    table: str,
    data: pa.Table,
    *,
    barrier: BarrierLike | None = None,
    key: str | None = None,
    allow_future: bool = False,
    retries: int = 10,
) -> IngestResult:
    """Append ``data`` to a root table, tagged with an explicit (event-time) barrier or the current time.

    ``key`` makes the ingest idempotent (a source replays the same data for the same key): it is
    recorded in the snapshot summary, an ingest whose key is already in ``main``'s history is
    skipped (``IngestResult.skipped``), and the append commits only if ``main`` is still where it
    was checked, so two concurrent ingests of one key cannot both land.

    A barrier at or below the table's watermark would change content that readers were told is
    complete, so it is raised to W(X) + 1 (the late-snapshot rule of protocol §3). An explicit
    barrier beyond now plus the clock-skew allowance is refused unless ``allow_future``.
    """
    if key is not None and not str(key).strip():
        raise InvalidInputError("an ingest key must be a non-empty string (e.g. the source's batch or file id)")
    for _ in RetryPolicy(retries).attempts():
        loaded, state = store.load(table)
        if not state.is_root:
            raise InvalidInputError(
                f"{state.identifier} is derived from {', '.join(state.sources)}; only root tables take ingested data"
            )
        if key is not None:
            done = state.ingested_with_key(key)
            if done is not None:
                return IngestResult(state.identifier, done, state.branch().barrier_of(done), key, skipped=True)
        wanted = now_ms() if barrier is None else to_barrier(barrier)
        check_not_future(state, wanted, allow_future=allow_future, what="barrier")
        current = state.watermark()
        effective = wanted if current is None or wanted > current else current + 1
        properties = {P.BARRIER: str(effective)}
        if key is not None:
            properties[P.INGEST_KEY] = key
        base = state.head()
        try:
            # main and the fence as read: another ingest, an idle advance or a revision meanwhile
            # changed the watermark this barrier was computed from (or landed the same key)
            committed = store.write(
                loaded,
                refs_at({P.MAIN_BRANCH: base, P.FENCE_BRANCH: state.head(P.FENCE_BRANCH)}),
                lambda tx, props=properties: tx.append(data, snapshot_properties=props),
                what="ingesting" if key is None else f"ingesting key {key!r}",
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
        f"other commits ({retries} attempts); {again}"
    )


def advance_watermark(store: TableStore, table: str, barrier: BarrierLike, *, allow_future: bool = False) -> int:
    """Declare an idle root complete up to ``barrier``; returns the new watermark W(X).

    Refused when the barrier lies beyond now plus the table's clock-skew allowance (a barrier in
    the future would hold every later ingest there; ``allow_future=True`` insists) and when it
    lies below the current watermark (a watermark never moves back). The same barrier again is a
    no-op.
    """
    value = to_barrier(barrier)
    loaded, state = store.load(table)
    if not state.is_root:
        raise InvalidInputError(
            f"{state.identifier} is derived (written by job {state.job or state.last_writer or '-'}); its watermark "
            "advances when its job runs an epoch — advance the watermark of its root tables instead"
        )
    check_not_future(state, value, allow_future=allow_future, what="watermark")
    current = state.watermark()
    if current is not None and value <= current:
        if value == current:
            return current
        raise InvalidBarrierError(
            f"{state.identifier} is already complete up to {fmt_barrier(current)}; a watermark never moves back "
            f"— nothing was changed (a barrier after {current} advances it)"
        )
    store.commit(
        loaded,
        refs_at({P.MAIN_BRANCH: state.head()}),
        [SetPropertiesUpdate(updates=state.watermark_properties(value))],
        what="advancing the watermark",
        take_fence=TakeFence.keeping_holder(loaded.metadata, "advance", state.head(P.FENCE_BRANCH)),
    )
    return value


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
        if not state.is_root or state.idle_after_ms is None:
            continue
        target = moment - state.idle_after_ms
        current = state.watermark()
        if current is not None and target <= current:
            continue
        try:
            advanced[name] = advance_watermark(store, name, target)
        except (FencedError, InvalidBarrierError):
            continue  # an ingest or another advance got there first
    return advanced
