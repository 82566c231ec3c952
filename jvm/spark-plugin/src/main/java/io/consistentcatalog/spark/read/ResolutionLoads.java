package io.consistentcatalog.spark.read;

import io.consistentcatalog.spark.context.Errors;
import java.lang.reflect.UndeclaredThrowableException;
import java.security.PrivilegedExceptionAction;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.FutureTask;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.iceberg.Table;
import org.apache.spark.sql.AnalysisException;

/**
 * The table loads of one resolution (under the session's lock). With more than one load thread each load
 * is handed to the loading threads as soon as its name is known, and the querying thread runs those none
 * has started yet itself; with one, every load runs on the querying thread. A conditional refresh
 * ({@link TableLoader#conditionalRefresh}: REST, a 304 when unchanged) goes to the refresh threads
 * instead ({@code refresh-threads}; with one, to the querying thread). Each load runs as the
 * querying thread's Hadoop user (a Thrift server impersonating its clients).
 */
final class ResolutionLoads {
  private final TableLoader loader;
  private final Map<String, FutureTask<LoadedTable>> tasks = new HashMap<>();
  private final boolean parallel;
  private final boolean parallelRefreshes;
  /** Whom the querying thread runs as if not the process's user (a Thrift server impersonating): the loads too. */
  private final UserGroupInformation user;
  /** The isolation level resolved for (which branch's barriers the loads prepare). */
  private final String level;
  /** Table -> its current metadata file, when the listing read them (a JDBC catalog), else empty. */
  private Map<String, String> locations = Collections.emptyMap();

  ResolutionLoads(TableLoader loader, String level) {
    this.loader = loader;
    this.parallel = loader.loadThreads() > 1;
    this.parallelRefreshes = loader.refreshThreads() > 1;
    this.user = parallel || parallelRefreshes ? TableLoader.impersonatedUser() : null;
    this.level = level;
  }

  /** Whether the loads run on the loading threads (load-threads above 1). */
  boolean parallel() {
    return parallel;
  }

  /** What the listing read: each table's current metadata file (a table still at it is not refreshed). */
  void locations(Map<String, String> locations) {
    this.locations = locations;
  }

  /**
   * Start {@code name}'s load (on a loading thread, or later on this one with load-threads=1; a conditional
   * refresh on a refresh thread, or later on this one with refresh-threads=1), once.
   */
  void start(String name) {
    if (tasks.containsKey(name)) {
      return;
    }
    Table cached = loader.cached(name);
    String location = locations.get(name);
    Callable<LoadedTable> body = () -> loader.load(name, cached, location, level);
    FutureTask<LoadedTable> task =
        new FutureTask<>(user == null ? body : () -> user.doAs((PrivilegedExceptionAction<LoadedTable>) body::call));
    tasks.put(name, task);
    if (loader.conditionalRefresh(cached, location)) {
      if (parallelRefreshes) {
        loader.refreshExecutor().execute(task);
      }
    } else if (parallel) {
      loader.executor().execute(task);
    }
  }

  /** Run {@code name}'s load on this thread unless it was started already (then return at once). */
  void run(String name) {
    start(name);
    tasks.get(name).run(); // a no-op when it runs or ran on a loading thread
  }

  /** {@code name}'s load (run here if no loading thread started it), waited for; the session's cache follows it. */
  LoadedTable get(String name) {
    run(name);
    FutureTask<LoadedTable> task = tasks.get(name);
    LoadedTable loaded;
    try {
      loaded = task.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while loading " + name, e);
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof UndeclaredThrowableException && cause.getCause() != null) {
        cause = cause.getCause(); // UserGroupInformation.doAs wraps what the load threw (sneakily) undeclared
      }
      if (cause instanceof RuntimeException) {
        throw (RuntimeException) cause;
      }
      if (cause instanceof AnalysisException) { // the catalog stayed unavailable: its one-line error
        throw Errors.raise((AnalysisException) cause);
      }
      if (cause instanceof Error) {
        throw (Error) cause;
      }
      throw new IllegalStateException(cause);
    }
    loader.remember(name, loaded.table);
    return loaded;
  }

  /** Drop the loads not started (the resolution ended early or failed). */
  void cancel() {
    for (Future<LoadedTable> task : tasks.values()) {
      task.cancel(false);
    }
  }
}
