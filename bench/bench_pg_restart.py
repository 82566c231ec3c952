"""Benchmark: what a PostgreSQL restart that is waited out costs a Spark SQL epoch (issue 36, protocol §6.8).

Not a test. One local[2] Spark session (``build_session`` + the plugin jar) on a PostgreSQL catalog (a throw-away
server, durable: fsync on), the word-count pipeline of ``tests/harness/sql_writer.py``: a root ``demo.words`` and
the job ``word-count``'s sink ``demo.word_counts``. A round is a keyed ingest of a few words
(``INSERT INTO lake_consistent.demo.words``, not timed) and the epoch, timed::

    INSERT OVERWRITE lake_consistent.demo.word_counts
      SELECT word, count(*) AS cnt FROM lake_consistent.demo.words GROUP BY word

``--epochs`` rounds without faults, then ``--epochs`` rounds in which PostgreSQL is restarted in immediate mode
(``pg_ctl stop -m immediate``: connections cut, as in a crash; down ``--down`` seconds; ``pg_ctl start -w``)
starting at a random moment inside the epoch statement (uniform over the median fault-free epoch time); the next
round starts once the server is back. Reported:
the epoch's median and p95 with and without the restart, the cost of a restart (the difference of medians), and
how long the database was away (stop to a started server, measured around ``pg_ctl``): what is left of the cost
is the plugin's backoff (50 ms doubling to 2 s, full jitter) and the reconnections. At the end, with pyiceberg:
one epoch on ``main`` per round, each equal to a recount of ``demo.words`` at its recorded input
(``check_exactly_once``), and every ingest key once.

    .venv/bin/python -m bench.bench_pg_restart --epochs 10 --down 1
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import load, quantile


def run(args: argparse.Namespace) -> dict[str, Any]:
    from pyiceberg.catalog.sql import SqlCatalog
    from tests.harness.servers import PostgresServer, postgres_sql_catalog
    from tests.harness.sql_writer import (
        DRIVER_CONF,
        JOB,
        WORD_COUNT_SQL,
        batch,
        check_exactly_once,
        create_lake,
        ingest_keys,
        ingest_statements,
    )

    from consistent_catalog.spark.session import build_session

    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-pg-restart-") as tmp, PostgresServer.start(fast=False) as server:
        work = Path(tmp)
        catalog = postgres_sql_catalog(server, work / "warehouse")
        lake, _ = create_lake(catalog, catalog.properties["uri"], f"file://{work}/warehouse", work)
        spark = build_session(lake.uri, lake.warehouse, app_name="bench-pg-restart", extra_conf=DRIVER_CONF)
        spark.sql(f"SET spark.sql.consistent.job={JOB}")
        rounds = 0

        def round_(restart_after: float | None) -> tuple[float, float | None]:
            nonlocal rounds
            rounds += 1
            for statement in ingest_statements(f"load-{rounds}", batch(rounds)):
                spark.sql(statement)
            spark.sql(f"SET spark.sql.consistent.job={JOB}")
            away: list[float] = []
            restarter = None
            if restart_after is not None:
                def restart() -> None:
                    time.sleep(restart_after)
                    started = time.monotonic()
                    server.restart(down_seconds=args.down)
                    away.append(time.monotonic() - started)

                restarter = threading.Thread(target=restart)
            started = time.monotonic()
            if restarter is not None:
                restarter.start()
            spark.sql(WORD_COUNT_SQL)
            elapsed = time.monotonic() - started
            if restarter is not None:
                restarter.join()
            return elapsed, (away[0] if away else None)

        for _ in range(args.warmup):
            round_(None)
        quiet = [round_(None)[0] for _ in range(args.epochs)]
        window = statistics.median(quiet)
        restarted: list[float] = []
        away: list[float] = []
        for _ in range(args.epochs):
            elapsed, gone = round_(rng.uniform(0.0, window))
            restarted.append(elapsed)
            if gone is not None:
                away.append(gone)
        spark.stop()
        # fresh connections: pyiceberg's pool still holds those the restarts cut
        fresh = dataclasses.replace(lake, catalog=SqlCatalog("lake", uri=lake.uri, warehouse=lake.warehouse))
        epochs = check_exactly_once(fresh)
        assert len(epochs) == rounds, f"{len(epochs)} epochs on main after {rounds} rounds"
        keys = ingest_keys(fresh.table("demo.words"))
        assert keys == Counter({f"load-{r}": 1 for r in range(1, rounds + 1)}), keys
        return {"quiet": quiet, "restarted": restarted, "away": away, "epochs": len(epochs), "rounds": rounds,
                "restarts": server.restarts}


def report(result: dict[str, Any], args: argparse.Namespace, before: str) -> str:
    quiet, restarted, away = result["quiet"], result["restarted"], result["away"]

    def row(label: str, values: list[float]) -> str:
        return (f"| {label} | {len(values)} | {statistics.median(values) * 1000:.0f} | "
                f"{quantile(values, 0.95) * 1000:.0f} | {min(values) * 1000:.0f} | {max(values) * 1000:.0f} |")

    cost = statistics.median(restarted) - statistics.median(quiet)
    lines = [
        f"`python -m bench.bench_pg_restart --epochs {args.epochs} --down {args.down:g} --seed {args.seed}` on "
        f"{platform.platform()}, {__import__('os').cpu_count()} cores, Python {platform.python_version()}; "
        f"load average {before} -> {load()}",
        "",
        "| epoch | n | ms p50 | ms p95 | ms min | ms max |",
        "|---|---:|---:|---:|---:|---:|",
        row("no restart", quiet),
        row(f"PostgreSQL restarted inside it (down {args.down:g} s)", restarted),
        row("database away (pg_ctl stop -m immediate .. start -w)", away),
        "",
        f"Cost of a restart that is waited out: {cost * 1000:+.0f} ms per epoch (median with - median without); the "
        f"database was away {statistics.median(away) * 1000:.0f} ms (median). {result['restarts']} restarts, "
        f"{result['rounds']} rounds: every epoch published once and equals its recount, every key once.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=10, help="timed epochs per mode (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default %(default)s)")
    parser.add_argument("--down", type=float, default=1.0, help="seconds the server stays down (default %(default)s)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    before = load()
    result = run(args)
    print(report(result, args, before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
