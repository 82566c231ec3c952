"""Reading at a consistent cut (docs/protocol.md §4): resolve it, then scan every table at its snapshot.

``resolve_cut`` and ``open_read`` take the same path: the tables and their transitive sources are
located in one pass (``MetadataLoader.upstream``: one catalog query per lineage level on SQL
catalogs, cached lean reads), the pure resolver computes the cut, and a reader opens each table from
the very metadata file the cut was resolved from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from consistent_catalog import properties as P
from consistent_catalog.barrier import BarrierLike, to_barrier
from consistent_catalog.exceptions import (
    InvalidBarrierError,
    InvalidInputError,
    NotFreshError,
    NoWatermarkError,
    ResolutionError,
)
from consistent_catalog.report import Freshness, FreshnessTarget, freshness
from consistent_catalog.resolver import DEFAULT_LEVEL, Cut, component_cut, resolve
from consistent_catalog.resolver import component as component_of
from consistent_catalog.util.durations import parse_duration
from consistent_catalog.util.identifiers import normalize_identifier
from consistent_catalog.util.time import fmt_barrier, fmt_duration, now_ms

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import DataScan, Table

    from consistent_catalog.commit import TableStore
    from consistent_catalog.loading import Located


def check_as_of_passed(as_of: BarrierLike | None) -> None:
    """Refuse an as-of beyond now plus the default clock-skew allowance (protocol §4.4): it would read the
    newest cut now and another one later. The Spark plugin refuses ``spark.sql.consistent.asOf`` the same way."""
    if as_of is None:
        return
    value = to_barrier(as_of)
    ahead = value - now_ms()
    if ahead > P.DEFAULT_CLOCK_SKEW_MS:
        raise InvalidBarrierError(
            f"as-of {fmt_barrier(value)} lies {fmt_duration(ahead)} in the future: it would read the newest cut now "
            "and another one later — give a past time, or no as-of for the newest cut"
        )


def _resolve(
    store: TableStore, tables: Iterable[str], level: str, as_of: BarrierLike | None
) -> tuple[list[str], Cut, dict[str, Located]]:
    check_as_of_passed(as_of)
    names = list(dict.fromkeys(normalize_identifier(t) for t in tables))
    closure = store.loader.upstream(names)
    cut = resolve([closure[n].state for n in names], level, as_of, upstream=[c.state for c in closure.values()])
    return names, cut, closure


def resolve_cut(
    store: TableStore,
    tables: Iterable[str],
    level: str = DEFAULT_LEVEL,
    as_of: BarrierLike | None = None,
    *,
    component: bool = False,
) -> Cut:
    """The consistent cut of ``tables`` (protocol §4), from metadata alone.

    ``component=True``: the cut of their lineage component (protocol §4.7), as the Spark plugin serves
    it, reported for ``tables``; they must belong to one component.
    """
    if component:
        return resolve_component(store, tables, level, as_of)
    return _resolve(store, tables, level, as_of)[1]


def resolve_component(
    store: TableStore, tables: Iterable[str], level: str = DEFAULT_LEVEL, as_of: BarrierLike | None = None
) -> Cut:
    """The cut of the lineage component of ``tables`` (protocol §4.7), reported for ``tables``.

    Every table of the catalog is read (a downstream table names its sources, not the other way round),
    as the Spark plugin does. A table of the component that cannot take part is left out of the cut;
    when one of ``tables`` is, its error is raised.
    """
    check_as_of_passed(as_of)
    names = list(dict.fromkeys(normalize_identifier(t) for t in tables))
    if not names:
        raise InvalidInputError("a cut needs at least one table")
    listed = store.list_tables()
    for name in names:
        if name not in listed:
            store.load_table(name)  # TableNotFoundError naming it
            listed.append(name)
    states = {state.identifier: state for state in store.states(listed)}
    members = component_of(names[0], states)
    apart = [n for n in names if n not in members]
    if apart:
        raise InvalidInputError(
            f"{', '.join(apart)} {'is' if len(apart) == 1 else 'are'} not in the lineage component of {names[0]} ({', '.join(members)}); a component cut "
            "covers one component — resolve each component on its own"
        )
    found = component_cut(names[0], states, level, as_of, members=members)
    for name in names:
        if name in found.blocked:
            raise found.blocked[name]
    assert found.cut is not None
    return Cut(found.cut.level, found.cut.barrier, {n: found.cut.tables[n] for n in names})


def open_read(
    store: TableStore, tables: Iterable[str], level: str = DEFAULT_LEVEL, as_of: BarrierLike | None = None
) -> ConsistentRead:
    """Resolve the cut of ``tables`` and return a reader whose scans are pinned at it.

    A table's full pyiceberg metadata is loaded when it is first scanned, from the very metadata
    file the cut was resolved from (no second catalog query).
    """
    names, cut, closure = _resolve(store, tables, level, as_of)
    loaded = {n: closure[n].table for n in names if closure[n].table is not None}
    locations = {n: closure[n].location for n in names}
    return ConsistentRead(cut, loaded, opener=lambda name: store.loader.open_table(name, locations.get(name)))


Duration = int | str | timedelta
"""A duration: ``90s``, ``5m``, a timedelta, or an int of milliseconds (``util.durations``)."""


def measure_freshness(
    store: TableStore, tables: Iterable[str], target: FreshnessTarget, level: str = DEFAULT_LEVEL
) -> Freshness:
    """Resolve the cut of ``tables`` (repeatable-read unless ``level`` says otherwise) now and measure it against
    ``target`` (protocol §6.7).

    A cut that cannot resolve *yet* (no watermark, no complete barrier) is a measurement that is not
    fresh, with the error's message; any other error (an unknown table, an untracked write) is raised.
    """
    names = list(dict.fromkeys(normalize_identifier(t) for t in tables))
    if not names:
        raise InvalidInputError("a freshness check needs at least one table")
    closure = store.loader.upstream(names)
    states = {name: located.state for name, located in closure.items()}
    cut: Cut | None = None
    error: ResolutionError | None = None
    try:
        cut = resolve([states[n] for n in names], level, upstream=list(states.values()))
    except ResolutionError as exc:
        if not isinstance(exc, NoWatermarkError) and type(exc) is not ResolutionError:
            raise  # untracked writes, expired history: waiting will not help
        error = exc
    return freshness(states, names, cut, target, now=now_ms(), error=error)


class FreshnessWait:
    """The polls of one freshness wait (protocol §6.7): what to measure, how long to pause, when to give up.

    ``wait_for_fresh`` drives it with ``time.sleep``; an asynchronous poller (the Airflow trigger) drives the
    same object with its own sleep and runs ``poll`` in a thread, so both pause, back off and time out alike
    and give up with the same NotFreshError naming the bottleneck.
    """

    def __init__(
        self,
        store: TableStore,
        tables: Iterable[str],
        *,
        fresher_than: Duration | None = None,
        barrier: BarrierLike | None = None,
        timeout: Duration | None = None,
        interval: Duration = "5s",
        max_interval: Duration = "60s",
        level: str = DEFAULT_LEVEL,
    ) -> None:
        self.store = store
        self.names = list(dict.fromkeys(normalize_identifier(t) for t in tables))
        if not self.names:
            raise InvalidInputError("a freshness wait needs at least one table")
        self.level = level
        fresher_ms = None if fresher_than is None else parse_duration(fresher_than)
        self.target = FreshnessTarget.of(barrier=barrier, fresher_than_ms=fresher_ms)
        timeout_ms = None if timeout is None else parse_duration(timeout)
        self.first_ms = parse_duration(interval)
        if self.first_ms <= 0:
            raise InvalidInputError(f"poll interval {interval!r} must be positive, e.g. 5s")
        self.cap_ms = max(parse_duration(max_interval), self.first_ms)
        self.target.check_reachable(now_ms(), timeout_ms)
        self.started = time.monotonic()
        self.deadline = None if timeout_ms is None else self.started + timeout_ms / 1000
        self.pause_ms, self.polls, self.seen = self.first_ms, 0, None

    def poll(self) -> Freshness:
        """Measure once (blocking I/O: resolving reads the catalog)."""
        self.polls += 1
        found = measure_freshness(self.store, self.names, self.target, self.level)
        return replace(found, waited_ms=int((time.monotonic() - self.started) * 1000), polls=self.polls)

    def give_up(self, found: Freshness) -> None:
        """Raise NotFreshError (with the bottleneck) when ``found`` is not fresh and the deadline has passed."""
        if found.fresh or self.deadline is None or time.monotonic() < self.deadline:
            return
        raise NotFreshError(
            f"the cut of {', '.join(self.names)} is not fresh enough after {fmt_duration(found.waited_ms)}: "
            f"{found.describe()}",
            freshness=found,
        )

    def pause(self, found: Freshness) -> float:
        """Seconds to pause before the next poll: back off while nothing moves, never past the deadline."""
        if self.polls > 1:  # a moving cut is polled at the first interval again
            self.pause_ms = self.first_ms if found.barrier != self.seen else min(self.pause_ms * 2, self.cap_ms)
        self.seen = found.barrier
        pause = self.pause_ms / 1000
        return pause if self.deadline is None else max(0.0, min(pause, self.deadline - time.monotonic()))


def wait_for_fresh(
    store: TableStore,
    tables: Iterable[str],
    *,
    fresher_than: Duration | None = None,
    barrier: BarrierLike | None = None,
    timeout: Duration | None = None,
    interval: Duration = "5s",
    max_interval: Duration = "60s",
    on_poll: Callable[[Freshness], None] | None = None,
    level: str = DEFAULT_LEVEL,
) -> Freshness:
    """Block until the cut of ``tables`` (repeatable-read unless ``level``) is fresh enough, re-resolving at every
    poll (§6.7).

    Exactly one target: ``fresher_than`` (``now - T* <= D``) or ``barrier`` (``T* >= B``). Polls start
    ``interval`` apart and back off (doubling while the cut does not move) up to ``max_interval``.
    ``timeout`` None waits for as long as it takes; 0 measures once. Returns the fresh measurement;
    raises NotFreshError (``.freshness``: the last measurement, with the bottleneck) when the timeout
    ends first. ``on_poll`` sees every measurement.
    """
    wait = FreshnessWait(store, tables, fresher_than=fresher_than, barrier=barrier, timeout=timeout,
                         interval=interval, max_interval=max_interval, level=level)
    while True:
        found = wait.poll()
        if on_poll is not None:
            on_poll(found)
        if found.fresh:
            return found
        wait.give_up(found)
        time.sleep(wait.pause(found))


def empty_read(table: Table) -> pa.Table:
    """No rows of ``table``, typed the way its scans come back, so empty and non-empty reads concatenate.

    pyiceberg scans return ``string``/``binary``/``list`` columns while its schema conversion (and an
    empty scan) gives ``large_string``/``large_binary``/``large_list``.
    """
    import pyarrow as pa

    def small(field: pa.Field) -> pa.Field:
        kind = field.type
        if pa.types.is_large_string(kind):
            kind = pa.string()
        elif pa.types.is_large_binary(kind):
            kind = pa.binary()
        elif pa.types.is_large_list(kind) or pa.types.is_list(kind):
            kind = pa.list_(small(kind.value_field))
        elif pa.types.is_struct(kind):
            kind = pa.struct([small(child) for child in kind])
        elif pa.types.is_map(kind):
            kind = pa.map_(small(kind.key_field), small(kind.item_field))
        return field.with_type(kind).remove_metadata()

    return pa.schema([small(field) for field in table.schema().as_arrow()]).empty_table()


class ConsistentRead:
    """A resolved cut plus its tables: scans and Arrow data pinned at the cut.

    ``opener(name)`` loads a table of the cut not given in ``tables`` on first use (once).
    """

    def __init__(self, cut: Cut, tables: Mapping[str, Table], *, opener: Callable[[str], Table] | None = None) -> None:
        self.cut = cut
        self._tables = dict(tables)
        self._opener = opener

    def table(self, name: str) -> Table:
        key = normalize_identifier(name)
        table = self._tables.get(key)
        if table is None:
            if self._opener is None or key not in self.cut.tables:
                raise KeyError(key)
            table = self._tables[key] = self._opener(key)
        return table

    def scan(self, name: str, **options: Any) -> DataScan | None:
        """A pyiceberg scan at the cut's snapshot, or None when the table is empty at the cut."""
        snapshot_id = self.cut[normalize_identifier(name)].snapshot_id
        if snapshot_id is None:
            return None
        return self.table(name).scan(snapshot_id=snapshot_id, **options)

    def to_arrow(self, name: str, **options: Any) -> pa.Table:
        scan = self.scan(name, **options)
        if scan is None:
            return empty_read(self.table(name))
        return scan.to_arrow()

    def to_arrow_all(self) -> dict[str, pa.Table]:
        return {name: self.to_arrow(name) for name in self.cut.tables}
