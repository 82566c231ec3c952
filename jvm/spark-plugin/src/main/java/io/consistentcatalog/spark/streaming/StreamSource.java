package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.spark.context.CatalogContext;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A table of the consistent catalog read by a streaming query ({@code spark.readStream.table("<catalog>.ns.t")}):
 * a micro-batch stream whose offsets are barriers ({@link BarrierStream}), what the served table's scan gives as its
 * {@code toMicroBatchStream} (issue 35: the one table Spark loads for a batch read, a stream's source and its sink
 * chooses there). Spark builds the scan with the whole schema (no push-down for streams); its filters run after the
 * read. The read option {@value BarrierStream#WAIT_FOR} (a duration, e.g. {@code 800ms}; default none) lets a
 * micro-batch that finds no new barrier wait that long for one.
 */
public final class StreamSource {
  private final CatalogContext context;
  private final org.apache.iceberg.Table table;
  private final String name;

  /** {@code name}'s stream, {@code table} as the query's definition loaded it. */
  public StreamSource(CatalogContext context, org.apache.iceberg.Table table, String name) {
    this.context = context;
    this.table = table;
    this.name = name;
  }

  /**
   * The query's stream, when Spark starts it: a table whose job rewrites it at every epoch is refused here, at the
   * query's start ({@link RewrittenSource}).
   */
  public MicroBatchStream microBatchStream(String checkpointLocation, CaseInsensitiveStringMap options) {
    RewrittenSource.refuse(context.catalogName(), table, name);
    String wait = options.get(BarrierStream.WAIT_FOR);
    long waitMs = wait == null ? 0L : StreamingSinkTable.duration(BarrierStream.WAIT_FOR, wait);
    return new BarrierStream(context, name, checkpointLocation, waitMs);
  }
}
