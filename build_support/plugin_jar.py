"""Put the Spark plugin jar (jvm/spark-plugin) into the wheel: ``consistent_catalog/jars/spark-plugin.jar``.

setup.py installs ``BuildPyWithPluginJar`` as setuptools' ``build_py`` command. Why a ``build_py`` command
rather than an in-tree PEP 517 backend (``backend-path``) wrapping ``setuptools.build_meta``: the jar is a
build product like the copied ``.py`` files, so it is written straight into ``build_lib`` and setuptools
lists it in the wheel's RECORD itself. A wrapping backend would have to either write the jar into ``src/``
before delegating (a generated file in the source tree, which an editable install would then also see) or
rewrite the finished wheel's zip and RECORD. The backend stays stock ``setuptools.build_meta``, so
``pip wheel .``, ``pip install .``, ``python -m build`` and editable installs behave as setuptools documents.

The compile is ``scripts/build_jvm.sh spark-plugin`` (the same javac run and jar manifest as ``make setup``;
it reuses ``build/jvm`` when nothing changed). It needs a JDK and two jar sets that no build environment
installs: the Iceberg Spark runtime jar (PyPI ``snowpark-connect-deps-iceberg``) and Spark's jars (PyPI
``pyspark``). An isolated build environment has neither, so they are looked for, in this order:

1. ``$CONSISTENT_ICEBERG_JAR`` (the jar, or a directory holding it) and ``$CONSISTENT_SPARK_JARS`` (Spark's
   ``jars`` directory), where set;
2. the Python environment of ``$CONSISTENT_BUILD_PYTHON`` (an interpreter; ``make dist`` sets it to the
   project's ``.venv/bin/python``);
3. the checkout's ``.venv/bin/python`` (``pip wheel .`` in a checkout where ``make setup`` ran);
4. ``$VIRTUAL_ENV/bin/python`` (``python -m build`` from an activated venv);
5. the interpreter running this build, with its own site-packages: pip's isolated build runs the invoking
   interpreter with its site-packages hidden, so ``pip install --no-binary consistent-catalog
   'consistent-catalog[spark]'`` into a venv that has the ``[spark]`` extra already finds them.

Where no JDK or no classpath is found the wheel is built without the jar and the build says so on stderr
(pip shows it with ``-v``); ``consistent-catalog spark-conf`` then names the missing jar and the way out.
``CONSISTENT_REQUIRE_PLUGIN_JAR=1`` (set by ``make dist``) makes a missing jar fail the build instead, so a
release cannot ship without it. The build never installs system packages (``CONSISTENT_NO_APT=1``) and
skips the plugin's test and benchmark mains (``jvm/spark-plugin/src/test``, ``CONSISTENT_JVM_TESTS=0``): they
are never in the jar, and the sdist does not carry them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools.command.build_py import build_py
from setuptools.errors import SetupError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_JAR = Path("consistent_catalog") / "jars" / "spark-plugin.jar"
"""Where the jar goes inside the wheel; ``consistent_catalog.spark.session.PACKAGE_PLUGIN_JAR`` reads it there."""
MODULE = "spark-plugin"
REQUIRE_ENV = "CONSISTENT_REQUIRE_PLUGIN_JAR"
ICEBERG_ENV = "CONSISTENT_ICEBERG_JAR"
SPARK_JARS_ENV = "CONSISTENT_SPARK_JARS"
BUILD_PYTHON_ENV = "CONSISTENT_BUILD_PYTHON"

# Run in a candidate interpreter: where its environment keeps the two jar sets. find_spec imports nothing.
_PROBE = """
import importlib.util, json, pathlib
def jars(name, pattern):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        found = sorted((pathlib.Path(location) / "jars").glob(pattern))
        if found:
            return str(found[-1]) if pattern.startswith("iceberg") else str(found[-1].parent)
    return None
print(json.dumps({"iceberg": jars("snowpark_connect_deps_iceberg", "iceberg-spark-runtime-3.5_2.12-*.jar"),
                  "spark": jars("pyspark", "spark-core_*.jar")}))
