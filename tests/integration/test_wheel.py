"""One ``pip install`` gives the whole product (issue #22): the wheel carries the Spark plugin jar.

From a clean ``git clone`` of this repository (what CI checks out: the committed tree, so commit before
running this): ``scripts/dist.sh`` (``make dist``) builds the sdist and, from it, the wheel with the jar;
``python -m build --wheel`` where no pyspark/Iceberg jars can be found builds a wheel without it. Both are
installed, one after the other, into one fresh venv outside the repository (the ``[spark]`` extra from
pip's cache; ``consistent_catalog`` itself only from the wheel). From a directory outside the repository:

- the jar-less package's ``consistent-catalog spark-conf`` renders no ``lake_consistent`` and says so in one
  line naming the way out;
- the full package's ``spark-conf`` names the jar inside the installed package, and stock ``spark-sql
  --properties-file`` reads ``lake_consistent`` at the consistent cut, recounted independently with pyiceberg;
- ``configure_spark(SparkSession.builder, ...)`` of the installed package gives a session with both catalogs;
- (issue 30) the same full wheel, installed into a second fresh venv with the other line's pyspark from PyPI (3.5
  beside the default 4.1): on both pyspark
  lines stock ``spark-sql`` with nothing but the rendered file creates a root and a derived table, ingests, runs a
  SQL epoch and reads the consistent cut through ``lake_consistent`` (the line's own plugin jar and Iceberg
  runtime), recounted with pyiceberg; a pyspark outside the lines gets one line naming the supported ones.

The wheels and the venv are built once per test session (``tests/conftest.py``, ``tests/harness/wheel.py``): the
dbt project's test (``tests/spark/test_dbt_project.py``) runs from the same venv with the ``[dbt]`` extra added.
The lake is built here with the checkout's package (it is only data): word_counts counted words' first
ingest, and a second ingest after it is not counted yet, so the consistent cut (3 words) differs from
words' head (4 words). Timings of each step are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import consistent_catalog
from consistent_catalog import ConsistentCatalog
from consistent_catalog.demo import count_words
from consistent_catalog.spark.lines import DEFAULT_LINE, SPARK_LINES
from consistent_catalog.spark.session import find_iceberg_runtime_jar, parse_spark_defaults
from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA, sqlite_catalog, words
from tests.harness.wheel import Dists, Venv, clean_env, fresh_venv
from tests.harness.wheel import run as _run

DEFAULT = SPARK_LINES[DEFAULT_LINE]  # the line of the pyspark the [spark] extra installs (4.1)
JAR_NAME = f"{DEFAULT.plugin_artifact}.jar"
JAR_IN_WHEEL = f"consistent_catalog/jars/{JAR_NAME}"
#: The second pyspark line the wheel is installed with (issue 30): the other end of the supported range.
OTHER_LINE, OTHER_PYSPARK = ("3.5", "3.5.9") if DEFAULT_LINE != "3.5" else ("4.1", "4.1.3")
#: Each line's plugin jar and Iceberg runtime, as the rendered file must name them (README's table of lines).
LINE_JARS = {"3.5": ("lake-consistent-spark-3.5_2.12.jar", "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:"),
             "4.1": ("lake-consistent-spark-4.1_2.13.jar", "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:")}

@dataclass(frozen=True)
class Lake:
    directory: Path
    first_ingest_snapshot: int


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    directory = tmp_path_factory.mktemp("wheel-lake")
    catalog = sqlite_catalog(directory)
    catalog.create_namespace("demo")
    catalog.create_table("demo.words", schema=WORDS_SCHEMA)
    catalog.create_table("demo.word_counts", schema=COUNTS_SCHEMA)
    cc = ConsistentCatalog(catalog)
    first = cc.ingest("demo.words", words("kafka", "offset", "kafka"))
    with cc.job("word-count", sources=["demo.words"], sinks=["demo.word_counts"], transform=count_words,
                mode="overwrite") as job:
        job.run_until_caught_up()
    cc.ingest("demo.words", words("late"))  # after the epoch: not counted, so beyond the consistent cut
    catalog.engine.dispose()  # no connection held while Spark opens the file
    yield Lake(directory, first.snapshot_id)


def _venv_env(venv: Venv, **extra: str) -> dict[str, str]:
    return venv.env(**extra)


def _render(venv: Venv, lake: Lake, target: Path, **extra: str) -> subprocess.CompletedProcess:
    return _run([str(venv.bin / "consistent-catalog"), "spark-conf", "--write", str(target),
                 "--catalog-uri", f"sqlite:///{lake.directory}/catalog.db", "--warehouse", str(lake.directory / "warehouse")],
                cwd=venv.elsewhere, env=_venv_env(venv, **extra), timeout=120, what=f"spark-conf --write {target.name}")


def _manifest(jar_bytes: bytes) -> dict[str, str]:
    import io

    with zipfile.ZipFile(io.BytesIO(jar_bytes)) as jar:
        lines = jar.read("META-INF/MANIFEST.MF").decode("utf-8").splitlines()
    return dict(line.split(": ", 1) for line in lines if ": " in line)


# --- the artefacts ----------------------------------------------------------------------------------------
def test_make_dist_builds_an_sdist_of_sources_and_a_wheel_with_the_versioned_plugin_jar(dists: Dists) -> None:
    with tarfile.open(dists.sdist) as sdist:
        names = [member.name.split("/", 1)[-1] for member in sdist.getmembers()]
    assert "jvm/spark-plugin/src/main/java/io/consistentcatalog/spark/ConsistentSparkCatalog.java" in names
    assert not [n for n in names if n.endswith((".jar", ".class"))]
    with zipfile.ZipFile(dists.full_wheel) as wheel:
        manifest = _manifest(wheel.read(JAR_IN_WHEEL))
        assert "consistent_catalog/spark/spark-defaults.conf.template" in wheel.namelist()
        assert "consistent_catalog/spark/flip_pipeline.sql" in wheel.namelist()  # README: the pipeline as SQL
        # the dbt package (README: dbt; consistent-catalog dbt-path prints where it is installed)
        assert {"consistent_catalog/dbt/dbt_project.yml", "consistent_catalog/dbt/macros/epoch.sql"} <= set(
            wheel.namelist())
    # The versions, checked against this venv's own Spark and Iceberg jars (what the README promises).
    import pyspark

    runtime = Path(find_iceberg_runtime_jar() or "").name  # iceberg-spark-runtime-4.1_2.13-1.12.0.jar
    assert manifest["Spark-Version"] == pyspark.__version__ and manifest["Spark-Line"] == DEFAULT_LINE
    assert manifest["Scala-Version"] == DEFAULT.scala and f"_{DEFAULT.scala}-" in runtime
    assert manifest["Iceberg-Version"] == DEFAULT.iceberg and runtime.endswith(f"-{DEFAULT.iceberg}.jar")
    assert manifest["Implementation-Version"] == consistent_catalog.__version__
    assert "PASSED" in dists.dist_output and "Spark 3.5.9 (Scala 2.12), Iceberg 1.10.2" in dists.dist_output


def test_a_build_without_maven_succeeds_without_the_jar_and_says_so(dists: Dists) -> None:
    with zipfile.ZipFile(dists.bare_wheel) as wheel:
        assert JAR_IN_WHEEL not in wheel.namelist()
        assert "consistent_catalog/cli/main.py" in wheel.namelist()
    said = [line for line in dists.bare_log.splitlines() if line.startswith("consistent-catalog build:")]
    assert len(said) == 1 and "WITHOUT the Spark plugin jar" in said[0] and "Maven" in said[0], said


def test_the_jarless_package_renders_without_lake_consistent_and_names_the_way_out_in_one_line(
    wheel_venv: Venv, lake: Lake
) -> None:
    rendered = _render(wheel_venv, lake, wheel_venv.elsewhere / "bare.conf")
    conf = parse_spark_defaults((wheel_venv.elsewhere / "bare.conf").read_text(encoding="utf-8"))
    assert conf["spark.sql.catalog.lake.type"] == "jdbc"
    assert not [key for key in conf if key.startswith("spark.sql.catalog.lake_consistent")]
    note = rendered.stderr.strip().splitlines()
    assert len(note) == 1, rendered.stderr
    assert note[0].startswith("note: no lake_consistent in the file")
    assert "built without" in note[0] and "make dist" in note[0] and "CONSISTENT_PLUGIN_JAR=" in note[0]


# --- the installed package ----------------------------------------------------------------------------------
def test_consistent_catalog_comes_from_the_wheel(full_venv: Venv) -> None:
    out = _run([str(full_venv.bin / "python"), "-c",
                "import consistent_catalog; from consistent_catalog.spark.session import find_plugin_jar; "
                "print(consistent_catalog.__file__); print(find_plugin_jar())"],
               cwd=full_venv.elsewhere, env=_venv_env(full_venv), timeout=60, what="import consistent_catalog").stdout
    module, jar = out.split()
    site = full_venv.bin.parent / "lib"
    assert Path(module).is_relative_to(site) and "site-packages" in module, module
    assert Path(jar) == Path(module).parent / "jars" / JAR_NAME


def test_stock_spark_sql_reads_lake_consistent_with_the_installed_package(full_venv: Venv, lake: Lake) -> None:
    conf_path = full_venv.elsewhere / "spark-defaults.conf"
    rendered = _render(full_venv, lake, conf_path)
    assert "note:" not in rendered.stderr
    conf = parse_spark_defaults(conf_path.read_text(encoding="utf-8"))
    jars = conf["spark.jars"].split(",")
    plugin = [j for j in jars if j.endswith(f"/consistent_catalog/jars/{JAR_NAME}")]
    assert plugin and Path(plugin[0]).is_relative_to(full_venv.bin.parent), jars
    assert conf["spark.sql.catalog.lake_consistent"] == "io.consistentcatalog.spark.ConsistentSparkCatalog"

    query = ("SELECT (SELECT sum(cnt) FROM lake_consistent.demo.word_counts) AS counted, "
             "(SELECT count(*) FROM lake_consistent.demo.words) AS words, "
             "(SELECT count(*) FROM lake.demo.words) AS head")
    run = _run([str(full_venv.bin / "spark-sql"), "--properties-file", str(conf_path), "-S", "-e", query],
               cwd=full_venv.elsewhere, env=_venv_env(full_venv), timeout=300, what="spark-sql on lake_consistent")
    # Spark resolves the runtime and the driver by coordinates (spark.jars.packages): Ivy's banner comes first;
    # the row is last, with no header (spark-sql --hiveconf hive.cli.print.header=true would print one)
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    assert not any(line.split() == ["counted", "words", "head"] for line in lines), run.stdout
    counted, cut_words, head = (int(v) for v in lines[-1].split())

    # Independent recount: plain pyiceberg scans, the words at the snapshot word_counts was computed from.
    catalog = sqlite_catalog(lake.directory)
    try:
        counts = catalog.load_table("demo.word_counts").scan().to_arrow()
        table = catalog.load_table("demo.words")
        at_cut = table.scan(snapshot_id=lake.first_ingest_snapshot).to_arrow().num_rows
        now = table.scan().to_arrow().num_rows
    finally:
        catalog.engine.dispose()
    assert (counted, cut_words, head) == (sum(counts.column("cnt").to_pylist()), at_cut, now) == (3, 3, 4)
    assert not (full_venv.elsewhere / "metastore_db").exists()


def test_configure_spark_of_the_installed_package_gives_a_builder_both_catalogs(full_venv: Venv, lake: Lake) -> None:
    script = full_venv.elsewhere / "builder.py"
    script.write_text(f"""\
