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


def _pom_aws_bundles() -> dict[str, str]:
    """Each line's iceberg-aws-bundle version as Maven resolves it: the line pom's aws-bundle.version, else the shared
    pom's default (the line's iceberg.version)."""
    shared = (ROOT / "jvm" / "spark-plugin" / "pom.xml").read_text(encoding="utf-8")
    default = re.search(r"<aws-bundle.version>([^<]+)</aws-bundle.version>", shared).group(1)  # type: ignore[union-attr]
    found = {}
    for pom in (ROOT / "jvm").glob("spark-[0-9]*/pom.xml"):
        text = pom.read_text(encoding="utf-8")
        own = re.search(r"<aws-bundle.version>([^<]+)</aws-bundle.version>", text)
        value = own.group(1) if own else default
        line, iceberg = (re.search(f"<{key}>([^<]+)</{key}>", text).group(1)  # type: ignore[union-attr]
                         for key in ("spark.line", "iceberg.version"))
        found[line] = value.replace("${iceberg.version}", iceberg)
    return found


def test_each_line_asks_for_the_aws_bundle_its_build_copies() -> None:
    """One iceberg-aws-bundle version per line: the build copies (pom) what spark_conf's fallback asks Maven for."""
    poms = _pom_aws_bundles()
    assert poms["3.5"] == "1.10.1"  # 1.10.2 is not served: the fallback must not ask for it
    assert {line: s.aws_bundle_version for line, s in lines.SPARK_LINES.items()} == poms
    assert {line: s.aws_bundle_package for line, s in lines.SPARK_LINES.items()} == {
        line: f"org.apache.iceberg:iceberg-aws-bundle:{version}" for line, version in poms.items()}


@pytest.mark.parametrize("line", ["3.5", "4.0", "4.1"])
def test_glue_spark_conf_takes_the_lines_built_bundle_else_asks_for_its_version(
        line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from consistent_catalog.spark import session

    monkeypatch.setenv(lines.SPARK_LINE_ENV, line)
    monkeypatch.setattr(session, "checkout_line_dir", lambda line=None: tmp_path)  # a checkout that built nothing
    uri = "arn:aws:glue:eu-west-1:123456789012?endpoint=http://127.0.0.1:1"
    version = _pom_aws_bundles()[line]
    glue = tmp_path / "lib" / "glue"
    glue.mkdir(parents=True)
    (glue / "iceberg-aws-bundle-0.0.1.jar").write_bytes(b"")  # another version left there: not this line's
    conf = session.spark_conf(uri, "file:///tmp/wh", consistent=False)
    assert f"org.apache.iceberg:iceberg-aws-bundle:{version}" in conf.get("spark.jars.packages", "").split(",")
    assert "iceberg-aws-bundle-0.0.1" not in conf.get("spark.jars", "")
    (glue / f"iceberg-aws-bundle-{version}.jar").write_bytes(b"")
    conf = session.spark_conf(uri, "file:///tmp/wh", consistent=False)
    assert str((glue / f"iceberg-aws-bundle-{version}.jar").resolve()) in conf.get("spark.jars", "").split(",")
    assert "iceberg-aws-bundle" not in conf.get("spark.jars.packages", "")
