"""Durations given by people: ``90s``, ``30m``, ``12h``, ``7d``, ``2w``, a timedelta, or milliseconds.

The one grammar of the project: the JVM plugin's ``io.consistentcatalog.core.Durations`` is a port (the conformance
corpus checks both).
"""

from __future__ import annotations

import re
from datetime import timedelta

from consistent_catalog.exceptions import InvalidInputError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d|w)?\s*$", re.IGNORECASE | re.ASCII)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def parse_duration(value: int | float | timedelta | str) -> int:
    """Milliseconds of a duration: an int (ms), a timedelta, or text like ``90s``, ``30m``, ``12h``, ``7d``, ``2w``."""
    if isinstance(value, bool):
        raise InvalidInputError(f"duration {value!r} is a boolean; give e.g. 12h, 7d or milliseconds")
    if isinstance(value, timedelta):
        ms = int(value / timedelta(milliseconds=1))
    elif isinstance(value, (int, float)):
        ms = int(value)
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise InvalidInputError(
                f"duration {value!r} is not understood; write a number with a unit: 500ms, 90s, 30m, 12h, 7d, 2w "
                "(a bare number is milliseconds)"
            )
        ms = int(float(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()])
    if ms < 0:
        raise InvalidInputError(f"duration {value!r} is negative; give a positive age such as 7d")
    return ms
