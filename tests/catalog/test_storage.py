"""Storage: file deletion by expiry and the orphan-file sweep (protocol §9.7), on real catalogs.

Issue #10 item 1: Spark writes ``file:/w/t/...`` into tables pyiceberg created at ``file:///w/t``,
and expiry compared the strings, so it deleted none of Spark's files. Here the Spark spelling is
produced with pyiceberg alone (``add_files`` of a path spelled ``file:/...``); tests/spark/
test_spark_storage.py does the same with a real SparkSession.

Every check reads the disk itself (``os.walk``, ``pyarrow.parquet``) and the table through plain
pyiceberg scans, never through the code under test.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from pyiceberg.expressions import AlwaysTrue

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.exceptions import InvalidInputError
from consistent_catalog.retention.files import is_inside, normalize_location
from consistent_catalog.retention.policy import RetentionPolicy
from consistent_catalog.util.time import now_ms
from tests.harness.lake import words

WORDS = "demo.words"
DAY = 86_400_000
EXPIRE_ALL = RetentionPolicy(older_than=0, keep_last=1, delete_files=True)


# --- helpers -----------------------------------------------------------------------------------------
def local(uri: str) -> Path:
    """The local path of a ``file:`` location, parsed independently of the code under test."""
    return Path(urlsplit(uri).path)


def files_under(directory: Path) -> set[Path]:
    return {Path(root) / name for root, _, names in os.walk(directory) for name in names}


def age_everything(directory: Path, seconds: float = 2 * 86400) -> None:
    """Make every file under ``directory`` look ``seconds`` old (so only references protect them)."""
    then = time.time() - seconds
    for path in files_under(directory):
        os.utime(path, (then, then))


def rows(catalog, table: str = WORDS, snapshot_id: int | None = None) -> Counter:
    return Counter(catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow()["word"].to_pylist())


def spark_spelled_file(table, name: str, *items: str) -> tuple[Path, str]:
    """A parquet file in the table's data directory and its location spelled the way Spark spells it (``file:/x``)."""
    path = local(table.metadata.location) / "data" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(words(*items), path)
    return path, f"file:{path}"


def referenced_by_metadata(catalog, table: str = WORDS) -> set[Path]:
    """Every file the metadata references (all snapshots), as local paths: Iceberg's reachable set."""
    loaded = catalog.load_table(table)
    meta = loaded.metadata
    found = {local(loaded.metadata_location)} | {local(e.metadata_file) for e in meta.metadata_log}
    for snapshot in meta.snapshots:
        found.add(local(snapshot.manifest_list))
        for manifest in snapshot.manifests(loaded.io):
            found.add(local(manifest.manifest_path))
            found.update(local(e.data_file.file_path) for e in manifest.fetch_manifest_entry(loaded.io))
    return found


# --- the normaliser ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spellings",
    [
        ["file:/w/t/data/a.parquet", "file:///w/t/data/a.parquet", "/w/t/data/a.parquet",
         "file://localhost/w/t/data/a.parquet", "FILE:///w/t//data/./a.parquet"],
        ["file:///w/t/", "file:/w/t", "/w/t", "/w/t/"],
        ["s3://bucket/w/t/a.parquet", "s3a://bucket/w/t/a.parquet", "s3n://bucket/w/t/a.parquet",
         "S3A://bucket/w//t/a.parquet"],
        ["s3://bucket", "s3://bucket/", "s3a://bucket/"],
        ["gs://bucket/k", "gcs://bucket/k"],
    ],
)
def test_normalize_location_makes_every_spelling_of_one_location_equal(spellings):
    assert len({normalize_location(s) for s in spellings}) == 1, [normalize_location(s) for s in spellings]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("file:/w/t/a", "file:/w/t/b"),
        ("s3://bucket/k", "s3://other/k"),
        ("s3://bucket/k", "file:///bucket/k"),
        ("s3://bucket/k", "gs://bucket/k"),
        ("hdfs://nn1:8020/w/k", "hdfs://nn2:8020/w/k"),
    ],
)
def test_normalize_location_keeps_different_files_apart(a, b):
    assert normalize_location(a) != normalize_location(b)


