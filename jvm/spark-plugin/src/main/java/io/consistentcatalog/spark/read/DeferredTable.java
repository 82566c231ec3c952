package io.consistentcatalog.spark.read;

import io.consistentcatalog.spark.context.Errors;
import org.apache.iceberg.Table;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A table an {@code INSERT} reads that has no consistent cut for a reader (no watermark yet, joined a component
 * after the session's cut, ...): served with its current schema so that the statement can be analysed; the
 * epoch the statement becomes replaces it by its input (protocol §5.9). Scanned as it is — the statement was not
 * an epoch of this catalog — it raises the reader's error it stands for.
 */
public final class DeferredTable extends PinnedTable {
  private final Exception error;

  public DeferredTable(Table icebergTable, String catalog, String plain, String table, Exception error) {
    super(icebergTable, icebergTable.currentSnapshot() == null ? null : icebergTable.currentSnapshot().snapshotId(),
        catalog, plain, table, true);
    this.error = error;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    throw Errors.rethrow(error);
  }
}
