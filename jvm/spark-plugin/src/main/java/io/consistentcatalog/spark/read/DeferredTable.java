package io.consistentcatalog.spark.read;

import io.consistentcatalog.spark.context.Errors;
import org.apache.iceberg.Table;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A table a statement loads that has no consistent cut for a reader (no watermark yet, joined a component
 * after the session's cut, ...): served with its current schema so that the statement can be analysed; the
 * epoch an {@code INSERT} becomes replaces it by its input (protocol §5.9), and a streaming query reads or writes it as any
 * other (a root never written yet has no watermark: a stream's sink, issue 35). Scanned in batch as it is — the
 * statement was no epoch of this catalog — it raises the reader's error it stands for, at its batch scan.
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
    refuseUnshaped(options);
    if (streaming() != null) { // a streaming query reads it as any other; its batch raises the error
      return StreamingChoice.deferred(schema(), error, streaming(), options);
    }
    throw Errors.rethrow(error);
  }
}