def test_is_inside_compares_normalised_locations():
    assert normalize_location("file:///w/t") == ("file", "", "/w/t")
    assert is_inside("file:/w/t/data/a.parquet", "file:///w/t")
    assert is_inside("s3a://b/w/t/data/a.parquet", "s3://b/w/t/")
    assert is_inside("s3://b/k", "s3://b")
    assert not is_inside("file:/w/t2/data/a.parquet", "file:///w/t")  # a sibling with a common prefix
    assert not is_inside("file:///w/t", "file:/w/t")  # the location itself is not inside it
    assert not is_inside("s3://b/w/t/a", "file:///b/w/t")
    assert not is_inside("file:/w/x/../t2/a", "file:///w/t")


# --- expiry with delete_files --------------------------------------------------------------------------
def test_expire_deletes_a_file_spelled_file_colon_slash_under_a_file_triple_slash_location(cc, catalog):
    table = catalog.create_table(WORDS, schema=words().schema)
    assert table.metadata.location.startswith("file:///")
    path, spelled = spark_spelled_file(table, "spark-style.parquet", "a", "b")
    table.add_files([spelled], snapshot_properties={P.BARRIER: "1000"})
    written = catalog.load_table(WORDS).inspect.files().to_pylist()
    assert [f["file_path"] for f in written] == [spelled]  # referenced exactly as Spark spells it
    catalog.load_table(WORDS).delete(AlwaysTrue(), snapshot_properties={P.BARRIER: "2000"})
    cc.ingest(WORDS, words("c"), barrier=3000)
    head = catalog.load_table(WORDS).current_snapshot().snapshot_id

    result = cc.retention.expire([WORDS], EXPIRE_ALL)

    assert result.expired[WORDS] == 2
    assert result.deleted[WORDS].data_files == 1 and result.deleted[WORDS].bytes > 0
    assert not path.exists()  # really gone from disk
    assert rows(catalog) == Counter({"c": 1})
    assert referenced_by_metadata(catalog) <= files_under(local(catalog.load_table(WORDS).metadata.location))
    data = [s for s in catalog.load_table(WORDS).metadata.snapshots if P.FENCE_REASON not in s.summary.additional_properties]
    assert [s.snapshot_id for s in data] == [head]  # and the fence ref's snapshot (expiry took the fence)


def test_expire_keeps_a_file_a_retained_snapshot_references_under_another_spelling(cc, catalog):
    table = catalog.create_table(WORDS, schema=words().schema)
    path, spelled = spark_spelled_file(table, "shared.parquet", "a", "b")
    table.add_files([spelled], snapshot_properties={P.BARRIER: "1000"})  # file:/x
    catalog.load_table(WORDS).delete(AlwaysTrue(), snapshot_properties={P.BARRIER: "2000"})
    catalog.load_table(WORDS).add_files([f"file://{path}"], snapshot_properties={P.BARRIER: "3000"})  # file:///x
    cc.ingest(WORDS, words("c"), barrier=4000)

    result = cc.retention.expire([WORDS], EXPIRE_ALL)

    assert result.expired[WORDS] == 3
    assert result.deleted[WORDS].data_files == 0  # the expired snapshots' file is the retained one's
    assert result.deleted[WORDS].manifest_lists == 3
    assert path.exists()
    assert rows(catalog) == Counter({"a": 1, "b": 1, "c": 1})


