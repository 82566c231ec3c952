"""DuckDB as an independent reader: every table of a cut, read by DuckDB's Iceberg extension at the cut's
snapshot ids, holds exactly the rows plain pyiceberg (and Spark) read at the same ids.

The pipeline is the project's FLIP demo (protocol §7). Expected rows come from plain pyiceberg scans and
from Spark, never from the project's own reader; protocol §7's invariants are also recomputed in DuckDB SQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("duckdb", reason="the duckdb extra is not installed (pip install -e '.[duckdb]')")

from consistent_catalog import ConsistentCatalog  # noqa: E402
from consistent_catalog.demo import (  # noqa: E402
    COUNTS,
    FLIP_VERSION,
    HISTOGRAM,
    HISTOGRAM_SQL,
    TABLES,
    WORD_COUNT_SQL,
    WORDS,
    count_words,
    ensure_tables,
    epoch_words,
    open_demo_catalog,
    run_demo,
)
from consistent_catalog.duckdb_reader import (  # noqa: E402
    connect,
    cut_statements,
    duckdb_s3_secret,
    read_cut_duckdb,
    register_cut_views,
    scan_sql,
)
from consistent_catalog.exceptions import (
    NoWatermarkError,
    ResolutionError,  # noqa: E402
)
from tests.harness.flip import flip_problems, pyiceberg_rows, rows  # noqa: E402

EPOCHS, ROWS = 5, 300


def all_cuts(cc: ConsistentCatalog) -> list:
    """The latest cut at each level plus the historical repeatable-read cut at every root barrier."""
    cuts = [cc.resolve(TABLES, level=level) for level in ("repeatable-read", "read-committed", "read-uncommitted")]
    for entry in cc.history(WORDS):
        try:
            cuts.append(cc.resolve(TABLES, as_of=entry.barrier))
        except (NoWatermarkError, ResolutionError):
            pass  # before count_histogram's first epoch: no cut covers all three tables
    return cuts


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> ConsistentCatalog:
    """The FLIP demo (pyiceberg engine) in a directory whose name needs quoting in SQL, plus one staged epoch."""
    root = tmp_path_factory.mktemp("duck") / "it's a \"lake\""
    run_demo(root, epochs=EPOCHS, rows_per_epoch=ROWS, engine="pyiceberg", echo=lambda _line: None)
    cc = open_demo_catalog(root)
    # One more epoch processed but not published: read-committed then differs from repeatable-read.
    cc.ingest(WORDS, epoch_words(EPOCHS, ROWS))
    with cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite",
                takeover=True, version=FLIP_VERSION) as counter:
        plan = counter.plan()
        counter.stage(COUNTS, plan, counter.run_transform(plan)[COUNTS])
    return cc


def test_duckdb_reads_exactly_the_pyiceberg_rows_at_every_cut(demo):
    cuts = all_cuts(demo)
    assert len(cuts) >= 3 + EPOCHS // 2
    committed = cuts[1]
    assert committed[COUNTS].branch == "consistent-staged"  # the staged epoch is part of what is compared
    con = connect()
    for cut in cuts:
        duck = read_cut_duckdb(demo, cut, connection=con)
        assert list(duck) == list(cut.tables)
        for table, part in cut.tables.items():
            assert rows(duck[table]) == pyiceberg_rows(demo, table, part.snapshot_id), (cut, table)
        if cut.level != "read-uncommitted":
            assert flip_problems({t: rows(d) for t, d in duck.items()}) == [], cut
    con.close()


def test_duckdb_sql_checks_spec7_on_its_own_views(demo):
    cut = demo.resolve(TABLES)
    con = connect()
    views = register_cut_views(con, demo, cut)
    assert views == {WORDS: "words", COUNTS: "word_counts", HISTOGRAM: "count_histogram"}
    (total_words,) = con.execute("SELECT count(*) FROM words").fetchone()
    (summed,) = con.execute("SELECT sum(cnt) FROM word_counts").fetchone()
    assert total_words == summed == EPOCHS * ROWS
    (mismatches,) = con.execute(
        "SELECT count(*) FROM (SELECT cnt, count(*) AS words FROM word_counts GROUP BY cnt) AS h "
        "FULL OUTER JOIN count_histogram AS c USING (cnt) WHERE h.words IS DISTINCT FROM c.words"
    ).fetchone()
    assert mismatches == 0
    # the views are the demo's own transforms evaluated by DuckDB over the pinned sources
    recount = rows(con.execute(WORD_COUNT_SQL).to_arrow_table())
    assert recount == pyiceberg_rows(demo, COUNTS, cut[COUNTS].snapshot_id)
    rehist = rows(con.execute(HISTOGRAM_SQL).to_arrow_table())
    assert rehist == pyiceberg_rows(demo, HISTOGRAM, cut[HISTOGRAM].snapshot_id)
    con.close()


def test_a_table_empty_at_the_cut_has_its_columns_and_no_rows(tmp_path):
    cc = open_demo_catalog(tmp_path / "lake")
    ensure_tables(cc)
    cc.catalog.create_table("demo.early", schema=epoch_words(0, 1).schema)
    cc.ingest("demo.early", epoch_words(1, 5), barrier=1_000)
    cc.ingest(WORDS, epoch_words(0, 10), barrier=2_000)
    cut = cc.resolve([WORDS, "demo.early"], as_of=1_500)
    assert cut[WORDS].snapshot_id is None and cut["demo.early"].snapshot_id is not None
    empty = read_cut_duckdb(cc, cut)[WORDS]
    assert empty.num_rows == 0 and empty.column_names == ["word"]
    latest = read_cut_duckdb(cc, [WORDS])[WORDS]
    assert rows(latest) == pyiceberg_rows(cc, WORDS, cc.resolve([WORDS])[WORDS].snapshot_id)


def test_sql_text_quotes_locations_and_view_names(demo):
    sql = scan_sql("file:///tmp/it's/v1.metadata.json", 42)
    assert sql == "SELECT * FROM iceberg_scan('file:///tmp/it''s/v1.metadata.json', snapshot_from_id => 42)"
    assert scan_sql("s3://b/t/metadata/v3.gz.metadata.json", None).endswith(
        "metadata_compression_codec => 'gzip') LIMIT 0")
    statements = cut_statements(demo, demo.resolve(TABLES))
    assert statements[0].startswith("-- repeatable-read cut at barrier ")
    assert all("it''s a \"lake\"" in s for s in statements[1:]), statements


def test_s3_secret_from_pyiceberg_properties():
    secret = duckdb_s3_secret({"s3.endpoint": "http://127.0.0.1:9000", "s3.access-key-id": "k'ey",
                               "s3.secret-access-key": "sec", "s3.region": "us-east-1"})
    assert secret == (
        "CREATE OR REPLACE SECRET \"consistent_catalog_s3\" (TYPE s3, KEY_ID 'k''ey', SECRET 'sec', "
        "REGION 'us-east-1', ENDPOINT '127.0.0.1:9000', USE_SSL false, URL_STYLE 'path');"
    )
    assert duckdb_s3_secret({"uri": "sqlite:///x"}) is None
    assert "USE_SSL true" in duckdb_s3_secret({"s3.endpoint": "https://minio.example"})


def test_command_prints_sql_that_duckdb_runs(demo, tmp_path):
    root = Path(demo.catalog.properties["warehouse"].removeprefix("file://")).parent
    env = {**os.environ, "PYICEBERG_CATALOG__LAKE__URI": f"sqlite:///{root}/catalog.db",
           "PYICEBERG_CATALOG__LAKE__WAREHOUSE": f"file://{root}/warehouse"}
    out = subprocess.run([sys.executable, "-m", "consistent_catalog", "-c", "lake", "duckdb", *TABLES],
                         env=env, capture_output=True, text=True, check=True).stdout
    con = connect()
    for statement in out.split(";\n"):
        if statement.strip() and not statement.lstrip().startswith("--"):
            con.execute(statement)
    cut = demo.resolve(TABLES)
    assert rows(con.execute("SELECT * FROM word_counts").to_arrow_table()) == pyiceberg_rows(
        demo, COUNTS, cut[COUNTS].snapshot_id)
    bad = subprocess.run([sys.executable, "-m", "consistent_catalog", "-c", "lake", "duckdb", "demo.nope"],
                         env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and "demo.nope does not exist" in bad.stderr and "Traceback" not in bad.stderr


def test_missing_duckdb_gives_an_actionable_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "duckdb", None)  # what an environment without duckdb looks like to import
    with pytest.raises(ImportError, match=r"pip install 'consistent-catalog\[duckdb\]'"):
        connect()


# --- Spark: a third engine on the same snapshot ids ------------------------------------------------


@pytest.mark.spark
def test_duckdb_pyiceberg_and_spark_agree_on_a_spark_written_pipeline(tmp_path):
    from consistent_catalog.spark.session import build_session

    root = tmp_path / "lake"
    cc = open_demo_catalog(root)
    spark = build_session(f"sqlite:///{root}/catalog.db", root / "warehouse", app_name="test-duckdb-reader")
    con = connect()
    seen = []

    def three_engines_agree(cut):
        duck = read_cut_duckdb(cc, cut, connection=con)
        data = {}
        for table, part in cut.tables.items():
            expected = pyiceberg_rows(cc, table, part.snapshot_id)
            frame = spark.read.format("iceberg").option("versionAsOf", str(part.snapshot_id)).load(f"lake.{table}")
            assert rows(duck[table]) == expected, (cut, table)
            assert sorted(tuple(r) for r in frame.collect()) == expected, (cut, table)
            data[table] = expected
        assert flip_problems(data) == [], cut
        seen.append(cut.barrier)

    checked = []

    def after_each_epoch(read, epoch):
        if epoch < 4:  # the cuts read after each epoch; the final one is checked below
            three_engines_agree(read.cut)
            checked.append(epoch)

    try:
        # the demo's pipeline with Spark jobs, in this test's catalog and session
        run_demo(cc=cc, spark=spark, engine="spark", epochs=4, rows_per_epoch=200, on_cut=after_each_epoch,
                 echo=lambda _line: None)
        three_engines_agree(cc.resolve(TABLES))
    finally:
        spark.stop()
        con.close()
    assert len(checked) >= 2 and len(set(seen)) >= 2
