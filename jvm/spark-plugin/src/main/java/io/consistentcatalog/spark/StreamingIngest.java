package io.consistentcatalog.spark;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ConsistentException;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A streaming query's micro-batches landing in a root (protocol §5.7): Iceberg's own streaming append writes the
 * files, and each batch's commit is one keyed ingest ({@link RootIngest}, §5.6) with the key
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

  StreamingIngest(StreamingSinkTable sink, StreamingWrite delegate, RootIngest ingest, String queryId, StreamingSinkTable.Options options) {
    this.sink = sink;
    this.delegate = delegate;
    this.ingest = ingest;
    this.queryId = queryId;
    this.options = options;
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
      delegate.abort(epochId, messages);
      sink.batchDone();
      LOG.info("[{}] {}: batch {} has no rows; nothing written", sink.catalogName(), sink.tableName(), epochId);
      return;
    }
    Long barrier = null;
    if (options.eventTime != null) {
      Long latest = options.eventTime.latest(messages);
      barrier = latest == null ? RootIngest.LATE : latest - options.delayMs; // no event time in any row: late rows
    }
    String futureHint = "fix the event times of the stream, or remove the option " + StreamingSinkTable.EVENT_TIME_COLUMN
        + " to ingest at the current time";
    RootIngest.Outcome outcome;
    try {
      outcome = ingest.land(key, barrier, futureHint, RootIngest.SparkCommit.of(() -> delegate.commit(epochId, messages),
          () -> {
            delegate.abort(epochId, messages);
            BatchFiles.delete(ingest.io(), messages); // a replayed batch: its files are never committed
          }));
    } catch (ConsistentException e) {
      throw Errors.raise(Errors.analysis(Errors.errorClass(e.kind()), e.getMessage()));
    }
    sink.batchDone();
    if (outcome.skippedBy != null) {
      LOG.info("[{}] {}: batch {} (key '{}') already landed in snapshot {}; nothing written", sink.catalogName(),
          sink.tableName(), epochId, key, outcome.skippedBy);
    } else {
      LOG.info("[{}] {}: batch {} landed at barrier {} in snapshot {} (key '{}')", sink.catalogName(), sink.tableName(),
          epochId, Barriers.format(outcome.barrier), outcome.snapshot, key);
    }
  }

  @Override
  public void abort(long epochId, WriterCommitMessage[] messages) {
    delegate.abort(epochId, messages);
  }

  @Override
  public String toString() {
    return "ConsistentStreamingIngest(" + sink.tableName() + ")";
  }
}
