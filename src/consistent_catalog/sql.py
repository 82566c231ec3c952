"""SQL text for engines that read a cut without Python (Spark SQL ``VERSION AS OF``)."""

from __future__ import annotations

from consistent_catalog.resolver import Cut
from consistent_catalog.util.identifiers import qualified_name, quote_identifier


def view_names(tables: list[str]) -> dict[str, str]:
    """Short view names (the table's own name) unless two tables share one; then namespace_table."""
    short = [t.rsplit(".", 1)[-1] for t in tables]
    return {t: s if short.count(s) == 1 else t.replace(".", "_") for t, s in zip(tables, short)}


def cut_to_spark_sql(cut: Cut, catalog: str = "lake") -> list[str]:
    """Statements that register one temporary view per table, pinned at the cut's snapshot ids."""
    names = view_names(list(cut.tables))
    statements = [f"-- {cut.level} cut at barrier {cut.barrier}"]
    for table, part in cut.tables.items():
        source = qualified_name(catalog, table)
        if part.snapshot_id is None:
            select = f"SELECT * FROM {source} LIMIT 0"
        else:
            select = f"SELECT * FROM {source} VERSION AS OF {part.snapshot_id}"
        statements.append(f"CREATE OR REPLACE TEMPORARY VIEW {quote_identifier(names[table])} AS {select};")
    return statements
