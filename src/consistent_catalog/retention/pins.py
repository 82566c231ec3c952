"""Reader pins: keep a consistent cut's snapshots alive while a long read runs.

A pin is an Iceberg tag ``consistent-pin-<id>`` on every table of the cut, with a ``max-ref-age-ms``
chosen so that the tag expires ``ttl`` after the pin was taken. Iceberg measures a ref's age from
its snapshot's timestamp (Java's ``RemoveSnapshots``: ``now - snapshot.timestampMillis() <=
maxRefAgeMs``), so the age written is ``pinned_at + ttl - snapshot timestamp``: every engine's
snapshot expiry (Spark's ``expire_snapshots``, consistent-catalog's ``expire``) keeps the snapshot
until then and drops the tag after. A pin that its reader forgot, or whose process died, therefore
goes away by itself.

>>> with cc.pin(["demo.words", "demo.word_counts"], ttl="2h") as pinned:   # doctest: +SKIP
...     words = pinned.read.to_arrow("demo.words")
...     # Spark: SELECT * FROM lake.demo.words VERSION AS OF '<pinned.tag>'
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pyiceberg.table.update import AssertRefSnapshotId, RemoveSnapshotRefUpdate

from consistent_catalog import properties as P
from consistent_catalog.barrier import BarrierLike
from consistent_catalog.commit import RetryPolicy, TakeFence, fence_head, tag_update
from consistent_catalog.exceptions import FencedError, InvalidInputError
from consistent_catalog.read import ConsistentRead, resolve_cut
from consistent_catalog.resolver import DEFAULT_LEVEL, Cut
from consistent_catalog.retention.refs import PIN_PREFIX, TagInfo, collect_tags, ref_age_for
from consistent_catalog.util.durations import parse_duration
from consistent_catalog.util.identifiers import normalize_identifier
from consistent_catalog.util.time import fmt_barrier, now_ms

if TYPE_CHECKING:
    from consistent_catalog.commit import TableStore

DEFAULT_TTL_MS = 3600_000


@dataclass
class Pin:
    """A pinned cut: ``tag`` on every table of ``cut`` that is not empty at it, until ``expires_at``.

    A context manager: leaving the ``with`` block releases the pin (removes the tags).
    """

    store: TableStore
    tag: str
    cut: Cut
    expires_at: int
    tables: Mapping[str, int] = field(default_factory=dict)
    """Table -> pinned snapshot id (tables empty at the cut carry no tag)."""
    released: bool = False
    _read: ConsistentRead | None = field(default=None, repr=False)

    @property
    def read(self) -> ConsistentRead:
        """Scans and Arrow data at the pinned cut (``pinned.read.to_arrow("demo.words")``)."""
        if self._read is None:
            self._read = ConsistentRead(self.cut, {name: self.store.load_table(name) for name in self.cut.tables})
        return self._read

    def to_arrow(self, table: str) -> Any:
        return self.read.to_arrow(table)

    def renew(self, ttl: int | str | timedelta, *, now: int | None = None) -> int:
        """Move the expiry to ``now + ttl`` on every pinned table; returns the new expiry (ms)."""
        expires_at = (now_ms() if now is None else now) + parse_duration(ttl)
        for name, snapshot_id in self.tables.items():
            table = self.store.load_table(name)
            snapshot = table.metadata.snapshot_by_id(snapshot_id)
            if snapshot is None or table.metadata.refs.get(self.tag) is None:
                raise FencedError(
                    f"{name}: pin {self.tag} is gone (its ttl passed and expiry dropped it); take a new pin"
                )
            self.store.commit(
                table,
                [AssertRefSnapshotId(ref=self.tag, snapshot_id=snapshot_id)],
                [tag_update(self.tag, snapshot_id, ref_age_for(expires_at, snapshot.timestamp_ms))],
                what=f"renewing pin {self.tag}",
                take_fence=TakeFence.keeping_holder(table.metadata, "tag", fence_head(table)),  # an expiry planned before this is refused
            )
        self.expires_at = expires_at
        return expires_at

    def release(self) -> None:
        """Remove the pin's tags (tables where it is already gone are skipped)."""
        if not self.released:
            unpin(self.store, self.tag, self.tables)
            self.released = True

    def __enter__(self) -> Pin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def to_json(self) -> dict[str, Any]:
        return {"tag": self.tag, "expires_at": self.expires_at, "tables": dict(self.tables), "cut": self.cut.to_json()}


