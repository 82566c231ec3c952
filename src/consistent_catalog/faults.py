"""Catalog faults: which errors are transient, how long to retry them, and the error past the deadline (§6.8).

A catalog call fails in one of three ways that matter to a writer:

- *refused*: the catalog checked the commit's requirements and said no (``CommitFailedException``).
  That is an answer, not a fault; the commit layer turns it into ``FencedError``.
- *unavailable* (``Fault.UNAVAILABLE``): nothing was applied — a 503 or 429 answer, a connection that
  could not be opened or was closed before the statement went out, a PostgreSQL server starting up,
  SQLite's ``database is locked``.
- *unknown* (``Fault.UNKNOWN``): it may have been applied — a 500/502/504 answer to a commit, a 502
  or 504 to anything else, a timeout, a connection dropped mid-request, a SQL connection cut by a
  server restart. A plain 500 to a read is the server failing at the request, not a fault.

``sql_fault`` is the SQL part, shared with the JVM (``CatalogFaults``) through the conformance corpus.

``fault_of`` sorts an exception into these; ``RetryPolicy`` says how often and how long to try again;
``retrying`` runs a read under a policy. Commits are settled by ``commit.TableStore``, which reads the
table back after an unknown outcome before it sends anything again.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from consistent_catalog.exceptions import CatalogUnavailableError, ConsistentCatalogError, InvalidInputError
from consistent_catalog.util.durations import parse_duration

T = TypeVar("T")
log = logging.getLogger(__name__)

#: catalog properties (also ``PYICEBERG_CATALOG__<NAME>__CONSISTENT__RETRY_DEADLINE`` and so on)
RETRY_DEADLINE = "consistent.retry-deadline"
REQUEST_TIMEOUT = "consistent.request-timeout"
DEFAULT_RETRY_DEADLINE = "2m"
DEFAULT_REQUEST_TIMEOUT = "60s"


class Fault(enum.Enum):
    UNAVAILABLE = "unavailable"
    """Nothing was applied: trying again is safe."""
    UNKNOWN = "unknown"
    """It may have been applied: a commit must be looked for before it is sent again."""


def fault_of(exc: BaseException) -> Fault | None:
    """The fault ``exc`` stands for, or None when it is not a fault of the catalog's availability
    (a refusal, a missing table, a bug...: raised as it is)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:  # a wrapped cause counts (requests wraps urllib3 wraps OSError)
        seen.add(id(exc))
        if isinstance(exc, ConsistentCatalogError):
            return None  # our own errors are answers (CatalogUnavailableError already waited its deadline out)
        found = _direct_fault(exc)
        if found is not None:
            return found
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)  # type: ignore[assignment]
    return None


