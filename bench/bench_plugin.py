"""Benchmark: a query's first table load through the consistent catalog plugin vs. the plain catalog.

Not a test. Two throw-away SQLite catalogs, read by one local Spark session (local[1]) in which each
has a plain Iceberg catalog and a consistent one (``jvm/spark-plugin``) over the same database:

- ``demo``: FLIP-276's three tables, written by ``consistent-catalog demo --engine pyiceberg``
  (``--demo-epochs`` epochs of ``--demo-rows`` words);
- ``synthetic``: ``--tables`` tables with ``--snapshots`` snapshots each, one lineage component
  (10 roots; t010..t019 derived from a root and the previous table, the rest from the previous table
  and, every third, from one more), every table complete at every barrier. Their v2 metadata JSON is written directly and registered in the
  catalog (no data files: loading a table reads only its metadata).

The timing runs inside the JVM (``io.consistentcatalog.bench.FirstLoad`` in build/jvm/spark-plugin-tests.jar, via py4j), median
of ``--repeat`` repetitions after ``--warmup`` dropped ones (a long-lived session's JIT), all in one run:

- plain_first / plain_all: Iceberg's SparkCatalog loads the first table / every table of the set;
- plugin_first_cold: the consistent catalog's first load of a statement with empty caches: list the
  catalog, load every table, resolve the cut (the JVM port of the resolver), serve the first table;
- plugin_first_warm: the same in the next statement with nothing changed (one listing query; a table
  still at the listed metadata file is not even refreshed); plugin_all_*: plus serving every other
  table of the set.

- ``synthetic-rest+Nms``: the same synthetic tables served by the project's REST server
  (tests/harness/rest_server.py, over the synthetic SQLite file) behind ``tests/harness/proxy.py``,
  which delays every request by ``--rest-latency-ms`` (a catalog that far away): the plain catalog is
  Iceberg's SparkCatalog with ``type=rest``, loading the tables one by one through the proxy.

Each set is read through two consistent catalogs over the same database in the same session: the
configured one (``lake_consistent``: its tables load on ``load-threads`` threads, default 8; over REST
the warm statement's conditional refreshes run on ``refresh-threads``, default 32) and
``<name>_consistent_seq`` with ``load-threads=1`` and ``refresh-threads=1`` (one table after the other
on the querying thread), timed in the same repetitions, interleaved. ``--only-rest`` times the REST set
alone (the SQLite sets are still built: the REST server serves the synthetic one).

The ratio the issue asks for: plugin_first_cold / plain_all (the plugin's first load against the
plain load of the same tables; the median of that ratio within each repetition), target <= 1.10.
The cold load is split (inside the plugin) into
listing the catalog, waiting for the table loads after the listing, building the table states (summed
over tables) and resolving. Loading on several threads lowers the wait, not the work, so the CPU time
is compared too: cold CPU (querying thread + loading threads) / plain CPU (querying thread). On a busy
machine the paired wall ratio moves by +-15 % between runs; the CPU ratio moves less.

Usage:
    python -m bench.bench_plugin [--tables 100] [--snapshots 1000] [--demo-epochs 20] [--demo-rows 200]
                                 [--rest-latency-ms 20 | --no-rest | --only-rest] [--load-threads N]
                                 [--refresh-threads N] [--repeat 5] [--warmup 3]
                                 [--markdown] [--dir D]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from tests.conformance.corpus import metadata_json
from tests.harness.spark_plugin import plugin_conf

from consistent_catalog import properties as P
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.state import TableState, encode_summary_sources, encode_table_sources

T0 = 1_700_000_000_000
DEMO_TABLES = ("demo.words", "demo.word_counts", "demo.count_histogram")


def synthetic_states(tables: int, snapshots: int) -> list[TableState]:
    """One lineage component: t000..t009 roots, t010..t019 derived from root i-10 and the previous table,
    the rest from the previous table (every third also from table i/2), one epoch per barrier, each reading
    its sources' snapshots at that barrier."""
    names = [f"bench.t{i:03d}" for i in range(tables)]
    def sources_of(i: int) -> list[int]:
        if i < 10:
            return []
        if i < 20:
            return [i - 10] + ([i - 1] if i > 10 else [])
        return [i - 1] + ([i // 2] if i % 3 == 0 else [])

    sources = {i: sources_of(i) for i in range(tables)}
    states = []
    for i, name in enumerate(names):
        records = {}
        for k in range(1, snapshots + 1):
            sid = i * 1_000_000 + k
            barrier = T0 + 1000 * k
            summary = {P.BARRIER: str(barrier), "added-data-files": "1", "added-records": "1", "total-records": str(k)}
            if sources[i]:
                summary[P.JOB] = f"job-{i:03d}"
                summary[P.SOURCES] = encode_summary_sources({names[s]: s * 1_000_000 + k for s in sources[i]})
            records[sid] = SnapshotRecord(sid, sid - 1 if k > 1 else None, barrier + 5, "append", summary)
        properties = {}
        if sources[i]:
            properties = {P.JOB: f"job-{i:03d}", P.SOURCES: encode_table_sources([names[s] for s in sources[i]])}
        states.append(TableState(name, records, {P.MAIN_BRANCH: i * 1_000_000 + snapshots}, properties))
    return states


def build_synthetic(root: Path, tables: int, snapshots: int) -> tuple[str, Path, list[str]]:
    warehouse = root / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{root}/catalog.db"
    catalog = SqlCatalog("big", uri=uri, warehouse=f"file://{warehouse}")
    catalog.create_namespace("bench")
    names = []
    for state in synthetic_states(tables, snapshots):
        metadata = metadata_json(state)
        location = warehouse / "bench.db" / state.identifier.split(".")[1]
        metadata["location"] = f"file://{location}"
        path = location / "metadata" / f"00000-{uuid.uuid4()}.metadata.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(metadata), encoding="utf-8")
        catalog.register_table(state.identifier, f"file://{path}")
        names.append(state.identifier)
    catalog.engine.dispose()
    return uri, warehouse, names


def build_demo(root: Path, epochs: int, rows: int) -> tuple[str, Path]:
    cli = Path(sys.executable).parent / "consistent-catalog"
    subprocess.run(
        [str(cli), "demo", "--dir", str(root), "--epochs", str(epochs), "--rows-per-epoch", str(rows), "--engine",
         "pyiceberg"],
        check=True, capture_output=True,
    )
    return f"sqlite:///{root}/catalog.db", root / "warehouse"


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--snapshots", type=int, default=1000)
    parser.add_argument("--demo-epochs", type=int, default=20)
    parser.add_argument("--demo-rows", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3, help="repetitions run first and dropped (JIT warm-up)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--rest-latency-ms", type=float, default=20, help="delay of every request in the REST set")
    parser.add_argument("--no-rest", action="store_true", help="leave out the synthetic set served over REST")
    parser.add_argument("--only-rest", action="store_true", help="time only the synthetic set served over REST")
    parser.add_argument("--load-threads", type=int, default=None,
                        help="the consistent catalogs' load-threads option (default: the plugin's own default)")
    parser.add_argument("--refresh-threads", type=int, default=None,
                        help="the consistent catalogs' refresh-threads option (default: the plugin's own default)")
    args = parser.parse_args(argv)
    if args.only_rest and args.no_rest:
        parser.error("--only-rest and --no-rest leave nothing to time")

    from consistent_catalog.spark.lines import current_line
    from consistent_catalog.spark.session import build_session, checkout_line_dir

    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-plugin-"))
    started = time.monotonic()
    demo_uri, demo_warehouse = build_demo(work / "demo", args.demo_epochs, args.demo_rows)
    big_uri, big_warehouse, big_tables = build_synthetic(work / "synthetic", args.tables, args.snapshots)
    print(f"built the lakes in {time.monotonic() - started:.0f}s under {work}", file=sys.stderr)
    conf = plugin_conf(demo_uri, demo_warehouse)
    conf.update(plugin_conf(big_uri, big_warehouse, name="big", consistent="big_consistent"))
    sets = [("demo", "lake", DEMO_TABLES), ("synthetic", "big", big_tables)]
    servers: list[Any] = []
    if not args.no_rest:  # the synthetic tables again, served over REST from the same SQLite file, far away
        from tests.harness.proxy import DelayProxy
        from tests.harness.rest_server import RestCatalogServer

        server = RestCatalogServer(work / "rest-server", jdbc_uri=f"jdbc:sqlite:{work}/synthetic/catalog.db",
                                   warehouse=f"file://{big_warehouse}", catalog_name="big", catalogs_dir=False).start()
        servers.append(server)
        proxy = DelayProxy(server.port, delay_ms=args.rest_latency_ms).start()  # type: ignore[arg-type]
        servers.append(proxy)
        rest_conf = plugin_conf(proxy.uri, "", name="rbig", consistent="rbig_consistent")
        jars = conf["spark.jars"].split(",")  # a REST catalog's conf names no JDBC driver: keep the others'
        rest_conf["spark.jars"] = ",".join(jars + [j for j in rest_conf["spark.jars"].split(",") if j not in jars])
        conf.update(rest_conf)
        sets.append((f"synthetic-rest+{args.rest_latency_ms:g}ms", "rbig", big_tables))
        if args.only_rest:
            sets = sets[-1:]
    for option, value in (("load-threads", args.load_threads), ("refresh-threads", args.refresh_threads)):
        if value is not None:
            for _, plain, _ in sets:
                conf[f"spark.sql.catalog.{plain}_consistent.{option}"] = str(value)
    for plain in [plain for _, plain, _ in sets]:  # the same catalog loading one table after the other
        prefix = f"spark.sql.catalog.{plain}_consistent"
        conf.update({prefix + "_seq" + k[len(prefix):]: v for k, v in list(conf.items()) if k.startswith(prefix)})
        conf[f"{prefix}_seq.plain-catalog"] = plain
        conf[f"{prefix}_seq.load-threads"] = "1"
        conf[f"{prefix}_seq.refresh-threads"] = "1"
    load_before = _load()
    line = current_line()
    tests_jar = next(checkout_line_dir(line).glob(f"{line.plugin_artifact}-*-tests.jar"))  # FirstLoad, not in the plugin jar
    conf["spark.jars"] += f",{tests_jar}"
    spark = build_session(demo_uri, demo_warehouse, app_name="bench-plugin", master="local[1]", extra_conf=conf)
    try:
        bench = spark._jvm.io.consistentcatalog.bench.FirstLoad  # noqa: SLF001 - py4j
        results: dict[str, dict[str, Any]] = {}
        for label, plain, tables in sets:
            consistent = f"{plain}_consistent,{plain}_consistent_seq"  # timed in the same repetitions, interleaved
            measured = json.loads(
                bench.run(spark._jsparkSession, plain, consistent, ",".join(tables), args.repeat, args.warmup)
            )
            for catalog, r in measured.items():
                results[f"{label} {catalog}"] = r
    finally:
        spark.stop()
        for running in reversed(servers):
            running.stop()

    rows = []
    for key, r in results.items():
        label, catalog = key.split()
        snapshots = f"{args.demo_epochs} epochs" if label == "demo" else f"{args.snapshots}"  # synthetic sets too
        rows.append(
            (
                label, catalog, r["tables"], snapshots, r["plain_first"], r["plain_all"], r["plugin_first_cold"],
                r["cold_over_plain_all"], r["plugin_first_warm"], r["plugin_first_warm"] / r["plain_all"],
                r["plugin_all_cold"] / r["plain_all"],
                r["cold_list"], r["cold_load"], r["cold_states"], r["cold_resolve"],
                r["cold_cpu_over_plain_cpu"],
            )
        )
    command = "python -m bench.bench_plugin " + shlex.join(argv if argv is not None else sys.argv[1:])
    header = ("set", "catalog", "tables", "snapshots/table", "plain first (ms)", "plain all (ms)",
              "plugin first, cold (ms)", "cold / plain all", "plugin first, warm (ms)", "warm / plain all",
              "plugin all, cold / plain all",
              "cold: list (ms)", "cold: loads after the list (ms)", "cold: states, summed (ms)",
              "cold: resolve (ms)", "cold CPU / plain all CPU")
    if args.markdown:
        print(f"`{command.strip()}` — {platform.machine()}, {os.cpu_count()} cores, "
              f"median of {args.repeat} after {args.warmup} warm-up runs; "
              f"load average {load_before} before, {_load()} after\n")
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row) + " |")
    else:
        print(json.dumps({"command": command.strip(), "results": results}, indent=1))
        for row in rows:
            print("  ".join(f"{h}={v:.2f}" if isinstance(v, float) else f"{h}={v}" for h, v in zip(header, row)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
