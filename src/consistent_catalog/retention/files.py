"""File locations compared as normalised URIs (pure: no I/O), for file deletion and the orphan sweep.

Engines spell one file differently: pyiceberg creates a table at ``file:///w/t`` and writes
``file:///w/t/data/a.parquet``, Spark (Hadoop ``Path``) writes ``file:/w/t/data/a.parquet``, a
plain path is ``/w/t/data/a.parquet``; S3 is ``s3://``, ``s3a://`` or ``s3n://`` by client. Every
comparison of locations (is a file inside the table's location, is it still referenced) goes
through ``normalize_location``, never through the strings.

Normalising only ever makes *more* spellings equal, which errs on the side of keeping a file:
a referenced file is kept under any of its spellings, and a file outside the table's location is
never deleted.
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import urlsplit

Location = tuple[str, str, str]
"""(scheme, netloc, path) of a normalised location: ``("file", "", "/w/t/data/a.parquet")``."""

SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}
"""Schemes that name the same store (Hadoop's S3 connectors, the two GCS spellings)."""

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")

__all__ = ["SCHEME_ALIASES", "Location", "checksum_owner", "checksum_sidecar", "is_inside", "normalize_location"]


def normalize_location(uri: str) -> Location:
    """``(scheme, netloc, path)`` of a file or directory location, equal for every spelling of it.

    - ``file:/x``, ``file:///x``, ``file://localhost/x`` and ``/x`` are ``("file", "", "/x")``;
    - ``s3://b/k``, ``s3a://b/k`` and ``s3n://b/k`` are ``("s3", "b", "/k")``; ``gcs://`` is ``gs://``;
    - the scheme is lower case; the path has no empty, ``.`` or ``..`` segments and no trailing
      slash (``s3://b`` and ``s3://b/`` have the path ``/``).
    """
    text = uri.strip()
    if not _SCHEME.match(text) or _WINDOWS_DRIVE.match(text):
        scheme, netloc, path = "file", "", text
    else:
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        scheme = SCHEME_ALIASES.get(scheme, scheme)
        netloc, path = parts.netloc, parts.path
        if scheme == "file" and netloc.lower() == "localhost":
            netloc = ""
    return scheme, netloc, _normalize_path(path)


def _normalize_path(path: str) -> str:
    absolute = path.startswith("/") or not path
    normalized = posixpath.normpath("/" + path if absolute else path)
    if normalized.startswith("//"):  # POSIX keeps a leading "//"; one slash is the same file here
        normalized = "/" + normalized.lstrip("/")
    return normalized


def is_inside(location: Location | str, directory: Location | str) -> bool:
    """Whether ``location`` lies strictly under ``directory`` (same store, path below it)."""
    scheme, netloc, path = normalize_location(location) if isinstance(location, str) else location
    d_scheme, d_netloc, d_path = normalize_location(directory) if isinstance(directory, str) else directory
    if (scheme, netloc) != (d_scheme, d_netloc):
        return False
    prefix = d_path if d_path.endswith("/") else d_path + "/"
    return path.startswith(prefix) and len(path) > len(prefix)



def checksum_sidecar(uri: str) -> str:
    """Where Hadoop's local file system (Spark writing ``file:`` paths) keeps the checksum of ``uri``: ``dir/.name.crc``."""
    directory, _, name = uri.rpartition("/")
    return f"{directory}/.{name}.crc"


def checksum_owner(location: Location) -> Location | None:
    """The file a Hadoop checksum sidecar ``dir/.name.crc`` belongs to (``dir/name``); None for any other file."""
    scheme, netloc, path = location
    directory, _, name = path.rpartition("/")
    if not (name.startswith(".") and name.endswith(".crc") and len(name) > len("..crc")):
        return None
    return scheme, netloc, f"{directory}/{name[1:-len('.crc')]}"
