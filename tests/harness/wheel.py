"""The product as a user installs it, built once per test session (``tests/conftest.py``'s ``dists``, ``wheel_venv``,
``full_venv`` and ``dbt_venv`` fixtures): the sdist and the wheel with every plugin jar built by ``scripts/dist.sh``
(``make dist``) from a clean clone of the committed tree, a jar-less wheel, and fresh venvs outside the repository
with them pip-installed (the extras from pip's cache).

``tests/integration/test_wheel.py`` checks the artefacts and the installed package; ``tests/spark/test_dbt_project.py``
runs its dbt project with nothing but the ``dbt`` and ``consistent-catalog`` commands of ``dbt_venv`` (the full wheel
with its ``[spark,dbt]`` extras). Building the wheel takes minutes (Maven, every Spark line): sharing it is the point.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.harness.jvm_cds import SmallDrivers

ROOT = Path(__file__).resolve().parents[2]
#: The extras README's dbt section installs the wheel with (``pip install 'consistent-catalog[spark,dbt]'``).
DBT_EXTRAS = "[spark,dbt]"
#: What a test's environment must not pass on: where the build or the package would find jars or Python.
LEAKY = ("PYTHONPATH", "VIRTUAL_ENV", "CONSISTENT_PLUGIN_JAR", "CONSISTENT_MVN", "CONSISTENT_ICEBERG_JAR",
         "CONSISTENT_JDBC_JARS", "CONSISTENT_SPARK_LINE", "CONSISTENT_REQUIRE_PLUGIN_JAR", "PYSPARK_PYTHON", "SPARK_HOME")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment less ``LEAKY`` and pyiceberg's settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in LEAKY and not k.startswith("PYICEBERG_")}
    env.update(extra)
    return env


def run(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float, what: str) -> subprocess.CompletedProcess:
    """``args``, which must succeed; its time printed (``pytest -s``)."""
    started = time.monotonic()
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
    print(f"[wheel] {what}: {time.monotonic() - started:.1f} s")
    assert result.returncode == 0, f"{what} exited {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result


@dataclass(frozen=True)
class Dists:
    full_wheel: Path
    sdist: Path
    bare_wheel: Path
    dist_output: str  # scripts/dist.sh's stdout
    bare_log: str  # what the jar-less build printed


@dataclass(frozen=True)
class Venv:
    bin: Path
    elsewhere: Path  # a working directory outside the repository
    drivers: SmallDrivers | None = None  # the suite's small drivers for this venv's pyspark (tests/harness/jvm_cds.py)

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment with this venv first on ``PATH`` and as Spark's Python."""
        small = {"SPARK_SUBMIT_OPTS": self.drivers.options()} if self.drivers else {}
        return clean_env(PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(self.bin.parent),
                         PYSPARK_PYTHON=str(self.bin / "python"), **small, **extra)


def build_dists(tmp: Path) -> Dists:
    """From a clean clone of the committed tree (what CI checks out: commit before running), ``scripts/dist.sh``'s
    sdist and wheel with the jars, and ``python -m build --wheel`` with no Maven to be found: a wheel without them."""
    clone = tmp / "clone"
    run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], cwd=tmp, env=clean_env(), timeout=120,
        what="git clone")
    built = run(["bash", "scripts/dist.sh"], cwd=clone, env=clean_env(PYTHON=sys.executable), timeout=600,
                what="scripts/dist.sh (sdist + wheel with the jar + twine check)")
    (full,) = (clone / "dist").glob("*.whl")
    (sdist,) = (clone / "dist").glob("*.tar.gz")
    bare = run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp / "bare"), str(clone)], cwd=tmp,
               env=clean_env(CONSISTENT_MVN=str(tmp / "no-maven" / "mvn")), timeout=600,
               what="python -m build --wheel without Maven")
    (bare_wheel,) = (tmp / "bare").glob("*.whl")
    return Dists(full, sdist, bare_wheel, built.stdout, bare.stdout + bare.stderr)


def fresh_venv(tmp: Path, requirements: list[str], what: str) -> Venv:
    """A venv in ``tmp`` (no system site-packages) with ``requirements`` pip-installed, and a directory outside the repo."""
    base = Path(getattr(sys, "_base_executable", sys.executable))
    run([str(base), "-m", "venv", str(tmp / "venv")], cwd=tmp, env=clean_env(), timeout=120, what="python -m venv")
    bin_dir = tmp / "venv" / "bin"
    pip_install(bin_dir, requirements, cwd=tmp, what=what)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return Venv(bin_dir, elsewhere)


def pip_install(bin_dir: Path, requirements: list[str], *, cwd: Path, what: str, options: tuple[str, ...] = ()) -> None:
    run([str(bin_dir / "python"), "-m", "pip", "install", "-q", *options, *requirements], cwd=cwd, env=clean_env(),
        timeout=600, what=f"pip install {what}")


class ProductVenv:
    """One fresh venv for the session holding either wheel: the jar-less one with its ``[spark]`` extra first, the
    full one put in its place (``--no-deps``: the same dependencies) when a test asks for it, and back if a later test
    asks for the jar-less one again (only an unusual test order pays for that); ``[dbt]`` added once on request."""

    def __init__(self, dists: Dists, tmp: Path) -> None:
        self.dists = dists
        venv = fresh_venv(tmp, [f"{dists.bare_wheel}[spark]"], "<jar-less wheel>[spark] (pyspark from pip's cache)")
        # its pyspark is another install than the session's: an archive of its own (a fifth of a driver's start)
        if os.environ.get("CONSISTENT_TEST_SMALL_JVM") != "0":
            venv = dataclasses.replace(venv, drivers=SmallDrivers(ROOT / "build" / "cds", str(venv.bin / "python")))
        self.venv = venv
        self.holds = "bare"
        self.dbt = False

    def holding(self, which: str) -> Venv:
        """The venv with the ``bare`` or the ``full`` wheel installed."""
        if which != self.holds:
            wheel = self.dists.full_wheel if which == "full" else self.dists.bare_wheel
            pip_install(self.venv.bin, [str(wheel)], cwd=self.venv.elsewhere, what=f"<{which} wheel>",
                        options=("--no-deps", "--force-reinstall"))
            self.holds = which
        return self.venv

    def with_dbt(self) -> Venv:
        """The venv with the full wheel and its ``[spark,dbt]`` extras, as README's dbt section installs it."""
        venv = self.holding("full")
        if not self.dbt:
            pip_install(venv.bin, [f"{self.dists.full_wheel}{DBT_EXTRAS}"], cwd=venv.elsewhere,
                        what=f"<full wheel>{DBT_EXTRAS} (dbt-core, dbt-spark from pip's cache)")
            self.dbt = True
        return venv
