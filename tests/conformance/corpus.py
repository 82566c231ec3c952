"""The conformance corpus: one table-history format, one answer format, both resolvers.

A case (``cases/*.json``) is ``{"description", "tables": {name: <Iceberg table metadata JSON>},
"queries": [{"tables": [...], "level", "as_of", "expected": <answer>}, ...]}``. The table metadata is
the v2 metadata JSON as Iceberg writes it (pyiceberg's own files for the generated cases); the JVM
parses it with Iceberg's ``TableMetadataParser``, Python with pyiceberg.

A query is ``ConsistentCatalog.resolve(tables, level, as_of)`` over a catalog holding exactly the
case's tables, or (``"kind": "component"``) the cut the Spark plugin serves for a table's lineage
component. An answer is the cut ``{"level", "barrier", "tables": {name: {"snapshot_id", "barrier",
"branch", "revision"}}}``, ``{"cut": <cut or null>, "blocked": {name: <error class>}}`` for a
component, or ``{"error": <Python exception class name>}``. A write-plan query (``"kind": "write-plan"`` or
``"new-edges"``) asks the writers instead: the epoch a job plans and the commits it sends (``write_plans``); a
``"fault"`` or ``"duration"`` query asks how a catalog error is classified and what a duration is (``fault_cases``).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table.metadata import TableMetadataUtil

from consistent_catalog import properties as P
from consistent_catalog.catalog import ConsistentCatalog
from consistent_catalog.exceptions import ConsistentCatalogError
from consistent_catalog.loading import table_state
from consistent_catalog.resolver import DEFAULT_LEVEL, Cut
from consistent_catalog.resolver import component_cut as resolver_component_cut
from consistent_catalog.state import TableState
from tests.conformance import change_ranges, fault_cases, write_plans

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "cases"
MAIN_CLASS = "io.consistentcatalog.conformance.Main"


# --- a catalog holding a case's tables ----------------------------------------------------------------
class CorpusCatalog:
    """The two things ``ConsistentCatalog.resolve`` asks of a pyiceberg catalog: ``name`` and ``load_table``."""

    name = "corpus"

    def __init__(self, tables: Mapping[str, Any]) -> None:
        self.tables = tables

    def load_table(self, identifier: str) -> Any:
        name = identifier if isinstance(identifier, str) else ".".join(identifier)
        if name not in self.tables:
            raise NoSuchTableError(name)
        return SimpleNamespace(metadata=TableMetadataUtil.parse_raw(json.dumps(self.tables[name])))


def states_of(tables: Mapping[str, Any]) -> dict[str, TableState]:
    catalog = CorpusCatalog(tables)
    return {name: table_state(name, catalog.load_table(name).metadata) for name in tables}


def cut_json(cut: Cut) -> dict[str, Any]:
    return {
        "level": cut.level,
        "barrier": cut.barrier,
        "tables": {
            name: {"snapshot_id": t.snapshot_id, "barrier": t.barrier, "branch": t.branch, "revision": t.revision}
            for name, t in cut.tables.items()
        },
    }


def component_cut(
    tables: Mapping[str, Any], table: str, level: str = DEFAULT_LEVEL, as_of: Any = None
) -> tuple[Cut | None, dict[str, ConsistentCatalogError]]:
    """The cut the Spark plugin serves for ``table``'s lineage component: the library's
    ``resolver.component_cut`` (protocol §4.7), the reference for the JVM code."""
    found = resolver_component_cut(table, states_of(tables), level, as_of)
    return found.cut, dict(found.blocked)


def python_answer(tables: Mapping[str, Any], query: Mapping[str, Any]) -> dict[str, Any]:
    """What the Python resolver (or, for a write plan, the Python writer) answers to one query of a case."""
    if query.get("kind") in write_plans.KINDS:
        return write_plans.answer(tables, query, states_of(tables))
    if query.get("kind") in fault_cases.KINDS:
        return fault_cases.answer(query)
    if query.get("kind") in change_ranges.KINDS:
        return change_ranges.answer(states_of(tables), query)
    level = query.get("level", DEFAULT_LEVEL)
    as_of = query.get("as_of")
    try:
        if query.get("kind") == "component":
            cut, blocked = component_cut(tables, query["table"], level, as_of)
            return {
                "cut": None if cut is None else cut_json(cut),
                "blocked": {name: type(exc).__name__ for name, exc in blocked.items()},
            }
        return cut_json(ConsistentCatalog(CorpusCatalog(tables)).resolve(query["tables"], level, as_of))
    except ConsistentCatalogError as exc:
        return {"error": type(exc).__name__}


def comparable(answer: Mapping[str, Any]) -> dict[str, Any]:
    """An answer without the free-text error message (only the error class must agree), the snapshots its
    commits create named as in the corpus (``write_plans.normalised``)."""
    return write_plans.normalised({k: v for k, v in answer.items() if k != "message"})


# --- cases ---------------------------------------------------------------------------------------------
def make_case(description: str, tables: Mapping[str, Any], queries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A case with every query's expected answer computed by the Python resolver."""
    out = []
    for query in queries:
        q = dict(query)
        q["expected"] = python_answer(tables, q)
        out.append(q)
    return {"description": description, "tables": dict(tables), "queries": out}


