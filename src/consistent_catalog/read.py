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
    found = component_cut(names[0], states, level, as_of)
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


def measure_freshness(store: TableStore, tables: Iterable[str], target: FreshnessTarget) -> Freshness:
    """Resolve the repeatable-read cut of ``tables`` now and measure it against ``target`` (protocol §6.7).

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
        cut = resolve([states[n] for n in names], DEFAULT_LEVEL, upstream=list(states.values()))
    except ResolutionError as exc:
        if not isinstance(exc, NoWatermarkError) and type(exc) is not ResolutionError:
            raise  # untracked writes, expired history: waiting will not help
        error = exc
    return freshness(states, names, cut, target, now=now_ms(), error=error)


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
) -> Freshness:
    """Block until the repeatable-read cut of ``tables`` is fresh enough, re-resolving at every poll (§6.7).

    Exactly one target: ``fresher_than`` (``now - T* <= D``) or ``barrier`` (``T* >= B``). Polls start
    ``interval`` apart and back off (doubling while the cut does not move) up to ``max_interval``.
    ``timeout`` None waits for as long as it takes; 0 measures once. Returns the fresh measurement;
    raises NotFreshError (``.freshness``: the last measurement, with the bottleneck) when the timeout
    ends first. ``on_poll`` sees every measurement.
    """
    names = list(dict.fromkeys(normalize_identifier(t) for t in tables))
    if not names:
        raise InvalidInputError("a freshness wait needs at least one table")
    target = FreshnessTarget.of(barrier=barrier, fresher_than_ms=None if fresher_than is None else parse_duration(fresher_than))
    timeout_ms = None if timeout is None else parse_duration(timeout)
    first_ms = parse_duration(interval)
    if first_ms <= 0:
        raise InvalidInputError(f"poll interval {interval!r} must be positive, e.g. 5s")
    cap_ms = max(parse_duration(max_interval), first_ms)
    target.check_reachable(now_ms(), timeout_ms)

    started = time.monotonic()
    deadline = None if timeout_ms is None else started + timeout_ms / 1000
    pause_ms, polls, seen = first_ms, 0, None
    while True:
        polls += 1
        found = measure_freshness(store, names, target)
        found = replace(found, waited_ms=int((time.monotonic() - started) * 1000), polls=polls)
        if on_poll is not None:
            on_poll(found)
        if found.fresh:
            return found
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise NotFreshError(
                f"the cut of {', '.join(names)} is not fresh enough after {fmt_duration(found.waited_ms)}: "
                f"{found.describe()}",
                freshness=found,
            )
        if polls > 1:  # back off while nothing moves; a moving cut is polled at the first interval again
            pause_ms = first_ms if found.barrier != seen else min(pause_ms * 2, cap_ms)
        seen = found.barrier
        pause = pause_ms / 1000 if deadline is None else min(pause_ms / 1000, deadline - now)
        time.sleep(pause)


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
