"""consistent-catalog: consistent reads across a pipeline of Apache Iceberg tables, from catalog metadata alone.

Barriers and lineage live in Iceberg snapshot summaries and table properties (see
``consistent_catalog.properties``); ``ConsistentCatalog`` wraps any pyiceberg catalog to resolve
consistent cuts, register jobs and run epochs.
"""

from consistent_catalog.barrier import SnapshotRecord, to_barrier
from consistent_catalog.catalog import ConsistentCatalog, ConsistentRead, IngestResult, Lease
from consistent_catalog.epoch import EpochContext, EpochJob, EpochPlan, EpochResult, plan_epoch
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
from consistent_catalog.resolver import LEVELS, Cut, Level, TableCut, resolve
from consistent_catalog.retention import RetentionPolicy
from consistent_catalog.revision import RevisionResult, RevisionStep
from consistent_catalog.state import TableState

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
    "OwnershipError",
    "ResolutionError",
    "RetentionPolicy",
    "RevisionResult",
    "RevisionStep",
    "SnapshotRecord",
    "TableCut",
    "TableNotFoundError",
    "TableState",
    "TableStatus",
    "UntrackedWriteError",
    "plan_epoch",
    "resolve",
    "to_barrier",
]
