"""A lean decoder of Iceberg table metadata JSON into ``TableState``: only the fields the resolver reads.

pyiceberg builds pydantic models for everything in a metadata file (schemas, partition specs, sort
orders, the metadata log, every snapshot's manifest list) and then ``loading.table_state`` keeps
a handful of fields of them. This module decodes those fields straight from the JSON bytes with
msgspec — typed, so every field the resolver does not need is skipped without building an object —
and builds the same ``TableState`` ``loading.table_state`` builds from pyiceberg's model (equal field by
field, in the same order: ``tests/unit/test_metadata.py``):

- snapshots: id, parent id, timestamp, the summary's operation and its other properties;
- refs split into branches and tags (``main`` from ``current-snapshot-id`` when the refs lack it, as
  pyiceberg does; ``-1`` means none);
- table properties; the snapshot log.

Every snapshot is kept (history, epochs and retention read them all), so a lean state is complete.
gzip-compressed metadata (``*.gz.metadata.json``) is recognised by its magic bytes. A REST catalog's
``LoadTableResult`` (the metadata inline, beside its ``metadata-location``) is decoded the same way
(``decode_load_result``), and its location alone can be read without decoding the metadata
(``load_result_head``, which also tells whether the server handed out config or credentials with it).

The decoder is strict: whatever it does not recognise as well-formed metadata of the fields it reads
(a summary without an operation or with non-string values, properties that are not strings, an
unknown format version, a missing required field, invalid JSON) raises ``LeanDecodeError``, and the
caller parses the file with pyiceberg instead, which gives the answer, the warning or the error it
always gave. Pure: bytes in, ``TableState`` out; no pyiceberg, no I/O.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Literal

import msgspec

from consistent_catalog import properties as P
from consistent_catalog.barrier import SnapshotRecord
from consistent_catalog.state import TableState

GZIP_MAGIC = b"\x1f\x8b"
FORMAT_VERSIONS = (1, 2, 3)
#: the values of pyiceberg's ``Operation`` enum (Iceberg's snapshot operations)
OPERATIONS = frozenset({"append", "replace", "overwrite", "delete"})


class LeanDecodeError(ValueError):
    """The bytes are not metadata the lean decoder can read exactly like pyiceberg: parse them with pyiceberg."""


class _Snapshot(msgspec.Struct, rename="kebab", gc=False):
    snapshot_id: int
    timestamp_ms: int
    manifest_list: str  # not kept; required as pyiceberg requires it
    parent_snapshot_id: int | None = None
    summary: dict[str, str] | None = None
    schema_id: int | None = None


class _Ref(msgspec.Struct, rename="kebab", gc=False):
    snapshot_id: int
    type: Literal["branch", "tag"]


class _LogEntry(msgspec.Struct, rename="kebab", gc=False):
    snapshot_id: int
    timestamp_ms: int


class _Metadata(msgspec.Struct, rename="kebab"):
    format_version: int
    properties: dict[str, str] = {}
    snapshots: list[_Snapshot] = []
    refs: dict[str, _Ref] = {}
    snapshot_log: list[_LogEntry] = []
    current_snapshot_id: int | None = None
    current_schema_id: int = 0  # v1 metadata may lack it: pyiceberg then takes the one schema, id 0


_DECODER = msgspec.json.Decoder(_Metadata)


class _LoadResult(msgspec.Struct, rename="kebab"):
    """The REST spec's LoadTableResult, only what a state needs (config and credentials are skipped)."""

    metadata: _Metadata
    metadata_location: str | None = None


class _LoadResultHead(msgspec.Struct, rename="kebab"):
    metadata_location: str | None = None
    config: dict[str, str] = {}
    storage_credentials: list[msgspec.Raw] = []


_LOAD_RESULT_DECODER = msgspec.json.Decoder(_LoadResult)
_HEAD_DECODER = msgspec.json.Decoder(_LoadResultHead)


def decompress(data: bytes) -> bytes:
    """The JSON of a metadata file: gzip-compressed files (by their magic bytes) are decompressed."""
    if data[:2] == GZIP_MAGIC:
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise LeanDecodeError(f"corrupt gzip metadata: {exc}") from None
    return data


def decode_state(identifier: str, data: bytes) -> TableState:
    """``TableState`` of one metadata file's bytes (JSON, or gzip-compressed JSON); LeanDecodeError if not lean-readable."""
    try:
        metadata = _DECODER.decode(decompress(data))
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise LeanDecodeError(str(exc)) from None
    return _state(identifier, metadata)


def decode_load_result(identifier: str, data: bytes) -> tuple[str | None, TableState]:
    """(metadata location, ``TableState``) of a REST ``LoadTableResult`` body; LeanDecodeError if not lean-readable."""
    try:
        result = _LOAD_RESULT_DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise LeanDecodeError(str(exc)) from None
    return result.metadata_location, _state(identifier, result.metadata)


def load_result_head(data: bytes) -> tuple[str | None, bool]:
    """(``metadata-location``, whether it carries ``config`` or ``storage-credentials``) of a REST
    ``LoadTableResult`` body, the metadata skipped, not decoded (None when there is no location)."""
    try:
        head = _HEAD_DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise LeanDecodeError(str(exc)) from None
    return head.metadata_location, bool(head.config or head.storage_credentials)


def _state(identifier: str, metadata: _Metadata) -> TableState:
    if metadata.format_version not in FORMAT_VERSIONS:
        raise LeanDecodeError(f"format-version {metadata.format_version}")
    make = tuple.__new__
    operations = OPERATIONS
    snapshots: dict[int, SnapshotRecord] = {}
    for s in metadata.snapshots:
        summary = s.summary
        if summary is None:
            operation = "append"
            summary = {}
        else:
            operation = summary.pop("operation", None)
            if operation not in operations:  # missing (pyiceberg warns) or not an Iceberg operation (it refuses)
                raise LeanDecodeError(f"snapshot {s.snapshot_id}: summary operation {operation!r}")
        snapshot_id = s.snapshot_id
        snapshots[snapshot_id] = make(
            SnapshotRecord, (snapshot_id, s.parent_snapshot_id, s.timestamp_ms, operation, summary, s.schema_id)
        )
    branches: dict[str, int] = {}
    tags: dict[str, int] = {}
    for name, ref in metadata.refs.items():
        (branches if ref.type == "branch" else tags)[name] = ref.snapshot_id
    current = metadata.current_snapshot_id
    if current is not None and current != -1 and P.MAIN_BRANCH not in branches and P.MAIN_BRANCH not in tags:
        branches[P.MAIN_BRANCH] = current  # pyiceberg's construct_refs
    log = tuple((entry.timestamp_ms, entry.snapshot_id) for entry in metadata.snapshot_log)
    return TableState(identifier, snapshots, branches, metadata.properties, tags, log, metadata.current_schema_id)
