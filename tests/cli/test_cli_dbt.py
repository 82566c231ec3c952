"""``consistent-catalog dbt-path`` and ``spark-conf --dbt-profile`` (issue 33): the dbt package and its profile."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

BIN = Path(sys.executable).parent


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "consistent-catalog"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=True)


def test_dbt_path_is_the_installed_dbt_package(tmp_path: Path) -> None:
    path = Path(_cli("dbt-path", cwd=tmp_path).stdout.strip())
    project = yaml.safe_load((path / "dbt_project.yml").read_text(encoding="utf-8"))
    assert project["name"] == "consistent_catalog" and project["macro-paths"] == ["macros"]
    macros = {p.name for p in (path / "macros").glob("*.sql")}
    assert {"epoch.sql", "seed.sql", "freshness.sql"} <= macros


def test_the_dbt_profile_holds_every_spark_setting_and_the_consistent_default_catalog(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/catalog.db"
    target = tmp_path / "profiles" / "profiles.yml"
    said = _cli("spark-conf", "--catalog-uri", uri, "--warehouse", str(tmp_path / "wh"), "--dbt-profile", "shop",
                "--dbt-schema", "marts", "--write", str(target), cwd=tmp_path).stdout
    assert said.startswith(f"wrote {target} (dbt profile shop, schema marts)")
    output = yaml.safe_load(target.read_text(encoding="utf-8"))["shop"]["outputs"]["lake_consistent"]
    assert {k: output[k] for k in ("type", "method", "schema", "threads")} == {
        "type": "spark", "method": "session", "schema": "marts", "threads": 1}
    params = output["server_side_parameters"]
    assert params["spark.sql.defaultCatalog"] == "lake_consistent"
    assert params["spark.sql.catalog.lake_consistent.plain-catalog"] == "lake"
    assert params["spark.sql.catalog.lake.uri"] == f"jdbc:sqlite:{tmp_path}/catalog.db"
    assert "spark.jars" in params and all(isinstance(v, str) for v in params.values())
    assert (tmp_path / "catalog.db").is_file()  # created with pyiceberg, as spark-conf does (the SQLite lock trap)
