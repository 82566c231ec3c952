"""The commit layer: loading tables, fenced commits and writes, the requirements they carry, retries.

Everything consistent-catalog changes in a catalog goes through ``TableStore.commit`` (metadata
updates) or ``TableStore.write`` (a pyiceberg data write): one atomic catalog commit whose
*requirements* the catalog validates against the metadata it is about to replace, swapping the
metadata pointer only if nothing changed in between (protocol §6). A zombie writer, or a second
instance that lost a race, therefore fails inside the compare-and-swap itself and gets
``FencedError``, never a read-then-write window.

The requirements:

- ``AssertConsistentState`` (``fence(...)``): table properties and branch heads as planned;
- ``AssertRefsExactly``: every ref (branch and tag) as planned — expiry;
- ``AssertSnapshotsExist``: snapshots not expired meanwhile — pins and retained-cut tags.

They are validated client-side by catalogs that check requirements inside their compare-and-swap
(pyiceberg's SQL catalog on SQLite/PostgreSQL; also Glue, DynamoDB, Hive). A REST server does not
know these types and must refuse them.

Callers that plan from metadata and may be refused re-plan with ``RetryPolicy.attempts()``
(exponential backoff with jitter, so that two re-planning processes do not collide again).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import Field
from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table.update import AssertTableUUID

from consistent_catalog._pyiceberg import ValidatableTableRequirement, commit_transaction_once
from consistent_catalog.exceptions import FencedError, InvalidInputError
from consistent_catalog.loading import MetadataLoader, not_found
from consistent_catalog.state import TableState
from consistent_catalog.util.identifiers import normalize_identifier

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata


# --- requirements ---------------------------------------------------------------------------------
class AssertConsistentState(ValidatableTableRequirement):
    """Table properties (None: must be absent) and branch heads (None: must not exist) must be as given."""

    type: Literal["consistent-assert-state"] = Field(default="consistent-assert-state")
    properties: dict[str, str | None] = Field(default_factory=dict)
    branches: dict[str, int | None] = Field(default_factory=dict)

    def validate(self, base_metadata: TableMetadata | None) -> None:
        if base_metadata is None:
            raise CommitFailedException("consistent-catalog: the table was dropped while the commit was being prepared")
        for key, expected in self.properties.items():
            found = base_metadata.properties.get(key)
            if found != expected:
                raise CommitFailedException(
                    f"consistent-catalog fence: table property {key} is {found!r}, this writer expected {expected!r}"
                )
        for name, expected_id in self.branches.items():
            ref = base_metadata.refs.get(name)
            found_id = ref.snapshot_id if ref is not None else None
            if found_id != expected_id:
                raise CommitFailedException(
                    f"consistent-catalog fence: branch {name} is at {found_id}, this writer expected {expected_id}"
                )


def fence(properties: Mapping[str, str | None], branches: Mapping[str, int | None] | None = None) -> AssertConsistentState:
    return AssertConsistentState(properties=dict(properties), branches=dict(branches or {}))


class AssertRefsExactly(ValidatableTableRequirement):
    """The table's refs (branches and tags) must be exactly these: none moved, none added, none removed."""

    type: Literal["consistent-assert-refs"] = Field(default="consistent-assert-refs")
    refs: dict[str, int] = Field(default_factory=dict)

    def validate(self, base_metadata: TableMetadata | None) -> None:
        if base_metadata is None:
            raise CommitFailedException("consistent-catalog: the table was dropped while expiry was being planned")
        found = {name: ref.snapshot_id for name, ref in base_metadata.refs.items()}
        if found != self.refs:
            changed = sorted(set(found.items()) ^ set(self.refs.items()))
            raise CommitFailedException(f"consistent-catalog fence: refs changed since planning ({changed[:4]})")


class AssertSnapshotsExist(ValidatableTableRequirement):
    """Every given snapshot must still be in the table (not expired meanwhile)."""

    type: Literal["consistent-assert-snapshots"] = Field(default="consistent-assert-snapshots")
    snapshot_ids: list[int] = Field(default_factory=list)

    def validate(self, base_metadata: TableMetadata | None) -> None:
        if base_metadata is None:
            raise CommitFailedException("consistent-catalog: the table was dropped")
        existing = {s.snapshot_id for s in base_metadata.snapshots}
        gone = [s for s in self.snapshot_ids if s not in existing]
        if gone:
            raise CommitFailedException(f"consistent-catalog: snapshot(s) {gone} were expired meanwhile")


