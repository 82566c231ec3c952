package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.core.ChangeRange;
import java.util.List;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * The query of a table's changes (protocol §5.10) that a changes stream runs for each micro-batch
 * ({@link ChangesStream}): the adapter's batch reader of changes ({@code TableChanges}, the one {@code CALL
 * create_changes_view} runs), handed down as the context is, so that a stream and the batch view give the same rows.
 * Rows: the table's columns (in {@code columns}' order), {@code _change_type}, {@code _barrier}.
 */
public interface ChangesQuery {
  /** {@code changes(t, T1, T2)} over {@code range}, updates paired by {@code key} (empty: whole rows). */
  Dataset<Row> between(SparkSession spark, String table, List<String> columns, ChangeRange range, List<String> key);

  /** {@code snap(t, T)} whole as INSERTs (its snapshot {@code snapshotId}) with {@code _barrier} {@code barrier}. */
  Dataset<Row> whole(SparkSession spark, String table, List<String> columns, long snapshotId, Long barrier);
}
