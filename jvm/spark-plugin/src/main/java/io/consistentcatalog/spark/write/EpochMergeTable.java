package io.consistentcatalog.spark.write;

import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.WriteCommit;
import io.consistentcatalog.spark.line.LineSparkTable;
import org.apache.iceberg.Table;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.RowLevelOperation;
import org.apache.spark.sql.connector.write.RowLevelOperationBuilder;
import org.apache.spark.sql.connector.write.RowLevelOperationInfo;
import org.apache.spark.sql.connector.write.SupportsDelta;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The sink of a {@code MERGE INTO} epoch (protocol §5.9): Iceberg's table on {@code consistent-staged} (reset to
 * main's head, fenced), so the merge reads the previous epoch's output and writes the new one there; Iceberg's
 * row-level operation (copy-on-write) does the merge, its commit is the epoch's ({@link WriteCommit#commit}).
 */
final class EpochMergeTable extends LineSparkTable {
  private final WriteCommit epoch;

  EpochMergeTable(Table table, String branch, WriteCommit epoch) {
    super(table, branch);
    this.epoch = epoch;
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) { // an insert-only MERGE: Spark appends
    return EpochSinkTable.wrap(super.newWriteBuilder(info), epoch, table().io());
  }

  @Override
  public RowLevelOperationBuilder newRowLevelOperationBuilder(RowLevelOperationInfo info) {
    RowLevelOperationBuilder builder = super.newRowLevelOperationBuilder(info);
    return () -> {
      RowLevelOperation operation = builder.build();
      if (operation instanceof SupportsDelta) {
        throw Errors.raise(Errors.analysis("CONSISTENT_WRITE.REFUSED", epoch.sink() + " merges on read (table property "
            + "write.merge.mode=merge-on-read); an epoch's MERGE INTO rewrites the staged files — set "
            + "write.merge.mode=copy-on-write on the table through the plain catalog"));
      }
      return new Operation(operation, epoch, table().io());
    };
  }

  @Override
  public String toString() {
    return "EpochMerge(" + epoch.sink() + ", " + epoch.action() + ")";
  }

  /** Iceberg's row-level operation, its write's commit the epoch's. */
  private static final class Operation implements RowLevelOperation {
    private final RowLevelOperation delegate;
    private final WriteCommit epoch;
    private final org.apache.iceberg.io.FileIO io;

    Operation(RowLevelOperation delegate, WriteCommit epoch, org.apache.iceberg.io.FileIO io) {
      this.delegate = delegate;
      this.epoch = epoch;
      this.io = io;
    }

    @Override
    public String description() {
      return "consistent " + epoch.action() + " of " + epoch.sink() + " via " + delegate.description();
    }

    @Override
    public Command command() {
      return delegate.command();
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return delegate.newScanBuilder(options);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      return EpochSinkTable.wrap(delegate.newWriteBuilder(info), epoch, io);
    }

    @Override
    public NamedReference[] requiredMetadataAttributes() {
      return delegate.requiredMetadataAttributes();
    }
  }
}
