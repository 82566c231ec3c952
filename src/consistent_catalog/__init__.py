"""consistent-catalog: consistent reads across a pipeline of Apache Iceberg tables, from catalog metadata alone.

Barriers and lineage live in Iceberg snapshot summaries and table properties (docs/protocol.md §2,
``consistent_catalog.properties``); ``ConsistentCatalog`` wraps any pyiceberg catalog to resolve
consistent cuts, register jobs and run epochs.

>>> from consistent_catalog import ConsistentCatalog            # doctest: +SKIP
>>> cc = ConsistentCatalog.load("lake")                          # doctest: +SKIP
>>> read = cc.read(["demo.words", "demo.word_counts"])           # doctest: +SKIP

Planners and the pure core stay importable from their modules (``consistent_catalog.resolver.resolve``,
``consistent_catalog.epoch.plan_epoch``, ``consistent_catalog.retention.plan_expiry``,
``consistent_catalog.state.TableState``, ``consistent_catalog.barrier.SnapshotRecord``).
"""

from consistent_catalog.barrier import to_barrier
from consistent_catalog.catalog import ConsistentCatalog, ConsistentRead, IngestResult, Lease
from consistent_catalog.epoch import EpochContext, EpochJob, EpochPlan, EpochResult
from consistent_catalog.exceptions import (
    CatalogConfigError,
    ConsistentCatalogError,
    CycleError,
    FencedError,
    HistoryExpiredError,
    InvalidBarrierError,
    InvalidInputError,
    LineageError,
    MalformedMetadataError,
    NotRegisteredError,
    NoWatermarkError,
    OwnershipError,
    ResolutionError,
    TableNotFoundError,
    UntrackedWriteError,
)
from consistent_catalog.lineage import LineageGraph
from consistent_catalog.report import EpochEntry, HistoryEntry, TableStatus
from consistent_catalog.resolver import LEVELS, Cut, Level, TableCut
from consistent_catalog.retention import (
    ExpiryPlan,
    ExpiryResult,
    OrphanResult,
    Pin,
    PinInfo,
    Pins,
    RetainedCut,
    RetainedTag,
    Retention,
    RetentionPolicy,
)
from consistent_catalog.revision import RevisionResult, RevisionStep

__version__ = "0.1.0"

__all__ = [
    "LEVELS",
    "CatalogConfigError",
    "ConsistentCatalog",
    "ConsistentCatalogError",
    "ConsistentRead",
    "Cut",
    "CycleError",
    "EpochContext",
    "EpochEntry",
    "EpochJob",
    "EpochPlan",
    "EpochResult",
    "ExpiryPlan",
    "ExpiryResult",
    "FencedError",
    "HistoryEntry",
    "HistoryExpiredError",
    "IngestResult",
    "InvalidBarrierError",
    "InvalidInputError",
    "Lease",
    "Level",
    "LineageError",
    "LineageGraph",
    "MalformedMetadataError",
    "NoWatermarkError",
    "NotRegisteredError",
    "OrphanResult",
    "OwnershipError",
    "Pin",
    "PinInfo",
    "Pins",
    "ResolutionError",
    "RetainedCut",
    "RetainedTag",
    "Retention",
    "RetentionPolicy",
    "RevisionResult",
    "RevisionStep",
    "TableCut",
    "TableNotFoundError",
    "TableStatus",
    "UntrackedWriteError",
    "to_barrier",
]
