"""The Spark lines (consistent_catalog.spark.lines): which line an installed Spark is, and one line naming the
supported ones for a combination no plugin jar serves (issue 30: pyspark 4.2+, a Scala mismatch).

The expected pairs are read from the reactor's line modules (jvm/spark-<line>/pom.xml), not from lines.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from consistent_catalog.exceptions import CatalogConfigError
from consistent_catalog.spark import lines

ROOT = Path(__file__).resolve().parents[2]


def _pom_lines() -> dict[str, tuple[str, str]]:
    found = {}
    for pom in (ROOT / "jvm").glob("spark-[0-9]*/pom.xml"):
        text = pom.read_text(encoding="utf-8")
        values = {key: re.search(f"<{key}>([^<]+)</{key}>", text).group(1)  # type: ignore[union-attr]
                  for key in ("spark.line", "scala.binary.version", "iceberg.version")}
        found[values["spark.line"]] = (values["scala.binary.version"], values["iceberg.version"])
    return found


def test_every_line_module_is_a_supported_line_with_its_scala_and_iceberg() -> None:
    poms = _pom_lines()
    assert {"3.5", "4.0", "4.1"} <= set(poms)
    assert {line: (s.scala, s.iceberg) for line, s in lines.SPARK_LINES.items()} == poms


@pytest.mark.parametrize("version, line", [("3.5.9", "3.5"), ("4.0.4", "4.0"), ("4.1.3", "4.1"), ("4.1.4", "4.1")])
def test_a_pyspark_version_picks_its_line(version: str, line: str) -> None:
    picked = lines.line_of_version(version)
    assert picked.line == line
    assert picked.plugin_artifact == f"lake-consistent-spark-{line}_{_pom_lines()[line][0]}"


@pytest.mark.parametrize("version", ["4.2.0", "4.3.0", "3.4.4"])
def test_an_unsupported_spark_is_one_line_naming_the_supported_lines(version: str) -> None:
    with pytest.raises(CatalogConfigError) as raised:
        lines.line_of_version(version)
    message = str(raised.value)
    assert "\n" not in message and f"Spark {version} is not a supported line" in message
    assert all(f"Spark {line} (Scala {scala}, Iceberg {iceberg})" in message
               for line, (scala, iceberg) in _pom_lines().items())


def test_a_scala_mismatch_is_one_line_naming_the_supported_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Spark 3.5 built for Scala 2.13 (SPARK_HOME's jars) cannot load the 3.5 plugin jar (Scala 2.12)."""
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "spark-core_2.13-3.5.9.jar").write_bytes(b"")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    monkeypatch.delenv(lines.SPARK_LINE_ENV, raising=False)
    assert lines.installed_scala_version() == "2.13"
    with pytest.raises(CatalogConfigError) as raised:
        lines.check_scala(lines.line_of_version("3.5.9"), lines.installed_scala_version())
    message = str(raised.value)
    assert "\n" not in message and "Spark 3.5 built for Scala 2.13 is not a supported combination" in message
    assert "Spark 4.1 (Scala 2.13, Iceberg" in message
    # the same Scala as the line's: served
    assert lines.check_scala(lines.line_of_version("4.1.3"), "2.13").line == "4.1"
