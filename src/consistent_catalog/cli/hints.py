"""What the command line adds to a library error: the command that is the way out.

The library's messages state the problem and the way out in its own terms (``as_of``, revising a
table); errors of the resolver carry the table and barrier they are about, and ``cli_hint`` turns
those into the commands to run.
"""

from __future__ import annotations

from consistent_catalog.exceptions import (
    ConsistentCatalogError,
    HistoryExpiredError,
    NoWatermarkError,
    ResolutionError,
    StrandedDataError,
    UntrackedWriteError,
)


def cli_hint(exc: ConsistentCatalogError) -> str | None:
    """The commands that resolve ``exc``, or None when the message says all there is."""
    if isinstance(exc, UntrackedWriteError) and exc.table is not None:
        if exc.barrier is None:
            return f"consistent-catalog revise {exc.table} --to-barrier <a barrier before it> --mode full"
        return (f"resolve ... --as-of {exc.barrier} reads before the write; "
                f"consistent-catalog revise {exc.table} --to-barrier {exc.barrier} removes it")
    if isinstance(exc, StrandedDataError) and exc.table is not None and exc.barrier is not None:
        return f"consistent-catalog revise {exc.table} --to-barrier {exc.barrier} --mode full, then run its job"
    if isinstance(exc, HistoryExpiredError):
        return "resolve with a later --as-of; consistent-catalog retain or pin keeps cuts from expiring"
    if isinstance(exc, NoWatermarkError) and exc.table is not None:
        if exc.root:
            return f"consistent-catalog advance-watermark {exc.table} BARRIER"
        return f"consistent-catalog status {exc.table} shows its sources' progress"
    if type(exc) is ResolutionError and exc.barrier is not None:
        return "resolve with a later --as-of"
    return None


def with_hint(exc: ConsistentCatalogError) -> str:
    """The error's one line as the command line prints it: the message, then ``(CLI: ...)`` when there is a hint."""
    hint = cli_hint(exc)
    return str(exc) if hint is None else f"{exc} (CLI: {hint})"
