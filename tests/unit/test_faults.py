"""faults.py and commit.landed_in: which errors are faults, how long they are retried, how a commit is recognised."""

from __future__ import annotations

import time

import pytest
import requests
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
)
from sqlalchemy.exc import IntegrityError, OperationalError

from consistent_catalog import faults
from consistent_catalog.exceptions import CatalogUnavailableError, InvalidInputError, NotFreshError
from consistent_catalog.faults import Fault, FaultLog, RetryPolicy, fault_of, request_timeout, retrying


class FakeClock:
    """time.monotonic/time.sleep for faults.py: sleeping moves the clock, nothing waits."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(faults.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(faults.time, "sleep", fake.sleep)
    return fake


def _wrapped(outer: type[BaseException], inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer(str(exc)) from exc
    except BaseException as exc:  # noqa: BLE001
        return exc


def _answered(code: int) -> BaseException:
    """pyiceberg's ServerError for an HTTP answer ``code``, raised from requests' HTTPError as pyiceberg raises it."""
    response = requests.models.Response()
    response.status_code = code
    try:
        try:
            raise requests.HTTPError(f"{code} Server Error", response=response)
        except requests.HTTPError as exc:
            raise ServerError(f"{code}") from exc
    except ServerError as exc:
        return exc


@pytest.mark.parametrize("exc, fault", [
    (ServiceUnavailableError("503"), Fault.UNAVAILABLE),
    (TooManyRequestsError("429"), Fault.UNAVAILABLE),
    (CommitStateUnknownException("504"), Fault.UNKNOWN),
    (ServerError("no answer behind it"), Fault.UNKNOWN),
    (_answered(502), Fault.UNKNOWN),
    (_answered(504), Fault.UNKNOWN),
    (requests.exceptions.ConnectTimeout("connect timed out"), Fault.UNAVAILABLE),
    (requests.exceptions.ConnectionError("HTTPConnectionPool: Max retries (Caused by NewConnectionError(... "
                                         "[Errno 111] Connection refused))"), Fault.UNAVAILABLE),
    (requests.exceptions.ConnectionError("('Connection aborted.', ConnectionResetError(104))"), Fault.UNKNOWN),
    (requests.exceptions.ReadTimeout("read timed out"), Fault.UNKNOWN),
    (OperationalError("UPDATE iceberg_tables", {}, Exception("database is locked")), Fault.UNAVAILABLE),
    (OperationalError("SELECT", {}, Exception("server closed the connection unexpectedly")), Fault.UNKNOWN),
    (ConnectionRefusedError(111, "refused"), Fault.UNAVAILABLE),
    (ConnectionResetError(104, "reset"), Fault.UNKNOWN),
    (_wrapped(RuntimeError, ConnectionResetError(104, "reset")), Fault.UNKNOWN),  # a cause counts
])
def test_faults_are_sorted_by_whether_something_may_have_landed(exc: BaseException, fault: Fault) -> None:
    assert fault_of(exc) is fault


def _suppressed() -> BaseException:
    try:
        try:
            raise ConnectionResetError(104, "reset")
        except ConnectionResetError:
            raise ValueError("a bug while handling it") from None
    except ValueError as exc:
        return exc


@pytest.mark.parametrize("exc", [
    CatalogUnavailableError("past the deadline already", catalog="lake", landed="no"),  # waited out: not again
    NotFreshError("not fresh", freshness=None),  # a TimeoutError of ours
    _suppressed(),  # raise ... from None: the context is not the cause
    _answered(500),  # a read the server fails at (a metadata file it cannot read): raised, as Iceberg's client does
    requests.exceptions.SSLError("certificate verify failed"),  # configuration, not availability
    OperationalError("UPDATE", {}, Exception("attempt to write a readonly database")),
    OperationalError("SELECT", {}, Exception('FATAL: password authentication failed for user "x"')),
    CommitFailedException("409: a requirement failed"),  # an answer, not a fault
    NoSuchTableError("gone"),
    IntegrityError("INSERT", {}, Exception("duplicate key")),
    FileNotFoundError("metadata file"),
    ValueError("a bug"),
])
def test_answers_and_bugs_are_not_faults(exc: BaseException) -> None:
    assert fault_of(exc) is None


def test_retries_stop_at_the_deadline_with_the_last_wait_cut_short(clock: FakeClock) -> None:
    policy = RetryPolicy.for_faults(deadline=10.0)
    started = clock.now
    attempts = list(policy.attempts())
    assert len(attempts) > 5  # backoff grows to 2 s, so about 10 s / ~1 s
    assert clock.now - started == pytest.approx(10.0)  # the wait that crossed the deadline ended on it
    assert max(clock.slept) <= 2.0


def test_a_deadline_of_zero_is_one_attempt(clock: FakeClock) -> None:
    assert list(RetryPolicy.for_faults(0).attempts()) == [1]
    assert clock.slept == []


def test_retrying_gives_up_with_one_error_naming_catalog_what_and_last_fault(clock: FakeClock) -> None:
    calls = []
    log = FaultLog()

    def down() -> None:
        calls.append(1)
        raise ServiceUnavailableError("ServiceUnavailable: maintenance")

    with pytest.raises(CatalogUnavailableError) as raised:
        retrying(RetryPolicy.for_faults(5.0), down, catalog="lake", what="loading demo.words", fault_log=log)
    error = raised.value
    assert error.catalog == "lake" and error.landed == "no"
    text = str(error)
    assert "catalog 'lake' did not answer loading demo.words for 5 s" in text
    assert "ServiceUnavailableError: ServiceUnavailable: maintenance" in text and "consistent.retry-deadline" in text
    assert len(calls) >= 3 and log.unavailable == len(calls) and log.unknown == 0


def test_retrying_returns_once_the_catalog_answers_and_lets_other_errors_through(clock: FakeClock) -> None:
    answers = iter([ServiceUnavailableError("x"), requests.exceptions.ReadTimeout("y"), "ok"])

    def flaky() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    log = FaultLog()
    assert retrying(RetryPolicy.for_faults(60), flaky, catalog="lake", what="x", fault_log=log) == "ok"
    assert (log.unavailable, log.unknown) == (1, 1)
    with pytest.raises(NoSuchTableError):
        retrying(RetryPolicy.for_faults(60), lambda: (_ for _ in ()).throw(NoSuchTableError("t")), catalog="l", what="x")


def test_catalog_properties_set_the_deadline_and_the_request_timeout() -> None:
    assert RetryPolicy.from_properties({}).deadline == 120.0
    assert RetryPolicy.from_properties({"consistent.retry-deadline": "30s"}).deadline == 30.0
    assert RetryPolicy.from_properties({"consistent.retry-deadline": "0"}).attempts_max == 1
    assert request_timeout({}) == 60.0 and request_timeout({"consistent.request-timeout": "1500ms"}) == 1.5
    with pytest.raises(InvalidInputError, match="consistent.retry-deadline"):
        RetryPolicy.from_properties({"consistent.retry-deadline": "soon"})
    with pytest.raises(InvalidInputError, match="consistent.request-timeout must be positive"):
        request_timeout({"consistent.request-timeout": "0s"})


# --- recognising a commit in the metadata read back (protocol §6.8) ----------------------------------------
def _metadata():  # -> TableMetadata with one snapshot on main and a property
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
    from pyiceberg.table.update import (
        AddSnapshotUpdate,
        SetPropertiesUpdate,
        SetSnapshotRefUpdate,
        update_table_metadata,
    )
    from pyiceberg.types import NestedField, StringType

    schema = Schema(NestedField(1, "word", StringType(), required=False))
    base = new_table_metadata(schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "file:///t", {"a": "1"})
    snapshot = Snapshot(snapshot_id=11, sequence_number=1, timestamp_ms=1, manifest_list="file:///m.avro",
                        summary=Summary(Operation.APPEND), schema_id=0)
    return update_table_metadata(base, (
        AddSnapshotUpdate(snapshot=snapshot),
        SetSnapshotRefUpdate(ref_name="main", type="branch", snapshot_id=11),
        SetPropertiesUpdate(updates={"lease": "42"}),
    ))


def test_a_commit_that_adds_a_snapshot_is_recognised_by_its_id_only() -> None:
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary
    from pyiceberg.table.update import AddSnapshotUpdate, SetPropertiesUpdate

    from consistent_catalog.commit import landed_in

    metadata = _metadata()

    def adding(snapshot_id: int) -> AddSnapshotUpdate:
        return AddSnapshotUpdate(snapshot=Snapshot(snapshot_id=snapshot_id, sequence_number=1, timestamp_ms=1,
                                                   manifest_list="file:///m.avro", summary=Summary(Operation.APPEND)))

    assert landed_in(metadata, [adding(11), SetPropertiesUpdate(updates={"lease": "other"})])  # the id decides
    assert not landed_in(metadata, [adding(12), SetPropertiesUpdate(updates={"lease": "42"})])


def test_a_commit_without_a_snapshot_is_recognised_by_all_of_its_effects() -> None:
    from pyiceberg.table.update import (
        AddSchemaUpdate,
        RemovePropertiesUpdate,
        RemoveSnapshotRefUpdate,
        RemoveSnapshotsUpdate,
        SetPropertiesUpdate,
        SetSnapshotRefUpdate,
    )

    from consistent_catalog.commit import landed_in

    metadata = _metadata()
    assert landed_in(metadata, [SetPropertiesUpdate(updates={"lease": "42"}), RemovePropertiesUpdate(removals=["gone"])])
    assert not landed_in(metadata, [SetPropertiesUpdate(updates={"lease": "43"})])
    assert not landed_in(metadata, [SetPropertiesUpdate(updates={"lease": "42"}), RemovePropertiesUpdate(removals=["a"])])
    assert landed_in(metadata, [SetSnapshotRefUpdate(ref_name="main", type="branch", snapshot_id=11)])
    assert not landed_in(metadata, [SetSnapshotRefUpdate(ref_name="pin", type="tag", snapshot_id=11)])
    assert landed_in(metadata, [RemoveSnapshotRefUpdate(ref_name="pin"), RemoveSnapshotsUpdate(snapshot_ids=[99])])
    assert not landed_in(metadata, [RemoveSnapshotsUpdate(snapshot_ids=[11])])
    assert not landed_in(metadata, [AddSchemaUpdate(schema_=metadata.schemas[0])])  # not recognisable: unknown


def test_faults_are_logged_as_one_warning_every_ten_seconds_while_they_go_on(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.DEBUG, logger="consistent_catalog.faults")
    log = FaultLog()
    for _ in range(5):
        log.record(Fault.UNAVAILABLE, ServiceUnavailableError("503"), "loading demo.words")
        clock.sleep(1.0)
    clock.sleep(6.0)
    log.record(Fault.UNKNOWN, CommitStateUnknownException("504"), "publishing")
    levels = [r.levelno for r in caplog.records]
    assert levels == [logging.WARNING] + [logging.DEBUG] * 4 + [logging.WARNING]
    assert "catalog fault (unavailable) on loading demo.words: ServiceUnavailableError: 503; retrying" in caplog.text
    assert (log.unavailable, log.unknown, log.total) == (5, 1, 6)


@pytest.mark.parametrize(("text", "seconds"), [("PT30M", 1800.0), ("PT24H", 86400.0), ("P1DT2H", 93600.0),
                                               ("PT0.5S", 0.5), ("pt10m", 600.0), ("PT0S", None), ("P", None),
                                               ("PT", None), ("30m", None), ("P1Y", None), ("", None)])
def test_iso_durations_of_an_idempotency_key_lifetime(text: str, seconds: float | None) -> None:
    from consistent_catalog._pyiceberg import parse_iso_duration

    assert parse_iso_duration(text) == seconds


def test_idempotency_keys_are_uuid7_in_time_order() -> None:
    import uuid

    from consistent_catalog._pyiceberg import new_idempotency_key

    keys = [new_idempotency_key() for _ in range(50)]
    parsed = [uuid.UUID(k) for k in keys]
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in parsed) and len(set(keys)) == 50
    stamps = [u.int >> 80 for u in parsed]  # 48 bits of Unix milliseconds
    assert stamps == sorted(stamps) and abs(stamps[-1] - time.time() * 1000) < 60_000
