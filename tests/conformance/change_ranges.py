"""Conformance of the changes' range (protocol §5.10): ``changelog.plan_changes`` and the JVM's ``ChangeRange``.

A query ``{"kind": "changes", "table": T, "from": T1, "to": T2 | null}`` is answered by the range of
``changes(T, T1, T2)`` on main: ``{"from_snapshot_id", "to_snapshot_id", "barrier", "to_barrier", "read"}``, or
``{"error": <Python exception class name>}``. ``read`` is ``none``, ``appends`` or ``rewrites`` (the JVM tells
Iceberg's changelog scan from whole snapshots by delete files, Python by the files it plans: both are rewrites here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from consistent_catalog.changelog import plan_changes
from consistent_catalog.exceptions import ConsistentCatalogError
from consistent_catalog.state import TableState

KINDS = ("changes",)


def query(table: str, first: int, last: int | None = None) -> dict[str, Any]:
    return {"kind": "changes", "table": table, "from": first, "to": last}


def answer(states: Mapping[str, TableState], query: Mapping[str, Any]) -> dict[str, Any]:
    try:
        found = plan_changes(states[query["table"]], query["from"], query.get("to"))
    except ConsistentCatalogError as exc:
        return {"error": type(exc).__name__}
    return {
        "from_snapshot_id": found.from_snapshot_id,
        "to_snapshot_id": found.to_snapshot_id,
        "barrier": found.barrier,
        "to_barrier": found.to_barrier,
        "read": found.read if found.read in ("none", "appends") else "rewrites",
    }
