package io.consistentcatalog.core;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.ConnectException;
import java.net.NoRouteToHostException;
import java.net.UnknownHostException;
import java.nio.channels.ClosedByInterruptException;
import java.nio.file.NoSuchFileException;
import java.sql.SQLException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTransientException;
import java.util.IdentityHashMap;
import java.util.Locale;
import java.util.Map;
import javax.net.ssl.SSLException;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.exceptions.RESTException;
import org.apache.iceberg.exceptions.ServiceFailureException;
import org.apache.iceberg.exceptions.ServiceUnavailableException;

/**
 * Which errors of a catalog call are faults of its availability (protocol §6.8), a port of Python's
 * {@code consistent_catalog.faults.fault_of} and {@code sql_fault} (the conformance corpus holds the cases both
 * answer):
 *
 * <ul>
 *   <li>{@link Fault#UNAVAILABLE}: nothing was applied — a REST 503 or 429, a connection that could not be
 *       opened, a JDBC connection closed before the statement was sent, a PostgreSQL server not accepting
 *       connections yet ({@code 57P03}), SQLite's {@code database is locked};
 *   <li>{@link Fault#UNKNOWN}: it may have been applied — a REST 502/504 or an I/O error on the way, a commit's
 *       lost answer, a connection cut while a statement was under way (SQLState class {@code 08} but
 *       {@code 08001}/{@code 08003}/{@code 08004}, PostgreSQL's {@code 57P01}/{@code 57P02} shutdown of the
 *       session, an EOF or a reset).
 * </ul>
 *
 * Both are waited out; an unknown outcome of a commit is settled by reading the table back. Anything else (a
 * refusal, a missing table, a REST 500, a TLS misconfiguration, a refused login, a read-only database) is
 * not a fault and is raised as it is.
 */
public final class CatalogFaults {
  /** The two kinds of faults. */
  public enum Fault {
    UNAVAILABLE("unavailable"),
    UNKNOWN("unknown");

    private final String label;

    Fault(String label) {
      this.label = label;
    }

    /** Python's {@code Fault.value}. */
    public String label() {
      return label;
    }
  }

  /** SQL errors that waiting does not fix (as Python's {@code _PERMANENT_SQL}). */
  private static final String[] PERMANENT = {"readonly database", "read-only", "no such table", "does not exist",
      "authentication failed", "password authentication", "permission denied", "unable to open database file",
      "no suitable driver"}; // DriverManager's (SQLState 08001): the driver jar is missing, waiting does not bring it
  /** A connection that was never made, or was closed before the statement went out: nothing was applied. */
  private static final String[] UNAVAILABLE_TEXT = {"database is locked", "database table is locked", "sqlite_busy",
      "connection refused", "the database system is starting up", "the database system is shutting down",
      "the database system is in recovery mode", "this connection has been closed", "connection already closed"};
  /** A connection cut while a statement was under way: it may have been applied. */
  private static final String[] UNKNOWN_TEXT = {"i/o error", "server closed the connection unexpectedly",
      "connection reset", "broken pipe", "terminating connection", "could not receive data from server",
      "could not send data to server", "ssl syscall error", "unexpected eof", "eof detected"};

  private CatalogFaults() {}

  /**
   * The fault a SQL error stands for, from its SQLState (null when the driver gives none, as SQLite's) and its
   * message: the same answer as Python's {@code sql_fault}.
   */
  public static Fault ofSql(String sqlState, String message) {
    String text = message == null ? "" : message.toLowerCase(Locale.ROOT);
    for (String mark : PERMANENT) {
      if (text.contains(mark)) {
        return null;
      }
    }
    String state = sqlState == null ? "" : sqlState.toUpperCase(Locale.ROOT);
    if (state.equals("08001") || state.equals("08003") || state.equals("08004") || state.equals("57P03")) {
      return Fault.UNAVAILABLE;
    }
    if (state.startsWith("08") || state.equals("57P01") || state.equals("57P02")) {
      return Fault.UNKNOWN;
    }
    for (String mark : UNAVAILABLE_TEXT) {
      if (text.contains(mark)) {
        return Fault.UNAVAILABLE;
      }
    }
    for (String mark : UNKNOWN_TEXT) {
      if (text.contains(mark)) {
        return Fault.UNKNOWN;
      }
    }
    return null;
  }

  /** The fault {@code error} (or what caused it) stands for, or null when it is not a fault. */
  public static Fault of(Throwable error) {
    Map<Throwable, Boolean> seen = new IdentityHashMap<>();
    for (Throwable e = error; e != null && seen.put(e, Boolean.TRUE) == null; e = e.getCause()) {
      if (e instanceof ConsistentException) {
        return null; // our own errors are answers (CATALOG_UNAVAILABLE already waited its deadline out)
      }
      if (e instanceof ServiceUnavailableException) {
        return Fault.UNAVAILABLE; // 503 (and 429) from a REST catalog
      }
      if (e instanceof ServiceFailureException) {
        return null; // a plain 500: the server failing at the request, not a passing fault (as in Python)
      }
      if (e instanceof CommitStateUnknownException) {
        return Fault.UNKNOWN;
      }
      if (e.getClass() == RESTException.class) {
        return Fault.UNKNOWN; // what Iceberg's handlers map no subclass to: 502, 504, 429, an I/O error on the way
      }
      if (e instanceof InterruptedIOException || e instanceof ClosedByInterruptException) {
        return null; // the statement was cancelled: stop, do not wait
      }
      if (e instanceof FileNotFoundException || e instanceof NoSuchFileException) {
        return null; // a file that is gone stays gone
      }
      if (e instanceof SSLException) {
        return null; // a TLS misconfiguration, raised at once as in Python
      }
      if (e instanceof ConnectException || e instanceof NoRouteToHostException || e instanceof UnknownHostException) {
        return Fault.UNAVAILABLE; // no connection, so no request
      }
      if (e instanceof IOException) {
        return Fault.UNKNOWN; // reset, EOF, timed out on the way (java.net, Apache HttpClient)
      }
      if (e instanceof SQLException) {
        SQLException sql = (SQLException) e;
        Fault found = ofSql(sql.getSQLState(), sql.getMessage());
        if (found != null) {
          return found;
        }
        if (e instanceof SQLTransientException || e instanceof SQLRecoverableException) {
          return Fault.UNKNOWN;
        }
      }
    }
    return null;
  }
}
