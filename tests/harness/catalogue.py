"""The bad-input catalogue's check: a refusal is a typed one-line error, and nothing changed."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from consistent_catalog.exceptions import ConsistentCatalogError


def snapshot_of(catalog, namespace: str = "demo") -> dict[str, tuple[str, list]]:
    """Every table's metadata location and rows: what a refused call must not change."""
    result = {}
    for ident in catalog.list_tables(namespace):
        table = catalog.load_table(ident)
        rows = table.scan().to_arrow().to_pylist() if table.metadata.current_snapshot_id is not None else []
        result[".".join(ident)] = (table.metadata_location, sorted(map(json.dumps, rows)))
    return result


def refused(catalog, error: type[ConsistentCatalogError], match: str, action: Callable[[], object]) -> None:
    """``action`` raises ``error`` (a one-line message matching ``match``) and leaves the catalog as it was."""
    before = snapshot_of(catalog)
    with pytest.raises(error, match=match) as raised:
        action()
    assert isinstance(raised.value, ConsistentCatalogError)
    assert "\n" not in str(raised.value)
    assert snapshot_of(catalog) == before
