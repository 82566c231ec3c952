"""Errors raised by consistent-catalog.

Every error says what is wrong and what to do about it, in terms of the library (``as_of``, revising a
table); errors of the resolver also carry the table and barrier they are about (``table``,
``barrier``), from which the command line adds its own hints (``consistent_catalog.cli.hints``). The tree::

    ConsistentCatalogError
    ├── CatalogConfigError          the catalog cannot be found or loaded
    │   ├── CatalogProbeError       the catalog failed the probe: writers refuse it (protocol §6.5)
    │   └── CatalogLimitError       a commit would exceed what the catalog stores (a property's size)
    ├── NotInstalledError           an optional part needs a package that is not installed (an ImportError)
    ├── TableNotFoundError          a named table does not exist
    ├── InvalidInputError           an argument given by the caller is wrong
    │   └── InvalidBarrierError     a barrier outside the grammar (§3.8) or refused where used
    ├── MalformedMetadataError      a consistent.* property or summary value cannot be parsed
    ├── ResolutionError             no consistent cut can be computed
    │   ├── NoWatermarkError        a table is empty and has no watermark: it blocks every cut
    │   ├── HistoryExpiredError     the barrier lies before the oldest retained snapshot
    │   ├── UntrackedWriteError     a derived table was written outside its job
    │   └── StrandedDataError       a table's metadata no job could have written holds every cut with data back
    ├── LineageError
    │   ├── CycleError              registering the job would close a cycle
    │   ├── OwnershipError          another job (or instance) holds a live lease on a sink
    │   └── NotRegisteredError      the job does not own the table it tries to write
    ├── FencedError                 the catalog refused a commit: this instance lost its lease or
    │                               another instance published first (the zombie is fenced out)
    ├── CatalogUnavailableError     the catalog stayed unavailable (or its answers lost) past the
    │                               retry deadline; ``landed`` says whether the call took effect
    └── NotFreshError               a wait for freshness timed out; ``freshness`` is the last measurement
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from consistent_catalog.report import Freshness


class ConsistentCatalogError(Exception):
    """Base class of every error consistent-catalog raises on purpose."""

    def __init__(self, message: str = "", *, table: str | None = None, barrier: int | None = None) -> None:
        super().__init__(message)
        self.table = table
        """The table the error is about, when one table is."""
        self.barrier = barrier
        """The barrier the way out starts from (the newest still complete, the oldest retained...), when one does."""


class CatalogConfigError(ConsistentCatalogError):
    """The catalog cannot be found or loaded."""


class CatalogProbeError(CatalogConfigError):
    """The catalog failed the catalog probe (``consistent-catalog check-catalog``): a capability the protocol relies
    on does not hold there, so writers refuse it (protocol §6.5)."""


class CatalogLimitError(CatalogConfigError):
    """A commit would set a table property larger than the catalog stores (a Hive Metastore's or Glue's limit on
    table parameters): refused before it is sent, naming the property and the way out."""


class NotInstalledError(ConsistentCatalogError, ImportError):
    """An optional part needs a package that is not installed; the message names the extra to install."""


class TableNotFoundError(ConsistentCatalogError):
    """A named table does not exist."""


class InvalidInputError(ConsistentCatalogError, ValueError):
    """An argument given by the caller is wrong."""


class InvalidBarrierError(InvalidInputError):
    """A barrier is not a form of the barrier grammar (protocol §3.8: ms, ISO-8601, ``now``, ``now-5m``), lies outside
    its plausible range (seconds or microseconds given; the message says the value in milliseconds), or is refused
    where it is used (in the future, before the first barrier, a watermark moving back)."""


class MalformedMetadataError(ConsistentCatalogError):
    """A consistent.* table property or snapshot summary value cannot be parsed."""


class ResolutionError(ConsistentCatalogError):
    """No consistent cut can be computed for the tables asked for."""


class StrandedDataError(ResolutionError):
    """Every cut of the tables asked for would read a table that holds rows as empty, because a derived table's
    metadata is one no job could have written (protocol §4.3 step 5): rows ingested into it while it was a root,
    or a watermark beyond its sources'.

    ``table`` is that derived table; ``barrier`` the barrier to revise it to (mode full) so its job rebuilds it.
    """


class NoWatermarkError(ResolutionError):
    """A table in the cut is empty and has no watermark, so it blocks every cut.

    ``table`` is where the block starts: an empty root, or the derived table whose job never published.
    """

    def __init__(self, message: str = "", *, table: str | None = None, root: bool = False) -> None:
        super().__init__(message, table=table)
        self.root = root
        """Whether ``table`` is a root (ingest into it or advance its watermark) rather than a derived table."""


class HistoryExpiredError(ResolutionError):
    """The cut's barrier lies before the oldest snapshot still retained."""


class UntrackedWriteError(ResolutionError):
    """A derived table has a data-changing snapshot without a barrier: written outside its job."""


class LineageError(ConsistentCatalogError):
    """Job registration or lineage is inconsistent."""


class CycleError(LineageError):
    """Registering the job would close a cycle in the lineage graph."""


class OwnershipError(LineageError):
    """Another job or job instance holds a live lease on a sink."""


class NotRegisteredError(LineageError):
    """The job does not own the table it tries to write."""


class FencedError(ConsistentCatalogError):
    """The catalog refused a commit because this instance is no longer the table's writer."""


class CatalogUnavailableError(ConsistentCatalogError, ConnectionError):
    """The catalog did not answer (or its answers were lost) until the retry deadline passed (protocol §6.8)."""

    def __init__(self, message: str, *, catalog: str, landed: str, table: str | None = None) -> None:
        super().__init__(message, table=table)
        self.catalog = catalog
        """The catalog's name."""
        self.landed = landed
        """Whether the call took effect: ``"no"``, or ``"unknown"`` (the message names what to look for)."""


class NotFreshError(ConsistentCatalogError, TimeoutError):
    """The cut did not become fresh enough before the timeout (``ConsistentCatalog.wait_for``)."""

    def __init__(self, message: str = "", *, freshness: Freshness | None = None) -> None:
        super().__init__(message)
        self.freshness = freshness
        """The last measurement (a ``consistent_catalog.report.Freshness``): barrier, delay, bottleneck."""
