"""The Spark lines the consistent catalog supports, and which one the installed pyspark is.

Each line pairs a Spark minor version (and its Scala) with the newest Iceberg release whose
``iceberg-spark-runtime-<line>_<scala>`` supports it; the JVM reactor (``jvm/``) builds the plugin jar of
each line against exactly these (``jvm/spark-<line>/pom.xml``; the jar's manifest names them). Python picks
the line from the installed pyspark: its plugin jar, its Iceberg runtime coordinates. Imports nothing of
pyspark (``importlib.metadata`` reads the installed version).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

from consistent_catalog.exceptions import CatalogConfigError

GROUP_ID = "io.consistentcatalog"
"""The Maven groupId of the plugin jars (``mvn install`` in ``jvm/`` puts them into ~/.m2)."""
PROJECT_VERSION = "0.1.0"
SPARK_LINE_ENV = "CONSISTENT_SPARK_LINE"
"""Overrides the line read from the installed pyspark (e.g. a stock ``spark-sql`` of another line)."""


@dataclass(frozen=True)
class SparkLine:
    """One supported Spark line: ``3.5`` with Scala ``2.12`` and Iceberg ``1.10.2``."""

    line: str
    scala: str
    iceberg: str
    aws_bundle: str = ""
    """The ``iceberg-aws-bundle`` version (the AWS SDK v2 Iceberg's GlueCatalog calls): the line's Iceberg when
    empty; a line whose Iceberg version the registry does not serve names the nearest one it does. The line's pom
    sets the same (``aws-bundle.version``; ``tests/unit/test_spark_lines.py`` compares them)."""

    @property
    def suffix(self) -> str:
        """``3.5_2.12``: how Iceberg and the plugin name their per-line artifacts."""
        return f"{self.line}_{self.scala}"

    @property
    def iceberg_runtime_artifact(self) -> str:
        return f"iceberg-spark-runtime-{self.suffix}"

    @property
    def iceberg_runtime_package(self) -> str:
        """``org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2`` (``spark.jars.packages``)."""
        return f"org.apache.iceberg:{self.iceberg_runtime_artifact}:{self.iceberg}"

    @property
    def aws_bundle_version(self) -> str:
        return self.aws_bundle or self.iceberg

    @property
    def aws_bundle_package(self) -> str:
        """``org.apache.iceberg:iceberg-aws-bundle:1.10.1``: what ``spark.jars.packages`` asks for Glue."""
        return f"org.apache.iceberg:iceberg-aws-bundle:{self.aws_bundle_version}"

    @property
    def plugin_artifact(self) -> str:
        """``lake-consistent-spark-3.5_2.12``: the plugin's artifactId and its file name in the wheel."""
        return f"lake-consistent-spark-{self.suffix}"

    @property
    def plugin_package(self) -> str:
        """The plugin's Maven coordinates, resolvable after ``mvn install`` (``--packages``)."""
        return f"{GROUP_ID}:{self.plugin_artifact}:{PROJECT_VERSION}"

    @property
    def build_folder(self) -> str:
        """The checkout's build folder of this line, relative to the checkout: ``build/jvm/spark-3.5``."""
        return f"build/jvm/spark-{self.line}"


SPARK_LINES: dict[str, SparkLine] = {
    line.line: line
    for line in (
        # the registry serves no iceberg-aws-bundle 1.10.2 (checked 2026-11-29): 1.10.1's, the same AWS SDK
        SparkLine("3.5", "2.12", "1.10.2", aws_bundle="1.10.1"),
        SparkLine("4.0", "2.13", "1.11.0"),  # Iceberg 1.12 has no Spark 4.0 runtime
        SparkLine("4.1", "2.13", "1.12.0"),  # Iceberg's 4.1 runtimes start at 1.11.0
    )
}
"""Every supported line, oldest first (keep in step with jvm/pom.xml's modules)."""
DEFAULT_LINE = "4.1"
"""What ``make setup`` installs and the README shows."""


def supported_lines_text() -> str:
    return ", ".join(f"Spark {s.line} (Scala {s.scala}, Iceberg {s.iceberg})" for s in SPARK_LINES.values())


def line_of_version(spark_version: str) -> SparkLine:
    """The line of a Spark/pyspark version (``3.5.9`` -> 3.5); unsupported: one line naming the supported ones."""
    parts = spark_version.strip().split(".")
    key = ".".join(parts[:2])
    if key not in SPARK_LINES:
        raise CatalogConfigError(
            f"Spark {spark_version} is not a supported line; supported: {supported_lines_text()} "
            "(install a matching pyspark, e.g. pip install 'pyspark==" + f"{DEFAULT_LINE}.*')"
        )
    return SPARK_LINES[key]


def _spark_jars_dir() -> Path | None:
    """Where the Spark that pyspark runs keeps its jars: ``$SPARK_HOME/jars``, else the pyspark package's."""
    home = os.environ.get("SPARK_HOME", "").strip()
    if home:
        return Path(home) / "jars"
    spec = importlib.util.find_spec("pyspark")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def installed_scala_version() -> str | None:
    """The Scala of the Spark pyspark runs (``2.12`` from ``spark-core_2.12-3.5.9.jar``); None when unknown."""
    folder = _spark_jars_dir()
    if folder is None or not folder.is_dir():
        return None
    for jar in folder.glob("spark-core_*.jar"):
        found = re.match(r"spark-core_(\d+\.\d+)-", jar.name)
        if found:
            return found.group(1)
    return None


def check_scala(line: SparkLine, scala: str | None) -> SparkLine:
    """``line`` when ``scala`` (the running Spark's) is its Scala or unknown; else one line naming the supported."""
    if scala is not None and scala != line.scala:
        raise CatalogConfigError(
            f"Spark {line.line} built for Scala {scala} is not a supported combination (the plugin jar of Spark "
            f"{line.line} is built for Scala {line.scala}); supported: {supported_lines_text()}"
        )
    return line


def installed_pyspark_version() -> str | None:
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return None


def current_line() -> SparkLine:
    """The line to serve: ``$CONSISTENT_SPARK_LINE`` when set, else the installed pyspark's, else the default."""
    explicit = os.environ.get(SPARK_LINE_ENV, "").strip()
    if explicit:
        return line_of_version(explicit)
    version = installed_pyspark_version()
    if not version:
        return SPARK_LINES[DEFAULT_LINE]
    return check_scala(line_of_version(version), installed_scala_version())
