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
``core.Durations.parseMs``). The JVM side is ``io.consistentcatalog.conformance.FaultCases``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from consistent_catalog.exceptions import InvalidInputError
from consistent_catalog.faults import fault_of, sql_fault
from consistent_catalog.util.durations import parse_duration

KINDS = ("fault", "duration")


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
]
