"""Effective barriers of snapshots and watermarks of tables (docs/protocol.md §3).

Pure functions over plain data: nothing here touches a catalog, so the rules can be tested in
milliseconds and by property-based tests. ``state.py`` turns pyiceberg metadata into these values.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from functools import cached_property
from types import MappingProxyType
from typing import NamedTuple, Union

from consistent_catalog import properties as P
from consistent_catalog.exceptions import (
    HistoryExpiredError,
    InvalidBarrierError,
    InvalidInputError,
    MalformedMetadataError,
    UntrackedWriteError,
)
from consistent_catalog.util.durations import parse_duration
from consistent_catalog.util.time import fmt_barrier, fmt_ms, now_ms

_EMPTY: Mapping[str, str] = MappingProxyType({})
_EMPTY_OVERRIDES: Mapping[int, int] = MappingProxyType({})
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
BARRIER_KEY = P.BARRIER

BarrierLike = Union[int, datetime, date, str]
"""What callers may pass as a barrier: ms since the epoch, a datetime (naive means UTC), or a string of either."""

#: Summary counters that show a snapshot changed table content.
_CHANGE_COUNTERS = (
    "added-data-files",
    "deleted-data-files",
    "added-delete-files",
    "removed-delete-files",
    "added-records",
    "deleted-records",
    "added-position-deletes",
    "removed-position-deletes",
    "added-equality-deletes",
    "removed-equality-deletes",
)


class SnapshotRecord(NamedTuple):
    """The parts of an Iceberg snapshot that barrier resolution needs (a tuple: cheap to build by the thousand)."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    operation: str = "append"
    summary: Mapping[str, str] = _EMPTY
    schema_id: int | None = None
    """Iceberg's ``schema-id`` of the snapshot: the table's schema it was written under (protocol §6.10)."""

    @property
    def barrier(self) -> int | None:
        """The raw ``consistent.barrier`` written on the snapshot, if any."""
        value = self.summary.get(P.BARRIER)
        if value is None:
            return None
        if value.isascii() and value.isdigit():
            return int(value)
        return parse_barrier_value(value, where=f"snapshot {self.snapshot_id} summary")

    @property
    def job(self) -> str | None:
        return self.summary.get(P.JOB)

    @property
    def changes_data(self) -> bool:
        """Whether the snapshot changes rows. Unknown (no counters written) counts as a change."""
        return _changes_data(self.operation, self.summary)


def _changes_data(operation: str, summary: Mapping[str, str]) -> bool:
    if operation == "replace":
        return False
    if "total-records" not in summary:
        return True
    for key in _CHANGE_COUNTERS:  # an append names added-data-files first: usually one lookup
        value = summary.get(key)
        if value is not None and value != "0" and value != "":
            return True
    return False


def parse_barrier_value(value: object, *, where: str) -> int:
    """Parse a barrier stored in metadata; malformed values raise MalformedMetadataError."""
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()):
        raise MalformedMetadataError(
            f"{where}: {P.BARRIER}-style value {value!r} is not a non-negative integer of milliseconds; "
            "fix or remove the property (it must be written by consistent-catalog)"
        )
    return int(text)


#: The plausible range of a barrier a person writes (protocol §3.8): 1973-03-03T09:46:40Z (10**11 ms; below it a
#: barrier is far more often seconds than real) up to 2200-01-01T00:00:00Z (above it, microseconds or nanoseconds).
#: 0, the start of time, is allowed too (a changes read from the beginning).
PLAUSIBLE_MIN_MS = 10**11
PLAUSIBLE_MAX_MS = 7_258_118_400_000

_RELATIVE = re.compile(r"^now\s*([+-])\s*(.+)$", re.IGNORECASE | re.ASCII)
_BEFORE_NOW = re.compile(r"^-\s*(\d+(?:\.\d+)?\s*(?:ms|s|m|min|h|d|w))$", re.IGNORECASE | re.ASCII)
_FORMS = "milliseconds since the epoch, an ISO-8601 time, now, now-5m or -5m (e.g. 1700000000000 or 2023-11-14T22:13:20Z)"
_NOT_UNDERSTOOD = ("is neither milliseconds since the epoch nor an ISO-8601 time, now, now-5m or -5m "
                   "(e.g. 1700000000000 or 2023-11-14T22:13:20Z)")


