package io.consistentcatalog.spark.context;

import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * What a table of the catalog does when a streaming query reads or writes it (issue 35). Spark loads a table by its
 * name alike for a batch read, a streaming source ({@code readStream.table}) and a streaming sink ({@code toTable});
 * as Iceberg's {@code SparkTable}, the one table the catalog serves declares all three capabilities and chooses in
 * its scan ({@code Scan.toBatch} or {@code toMicroBatchStream}) and its write ({@code Write.toBatch} or
 * {@code toStreaming}). The read side's tables hold this for the streaming half; the adapter implements it with the
 * {@code streaming} package, so {@code read} never names it.
 */
public interface StreamingSide {
  /** The micro-batch stream of a streaming query reading the table (a source that cannot be streamed is refused). */
  MicroBatchStream microBatchStream(String checkpointLocation, CaseInsensitiveStringMap options);

  /** The write builder of a streaming query's sink (what its {@code Write.toStreaming} runs). */
  WriteBuilder streamingWriteBuilder(LogicalWriteInfo info);
}
