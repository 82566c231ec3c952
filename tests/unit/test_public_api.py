"""The public API, fixed: what the package and ``consistent_catalog.retention`` export, where errors live,
what moved, and that the pure core's messages speak the library's language (the CLI adds its own)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re

import pytest

import consistent_catalog
from consistent_catalog import exceptions, retention
from consistent_catalog.cli.hints import cli_hint, with_hint
from consistent_catalog.exceptions import (
    ConsistentCatalogError,
    HistoryExpiredError,
    NoWatermarkError,
    ResolutionError,
    UntrackedWriteError,
)
from consistent_catalog.resolver import resolve
from tests.harness.builders import derived_properties, derived_state, epoch, genesis, root_state, snapshot, table_state
from tests.harness.source import SRC

PACKAGE = {
    # the façade, what it reads and returns
    "ConsistentCatalog", "ConsistentRead", "Cut", "TableCut", "Level", "LEVELS", "to_barrier",
    # ingests, ownership, epochs
    "IngestResult", "Lease", "EpochJob", "EpochContext", "EpochPlan", "EpochResult",
    # lineage, reports, revisions, retention's policy
    "LineageGraph", "TableStatus", "HistoryEntry", "EpochEntry", "RevisionResult", "RevisionStep", "RetentionPolicy",
    # what a wait for freshness returns
    "Freshness",
}
RETENTION = {
    "Retention", "Pins", "RetentionPolicy", "Tier",
    "ExpiryPlan", "TableExpiry", "ExpiryResult", "DeletedFiles", "OrphanResult", "TableOrphans",
    "Pin", "PinInfo", "RetainedCut", "RetainedTag",
}
#: consistent_catalog.spark: the Spark side, kept out of the package's top level so that importing
#: consistent_catalog never imports it; configure_spark is delta's configure_spark_with_delta_pip for this package.
SPARK = {
    "build_session", "configure_spark", "spark_conf", "write_spark_defaults", "render_spark_defaults",
    "parse_spark_defaults", "parse_catalog_uri", "ensure_sql_catalog",
    "find_plugin_jar", "find_iceberg_runtime_jar", "find_jdbc_jars", "ICEBERG_RUNTIME_PACKAGE",
}
PURE_CORE = ["barrier", "state", "completeness", "metadata", "resolver", "lineage", "epoch_plan", "revision", "report",
             "sql", "retention/plan", "retention/policy", "retention/refs"]


def test_the_package_exports_exactly_what_users_call_and_get_back() -> None:
    assert set(consistent_catalog.__all__) == PACKAGE
    assert len(consistent_catalog.__all__) == len(PACKAGE)  # no name twice
    for name in PACKAGE:
        assert getattr(consistent_catalog, name) is not None


def test_the_spark_package_exports_the_session_helpers_lazily() -> None:
    import subprocess
    import sys

    import consistent_catalog.spark as spark

    assert set(spark.__all__) == SPARK and len(spark.__all__) == len(SPARK)
    for name in SPARK:
        assert getattr(spark, name) is not None
    assert "configure_spark" not in consistent_catalog.__all__
    loaded = subprocess.run([sys.executable, "-c", "import sys, consistent_catalog, consistent_catalog.spark; "
                             "print(sorted(m for m in sys.modules if m.startswith(('pyspark', 'consistent_catalog.spark.'))))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"  # importing the package (and its spark package) starts nothing of Spark


def test_retention_exports_what_cc_retention_and_cc_pins_return() -> None:
    assert set(retention.__all__) == RETENTION
    for name in RETENTION:
        assert getattr(retention, name) is not None
    # every public method of the two namespaces returns an exported type (or builtins of them)
    for namespace in (retention.Retention, retention.Pins):
        for name, method in inspect.getmembers(namespace, inspect.isfunction):
            if name.startswith("_"):
                continue
            returned = inspect.signature(method).return_annotation
            named = set(re.findall(r"\b[A-Z]\w+", str(returned))) - {"None", "Table"}
            assert named <= RETENTION | PACKAGE, (namespace.__name__, name, returned)


def test_every_error_lives_in_exceptions_under_one_base_and_is_drawn_in_its_tree() -> None:
    errors = {n: c for n, c in vars(exceptions).items() if isinstance(c, type) and issubclass(c, Exception)}
    assert all(issubclass(c, ConsistentCatalogError) for c in errors.values())
    assert not set(errors) & set(consistent_catalog.__all__)
    tree = exceptions.__doc__ or ""
    assert {n for n in errors if n not in tree} == set()


@pytest.mark.parametrize("name, home", [("FencedError", "consistent_catalog.exceptions"),
                                        ("UntrackedWriteError", "consistent_catalog.exceptions"),
                                        ("Pins", "consistent_catalog.retention"),
                                        ("ExpiryResult", "consistent_catalog.retention")])
def test_names_that_moved_still_import_with_a_warning_naming_their_home(name: str, home: str) -> None:
    with pytest.warns(DeprecationWarning, match=re.escape(f"from {home} import {name}")):
        found = getattr(consistent_catalog, name)
    assert found is getattr(importlib.import_module(home), name)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        consistent_catalog.Nope  # noqa: B018


def _strings(module: str) -> list[str]:
    tree = ast.parse((SRC / f"{module}.py").read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


@pytest.mark.parametrize("module", PURE_CORE)
def test_the_pure_core_names_no_command_line(module: str) -> None:
    """Messages of the pure core state the problem in the library's terms; ``cli.hints`` adds the commands."""
    assert [s for s in _strings(module) if "consistent-catalog " in s or re.search(r"(^|\s)--[a-z]", s)] == []