def resent_by_client(exc: BaseException) -> bool:
    """Whether a refusal came after the catalog's own client had sent the request more than once: boto3 (pyiceberg's
    Glue catalog) retries a timed-out or failed ``UpdateTable`` by itself, so its first attempt may have landed with
    its answer lost, and the retry is then refused (``ConcurrentModificationException``: the version moved, by that
    first attempt). Such a refusal is settled by looking for the commit, never believed as it is (protocol §6.8)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            attempts = (response.get("ResponseMetadata") or {}).get("RetryAttempts") or 0
            if attempts > 0:
                return True
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)  # type: ignore[assignment]
    return False


def _direct_fault(exc: BaseException) -> Fault | None:
    names = {cls.__name__ for cls in type(exc).__mro__}
    module = type(exc).__module__ or ""
    if module.startswith("pyiceberg"):
        if names & {"ServiceUnavailableError", "TooManyRequestsError"}:
            return Fault.UNAVAILABLE
        if "CommitStateUnknownException" in names:
            return Fault.UNKNOWN  # a commit answered 500, 502 or 504
        if "ServerError" in names:
            # another 5xx. A plain 500 to a read is the server failing at what was asked (a metadata file
            # it cannot read...), not a passing fault: raised, as Iceberg's own REST client does
            return None if _status(exc) == 500 else Fault.UNKNOWN
        return None
    if module.startswith("requests"):
        if names & {"SSLError", "ProxyError", "InvalidURL", "InvalidSchema", "MissingSchema"}:
            return None  # a configuration to fix, not a fault to wait out
        if "ConnectTimeout" in names:
            return Fault.UNAVAILABLE  # no connection, so no request
        if "ConnectionError" in names or "Timeout" in names or "ChunkedEncodingError" in names:
            return Fault.UNAVAILABLE if _refused_connection(exc) else Fault.UNKNOWN
        return None
    if module.startswith("sqlalchemy"):
        if "OperationalError" in names or "InterfaceError" in names or getattr(exc, "connection_invalidated", False):
            orig = getattr(exc, "orig", None)
            state = getattr(orig, "pgcode", None) or getattr(orig, "sqlstate", None)
            text = str(exc if orig is None else orig)
            if _permanent_sql(text):
                return None
            # any other operational error of the driver: its connection may have been cut under the statement
            return sql_fault(state, text) or Fault.UNKNOWN
        return None
    if module.startswith(("botocore", "urllib3")) and names & {"EndpointConnectionError", "ConnectTimeoutError"}:
        return Fault.UNAVAILABLE  # boto3 (Glue): no connection, so no request (after boto3's own retries)
    if module.startswith("botocore"):
        if names & {"ReadTimeoutError", "ConnectionClosedError", "ConnectionError"}:
            return Fault.UNKNOWN  # the request may have been applied
        code = str((getattr(exc, "response", None) or {}).get("Error", {}).get("Code", ""))
        if code in ("ThrottlingException", "Throttling", "ServiceUnavailableException", "ServiceUnavailable"):
            return Fault.UNAVAILABLE
        if code in ("InternalServiceException", "InternalFailure", "InternalServerError"):
            return Fault.UNKNOWN
        return None
    if module.startswith("thrift") and "TTransportException" in names:
        # Thrift (a Hive Metastore): NOT_OPEN is a connection never made; the others cut one under way
        return Fault.UNAVAILABLE if getattr(exc, "type", None) == 1 else Fault.UNKNOWN
    if isinstance(exc, ConnectionRefusedError):
        return Fault.UNAVAILABLE
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return Fault.UNKNOWN
    return None


#: SQL errors that say something is wrong that waiting does not fix (a read-only file, a missing table or
#: database, a refused login)
_PERMANENT_SQL = ("readonly database", "read-only", "no such table", "does not exist", "authentication failed",
                  "password authentication", "permission denied", "unable to open database file",
                  "no suitable driver")
#: a connection that was never made or was closed before the statement went out: nothing was applied
_UNAVAILABLE_SQL = ("database is locked", "database table is locked", "sqlite_busy", "connection refused",
                    "the database system is starting up", "the database system is shutting down",
                    "the database system is in recovery mode", "this connection has been closed",
                    "connection already closed")
#: a connection cut while a statement was under way: it may have been applied
_UNKNOWN_SQL = ("i/o error", "server closed the connection unexpectedly", "connection reset", "broken pipe",
                "terminating connection", "could not receive data from server", "could not send data to server",
                "ssl syscall error", "unexpected eof", "eof detected")


def _permanent_sql(text: str) -> bool:
    lowered = text.lower()
    return any(mark in lowered for mark in _PERMANENT_SQL)


def sql_fault(sqlstate: str | None, message: str) -> Fault | None:
    """The fault a SQL error stands for, from its SQLState (None when the driver gives none, as SQLite's) and its
    message; the JVM's ``CatalogFaults.ofSql`` gives the same answer (the conformance corpus checks both).

    Unavailable: a connection that could not be opened (``08001``, ``08004``, refused), one closed before the
    statement was sent (``08003``), a server not accepting connections yet (``57P03``: starting up, shutting
    down, in recovery), SQLite's ``database is locked``. Unknown: a connection cut while a statement was under
    way (the rest of class ``08``, PostgreSQL's ``57P01``/``57P02`` shutdown of the session, an EOF, a reset).
    """
    text = message.lower()
    if _permanent_sql(text):
        return None
    state = (sqlstate or "").upper()
    if state in ("08001", "08003", "08004", "57P03"):
        return Fault.UNAVAILABLE
    if state.startswith("08") or state in ("57P01", "57P02"):
        return Fault.UNKNOWN
    if any(mark in text for mark in _UNAVAILABLE_SQL):
        return Fault.UNAVAILABLE
    if any(mark in text for mark in _UNKNOWN_SQL):
        return Fault.UNKNOWN
    return None


def _status(exc: BaseException) -> int | None:
    """The HTTP status of the answer behind a pyiceberg REST error (it is raised from requests' HTTPError)."""
    response = getattr(exc.__cause__, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _refused_connection(exc: BaseException) -> bool:
    """Whether a requests error is a connection that was never made (refused, no route, DNS)."""
    text = str(exc)
    return any(mark in text for mark in ("NewConnectionError", "Connection refused", "Failed to resolve",
                                         "Name or service not known"))


# --- retries ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RetryPolicy:
    """How often a call is tried again and how long to wait in between.

    Waits grow exponentially from ``base_delay`` to ``max_delay`` seconds with full jitter, so that
    processes refused by each other do not retry in lock step. At most ``attempts_max`` attempts, and
    none starts after ``deadline`` seconds from the first (None: no deadline).

    Two uses: re-planning a commit the catalog refused (``RetryPolicy(retries)``, a few quick
    attempts), and waiting out a catalog fault (``RetryPolicy.for_faults``, until a deadline).
    """

    attempts_max: int = 10
    base_delay: float = 0.02
    max_delay: float = 1.0
    deadline: float | None = None

    def __post_init__(self) -> None:
        if self.attempts_max < 1:
            raise InvalidInputError(f"retries must be at least 1, got {self.attempts_max}")
        if self.deadline is not None and self.deadline < 0:
            raise InvalidInputError(f"a retry deadline cannot be negative, got {self.deadline} s")

    @classmethod
    def for_faults(cls, deadline: float | None = 120.0) -> RetryPolicy:
        """Faults: 50 ms doubling to 2 s, until ``deadline`` seconds (0: one attempt, no retry)."""
        if deadline == 0:
            return cls(attempts_max=1, deadline=0.0)
        return cls(attempts_max=1_000_000, base_delay=0.05, max_delay=2.0, deadline=deadline)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> RetryPolicy:
        """``for_faults`` with the deadline of the catalog property ``consistent.retry-deadline``."""
        text = properties.get(RETRY_DEADLINE, DEFAULT_RETRY_DEADLINE)
        try:
            return cls.for_faults(parse_duration(text) / 1000)
        except InvalidInputError as exc:
            raise InvalidInputError(f"catalog property {RETRY_DEADLINE}: {exc}") from None

    def with_deadline(self, seconds: float | None) -> RetryPolicy:
        return replace(self, deadline=seconds)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before ``attempt`` (2, 3, ...)."""
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** (attempt - 2)))

    def attempts(self) -> Iterator[int]:
        """Attempt numbers 1, 2, ... sleeping before every attempt after the first; no attempt after the
        deadline (a wait that would cross it is cut short to end on it, and that last attempt is made)."""
        end = None if self.deadline is None else time.monotonic() + self.deadline
        for attempt in range(1, self.attempts_max + 1):
            if attempt > 1:
                wait = self.delay(attempt)
                if end is not None:
                    left = end - time.monotonic()
                    if left <= 0:
                        return
                    wait = min(wait, left)
                time.sleep(wait)
            yield attempt


def request_timeout(properties: Mapping[str, str]) -> float:
    """Seconds a REST request may go unanswered (catalog property ``consistent.request-timeout``)."""
    text = properties.get(REQUEST_TIMEOUT, DEFAULT_REQUEST_TIMEOUT)
    try:
        ms = parse_duration(text)
    except InvalidInputError as exc:
        raise InvalidInputError(f"catalog property {REQUEST_TIMEOUT}: {exc}") from None
    if ms <= 0:
        raise InvalidInputError(f"catalog property {REQUEST_TIMEOUT} must be positive, got {text!r}")
    return ms / 1000


#: seconds between two WARNING lines about faults (the ones in between are logged at DEBUG)
WARN_EVERY = 10.0


@dataclass
class FaultLog:
    """Faults a store settled (counted per kind), the last one kept for messages.

    Each fault is logged (logger ``consistent_catalog.faults``): a WARNING for the first and then at
    most one every ``WARN_EVERY`` seconds while faults go on (a job's log shows that it is retrying
    without a line per attempt), DEBUG for the rest.
    """

    unavailable: int = 0
    unknown: int = 0
    last: str | None = None
    _warned: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def total(self) -> int:
        return self.unavailable + self.unknown

    def record(self, fault: Fault, exc: BaseException, what: str = "a call", detail: str | None = None) -> None:
        """Count a fault met by ``what`` and log it; ``detail`` describes it when ``exc``'s own first line does
        not (a Spark error whose cause is a Java exception)."""
        with self._lock:  # one store serves several threads (a streaming query's listener, an idle loop)
            if fault is Fault.UNAVAILABLE:
                self.unavailable += 1
            else:
                self.unknown += 1
            self.last = detail or describe(exc)
            now = time.monotonic()
            level = logging.DEBUG
            if self._warned is None or now - self._warned >= WARN_EVERY:
                level, self._warned = logging.WARNING, now
        log.log(level, "catalog fault (%s) on %s: %s; retrying", fault.value, what, self.last)


def describe(exc: BaseException) -> str:
    """One line for a fault: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def retrying(
    policy: RetryPolicy, call: Callable[[], T], *, catalog: str, what: str, fault_log: FaultLog | None = None
) -> T:
    """``call()``, tried again after faults (``fault_of``) until ``policy`` gives up; then
    ``CatalogUnavailableError``. For reads and for calls that are safe to repeat: nothing is looked for."""
    last: BaseException | None = None
    for _ in policy.attempts():
        try:
            return call()
        except Exception as exc:
            fault = fault_of(exc)
            if fault is None:
                raise
            if fault_log is not None:
                fault_log.record(fault, exc, what)
            last = exc
    assert last is not None
    raise unavailable(catalog, what, last, policy, landed="no")


def unavailable(
    catalog: str, what: str, last: BaseException, policy: RetryPolicy, *, landed: str, hint: str = ""
) -> CatalogUnavailableError:
    """The error past the deadline: the catalog, what was attempted, the last fault, whether anything landed."""
    waited = "" if policy.deadline is None else f" for {policy.deadline:g} s"
    message = (f"catalog {catalog!r} did not answer {what}{waited} (last: {describe(last)}); landed: {landed}"
               f"{f' — {hint}' if hint else ''}. Check that the catalog is up and reachable, then run again "
               f"(catalog property {RETRY_DEADLINE} sets how long to wait)")
    return CatalogUnavailableError(message, catalog=catalog, landed=landed)
