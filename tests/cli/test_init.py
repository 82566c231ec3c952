"""``consistent-catalog init``: one command configures the CLI, Python and Spark for one lake (issue 34, item 1).

Each test runs the installed command in a directory of its own with a home of its own (so the
``~/.pyiceberg.yaml`` pyiceberg reads is the test's), then checks the files as their readers read them:
the YAML with strictyaml (what pyiceberg reads it with), the Spark file with the properties parser, the
catalog with a plain pyiceberg ``SqlCatalog``. The wheel installed outside a checkout, with stock
``spark-sql``, is tests/integration/test_wheel.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import strictyaml
from pyiceberg.catalog.sql import SqlCatalog

from consistent_catalog.spark.session import parse_spark_defaults
from tests.harness.lake import WORDS_SCHEMA

EXE = str(Path(sys.executable).parent / "consistent-catalog")


@pytest.fixture
def place(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYICEBERG_")}
    env["HOME"] = str(home)
    return work, env


def run(work: Path, env: dict[str, str], *args: str, code: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([EXE, *args], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_init_sets_up_a_lake_the_cli_python_and_spark_all_find(place: tuple[Path, dict[str, str]]) -> None:
    work, env = place
    out = run(work, env, "init").stdout
    lake = work / "lake"
    yaml_path = Path(env["HOME"]) / ".pyiceberg.yaml"
    entry = strictyaml.load(yaml_path.read_text(encoding="utf-8")).data["catalog"]["lake"]
    assert entry == {"uri": f"sqlite:///{lake}/catalog.db", "warehouse": f"file://{lake}/warehouse"}
    conf = parse_spark_defaults((lake / "spark-defaults.conf").read_text(encoding="utf-8"))
    for catalog in ("lake", "lake_consistent"):
        assert conf[f"spark.sql.catalog.{catalog}.uri"] == f"jdbc:sqlite:{lake}/catalog.db"
        assert conf[f"spark.sql.catalog.{catalog}.warehouse"] == f"file://{lake}/warehouse"
    assert str(yaml_path) in out and str(lake / "spark-defaults.conf") in out  # whole paths, never cut

    # a table made with plain pyiceberg is what the CLI then sees, with nothing else configured
    independent = SqlCatalog("lake", uri=entry["uri"], warehouse=entry["warehouse"])
    independent.create_namespace("shop")
    independent.create_table("shop.words", schema=WORDS_SCHEMA)
    independent.engine.dispose()
    status = json.loads(run(work, env, "status", "-o", "json").stdout)
    assert "shop.words" in json.dumps(status)

    # again: nothing changes
    before = yaml_path.read_text(encoding="utf-8")
    again = json.loads(run(work, env, "init", "-o", "json").stdout)
    assert again["pyiceberg_entry"] == "unchanged" and yaml_path.read_text(encoding="utf-8") == before


def test_init_keeps_the_yaml_it_edits_and_refuses_to_repoint_a_name(place: tuple[Path, dict[str, str]]) -> None:
    work, env = place
    yaml_path = Path(env["HOME"]) / ".pyiceberg.yaml"
    yaml_path.write_text("# my catalogs\ncatalog:\n    prod:\n        uri: http://rest:8181  # the REST one\n", encoding="utf-8")
    run(work, env, "init", "--dir", "first")
    text = yaml_path.read_text(encoding="utf-8")
    assert "# my catalogs" in text and "# the REST one" in text
    catalogs = strictyaml.load(text).data["catalog"]
    assert catalogs["prod"] == {"uri": "http://rest:8181"}
    assert catalogs["lake"]["uri"] == f"sqlite:///{work}/first/catalog.db"

    refused = run(work, env, "init", "--dir", "second", code=1)
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: catalog 'lake' in ") and "--name" in line and "--force" in line
    assert strictyaml.load(yaml_path.read_text(encoding="utf-8")).data["catalog"]["lake"] == catalogs["lake"]

    run(work, env, "init", "--dir", "second", "--force")
    catalogs = strictyaml.load(yaml_path.read_text(encoding="utf-8")).data["catalog"]
    assert catalogs["lake"]["uri"] == f"sqlite:///{work}/second/catalog.db" and catalogs["prod"] == {"uri": "http://rest:8181"}
    # two catalogs configured: the CLI needs --catalog (pyiceberg's default-catalog is not set)
    run(work, env, "--catalog", "lake", "status")


def test_init_print_writes_no_yaml_and_prints_the_exact_entry(place: tuple[Path, dict[str, str]]) -> None:
    work, env = place
    out = run(work, env, "init", "--name", "analytics", "--print").stdout
    assert not (Path(env["HOME"]) / ".pyiceberg.yaml").exists()
    shown = "\n".join(line[4:] for line in out.splitlines() if line.startswith("    "))
    assert strictyaml.load(shown).data == {"catalog": {"analytics": {
        "uri": f"sqlite:///{work}/lake/catalog.db", "warehouse": f"file://{work}/lake/warehouse"}}}
    env["PYICEBERG_CATALOG__ANALYTICS__URI"] = f"sqlite:///{work}/lake/catalog.db"
    env["PYICEBERG_CATALOG__ANALYTICS__WAREHOUSE"] = f"file://{work}/lake/warehouse"
    run(work, env, "--catalog", "analytics", "status")


def test_init_with_a_catalog_uri_keeps_the_warehouse_in_the_lake_directory(place: tuple[Path, dict[str, str]]) -> None:
    work, env = place
    done = json.loads(run(work, env, "init", "--dir", "data", "--catalog-uri", f"sqlite:///{work}/shared.db",
                          "--print", "-o", "json").stdout)
    assert (done["uri"], done["warehouse"]) == (f"sqlite:///{work}/shared.db", f"file://{work}/data/warehouse")
    conf = parse_spark_defaults((work / "data" / "spark-defaults.conf").read_text(encoding="utf-8"))
    assert conf["spark.sql.catalog.lake.warehouse"] == f"file://{work}/data/warehouse"
    refused = run(work, env, "init", "--catalog-uri", "http://127.0.0.1:1", code=1)
    assert refused.stderr.strip().splitlines() == [
        "error: a REST catalog (http://127.0.0.1:1) needs --warehouse: the catalog name or location its server expects"]

