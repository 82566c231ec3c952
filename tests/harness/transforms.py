"""Epoch transforms the harness workers and several tests share (the demo's own ones live in ``consistent_catalog.demo``).

Standard library only at module level: worker processes import this before their clock starts.
"""

from __future__ import annotations

from typing import Any

WORDS = "demo.words"


def copy_increment(ctx: Any) -> Any:
    """The append-mode job: rows appended to the root since the previous epoch, unchanged (a doubled epoch doubles rows)."""
    return ctx.read_increment(WORDS)


def count_upper_words(ctx: Any) -> Any:
    """An edited word count: words counted case-insensitively (``demo.count_words`` with ``upper``), to give a job a
    new definition (protocol §6.10) whose output differs."""
    import pyarrow as pa
    import pyarrow.compute as pc

    upper = pa.table({"word": pc.utf8_upper(ctx.read(WORDS)["word"])})
    return upper.group_by("word").aggregate([("word", "count")]).rename_columns(["word", "cnt"])
