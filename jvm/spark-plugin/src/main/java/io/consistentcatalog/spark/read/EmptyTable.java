package io.consistentcatalog.spark.read;

import io.consistentcatalog.spark.context.Errors;
import java.util.Collections;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.iceberg.Table;
import org.apache.iceberg.spark.SparkSchemaUtil;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A table that is empty at the cut (no snapshot at or before its barrier): no rows, the table's schema. */
public final class EmptyTable implements org.apache.spark.sql.connector.catalog.Table, SupportsRead, SupportsWrite {
  private final Table icebergTable;
  private final String catalog;
  private final String plain;
  private final String table;

  public EmptyTable(Table icebergTable, String catalog, String plain, String table) {
    this.icebergTable = icebergTable;
    this.catalog = catalog;
    this.plain = plain;
    this.table = table;
  }

  /** The table's name in the catalog ({@code demo.words}). */
  public String tableName() {
    return table;
  }

  @Override
  public String name() {
    return icebergTable.toString();
  }

  @Override
  public StructType schema() {
    return SparkSchemaUtil.convert(icebergTable.schema());
  }

  @Override
  public Map<String, String> properties() {
    return Collections.singletonMap("provider", "iceberg");
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.BATCH_WRITE);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    StructType schema = schema();
    return () -> new Empty(schema);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    throw Errors.raise(Errors.readOnly(catalog, plain, "writing to " + catalog + "." + table));
  }

  private static final class Empty implements Scan, LocalScan {
    private final StructType schema;

    Empty(StructType schema) {
      this.schema = schema;
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public InternalRow[] rows() {
      return new InternalRow[0];
    }

    @Override
    public String description() {
      return "empty at the consistent cut";
    }
  }
}
