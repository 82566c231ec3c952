"""Retention (protocol §9): cut-aware snapshot expiry, reader pins and tiered retained cuts.

Expiry never removes a snapshot that something still needs:

- the snapshots of the latest repeatable-read cut over each connected lineage component of the
  tables being expired, so that every subset of those tables still resolves to the same cut;
- the epoch inputs (``consistent.sources``) recorded by every snapshot a downstream table keeps (or
  would keep under the same policy, when it is not expired in this run): completeness compares them
  with the source's state, and the next epoch's incremental read starts at the inputs of the sink's head;
- branch heads and everything a staged epoch (``consistent-staged`` ahead of ``main``) sits on;
- snapshots tagged by a live ``consistent-`` tag (reader pins, retained cuts) or by a foreign tag;
- the newest ``keep_last`` snapshots of ``main``, and every snapshot newer than ``older_than``.

Resolution walks ``main``'s ancestry from the head back and stops at the first missing parent, so
the retained history of a table is a *contiguous suffix* of ``main``'s ancestry: expiry removes only
snapshots older than the oldest one needed (plus unreachable ones: rolled back, discarded staged
attempts). Tagged snapshots older than that stay readable by tag or snapshot id on their own. The
suffix is extended backwards until every retained snapshot keeps exactly the effective barrier it
had (a late snapshot's barrier depends on its parent's), so a barrier once complete never changes.

The package, one concern a module: ``policy`` (how much to keep), ``refs`` (tags and ref ages),
``plan`` (the pure planner: states in, plan out), ``expire`` (plan against a catalog, commit, delete
files), ``tiers`` (hourly/daily/weekly retained cuts), ``pins`` (reader pins), ``files`` (locations as
normalised URIs), ``orphans`` (the orphan-file sweep). Users reach it as
``cc.retention`` and ``cc.pins`` (``Retention`` and ``Pins`` below, built on the façade's ``TableStore``);
this package exports what those return, and the pure planner stays importable from its module
(``consistent_catalog.retention.plan.plan_expiry``).

``plan_expiry`` is pure (states in, plan out); ``expire`` loads the catalog, plans, commits one fenced
catalog commit per table (refs and barrier-relevant properties must be as planned, so a concurrent
publish or a new pin makes it re-plan instead of being lost) and optionally deletes the files that no
retained snapshot references. ``retain`` tags the latest cut with hourly/daily/weekly tags whose
Iceberg ref age makes every engine's expiry drop them on time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from consistent_catalog.barrier import BarrierLike
from consistent_catalog.resolver import DEFAULT_LEVEL
from consistent_catalog.retention.expire import DeletedFiles, ExpiryResult, expire, plan_from_catalog, run_maintenance
from consistent_catalog.retention.orphans import OrphanResult, TableOrphans, remove_orphan_files
from consistent_catalog.retention.pins import DEFAULT_TTL_MS, Pin, PinInfo, list_pins, pin, unpin
from consistent_catalog.retention.plan import ExpiryPlan, TableExpiry
from consistent_catalog.retention.policy import RetentionPolicy, Tier
from consistent_catalog.retention.refs import TagInfo
from consistent_catalog.retention.tiers import RetainedCut, retain, retained_cuts

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from consistent_catalog.commit import TableStore

RetainedTag = TagInfo
"""A retained-cut tag: its name, the tables it is on, its expiry and whether it expired."""


class Retention:
    """``cc.retention``: cut-aware expiry and retained cuts of one catalog."""

    def __init__(self, store: TableStore) -> None:
        self.store = store

    def plan(
        self, tables: Iterable[str] | None = None, policy: RetentionPolicy | None = None, *, now: int | None = None
    ) -> tuple[ExpiryPlan, dict[str, Table]]:
        """What ``expire`` would do (and the tables as loaded for it), changing nothing."""
        return plan_from_catalog(self.store, tables, policy, now=now)

    def expire(
        self,
        tables: Iterable[str] | None = None,
        policy: RetentionPolicy | None = None,
        *,
        now: int | None = None,
        dry_run: bool = False,
        retries: int = 5,
    ) -> ExpiryResult:
        """Expire snapshots of ``tables`` (all when None) that no cut, pin or retained cut needs."""
        return expire(self.store, tables, policy, now=now, dry_run=dry_run, retries=retries)

    def remove_orphan_files(
        self,
        tables: Iterable[str] | None = None,
        *,
        older_than_ms: int | str | timedelta,
        now: int | None = None,
        dry_run: bool = False,
        force: bool = False,
    ) -> OrphanResult:
        """Delete files under the tables' locations that no metadata references and older than ``older_than_ms``.

        Iceberg's ``remove_orphan_files``; below a 1h threshold only with ``force`` (writers in flight).
        """
        return remove_orphan_files(self.store, tables, older_than_ms=older_than_ms, now=now, dry_run=dry_run, force=force)

    def retain(
        self, tables: Iterable[str] | None = None, policy: RetentionPolicy | None = None, *, now: int | None = None
    ) -> list[RetainedCut]:
        """Tag the latest cut of each lineage component with the current hourly/daily/weekly tags."""
        return retain(self.store, tables, policy, now=now)

    def retained_cuts(self, tables: Iterable[str] | None = None, *, now: int | None = None) -> list[RetainedTag]:
        """Every retained-cut tag (not pins) with its tables and expiry."""
        return retained_cuts(self.store, tables, now=now)

    def run_maintenance(self, tables: Sequence[str], policy: RetentionPolicy | None = None) -> ExpiryResult | None:
        """Tag tiers and expire ``tables``, logging (never raising) failures — what epoch jobs run."""
        return run_maintenance(self.store, tables, policy)


class Pins:
    """``cc.pins``: reader pins that keep a cut's snapshots alive while a long read runs."""

    def __init__(self, store: TableStore) -> None:
        self.store = store

    def pin(
        self,
        tables: Iterable[str],
        *,
        level: str = DEFAULT_LEVEL,
        as_of: BarrierLike | None = None,
        ttl: int | str | timedelta = DEFAULT_TTL_MS,
        now: int | None = None,
        retries: int = 3,
    ) -> Pin:
        """Resolve a cut of ``tables`` and pin it for ``ttl``: ``with cc.pins.pin(tables, ttl="2h") as pinned: ...``."""
        return pin(self.store, tables, level=level, as_of=as_of, ttl=ttl, now=now, retries=retries)

    def unpin(self, tag: str, tables: Iterable[str] | None = None) -> list[str]:
        """Remove the pin (or retained-cut tag) ``tag``; returns the tables it was removed from."""
        return unpin(self.store, tag, tables)

    def list(self, tables: Iterable[str] | None = None, *, now: int | None = None) -> list[PinInfo]:
        """Every reader pin, soonest expiry first."""
        return list_pins(self.store, tables, now=now)


__all__ = [
    "DeletedFiles",
    "ExpiryPlan",
    "ExpiryResult",
    "OrphanResult",
    "Pin",
    "PinInfo",
    "Pins",
    "RetainedCut",
    "RetainedTag",
    "Retention",
    "RetentionPolicy",
    "TableExpiry",
    "TableOrphans",
    "Tier",
]