def test_expire_deletes_exactly_the_files_only_expired_snapshots_referenced(cc, catalog):
    catalog.create_table(WORDS, schema=words().schema)
    for barrier, batch in ((1000, ["a", "b"]), (2000, ["c"]), (3000, ["d", "e"])):
        cc.ingest(WORDS, words(*batch), barrier=barrier)
    loaded = catalog.load_table(WORDS)
    loaded.overwrite(words("x", "y"), snapshot_properties={P.BARRIER: "4000"})  # replaces every file
    cc.ingest(WORDS, words("z"), barrier=5000)
    cc.ingest(WORDS, words("q"), barrier=6000)
    location = local(catalog.load_table(WORDS).metadata.location)
    data_before = files_under(location / "data")
    referenced_before = referenced_by_metadata(catalog)
    snapshots = catalog.load_table(WORDS).metadata.snapshots
    retained = snapshots[-2:]  # keep_last=2: the two newest ingests, both on top of the overwrite
    retained_files = {local(f) for s in retained
                      for f in catalog.load_table(WORDS).inspect.files(snapshot_id=s.snapshot_id)["file_path"].to_pylist()}
    assert len(data_before) == 6 and len(retained_files) == 3

    result = cc.retention.expire([WORDS], RetentionPolicy(older_than=0, keep_last=2, delete_files=True))

    deleted = result.deleted[WORDS]
    assert result.expired[WORDS] == len(snapshots) - 2
    data_after = files_under(location / "data")
    assert data_after == retained_files  # the files of the retained snapshots, and nothing else
    assert deleted.data_files == len(data_before - data_after) == 3
    # manifest lists and manifests of expired snapshots are gone, every retained one's are there
    on_disk = files_under(location)
    referenced_after = referenced_by_metadata(catalog)
    assert referenced_after <= on_disk
    gone = referenced_before - on_disk
    assert {p for p in referenced_before - referenced_after if p.name.startswith("snap-")} <= gone
    assert deleted.manifest_lists == len([p for p in gone if p.name.startswith("snap-")]) == len(snapshots) - 2
    assert deleted.manifests == len([p for p in gone if p.suffix == ".avro" and not p.name.startswith("snap-")])
    assert rows(catalog) == Counter({"x": 1, "y": 1, "z": 1, "q": 1})
    for snapshot in retained:
        assert sum(rows(catalog, snapshot_id=snapshot.snapshot_id).values()) == int(snapshot.summary["total-records"])


# --- the orphan sweep -------------------------------------------------------------------------------
def crashed_writer(catalog, *items: str) -> set[Path]:
    """What a writer that crashed before its catalog commit leaves: data file, manifest, manifest list."""
    table = catalog.load_table(WORDS)
    before = files_under(local(table.metadata.location))
    tx = table.transaction()
    tx.append(words(*items))  # pyiceberg writes the files here; the catalog commit never happens
    left = files_under(local(table.metadata.location)) - before
    assert {p.suffix for p in left} == {".parquet", ".avro"}
    assert any(p.name.endswith("-m0.avro") for p in left)  # the manifest
    return left


@pytest.fixture
def swept_table(cc, catalog):
    """A table with history (one file spelled the Spark way), a crashed writer's files and a planted orphan, all old."""
    table = catalog.create_table(WORDS, schema=words().schema)
    cc.ingest(WORDS, words("a", "b"), barrier=1000)
    _, spelled = spark_spelled_file(table, "spark-style.parquet", "c")
    catalog.load_table(WORDS).add_files([spelled], snapshot_properties={P.BARRIER: "2000"})
    cc.ingest(WORDS, words("d"), barrier=3000)
    location = local(catalog.load_table(WORDS).metadata.location)
    orphans = crashed_writer(catalog, "never", "committed")
    planted = location / "data" / "00000-0-planted-orphan.parquet"
    pq.write_table(words("orphan"), planted)
    orphans.add(planted)
    age_everything(location)
    young = location / "data" / "00001-0-writer-in-flight.parquet"
    pq.write_table(words("in", "flight"), young)
    # a minute old: well under the 1h safety floor, yet unambiguously older than a threshold of "now"
    # (written in the same millisecond as the sweep's clock reading, it would count as young)
    a_minute_ago = time.time() - 60
    os.utime(young, (a_minute_ago, a_minute_ago))
    return location, orphans, young


