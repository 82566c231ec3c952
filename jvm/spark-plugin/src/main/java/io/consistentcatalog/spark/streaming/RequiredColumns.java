package io.consistentcatalog.spark.streaming;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.data.parquet.GenericParquetReaders;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The sink's required columns that a streaming epoch's query writes from columns Spark's analysis calls nullable
 * (protocol §5.7): a key read from JSON, or filtered with {@code IS NOT NULL} before a streaming aggregation, stays
 * nullable in the plan though it holds no null. Iceberg's write refuses such a query outright ({@code check-nullability});
 * the epoch turns that check off for these columns and checks the batch's rows instead, before anything is committed:
 * each file's null count (its column metrics), the column read only where the metrics have none.
 */
final class RequiredColumns {
  /** Iceberg's write option that checks the query's nullability against the table's ({@code SparkWriteOptions}). */
  static final String CHECK_NULLABILITY = "check-nullability";

  private RequiredColumns() {}

  /**
   * The top-level required columns of {@code table} that {@code written} (the query's output) declares nullable; null
   * when Iceberg's own check must stay (a required field nested in a struct, list or map, which is not checked here).
   */
  static List<Types.NestedField> of(Schema table, StructType written) {
    List<Types.NestedField> out = new ArrayList<>();
    for (Types.NestedField field : table.columns()) {
      if (nestsRequired(field.type())) {
        return null;
      }
      if (field.isOptional()) {
        continue;
      }
      StructField column = find(written, field.name());
      if (column != null && column.nullable()) {
        out.add(field);
      }
    }
    return out;
  }

  private static boolean nestsRequired(Type type) {
    if (type.isPrimitiveType()) {
      return false;
    }
    for (Types.NestedField nested : type.asNestedType().fields()) {
      if (nested.isRequired() || nestsRequired(nested.type())) {
        return true;
      }
    }
    return false;
  }

  private static StructField find(StructType schema, String name) {
    for (StructField field : schema.fields()) {
      if (field.name().equals(name)) {
        return field;
      }
    }
    for (StructField field : schema.fields()) {
      if (field.name().toLowerCase(Locale.ROOT).equals(name.toLowerCase(Locale.ROOT))) {
        return field;
      }
    }
    return null;
  }

  /** A required column holding nulls in a batch: the column and how many of the batch's rows are null in it. */
  static final class Nulls {
    final Types.NestedField column;
    final long rows;

    Nulls(Types.NestedField column, long rows) {
      this.column = column;
      this.rows = rows;
    }
  }

  /** The first of {@code columns} that holds a null in {@code files} (the batch's data files), or null when none does. */
  static Nulls firstNull(Table table, List<DataFile> files, List<Types.NestedField> columns) {
    for (Types.NestedField column : columns) {
      long nulls = 0;
      for (DataFile file : files) {
        nulls += nulls(table, file, column);
      }
      if (nulls > 0) {
        return new Nulls(column, nulls);
      }
    }
    return null;
  }

  private static long nulls(Table table, DataFile file, Types.NestedField column) {
    Map<Integer, Long> counts = file.nullValueCounts();
    Long counted = counts == null ? null : counts.get(column.fieldId());
    if (counted != null) {
      return counted;
    }
    if (file.format() != FileFormat.PARQUET) {
      throw new IllegalStateException(table.name() + ": data file " + file.location() + " is " + file.format()
          + " and has no null count for " + column.name() + "; streaming epochs check required columns in Parquet");
    }
    // no metrics for the column (write.metadata.metrics mode none): read it
    Schema projection = new Schema(Collections.singletonList(Types.NestedField.optional(column.fieldId(), column.name(),
        column.type())));
    long nulls = 0;
    try (CloseableIterable<Record> records = Parquet.read(table.io().newInputFile(file.location())).project(projection)
        .createReaderFunc(type -> GenericParquetReaders.buildReader(projection, type)).build()) {
      for (Record record : records) {
        if (record.get(0) == null) {
          nulls++;
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return nulls;
  }
}
