"""Put the Spark plugin jar of every supported Spark line into the wheel:
``consistent_catalog/jars/lake-consistent-spark-<line>_<scala>.jar`` (the package picks the installed pyspark's).

setup.py installs ``BuildPyWithPluginJar`` as setuptools' ``build_py`` command. Why a ``build_py`` command
rather than an in-tree PEP 517 backend (``backend-path``) wrapping ``setuptools.build_meta``: the jars are
build products like the copied ``.py`` files, so they are written straight into ``build_lib`` and setuptools
lists them in the wheel's RECORD itself. A wrapping backend would have to either write the jars into ``src/``
before delegating (generated files in the source tree, which an editable install would then also see) or
rewrite the finished wheel's zip and RECORD. The backend stays stock ``setuptools.build_meta``, so
``pip wheel .``, ``pip install .``, ``python -m build`` and editable installs behave as setuptools documents.

The build is Maven's (``scripts/build_jvm.sh`` with the goal ``package``, the line modules only, no test
mains: the same reactor, poms and jar manifests as ``make setup``). It needs a JDK 17+ and Maven, and the
compile dependencies (Spark and Iceberg, provided scope) from Maven Central or an already filled ``~/.m2``;
nothing of Python's environment (no pyspark, no test venv). Where no JDK or no Maven is found (``$CONSISTENT_MVN``
names another Maven command) the wheel is built without the jars and the build says so on stderr (pip shows
it with ``-v``); ``consistent-catalog spark-conf`` then names the missing jar and the way out.
``CONSISTENT_REQUIRE_PLUGIN_JAR=1`` (set by ``make dist``) makes a missing jar fail the build instead, so a
release cannot ship without it. The build never installs system packages (``CONSISTENT_NO_APT=1``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools.command.build_py import build_py
from setuptools.errors import SetupError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_JARS = Path("consistent_catalog") / "jars"
"""Where the jars go inside the wheel; ``consistent_catalog.spark.session.PACKAGE_JARS`` reads them there."""
REQUIRE_ENV = "CONSISTENT_REQUIRE_PLUGIN_JAR"
MVN_ENV = "CONSISTENT_MVN"


class PluginJarUnavailable(Exception):
    """The jar cannot be built here; the message says why and what would make it possible."""


class BuildPyWithPluginJar(build_py):
    """setuptools' ``build_py`` plus the plugin jar of each Spark line in ``build_lib`` (so in the wheel)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install is a checkout: the package finds build/jvm/spark-<line>/ there
        target_dir = Path(self.build_lib) / PACKAGE_JARS
        try:
            built = build_plugin_jars()
        except PluginJarUnavailable as exc:
            if os.environ.get(REQUIRE_ENV) == "1":
                raise SetupError(f"the Spark plugin jars cannot be built and ${REQUIRE_ENV}=1: {exc}") from None
            shutil.rmtree(target_dir, ignore_errors=True)  # jars left by an earlier build in the same build_lib are stale
            _say(f"building the wheel WITHOUT the Spark plugin jar (no lake_consistent catalog): {exc}")
            return
        target_dir.mkdir(parents=True, exist_ok=True)
        for name, jar in built.items():
            shutil.copyfile(jar, target_dir / name)
        _say(f"included the Spark plugin jars {', '.join(sorted(built))} in {PACKAGE_JARS.as_posix()}")

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        jars = sorted((Path(self.build_lib) / PACKAGE_JARS).glob("*.jar"))
        return [*outputs, *map(str, jars)]


def line_modules(root: Path = ROOT) -> list[str]:
    """The reactor's Spark line modules: ``jvm/spark-<line>`` (``jvm/spark-plugin`` holds the shared sources)."""
    return sorted(p.parent.name for p in (root / "jvm").glob("spark-[0-9]*/pom.xml"))


def build_plugin_jars(root: Path = ROOT) -> dict[str, Path]:
    """Package every line module with Maven; returns ``{name in the wheel: built jar}``."""
    script = root / "scripts" / "build_jvm.sh"
    modules = line_modules(root)
    if not script.is_file() or not (root / "jvm" / "pom.xml").is_file() or not modules:
        raise PluginJarUnavailable(f"{root} has no scripts/build_jvm.sh or jvm/ reactor (an incomplete sdist?)")
    if shutil.which("bash") is None:
        raise PluginJarUnavailable("bash is not installed (scripts/build_jvm.sh runs Maven)")
    mvn = os.environ.get(MVN_ENV, "mvn")
    missing = [tool for tool in (mvn, "javac") if shutil.which(tool) is None]
    if missing:
        raise PluginJarUnavailable(f"no {' and no '.join(missing)} on the PATH: install a JDK 17+ and Maven "
                                   "(apt-get install openjdk-17-jdk-headless maven), or set $" + MVN_ENV)
    env = {**os.environ, "CONSISTENT_NO_APT": "1", "CONSISTENT_JVM_TESTS": "0", "CONSISTENT_MAVEN_GOAL": "package"}
    result = subprocess.run(["bash", str(script), *modules], cwd=root, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        reason = next((line for line in reversed(lines) if line.startswith("build_jvm:")), lines[-1] if lines else "")
        raise PluginJarUnavailable(f"scripts/build_jvm.sh failed: {reason.removeprefix('build_jvm: ')}\n"
                                   + result.stderr[-3000:])
    built: dict[str, Path] = {}
    for module in modules:
        jars = [j for j in (root / "build" / "jvm" / module).glob("lake-consistent-spark-*.jar")
                if not j.name.endswith("-tests.jar")]
        if len(jars) != 1:
            raise PluginJarUnavailable(f"scripts/build_jvm.sh succeeded but build/jvm/{module} holds {jars}")
        artifact = jars[0].name.rsplit("-", 1)[0]  # lake-consistent-spark-3.5_2.12(-0.1.0.jar)
        built[f"{artifact}.jar"] = jars[0]
    return built


def _say(message: str) -> None:
    print(f"consistent-catalog build: {message}", file=sys.stderr, flush=True)