import json
from pyspark.sql import SparkSession
from consistent_catalog.spark import configure_spark

builder = SparkSession.builder.master("local[2]").appName("wheel-builder").config("spark.ui.enabled", "false")
spark = configure_spark(builder, "sqlite:///{lake.directory}/catalog.db", "{lake.directory}/warehouse").getOrCreate()
try:
    row = spark.sql("SELECT (SELECT count(*) FROM lake_consistent.demo.words) AS cut, "
                    "(SELECT count(*) FROM lake.demo.words) AS head").collect()[0]
    print(json.dumps({{"cut": row.cut, "head": row.head, "jars": spark.conf.get("spark.jars")}}))
finally:
    spark.stop()
""", encoding="utf-8")
    run = _run([str(full_venv.bin / "python"), str(script)], cwd=full_venv.elsewhere, env=_venv_env(full_venv),
               timeout=300, what="configure_spark + getOrCreate + one query")
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    assert (answer["cut"], answer["head"]) == (3, 4)
    assert any(j.startswith(str(full_venv.bin.parent)) and j.endswith(JAR_NAME)
               for j in answer["jars"].split(","))


def test_consistent_plugin_jar_overrides_the_packaged_one(full_venv: Venv, lake: Lake, tmp_path: Path) -> None:
    other = tmp_path / "my-plugin.jar"
    packaged = next(full_venv.bin.parent.glob(f"lib/python*/site-packages/consistent_catalog/jars/{JAR_NAME}"))
    shutil.copyfile(packaged, other)
    _render(full_venv, lake, full_venv.elsewhere / "override.conf", CONSISTENT_PLUGIN_JAR=str(other))
    conf = parse_spark_defaults((full_venv.elsewhere / "override.conf").read_text(encoding="utf-8"))
    assert str(other) in conf["spark.jars"].split(",") and str(packaged) not in conf["spark.jars"]


def test_init_from_the_installed_package_sets_up_a_lake_the_cli_and_spark_sql_use_with_nothing_else(
    full_venv: Venv, tmp_path: Path
) -> None:
    """Issue 34, item 1: outside any checkout, one ``consistent-catalog init``; then the CLI and stock ``spark-sql``
    work with no variable and no other file. What spark-sql wrote is read back with plain pyiceberg."""
    from pyiceberg.catalog.sql import SqlCatalog

    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = _venv_env(full_venv, HOME=str(home))
    # issue 42, item 3: init called by its path from a shell where the venv is not active, and the lines it prints
    # under next: run there as printed (the spark-sql line given the statements to run)
    inactive = clean_env(HOME=str(home), PATH=os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != full_venv.bin))
    cli = str(full_venv.bin / "consistent-catalog")
    printed = _run([cli, "init"], cwd=work, env=inactive, timeout=120, what="consistent-catalog init").stdout
    conf = work / "lake" / "spark-defaults.conf"
    assert (home / ".pyiceberg.yaml").is_file() and conf.is_file()
    hint = [line.strip() for line in printed.split("next:\n", 1)[1].splitlines() if line.strip()]
    assert hint[0] == f"source {full_venv.bin / 'activate'}", hint
    assert hint[-1] == f"spark-sql --properties-file {conf}", hint

    statements = ("CREATE NAMESPACE lake.shop; "
                  "CREATE TABLE lake.shop.orders (id bigint, item string) USING iceberg; "
                  "INSERT INTO lake_consistent.shop.orders VALUES (1, 'tea'), (2, 'cake'); "
                  "SELECT count(*) AS orders FROM lake_consistent.shop.orders")
    script = "\n".join([*hint[:-1], f"{hint[-1]} -S -e \"{statements}\""]) + "\n"
    run = _run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=inactive, timeout=300,
               what="init's next: lines, spark-sql on the lake init set up")
    assert "Traceback" not in run.stderr, run.stderr[-3000:]  # pyspark's find_spec one, from a python3 without it
    assert "Response code" not in run.stdout + run.stderr  # item 5: no header noise after DDL and INSERT
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    assert lines[-1:] == ["2"] and "orders" not in lines, run.stdout  # Ivy's banner may come first; no header

    status = json.loads(_run([cli, "status", "-o", "json"], cwd=work, env=env, timeout=120,
                             what="consistent-catalog status").stdout)
    (row,) = [r for r in status if r["table"] == "shop.orders"]
    independent = SqlCatalog("lake", uri=f"sqlite:///{work}/lake/catalog.db", warehouse=f"file://{work}/lake/warehouse")
    try:
        table = independent.load_table("shop.orders")
        assert table.scan().to_arrow().num_rows == 2
        barrier = int(table.metadata.snapshot_by_name("main").summary["consistent.barrier"])
    finally:
        independent.engine.dispose()
    assert row["watermark"] == barrier, row


# --- one wheel on every pyspark line (issue 30) ------------------------------------------------------------
@pytest.fixture(scope="module")
def other_venv(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A second fresh venv: the full wheel and the other line's pyspark from PyPI (pip's cache), nothing else."""
    return fresh_venv(tmp_path_factory.mktemp(f"wheel-venv-{OTHER_LINE}"),
                       [str(dists.full_wheel), f"pyspark=={OTHER_PYSPARK}"], f"<full wheel> pyspark=={OTHER_PYSPARK}")