# --- retries ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RetryPolicy:
    """How often a refused plan-and-commit is tried again, and how long to wait in between.

    Waits grow exponentially from ``base_delay`` to ``max_delay`` seconds with full jitter, so that
    processes refused by each other do not retry in lock step.
    """

    attempts_max: int = 10
    base_delay: float = 0.02
    max_delay: float = 1.0

    def __post_init__(self) -> None:
        if self.attempts_max < 1:
            raise InvalidInputError(f"retries must be at least 1, got {self.attempts_max}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait before ``attempt`` (2, 3, ...)."""
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 2)))

    def attempts(self) -> Iterator[int]:
        """Attempt numbers 1..attempts_max, sleeping before every attempt after the first."""
        for attempt in range(1, self.attempts_max + 1):
            if attempt > 1:
                time.sleep(self.delay(attempt))
            yield attempt


# --- the store ----------------------------------------------------------------------------------------
class Loaded(NamedTuple):
    """A table as loaded from the catalog, with its consistent-catalog state."""

    table: Table
    state: TableState


class TableStore:
    """Reads tables from a pyiceberg catalog and commits to them with requirements (fenced)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.loader = MetadataLoader(catalog)
        """States for reading: one catalog round-trip, concurrent lean reads, a cache by metadata file."""

    @property
    def name(self) -> str:
        return self.catalog.name

    # --- loading ----------------------------------------------------------------------------------
    def load_table(self, identifier: str | Sequence[str]) -> Table:
        name = normalize_identifier(identifier)
        try:
            return self.catalog.load_table(name)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise not_found(name, self.name) from None

    def load(self, identifier: str | Sequence[str]) -> Loaded:
        """The pyiceberg table (for writers) and its state, from one metadata load."""
        name = normalize_identifier(identifier)
        table = self.load_table(name)
        return Loaded(table, self.loader.state_of(name, table))

    def state(self, identifier: str | Sequence[str]) -> TableState:
        name = normalize_identifier(identifier)
        return self.loader.load([name], required=[name])[name].state

    def states(self, identifiers: Iterable[str]) -> list[TableState]:
        names = list(dict.fromkeys(normalize_identifier(i) for i in identifiers))
        found = self.loader.load(names, required=names)
        return [found[n].state for n in names]

    def upstream_states(self, tables: Iterable[str], *, required: bool = True) -> dict[str, TableState]:
        """States of ``tables`` and of every table they are derived from, transitively (one load per lineage level).

        A source that no longer exists is left out (and so cannot be checked for completeness); a
        missing table of ``tables`` itself raises TableNotFoundError when ``required``.
        """
        located = self.loader.upstream(tables, required=required)
        return {name: found.state for name, found in located.items()}

    def list_tables(self) -> list[str]:
        """Every table of the catalog, in every (nested) namespace."""
        found: list[str] = []
        pending: list[tuple[str, ...]] = list(self.catalog.list_namespaces())
        while pending:
            namespace = pending.pop()
            found.extend(".".join(ident) for ident in self.catalog.list_tables(namespace))
            try:
                pending.extend(self.catalog.list_namespaces(namespace))
            except (NotImplementedError, NoSuchNamespaceError):
                pass
        return sorted(set(found))

    # --- committing -------------------------------------------------------------------------------
    def commit(self, table: Table, requirements: Sequence[Any], updates: Sequence[Any], *, what: str) -> Table:
        """One atomic catalog commit of metadata ``updates``; a failed requirement or lost race is FencedError.

        Returns the table as committed: the metadata the catalog's response carries (what a load right
        after would read, without loading it again; ``table`` itself is left as it was).
        """
        try:
            response = self.catalog.commit_table(
                table, (AssertTableUUID(uuid=table.metadata.table_uuid), *requirements), tuple(updates)
            )
        except CommitFailedException as exc:
            raise FencedError(f"{'.'.join(table.name())}: {what} was refused by the catalog: {exc}") from None
        return type(table)(table.name(), response.metadata, response.metadata_location, table.io, table.catalog)

    def write(self, table: Table, requirement: Any, write: Callable[[Transaction], Any], *, what: str) -> bool:
        """A pyiceberg data write (``write(tx)`` appends/overwrites) committed only if ``requirement`` holds.

        One catalog commit, without pyiceberg's retry path: a writer that was fenced out fails at
        once with FencedError in every write mode (its written files are deleted). Returns False
        when the write produced no change to commit (e.g. overwriting nothing with nothing).
        """
        try:
            tx = table.transaction()
            write(tx)
            return commit_transaction_once(tx, (requirement,))
        except CommitFailedException as exc:
            raise FencedError(f"{'.'.join(table.name())}: {what} was refused by the catalog: {exc}") from None
