"""Table identifiers: the ``namespace.table`` form stored in ``consistent.sources``, and SQL quoting."""

from __future__ import annotations

from collections.abc import Sequence

from consistent_catalog.exceptions import InvalidInputError


def normalize_identifier(identifier: str | Sequence[str]) -> str:
    """``"ns.table"`` for a string or tuple identifier (nested namespaces joined with ``.``)."""
    if isinstance(identifier, str):
        parts = identifier.split(".")
    else:
        parts = list(identifier)
        dotted = [p for p in parts if "." in p]
        if dotted:
            raise InvalidInputError(
                f"table identifier {tuple(identifier)!r}: the name part {dotted[0]!r} contains a dot, which cannot be "
                "told apart from a namespace separator in consistent.sources (protocol §2); rename the table or namespace"
            )
    if len(parts) < 2 or any(not p.strip() for p in parts):
        raise InvalidInputError(f"table identifier {identifier!r} must look like namespace.table")
    return ".".join(parts)


def quote_identifier(part: str) -> str:
    """Back-quote one identifier part for Spark SQL (a back-quote inside is doubled)."""
    return "`" + part.replace("`", "``") + "`"


def qualified_name(catalog: str, table: str) -> str:
    """``lake.demo.words`` -> ```lake`.`demo`.`words```, each part quoted."""
    return ".".join(quote_identifier(p) for p in [catalog, *table.split(".")])
