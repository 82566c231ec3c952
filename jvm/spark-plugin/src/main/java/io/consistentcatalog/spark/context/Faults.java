package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.CatalogFaults;
import io.consistentcatalog.core.Durations;
import io.consistentcatalog.core.RetryPolicy;
import java.util.concurrent.Callable;

/**
 * Catalog faults met by the plugin (protocol §6.8): a REST catalog answering 5xx or 429, a connection refused or
 * cut, a request timing out, a JDBC catalog's database locked or restarting ({@link CatalogFaults} sorts them).
 * Reads and other calls that are safe to repeat are retried here under the one {@link RetryPolicy} (50 ms
 * doubling to 2 s with full jitter) until the catalog option {@code consistent.retry-deadline} (default
 * {@code 2m}, {@code 0}: no retry); then one {@code [CONSISTENT_CUT.CATALOG_UNAVAILABLE]} error names the
 * catalog, what was attempted, the last fault and that nothing landed. Commits are settled by
 * {@link FencedCommit}. Anything else (a missing table, a bug) is not a fault and is raised as it is.
 */
public final class Faults {
  /** Catalog option: how long a call waits out a catalog fault. */
  static final String DEADLINE = RetryPolicy.DEADLINE_OPTION;

  static final long DEFAULT_DEADLINE_MS = RetryPolicy.DEFAULT_DEADLINE_MS;

  /** Milliseconds between two lines about faults (those in between are not printed), as Python's WARN_EVERY. */
  static final long WARN_EVERY_MS = 10_000L;

  private static final java.util.concurrent.atomic.AtomicLong WARNED = new java.util.concurrent.atomic.AtomicLong(Long.MIN_VALUE);

  private Faults() {}

  /**
   * A fault met by {@code what} and about to be waited out: one line on standard error, {@code warning: catalog
   * fault (unknown) on loading db.t in catalog lake: PSQLException: ...; retrying} (as the Python CLI's), for the
   * first and then at most one every 10 s while faults go on (a statement's output shows that it is waiting
   * without a line per attempt; not a {@code [catalog]} line, which reports a statement's outcome).
   */
  static void record(String catalog, String what, Throwable fault) {
    long now = System.nanoTime();
    long last = WARNED.get();
    if (last != Long.MIN_VALUE && now - last < WARN_EVERY_MS * 1_000_000L) {
      return;
    }
    if (!WARNED.compareAndSet(last, now)) {
      return;
    }
    CatalogFaults.Fault kind = CatalogFaults.of(fault);
    System.err.println("warning: catalog fault (" + (kind == null ? "unknown" : kind.label()) + ") on " + what
        + " in catalog " + catalog + ": " + describe(fault) + "; retrying");
    System.err.flush();
  }

  /** The fault as one line: the first SQL or I/O error among it and its causes (type and message), else itself. */
  static String describe(Throwable fault) {
    Throwable shown = fault;
    for (Throwable e = fault; e != null && e.getCause() != e; e = e.getCause()) {
      if (e instanceof java.sql.SQLException || e instanceof java.io.IOException) {
        shown = e;
        break;
      }
    }
    return shown.getClass().getSimpleName() + ": " + FencedCommit.firstLine(shown);
  }

  /** The catalog option {@code consistent.retry-deadline} in milliseconds ({@link Durations}); null or blank: the default. */
  static long parseDeadline(String catalog, String text) {
    return RetryPolicy.deadlineOption(catalog, text);
  }

  /** Milliseconds of a duration ({@link Durations}: the grammar of the whole project). */
  static long parseDuration(String text) {
    return Durations.parseMs(text);
  }

  /** Whether {@code error} (or what caused it) is a fault of the catalog's availability. */
  static boolean isFault(Throwable error) {
    return CatalogFaults.of(error) != null;
  }

  /**
   * {@code call}, tried again after faults until {@code deadlineMs}; then the one-line error. Not faults
   * are raised as they are (unchecked ones as they are; checked ones wrapped).
   */
  public static <T> T retrying(String catalog, String what, long deadlineMs, Callable<T> call) {
    Exception last = null;
    for (RetryPolicy.Attempts attempts = RetryPolicy.forFaults(deadlineMs).start(); attempts.next(); ) {
      try {
        return call.call();
      } catch (Exception e) {
        if (!isFault(e)) {
          if (e instanceof RuntimeException) {
            throw (RuntimeException) e;
          }
          throw new IllegalStateException(e);
        }
        last = e;
        record(catalog, what, e);
      }
    }
    throw unavailable(catalog, what, deadlineMs, last);
  }

  /** The one line past the deadline (or when the thread was interrupted while waiting): nothing landed. */
  static RuntimeException unavailable(String catalog, String what, long deadlineMs, Throwable last) {
    String fault = last == null ? "interrupted" : describe(last);
    return Errors.raise(Errors.analysis(
        "CONSISTENT_CUT.CATALOG_UNAVAILABLE",
        "catalog " + catalog + " did not answer " + what + " for " + (deadlineMs / 1000.0) + " s (last: " + fault
            + "); landed: no. Check that the catalog is up and reachable, then run the statement again (the catalog "
            + "option " + DEADLINE + " sets how long to wait)"));
  }
}
