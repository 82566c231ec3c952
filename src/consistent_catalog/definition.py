"""Job definitions (docs/protocol.md §6.10), pure: what computed an epoch, and whether the sink needs a revision.

Every staged snapshot records ``consistent.definition``, a fingerprint of the job's definition
(``<kind>:<16 hex>``): the normalised SQL text of a statement, a Python transform's qualified name and
source, or a declared version. ``definition_change`` compares the sink's last epoch with the job as it
runs now (its fingerprint, the sink's schema, a rebuild request): a difference makes the job's next
epoch a revision, so new logic never hides behind ``done``.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from consistent_catalog import properties as P
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.exceptions import InvalidInputError
from consistent_catalog.state import TableState

DefinitionKind = Literal["sql", "plan", "python", "version"]
KINDS: tuple[str, ...] = ("sql", "plan", "python", "version")
ChangeReason = Literal["rebuild", "definition", "schema", "upstream"]


def fingerprint(kind: str, text: str) -> str:
    """``<kind>:`` and the first 16 hex digits of SHA-256 over ``text`` (UTF-8)."""
    if kind not in KINDS:
        raise InvalidInputError(f"definition kind {kind!r} is not one of {', '.join(KINDS)}")
    return f"{kind}:{hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}"


def normalize_sql(text: str) -> str:
    """A SQL statement as its fingerprint sees it: comments removed, white space outside quotes folded to one
    space, trimmed, a trailing ``;`` dropped. Case is kept (string literals and quoted names are case-sensitive)."""
    out: list[str] = []
    i, n = 0, len(text)
    pending_space = False
    while i < n:
        c = text[i]
        if c in "'\"`":  # a quoted literal or name: copied as it is, doubled or escaped quotes included
            j = i + 1
            while j < n:
                if text[j] == "\\" and c != "`":
                    j += 2
                    continue
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            if pending_space and out:
                out.append(" ")
            pending_space = False
            out.append(text[i : j + 1])
            i = j + 1
            continue
        if c == "-" and text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            pending_space = True
            continue
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            pending_space = True
            continue
        if c.isspace():
            pending_space = True
            i += 1
            continue
        if pending_space and out:
            out.append(" ")
        pending_space = False
        out.append(c)
        i += 1
    normalized = "".join(out).strip()
    while normalized.endswith(";"):
        normalized = normalized[:-1].rstrip()
    return normalized


def sql_definition(text: str) -> str:
    """The fingerprint of a SQL statement (kind ``sql``)."""
    return fingerprint("sql", normalize_sql(text))


def version_definition(version: str) -> str:
    """The fingerprint of a declared version (kind ``version``)."""
    if not isinstance(version, str) or not version.strip():
        raise InvalidInputError(f"a job's declared version must be a non-empty string, got {version!r}")
    return fingerprint("version", version)


def python_definition(transform: Callable[..., Any]) -> str:
    """The fingerprint of a Python transform (kind ``python``): its qualified name and its source text (its
    bytecode and constants when the source is not available, e.g. a function typed into a REPL)."""
    target = inspect.unwrap(transform)
    name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__qualname__)}"
    try:
        body = inspect.getsource(target)
    except (OSError, TypeError):
        code = getattr(target, "__code__", None) or getattr(type(target).__call__, "__code__", None)
        body = "" if code is None else code.co_code.hex() + repr(code.co_consts)
    return fingerprint("python", f"{name}\n{body}")


def job_definition(*, version: str | None = None, transform: Callable[..., Any] | None = None) -> str | None:
    """A job's fingerprint: its declared version, else its transform's; None when it has neither."""
    if version is not None:
        return version_definition(version)
    if transform is not None:
        return python_definition(transform)
    return None


def last_epoch(state: TableState, job: str) -> SnapshotRecord | None:
    """The sink's last epoch of ``job`` on main: the newest snapshot, walking parents, that carries a barrier and
    was written by ``job`` (compactions and other jobs' epochs, before a reassign, are passed over)."""
    current = state.head()
    seen: set[int] = set()
    while current is not None and current not in seen:
        seen.add(current)
        record = state.snapshots.get(current)
        if record is None:  # expired history
            return None
        if record.summary.get(P.BARRIER) is not None and record.job == job:
            return record
        current = record.parent_id
    return None


@dataclass(frozen=True)
class DefinitionChange:
    """Why a sink needs a new generation at the job's next epoch (protocol §6.10); ``reason`` is what the epoch's
    snapshots record as ``consistent.regenerate``."""

    reason: ChangeReason
    recorded: str | None
    """The last epoch's fingerprint (``consistent.definition``), its schema id for ``schema``, the source that
    switched generations for ``upstream``."""
    current: str | None
    """The job's fingerprint now, or the sink's current schema id for ``schema``."""

    def describe(self) -> str:
        """``definition changed (sql 3f2a… -> 9b1c…)``, ``schema changed (schema 0 -> 1)``, ``rebuild requested``."""
        if self.reason == "rebuild":
            return "rebuild requested"
        if self.reason == "upstream":
            return f"source {self.recorded} switched generations"
        if self.reason == "schema":
            return f"schema changed (schema {self.recorded} -> {self.current})"
        kind_then, _, hash_then = (self.recorded or "").partition(":")
        kind_now, _, hash_now = (self.current or "").partition(":")
        if kind_then == kind_now:
            return f"definition changed ({kind_now} {hash_then} -> {hash_now})"
        return f"definition changed ({self.recorded} -> {self.current})"


def definition_change(
    state: TableState, job: str, definition: str | None, *, rebuild: bool = False
) -> DefinitionChange | None:
    """Whether ``job``'s next epoch on the sink ``state`` must start a new generation, and why (None: it need not).

    Only when the sink has an epoch of the job: then a rebuild request, a fingerprint that differs from the one
    that epoch recorded (an epoch without one, written before fingerprints, matches), or a schema other than the
    one that epoch was written under.
    """
    record = last_epoch(state, job)
    if record is None:
        return None
    if rebuild:
        return DefinitionChange("rebuild", record.summary.get(P.DEFINITION), definition)
    recorded = record.summary.get(P.DEFINITION)
    if definition is not None and recorded is not None and recorded != definition:
        return DefinitionChange("definition", recorded, definition)
    if record.schema_id is not None and state.current_schema_id is not None and record.schema_id != state.current_schema_id:
        return DefinitionChange("schema", str(record.schema_id), str(state.current_schema_id))
    return None