@pytest.mark.parametrize("line", sorted([DEFAULT_LINE, OTHER_LINE]))
def test_one_wheel_writes_and_reads_lake_consistent_on_each_pyspark_line_with_only_the_rendered_file(
    line: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    venv: Venv = request.getfixturevalue("full_venv" if line == DEFAULT_LINE else "other_venv")
    plugin_jar, runtime = LINE_JARS[line]
    directory = tmp_path / "lake"
    directory.mkdir()
    sqlite_catalog(directory).engine.dispose()  # pyiceberg creates the catalog database first (STACK.md: SQLite lock)
    conf_path = venv.elsewhere / f"spark-defaults-{line}-{tmp_path.name}.conf"
    rendered = _run([str(venv.bin / "consistent-catalog"), "spark-conf", "--write", str(conf_path),
                     "--catalog-uri", f"sqlite:///{directory}/catalog.db", "--warehouse", str(directory / "warehouse")],
                    cwd=venv.elsewhere, env=_venv_env(venv), timeout=120, what=f"spark-conf on Spark {line}")
    assert "note:" not in rendered.stderr
    conf = parse_spark_defaults(conf_path.read_text(encoding="utf-8"))
    # the line's plugin jar from inside the installed package, its Iceberg runtime by coordinates
    assert [j for j in conf["spark.jars"].split(",") if j.endswith(f"/consistent_catalog/jars/{plugin_jar}")], conf
    assert any(p.startswith(runtime) for p in conf["spark.jars.packages"].split(",")), conf

    statements = ("CREATE NAMESPACE lake.shop; "
                  "CREATE TABLE lake.shop.words (word string) USING iceberg; "
                  "CREATE TABLE lake.shop.word_counts (word string, cnt bigint) USING iceberg; "
                  "INSERT INTO lake_consistent.shop.words VALUES ('kafka'), ('offset'), ('kafka'); "
                  "SET spark.sql.consistent.job=word-count; "
                  "INSERT OVERWRITE lake_consistent.shop.word_counts "
                  "SELECT word, count(*) AS cnt FROM lake_consistent.shop.words GROUP BY word; "
                  "RESET spark.sql.consistent.job; "
                  "INSERT INTO lake_consistent.shop.words VALUES ('late'); "  # an ingest after the epoch: beyond the cut
                  "SELECT (SELECT sum(cnt) FROM lake_consistent.shop.word_counts) AS counted, "
                  "(SELECT count(*) FROM lake_consistent.shop.words) AS cut, (SELECT count(*) FROM lake.shop.words) AS head")
    run = _run([str(venv.bin / "spark-sql"), "--properties-file", str(conf_path), "-S", "-e", statements],
               cwd=venv.elsewhere, env=_venv_env(venv), timeout=300, what=f"spark-sql write + read on Spark {line}")
    assert "[lake_consistent] word-count: shop.word_counts barrier" in run.stderr and "published" in run.stderr, \
        run.stderr[-3000:]
    counted, cut, head = (int(v) for v in [x for x in run.stdout.splitlines() if x.strip()][-1].split())

    # Independent recount with plain pyiceberg: word_counts from words' first snapshot (the epoch's input)
    catalog = sqlite_catalog(directory)
    try:
        words_table = catalog.load_table("shop.words")
        first, *later = words_table.metadata.snapshots
        at_first = words_table.scan(snapshot_id=first.snapshot_id).to_arrow().column("word").to_pylist()
        now = words_table.scan().to_arrow().num_rows
        counts = catalog.load_table("shop.word_counts")
        written = dict(zip(*(counts.scan().to_arrow().column(c).to_pylist() for c in ("word", "cnt")), strict=True))
        barrier = int(counts.metadata.snapshot_by_name("main").summary["consistent.barrier"])
        first_barrier = int(first.summary["consistent.barrier"])
    finally:
        catalog.engine.dispose()
    assert len(later) == 1 and written == dict(Counter(at_first)) == {"kafka": 2, "offset": 1}
    assert barrier == first_barrier  # the epoch ran at the barrier of the ingest it read
    assert (counted, cut, head) == (sum(written.values()), len(at_first), now) == (3, 3, 4)


def test_a_pyspark_outside_the_lines_gets_one_line_naming_the_supported_lines(other_venv: Venv) -> None:
    """The installed pyspark says its line; CONSISTENT_SPARK_LINE claims a 4.2 (no Iceberg runtime): refused in one line."""
    result = subprocess.run([str(other_venv.bin / "consistent-catalog"), "spark-conf", "--catalog-uri", "sqlite:///x.db",
                             "--warehouse", "/tmp/w"], cwd=other_venv.elsewhere, capture_output=True, text=True, timeout=120,
                            env=_venv_env(other_venv, CONSISTENT_SPARK_LINE="4.2.0"), stdin=subprocess.DEVNULL)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    said = result.stderr.strip().splitlines()
    assert len(said) == 1 and "Spark 4.2.0 is not a supported line" in said[0], result.stderr
    assert all(f"Spark {line} (Scala" in said[0] for line in ("3.5", "4.0", "4.1")), said
