"""Check what ``scripts/dist.sh`` built: the sdist carries the JVM reactor's sources and no jar, the wheel one
plugin jar per Spark line, each with a manifest naming the versions it was compiled against. Prints one line
per artefact.

Usage: python -m build_support.check_dist DIST_DIR
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path

JARS_IN_WHEEL = "consistent_catalog/jars/"
#: The dbt package (``consistent-catalog dbt-path``): in the wheel and, under src/, in the sdist.
DBT_PACKAGE_FILES = ("consistent_catalog/dbt/dbt_project.yml", "consistent_catalog/dbt/macros/epoch.sql",
                     "consistent_catalog/dbt/macros/seed.sql", "consistent_catalog/dbt/macros/freshness.sql")
ROOT = Path(__file__).resolve().parent.parent
MANIFEST_KEYS = ("Implementation-Version", "Spark-Line", "Spark-Version", "Scala-Version", "Iceberg-Version",
                 "Java-Release")


def jar_manifest(jar_bytes: bytes) -> dict[str, str]:
    """The main attributes of a jar's META-INF/MANIFEST.MF (continuation lines joined)."""
    import io

    with zipfile.ZipFile(io.BytesIO(jar_bytes)) as jar:
        text = jar.read("META-INF/MANIFEST.MF").decode("utf-8")
    attributes: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if line.startswith(" ") and key is not None:
            attributes[key] += line[1:]
        elif ": " in line:
            key, value = line.split(": ", 1)
            attributes[key] = value
    return attributes


def expected_jars(root: Path = ROOT) -> set[str]:
    """The jar name of each Spark line module in the reactor (``jvm/spark-<line>/pom.xml``'s line and Scala)."""
    import re

    names = set()
    for pom in sorted((root / "jvm").glob("spark-[0-9]*/pom.xml")):
        text = pom.read_text(encoding="utf-8")
        line = re.search(r"<spark.line>([^<]+)</spark.line>", text)
        scala = re.search(r"<scala.binary.version>([^<]+)</scala.binary.version>", text)
        if not line or not scala:
            raise SystemExit(f"check_dist: {pom} sets no <spark.line> or <scala.binary.version>")
        names.add(f"{JARS_IN_WHEEL}lake-consistent-spark-{line.group(1)}_{scala.group(1)}.jar")
    return names


def check(dist: Path) -> list[str]:
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise SystemExit(f"check_dist: want one wheel and one sdist in {dist}, found {[p.name for p in (*wheels, *sdists)]}")
    with tarfile.open(sdists[0]) as sdist:
        names = [member.name.split("/", 1)[-1] for member in sdist.getmembers()]
    if any(name.endswith(".jar") for name in names):
        raise SystemExit(f"check_dist: {sdists[0].name} contains a jar; the sdist ships sources only")
    for needed in ("setup.py", "scripts/build_jvm.sh", "build_support/plugin_jar.py", "jvm/pom.xml",
                   "jvm/spark-plugin/pom.xml", "jvm/spark-3.5/pom.xml",
                   "jvm/spark-plugin/src/main/java/io/consistentcatalog/spark/ConsistentSparkCatalog.java"):
        if needed not in names:
            raise SystemExit(f"check_dist: {sdists[0].name} lacks {needed} (MANIFEST.in)")
    for needed in DBT_PACKAGE_FILES:
        if f"src/{needed}" not in names:
            raise SystemExit(f"check_dist: {sdists[0].name} lacks src/{needed} (package-data in pyproject.toml)")
    lines = [f"{sdists[0].name}: sources, including the JVM reactor jvm/ and its build script"]
    with zipfile.ZipFile(wheels[0]) as wheel:
        lacking = [name for name in DBT_PACKAGE_FILES if name not in wheel.namelist()]
        if lacking:
            raise SystemExit(f"check_dist: {wheels[0].name} lacks the dbt package's {lacking} (package-data in pyproject.toml)")
        jars = sorted(n for n in wheel.namelist() if n.startswith(JARS_IN_WHEEL) and n.endswith(".jar"))
        if not jars:
            raise SystemExit(f"check_dist: {wheels[0].name} has no {JARS_IN_WHEEL}*.jar")
        lacking = sorted(expected_jars() - set(jars))
        if lacking:
            raise SystemExit(f"check_dist: {wheels[0].name} lacks the plugin jar of a Spark line in jvm/: {lacking}")
        for name in jars:
            manifest = jar_manifest(wheel.read(name))
            missing = [key for key in MANIFEST_KEYS if key not in manifest]
            if missing:
                raise SystemExit(f"check_dist: {name}'s manifest lacks {missing}")
            expected = f"lake-consistent-spark-{manifest['Spark-Line']}_{manifest['Scala-Version']}.jar"
            if name.rsplit("/", 1)[-1] != expected:
                raise SystemExit(f"check_dist: {name} holds a jar for Spark {manifest['Spark-Line']}: want {expected}")
            lines.append(
                f"{wheels[0].name}: {name} {manifest['Implementation-Version']} for Spark {manifest['Spark-Version']} "
                f"(Scala {manifest['Scala-Version']}), Iceberg {manifest['Iceberg-Version']}, "
                f"Java {manifest['Java-Release']}"
            )
    lines.append(f"{wheels[0].name}: the dbt package consistent_catalog/dbt")
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m build_support.check_dist DIST_DIR")
    print("\n".join(check(Path(sys.argv[1]))))
