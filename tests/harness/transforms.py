"""Epoch transforms the harness workers and several tests share (the demo's own ones live in ``consistent_catalog.demo``).

Standard library only at module level: worker processes import this before their clock starts.
"""

from __future__ import annotations

from typing import Any

WORDS = "demo.words"


def copy_increment(ctx: Any) -> Any:
    """The append-mode job: rows appended to the root since the previous epoch, unchanged (a doubled epoch doubles rows)."""
    return ctx.read_increment(WORDS)
