package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.spark.context.CatalogContext;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.iceberg.spark.SparkSchemaUtil;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A table of the consistent catalog read by a streaming query ({@code spark.readStream.table("<catalog>.ns.t")}):
 * a micro-batch stream whose offsets are barriers ({@link BarrierStream}). Spark builds the scan with the whole
 * schema (no push-down for streams); its filters run after the read. The read option {@value BarrierStream#WAIT_FOR}
 * (a duration, e.g. {@code 800ms}; default none) lets a micro-batch that finds no new barrier wait that long for one.
 */
public final class StreamSourceTable implements org.apache.spark.sql.connector.catalog.Table, SupportsRead {
  private final CatalogContext context;
  private final org.apache.iceberg.Table table;
  private final String name;

  public StreamSourceTable(CatalogContext context, org.apache.iceberg.Table table, String name) {
    this.context = context;
    this.table = table;
    this.name = name;
  }

  @Override
  public String name() {
    return context.catalogName() + "." + name;
  }

  @Override
  public StructType schema() {
    return SparkSchemaUtil.convert(table.schema());
  }

  @Override
  public Map<String, String> properties() {
    return table.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    StructType schema = schema();
    String wait = options.get(BarrierStream.WAIT_FOR);
    long waitMs = wait == null ? 0L : StreamingSinkTable.duration(BarrierStream.WAIT_FOR, wait);
    return () -> new Scan() {
      @Override
      public StructType readSchema() {
        return schema;
      }

      @Override
      public String description() {
        return "consistent stream of " + name();
      }

      @Override
      public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return new BarrierStream(context, name, checkpointLocation, waitMs);
      }
    };
  }
}