def load_cases(directory: Path = CASES) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(directory.glob("*.json"))}


def dumps_case(case: Mapping[str, Any]) -> str:
    """A case as JSON with one table's metadata, and one query, per line (small, and diffs stay readable)."""
    compact = {"separators": (",", ":")}
    tables = [f"  {json.dumps(name)}: {json.dumps(md, **compact)}" for name, md in case["tables"].items()]
    queries = [f"  {json.dumps(query, **compact)}" for query in case["queries"]]
    return (
        "{\n"
        f' "description": {json.dumps(case["description"])},\n'
        ' "tables": {\n' + ",\n".join(tables) + "\n },\n"
        ' "queries": [\n' + ",\n".join(queries) + "\n ]\n}\n"
    )


def write_case(directory: Path, name: str, case: Mapping[str, Any]) -> Path:
    path = directory / f"{name}.json"
    path.write_text(dumps_case(case), encoding="utf-8")
    return path


# --- Iceberg v2 table metadata for simulated states ------------------------------------------------
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}]}


def metadata_json(state: TableState, *, tags: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The v2 table metadata JSON Iceberg would write for ``state`` (its snapshots, refs and properties).

    Manifest lists are named but never read: resolution needs metadata only.
    """
    namespace, _, table = state.identifier.rpartition(".")
    location = f"file:///warehouse/{namespace}.db/{table}"
    ids = sorted(state.snapshots)
    snapshots = []
    for sequence, snapshot_id in enumerate(ids, start=1):
        record = state.snapshots[snapshot_id]
        entry: dict[str, Any] = {"snapshot-id": snapshot_id}
        if record.parent_id is not None:
            entry["parent-snapshot-id"] = record.parent_id
        entry.update(
            {
                "sequence-number": sequence,
                "timestamp-ms": record.timestamp_ms,
                "manifest-list": f"{location}/metadata/snap-{snapshot_id}-0-{uuid.UUID(int=snapshot_id)}.avro",
                "summary": {"operation": record.operation, **dict(record.summary)},
                "schema-id": 0,
            }
        )
        snapshots.append(entry)
    refs = {name: {"snapshot-id": sid, "type": "branch"} for name, sid in state.branches.items()}
    refs.update({name: {"snapshot-id": sid, "type": "tag"} for name, sid in (tags or state.tags).items()})
    main = state.branches.get(P.MAIN_BRANCH)
    last_updated = max((s.timestamp_ms for s in state.snapshots.values()), default=1_700_000_000_000)
    metadata: dict[str, Any] = {
        "location": location,
        "table-uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, state.identifier)),
        "last-updated-ms": last_updated,
        "last-column-id": 1,
        "schemas": [SCHEMA],
        "current-schema-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "default-spec-id": 0,
        "last-partition-id": 999,
        "properties": dict(state.properties),
        "snapshots": snapshots,
        "snapshot-log": [{"snapshot-id": main, "timestamp-ms": last_updated}] if main is not None else [],
        "metadata-log": [],
        "sort-orders": [{"order-id": 0, "fields": []}],
        "default-sort-order-id": 0,
        "refs": refs,
        "format-version": 2,
        "last-sequence-number": len(ids),
    }
    if main is not None:
        metadata["current-snapshot-id"] = main
    return metadata


# --- the JVM side ---------------------------------------------------------------------------------------
def build_jvm() -> Path:
    """Build the JVM reactor, test mains included, with Maven (scripts/build_jvm.sh; idempotent); returns the
    installed pyspark's line's build folder, build/jvm/spark-<line> (``classes``: the plugin; ``test-classes``:
    MAIN_CLASS, not in the plugin's jar; ``classpath``: Spark, Iceberg and the drivers from ~/.m2)."""
    from consistent_catalog.spark.session import checkout_line_dir

    subprocess.run(["bash", str(ROOT / "scripts" / "build_jvm.sh")], check=True, cwd=ROOT)
    return checkout_line_dir()


def java_command(module: Path, main_class: str = MAIN_CLASS) -> list[str]:
    """``java ... main_class``: a test main of the module (MAIN_CLASS by default) over its classes and classpath."""
    from tests.harness.rest_server import java_binary

    java = java_binary()
    classpath = f"{module / 'classes'}:{module / 'test-classes'}:{(module / 'classpath').read_text().strip()}"
    return [java, "-Xss4m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath, main_class]


def java_answers(paths: Iterable[Path], module: Path | None = None) -> dict[tuple[str, int], dict[str, Any]]:
    """Run the JVM resolver over case files in one JVM: (case file name, query index) -> answer."""
    module = module or build_jvm()
    result = subprocess.run(
        [*java_command(module), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAVA_TOOL_OPTIONS": ""},
    )
    if result.returncode != 0:
        raise AssertionError(f"the JVM resolver failed ({result.returncode}):\n{result.stderr[-4000:]}")
    answers = {}
    for line in result.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            answers[(row["case"], row["index"])] = row["answer"]
    return answers
