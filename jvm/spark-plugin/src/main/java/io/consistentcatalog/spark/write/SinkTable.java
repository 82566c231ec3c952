package io.consistentcatalog.spark.write;

import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.Names;
import io.consistentcatalog.spark.line.LineSparkTable;
import org.apache.iceberg.Table;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.RowLevelOperationBuilder;
import org.apache.spark.sql.connector.write.RowLevelOperationInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;

/**
 * A table of the consistent catalog loaded as the target of a write (Spark's {@code loadTable} with write
 * privileges): its current schema, no cut. {@link WriteRule} turns an {@code INSERT} or DataFrame write into it
 * into an epoch or an ingest; without the rule (the SQL extension not configured) and for row-level changes the
 * write is refused with the way out.
 */
public final class SinkTable extends LineSparkTable {
  private final String catalog;
  private final String table;

  public SinkTable(Table icebergTable, String catalog, String table) {
    super(icebergTable);
    this.catalog = catalog;
    this.table = table;
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    String extensions = String.valueOf(org.apache.spark.sql.SparkSession.active().conf().get("spark.sql.extensions", ""));
    if (!extensions.contains(Names.SQL_EXTENSIONS)) {
      throw Errors.raise(Errors.analysis("CONSISTENT_WRITE.REFUSED", catalog + "." + table + ": writes through " + catalog
          + " need its SQL extension to become epochs; add " + Names.SQL_EXTENSIONS + " to "
          + "spark.sql.extensions (consistent-catalog spark-conf renders it)"));
    }
    throw rowLevel("this write (a statement Spark rewrote after analysis)");
  }


  private RuntimeException rowLevel(String what) {
    return Errors.raise(Errors.analysis("CONSISTENT_WRITE.REFUSED", catalog + "." + table + ": " + what + " is not an "
        + "epoch or an ingest and is refused; a derived table changes only through its job's epochs (INSERT INTO / "
        + "INSERT OVERWRITE from its sources), a root only by appending (INSERT INTO); to correct history use "
        + "`consistent-catalog revise`"));
  }

  @Override
  public RowLevelOperationBuilder newRowLevelOperationBuilder(RowLevelOperationInfo info) {
    throw rowLevel("a row-level change (DELETE/UPDATE/MERGE)");
  }

  @Override
  public boolean canDeleteWhere(Predicate[] predicates) {
    throw rowLevel("DELETE FROM");
  }

  @Override
  public void deleteWhere(Predicate[] predicates) {
    throw rowLevel("DELETE FROM");
  }
}