def _readable(ms: int) -> str:
    return fmt_ms(ms) if -62_135_596_800_000 < ms < 253_402_300_800_000 else "beyond year 9999"


def implausible(ms: int) -> str | None:
    """Why ``ms`` is not a plausible barrier, with its value in milliseconds if it was seconds or microseconds; None
    when it is plausible (0 or within ``PLAUSIBLE_MIN_MS``..``PLAUSIBLE_MAX_MS``)."""
    if ms == 0 or PLAUSIBLE_MIN_MS <= ms < PLAUSIBLE_MAX_MS:
        return None
    where = f"{ms} ms is {_readable(ms)}, outside the plausible barriers (1973-03-03 to 2200-01-01)"
    for unit, ms_of in (("seconds", ms * 1000), ("microseconds", ms // 1000), ("nanoseconds", ms // 1_000_000)):
        if PLAUSIBLE_MIN_MS <= ms_of < PLAUSIBLE_MAX_MS:
            return f"{where}: barriers are milliseconds — in {unit} {ms} would be {ms_of} ({fmt_ms(ms_of)})"
    return f"{where}; give {_FORMS}"


def parse_barrier(text: str, *, now: int | None = None) -> int:
    """The barrier grammar (protocol §3.8): what every barrier a person writes goes through (the CLI, the Spark
    settings, read options and procedures, a string given to the library).

    ``1700000000000`` (ms), an ISO-8601 time (``2023-11-14T22:13:20Z``; without a zone, UTC), ``now``, ``now-5m`` /
    ``now+30s`` (``now`` and a duration of ``util.durations``), ``-5m`` (``now-5m``; a unit is required). ``now`` is
    the caller's clock (``now`` given, else ``now_ms()``). A value outside the plausible range (``implausible``) is
    refused with its value in milliseconds. The JVM port is ``io.consistentcatalog.core.Barriers.parse``.
    """
    raw = text
    text = text.strip()
    if text.isascii() and text.isdigit():
        ms = int(text)
    elif text.lower() == "now":
        ms = now_ms() if now is None else now
    elif (relative := _RELATIVE.match(text)) or (relative := _BEFORE_NOW.match(text)):
        sign, duration = ("-", relative.group(1)) if relative.re is _BEFORE_NOW else relative.groups()
        try:
            offset = parse_duration(duration)
        except InvalidInputError as exc:
            raise InvalidBarrierError(f"barrier {raw!r}: {exc}") from None
        ms = (now_ms() if now is None else now) + (offset if sign == "+" else -offset)
    else:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidBarrierError(f"barrier {raw!r} {_NOT_UNDERSTOOD}") from None
        aware = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        ms = (aware - _UNIX_EPOCH) // timedelta(milliseconds=1)
    why = implausible(ms)
    if why is not None:
        raise InvalidBarrierError(f"barrier {raw!r}: {why}")
    return ms


def to_barrier(value: BarrierLike, *, now: int | None = None) -> int:
    """Turn a caller's barrier into integer milliseconds: a string through the grammar (``parse_barrier``), a datetime
    (naive means UTC) or date (midnight UTC), or an int of milliseconds.

    An int is a value a program computed and is taken as given when non-negative: the plausible range is for what
    people write (tests and simulations use small logical clocks); ``FreshnessTarget`` and the as-of guard of the
    resolver still refuse one in seconds.
    """
    if isinstance(value, bool):
        raise InvalidBarrierError(f"barrier {value!r} is a boolean; give milliseconds since the epoch or a datetime")
    if isinstance(value, int):
        if value < 0:
            raise InvalidBarrierError(f"barrier {value} is negative; give milliseconds since 1970-01-01 UTC")
        return value
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return to_barrier((aware - _UNIX_EPOCH) // timedelta(milliseconds=1))
    if isinstance(value, date):
        return to_barrier(datetime(value.year, value.month, value.day, tzinfo=timezone.utc))
    if isinstance(value, str):
        return parse_barrier(value, now=now)
    raise InvalidBarrierError(f"barrier {value!r} has type {type(value).__name__}; give an int or a datetime")


@dataclass(frozen=True)
class BranchBarriers:
    """Effective barriers along one branch, oldest snapshot first.

    ``barriers[i]`` is None for snapshots before the first barrier (an untagged empty "genesis"
    snapshot on a derived table changes no data and so has no barrier of its own).
    """

    table: str
    branch: str
    snapshot_ids: tuple[int, ...]
    barriers: tuple[int | None, ...]
    truncated: bool
    """True when the oldest retained snapshot has a parent that was expired."""
    untracked: int | None = None
    """Id of the first data-changing snapshot of a derived table written without a barrier."""
    change_counts: tuple[int, ...] = ()
    """``change_counts[i]``: how many of snapshots 0..i changed data (replace and empty commits do not)."""

    @cached_property
    def positions(self) -> dict[int, int]:
        return {snapshot_id: i for i, snapshot_id in enumerate(self.snapshot_ids)}

    def same_data(self, older: int | None, newer: int | None) -> bool:
        """Whether the table holds the same rows at ``older`` and at ``newer`` (None: before its first snapshot).

        False when either snapshot is not on this branch (rolled back, or another branch's).
        """
        def count(snapshot_id: int | None) -> int | None:
            if snapshot_id is None:
                # empty table; when older history was expired, changes before it are unknown: never "same"
                return -1 if self.truncated else 0
            index = self.positions.get(snapshot_id)
            return None if index is None else self.change_counts[index]

        a, b = count(older), count(newer)
        return a is not None and a == b

    @property
    def head_id(self) -> int | None:
        return self.snapshot_ids[-1] if self.snapshot_ids else None

    @cached_property
    def tracked(self) -> int:
        """How many of the oldest snapshots carry barriers: all of them, or those before the untracked one."""
        return len(self.snapshot_ids) if self.untracked is None else self.positions[self.untracked]

    @property
    def tracked_head(self) -> int | None:
        """The newest snapshot before an untracked write (the head when there is none)."""
        return self.snapshot_ids[self.tracked - 1] if self.tracked else None

    def untracked_error(self, writer: str | None = None, complete_until: int | None = None) -> UntrackedWriteError:
        """The error for a cut past the untracked write; ``complete_until`` is the table's W (default: b(tracked head))."""
        by = f" by {writer}" if writer else ""
        last = complete_until if complete_until is not None else (self.barriers[self.tracked - 1] if self.tracked else None)
        before = (
            f"cuts up to barrier {fmt_barrier(last)} still resolve (as of {last}); revise {self.table} to barrier "
            f"{last} to remove the foreign write"
            if last is not None
            else f"revise {self.table} to a barrier before it (mode full) to remove the foreign write"
        )
        return UntrackedWriteError(
            f"{self.table}: snapshot {self.untracked} on branch {self.branch} changed data without {P.BARRIER} "
            f"(written{by} outside the table's job), so the table is untracked from that snapshot on; {before}; "
            "then write it only through its job",
            table=self.table,
            barrier=last,
        )

    @property
    def head_barrier(self) -> int | None:
        """The barrier of the newest tracked snapshot (the head's, unless an untracked write followed it)."""
        return self.barriers[self.tracked - 1] if self.tracked else None

    def snap_at(self, barrier: int) -> tuple[int, int] | None:
        """``snap(X, T)``: (snapshot id, effective barrier) of the newest snapshot with b <= T, or None if empty.

        Only the tracked snapshots count: an untracked write and everything after it have no barrier.
        """
        end = self.tracked
        first = bisect.bisect_left(self.barriers, True, hi=end, key=lambda b: b is not None)
        index = bisect.bisect_right(self.barriers, barrier, lo=first, hi=end) - 1
        if index < first:
            if self.truncated and first < end:
                raise HistoryExpiredError(
                    f"{self.table} has no snapshot at or before barrier {fmt_barrier(barrier)}; its retained history "
                    f"starts at {fmt_barrier(self.barriers[first])} (older snapshots were expired) — resolve as of a "
                    "later barrier, or keep such cuts with a retained cut or a pin before they expire",
                    table=self.table,
                    barrier=self.barriers[first],
                )
            return None
        value = self.barriers[index]
        assert value is not None
        return self.snapshot_ids[index], value

    def barrier_of(self, snapshot_id: int) -> int | None:
        """The effective barrier of a snapshot of this branch (None: before the first barrier, or untracked)."""
        return self.barriers[self.positions[snapshot_id]]


def ancestry(head_id: int | None, snapshots: Mapping[int, SnapshotRecord]) -> tuple[list[SnapshotRecord], bool]:
    """Snapshots from ``head_id`` back to the oldest retained ancestor, oldest first; and whether history was cut short."""
    chain: list[SnapshotRecord] = []
    current = head_id
    seen: set[int] = set()
    while current is not None:
        record = snapshots.get(current)
        if record is None:
            if not chain:
                raise MalformedMetadataError(f"branch head snapshot {current} is missing from the table metadata")
            chain.reverse()
            return chain, True
        if current in seen:
            raise MalformedMetadataError(f"snapshot {current} is its own ancestor: the metadata is corrupt")
        seen.add(current)
        chain.append(record)
        current = record.parent_id
    chain.reverse()
    return chain, False


def branch_barriers(
    table: str,
    branch: str,
    head_id: int | None,
    snapshots: Mapping[int, SnapshotRecord],
    *,
    is_root: bool,
    floor: tuple[int | None, int] | None = None,
    overrides: Mapping[int, int] = _EMPTY_OVERRIDES,
) -> BranchBarriers:
    """Apply protocol §3 to the ancestry of ``head_id``: replace keeps the parent's barrier, late snapshots get b(p)+1.

    ``floor`` is ``(snapshot id, watermark)``: the table was declared complete up to the watermark when
    that snapshot was its head (None: when it was empty), so every later snapshot lands above it.
    ``overrides`` are barriers earlier floors gave to snapshots; they stand in for the raw barrier.
    On a root, a snapshot whose raw barrier equals its parent's is late too: the parent's barrier
    was already complete (W = b(head)), and the new rows must not change it.
    """
    chain, truncated = ancestry(head_id, snapshots)
    ids: list[int] = []
    barriers: list[int | None] = []
    counts: list[int] = []
    changes = 0
    previous: int | None = None
    untracked: int | None = None
    lower = floor[1] if floor is not None and floor[0] is None else None
    # the hot loop of every resolution (each snapshot of each table): attribute lookups kept local
    for record in chain:
        snapshot_id = record.snapshot_id
        ids.append(snapshot_id)
        changed = _changes_data(record.operation, record.summary)
        changes += changed
        counts.append(changes)
        if untracked is not None:
            barriers.append(None)
            continue
        raw = overrides.get(snapshot_id) if overrides else None
        if raw is None:
            text = record.summary.get(BARRIER_KEY)
            if text is not None:
                raw = int(text) if text.isascii() and text.isdigit() else record.barrier
        if record.operation == "replace" and previous is not None:
            effective: int | None = previous
        elif raw is None and not is_root:
            if changed:
                untracked = record.snapshot_id
                barriers.append(None)
                continue
            effective = previous  # an untagged empty commit changes nothing
        else:
            if raw is None:
                raw = record.timestamp_ms
            if previous is None or raw > previous or (raw == previous and not is_root):
                effective = raw
            else:
                effective = previous + 1
            if lower is not None and effective <= lower:
                effective = lower + 1
        barriers.append(effective)
        previous = effective
        if floor is not None and snapshot_id == floor[0]:
            lower = floor[1]
    return BranchBarriers(table, branch, tuple(ids), tuple(barriers), truncated, untracked, tuple(counts))


def watermark(head_barrier: int | None, watermark_property: int | None) -> int | None:
    """``W(X) = max(b(head), consistent.watermark)``; None when the table is empty and has no watermark."""
    if head_barrier is None:
        return watermark_property
    if watermark_property is None:
        return head_barrier
    return max(head_barrier, watermark_property)
