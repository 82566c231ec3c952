"""Bad catalog configuration (issue #10, items 7 and 8): refused with one line that names the problem
and a way out that exists — and a read never creates a catalog.

Each test fails on the behaviour before the fix: a mistyped SQLite path created an empty database
and listed nothing (exit 0), a missing directory gave a two-line SQLAlchemy error, ``lineage nope.x``
showed the missing table as a root, ``-c dc`` on a database of catalog ``lake`` listed nothing, and
messages named ``--uri`` (pyiceberg's own CLI option) and a ``--takeover`` that no job command has.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import consistent_catalog
from consistent_catalog import ConsistentCatalog
from consistent_catalog.cli.main import cli
from consistent_catalog.exceptions import CatalogConfigError, TableNotFoundError
from tests.harness.lake import WORDS_SCHEMA, sqlite_catalog

EXE = str(Path(sys.executable).parent / "consistent-catalog")
SRC = Path(consistent_catalog.__file__).resolve().parent
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
FOREIGN_OPTIONS = {"--properties-file", "--conf", "--profiles-dir"}
"""Options of other tools that messages may name (spark-sql's, dbt's)."""
READ_COMMANDS = [
    ["status"],
    ["lineage"],
    ["history", "demo.words"],
    ["resolve", "demo.words"],
    ["pins"],
    ["retain", "--list"],
    ["expire", "--dry-run"],
    ["duckdb", "demo.words"],
]


def cli_options() -> set[str]:
    """Every ``--option`` the consistent-catalog command and its subcommands accept."""
    found: set[str] = {"--help"}  # click's own, on every command

    def visit(command: click.Command) -> None:
        for param in command.params:
            found.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
        if isinstance(command, click.Group):
            for sub in command.commands.values():
                visit(sub)

    visit(cli)
    return found


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PYICEBERG_")}
    env["PYICEBERG_HOME"] = "/nonexistent-pyiceberg-home"  # no ~/.pyiceberg.yaml of the machine
    env.update(extra)
    return env


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The installed command, in a fresh process."""
    return subprocess.run([EXE, *args], env=env, capture_output=True, text=True, timeout=120)


