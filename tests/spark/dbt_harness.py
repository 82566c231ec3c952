"""What the dbt tests share (``test_dbt_project.py``, ``test_dbt_pipeline.py``): dbt found next to this Python (or in
another venv's ``bin_dir``: the fresh venv of the pip-installed wheel), an
environment that points nothing elsewhere, dbt run as a user runs it (a process group of its own, killed whole on a
timeout) with its ``run_results.json`` statuses and the catalog plugin's lines, a project's package installed once
with ``dbt deps`` and reused by its copies, and rows compared independently of their order and number types.

Each dbt invocation starts a Spark JVM in its process (12-60 s on a busy 2-core machine): the tests keep them few.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from tests.harness.wheel import LEAKY

BIN = Path(sys.executable).parent
DBT_TIMEOUT = 300
NOT_COPIED = ("target", "logs", "dbt_packages")


def require_dbt() -> None:
    """Skip (fail on CI) where the [dbt] extra is not installed next to this Python."""
    if not (BIN / "dbt").is_file():
        message = f"no dbt next to {sys.executable}: pip install -e '.[dev]' (make setup) installs the [dbt] extra"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def environment(catalog_uri: str, warehouse: str, bin_dir: Path = BIN) -> dict[str, str]:
    """This process's environment less what would point dbt, Spark or pyiceberg elsewhere (and, for another venv's
    ``bin_dir``, less what would find this checkout's jars or Python); ``bin_dir`` first on ``PATH``, its Python
    Spark's; the lake as pyiceberg's catalog ``lake``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DBT_", "PYICEBERG_")) and k not in ("SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS")
           and (bin_dir == BIN or k not in LEAKY)}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
               PYSPARK_PYTHON=sys.executable if bin_dir == BIN else str(bin_dir / "python"),
               PYICEBERG_CATALOG__LAKE__URI=catalog_uri, PYICEBERG_CATALOG__LAKE__WAREHOUSE=warehouse)
    if bin_dir != BIN:
        env["VIRTUAL_ENV"] = str(bin_dir.parent)
    return env


@dataclass(frozen=True)
class DbtRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    statuses: dict[str, str]  # node -> run_results.json status (success, error, skipped, pass)

    @property
    def reports(self) -> list[str]:
        """The catalog plugin's lines on Spark's (dbt's) stderr, one per write statement."""
        return [line for line in self.stderr.splitlines() if line.startswith("[lake_consistent] ")]

    def report(self, job: str) -> str:
        """The one epoch line of ``job`` (its revision announcement aside)."""
        found = [line for line in self.reports if line.startswith(f"[lake_consistent] {job}: ")
                 and "recomputing it at barrier" not in line]
        assert len(found) == 1, (job, self.describe())
        return found[0]

    def describe(self) -> str:
        return (f"dbt exit {self.returncode} after {self.seconds:.0f} s, {self.statuses}\n--- stdout ---\n"
                f"{self.stdout[-5000:]}\n--- stderr (plugin lines, errors) ---\n" + "\n".join(
                    line for line in self.stderr.splitlines()[-400:] if " WARN " not in line)[-4000:])


def run(args: list[str], *, cwd: Path, env: dict[str, str], project: Path) -> DbtRun:
    """``args`` (dbt, or a shell running it) in ``cwd``; ``project``'s run_results.json read after."""
    results = project / "target" / "run_results.json"
    results.unlink(missing_ok=True)
    started = time.monotonic()
    process = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=DBT_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{args} did not finish within {DBT_TIMEOUT} s\n{stdout[-3000:]}\n{stderr[-3000:]}")
    statuses = ({r["unique_id"].split(".")[-1]: r["status"] for r in json.loads(results.read_text())["results"]}
                if results.is_file() else {})
    return DbtRun(process.returncode, stdout, stderr, time.monotonic() - started, statuses)


def dbt(project: Path, *args: str, profiles: Path, cwd: Path, env: dict[str, str], bin_dir: Path = BIN) -> DbtRun:
    return run([str(bin_dir / "dbt"), *args, "--project-dir", str(project), "--profiles-dir", str(profiles)],
               cwd=cwd, env=env, project=project)


def package_path(env: dict[str, str], bin_dir: Path = BIN) -> str:
    """The dbt package the installed product ships, as ``consistent-catalog dbt-path`` prints it."""
    path = subprocess.run([str(bin_dir / "consistent-catalog"), "dbt-path"], check=True, capture_output=True, text=True,
                          timeout=60, env=env).stdout.strip()
    assert (Path(path) / "dbt_project.yml").is_file(), path
    return path


def copy_project(source: Path, to: Path, *, env: dict[str, str], installed: Path | None = None,
                 bin_dir: Path = BIN) -> Path:
    """A copy of the dbt project ``source`` at ``to`` whose packages.yml names the product's package; installed with
    ``dbt deps`` (no Spark), or, given a copy ``installed`` that ran it, with that copy's dbt_packages (the same
    package, a link to the same path)."""
    shutil.copytree(source, to, ignore=shutil.ignore_patterns(*NOT_COPIED))
    (to / "packages.yml").write_text(f"packages:\n  - local: {package_path(env, bin_dir)}\n", encoding="utf-8")
    if installed is not None:
        shutil.copytree(installed / "dbt_packages", to / "dbt_packages", symlinks=True)
        if (installed / "package-lock.yml").is_file():
            shutil.copy2(installed / "package-lock.yml", to / "package-lock.yml")
        return to
    deps = dbt(to, "deps", profiles=to, cwd=to.parent, env=env, bin_dir=bin_dir)
    assert deps.returncode == 0, deps.describe()
    return to


def resolve(env: dict[str, str], tables: tuple[str, ...], bin_dir: Path = BIN) -> dict:
    """``consistent-catalog resolve`` of ``tables``, as its JSON says."""
    answer = subprocess.run([str(bin_dir / "consistent-catalog"), "-c", "lake", "-o", "json", "resolve", *tables],
                            env=env, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(answer.stdout)


def _normal(value: object) -> object:
    return round(float(value), 2) if isinstance(value, (float, Decimal)) else value


def sorted_rows(table: pa.Table, columns: list[str]) -> list[tuple]:
    """``table``'s rows as tuples of ``columns``, decimals and floats to 2 places, in a fixed order."""
    return sorted((tuple(_normal(row[c]) for c in columns) for row in table.select(columns).to_pylist()), key=repr)
