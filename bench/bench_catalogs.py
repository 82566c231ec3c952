"""Benchmark P1r per REST server: cold and warm resolution on our server and on servers we did not write (issue 31).

Not a test. ``bench_resolve``'s P1r rows (``--tables`` x ``--snapshots``: (a) pyiceberg's bare sequential loads,
(o) the old resolve, (b) cold, (w) warm, (1) one table changed), measured the same way (``measure_all``: variants
interleaved, order rotated), on each server in turn, directly and through ``tests/harness/proxy.py`` delaying every
request by ``--latency-ms``:

  ours        ``jvm/rest-server`` (tests/harness/rest_server.py): ETags, 304s
  fixture     Iceberg's REST fixture 1.11.0 (tests/harness/third_party.py): ETags behind Jetty's gzip (the loader
              sends them back without Jetty's ``--gzip`` suffix: docs/catalogs.md), one catalog per server
  hive        a Hive Metastore 2.3 from pyspark's jars (tests/harness/metastores.py): pointers by
              ``get_table_objects_by_name``, one call per database (issue 44); directly only (Thrift: no HTTP proxy)
  glue        moto's Glue server, patched to check ``VersionId`` as Glue does: pointers by ``GetTables``; directly only

The same generated grid (``bench_resolve.build``) is registered in each server (``register_copies``).

Usage:
    python -m bench.bench_catalogs [--tables 100] [--snapshots 1000] [--latency-ms 20] [--repeat 3]
                                   [--servers ours,fixture,hive,glue] [--markdown]
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import tempfile
from contextlib import ExitStack

from bench.bench_resolve import NAMESPACE, answers_alone, build, check, measure_all, report_all

SERVERS = ("ours", "fixture", "hive", "glue")


def register(fixture: object, catalog: object) -> None:
    """``bench_resolve.register_copies`` for one server after another: each registers the same copies (without the
    metadata log Java refuses), written once."""
    import json

    catalog.create_namespace(NAMESPACE)  # type: ignore[attr-defined]
    for name in fixture.tables:  # type: ignore[attr-defined]
        table = fixture.catalog.load_table(name)  # type: ignore[attr-defined]
        copy = table.metadata_location.replace(".metadata.json", "-served.metadata.json")
        with table.io.new_input(table.metadata_location).open() as stream:
            document = json.loads(stream.read())
        document["metadata-log"] = []
        with table.io.new_output(copy).create(overwrite=True) as stream:
            stream.write(json.dumps(document).encode())
        catalog.register_table(name, copy)  # type: ignore[attr-defined]
    fixture.catalog.engine.dispose()  # type: ignore[attr-defined]


def server_rows(name: str, fixture: object, args: argparse.Namespace, directory: str) -> list:
    from pyiceberg.catalog import load_catalog
    from tests.harness.proxy import DelayProxy
    from tests.harness.rest_server import RestCatalogServer
    from tests.harness.third_party import IcebergRestFixture

    from consistent_catalog.loading import SHARED_CACHE

    rows = []
    if name in ("hive", "glue"):
        return [metastore_row(name, fixture, args, directory)]
    with ExitStack() as stack:
        if name == "ours":
            server = stack.enter_context(RestCatalogServer(f"{directory}/{name}"))
            direct = server.catalog("bench")
        else:
            server = stack.enter_context(IcebergRestFixture(f"{directory}/{name}"))
            direct = server.catalog("bench")
        proxy = stack.enter_context(DelayProxy(server.port, delay_ms=args.latency_ms))  # type: ignore[arg-type]
        register(fixture, direct)
        for setup, catalog in ((name, direct), (f"{name}+{args.latency_ms:g}ms",
                                                load_catalog("bench", type="rest", uri=proxy.uri))):
            served = dataclasses.replace(fixture, catalog=catalog)  # type: ignore[type-var]
            check(served)
            answers = answers_alone(catalog, fixture.tables, args.repeat, False)  # type: ignore[attr-defined]
            print(f"{setup}: cut verified; timing...", file=sys.stderr, flush=True)
            SHARED_CACHE.clear()
            rows.append(dataclasses.replace(measure_all(served, setup, args.repeat, False, 16), answers_alone=answers))
            print(report_all(rows[-1:], {}, args.repeat, "", 16, args.latency_ms, False, False).splitlines()[1],
                  file=sys.stderr, flush=True)
    return rows


def metastore_row(name: str, fixture: object, args: argparse.Namespace, directory: str) -> object:
    """P1r on a Hive Metastore or on Glue (moto), directly: the same variants, pyiceberg's loads through the same
    catalog as (a)."""
    from tests.harness.metastores import HiveMetastore, MotoGlue

    from consistent_catalog.loading import SHARED_CACHE

    server_class = HiveMetastore if name == "hive" else MotoGlue
    with server_class.start(f"{directory}/{name}") as server:
        direct = server.catalog("bench")
        register(fixture, direct)
        served = dataclasses.replace(fixture, catalog=direct)  # type: ignore[type-var]
        check(served)
        print(f"{name}: cut verified; timing...", file=sys.stderr, flush=True)
        SHARED_CACHE.clear()
        row = measure_all(served, name, args.repeat, False, 16)
        print(report_all([row], {}, args.repeat, "", 16, args.latency_ms, False, False).splitlines()[1],
              file=sys.stderr, flush=True)
        return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--snapshots", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = sorted(set(servers) - set(SERVERS))
    if unknown:
        parser.error(f"unknown server(s) {unknown}: choose from {', '.join(SERVERS)}")
    command = "python -m bench.bench_catalogs " + shlex.join(argv if argv is not None else sys.argv[1:])
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-catalogs-") as directory:
        fixture = build(directory, args.tables, args.snapshots)
        print(f"{args.tables}x{args.snapshots}: built in {fixture.build_seconds:.0f} s", file=sys.stderr, flush=True)
        for name in servers:
            rows.extend(server_rows(name, fixture, args, directory))
    print(report_all(rows, {}, args.repeat, command, 16, args.latency_ms, args.markdown, False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
