"""consistent-catalog: consistent reads across a pipeline of Apache Iceberg tables, from catalog metadata alone.

Barriers and lineage live in Iceberg snapshot summaries and table properties (docs/protocol.md §2,
``consistent_catalog.properties``); ``ConsistentCatalog`` wraps any pyiceberg catalog to resolve
consistent cuts, register jobs and run epochs.

>>> from consistent_catalog import ConsistentCatalog            # doctest: +SKIP
>>> cc = ConsistentCatalog.load("lake")                          # doctest: +SKIP
>>> read = cc.read(["demo.words", "demo.word_counts"])           # doctest: +SKIP

This module exports what users call and the values they get back. Errors live in
``consistent_catalog.exceptions`` (one tree under ``ConsistentCatalogError``), retention's results in
``consistent_catalog.retention``, and the pure core in its modules (``consistent_catalog.resolver.resolve``,
``consistent_catalog.epoch_plan.plan_epoch``, ``consistent_catalog.retention.plan.plan_expiry``,
``consistent_catalog.state.TableState``, ``consistent_catalog.barrier.SnapshotRecord``).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from consistent_catalog.barrier import to_barrier
from consistent_catalog.catalog import ConsistentCatalog
from consistent_catalog.epoch import EpochContext, EpochJob, EpochResult
from consistent_catalog.epoch_plan import EpochPlan
from consistent_catalog.ingest import IngestResult
from consistent_catalog.lineage import LineageGraph
from consistent_catalog.ownership import Lease
from consistent_catalog.read import ConsistentRead
from consistent_catalog.report import EpochEntry, Freshness, HistoryEntry, TableStatus
from consistent_catalog.resolver import LEVELS, Cut, Level, TableCut
from consistent_catalog.retention import RetentionPolicy
from consistent_catalog.revision import RevisionResult, RevisionStep

__version__ = "0.1.0"

__all__ = [
    "LEVELS",
    "ConsistentCatalog",
    "ConsistentRead",
    "Cut",
    "EpochContext",
    "EpochEntry",
    "EpochJob",
    "EpochPlan",
    "EpochResult",
    "Freshness",
    "HistoryEntry",
    "IngestResult",
    "Lease",
    "Level",
    "LineageGraph",
    "RetentionPolicy",
    "RevisionResult",
    "RevisionStep",
    "TableCut",
    "TableStatus",
    "to_barrier",
]

#: Names this module exported before 0.2, now at home in another module: still importable here, with a warning.
_MOVED = {
    **dict.fromkeys(
        ("CatalogConfigError", "ConsistentCatalogError", "CycleError", "FencedError", "HistoryExpiredError",
         "InvalidBarrierError", "InvalidInputError", "LineageError", "MalformedMetadataError", "NotRegisteredError",
         "NoWatermarkError", "OwnershipError", "ResolutionError", "TableNotFoundError", "UntrackedWriteError"),
        "consistent_catalog.exceptions",
    ),
    **dict.fromkeys(
        ("ExpiryPlan", "ExpiryResult", "OrphanResult", "Pin", "PinInfo", "Pins", "RetainedCut", "RetainedTag", "Retention"),
        "consistent_catalog.retention",
    ),
}


def __getattr__(name: str) -> Any:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'consistent_catalog' has no attribute {name!r}")
    warnings.warn(
        f"consistent_catalog.{name} moved: import it from {home} (from {home} import {name})",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)