# --- the hints the command line adds, from errors the pure core raises -------------------------------
ROOT, DERIVED = "db.r", "db.d"


def test_an_untracked_write_carries_table_and_barrier_and_the_cli_names_revise() -> None:
    records = [genesis(20, job="j", ts=1), epoch(21, 20, 500, job="j", sources={ROOT: 1}, ts=2),
               snapshot(424242, 21, 600, op="overwrite", summary={"added-records": "5"})]
    state = table_state(DERIVED, records, head=424242, properties=derived_properties("j", ROOT))
    with pytest.raises(UntrackedWriteError) as raised:
        resolve([state])
    error = raised.value
    assert (error.table, error.barrier) == (DERIVED, 500)
    assert "consistent-catalog" not in str(error) and "as of 500" in str(error)
    assert cli_hint(error) == (f"resolve ... --as-of 500 reads before the write; "
                               f"consistent-catalog revise {DERIVED} --to-barrier 500 removes it")
    assert with_hint(error) == f"{error} (CLI: {cli_hint(error)})"


def test_a_blocked_cut_names_the_table_where_the_block_starts() -> None:
    empty_root = root_state(ROOT, [])
    derived = derived_state(DERIVED, [ROOT], [], 10, job="j")
    with pytest.raises(NoWatermarkError) as raised:
        resolve([derived], upstream=[empty_root])
    assert (raised.value.table, raised.value.root) == (ROOT, True)
    assert cli_hint(raised.value) == f"consistent-catalog advance-watermark {ROOT} BARRIER"

    fed = root_state(ROOT, [100])
    with pytest.raises(NoWatermarkError) as raised:
        resolve([derived], upstream=[fed])
    assert (raised.value.table, raised.value.root) == (DERIVED, False)
    assert cli_hint(raised.value) == f"consistent-catalog status {DERIVED} shows its sources' progress"


def test_expired_history_and_an_as_of_too_early_hint_at_a_later_as_of() -> None:
    truncated = table_state(ROOT, [snapshot(5, 4, 1_000, barrier=1_000, summary={"added-records": "1"})], head=5)
    with pytest.raises(HistoryExpiredError) as raised:
        resolve([truncated], as_of=500)
    assert (raised.value.table, raised.value.barrier) == (ROOT, 1_000)
    assert "--as-of" in (cli_hint(raised.value) or "")
    assert cli_hint(ResolutionError("no complete barrier", barrier=5)) == "resolve with a later --as-of"
    assert cli_hint(ResolutionError("no complete barrier")) is None
