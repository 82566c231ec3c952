package io.consistentcatalog.spark.context;

import org.apache.iceberg.Table;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * How one write through the consistent catalog commits, one class per write kind: {@link EpochCommit} (an epoch
 * of a job into its derived sink, protocol §5.1–§5.3) and {@link IngestCommit} (an ingest into a root, §5.6). Both
 * serve a SQL or DataFrame statement ({@code write.EpochWrites} plans it when the statement is analysed;
 * {@code write.EpochSinkTable} and {@code write.EpochMergeTable} carry it out) and a streaming micro-batch
 * ({@code streaming.StreamingEpoch}, {@code streaming.StreamingIngest}). The plans and commits they send are the
 * pure ones of {@code core.EpochPlanner}, {@code core.EpochCommits} and {@code core.WritePlanner}.
 *
 * <p>A statement's write goes through {@link #writeTable} / {@link #writeBranch} (when Spark builds the write),
 * {@link #executing} (when Spark starts it), then {@link #commit} or {@link #aborted}. A micro-batch's write is built
 * by the streaming sink (its files land through the sink's {@link StreamingFence}); only {@link #commit} is called.
 */
public interface WriteCommit {
  /** The table written, as {@code ns.t}. */
  String sink();

  /** The action as the protocol names it ({@code stage}, {@code done}, ...; {@code ingest}, {@code skip}). */
  String action();

  /** Whether Spark has to run the statement's query (otherwise it gets no rows). */
  boolean runsQuery();

  /** The table Spark's write goes to (fenced); called when Spark builds a statement's write. */
  Table writeTable();

  /** The branch Spark's write goes to (null: main). */
  String writeBranch();

  /** Spark starts writing the statement (its BatchWrite). */
  void executing();

  /**
   * Spark commits the write: {@code messages} are its tasks' results, {@code spark} Iceberg's own commit of them
   * (and giving them up). A refusal is the one-line {@code [CONSISTENT_WRITE.*]} error naming the problem and the
   * way out. Returns the line reported.
   */
  String commit(WriterCommitMessage[] messages, RootIngest.SparkCommit spark);

  /** Spark aborted the statement's write (a task failed). */
  void aborted();
}
