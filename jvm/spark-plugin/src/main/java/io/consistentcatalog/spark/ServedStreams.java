package io.consistentcatalog.spark;

import io.consistentcatalog.spark.context.CatalogContext;
import io.consistentcatalog.spark.context.StreamingSide;
import io.consistentcatalog.core.ChangeRange;
import io.consistentcatalog.spark.streaming.ChangesQuery;
import io.consistentcatalog.spark.streaming.StreamSource;
import java.util.List;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import io.consistentcatalog.spark.streaming.StreamingSinkTable;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The streaming half of a table the catalog serves (issue 35): the {@code streaming} package's source
 * ({@link StreamSource}) and sink ({@link StreamingSinkTable}) of the table as the load found it, made when a
 * streaming query asks for them. The session is the one that loaded the table (a sink's {@code toTable} runs in the
 * session that starts the query). One per load, so that a sink's state (its registration, its idle watcher) is one
 * per query, as before.
 */
final class ServedStreams implements StreamingSide {
  private final CatalogContext context;
  private final org.apache.iceberg.Table table;
  private final String name;
  /** The snapshot the table is served at (null: as it is now), whose schema Spark analyses a query of it with. */
  private final Long snapshotId;
  private final SparkSession session;
  private volatile StreamingSinkTable sink;

  ServedStreams(CatalogContext context, org.apache.iceberg.Table table, String name, Long snapshotId) {
    this.context = context;
    this.snapshotId = snapshotId;
    this.table = table;
    this.name = name;
    scala.Option<SparkSession> active = SparkSession.getActiveSession();
    this.session = active.isDefined() ? active.get() : SparkSession.getDefaultSession().getOrElse(() -> null);
  }

  @Override
  public MicroBatchStream microBatchStream(String checkpointLocation, CaseInsensitiveStringMap options) {
    ChangesQuery changes = new ChangesQuery() {
      @Override
      public Dataset<Row> between(SparkSession spark, String t, List<String> columns, ChangeRange range,
          List<String> key) {
        return TableChanges.rows(spark, context.plainCatalogName(), t, columns, range, key);
      }

      @Override
      public Dataset<Row> whole(SparkSession spark, String t, List<String> columns, long snapshotId, Long barrier) {
        return TableChanges.whole(spark, context.plainCatalogName(), t, columns, snapshotId, barrier);
      }
    };
    // a changes stream's columns are the ones Spark analysed the query with: the served snapshot's, as SparkTable's
    org.apache.iceberg.Schema analysed = snapshotId == null ? table.schema()
        : org.apache.iceberg.util.SnapshotUtil.schemaFor(table, snapshotId);
    return new StreamSource(context, table, analysed, name, changes).microBatchStream(checkpointLocation, options);
  }

  @Override
  public WriteBuilder streamingWriteBuilder(LogicalWriteInfo info) {
    StreamingSinkTable found = sink;
    if (found == null) {
      synchronized (this) {
        if (sink == null) {
          sink = new StreamingSinkTable(context, table, name, session);
        }
        found = sink;
      }
    }
    return found.newWriteBuilder(info);
  }
}
