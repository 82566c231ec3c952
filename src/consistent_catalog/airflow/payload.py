"""The cut a sensor or asset watcher hands to the task it wakes (docs/protocol.md §10.13), and reading exactly it.

Pure of Airflow: a task, a test or a notebook can read a payload it was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consistent_catalog.exceptions import InvalidInputError
from consistent_catalog.resolver import Cut, TableCut
from consistent_catalog.sql import cut_to_spark_sql
from consistent_catalog.util.identifiers import qualified_name

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import DataScan
    from pyspark.sql import DataFrame, SparkSession

    from consistent_catalog.catalog import ConsistentCatalog


def cut_payload(cut: Cut, catalog: str) -> dict[str, Any]:
    """The payload of §10.13: ``resolve``'s JSON of the cut (§10.1) and the pyiceberg catalog's name."""
    return {"catalog": catalog, **cut.to_json()}


@dataclass(frozen=True)
class PinnedCut:
    """The cut that woke a task, and readers pinned at its snapshot ids.

    >>> pinned = PinnedCut.of(ti.xcom_pull(task_ids="wait_for_cut"))        # doctest: +SKIP
    >>> pinned.scan(cc, "demo.word_counts").to_arrow()                      # doctest: +SKIP
    """

    catalog: str
    cut: Cut

    @classmethod
    def of(cls, payload: Any) -> PinnedCut:
        """From an XCom value, an asset event (its ``extra["payload"]``) or the payload itself."""
        extra = getattr(payload, "extra", None)
        if isinstance(extra, Mapping):  # an AssetEvent of the watcher: the triggerer wraps the payload
            payload = extra
        if isinstance(payload, Mapping) and "payload" in payload and "tables" not in payload:
            payload = payload["payload"]
        if not isinstance(payload, Mapping) or not isinstance(payload.get("tables"), Mapping):
            raise InvalidInputError(
                f"not a consistent cut payload: {type(payload).__name__} without 'tables'; pass the sensor's XCom "
                "value or the watcher's asset event (docs/protocol.md §10.13)"
            )
        tables = {
            name: TableCut(name, part.get("snapshot_id"), part.get("barrier"), "main")
            for name, part in payload["tables"].items()
        }
        return cls(str(payload.get("catalog", "")), Cut(payload.get("level", "repeatable-read"), payload.get("barrier"), tables))

    @property
    def barrier(self) -> int | None:
        return self.cut.barrier

    @property
    def snapshot_ids(self) -> dict[str, int | None]:
        return self.cut.snapshot_ids

    def _part(self, table: str) -> TableCut:
        try:
            return self.cut.tables[table]
        except KeyError:
            raise InvalidInputError(
                f"{table} is not in the cut ({', '.join(self.cut.tables)}); wait for it too, or read it with its own cut"
            ) from None

    def scan(self, catalog: ConsistentCatalog | Catalog, table: str, **options: Any) -> DataScan:
        """A pyiceberg scan of ``table`` at the cut's snapshot (an empty table at the cut scans nothing)."""
        part = self._part(table)
        pyiceberg_catalog = getattr(catalog, "catalog", catalog)
        loaded = pyiceberg_catalog.load_table(table)
        if part.snapshot_id is None:
            from pyiceberg.expressions import AlwaysFalse

            return loaded.scan(**{**options, "row_filter": AlwaysFalse()})  # nothing, whatever filter was given
        return loaded.scan(snapshot_id=part.snapshot_id, **options)

    def spark_read(self, spark: SparkSession, table: str, spark_catalog: str = "lake") -> DataFrame:
        """A Spark DataFrame of ``table`` at the cut's snapshot (``versionAsOf``); empty at the cut: no rows."""
        part = self._part(table)
        name = qualified_name(spark_catalog, table)
        if part.snapshot_id is None:
            return spark.table(name).limit(0)
        return spark.read.option("versionAsOf", str(part.snapshot_id)).table(name)

    def spark_sql(self, spark_catalog: str = "lake") -> list[str]:
        """Spark SQL registering one temporary view per table pinned at the cut (``VERSION AS OF``)."""
        return cut_to_spark_sql(self.cut, spark_catalog)

    def spark_session_settings(self) -> list[str]:
        """For the ``lake_consistent`` catalog: read the cut at this barrier in every later statement."""
        if self.cut.barrier is None:
            raise InvalidInputError("a read-uncommitted cut has no barrier to read as of; use spark_sql() instead")
        return [f"SET spark.sql.consistent.level={self.cut.level}", f"SET spark.sql.consistent.asOf={self.cut.barrier}"]
