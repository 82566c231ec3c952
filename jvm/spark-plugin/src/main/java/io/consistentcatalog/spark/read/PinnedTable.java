package io.consistentcatalog.spark.read;

import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.StreamingSide;
import io.consistentcatalog.spark.context.ChangesReads;
import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import io.consistentcatalog.spark.line.LineSparkTable;
import org.apache.iceberg.Table;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.RowLevelOperationBuilder;
import org.apache.spark.sql.connector.write.RowLevelOperationInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;

/**
 * A table served by the consistent catalog: Iceberg's SparkTable pinned to the cut's snapshot (or, for
 * a name with a selector, whatever the selector chose), refusing every kind of write.
 */
public class PinnedTable extends LineSparkTable {
  private final String catalog;
  private final String plain;
  private final String table;
  /** Served at the statement's cut (not a selector, VERSION AS OF or branch): an epoch may replace it by its input. */
  public final boolean atCut;

  public PinnedTable(Table icebergTable, Long snapshotId, String catalog, String plain, String table) {
    this(icebergTable, snapshotId, catalog, plain, table, false);
  }

  public PinnedTable(Table icebergTable, Long snapshotId, String catalog, String plain, String table, boolean atCut) {
    super(icebergTable, snapshotId);
    this.catalog = catalog;
    this.plain = plain;
    this.table = table;
    this.atCut = atCut;
  }

  /** The table's name in the catalog ({@code demo.words}). */
  public String tableName() {
    return table;
  }

  /** What a streaming query reading or writing this table does (null: a selector's table, not streamed by us). */
  private StreamingSide streaming;

  /**
   * This table as a streaming query's source or sink too (issue 35): its scan's {@code toMicroBatchStream} and its
   * write's {@code toStreaming} are {@code side}'s, its batch read and write stay as they are.
   */
  public PinnedTable streamedAs(StreamingSide side) {
    this.streaming = side;
    return this;
  }

  /** The streaming side, or null. */
  StreamingSide streaming() {
    return streaming;
  }

  @Override
  public Set<TableCapability> capabilities() {
    Set<TableCapability> own = super.capabilities();
    if (streaming == null) {
      return own;
    }
    Set<TableCapability> all = EnumSet.noneOf(TableCapability.class);
    all.addAll(own);
    all.add(TableCapability.MICRO_BATCH_READ);
    all.add(TableCapability.STREAMING_WRITE);
    return all;
  }

  /** A read asking for changes without the SQL extensions is refused (NO_EXTENSIONS, {@link ChangesReads}). */
  void refuseUnshaped(CaseInsensitiveStringMap options) {
    ChangesReads.refuseUnshaped(catalog, table, options);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    refuseUnshaped(options);
    ScanBuilder batch = super.newScanBuilder(options);
    return streaming == null ? batch : StreamingChoice.scanBuilder(batch, streaming, options);
  }

  public PinnedTable(Table icebergTable, String branch, String catalog, String plain, String table) {
    super(icebergTable, branch);
    this.catalog = catalog;
    this.plain = plain;
    this.table = table;
    this.atCut = false;
  }

  private RuntimeException refused(String what) {
    return Errors.raise(Errors.readOnly(catalog, plain, what + " " + catalog + "." + table));
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    if (streaming != null) {
      return StreamingChoice.writeBuilder(info, streaming, () -> refused("writing to"));
    }
    throw refused("writing to");
  }

  @Override
  public RowLevelOperationBuilder newRowLevelOperationBuilder(RowLevelOperationInfo info) {
    throw refused("a row-level change (DELETE/UPDATE/MERGE) of");
  }

  @Override
  public boolean canDeleteWhere(Predicate[] predicates) {
    throw refused("DELETE FROM");
  }

  @Override
  public void deleteWhere(Predicate[] predicates) {
    throw refused("DELETE FROM");
  }

  /**
   * Iceberg's SparkTable compares names only (to invalidate Spark's cache by name); a pinned table is also its
   * snapshot or branch, so that a plan rewritten to another snapshot (an epoch's input) is a different plan.
   */
  @Override
  public boolean equals(Object other) {
    if (!super.equals(other) || !(other instanceof PinnedTable)) {
      return false;
    }
    PinnedTable that = (PinnedTable) other;
    return java.util.Objects.equals(snapshotId(), that.snapshotId()) && java.util.Objects.equals(branch(), that.branch());
  }

  @Override
  public int hashCode() {
    return super.hashCode();
  }
}