"""


class PluginJarUnavailable(Exception):
    """The jar cannot be built here; the message says why and what would make it possible."""


class BuildPyWithPluginJar(build_py):
    """setuptools' ``build_py`` plus the compiled plugin jar in ``build_lib`` (so in the wheel)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install is a checkout: the package finds build/jvm/spark-plugin.jar there
        target = Path(self.build_lib) / PACKAGE_JAR
        try:
            built = build_plugin_jar()
        except PluginJarUnavailable as exc:
            if os.environ.get(REQUIRE_ENV) == "1":
                raise SetupError(f"the Spark plugin jar cannot be built and ${REQUIRE_ENV}=1: {exc}") from None
            target.unlink(missing_ok=True)  # a jar left by an earlier build in the same build_lib is stale
            _say(f"building the wheel WITHOUT the Spark plugin jar (no lake_consistent catalog): {exc}")
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)
        _say(f"included the Spark plugin jar as {PACKAGE_JAR.as_posix()}")

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        jar = Path(self.build_lib) / PACKAGE_JAR
        return [*outputs, str(jar)] if jar.is_file() else outputs


def build_plugin_jar(root: Path = ROOT) -> Path:
    """Compile and pack the plugin with ``scripts/build_jvm.sh``; returns ``build/jvm/spark-plugin.jar``."""
    script = root / "scripts" / "build_jvm.sh"
    if not script.is_file() or not (root / "jvm" / MODULE / "src" / "main" / "java").is_dir():
        raise PluginJarUnavailable(f"{root} has no scripts/build_jvm.sh or jvm/{MODULE} sources (an incomplete sdist?)")
    if shutil.which("bash") is None:
        raise PluginJarUnavailable("bash is not installed (scripts/build_jvm.sh compiles the jar)")
    env = {**os.environ, **classpath_env(root), "CONSISTENT_NO_APT": "1", "CONSISTENT_JVM_TESTS": "0"}
    result = subprocess.run(["bash", str(script), MODULE], cwd=root, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        reason = next((line for line in reversed(lines) if line.startswith("build_jvm:")), lines[-1] if lines else "")
        raise PluginJarUnavailable(f"scripts/build_jvm.sh failed: {reason.removeprefix('build_jvm: ')}"
                                   + ("\n" + result.stderr[-3000:] if "javac failed" in result.stderr else ""))
    jar = root / "build" / "jvm" / f"{MODULE}.jar"
    if not jar.is_file():
        raise PluginJarUnavailable(f"scripts/build_jvm.sh succeeded but wrote no {jar}")
    return jar


def classpath_env(root: Path = ROOT) -> dict[str, str]:
    """``CONSISTENT_ICEBERG_JAR`` and ``CONSISTENT_SPARK_JARS`` for build_jvm.sh, from the first source above."""
    have = {key: os.environ[key] for key in (ICEBERG_ENV, SPARK_JARS_ENV) if os.environ.get(key)}
    if len(have) == 2:
        return have
    explicit = os.environ.get(BUILD_PYTHON_ENV)
    if explicit and not os.access(explicit, os.X_OK):
        raise PluginJarUnavailable(f"${BUILD_PYTHON_ENV}={explicit} is not an executable Python")
    tried: list[str] = []
    for python in _candidate_pythons(root):
        found = _probe(python)
        if found.get("iceberg") and found.get("spark"):
            return {ICEBERG_ENV: found["iceberg"], SPARK_JARS_ENV: found["spark"], **have}
        tried.append(python)
        if explicit and python == explicit:  # an explicit choice is not silently replaced by a guess
            break
    raise PluginJarUnavailable(
        "no environment with pyspark==3.5.* and snowpark-connect-deps-iceberg==1.0.2 found (looked with "
        f"{', '.join(tried) or 'no interpreter'}); set ${BUILD_PYTHON_ENV}=/path/to/venv/bin/python, or "
        f"${ICEBERG_ENV} and ${SPARK_JARS_ENV}"
    )


def _candidate_pythons(root: Path) -> list[str]:
    candidates = [
        os.environ.get(BUILD_PYTHON_ENV, ""),
        str(root / ".venv" / "bin" / "python"),
        str(Path(os.environ["VIRTUAL_ENV"]) / "bin" / "python") if os.environ.get("VIRTUAL_ENV") else "",
        sys.executable,
    ]
    seen: list[str] = []
    for python in candidates:  # not resolved: a venv's python is a symlink whose target has no venv
        if python and python not in seen and os.access(python, os.X_OK):
            seen.append(python)
    return seen


def _probe(python: str) -> dict[str, str | None]:
    # Without pip's isolation variables, so the interpreter sees its own site-packages.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    try:
        result = subprocess.run([python, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=60)
        return json.loads(result.stdout) if result.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return {}


def _say(message: str) -> None:
    print(f"consistent-catalog build: {message}", file=sys.stderr, flush=True)
