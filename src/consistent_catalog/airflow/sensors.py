"""``ConsistentCutSensor``: gate a task on a fresh consistent cut, and hand it that cut."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from consistent_catalog.airflow._compat import (
    AirflowException,
    AirflowSensorTimeout,
    AirflowSkipException,
    BaseSensorOperator,
)
from consistent_catalog.airflow.hooks import ConsistentCatalogHook
from consistent_catalog.airflow.payload import cut_payload
from consistent_catalog.airflow.triggers import ConsistentCutTrigger, check_level
from consistent_catalog.barrier import BarrierLike, to_barrier
from consistent_catalog.exceptions import InvalidInputError, NotFreshError
from consistent_catalog.read import Duration, FreshnessWait
from consistent_catalog.resolver import DEFAULT_LEVEL
from consistent_catalog.util.durations import parse_duration
from consistent_catalog.util.time import now_ms


class ConsistentCutSensor(BaseSensorOperator):
    """Wait until the consistent cut of ``tables`` is fresh enough; return (push to XCom) that very cut.

    Exactly one target, as ``consistent-catalog wait``: ``fresh_within`` (``now - barrier <= D``: ``"10m"``, a
    timedelta, ms) or ``at_least_barrier`` (the cut's barrier at least B: ms or ISO-8601 time). Deferrable by
    default: the trigger polls in the triggerer (no worker slot held), ``poke_interval`` apart at first, backing
    off to ``max_interval`` while the cut does not move. At ``timeout`` (seconds, Airflow's sensor timeout) the
    task fails with ``AirflowSensorTimeout`` whose message is ``wait``'s, naming the bottleneck job and table.
    The XCom value is the cut (docs/protocol.md §10.13): read exactly it with ``PinnedCut.of(...)``.

    The catalog: ``catalog_conn_id`` (an Airflow connection, ``ConsistentCatalogHook``) or ``catalog`` (a
    pyiceberg catalog name); neither: pyiceberg's default catalog.
    """

    template_fields: Sequence[str] = ("tables", "at_least_barrier")

    def __init__(
        self,
        *,
        tables: Sequence[str],
        catalog: str | None = None,
        catalog_conn_id: str | None = None,
        fresh_within: Duration | None = None,
        at_least_barrier: BarrierLike | None = None,
        level: str = DEFAULT_LEVEL,
        max_interval: Duration = "60s",
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (fresh_within is None) == (at_least_barrier is None):
            raise InvalidInputError("give exactly one of fresh_within (e.g. '10m') or at_least_barrier (ms or ISO-8601 time)")
        if catalog is not None and catalog_conn_id is not None:
            raise InvalidInputError(f"give catalog_conn_id ({catalog_conn_id}) or catalog ({catalog}), not both")
        check_level(level)
        self.tables = list(tables)
        self.catalog = catalog
        self.catalog_conn_id = catalog_conn_id
        self.fresh_within_ms = None if fresh_within is None else parse_duration(fresh_within)
        self.at_least_barrier = at_least_barrier
        self.level = level
        self.max_interval_ms = parse_duration(max_interval)
        self.deferrable = deferrable

    def _interval_ms(self) -> int:
        interval = self.poke_interval
        seconds = interval.total_seconds() if isinstance(interval, timedelta) else float(interval)
        return max(1, int(seconds * 1000))

    def _timeout_ms(self) -> int | None:
        timeout = self.timeout
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
        return int(seconds * 1000)

    def _barrier(self) -> int | None:
        return None if self.at_least_barrier is None else to_barrier(self.at_least_barrier)

    def _wait(self, catalog_store: Any, timeout_ms: int | None) -> FreshnessWait:
        return FreshnessWait(catalog_store, self.tables, fresher_than=self.fresh_within_ms, barrier=self._barrier(),
                             timeout=timeout_ms, interval=self._interval_ms(), max_interval=self.max_interval_ms,
                             level=self.level)

    def execute(self, context: Any) -> dict[str, Any]:
        cc = ConsistentCatalogHook(self.catalog_conn_id, self.catalog).get_catalog()
        timeout_ms = self._timeout_ms()
        deadline_ms = None if timeout_ms is None else now_ms() + timeout_ms
        if self.deferrable:
            found = self._wait(cc.store, timeout_ms).poll()  # fresh already: no deferral (a poll never sleeps)
            if found.fresh:
                assert found.cut is not None
                return self._done(cut_payload(found.cut, cc.name), found.describe())
            self.log.info("deferring: %s", found.describe())
            self.defer(
                trigger=ConsistentCutTrigger(
                    self.tables, catalog=self.catalog, catalog_conn_id=self.catalog_conn_id,
                    fresher_than_ms=self.fresh_within_ms,
                    barrier=self._barrier(), level=self.level, interval_ms=self._interval_ms(), max_interval_ms=self.max_interval_ms,
                    deadline_ms=deadline_ms,
                ),
                method_name="execute_complete",
            )
        try:  # the blocking wait of `consistent-catalog wait`, holding the worker slot
            found = cc.wait_for(self.tables, fresher_than=self.fresh_within_ms, barrier=self._barrier(),
                                timeout=timeout_ms, interval=self._interval_ms(), max_interval=self.max_interval_ms,
                                level=self.level, on_poll=lambda f: self.log.info("%s", f.describe()))
        except NotFreshError as exc:
            if self.soft_fail:  # what Airflow's sensors do on a timeout with soft_fail (the deferred path too)
                raise AirflowSkipException(str(exc)) from None
            raise AirflowSensorTimeout(str(exc)) from None
        assert found.cut is not None
        return self._done(cut_payload(found.cut, cc.name), found.describe())

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        status = event.get("status")
        if status == "fresh":
            return self._done(event["cut"], f"barrier {event['cut']['barrier']}")
        if status == "not_fresh":
            raise AirflowSensorTimeout(event["message"])
        # an AirflowException, so that Airflow applies soft_fail and never_fail to it as to its own sensors' errors
        raise AirflowException(f"{event.get('error_type', 'error')}: {event.get('message', event)}")

    def _done(self, payload: dict[str, Any], how: str) -> dict[str, Any]:
        self.log.info("fresh: %s", how)
        return payload
