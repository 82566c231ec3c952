"""Check what ``scripts/dist.sh`` built: the sdist carries the plugin's sources and no jar, the wheel the jar
with a manifest naming the versions it was compiled against. Prints one line per artefact.

Usage: python -m build_support.check_dist DIST_DIR
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path

JAR_IN_WHEEL = "consistent_catalog/jars/spark-plugin.jar"
#: The dbt package (``consistent-catalog dbt-path``): in the wheel and, under src/, in the sdist.
DBT_PACKAGE_FILES = ("consistent_catalog/dbt/dbt_project.yml", "consistent_catalog/dbt/macros/epoch.sql",
                     "consistent_catalog/dbt/macros/seed.sql", "consistent_catalog/dbt/macros/freshness.sql")
MANIFEST_KEYS = ("Implementation-Version", "Spark-Version", "Scala-Version", "Iceberg-Version", "Build-Jdk-Spec")


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


def check(dist: Path) -> list[str]:
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise SystemExit(f"check_dist: want one wheel and one sdist in {dist}, found {[p.name for p in (*wheels, *sdists)]}")
    with tarfile.open(sdists[0]) as sdist:
        names = [member.name.split("/", 1)[-1] for member in sdist.getmembers()]
    if any(name.endswith(".jar") for name in names):
        raise SystemExit(f"check_dist: {sdists[0].name} contains a jar; the sdist ships sources only")
    for needed in ("setup.py", "scripts/build_jvm.sh", "build_support/plugin_jar.py",
                   "jvm/spark-plugin/src/main/java/io/consistentcatalog/spark/ConsistentSparkCatalog.java"):
        if needed not in names:
            raise SystemExit(f"check_dist: {sdists[0].name} lacks {needed} (MANIFEST.in)")
    for needed in DBT_PACKAGE_FILES:
        if f"src/{needed}" not in names:
            raise SystemExit(f"check_dist: {sdists[0].name} lacks src/{needed} (package-data in pyproject.toml)")
    with zipfile.ZipFile(wheels[0]) as wheel:
        if JAR_IN_WHEEL not in wheel.namelist():
            raise SystemExit(f"check_dist: {wheels[0].name} has no {JAR_IN_WHEEL}")
        manifest = jar_manifest(wheel.read(JAR_IN_WHEEL))
        lacking = [name for name in DBT_PACKAGE_FILES if name not in wheel.namelist()]
    if lacking:
        raise SystemExit(f"check_dist: {wheels[0].name} lacks the dbt package's {lacking} (package-data in pyproject.toml)")
    missing = [key for key in MANIFEST_KEYS if key not in manifest]
    if missing:
        raise SystemExit(f"check_dist: the jar's manifest lacks {missing}")
    return [
        f"{sdists[0].name}: sources, including jvm/spark-plugin and its build script",
        f"{wheels[0].name}: {JAR_IN_WHEEL} {manifest['Implementation-Version']} for Spark "
        f"{manifest['Spark-Version']} (Scala {manifest['Scala-Version']}), Iceberg {manifest['Iceberg-Version']}, "
        f"Java {manifest['Build-Jdk-Spec']}; the dbt package consistent_catalog/dbt",
    ]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m build_support.check_dist DIST_DIR")
    print("\n".join(check(Path(sys.argv[1]))))
