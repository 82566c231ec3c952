package io.consistentcatalog.spark.read;

import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.StreamingSide;
import io.consistentcatalog.spark.context.ChangesReads;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
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

  /** The Iceberg table as loaded (its current schema and snapshots). */
  public Table icebergTable() {
    return icebergTable;
  }

  /** What a streaming query reading or writing this table does (null: not streamed). */
  private StreamingSide streaming;

  /** This table as a streaming query's source or sink too (issue 35; see {@link PinnedTable#streamedAs}). */
  public EmptyTable streamedAs(StreamingSide side) {
    this.streaming = side;
    return this;
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
    return streaming == null
        ? EnumSet.of(TableCapability.BATCH_READ, TableCapability.BATCH_WRITE)
        : EnumSet.of(TableCapability.BATCH_READ, TableCapability.BATCH_WRITE, TableCapability.MICRO_BATCH_READ,
            TableCapability.STREAMING_WRITE);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    ChangesReads.refuseUnshaped(catalog, table, options);
    StructType schema = schema();
    StreamingSide side = streaming;
    return () -> new Empty(schema, side, options);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    if (streaming != null) {
      return StreamingChoice.writeBuilder(info, streaming,
          () -> Errors.raise(Errors.readOnly(catalog, plain, "writing to " + catalog + "." + table)));
    }
    throw Errors.raise(Errors.readOnly(catalog, plain, "writing to " + catalog + "." + table));
  }

  private static final class Empty implements Scan, LocalScan {
    private final StructType schema;
    private final StreamingSide side;
    private final CaseInsensitiveStringMap options;

    Empty(StructType schema, StreamingSide side, CaseInsensitiveStringMap options) {
      this.schema = schema;
      this.side = side;
      this.options = options;
    }

    /** Empty at the cut for a batch read; a streaming query reads the table's barriers as of any other. */
    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      if (side == null) {
        return LocalScan.super.toMicroBatchStream(checkpointLocation);
      }
      return side.microBatchStream(checkpointLocation, options);
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
