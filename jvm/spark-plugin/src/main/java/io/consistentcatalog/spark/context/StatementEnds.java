package io.consistentcatalog.spark.context;

import io.consistentcatalog.openlineage.EpochRun;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.ui.SparkListenerSQLExecutionEnd;
import scala.Option;

/**
 * The ends of the SQL executions that carry epochs out (Spark's {@code SparkListenerSQLExecutionEnd}, which holds
 * the statement's failure): an epoch whose statement failed after its OpenLineage {@code START} where the epoch
 * itself never saw the error (a task of the write, the query, Spark's abort) gets its {@code FAIL} with that error
 * (protocol §5.8). One listener per SparkContext, registered with the first epoch that has lineage to report.
 */
final class StatementEnds extends SparkListener {
  /** The SQL execution id -> the run it carries out, until the execution ends. */
  private static final Map<Long, EpochRun> RUNNING = new ConcurrentHashMap<>();
  private static SparkContext listening;

  private StatementEnds() {}

  /** Watch the SQL execution running on this thread for {@code run}; false when there is none (or it cannot be). */
  static boolean watch(EpochRun run) {
    try {
      return register(run);
    } catch (RuntimeException e) { // lineage never fails the statement: Spark's abort then reports the failure
      return false;
    }
  }

  private static boolean register(EpochRun run) {
    Option<SparkSession> active = SparkSession.getActiveSession();
    Option<SparkSession> fallback = SparkSession.getDefaultSession();
    SparkSession spark = active.isDefined() ? active.get() : (fallback.isDefined() ? fallback.get() : null);
    if (spark == null) {
      return false;
    }
    SparkContext context = spark.sparkContext();
    String id = context.getLocalProperty("spark.sql.execution.id");
    if (id == null) {
      return false;
    }
    synchronized (StatementEnds.class) {
      if (listening != context) {
        context.addSparkListener(new StatementEnds());
        listening = context;
      }
    }
    RUNNING.put(Long.parseLong(id), run);
    return true;
  }

  @Override
  public void onOtherEvent(SparkListenerEvent event) {
    if (!(event instanceof SparkListenerSQLExecutionEnd)) {
      return;
    }
    SparkListenerSQLExecutionEnd end = (SparkListenerSQLExecutionEnd) event;
    EpochRun run = RUNNING.remove(end.executionId());
    if (run == null || run.ended()) {
      return;
    }
    Throwable failure = end.executionFailure().isDefined() ? end.executionFailure().get() : null;
    if (failure == null) {
      String message = end.errorMessage().isDefined() ? end.errorMessage().get() : null;
      failure = new IllegalStateException(message != null ? message
          : "Spark finished the statement without committing the epoch's write");
    }
    run.fail(failure);
  }
}
