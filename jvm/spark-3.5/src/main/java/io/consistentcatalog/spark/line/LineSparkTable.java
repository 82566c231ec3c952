package io.consistentcatalog.spark.line;

import org.apache.iceberg.Table;
import org.apache.iceberg.spark.source.SparkTable;

/**
 * How this line builds Iceberg's {@link SparkTable}: the base of the plugin's own tables ({@code PinnedTable},
 * {@code SinkTable}, {@code EpochMergeTable}) and the factory of the plain ones the shared code writes or scans
 * through. Iceberg 1.10 and 1.11 (the 3.5 and 4.0 lines' runtimes) have public constructors for a snapshot and a branch; Iceberg's
 * Spark 4.1 runtime made them private, and jvm/spark-4.1 has its own copy of this class that delegates instead.
 * Each line module has its own copy (as of {@link LineSparkCatalog}); public, so the shared classes may live in
 * any package.
 */
public abstract class LineSparkTable extends SparkTable {
  /** The table as it is now (its current snapshot and schema). */
  protected LineSparkTable(Table table) {
    super(table, false);
  }

  /** The table at {@code snapshotId} (its schema then); null: as it is now. */
  protected LineSparkTable(Table table, Long snapshotId) {
    super(table, snapshotId, false);
  }

  /** The table on {@code branch} (its head); reads and writes go to the branch. */
  protected LineSparkTable(Table table, String branch) {
    super(table, branch, false);
  }

  /** Iceberg's table as it is now: what a write or a scan of the current state goes through. */
  public static SparkTable current(Table table) {
    return new SparkTable(table, false);
  }

  /** Iceberg's table at {@code snapshotId} (its schema then): what a stream's first micro-batch scans. */
  public static SparkTable atSnapshot(Table table, long snapshotId) {
    return new SparkTable(table, snapshotId, false);
  }

  /** Iceberg's table on {@code branch}: writes commit to the branch. */
  public static SparkTable onBranch(Table table, String branch) {
    return new SparkTable(table, branch, false);
  }

  /** Whether Iceberg loaded {@code table} as it is now: no branch, no snapshot or time travel (a plain name). */
  public static boolean isCurrent(SparkTable table) {
    return table.branch() == null && table.snapshotId() == null;
  }
}