def invoke(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *args: str) -> click.testing.Result:
    """The CLI in-process (fast), with exactly ``env`` as the pyiceberg configuration."""
    for key in [k for k in os.environ if k.upper().startswith("PYICEBERG_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYICEBERG_HOME", "/nonexistent-pyiceberg-home")
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def one_error_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


def assert_options_exist(message: str) -> None:
    named = set(OPTION.findall(message)) - FOREIGN_OPTIONS
    assert named <= cli_options(), f"{sorted(named - cli_options())} named in {message!r} are not CLI options"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A catalog ``lake`` with demo.words on ``DIR/catalog.db``."""
    directory = tmp_path_factory.mktemp("config")
    catalog = sqlite_catalog(directory)
    catalog.create_namespace("demo")
    catalog.create_table("demo.words", schema=WORDS_SCHEMA)
    return directory


# --- item 7: a read never creates a catalog ---------------------------------------------------------
@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c))
def test_read_command_on_a_mistyped_sqlite_path_creates_nothing(tmp_path, monkeypatch, command):
    missing = tmp_path / "catalgo.db"
    env = {"PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{missing}", "PYICEBERG_CATALOG__LAKE__WAREHOUSE": f"file://{tmp_path}/wh"}
    result = invoke(monkeypatch, env, "-c", "lake", *command)
    assert result.exit_code == 1, result.output
    line = one_error_line(result.output)
    assert f"no catalog database at {missing}" in line
    assert "PYICEBERG_CATALOG__LAKE__URI" in line and "consistent-catalog demo" in line
    assert_options_exist(line)
    assert not missing.exists() and list(tmp_path.iterdir()) == []


def test_installed_status_on_a_mistyped_path_exits_1_and_creates_no_file(tmp_path):
    missing = tmp_path / "catalgo.db"
    proc = run_cli(clean_env(PYICEBERG_CATALOG__LAKE__URI=f"sqlite:///{missing}"), "-c", "lake", "status")
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"no catalog database at {missing}" in one_error_line(proc.stderr)
    assert not missing.exists()


def test_relative_sqlite_path_is_resolved_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke(monkeypatch, {"PYICEBERG_CATALOG__LAKE__URI": "sqlite:///typo.db"}, "-c", "lake", "lineage")
    assert result.exit_code == 1
    assert f"no catalog database at {tmp_path / 'typo.db'}" in one_error_line(result.output)
    assert not (tmp_path / "typo.db").exists()


def test_path_in_a_missing_directory_is_one_clean_line(tmp_path, monkeypatch):
    missing = tmp_path / "no" / "such" / "dir" / "catalog.db"
    result = invoke(monkeypatch, {"PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{missing}"}, "-c", "lake", "status")
    assert result.exit_code == 1
    line = one_error_line(result.output)
    assert f"no catalog database at {missing}" in line and f"directory {missing.parent} does not exist" in line
    for noise in ("OperationalError", "sqlalche", "Background on this error", "unexpected"):
        assert noise not in line
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("content", [b"", b"not a database at all\n"], ids=["empty-file", "text-file"])
def test_a_file_that_holds_no_catalog_is_refused_and_left_untouched(tmp_path, monkeypatch, content):
    path = tmp_path / "catalog.db"
    path.write_bytes(content)
    result = invoke(monkeypatch, {"PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{path}"}, "-c", "lake", "status")
    assert result.exit_code == 1
    line = one_error_line(result.output)
    assert str(path) in line and "catalog" in line
    assert path.read_bytes() == content  # pyiceberg would have created its tables in it


def test_python_load_refuses_a_missing_database_and_create_true_is_the_way_to_make_one(tmp_path):
    path = tmp_path / "new.db"
    with pytest.raises(CatalogConfigError, match=re.escape(f"no catalog database at {path}")) as refused:
        ConsistentCatalog.load("fresh", uri=f"sqlite:///{path}", warehouse=f"file://{tmp_path}/wh")
    assert "the uri passed to ConsistentCatalog.load" in str(refused.value) and "create=True" in str(refused.value)
    assert not path.exists()
    cc = ConsistentCatalog.load("fresh", create=True, uri=f"sqlite:///{path}", warehouse=f"file://{tmp_path}/wh")
    assert path.exists() and cc.list_tables() == []
    assert ConsistentCatalog.load("fresh", uri=f"sqlite:///{path}").list_tables() == []  # exists now: loads


def test_existing_catalog_still_loads_from_the_environment(lake, monkeypatch):
    result = invoke(monkeypatch, {"PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{lake}/catalog.db"}, "-c", "lake", "-o", "json", "lineage")
    assert result.exit_code == 0, result.output
    assert "demo.words" in result.output


@pytest.mark.parametrize(
    "env",
    [{}, {"PYICEBERG_CATALOG__NOWHERE__TYPE": "sql"}],
    ids=["no-configuration", "type-without-uri"],
)
def test_not_configured_names_only_options_that_exist(tmp_path, monkeypatch, env):
    monkeypatch.chdir(tmp_path)  # no .pyiceberg.yaml in the working directory either
    result = invoke(monkeypatch, env, "--catalog", "nowhere", "status")
    assert result.exit_code == 1
    line = one_error_line(result.output)
    assert "cannot load catalog 'nowhere'" in line and "PYICEBERG_CATALOG__NOWHERE__URI" in line
    assert "--uri" not in line
    assert_options_exist(line)


def test_not_configured_points_at_the_catalogs_that_are(tmp_path, lake, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke(monkeypatch, {"PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{lake}/catalog.db"}, "--catalog", "lkae", "status")
    line = one_error_line(result.output)
    assert "cannot load catalog 'lkae'" in line and "--catalog lake" in line
    assert_options_exist(line)


def test_lineage_of_a_missing_table_is_table_not_found(lake, monkeypatch):
    cc = ConsistentCatalog(sqlite_catalog(lake))
    with pytest.raises(TableNotFoundError, match="nope.x"):
        cc.lineage(["nope.x"])
    with pytest.raises(TableNotFoundError, match="demo.nope"):
        cc.lineage(["demo.words", "demo.nope"])
    assert cc.lineage(["demo.words"]).tables == frozenset({"demo.words"})
    result = invoke(monkeypatch, {"PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{lake}/catalog.db"}, "-c", "lake", "lineage", "nope.x")
    assert result.exit_code == 1
    line = one_error_line(result.output)
    assert "nope.x does not exist" in line and "root" not in line


# --- item 8: a catalog name that matches no row of the database --------------------------------------
def test_catalog_name_matching_no_rows_names_the_catalogs_the_database_holds(lake, monkeypatch):
    uri = f"sqlite:///{lake}/catalog.db"
    with pytest.raises(CatalogConfigError) as refused:
        ConsistentCatalog.load("dc", uri=uri)
    message = str(refused.value)
    assert f"catalog 'dc' has no tables in {lake / 'catalog.db'}" in message
    assert "catalogs named lake" in message and "--catalog lake" in message and "PYICEBERG_CATALOG__LAKE__" in message
    assert_options_exist(message)
    result = invoke(monkeypatch, {"PYICEBERG_CATALOG__DC__URI": uri}, "-c", "dc", "status")
    assert result.exit_code == 1
    assert "catalog 'dc' has no tables" in one_error_line(result.output)


def test_an_empty_catalog_and_a_second_catalog_in_one_database_still_load(tmp_path):
    empty = ConsistentCatalog.load("lake", create=True, uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    assert ConsistentCatalog.load("lake", uri=f"sqlite:///{tmp_path}/c.db").list_tables() == []  # empty: not a wrong name
    empty.catalog.create_namespace("demo")
    other = ConsistentCatalog.load("other", create=True, uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    other.catalog.create_namespace("sales")
    assert ConsistentCatalog.load("other", uri=f"sqlite:///{tmp_path}/c.db").catalog.list_namespaces() == [("sales",)]


# --- item 7: every message names only options that exist ---------------------------------------------
def _message_strings() -> list[tuple[str, int, str]]:
    """Every string constant in src/ outside docstrings (messages, their parts, help texts)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    docstrings.add(id(first.value))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found.append((str(path.relative_to(SRC)), node.lineno, node.value))
    return found


def test_every_message_in_src_names_only_options_the_cli_has():
    options = cli_options()
    wrong = [
        f"{path}:{line}: {option}"
        for path, line, text in _message_strings()
        for option in OPTION.findall(text)
        if option not in options and option not in FOREIGN_OPTIONS
    ]
    assert wrong == []
