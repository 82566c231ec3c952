"""The lean metadata decoder (``consistent_catalog.metadata``) gives exactly ``loading.table_state``'s state.

Compared on every table of the conformance corpus (v2 metadata JSON as Iceberg writes it, including
pyiceberg's own files for the generated cases), on hand-made edge cases of the format (v1 without
refs, ``current-snapshot-id`` -1, snapshots without summary, tags, a tag named ``main``), and on
gzip-compressed files. What the decoder does not read like pyiceberg it refuses (``LeanDecodeError``),
so the loader hands those files to pyiceberg. Real files written by pyiceberg through a catalog are
compared in ``tests/catalog/test_loading.py``.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from consistent_catalog.exceptions import ConsistentCatalogError, TableNotFoundError
from consistent_catalog.metadata import LeanDecodeError, decode_load_result, decode_state, load_result_head
from consistent_catalog.resolver import DEFAULT_LEVEL, resolve
from consistent_catalog.state import TableState
from tests.conformance.corpus import cut_json, load_cases
from tests.harness.metadata_docs import REFUSED, assert_same, base, reference, variant

CORPUS = load_cases()
CORPUS_TABLES = sorted((case, name) for case, body in CORPUS.items() for name in body["tables"])


def test_the_corpus_is_there() -> None:
    assert len(CORPUS_TABLES) >= 30


@pytest.mark.parametrize(("case", "table"), CORPUS_TABLES, ids=[f"{c}:{t}" for c, t in CORPUS_TABLES])
def test_lean_state_equals_pyiceberg_state_on_the_corpus(case: str, table: str) -> None:
    document = CORPUS[case]["tables"][table]
    data = json.dumps(document).encode()
    assert_same(decode_state(table, data), reference(table, document))
    assert_same(decode_state(table, gzip.compress(data)), reference(table, document))


def test_every_corpus_table_is_read_by_the_lean_decoder() -> None:
    """No corpus table falls back to pyiceberg: the fast path covers what Iceberg writes."""
    for case, table in CORPUS_TABLES:
        decode_state(table, json.dumps(CORPUS[case]["tables"][table]).encode())


# --- edge cases of the format -------------------------------------------------------------------------
EDGE_CASES = {
    "base": base(),
    "no refs: main from current-snapshot-id": variant(lambda d: d.pop("refs")),
    "refs without main": variant(lambda d: d["refs"].pop("main")),
    "a tag named main": variant(lambda d: d["refs"].update(main={"snapshot-id": 2, "type": "tag"})),
    "current-snapshot-id -1": variant(lambda d: (d.update({"current-snapshot-id": -1}), d.pop("refs"))),
    "no current-snapshot-id, no refs": variant(lambda d: (d.pop("current-snapshot-id"), d.pop("refs"))),
    "no snapshots": variant(lambda d: (d.pop("snapshots"), d.pop("refs"), d.pop("current-snapshot-id"), d.pop("snapshot-log"))),
    "a snapshot without summary": variant(lambda d: d["snapshots"][1].pop("summary")),
    "a null summary": variant(lambda d: d["snapshots"][1].update(summary=None)),
    "no properties": variant(lambda d: d.pop("properties")),
    "a null parent": variant(lambda d: d["snapshots"][0].update({"parent-snapshot-id": None})),
    "unknown fields": variant(lambda d: (d.update(x={"y": [1, 2]}), d["snapshots"][0].update(z=3))),
    "format version 1": variant(lambda d: d.update({"format-version": 1, "schema": d["schemas"][0], "partition-spec": []})),
    "format version 1 as old writers wrote it": variant(
        lambda d: (d.update({"format-version": 1, "schema": d.pop("schemas")[0], "partition-spec": []}), d.pop("refs"))
    ),
    "format version 3": variant(lambda d: d.update({"format-version": 3, "next-row-id": 0})),
    "a dangling parent (expired history)": variant(lambda d: d["snapshots"].pop(0)),
    "unicode": variant(lambda d: d["properties"].update({"ключ": "значение ✓"})),
}


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_lean_state_equals_pyiceberg_state_on_edge_cases(name: str) -> None:
    document = EDGE_CASES[name]
    assert_same(decode_state("db.t", json.dumps(document).encode()), reference("db.t", document))


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_pyiceberg_reads_differently_is_refused(name: str) -> None:
    with pytest.raises(LeanDecodeError):
        decode_state("db.t", json.dumps(REFUSED[name]).encode())


# --- a REST catalog's LoadTableResult: the metadata inline -----------------------------------------------
LOCATION = "s3://bucket/wh/db/t/metadata/00007-6f1c.metadata.json"


def load_result(document: dict[str, Any], **extra: Any) -> bytes:
    """A LoadTableResult as the REST spec writes it (config and storage credentials beside the metadata)."""
    return json.dumps({"metadata-location": LOCATION, "metadata": document,
                       "config": {"s3.endpoint": "http://127.0.0.1:1"},
                       "storage-credentials": [{"prefix": "s3://bucket", "config": {"s3.access-key-id": "k"}}],
                       **extra}).encode()


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_a_load_result_decodes_to_the_state_of_its_metadata(name: str) -> None:
    from pyiceberg.catalog.rest import TableResponse

    data = load_result(EDGE_CASES[name])
    location, state = decode_load_result("db.t", data)
    theirs = TableResponse.model_validate_json(data)  # pyiceberg's own parse of the answer
    assert location == theirs.metadata_location == LOCATION
    assert_same(state, reference("db.t", EDGE_CASES[name]))
    assert load_result_head(data) == (LOCATION, True)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_load_result_whose_metadata_pyiceberg_reads_differently_is_refused(name: str) -> None:
    data = load_result(REFUSED[name])
    with pytest.raises(LeanDecodeError):
        decode_load_result("db.t", data)
    assert load_result_head(data) == (LOCATION, True)  # the location alone is still read, the metadata skipped


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b'{"metadata-location": 7}', b'{"metadata": {}}'])
def test_what_is_no_load_result_is_refused(data: bytes) -> None:
    with pytest.raises(LeanDecodeError):
        decode_load_result("db.t", data)


def test_a_load_result_without_a_location() -> None:
    data = json.dumps({"metadata": base()}).encode()
    assert load_result_head(data) == (None, False)
    assert decode_load_result("db.t", data)[0] is None


@pytest.mark.parametrize(("extra", "vended"), [({}, False), ({"config": {}, "storage-credentials": []}, False),
                                              ({"config": {"s3.endpoint": "x"}}, True),
                                              ({"storage-credentials": [{"prefix": "s3://b", "config": {}}]}, True)])
def test_a_load_result_says_whether_it_hands_out_config(extra: dict, vended: bool) -> None:
    data = json.dumps({"metadata-location": LOCATION, "metadata": base(), **extra}).encode()
    assert load_result_head(data) == (LOCATION, vended)


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b"not json", gzip.compress(b"{")[:-3], b"\x1f\x8b garbage"])
def test_not_metadata_at_all_is_refused(data: bytes) -> None:
    with pytest.raises(LeanDecodeError):
        decode_state("db.t", data)


def test_a_big_table_round_trips() -> None:
    document = base()
    document["snapshots"] = [
        {"snapshot-id": i, "parent-snapshot-id": i - 1 if i else None, "timestamp-ms": 1000 + i, "manifest-list": f"m{i}",
         "summary": {"operation": "append", "consistent.barrier": str(1000 + i), "added-records": "1"}}
        for i in range(2000)
    ]
    document["refs"] = {"main": {"snapshot-id": 1999, "type": "branch"}}
    document["current-snapshot-id"] = 1999
    lean = decode_state("db.t", gzip.compress(json.dumps(document).encode()))
    assert_same(lean, reference("db.t", document))
    assert lean.branch().head_barrier == 2999 and len(lean.branch().snapshot_ids) == 2000


# --- random pipeline histories (the hypothesis simulation), as the conformance test writes them ----------------
def _resolve_like_cc(states: dict[str, TableState], query: dict[str, Any]) -> dict[str, Any]:
    """``ConsistentCatalog.resolve`` over ``states``: the cut's tables, their upstream closure in its order."""
    closure: dict[str, TableState] = {}
    pending = list(query["tables"])
    try:
        while pending:
            name = pending.pop()
            if name in closure:
                continue
            if name not in states:
                if name in query["tables"]:
                    raise TableNotFoundError(name)
                continue
            closure[name] = states[name]
            pending.extend(s for s in states[name].sources if s not in closure)
        cut = resolve([closure[n] for n in query["tables"]], query.get("level", DEFAULT_LEVEL), query.get("as_of"),
                      upstream=closure.values())
    except ConsistentCatalogError as exc:
        return {"error": type(exc).__name__}
    return cut_json(cut)


@pytest.mark.slow  # 20 random pipelines through both parsers and every query: ~20 s
def test_random_histories_decode_and_resolve_as_with_pyiceberg() -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    from tests.conformance import write_plans
    from tests.harness.random_histories import random_case

    @settings(max_examples=20, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        case = random_case(data, 0)  # its expected answers come from pyiceberg's parse (the corpus's reference)
        lean = {name: decode_state(name, json.dumps(doc).encode()) for name, doc in case["tables"].items()}
        for name, doc in case["tables"].items():
            assert_same(lean[name], reference(name, doc))
        for query in case["queries"]:
            if query.get("kind") in write_plans.KINDS:  # the writer plans over the lean states as over pyiceberg's
                assert write_plans.answer(case["tables"], query, lean) == query["expected"], query
            elif query.get("kind") != "component":
                assert _resolve_like_cc(lean, query) == query["expected"], query

    check()
