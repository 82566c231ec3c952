"""Issue #10 item 1 with a real SparkSession: expiry deletes the files Spark wrote, the orphan sweep none it references.

pyiceberg creates the catalog and the table (location ``file:///...``); Spark (local[2], Iceberg's
JDBC catalog over the same SQLite file) writes the snapshots, spelling every path ``file:/...``.
Expiry used to compare those strings with the table location and deleted none of Spark's files
("deleted 0 data file(s)", exit 0).

The truth is established independently of the code under test: which parquet files hold which
batch is read from the data directory with pyarrow before expiry; after it, the directory is
listed again, the table is recounted with pyiceberg and with Spark.

One SparkSession for the module (start-up costs seconds and hundreds of MB).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, NestedField, StringType

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.retention import RetentionPolicy
from consistent_catalog.spark.session import build_session

pytestmark = [pytest.mark.spark]

EVENTS = "demo.events"
BATCHES = {1: ["a", "b", "c", "d"], 2: ["e", "f", "g"], 3: ["h", "i", "j", "k"], 4: ["l", "m"]}
"""Batch -> its words. Spark writes 1, 2, overwrites 1 with 3, appends 4: the table holds 2, 3, 4."""


def local(uri: str) -> Path:
    return Path(urlsplit(uri).path)


def parquet_files(directory: Path) -> set[Path]:
    return {Path(root) / n for root, _, names in os.walk(directory) for n in names if n.endswith(".parquet")}


def batches_in(path: Path) -> set[int]:
    return set(pq.read_table(path).column("batch").to_pylist())


def expected_rows(*batches: int) -> Counter:
    return Counter((word, b) for b in batches for word in BATCHES[b])


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("spark-storage")
    (d / "warehouse").mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{d}/catalog.db", warehouse=f"file://{d}/warehouse")
    catalog.create_namespace("demo")
    spark = build_session(f"sqlite:///{d}/catalog.db", f"{d}/warehouse", app_name="consistent-catalog-storage")
    try:
        yield catalog, spark
    finally:
        spark.stop()


def spark_write(spark, batch: int, barrier: int, *, overwrite_batch: int | None = None) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(w, batch) for w in BATCHES[batch]], "word string, batch int").repartition(2)
    writer = df.writeTo(f"lake.{EVENTS}").option(f"snapshot-property.{P.BARRIER}", str(barrier))
    if overwrite_batch is None:
        writer.append()
    else:
        writer.overwrite(F.col("batch") == overwrite_batch)


@pytest.fixture(scope="module")
def spark_table(lake):
    catalog, spark = lake
    table = catalog.create_table(
        EVENTS, Schema(NestedField(1, "word", StringType(), required=False), NestedField(2, "batch", IntegerType(), required=False))
    )
    assert table.metadata.location.startswith("file:///")
    spark_write(spark, 1, 1000)
    spark_write(spark, 2, 2000)
    spark_write(spark, 3, 3000, overwrite_batch=1)
    spark_write(spark, 4, 4000)
    return catalog.load_table(EVENTS)


def test_expire_delete_files_deletes_the_data_files_spark_wrote(lake, spark_table):
    catalog, spark = lake
    cc = ConsistentCatalog(catalog)
    snapshots = spark_table.metadata.snapshots
    assert len(snapshots) == 4
    assert all(s.summary.additional_properties.get("engine-name") == "spark" for s in snapshots)  # really Spark's
    spelled = spark_table.inspect.files()["file_path"].to_pylist()
    assert spelled and all(p.startswith("file:/") and not p.startswith("file://") for p in spelled)  # Spark's spelling
    data_dir = local(spark_table.metadata.location) / "data"
    before = {path: batches_in(path) for path in parquet_files(data_dir)}
    only_batch_1 = {path for path, batches in before.items() if batches == {1}}
    assert only_batch_1 and all(len(b) == 1 for b in before.values())  # each file holds one batch
    manifest_lists = {local(s.manifest_list) for s in snapshots}
    assert all(p.exists() for p in manifest_lists)

    result = cc.retention.expire([EVENTS], RetentionPolicy(older_than=0, keep_last=1, delete_files=True))

    deleted = result.deleted[EVENTS]
    assert result.expired[EVENTS] == 3
    assert deleted.data_files == len(only_batch_1) > 0  # failed with "deleted 0 data file(s)" before the fix
    after = parquet_files(data_dir)
    assert after == set(before) - only_batch_1  # really gone from disk, nothing else touched
    assert all(not (batches_in(path) & {1}) for path in after)
    checksums = {p for p in data_dir.iterdir() if p.name.endswith(".crc")}  # Hadoop's sidecars go with their files
    assert checksums == {p.with_name(f".{p.name}.crc") for p in after}
    head = catalog.load_table(EVENTS)
    data = [s for s in head.metadata.snapshots if P.FENCE_REASON not in s.summary.additional_properties]
    assert [s.snapshot_id for s in data] == [snapshots[-1].snapshot_id]  # and the fence's (expiry took it)
    assert {p for p in manifest_lists if p.exists()} == {local(head.current_snapshot().manifest_list)}
    assert deleted.manifest_lists == 3
    # an independent recount: pyiceberg and Spark read the right rows, from the files left on disk
    pyiceberg_rows = head.scan().to_arrow()
    assert Counter(zip(pyiceberg_rows["word"].to_pylist(), pyiceberg_rows["batch"].to_pylist())) == expected_rows(2, 3, 4)
    on_disk = Counter((w, b) for path in after for w, b in zip(*pq.read_table(path).to_pydict().values()))
    assert on_disk == expected_rows(2, 3, 4)
    spark_rows = Counter((r["word"], r["batch"]) for r in spark.sql(f"SELECT word, batch FROM lake.{EVENTS}").collect())
    assert spark_rows == expected_rows(2, 3, 4)


def test_orphan_sweep_keeps_every_file_spark_references_and_deletes_a_leftover(lake, spark_table):
    catalog, spark = lake
    cc = ConsistentCatalog(catalog)
    spark_write(spark, 2, 5000)  # one more Spark commit after the expiry above (or on its own)
    location = local(catalog.load_table(EVENTS).metadata.location)
    leftover = location / "data" / "00099-0-crashed-task.parquet"
    pq.write_table(pq.read_table(next(iter(parquet_files(location / "data")))), leftover)
    then = time.time() - 2 * 86400
    for root, _, names in os.walk(location):  # everything old: only references protect Spark's files
        for name in names:
            os.utime(Path(root) / name, (then, then))
    before = {Path(root) / n for root, _, names in os.walk(location) for n in names}
    rows_before = Counter((r["word"], r["batch"]) for r in spark.sql(f"SELECT word, batch FROM lake.{EVENTS}").collect())

    result = cc.retention.remove_orphan_files([EVENTS], older_than_ms="1d")

    swept = result.tables[EVENTS]
    assert swept.skipped is None
    assert [local(p) for p in swept.orphan_files] == [leftover] and swept.deleted == 1
    assert {Path(root) / n for root, _, names in os.walk(location) for n in names} == before - {leftover}
    assert Counter((r["word"], r["batch"]) for r in spark.sql(f"SELECT word, batch FROM lake.{EVENTS}").collect()) == rows_before
    assert catalog.load_table(EVENTS).scan().to_arrow().num_rows == sum(rows_before.values())
