"""How much history to keep: ``RetentionPolicy`` and the Iceberg table properties it defaults to."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from consistent_catalog.exceptions import InvalidInputError
from consistent_catalog.state import TableState
from consistent_catalog.util.durations import parse_duration

#: Iceberg's own expiry settings (table properties), honoured as defaults.
MAX_SNAPSHOT_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_PROPERTY = "history.expire.min-snapshots-to-keep"
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000  # Iceberg's default: 5 days
DEFAULT_MIN_SNAPSHOTS = 1

Tier = Literal["hourly", "daily", "weekly"]
TIERS: tuple[Tier, ...] = ("hourly", "daily", "weekly")
TIER_MS = {"hourly": 3600_000, "daily": 86_400_000, "weekly": 7 * 86_400_000}


@dataclass(frozen=True)
class RetentionPolicy:
    """How much history to keep. ``older_than`` is ms, or text (``"7d"``, ``"90s"``) or a timedelta, as for the CLI.

    ``older_than``: snapshots newer than this are never expired (None: the table property
    ``history.expire.max-snapshot-age-ms``, else Iceberg's default of 5 days). ``keep_last``: the newest
    snapshots of ``main`` always kept (None: ``history.expire.min-snapshots-to-keep``, else 1).
    ``hourly``/``daily``/``weekly``: how many hours/days/weeks each tier of retained cuts lives
    (0: no such tier). ``delete_files``: also delete data, manifest and manifest-list files that no
    retained snapshot references.
    """

    older_than: int | str | timedelta | None = None
    """Held as ms once constructed (text and timedeltas are parsed by ``__post_init__``)."""
    keep_last: int | None = None
    hourly: int = 0
    daily: int = 0
    weekly: int = 0
    delete_files: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.older_than, bool) or (self.older_than is not None and not isinstance(self.older_than, int)):
            object.__setattr__(self, "older_than", parse_duration(self.older_than))
        if self.older_than is not None and self.older_than < 0:
            raise InvalidInputError(f"older_than must be >= 0 ms, got {self.older_than}")
        if self.keep_last is not None and self.keep_last < 1:
            raise InvalidInputError(f"keep_last must be >= 1 (main's head is always kept), got {self.keep_last}")
        for tier in TIERS:
            if getattr(self, tier) < 0:
                raise InvalidInputError(f"{tier} must be >= 0, got {getattr(self, tier)}")

    @classmethod
    def of(cls, *, older_than: int | str | timedelta | None = None, **options: Any) -> RetentionPolicy:
        return cls(older_than=older_than, **options)

    @property
    def tiers(self) -> dict[Tier, int]:
        return {tier: getattr(self, tier) for tier in TIERS if getattr(self, tier) > 0}

    def max_age_ms(self, state: TableState) -> int:
        if self.older_than is not None:
            return int(self.older_than)  # ms after __post_init__
        return _int_property(state, MAX_SNAPSHOT_AGE_PROPERTY, DEFAULT_MAX_SNAPSHOT_AGE_MS)

    def min_snapshots(self, state: TableState) -> int:
        if self.keep_last is not None:
            return self.keep_last
        return max(1, _int_property(state, MIN_SNAPSHOTS_PROPERTY, DEFAULT_MIN_SNAPSHOTS))


def _int_property(state: TableState, key: str, default: int) -> int:
    value = state.properties.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidInputError(
            f"{state.identifier}: table property {key} is {value!r}, not an integer; fix it or pass the value explicitly"
        ) from None


