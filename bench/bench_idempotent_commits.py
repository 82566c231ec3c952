"""Benchmark: what settling a lost commit answer costs, read back or settled by the server's Idempotency-Key (issue 44).

Not a test. Two of our REST servers (``tests/harness/rest_server.py``): one started with
``--idempotency-key-lifetime PT10M`` (it advertises the lifetime and applies each key once), one without (no key is
sent). On each, a table ``demo.words`` grown to ``--snapshots`` snapshots by direct appends (its metadata grows with
them: what a read-back loads), then ``--rounds`` unkeyed ingests of two rows through ``FaultProxy``, each in three
kinds, timed: no fault; the commit's answer lost once after the server applied it (504); and on the keyed server the
same. The lost answer is settled by a read-back (a load of the table, then the metadata log walked to the commit's
own file) without a key, by a resend under the key with one (protocol §6.8). Reported per server: the ingest's
median and p95 with and without the lost answer, and the requests each lost-answer ingest sent (commits, loads).
At the end, with pyiceberg through a direct client: every ingest's rows once.

    .venv/bin/python -m bench.bench_idempotent_commits --snapshots 300 --rounds 15
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import describe, load


def run(args: argparse.Namespace) -> dict[str, Any]:
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType
    from tests.harness.fault_proxy import FaultProxy
    from tests.harness.rest_server import RestCatalogServer

    from consistent_catalog import ConsistentCatalog

    schema = Schema(NestedField(1, "word", StringType(), required=False))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-idem-") as tmp:
        for label, lifetime in (("keyed (PT10M)", "PT10M"), ("no key", None)):
            home = Path(tmp) / (lifetime or "plain")
            with RestCatalogServer(home, idempotency_key_lifetime=lifetime) as server:
                direct = server.catalog(warehouse=f"file://{home}/warehouse")
                direct.create_namespace("demo")
                table = direct.create_table("demo.words", schema=schema)
                for i in range(args.snapshots):
                    table.append(pa.table({"word": [f"w{i}"]}, schema=schema.as_arrow()))
                timings: dict[str, list[float]] = {"no fault": [], "answer lost": []}
                requests: list[Counter[str]] = []
                with FaultProxy(server.port) as proxy:
                    cc = ConsistentCatalog(load_catalog("lake", **{**direct.properties, "uri": proxy.uri}))
                    cc.ingest("demo.words", pa.table({"word": ["warm", "up"]}), barrier=1)  # config, first loads
                    for r in range(args.rounds):
                        for kind in ("no fault", "answer lost"):
                            before = len(proxy.events)
                            if kind == "answer lost":
                                if lifetime is None:
                                    proxy.script("commit", "lost")
                                else:
                                    proxy.lose_first_of_each_key = True
                            started = time.perf_counter()
                            cc.ingest("demo.words", pa.table({"word": [f"r{r}", kind]}), barrier=2 + 2 * r
                                      + (kind == "answer lost"))
                            timings[kind].append((time.perf_counter() - started) * 1000)
                            proxy.lose_first_of_each_key = False
                            if kind == "answer lost":
                                requests.append(Counter(route for route, *_ in proxy.events[before:]))
                rows = direct.load_table("demo.words").scan().to_arrow().num_rows
                expected = args.snapshots + 2 + 2 * 2 * args.rounds
                results[label] = {
                    "no fault": describe(timings["no fault"], "ms"),
                    "answer lost": describe(timings["answer lost"], "ms"),
                    "cost of a lost answer (ms, medians)": round(statistics.median(timings["answer lost"])
                                                                 - statistics.median(timings["no fault"]), 1),
                    "requests per lost-answer ingest": {route: n / len(requests) for route, n in
                                                        sorted(sum(requests, Counter()).items())},
                    "rows once": rows == expected,
                }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshots", type=int, default=300, help="snapshots the table holds before the rounds")
    parser.add_argument("--rounds", type=int, default=15, help="ingests of each kind per server")
    args = parser.parse_args(argv)
    print(f"load before: {load()}", file=sys.stderr)
    results = run(args)
    for label, figures in results.items():
        print(f"## {label}")
        for key, value in figures.items():
            print(f"- {key}: {value}")
    print(f"\n`python -m bench.bench_idempotent_commits --snapshots {args.snapshots} --rounds {args.rounds}` on "
          f"{platform.platform()}, Python {platform.python_version()}; load {load()}")
    return 0 if all(f["rows once"] for f in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
