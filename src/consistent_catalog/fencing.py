"""Fencing inside the catalog's compare-and-swap.

Iceberg catalogs validate a commit's *requirements* against the table metadata they are about to
replace, and swap the metadata pointer only if nothing changed in between. ``AssertConsistentState``
is such a requirement: it states the table properties and branch heads a commit was planned
against. A zombie (an instance whose lease was taken over) or a second instance that lost a race
therefore fails inside the atomic commit itself, never in a separate read-then-write check.

Works with catalogs that validate requirements client-side inside their compare-and-swap (the SQL
catalog on SQLite/PostgreSQL, Glue, DynamoDB, Hive). A REST catalog server does not know this
requirement type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import ValidatableTableRequirement


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
