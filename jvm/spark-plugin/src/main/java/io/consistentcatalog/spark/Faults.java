package io.consistentcatalog.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.channels.ClosedByInterruptException;
import java.nio.file.NoSuchFileException;
import java.sql.SQLException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTransientException;
import java.util.IdentityHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ThreadLocalRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.net.ssl.SSLException;
import org.apache.iceberg.exceptions.RESTException;
import org.apache.iceberg.exceptions.ServiceFailureException;
import org.apache.iceberg.exceptions.ServiceUnavailableException;

/**
 * Catalog faults met while resolving a cut (protocol §6.8): a REST catalog answering 5xx or 429, a
 * connection refused or cut, a request timing out, a JDBC catalog's database locked or restarting. The
 * plugin only reads, so every fault is retried (exponential backoff from 50 ms to 2 s with full jitter)
 * until the catalog option {@code consistent.retry-deadline} (default {@code 2m}, {@code 0}: no retry);
 * then one {@code [CONSISTENT_CUT.CATALOG_UNAVAILABLE]} error names the catalog, what was being read and
 * the last fault. Anything else (a missing table, a bug) is not a fault and is raised as it is.
 */
final class Faults {
  /** Catalog option: how long a resolution waits out a catalog fault. */
  static final String DEADLINE = "consistent.retry-deadline";

  static final long DEFAULT_DEADLINE_MS = 120_000L;
  private static final Pattern DURATION = Pattern.compile("\\s*(\\d+(?:\\.\\d+)?)\\s*(ms|s|m|h)?\\s*", Pattern.CASE_INSENSITIVE);

  private Faults() {}

  /** Milliseconds of {@code text} ({@code 500ms}, {@code 30s}, {@code 2m}, {@code 1h}; a bare number is ms); null: the default. */
  static long parseDeadline(String catalog, String text) {
    if (text == null || text.trim().isEmpty()) {
      return DEFAULT_DEADLINE_MS;
    }
    Matcher m = DURATION.matcher(text);
    if (!m.matches()) {
      throw new IllegalArgumentException("spark.sql.catalog." + catalog + "." + DEADLINE + "=" + text
          + " is not a duration; write e.g. 30s, 2m or 500ms (0: no retry)");
    }
    double value = Double.parseDouble(m.group(1));
    String unit = m.group(2) == null ? "ms" : m.group(2).toLowerCase(Locale.ROOT);
    long factor = unit.equals("h") ? 3_600_000L : unit.equals("m") ? 60_000L : unit.equals("s") ? 1_000L : 1L;
    return (long) (value * factor);
  }

  /** Whether {@code error} (or what caused it) is a fault of the catalog's availability. */
  static boolean isFault(Throwable error) {
    Map<Throwable, Boolean> seen = new IdentityHashMap<>();
    for (Throwable e = error; e != null && seen.put(e, Boolean.TRUE) == null; e = e.getCause()) {
      if (e instanceof ServiceUnavailableException) {
        return true; // 503 (and 429) from a REST catalog
      }
      if (e instanceof ServiceFailureException) {
        return false; // a plain 500: the server failing at the request, not a passing fault (as in Python)
      }
      if (e.getClass() == RESTException.class) {
        return true; // what Iceberg's handlers map no subclass to: 502, 504, 429, an I/O error on the way
      }
      if (e instanceof InterruptedIOException || e instanceof ClosedByInterruptException) {
        return false; // the statement was cancelled: stop, do not wait
      }
      if (e instanceof FileNotFoundException || e instanceof NoSuchFileException) {
        return false; // a file that is gone stays gone
      }
      if (e instanceof SSLException) {
        return false; // a TLS misconfiguration, raised at once as in Python
      }
      if (e instanceof IOException) {
        return true; // refused, reset, timed out (java.net, Apache HttpClient)
      }
      if (e instanceof SQLTransientException || e instanceof SQLRecoverableException) {
        return true;
      }
      if (e instanceof SQLException) {
        String state = ((SQLException) e).getSQLState();
        String message = String.valueOf(e.getMessage()).toLowerCase(Locale.ROOT);
        if ((state != null && state.startsWith("08")) // connection exceptions (PostgreSQL restarting)
            || message.contains("database is locked") || message.contains("sqlite_busy")) {
          return true;
        }
      }
    }
    return false;
  }

  /**
   * {@code call}, tried again after faults until {@code deadlineMs}; then the one-line error. Not faults
   * are raised as they are (unchecked ones as they are; checked ones wrapped).
   */
  static <T> T retrying(String catalog, String what, long deadlineMs, Callable<T> call) {
    long end = System.nanoTime() + deadlineMs * 1_000_000L;
    Exception last;
    int attempt = 1;
    while (true) {
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
      }
      long left = (end - System.nanoTime()) / 1_000_000L;
      if (left <= 0) {
        break;
      }
      long wait = ThreadLocalRandom.current().nextLong(Math.min(2_000L, 50L << Math.min(attempt - 1, 10)) + 1);
      attempt++;
      try {
        Thread.sleep(Math.min(wait, left));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
    }
    String first = String.valueOf(last.getMessage()).split("\\R", 2)[0];
    throw Errors.raise(Errors.analysis(
        "CONSISTENT_CUT.CATALOG_UNAVAILABLE",
        "catalog " + catalog + " did not answer " + what + " for " + (deadlineMs / 1000.0) + " s (last: "
            + last.getClass().getSimpleName() + ": " + first + "); check that the catalog is up and reachable, then "
            + "run the statement again (the catalog option " + DEADLINE + " sets how long to wait)"));
  }
}
