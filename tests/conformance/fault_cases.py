"""Fault classes and durations in the conformance corpus (case ``h15``): one classification, one grammar, two languages.

A query ``{"kind": "fault", "driver", "sqlstate", "message", "io"}`` describes an error a catalog call meets, as a
driver raises it:

- ``"driver": "sql"``: the SQL classification itself (``faults.sql_fault`` / ``CatalogFaults.ofSql``) of a SQLState
  (null: none, as SQLite's driver gives) and a message;
- ``"driver": "postgresql"``: PostgreSQL's driver's error with that state and message under the catalog's own
  wrapping (Python: SQLAlchemy's ``OperationalError`` over a DBAPI error carrying ``pgcode``; JVM: Iceberg's
  ``UncheckedSQLException`` over a ``SQLException`` with that SQLState, its cause an ``EOFException`` or a
  ``SocketException`` when ``io`` is ``"eof"`` or ``"reset"``);
- ``"driver": "sqlite"``: SQLite's driver's error (Python: ``sqlite3.OperationalError``; JVM: a ``SQLException``
  without SQLState, as sqlite-jdbc's), under the same wrapping.

The answer is ``{"fault": "unavailable" | "unknown" | null}`` (protocol §6.8). A query ``{"kind": "duration",
"text"}`` is answered ``{"ms": N}`` or ``{"error": "InvalidInputError"}`` (``util.durations.parse_duration`` /
``core.Durations.parseMs``). A query ``{"kind": "barrier", "text", "now"}`` is a barrier as a person writes it
(protocol §3.8), read at the fixed clock ``now``: answered ``{"ms": N}`` or ``{"error": "InvalidBarrierError"}``
(``barrier.parse_barrier`` / ``core.Barriers.parse``). The JVM side is ``io.consistentcatalog.conformance.FaultCases``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from consistent_catalog.barrier import parse_barrier
from consistent_catalog.exceptions import InvalidBarrierError, InvalidInputError
from consistent_catalog.faults import fault_of, sql_fault
from consistent_catalog.util.durations import parse_duration

KINDS = ("fault", "duration", "barrier")


class _PostgresDriverError(Exception):
    """What psycopg2 raises, as far as classification reads it: its message and ``pgcode`` (psycopg2's own
    classes cannot be given a ``pgcode``: the server's answer sets it)."""

    def __init__(self, message: str, pgcode: str | None) -> None:
        super().__init__(message)
        self.pgcode = pgcode


def error_of(query: Mapping[str, Any]) -> BaseException:
    """The exception the catalog call raises in Python for a ``fault`` query's driver, state and message."""
    from sqlalchemy.exc import OperationalError

    message = query["message"]
    if query["driver"] == "postgresql":
        orig: Exception = _PostgresDriverError(message, query.get("sqlstate"))
    elif query["driver"] == "sqlite":
        orig = sqlite3.OperationalError(message)
    else:
        raise ValueError(f"no driver {query['driver']!r}")
    return OperationalError("SELECT metadata_location FROM iceberg_tables WHERE ...", {}, orig)


def answer(query: Mapping[str, Any]) -> dict[str, Any]:
    if query["kind"] == "barrier":
        try:
            return {"ms": parse_barrier(query["text"], now=query["now"])}
        except InvalidBarrierError:
            return {"error": "InvalidBarrierError"}
    if query["kind"] == "duration":
        try:
            return {"ms": parse_duration(query["text"])}
        except InvalidInputError:
            return {"error": "InvalidInputError"}
    if query["driver"] == "sql":
        found = sql_fault(query.get("sqlstate"), query["message"])
    else:
        found = fault_of(error_of(query))
    return {"fault": None if found is None else found.value}


def fault(driver: str, sqlstate: str | None, message: str, io: str | None = None) -> dict[str, Any]:
    query: dict[str, Any] = {"kind": "fault", "driver": driver, "sqlstate": sqlstate, "message": message}
    if io is not None:
        query["io"] = io
    return query


def duration(text: str) -> dict[str, Any]:
    return {"kind": "duration", "text": text}


NOW = 1_700_000_000_000  # 2023-11-14T22:13:20Z: the clock of the barrier queries


def barrier(text: str) -> dict[str, Any]:
    return {"kind": "barrier", "text": text, "now": NOW}


REFUSED = {"error": "InvalidBarrierError"}


UNAVAILABLE, UNKNOWN = "unavailable", "unknown"

#: every query with the answer the protocol (§6.8) gives it, worked out by hand
CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    # PostgreSQL, as pgjdbc and libpq word them
    (fault("postgresql", "08001", "Connection to 127.0.0.1:5432 refused. Check that the hostname and port are correct "
           "and that the postmaster is accepting TCP/IP connections."), {"fault": UNAVAILABLE}),
    (fault("postgresql", None, 'connection to server at "127.0.0.1", port 5432 failed: Connection refused\n\tIs the '
           "server running on that host and accepting TCP/IP connections?"), {"fault": UNAVAILABLE}),
    (fault("postgresql", "57P03", "FATAL: the database system is starting up"), {"fault": UNAVAILABLE}),
    (fault("postgresql", None, "FATAL:  the database system is shutting down"), {"fault": UNAVAILABLE}),
    (fault("postgresql", "57P03", "FATAL: the database system is in recovery mode"), {"fault": UNAVAILABLE}),
    (fault("postgresql", "08003", "This connection has been closed."), {"fault": UNAVAILABLE}),
    (fault("postgresql", None, "connection already closed"), {"fault": UNAVAILABLE}),
    (fault("postgresql", "08004", "server rejected the connection"), {"fault": UNAVAILABLE}),
    (fault("postgresql", "08006", "An I/O error occurred while sending to the backend.", "eof"), {"fault": UNKNOWN}),
    (fault("postgresql", "08006", "An I/O error occurred while sending to the backend.", "reset"), {"fault": UNKNOWN}),
    (fault("postgresql", None, "server closed the connection unexpectedly\n\tThis probably means the server terminated "
           "abnormally\n\tbefore or while processing the request."), {"fault": UNKNOWN}),
    (fault("postgresql", "57P01", "FATAL: terminating connection due to administrator command"), {"fault": UNKNOWN}),
    (fault("postgresql", "57P01", "FATAL: terminating connection due to immediate shutdown command"),
     {"fault": UNKNOWN}),
    (fault("postgresql", "57P02", "WARNING: terminating connection because of crash of another server process"),
     {"fault": UNKNOWN}),
    (fault("postgresql", "08007", "transaction resolution unknown"), {"fault": UNKNOWN}),
    (fault("postgresql", None, "SSL SYSCALL error: EOF detected"), {"fault": UNKNOWN}),
    (fault("postgresql", None, "could not receive data from server: Connection reset by peer"), {"fault": UNKNOWN}),
    # PostgreSQL: waiting does not fix these
    (fault("postgresql", "28P01", 'FATAL: password authentication failed for user "lake"'), {"fault": None}),
    (fault("postgresql", "3D000", 'FATAL: database "lake" does not exist'), {"fault": None}),
    (fault("postgresql", "42501", "ERROR: permission denied for table iceberg_tables"), {"fault": None}),
    (fault("postgresql", "42P01", 'ERROR: relation "iceberg_tables" does not exist'), {"fault": None}),
    (fault("postgresql", "08001", "No suitable driver found for jdbc:postgresql://db:5432/lake"), {"fault": None}),
    # SQLite (no SQLState), as Python's sqlite3 and sqlite-jdbc word them
    (fault("sqlite", None, "database is locked"), {"fault": UNAVAILABLE}),
    (fault("sqlite", None, "[SQLITE_BUSY] The database file is locked (database is locked)"), {"fault": UNAVAILABLE}),
    (fault("sqlite", None, "database table is locked"), {"fault": UNAVAILABLE}),
    (fault("sqlite", None, "attempt to write a readonly database"), {"fault": None}),
    (fault("sqlite", None, "[SQLITE_READONLY] Attempt to write a readonly database (attempt to write a readonly "
           "database)"), {"fault": None}),
    (fault("sqlite", None, "unable to open database file"), {"fault": None}),
    (fault("sqlite", None, "no such table: iceberg_tables"), {"fault": None}),
    # the SQL classification alone (what a driver's wrapping adds is the other queries')
    (fault("sql", "08001", "could not connect"), {"fault": UNAVAILABLE}),
    (fault("sql", "08000", "connection exception"), {"fault": UNKNOWN}),
    (fault("sql", "08S01", "Communications link failure"), {"fault": UNKNOWN}),
    (fault("sql", None, "Broken pipe"), {"fault": UNKNOWN}),
    (fault("sql", "42601", 'ERROR: syntax error at or near "SELEC"'), {"fault": None}),
    (fault("sql", "23505", "duplicate key value violates unique constraint"), {"fault": None}),
    (fault("sql", "40001", "could not serialize access due to concurrent update"), {"fault": None}),
    (fault("sql", None, ""), {"fault": None}),
    # durations: the one grammar
    (duration("1d"), {"ms": 86_400_000}),
    (duration("2m"), {"ms": 120_000}),
    (duration("2min"), {"ms": 120_000}),
    (duration("90s"), {"ms": 90_000}),
    (duration("500ms"), {"ms": 500}),
    (duration("500"), {"ms": 500}),
    (duration("0"), {"ms": 0}),
    (duration("1.5s"), {"ms": 1500}),
    (duration("0.25h"), {"ms": 900_000}),
    (duration("2w"), {"ms": 1_209_600_000}),
    (duration(" 12 H "), {"ms": 43_200_000}),
    (duration("7D"), {"ms": 604_800_000}),
    (duration("30MS"), {"ms": 30}),
    (duration("1.5"), {"ms": 1}),
    (duration("-1s"), {"error": "InvalidInputError"}),
    (duration("1y"), {"error": "InvalidInputError"}),
    (duration("s"), {"error": "InvalidInputError"}),
    (duration(""), {"error": "InvalidInputError"}),
    (duration("1 d 2 h"), {"error": "InvalidInputError"}),
    (duration("1e3"), {"error": "InvalidInputError"}),
    (duration(".5s"), {"error": "InvalidInputError"}),
    (duration("1,5s"), {"error": "InvalidInputError"}),
    (duration("\u0661\u0662s"), {"error": "InvalidInputError"}),  # Arabic-Indic digits: ASCII digits only
    # barriers: the one grammar (protocol §3.8), at the clock NOW
    (barrier("1700000000000"), {"ms": NOW}),
    (barrier(" 1700000000123 "), {"ms": NOW + 123}),
    (barrier("0"), {"ms": 0}),  # the start of time: a changes read from the beginning
    (barrier("100000000000"), {"ms": 100_000_000_000}),  # the first plausible one, 1973-03-03T09:46:40Z
    (barrier("7258117399999"), {"ms": 7_258_117_399_999}),
    (barrier("now"), {"ms": NOW}),
    (barrier("NOW"), {"ms": NOW}),
    (barrier("now-5m"), {"ms": NOW - 300_000}),
    (barrier("now - 90s"), {"ms": NOW - 90_000}),
    (barrier("now+30s"), {"ms": NOW + 30_000}),
    (barrier("now-500"), {"ms": NOW - 500}),
    (barrier("-5m"), {"ms": NOW - 300_000}),
    (barrier("-1.5h"), {"ms": NOW - 5_400_000}),
    (barrier("-2D"), {"ms": NOW - 172_800_000}),
    (barrier("2023-11-14T22:13:20Z"), {"ms": NOW}),
    (barrier("2023-11-14T22:13:20.150Z"), {"ms": NOW + 150}),
    (barrier("2023-11-14T23:13:20+01:00"), {"ms": NOW}),
    (barrier("2023-11-14T22:13:20"), {"ms": NOW}),  # no zone: UTC
    (barrier("2023-11-14 22:13:20.500"), {"ms": NOW + 500}),
    (barrier("2023-11-14"), {"ms": 1_699_920_000_000}),
    # refused: implausible magnitudes (seconds, microseconds, nanoseconds, out of 1973..2200), and what is no barrier
    (barrier("1700000000"), REFUSED),
    (barrier("1700000000000000"), REFUSED),
    (barrier("1700000000000000000"), REFUSED),
    (barrier("99999999999"), REFUSED),
    (barrier("7258118400000"), REFUSED),
    (barrier("99999999999999999999999"), REFUSED),
    (barrier("1"), REFUSED),
    (barrier("1970-01-01T00:00:01Z"), REFUSED),
    (barrier("1969-12-31T23:59:59Z"), REFUSED),
    (barrier("2200-01-01T00:00:00Z"), REFUSED),
    (barrier("now-3000w"), REFUSED),  # 1966
    (barrier("-5"), REFUSED),  # the short form needs a unit
    (barrier("-3"), REFUSED),
    (barrier("now-"), REFUSED),
    (barrier("now-5y"), REFUSED),
    (barrier("now*2"), REFUSED),
    (barrier("yesterday"), REFUSED),
    (barrier(""), REFUSED),
    (barrier("1.7e12"), REFUSED),
    (barrier("1700000000000.5"), REFUSED),
    (barrier("\u0661\u0667\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660"), REFUSED),
]