def test_orphan_sweep_deletes_old_unreferenced_files_and_nothing_referenced_or_young(cc, catalog, swept_table):
    location, orphans, young = swept_table
    referenced = referenced_by_metadata(catalog)
    every_snapshot = {s.snapshot_id: rows(catalog, snapshot_id=s.snapshot_id)
                      for s in catalog.load_table(WORDS).metadata.snapshots}
    on_disk = files_under(location)
    assert on_disk == referenced | orphans | {young}  # the independent census the sweep must reproduce
    orphan_bytes = sum(p.stat().st_size for p in orphans)

    result = cc.retention.remove_orphan_files([WORDS], older_than_ms="1d")

    swept = result.tables[WORDS]
    assert swept.skipped is None
    assert (swept.files, swept.referenced, swept.orphaned, swept.too_young) == (len(on_disk), len(referenced), len(orphans), 1)
    assert swept.deleted == len(orphans) and swept.bytes == swept.orphaned_bytes == orphan_bytes
    assert {local(p) for p in swept.orphan_files} == orphans
    assert files_under(location) == referenced | {young}  # orphans gone from disk, everything else there
    for snapshot_id, expected in every_snapshot.items():
        assert rows(catalog, snapshot_id=snapshot_id) == expected
    assert rows(catalog) == Counter({"a": 1, "b": 1, "c": 1, "d": 1})
    assert result.to_json()["tables"][WORDS]["deleted"] == len(orphans)
    json.dumps(result.to_json())


def test_orphan_sweep_dry_run_deletes_nothing(cc, catalog, swept_table):
    location, orphans, _ = swept_table
    before = files_under(location)
    result = cc.retention.remove_orphan_files(older_than_ms="1d", dry_run=True)
    swept = result.tables[WORDS]
    assert result.dry_run and swept.deleted == 0 and swept.bytes == 0
    assert swept.orphaned == len(orphans) and {local(p) for p in swept.orphan_files} == orphans
    assert files_under(location) == before


def test_orphan_sweep_threshold_keeps_files_younger_than_it(cc, catalog, swept_table):
    location, orphans, _ = swept_table
    before = files_under(location)
    result = cc.retention.remove_orphan_files(older_than_ms="3d")  # every orphan is 2 days old
    assert result.tables[WORDS].orphaned == 0 and result.tables[WORDS].too_young == len(orphans) + 1
    assert files_under(location) == before


def test_orphan_sweep_refuses_a_threshold_below_the_safety_floor(cc, catalog, swept_table):
    location, orphans, _ = swept_table
    before = files_under(location)
    for below in ("10m", 0, "59m"):
        with pytest.raises(InvalidInputError) as raised:
            cc.retention.remove_orphan_files(older_than_ms=below)
        message = str(raised.value)
        assert "in flight" in message and "--force" in message and "1h" in message
    assert files_under(location) == before
    forced = cc.retention.remove_orphan_files(older_than_ms=0, force=True, dry_run=True)
    assert forced.tables[WORDS].orphaned == len(orphans) + 1  # with force, even the young file counts
    assert files_under(location) == before


def test_orphan_sweep_skips_a_table_whose_metadata_cannot_be_read(cc, catalog, swept_table):
    location, orphans, _ = swept_table
    oldest = catalog.load_table(WORDS).metadata.snapshots[0]
    local(oldest.manifest_list).unlink()  # what that snapshot references is now unknown
    result = cc.retention.remove_orphan_files([WORDS], older_than_ms="1d")
    assert "nothing deleted" in result.tables[WORDS].skipped and result.tables[WORDS].deleted == 0
    assert orphans <= files_under(location)


def test_orphan_sweep_leaves_the_files_of_a_table_nested_in_the_location(cc, catalog, swept_table):
    location, orphans, _ = swept_table
    outer = catalog.load_table(WORDS).metadata.location
    catalog.create_table("demo.inner", schema=words().schema, location=f"{outer}/inner")
    cc.ingest("demo.inner", words("i"), barrier=1000)
    inner_files = files_under(location / "inner")
    age_everything(location / "inner")
    result = cc.retention.remove_orphan_files([WORDS], older_than_ms="1d")
    assert result.tables[WORDS].deleted == len(orphans)
    assert files_under(location / "inner") == inner_files
    assert rows(catalog, "demo.inner") == Counter({"i": 1})


