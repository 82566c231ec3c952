"""Which tables a retention run touches, loaded once (the targets and every table of the catalog)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from consistent_catalog.exceptions import TableNotFoundError
from consistent_catalog.state import TableState
from consistent_catalog.util.identifiers import normalize_identifier

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from consistent_catalog.commit import TableStore


def load_all(store: TableStore, names: Iterable[str]) -> tuple[dict[str, Table], dict[str, TableState]]:
    """Tables and states of ``names`` (one metadata load each); tables dropped meanwhile are left out."""
    tables: dict[str, Table] = {}
    states: dict[str, TableState] = {}
    for name in names:
        try:
            tables[name], states[name] = store.load(name)
        except TableNotFoundError:
            continue  # dropped meanwhile
    return tables, states


def targets_and_catalog(store: TableStore, tables: Iterable[str] | None) -> tuple[list[str], list[str]]:
    """(targets, every table of the catalog); named targets must exist."""
    everything = store.list_tables()
    if tables is None:
        return everything, everything
    targets = list(dict.fromkeys(normalize_identifier(t) for t in tables))
    for name in targets:
        if name not in everything:
            store.load_table(name)  # raises TableNotFoundError with the usual message
            everything.append(name)
    return targets, everything
