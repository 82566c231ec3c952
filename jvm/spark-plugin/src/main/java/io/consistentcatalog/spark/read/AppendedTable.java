package io.consistentcatalog.spark.read;

import io.consistentcatalog.spark.line.LineSparkTable;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import org.apache.iceberg.Table;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * An incremental epoch's source (protocol §5.5, {@code spark.sql.consistent.incremental}): the rows appended after
 * snapshot {@code from} up to snapshot {@code to} of main, read by Iceberg's incremental append scan. Its schema is
 * the table's at {@code to}; the caller has checked that every data-changing snapshot in the range is an append.
 */
public final class AppendedTable extends PinnedTable {
  private final long from;

  public AppendedTable(Table icebergTable, long from, long to, String catalog, String plain, String table) {
    super(icebergTable, to, catalog, plain, table, true);
    this.from = from;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    Map<String, String> range = new HashMap<>(options.asCaseSensitiveMap());
    range.put("start-snapshot-id", Long.toString(from));
    range.put("end-snapshot-id", Long.toString(snapshotId()));
    return LineSparkTable.current(table()).newScanBuilder(new CaseInsensitiveStringMap(range));
  }

  @Override
  public boolean equals(Object other) {
    return super.equals(other) && other instanceof AppendedTable && ((AppendedTable) other).from == from;
  }

  @Override
  public int hashCode() {
    return Objects.hash(super.hashCode(), from);
  }
}
