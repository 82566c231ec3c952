"""One SQL epoch's catalog calls on a Hive Metastore, on Glue and on our REST server (issue 44).

What Spark sends the catalog for one ``INSERT OVERWRITE`` epoch into a derived table through ``<catalog>_consistent``
(``SET spark.sql.consistent.job=...``), in steady state (after a first epoch that registered the job and warmed the
session's tables), beside the same statement through the plain Iceberg catalog (no job: Iceberg's own overwrite).
Each catalog is reached through a counting proxy (``tests/harness/request_counts.py``): the Hive Metastore's Thrift
calls (``get_table``, ``lock``, ``alter_table``...), Glue's API calls (the ``X-Amz-Target`` of each request:
``GetTable``, ``UpdateTable``...), our REST server's HTTP requests by kind. The tables are made and the source is
ingested with pyiceberg directly on each server (not counted); each counted epoch's rows are checked against a
recount of its recorded input.

Servers: ``HiveMetastore`` (pyspark's jars, Derby) and ``MotoGlue`` (moto, ``VersionId`` checked as Glue does) from
``tests/harness/metastores.py``; ``RestCatalogServer`` (``tests/harness/rest_server.py``). One Spark session (local[2])
with all three catalogs.

Usage::

    python -m bench.bench_catalog_calls [--catalogs hive,glue,rest] [--epochs 3] [--markdown] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import load

KINDS = ("hive", "glue", "rest")


def start_servers(kinds: list[str], directory: Path, stack: ExitStack) -> dict[str, Any]:
    from tests.harness.metastores import HiveMetastore, MotoGlue
    from tests.harness.rest_server import RestCatalogServer

    servers: dict[str, Any] = {}
    for kind in kinds:
        if kind == "hive":
            servers[kind] = stack.enter_context(HiveMetastore.start(directory / kind))
        elif kind == "glue":
            servers[kind] = stack.enter_context(MotoGlue.start(directory / kind))
        else:
            servers[kind] = stack.enter_context(RestCatalogServer(directory / kind))
    return servers


def catalog_uri(kind: str, server: Any, port: int | None = None) -> str:
    """The catalog URI ``spark-conf`` takes for ``server`` (reached on ``port``: a proxy's; default its own)."""
    from tests.harness.metastores import glue_catalog_uri

    address = f"127.0.0.1:{server.port if port is None else port}"
    return {"hive": f"thrift://{address}", "glue": glue_catalog_uri(f"http://{address}"), "rest": f"http://{address}"}[kind]


def iceberg_settings(kind: str, server: Any, port: int) -> dict[str, str]:
    """Iceberg's Spark settings for ``server`` reached on ``port``, as ``spark-conf`` renders them (unprefixed)."""
    from consistent_catalog.spark.session import spark_conf

    prefix = "spark.sql.catalog.x."
    conf = spark_conf(catalog_uri(kind, server, port), server.warehouse, name="x", consistent=False)
    return {key.removeprefix(prefix): value for key, value in conf.items() if key.startswith(prefix)}


def session(servers: dict[str, Any]) -> Any:
    """One Spark session whose jars serve every catalog (Glue's AWS SDK bundle included)."""
    from consistent_catalog.spark.session import build_session, spark_conf

    jars: list[str] = []
    for kind, server in servers.items():
        for jar in spark_conf(catalog_uri(kind, server), server.warehouse).get("spark.jars", "").split(","):
            if jar and jar not in jars:
                jars.append(jar)
    from tests.harness.metastores import GLUE_ENV

    os.environ.update(GLUE_ENV)  # Iceberg's AWS SDK reads Glue's credentials there (before the JVM starts)
    kind, first = next(iter(servers.items()))
    return build_session(catalog_uri(kind, first), first.warehouse, name="base", app_name="bench-catalog-calls",
                         extra_conf={"spark.jars": ",".join(jars)})


def plain_calls(spark: Any, proxy: Any, plain: str, ns: str) -> tuple[Counter[str], list[str]]:
    """The same statement through the plain Iceberg catalog into a table of its own (a first one warms it)."""
    statement = (f"INSERT OVERWRITE {plain}.{ns}.plain_counts SELECT word, count(*) AS cnt "
                 f"FROM {plain}.{ns}.words GROUP BY word")
    spark.sql(f"CREATE TABLE {plain}.{ns}.plain_counts (word string, cnt bigint) USING iceberg")
    spark.sql(statement)
    proxy.take()
    spark.sql(statement)
    return proxy.take()


def measure(kind: str, server: Any, spark: Any, epochs: int) -> dict[str, Any]:
    from tests.harness.request_counts import GLUE, REST, THRIFT, CountingProxy, counted_sql_epochs, register_catalogs

    proxy = CountingProxy(server.port, {"hive": THRIFT, "glue": GLUE, "rest": REST}[kind]).start()
    consistent = register_catalogs(spark, f"calls_{kind}", iceberg_settings(kind, server, proxy.port))
    direct = server.catalog(warehouse=server.warehouse) if kind == "rest" else server.catalog()
    direct.create_namespace("calls")
    counted = counted_sql_epochs(spark, proxy, consistent, direct, "calls", epochs=epochs)
    plain, plain_log = plain_calls(spark, proxy, f"calls_{kind}", "calls")
    return {"catalog": kind, "epochs": [dict(c) for c, _ in counted], "epoch_logs": [log for _, log in counted],
            "plain": dict(plain), "plain_log": plain_log}


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| catalog | one epoch through `_consistent` (steady state) | total | the plain `INSERT OVERWRITE` | total |",
             "|---|---|---:|---|---:|"]
    for row in rows:
        epochs = row["epochs"]
        same = all(e == epochs[0] for e in epochs)
        shown = ", ".join(f"{k} {v}" for k, v in sorted(epochs[0].items()))
        totals = sorted({sum(e.values()) for e in epochs})
        plain = ", ".join(f"{k} {v}" for k, v in sorted(row["plain"].items()))
        lines.append(f"| {row['catalog']} | {shown}{'' if same else ' (epochs differ: see --json)'} | "
                     f"{'–'.join(map(str, totals))} | {plain} | {sum(row['plain'].values())} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalogs", default=",".join(KINDS), help="which of hive, glue, rest (default: all)")
    parser.add_argument("--epochs", type=int, default=3, help="counted epochs per catalog (after one warm-up)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", action="store_true", help="every count and every call, in order")
    parser.add_argument("--dir", type=Path, default=None, help="where the servers keep their files (default: temporary)")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.catalogs.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown catalog {', '.join(unknown)}: choose from {', '.join(KINDS)}")
    before = load()
    with ExitStack() as stack:
        directory = args.dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-calls-")))
        servers = start_servers(kinds, directory, stack)
        spark = session(servers)
        stack.callback(spark.stop)
        rows = []
        for kind, server in servers.items():
            rows.append(measure(kind, server, spark, args.epochs))
            print(f"{kind}: {rows[-1]['epochs']} (plain {rows[-1]['plain']})", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    if args.markdown or not args.json:
        print(markdown(rows))
        print(f"\nload average before {before}, after {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