def pin(
    store: TableStore,
    tables: Iterable[str],
    *,
    level: str = DEFAULT_LEVEL,
    as_of: BarrierLike | None = None,
    ttl: int | str | timedelta = DEFAULT_TTL_MS,
    now: int | None = None,
    retries: int = 3,
) -> Pin:
    """Resolve a cut of ``tables`` and pin it for ``ttl`` (one tag commit per table). Use as a context manager.

    Between resolving and tagging, expiry may remove a snapshot of the cut; the tag commit then
    fails inside the catalog's compare-and-swap, the tags already set are removed and the cut is
    resolved and pinned again (up to ``retries`` times).
    """
    ttl_ms = parse_duration(ttl)
    if ttl_ms <= 0:
        raise InvalidInputError("a pin needs a positive ttl, e.g. 30m or 2h")
    names = list(dict.fromkeys(normalize_identifier(t) for t in tables))
    if not names:
        raise InvalidInputError("name at least one table to pin")
    for _ in RetryPolicy(retries).attempts():
        started = now_ms() if now is None else now
        cut = resolve_cut(store, names, level=level, as_of=as_of)
        if all(part.snapshot_id is None for part in cut.tables.values()):
            raise InvalidInputError(
                f"the {cut.level} cut of {', '.join(names)} at barrier {fmt_barrier(cut.barrier)} holds no snapshot in any table: "
                "there is nothing to pin — pin a later cut (no --as-of, or a later one)"
            )
        expires_at = started + ttl_ms
        tag = f"{PIN_PREFIX}{uuid.uuid4().hex[:16]}"
        done: dict[str, int] = {}
        try:
            for name, table_cut in cut.tables.items():
                if table_cut.snapshot_id is None:
                    continue
                table = store.load_table(name)
                snapshot = table.metadata.snapshot_by_id(table_cut.snapshot_id)
                if snapshot is None:
                    raise FencedError(f"{name}: snapshot {table_cut.snapshot_id} was expired before it could be pinned")
                store.commit(
                    table,
                    [AssertRefSnapshotId(ref=tag, snapshot_id=None)],
                    [tag_update(tag, snapshot.snapshot_id, ref_age_for(expires_at, snapshot.timestamp_ms))],
                    what=f"pinning {tag}",
                    # an expiry after this load moves the fence (refused: re-pinned); one planned before it is refused
                    take_fence=TakeFence.keeping_holder(table.metadata, "tag", fence_head(table)),
                )
                done[name] = snapshot.snapshot_id
        except FencedError:
            unpin(store, tag, done)
            continue
        return Pin(store, tag, cut, expires_at, done)
    raise FencedError(
        f"could not pin a cut of {', '.join(names)}: its snapshots kept being expired while pinning ({retries} attempts); "
        "pin a newer cut (no --as-of) or run it when no expiry is running"
    )


def unpin(store: TableStore, tag: str, tables: Iterable[str] | None = None) -> list[str]:
    """Remove the tag ``tag`` from ``tables`` (every table carrying it when None); returns the tables it was removed from."""
    if not tag.startswith(P.TAG_PREFIX):
        raise InvalidInputError(f"{tag!r} is not a consistent-catalog tag (they start with {P.TAG_PREFIX!r}); see `consistent-catalog pins`")
    names = store.list_tables() if tables is None else [normalize_identifier(t) for t in tables]
    removed: list[str] = []
    for name in names:
        table = store.load_table(name)
        ref = table.metadata.refs.get(tag)
        if ref is None or ref.snapshot_ref_type.value != "tag":
            continue
        try:
            store.commit(
                table,
                [AssertRefSnapshotId(ref=tag, snapshot_id=ref.snapshot_id)],
                [RemoveSnapshotRefUpdate(ref_name=tag)],
                what=f"removing {tag}",
            )
        except FencedError:
            if store.load_table(name).metadata.refs.get(tag) is not None:
                raise
            continue  # removed concurrently (expiry dropped it): that is what we wanted
        removed.append(name)
    return removed


PinInfo = TagInfo
"""A reader pin: its tag, the pinned tables, its expiry and whether it expired."""


def list_pins(store: TableStore, tables: Iterable[str] | None = None, *, now: int | None = None) -> list[PinInfo]:
    """Every reader pin on ``tables`` (all tables when None), soonest expiry first; expired ones await ``expire``."""
    names = store.list_tables() if tables is None else [normalize_identifier(t) for t in tables]
    metadata = {name: store.load_table(name).metadata for name in names}
    pins = collect_tags(metadata, lambda ref: ref.name.startswith(PIN_PREFIX), now_ms() if now is None else now)
    return sorted(pins, key=lambda p: (p.expires_at or 0, p.tag))
