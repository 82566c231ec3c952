"""Triggers that poll consistent cuts in Airflow's triggerer: the sensor's, and one for an ``AssetWatcher``.

Both hold one ``ConsistentCatalog`` for their life, so every poll is the library's warm resolve (cached lean
metadata reads, ``MetadataLoader``); each poll runs in a thread, never blocking the triggerer's event loop.
A trigger's kwargs name the catalog (a connection id or a pyiceberg catalog name), never its properties.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from consistent_catalog.airflow._compat import BaseEventTrigger, BaseTrigger, TriggerEvent
from consistent_catalog.airflow.hooks import ConsistentCatalogHook
from consistent_catalog.airflow.payload import cut_payload
from consistent_catalog.catalog import ConsistentCatalog
from consistent_catalog.exceptions import (
    ConsistentCatalogError,
    InvalidInputError,
    NotFreshError,
    NoWatermarkError,
    ResolutionError,
)
from consistent_catalog.read import FreshnessWait
from consistent_catalog.resolver import DEFAULT_LEVEL, LEVELS
from consistent_catalog.util.time import now_ms

#: The key of the last emitted barrier in the watched asset's state store (Airflow's ``asset_state_store``).
LAST_BARRIER_KEY = "consistent_catalog.last_barrier"


async def load_catalog(catalog: str | None, catalog_conn_id: str | None) -> ConsistentCatalog:
    name, properties = await ConsistentCatalogHook(catalog_conn_id, catalog).acatalog_config()
    return await asyncio.to_thread(lambda: ConsistentCatalog.load(name, **properties))


def check_level(level: str) -> None:
    if level not in LEVELS:
        raise InvalidInputError(f"unknown level {level!r}; use one of {', '.join(LEVELS)}")


class ConsistentCutTrigger(BaseTrigger):
    """Poll until the cut of ``tables`` is fresh enough, as ``consistent-catalog wait`` does (protocol §6.7).

    One event, then done: ``{"status": "fresh", "cut": <§10.13 payload>, "freshness": <§10.9>}``;
    ``{"status": "not_fresh", "message": ..., "freshness": ...}`` at ``deadline_ms`` (epoch ms, so a restarted
    triggerer keeps the sensor's deadline), its message the one ``wait`` prints, naming the bottleneck;
    ``{"status": "error", "message": ...}`` when waiting cannot help (an unknown table, an untracked write).
    """

    def __init__(
        self,
        tables: Sequence[str],
        *,
        catalog: str | None = None,
        catalog_conn_id: str | None = None,
        fresher_than_ms: int | None = None,
        barrier: int | None = None,
        level: str = DEFAULT_LEVEL,
        interval_ms: int = 5_000,
        max_interval_ms: int = 60_000,
        deadline_ms: int | None = None,
    ) -> None:
        super().__init__()
        check_level(level)
        self.tables = list(tables)
        self.catalog = catalog
        self.catalog_conn_id = catalog_conn_id
        self.fresher_than_ms = fresher_than_ms
        self.barrier = barrier
        self.level = level
        self.interval_ms = interval_ms
        self.max_interval_ms = max_interval_ms
        self.deadline_ms = deadline_ms

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "tables": self.tables, "catalog": self.catalog, "catalog_conn_id": self.catalog_conn_id,
            "fresher_than_ms": self.fresher_than_ms, "barrier": self.barrier, "level": self.level,
            "interval_ms": self.interval_ms, "max_interval_ms": self.max_interval_ms, "deadline_ms": self.deadline_ms,
        })

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            cc = await load_catalog(self.catalog, self.catalog_conn_id)
            timeout = None if self.deadline_ms is None else max(0, self.deadline_ms - now_ms())
            wait = FreshnessWait(cc.store, self.tables, fresher_than=self.fresher_than_ms, barrier=self.barrier,
                                 timeout=timeout, interval=self.interval_ms, max_interval=self.max_interval_ms,
                                 level=self.level)
            while True:
                found = await asyncio.to_thread(wait.poll)
                self.log.debug("%s", found.describe())
                if found.fresh:
                    assert found.cut is not None
                    yield TriggerEvent({"status": "fresh", "cut": cut_payload(found.cut, cc.name),
                                        "freshness": found.to_json()})
                    return
                wait.give_up(found)
                await asyncio.sleep(wait.pause(found))
        except NotFreshError as exc:
            assert exc.freshness is not None
            yield TriggerEvent({"status": "not_fresh", "message": str(exc), "freshness": exc.freshness.to_json()})
        except ConsistentCatalogError as exc:
            yield TriggerEvent({"status": "error", "message": str(exc), "error_type": type(exc).__name__})


class ConsistentCutAssetTrigger(BaseEventTrigger):
    """For an ``AssetWatcher``: one event per new consistent cut of ``tables``, the cut in the event's payload.

    A cut is new when its barrier exceeds the last one emitted: at most one event per barrier. The last emitted
    barrier is kept in the watched asset's state store (``asset_state_store``, which Airflow's triggerer hands
    to an asset watcher's trigger; key ``consistent_catalog.last_barrier``), written once the triggerer has
    taken the event, so a restarted trigger emits no cut already emitted. ``after_barrier`` (ms) starts later:
    cuts up to it are taken as emitted. Levels with a barrier only (not read-uncommitted).
    """

    def __init__(
        self,
        tables: Sequence[str],
        *,
        catalog: str | None = None,
        catalog_conn_id: str | None = None,
        level: str = DEFAULT_LEVEL,
        interval_ms: int = 30_000,
        after_barrier: int | None = None,
    ) -> None:
        super().__init__()
        check_level(level)
        if level == "read-uncommitted":
            raise InvalidInputError("a read-uncommitted cut has no barrier to tell new cuts by; watch repeatable-read "
                                    "or read-committed cuts")
        if interval_ms <= 0:
            raise InvalidInputError(f"poll interval {interval_ms} ms must be positive, e.g. 30000")
        self.tables = list(tables)
        self.catalog = catalog
        self.catalog_conn_id = catalog_conn_id
        self.level = level
        self.interval_ms = interval_ms
        self.after_barrier = after_barrier

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "tables": self.tables, "catalog": self.catalog, "catalog_conn_id": self.catalog_conn_id,
            "level": self.level, "interval_ms": self.interval_ms, "after_barrier": self.after_barrier,
        })

    def _state_store(self) -> Any:
        """The watched asset's state, which the triggerer hands an asset watcher's trigger (Airflow 3.3+)."""
        return getattr(self, "asset_state_store", None)

    async def _store_call(self, method: str, *args: Any) -> Any:
        try:
            return await getattr(self._state_store(), method)(*args)
        except ValueError as exc:  # Airflow runs one trigger for identical watchers of several assets
            raise InvalidInputError(
                f"one ConsistentCutAssetTrigger watches several assets ({exc}); give each asset's watcher its own "
                "trigger (a different interval_ms or after_barrier makes them distinct)"
            ) from None

    async def _last_emitted(self) -> int | None:
        store = self._state_store()
        stored = None if store is None else await self._store_call("aget", LAST_BARRIER_KEY)
        known = [int(b) for b in (stored, self.after_barrier) if b is not None]
        return max(known) if known else None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        cc = await load_catalog(self.catalog, self.catalog_conn_id)
        last = await self._last_emitted()
        while True:
            try:
                cut = await asyncio.to_thread(cc.resolve, self.tables, self.level)
            except InvalidInputError:
                raise  # the watcher's own arguments: polling again will not help
            except (ConsistentCatalogError, OSError) as exc:
                # no cut yet, or a fault an operator fixes (an untracked write revised, the catalog back): the watcher
                # keeps polling, so the DAG runs once the next cut resolves
                if not isinstance(exc, NoWatermarkError) and type(exc) is not ResolutionError:
                    self.log.warning("no cut of %s: %s", ", ".join(self.tables), exc)
                cut = None
            if cut is not None and cut.barrier is not None and (last is None or cut.barrier > last):
                self.log.info("new %s cut of %s at barrier %s", cut.level, ", ".join(self.tables), cut.barrier)
                try:
                    yield TriggerEvent(cut_payload(cut, cc.name))
                finally:  # the triggerer has taken the event (and may be stopping us now): remember it
                    last = cut.barrier
                    store = self._state_store()
                    if store is not None:
                        await self._store_call("aset", LAST_BARRIER_KEY, last)
            await asyncio.sleep(self.interval_ms / 1000)
