package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.spark.context.Errors;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.iceberg.Schema;
import org.apache.iceberg.spark.SparkSchemaUtil;
import org.apache.iceberg.types.Types;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;

/**
 * The columns a streaming query was analysed with (protocol §5.7): the schema of the snapshot its source table was
 * served at when the query started. Spark fixes a source's rows at analysis, so every micro-batch of the stream, of
 * its appends ({@link BarrierStream}) or of its changes ({@link ChangesStream}), reads exactly these columns whatever
 * the table's are later: a column added since is not read until the query restarts; one dropped, renamed, retyped or
 * made optional since (by field id) fails the query with {@code CONSISTENT_READ.SCHEMA_CHANGED}, naming the column and
 * the way out (a restart: the restarted query is analysed with the table's columns then).
 */
final class AnalysedColumns {
  private final String table;
  private final Schema analysed;

  /** {@code analysed}, the columns Spark analysed the query of {@code table} (catalog-qualified) with. */
  AnalysedColumns(String table, Schema analysed) {
    this.table = table;
    this.analysed = analysed;
  }

  /** The analysed columns' names, each checked against the table's {@code current} schema (by field id). */
  List<String> names(Schema current) {
    List<String> columns = new ArrayList<>();
    for (Types.NestedField field : analysed.columns()) {
      Types.NestedField now = current.findField(field.fieldId());
      String change = now == null ? "was dropped"
          : !now.name().equals(field.name()) ? "was renamed to '" + now.name() + "'"
          : !now.type().equals(field.type()) ? "changed type from " + field.type() + " to " + now.type()
          : field.isRequired() && now.isOptional() ? "was made optional" : null;
      if (change != null) {
        throw changed("column '" + field.name() + "' " + change);
      }
      columns.add(field.name());
    }
    return columns;
  }

  /**
   * {@code builder}'s scan (an Iceberg scan of the table as it is now, or at a snapshot) reading the analysed columns
   * in their analysed order, after {@link #names} checked them against the {@code current} schema.
   */
  Scan scan(ScanBuilder builder, Schema current) {
    names(current);
    StructType expected = SparkSchemaUtil.convert(analysed);
    ((SupportsPushDownRequiredColumns) builder).pruneColumns(expected);
    Scan scan = builder.build();
    // Spark hands the rows to the query by position: the scan's columns must be the analysed ones, in their order
    List<String> read = names(scan.readSchema());
    if (!read.equals(names(expected))) {
      throw changed("its columns are now read as " + read + ", not as the query's " + names(expected)
          + " (reordered?)");
    }
    return scan;
  }

  private static List<String> names(StructType type) {
    return Arrays.asList(type.fieldNames());
  }

  private RuntimeException changed(String problem) {
    return Errors.raise(Errors.analysis("CONSISTENT_READ.SCHEMA_CHANGED", table + ": " + problem + " while the stream "
        + "ran (a stream keeps the columns its query was started with); restart the query (its checkpoint keeps its "
        + "place) to read the table's current columns"));
  }
}
