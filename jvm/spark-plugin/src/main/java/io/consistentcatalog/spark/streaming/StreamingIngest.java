package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.spark.context.BatchFiles;
import io.consistentcatalog.spark.context.IngestCommit;
import io.consistentcatalog.spark.context.RootIngest;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A streaming query's micro-batches landing in a root (protocol §5.7): Iceberg's own streaming append writes the
 * files, and each batch's commit is one keyed ingest ({@link IngestCommit}, §5.6) with the key
 * {@code <query id>/<batch id>} — the query id Spark keeps in the checkpoint — so a batch replayed after a crash
 * (also one that landed before Spark wrote its commit log) is skipped. The barrier is the latest event time in the
 * batch minus the delay, or the clock; a batch without rows writes nothing.
 */
final class StreamingIngest implements StreamingWrite {
  private static final Logger LOG = LoggerFactory.getLogger(StreamingIngest.class);

  private final StreamingSinkTable sink;
  private final StreamingWrite delegate;
  private final RootIngest ingest;
  private final String queryId;
  private final StreamingSinkTable.Options options;
  private final org.apache.iceberg.io.FileIO io;

  StreamingIngest(StreamingSinkTable sink, StreamingWrite delegate, RootIngest ingest, String queryId,
      StreamingSinkTable.Options options, org.apache.iceberg.io.FileIO io) {
    this.sink = sink;
    this.delegate = delegate;
    this.ingest = ingest;
    this.queryId = queryId;
    this.options = options;
    this.io = io;
  }

  /** The idempotency key of batch {@code epochId} of the query (the same as the Python {@code foreachBatch} writer's). */
  static String key(String queryId, long epochId) {
    return queryId + "/" + epochId;
  }

  @Override
  public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
    return delegate.createStreamingWriterFactory(info);
  }

  @Override
  public boolean useCommitCoordinator() {
    return delegate.useCommitCoordinator();
  }

  @Override
  public void commit(long epochId, WriterCommitMessage[] messages) {
    String key = key(queryId, epochId);
    if (BatchFiles.rows(messages) == 0) {
      abort(epochId, messages);
      sink.batchDone();
      LOG.info("[{}] {}: batch {} has no rows; nothing written", sink.catalogName(), sink.tableName(), epochId);
      return;
    }
    String futureHint = "fix the event times of the stream, or remove the option " + StreamingSinkTable.EVENT_TIME_COLUMN
        + " to ingest at the current time";
    // a batch whose key landed is a replay: its files (named for this attempt) are never committed
    IngestCommit.microBatch(sink.writer(), sink.tableName(), ingest, epochId, key, options.eventTime, options.delayMs,
        futureHint).commit(messages, RootIngest.SparkCommit.of(() -> {
          sent = true; // from here the files may be on main (also when the commit's answer is lost)
          delegate.commit(epochId, messages);
        }, () -> abort(epochId, messages)));
    sink.batchDone();
  }

  /**
   * Gives the batch up: Iceberg's abort, and the batch's files deleted unless a commit of them was sent (after a
   * refused one Iceberg deletes them). Also what Spark calls when the batch fails or the query stops.
   */
  @Override
  public void abort(long epochId, WriterCommitMessage[] messages) {
    BatchFiles.abandon(io, messages, sent, () -> delegate.abort(epochId, messages));
  }

  /** Whether a commit of the batch's files was sent (they may be referenced from then on). */
  private volatile boolean sent;

  @Override
  public String toString() {
    return "ConsistentStreamingIngest(" + sink.tableName() + ")";
  }
}
