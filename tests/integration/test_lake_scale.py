"""The lake at scale, small (issue 45): a warehouse-shaped lake of 200 tables and 40 jobs, 8 writer processes mixing
keyed ingests and epochs on PostgreSQL while a reader resolves cuts and ``status``; the full sizes are
``bench/bench_lake_scale.py``'s.

What is checked comes from outside the code under test: every sink's ``main`` holds each barrier once, from one
attempt (``tests/harness/main_epochs``); every ingest key a writer saw land is on its root's ``main`` once and no
other key is; and every cut of all tables the reader resolved while the writers ran, and the one after, is recounted
with plain pyiceberg scans: each derived table holds, per root upstream of it, exactly the rows that root holds at
the cut (``recount_problems``).
"""

from __future__ import annotations

import pytest
from bench.bench_lake_scale import CatalogArgs, create_lake, final_checks, generate, run_lake

from tests.harness.servers import PostgresServer

pytestmark = [pytest.mark.integration]


def test_a_lake_of_200_tables_and_8_writers_stays_consistent(postgres_server: PostgresServer, tmp_path) -> None:
    shape = generate(200, 40, seed=45)
    (tmp_path / "warehouse").mkdir()
    args = CatalogArgs(postgres_server.uri(postgres_server.create_database()), f"file://{tmp_path}/warehouse")
    create_lake(args, shape, threads=2, plain=False)

    run = run_lake(args, shape, writers=8, duration=12, ingest_every=4, rows=3, check_every=1, pg=True, plain=False,
                   timeout=300)
    writers, reader = run["reports"], run["reader"]
    keys = [*run["seeded"], *(tuple(k) for r in writers for k in r["keys"])]
    checks = final_checks(args, shape, keys, plain=False)

    errors = [line for r in writers for line in r["errors"]] + reader["errors"]
    assert sum(r["error_count"] for r in writers) + reader["error_count"] == 0, errors
    assert sum(r["ingests"] for r in writers) > 0 and sum(r["epochs"] for r in writers) > 0, writers
    assert checks["problems"] == [], checks["problems"][:10]
    assert checks["final_barrier"] is not None
    assert reader["problem_count"] == 0, reader["problems"]
    assert [line for r in writers for line in r["inconsistent"]] == []  # no epoch read sources that disagree
    assert checks["epochs_checked"] >= len(shape.derived)  # every sink published at least one epoch


def _hot_writer(uri: str, warehouse: str, writer: int, batches: int, ready) -> list[str]:
    """One process of the hot-root test: ``batches`` keyed one-row ingests into ``hot.root`` (errors returned)."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from consistent_catalog import ConsistentCatalog

    cc = ConsistentCatalog(SqlCatalog("lake", uri=uri, warehouse=warehouse))
    errors = []
    ready.wait(120)
    for batch in range(batches):
        try:
            cc.ingest("hot.root", pa.table({"writer": [writer], "batch": [batch]}), key=f"w{writer}-b{batch}")
        except Exception as exc:  # noqa: BLE001 - returned, asserted empty
            errors.append(f"{type(exc).__name__}: {exc}")
    return errors


def test_every_writer_into_one_root_lands_each_key_once(postgres_server: PostgresServer, tmp_path) -> None:
    """A hot root (docs/scaling.md): 8 processes ingest keyed batches into one root at once. Every ingest lands,
    however often the catalog refuses it because another landed first (it plans again, its data files kept), and
    each key is once on main, as plain pyiceberg reads the root back."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    uri, warehouse = postgres_server.uri(postgres_server.create_database()), f"file://{tmp_path}/warehouse"
    (tmp_path / "warehouse").mkdir()
    catalog = SqlCatalog("lake", uri=uri, warehouse=warehouse)
    catalog.create_namespace("hot")
    catalog.create_table("hot.root", schema=pa.schema([("writer", pa.int64()), ("batch", pa.int64())]))
    writers, batches = 8, 6
    context = mp.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(writers, mp_context=context) as pool:
        ready = manager.Barrier(writers)
        errors = [e for f in [pool.submit(_hot_writer, uri, warehouse, w, batches, ready) for w in range(writers)]
                  for e in f.result(timeout=300)]
    assert errors == []
    root = catalog.load_table("hot.root")
    rows = root.scan().to_arrow().to_pylist()
    assert sorted((r["writer"], r["batch"]) for r in rows) == [(w, b) for w in range(writers) for b in range(batches)]
    keys = [s.summary.additional_properties.get("consistent.ingest-key") for s in root.snapshots() if s.summary]
    assert sorted(k for k in keys if k) == sorted(f"w{w}-b{b}" for w in range(writers) for b in range(batches))
