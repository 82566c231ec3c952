"""Wall-clock time in epoch milliseconds, and how it is shown to people (UTC, beside the raw number)."""

from __future__ import annotations

import time
from datetime import datetime, timezone


def now_ms() -> int:
    """Milliseconds since the Unix epoch (UTC): the unit of every barrier, watermark and lease."""
    return int(time.time() * 1000)


def fmt_ms(ms: int | None, *, precision: str = "ms") -> str:
    """A readable UTC time: ``2026-11-22 22:44:27.123Z`` (``precision="s"``: ``2026-11-22T22:44:27Z``); ``-`` for None."""
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    if precision == "s":
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def fmt_barrier(ms: int | None) -> str:
    """A barrier for text output: the raw milliseconds (what scripts and ``--as-of`` take) and the UTC time."""
    if ms is None:
        return "-"
    return f"{ms} ({fmt_ms(ms)})"


def fmt_duration(ms: int | None) -> str:
    """``1.5s``, ``12.0m``, ``3.2h``, ``4.0d`` (negative durations keep their sign); ``-`` for None."""
    if ms is None:
        return "-"
    sign = "-" if ms < 0 else ""
    seconds = abs(ms) / 1000
    if seconds < 120:
        return f"{sign}{seconds:.1f}s"
    if seconds < 7200:
        return f"{sign}{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{sign}{seconds / 3600:.1f}h"
    return f"{sign}{seconds / 86400:.1f}d"
