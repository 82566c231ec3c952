package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.TableState;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One ingest into a root (protocol §5.6) as carried out ({@link RootIngest}, planned by {@code core.WritePlanner}):
 * Spark's rows land on main through {@link FencedOperations}, unless the idempotency key already landed. The barrier
 * is the latest event time of the rows (less a streaming query's delay; rows without one are late) or, without an
 * event-time column, the clock.
 *
 * <p>A statement's ingest (SQL {@code INSERT INTO}, DataFrame append) knows at analysis whether its key already
 * landed and then runs no query; its line goes to standard error. A streaming query's micro-batch is keyed
 * {@code <query id>/<batch id>} ({@code streaming.StreamingIngest}); its line is logged. Ingests send no
 * OpenLineage epoch run, as Python's do not (a landed ingest's own run is {@link IngestLineage}'s).
 */
public final class IngestCommit implements WriteCommit {
  private static final Logger LOG = LoggerFactory.getLogger(IngestCommit.class);

  private final WriterInstance writes;
  private final String sink;
  private final TableIdentifier ident;
  private final Table table;
  /** The idempotency key (null: none). */
  private final String key;
  /** The snapshot that already holds the key, found at analysis (null: none, or a micro-batch). */
  private final Long skippedBy;
  /** The event-time column whose maximum is the ingest's barrier (null: the clock). */
  private final EventTime eventTime;
  /** Subtracted from the latest event time (a streaming query's delay; 0 for a statement). */
  private final long delayMs;
  /** The way out named when the barrier would be in the future. */
  private final String futureHint;
  /** The micro-batch id (null: a statement's ingest). */
  private final Long batch;
  /** A statement's SQL text (null: a DataFrame write), for its ingest's OpenLineage run. */
  private final String sqlText;
  /** The ingest Spark's write lands as (a statement's: set when Spark builds the write). */
  private RootIngest ingest;

  private IngestCommit(
      WriterInstance writes, String sink, TableIdentifier ident, Table table, String key, Long skippedBy,
      EventTime eventTime, long delayMs, String futureHint, Long batch, String sqlText, RootIngest ingest) {
    this.writes = writes;
    this.sink = sink;
    this.ident = ident;
    this.table = table;
    this.key = key;
    this.skippedBy = skippedBy;
    this.eventTime = eventTime;
    this.delayMs = delayMs;
    this.futureHint = futureHint;
    this.batch = batch;
    this.sqlText = sqlText;
    this.ingest = ingest;
  }

  /** A statement's ingest into {@code sink} as {@code state} holds it ({@code sqlText}: its SQL, null for a DataFrame's). */
  public static IngestCommit statement(
      WriterInstance writes, String sink, TableIdentifier ident, Table table, TableState state, String key,
      EventTime eventTime, String sqlText) {
    Long landed = key == null ? null : state.ingestedWithKey(key);
    return new IngestCommit(writes, sink, ident, table, key, landed, eventTime, 0L, "fix the event times, or RESET "
        + Settings.PREFIX + Settings.EVENT_TIME_COLUMN + " to ingest at the current time", null, sqlText, null);
  }

  /**
   * Micro-batch {@code batch} of a streaming query landing as {@code ingest} with {@code key}; its barrier from
   * {@code eventTime} less {@code delayMs} (null: the clock).
   */
  public static IngestCommit microBatch(
      WriterInstance writes, String sink, RootIngest ingest, long batch, String key, EventTime eventTime, long delayMs,
      String futureHint) {
    return new IngestCommit(writes, sink, null, null, key, null, eventTime, delayMs, futureHint, batch, null, ingest);
  }

  @Override
  public String sink() {
    return sink;
  }

  @Override
  public boolean runsQuery() {
    return skippedBy == null;
  }

  @Override
  public String action() {
    return skippedBy == null ? "ingest" : "skip";
  }

  /** Main, through {@link FencedOperations} (the table as loaded when the key already landed). */
  @Override
  public Table writeTable() {
    if (!runsQuery()) {
      return table; // Spark writes no rows; commit() never hands them to Iceberg
    }
    try {
      ingest = new RootIngest(writes.committer(), ident, sink, table, "the ingest into " + sink);
      ingest.lineage(writes.ingestLineage(sink, table, sqlText));
      return ingest.writeTable(table.name());
    } catch (ConsistentException e) {
      throw Errors.rethrow(Errors.statementRefusal(e));
    }
  }

  @Override
  public String writeBranch() {
    return null;
  }

  @Override
  public void executing() {}

  @Override
  public void aborted() {}

  /** §5.6 ({@link RootIngest}): the rows land on main, unless the key already landed. */
  @Override
  public String commit(WriterCommitMessage[] messages, RootIngest.SparkCommit spark) {
    try {
      return land(messages, spark);
    } catch (ConsistentException e) {
      throw Errors.raise(batch == null ? Errors.statementRefusal(e)
          : Errors.analysis(Errors.errorClass(e.kind()), e.getMessage()));
    }
  }

  private String land(WriterCommitMessage[] messages, RootIngest.SparkCommit spark) {
    if (skippedBy != null) {
      spark.abort();
      return report("ingest key '" + key + "' already landed in snapshot " + skippedBy + "; nothing written", "skip",
          null, skippedBy, 0L);
    }
    Long latest = eventTime == null ? null : eventTime.latest(messages);
    if (eventTime != null && latest == null) {
      if (BatchFiles.rows(messages) == 0) {
        spark.abort();
        return report("no rows: nothing written (the barrier would be the maximum of " + eventTime.column + ")",
            "nothing", null, null, 0L);
      }
      latest = RootIngest.LATE; // every row's event time is null: they land late
    } else if (latest != null) {
      latest = latest - delayMs;
    }
    RootIngest.Outcome outcome = ingest.land(key, latest, futureHint, spark);
    if (batch != null) {
      return outcome.skippedBy != null
          ? log("batch " + batch + " (key '" + key + "') already landed in snapshot " + outcome.skippedBy + "; nothing written")
          : log("batch " + batch + " landed at barrier " + Barriers.format(outcome.barrier) + " in snapshot "
              + outcome.snapshot + " (key '" + key + "')");
    }
    if (outcome.skippedBy != null) {
      return report("ingest key '" + key + "' landed meanwhile in snapshot " + outcome.skippedBy + "; nothing written",
          "skip", null, outcome.skippedBy, 0L);
    }
    return report("ingest at barrier " + Barriers.format(outcome.barrier) + " landed in snapshot " + outcome.snapshot
        + (key == null ? "" : " (key '" + key + "')"), "ingest", outcome.barrier, outcome.snapshot,
        BatchFiles.rows(messages));
  }

  /** A statement's line, once on standard error, and kept for the session's {@code recent_results()}. */
  private String report(String what, String action, Long barrier, Long snapshot, Long rows) {
    String line = "[" + writes.catalogName() + "] ingest: " + sink + " " + what;
    System.err.println(line); // once: a log at INFO on stderr too (a Thrift server's) printed it twice
    LOG.debug(line);
    if (batch == null) {
      StatementResults.record(sink, null, action, barrier, snapshot, rows, null, line);
    }
    return line;
  }

  /** A micro-batch's line, logged. */
  private String log(String what) {
    String line = "[" + writes.catalogName() + "] " + sink + ": " + what;
    LOG.info(line);
    return line;
  }
}
