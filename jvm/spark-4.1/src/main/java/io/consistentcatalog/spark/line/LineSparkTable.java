package io.consistentcatalog.spark.line;

import java.util.Map;
import java.util.Set;
import org.apache.iceberg.Table;
import org.apache.iceberg.spark.TimeTravel;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.MetadataColumn;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.constraints.Constraint;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.RowLevelOperationBuilder;
import org.apache.spark.sql.connector.write.RowLevelOperationInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark 4.1's copy of {@code LineSparkTable} (the 3.5 and 4.0 modules have theirs): how this line builds Iceberg's
 * {@link SparkTable}. Iceberg's Spark 4.1 runtime (1.11+) keeps one public constructor, {@code SparkTable(Table)}
 * (the table as it is now), and builds every other state through its factories: {@code SparkTable.create(table,
 * TimeTravel)} for a snapshot (what its {@code SparkCatalog} does for {@code VERSION AS OF}) and
 * {@code copyWithBranch(branch)} for a branch; their constructors are private. A subclass can therefore only be
 * "the table as it is now": for a snapshot or a branch this class builds Iceberg's own table with those
 * factories and delegates to it everything that depends on the state it pins (schema, scans, writes, row-level
 * operations, deletes, equality); what depends on the table alone (name, properties, capabilities,
 * partitioning) is the same either way. The plugin's tables override writes on top of this, as on other lines.
 */
public abstract class LineSparkTable extends SparkTable {
  /** Iceberg's table at the pinned snapshot or on the branch; null: this table as it is now (super). */
  private final SparkTable pinned;

  /** The table as it is now (its current snapshot and schema). */
  protected LineSparkTable(Table table) {
    super(table);
    this.pinned = null;
  }

  /** The table at {@code snapshotId} (its schema then); null: as it is now. */
  protected LineSparkTable(Table table, Long snapshotId) {
    super(table);
    this.pinned = snapshotId == null ? null : SparkTable.create(table, TimeTravel.version(Long.toString(snapshotId)));
  }

  /** The table on {@code branch} (its head); reads and writes go to the branch. */
  protected LineSparkTable(Table table, String branch) {
    super(table);
    this.pinned = branch == null ? null : current(table).copyWithBranch(branch);
  }

  /** Iceberg's table as it is now: what a write or a scan of the current state goes through. */
  public static SparkTable current(Table table) {
    return new SparkTable(table);
  }

  /**
   * Iceberg's table at {@code snapshotId} (its schema then): what a stream's first micro-batch scans. Iceberg 1.12's
   * 4.1 runtime refuses the {@code snapshot-id} read option, so the snapshot is the table's time travel, as its
   * {@code SparkCatalog} builds it for {@code VERSION AS OF}.
   */
  public static SparkTable atSnapshot(Table table, long snapshotId) {
    return SparkTable.create(table, TimeTravel.version(Long.toString(snapshotId)));
  }

  /** Iceberg's table on {@code branch}: writes commit to the branch (not checked to exist, as on other lines). */
  public static SparkTable onBranch(Table table, String branch) {
    return current(table).copyWithBranch(branch);
  }

  /**
   * Whether Iceberg loaded {@code table} as it is now: no branch, no time travel (a plain name). Iceberg 1.11+
   * always sets the snapshot (the current one) and keeps the time travel private, so this compares with the
   * table as it is now by Iceberg's own equality (snapshot, branch, schema and time travel).
   */
  public static boolean isCurrent(SparkTable table) {
    return table.branch() == null && table.equals(current(table.table()));
  }

  @Override
  public Long snapshotId() {
    return pinned == null ? super.snapshotId() : pinned.snapshotId();
  }

  @Override
  public String branch() {
    return pinned == null ? super.branch() : pinned.branch();
  }

  /**
   * None: the plugin's tables are not versioned for Spark. Spark 4.1 reloads every relation whose table has a
   * version after analysis ({@code QueryExecution}'s refresh phase, {@code V2TableRefreshUtil}: the catalog's
   * {@code loadTable(ident)}, without write privileges) and swaps the table in; that would replace a write's
   * {@code SinkTable} by a read-only {@code PinnedTable} and re-resolve a pinned read's cut after the statement
   * chose it. The plugin pins its tables itself (the cut, the epoch), as on Spark 3.5 and 4.0.
   */
  @Override
  public String version() {
    return null;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return pinned == null ? super.capabilities() : pinned.capabilities();
  }

  @Override
  public Constraint[] constraints() {
    return pinned == null ? super.constraints() : pinned.constraints();
  }

  @Override
  public StructType schema() {
    return pinned == null ? super.schema() : pinned.schema();
  }

  @Override
  public Column[] columns() {
    return pinned == null ? super.columns() : pinned.columns();
  }

  @Override
  public Transform[] partitioning() {
    return pinned == null ? super.partitioning() : pinned.partitioning();
  }

  @Override
  public Map<String, String> properties() {
    return pinned == null ? super.properties() : pinned.properties();
  }

  @Override
  public MetadataColumn[] metadataColumns() {
    return pinned == null ? super.metadataColumns() : pinned.metadataColumns();
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return pinned == null ? super.newScanBuilder(options) : pinned.newScanBuilder(options);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return pinned == null ? super.newWriteBuilder(info) : pinned.newWriteBuilder(info);
  }

  @Override
  public RowLevelOperationBuilder newRowLevelOperationBuilder(RowLevelOperationInfo info) {
    return pinned == null ? super.newRowLevelOperationBuilder(info) : pinned.newRowLevelOperationBuilder(info);
  }

  @Override
  public boolean canDeleteWhere(Predicate[] predicates) {
    return pinned == null ? super.canDeleteWhere(predicates) : pinned.canDeleteWhere(predicates);
  }

  @Override
  public void deleteWhere(Predicate[] predicates) {
    if (pinned == null) {
      super.deleteWhere(predicates);
    } else {
      pinned.deleteWhere(predicates);
    }
  }

  /** Iceberg's equality (same class, table, schema, snapshot, branch, time travel) of the state each pins. */
  @Override
  public boolean equals(Object other) {
    if (this == other) {
      return true;
    }
    if (other == null || getClass() != other.getClass()) {
      return false;
    }
    LineSparkTable that = (LineSparkTable) other;
    if (pinned == null || that.pinned == null) {
      return pinned == null && that.pinned == null && super.equals(that);
    }
    return pinned.equals(that.pinned);
  }

  @Override
  public int hashCode() {
    return pinned == null ? super.hashCode() : pinned.hashCode();
  }

  @Override
  public String toString() {
    return pinned == null ? super.toString() : pinned.toString();
  }
}
