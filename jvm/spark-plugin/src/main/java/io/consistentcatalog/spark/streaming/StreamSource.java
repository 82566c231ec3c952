package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.spark.context.CatalogContext;
import io.consistentcatalog.spark.context.ChangesReads;
import io.consistentcatalog.spark.context.Errors;
import java.util.List;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A table of the consistent catalog read by a streaming query ({@code spark.readStream.table("<catalog>.ns.t")}):
 * a micro-batch stream whose offsets are barriers ({@link BarrierStream}), what the served table's scan gives as its
 * {@code toMicroBatchStream} (issue 35: the one table Spark loads for a batch read, a stream's source and its sink
 * chooses there). Spark builds the scan with the whole schema (no push-down for streams); its filters run after the
 * read. The read option {@value BarrierStream#WAIT_FOR} (a duration, e.g. {@code 800ms}; default none) lets a
 * micro-batch that finds no new barrier wait that long for one; {@code consistent.read=changes} reads the table's
 * changes between barriers instead of its appends ({@link ChangesStream}, any table, rewritten or not).
 */
public final class StreamSource {
  private final CatalogContext context;
  private final org.apache.iceberg.Table table;
  private final org.apache.iceberg.Schema analysed;
  private final String name;
  private final ChangesQuery changes;

  /**
   * {@code name}'s stream, {@code table} as the query's definition loaded it, {@code analysed} the columns Spark
   * analysed the query with; {@code changes} the query of its changes, for a read of them.
   */
  public StreamSource(CatalogContext context, org.apache.iceberg.Table table, org.apache.iceberg.Schema analysed,
      String name, ChangesQuery changes) {
    this.context = context;
    this.analysed = analysed;
    this.changes = changes;
    this.table = table;
    this.name = name;
  }

  /**
   * The query's stream, when Spark starts it: a table whose job rewrites it at every epoch is refused here, at the
   * query's start ({@link RewrittenSource}).
   */
  public MicroBatchStream microBatchStream(String checkpointLocation, CaseInsensitiveStringMap options) {
    String wait = options.get(BarrierStream.WAIT_FOR);
    long waitMs = wait == null ? 0L : StreamingSinkTable.duration(BarrierStream.WAIT_FOR, wait);
    String read = options.get(ChangesTable.READ);
    AnalysedColumns columns = new AnalysedColumns(context.catalogName() + "." + name, analysed);
    if (read != null && !ChangesTable.asked(options)) {
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.INVALID_OPTION", context.catalogName() + "." + name
          + ": the read option " + ChangesTable.READ + " is '" + read + "'; a streaming read takes '"
          + ChangesTable.CHANGES + "' (the changes between barriers) or no such option (the rows appended)"));
    }
    if (read != null) {
      ChangesReads.refuseUnshaped(context.catalogName(), name, options); // the option reached the stream, not the analyser
      List<String> key = ChangesReads.key(context.catalogName() + "." + name, options.get(ChangesTable.KEY));
      return new ChangesStream(context, name, checkpointLocation, waitMs, key, changes, columns);
    }
    RewrittenSource.refuse(context.catalogName(), table, name);
    return new BarrierStream(context, name, checkpointLocation, waitMs, columns);
  }
}
