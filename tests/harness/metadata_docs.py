"""Iceberg metadata JSON written by hand, and the field-by-field comparison of two table states.

What the lean metadata decoder (``consistent_catalog.metadata``) is checked with, on its own
(``tests/unit/test_metadata.py``) and behind the loader on a real catalog (``tests/catalog/test_loading.py``):
``reference`` (pyiceberg's parse, the state the decoder must equal), ``assert_same`` (equal, and in the same
order), ``base``/``variant`` (a small v2 table and edits of it) and ``REFUSED`` (documents pyiceberg reads
differently from the letter of the format, which the decoder must refuse).
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from pyiceberg.table.metadata import TableMetadataUtil

from consistent_catalog.loading import table_state
from consistent_catalog.state import TableState
from tests.conformance.corpus import load_cases


def reference(identifier: str, document: dict[str, Any]) -> TableState:
    return table_state(identifier, TableMetadataUtil.parse_raw(json.dumps(document)))


def assert_same(lean: TableState, full: TableState) -> None:
    """Equal field by field, and in the same order (dicts compare without order)."""
    assert lean == full
    assert list(lean.snapshots.items()) == list(full.snapshots.items())
    for a, b in zip(lean.snapshots.values(), full.snapshots.values()):
        assert list(a.summary.items()) == list(b.summary.items())
        assert type(a.operation) is str and type(b.operation) is str
    assert list(lean.branches.items()) == list(full.branches.items())
    assert list(lean.tags.items()) == list(full.tags.items())
    assert list(lean.properties.items()) == list(full.properties.items())
    assert lean.main_log == full.main_log


@functools.cache
def _template() -> dict[str, Any]:
    """The first table of the first conformance case: schemas, specs and the rest of a valid v2 document."""
    cases = load_cases()
    return next(iter(cases[sorted(cases)[0]]["tables"].values()))


def base() -> dict[str, Any]:
    """A small v2 table: three snapshots on main, a branch, a tag, properties and a snapshot log."""
    document = copy.deepcopy(_template())
    document["snapshots"] = [
        {"snapshot-id": 1, "timestamp-ms": 1000, "manifest-list": "s3://b/1.avro",
         "summary": {"operation": "append", "consistent.barrier": "1000", "added-records": "5", "total-records": "5"}},
        {"snapshot-id": 2, "parent-snapshot-id": 1, "timestamp-ms": 2000, "manifest-list": "s3://b/2.avro",
         "summary": {"operation": "overwrite", "consistent.barrier": "2000"}},
        {"snapshot-id": 3, "parent-snapshot-id": 2, "timestamp-ms": 3000, "manifest-list": "s3://b/3.avro",
         "summary": {"operation": "replace"}},
    ]
    document["refs"] = {"main": {"snapshot-id": 3, "type": "branch"}, "consistent-staged": {"snapshot-id": 2, "type": "branch"},
                        "consistent-pin-1": {"snapshot-id": 1, "type": "tag", "max-ref-age-ms": 60000}}
    document["current-snapshot-id"] = 3
    document["properties"] = {"consistent.watermark": "2500", "a": "b"}
    document["snapshot-log"] = [{"snapshot-id": 1, "timestamp-ms": 1000}, {"snapshot-id": 3, "timestamp-ms": 3000}]
    return document


def variant(change) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    document = base()
    change(document)
    return document


REFUSED = {
    "a summary without operation (pyiceberg warns and says overwrite)": variant(lambda d: d["snapshots"][0]["summary"].pop("operation")),
    "an unknown operation": variant(lambda d: d["snapshots"][0]["summary"].update(operation="merge")),
    "a summary value that is not a string": variant(lambda d: d["snapshots"][0]["summary"].update(x=1)),
    "a property that is not a string (pyiceberg converts it)": variant(lambda d: d["properties"].update(flag=True)),
    "a null property": variant(lambda d: d["properties"].update(flag=None)),
    "a snapshot id that is a string": variant(lambda d: d["snapshots"][0].update({"snapshot-id": "1"})),
    "a timestamp missing (pyiceberg takes now)": variant(lambda d: d["snapshots"][0].pop("timestamp-ms")),
    "no manifest list": variant(lambda d: d["snapshots"][0].pop("manifest-list")),
    "an unknown ref type": variant(lambda d: d["refs"]["main"].update(type="other")),
    "format version 4": variant(lambda d: d.update({"format-version": 4})),
    "no format version": variant(lambda d: d.pop("format-version")),
}
