package io.consistentcatalog.spark.read;

import io.consistentcatalog.spark.context.ServedTables;
import org.apache.spark.sql.connector.catalog.Table;

/** The read side's tables as writes see them ({@link ServedTables}): pinned at a snapshot, or empty at the cut. */
public final class CutTables implements ServedTables {
  private final String catalogName;
  private final String plainName;

  public CutTables(String catalogName, String plainName) {
    this.catalogName = catalogName;
    this.plainName = plainName;
  }

  @Override
  public String servedAtCut(Table table) {
    if (table instanceof PinnedTable && ((PinnedTable) table).atCut) {
      return ((PinnedTable) table).tableName();
    }
    if (table instanceof EmptyTable) {
      return ((EmptyTable) table).tableName();
    }
    return null;
  }

  @Override
  public Table atInput(org.apache.iceberg.Table source, Long snapshot, String name) {
    return snapshot == null
        ? new EmptyTable(source, catalogName, plainName, name)
        : new PinnedTable(source, snapshot, catalogName, plainName, name, true);
  }

  @Override
  public Table appendedBetween(org.apache.iceberg.Table source, long from, long to, String name) {
    return new AppendedTable(source, from, to, catalogName, plainName, name);
  }
}