def test_cli_expire_orphans(cc, catalog, swept_table, monkeypatch):
    from consistent_catalog.cli.main import cli

    location, orphans, _ = swept_table
    monkeypatch.setattr(ConsistentCatalog, "load", classmethod(lambda cls, name=None, **properties: cc))
    runner = CliRunner()

    def run(*args):
        return runner.invoke(cli, ["--catalog", "lake", "expire", *args])

    dry = run("--orphans", "--older-than", "1d", "--dry-run", "-o", "json")
    assert dry.exit_code == 0, dry.output
    payload = json.loads(dry.output)
    assert payload["dry_run"] and payload["tables"][WORDS]["orphaned"] == len(orphans)
    assert files_under(location) >= orphans
    text = run("--orphans", "--older-than", "1d", "--details", WORDS)
    assert text.exit_code == 0, text.output
    assert WORDS in text.output and "orphan" in text.output and not (orphans & files_under(location))
    refused = run("--orphans", "--older-than", "10m")
    assert refused.exit_code == 1 and refused.output.count("\n") == 1 and "--force" in refused.output
    assert run("--orphans").exit_code == 2  # --older-than is required
    assert run("--orphans", "--older-than", "1d", "--delete-files").exit_code == 2
    assert run("--force", "--older-than", "1d").exit_code == 2
    assert "--orphans" in run("--help").output


# --- S3 (moto): s3:// and s3a:// spellings of one object ---------------------------------------------
@pytest.mark.integration
def test_s3_expire_and_orphan_sweep_compare_s3_and_s3a_alike(s3_server, tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    bucket = s3_server.create_bucket()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"s3://{bucket}/warehouse",
                         **s3_server.properties())
    catalog.create_namespace("demo")
    cc = ConsistentCatalog(catalog)
    table = catalog.create_table(WORDS, schema=words().schema)
    prefix = urlsplit(table.metadata.location).path.lstrip("/")
    s3 = s3_server.client()

    def keys() -> set[str]:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])
        return {o["Key"] for o in listed}

    def put(name: str, *items: str) -> str:
        sink = pa.BufferOutputStream()
        pq.write_table(words(*items), sink)
        s3.put_object(Bucket=bucket, Key=f"{prefix}/data/{name}", Body=sink.getvalue().to_pybytes())
        return f"{prefix}/data/{name}"

    expired_key = put("expired.parquet", "a")
    kept_key = put("kept.parquet", "b")
    table.add_files([f"s3a://{bucket}/{expired_key}", f"s3a://{bucket}/{kept_key}"],
                    snapshot_properties={P.BARRIER: "1000"})
    catalog.load_table(WORDS).delete(AlwaysTrue(), snapshot_properties={P.BARRIER: "2000"})
    catalog.load_table(WORDS).add_files([f"s3://{bucket}/{kept_key}"], snapshot_properties={P.BARRIER: "3000"})
    result = cc.retention.expire([WORDS], EXPIRE_ALL)
    assert result.deleted[WORDS].data_files == 1
    assert expired_key not in keys() and kept_key in keys()
    assert rows(catalog) == Counter({"b": 1})

    orphan_key = put("orphan.parquet", "o")
    later = now_ms() + 2 * DAY  # S3 sets modification times itself: sweep "two days later"
    swept = cc.retention.remove_orphan_files([WORDS], older_than_ms="1d", now=later).tables[WORDS]
    assert swept.skipped is None
    assert swept.orphan_files == (f"s3://{bucket}/{orphan_key}",) and swept.deleted == 1
    assert orphan_key not in keys() and kept_key in keys()  # kept: referenced as s3:// only
    assert rows(catalog) == Counter({"b": 1})
