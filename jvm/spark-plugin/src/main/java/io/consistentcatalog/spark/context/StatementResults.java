package io.consistentcatalog.spark.context;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.WeakHashMap;
import org.apache.spark.sql.SparkSession;
import scala.Option;

/**
 * What each write statement of a session did (protocol §5.9, "What a statement did"): the statement's
 * {@code [lake_consistent]} line goes to the driver's standard error, which a Spark Connect or Thrift client never
 * sees, so the session keeps its last {@link #KEPT} results here for {@code CALL lake_consistent.system.recent_results()}.
 * Keyed by the Spark session that ran the statement (a Connect client's session is its own); a session that is gone
 * takes its results with it.
 */
public final class StatementResults {
  /** Results kept per session, the oldest dropped first. */
  public static final int KEPT = 100;

  /** One statement's result for one table: what the {@code [lake_consistent]} line says, as values. */
  public static final class Result {
    public final long statement; // 1, 2, ... in the session's order of statements with a result
    public final long at; // epoch milliseconds, when the statement committed (or found nothing to do)
    public final String table;
    public final String job; // null for an ingest into a root
    public final String action; // published, republished, watermark, done, nothing, ingest, skip
    public final Long barrier;
    public final Long snapshotId;
    public final Long rows;
    public final String attempt;
    public final String line;

    Result(long statement, long at, String table, String job, String action, Long barrier, Long snapshotId, Long rows,
        String attempt, String line) {
      this.statement = statement;
      this.at = at;
      this.table = table;
      this.job = job;
      this.action = action;
      this.barrier = barrier;
      this.snapshotId = snapshotId;
      this.rows = rows;
      this.attempt = attempt;
      this.line = line;
    }
  }

  private static final class Kept {
    long statements;
    final Deque<Result> results = new ArrayDeque<>();
  }

  private static final Map<SparkSession, Kept> SESSIONS = new WeakHashMap<>();

  private StatementResults() {}

  /** Keeps a statement's result for the session running it (nothing when no session is active on this thread). */
  public static void record(String table, String job, String action, Long barrier, Long snapshotId, Long rows,
      String attempt, String line) {
    SparkSession session = session();
    if (session == null) {
      return;
    }
    synchronized (SESSIONS) {
      Kept kept = SESSIONS.computeIfAbsent(session, s -> new Kept());
      kept.statements++;
      kept.results.addLast(new Result(kept.statements, System.currentTimeMillis(), table, job, action, barrier,
          snapshotId, rows, attempt, line));
      while (kept.results.size() > KEPT) {
        kept.results.removeFirst();
      }
    }
  }

  /** The active session's kept results, oldest first. */
  public static List<Result> recent() {
    SparkSession session = session();
    synchronized (SESSIONS) {
      Kept kept = session == null ? null : SESSIONS.get(session);
      return kept == null ? new ArrayList<>() : new ArrayList<>(kept.results);
    }
  }

  private static SparkSession session() {
    Option<SparkSession> active = SparkSession.getActiveSession();
    if (active.isDefined()) {
      return active.get();
    }
    Option<SparkSession> fallback = SparkSession.getDefaultSession();
    return fallback.isDefined() ? fallback.get() : null;
  }
}
