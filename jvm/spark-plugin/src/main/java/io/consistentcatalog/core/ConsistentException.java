package io.consistentcatalog.core;

/**
 * A typed resolution error: its {@link ErrorKind} names the Python exception class it corresponds to. Like
 * the Python errors, it states the problem in the library's terms and carries the table and barrier the
 * way out starts from; each front end (the CLI, Spark SQL) adds its own commands from those.
 */
public class ConsistentException extends RuntimeException {
  private final ErrorKind kind;
  private final String table;
  private final Long barrier;
  private final boolean root;

  public ConsistentException(ErrorKind kind, String table, String message) {
    this(kind, table, message, null, false);
  }

  public ConsistentException(ErrorKind kind, String table, String message, Long barrier, boolean root) {
    super(message);
    this.kind = kind;
    this.table = table;
    this.barrier = barrier;
    this.root = root;
  }

  public ConsistentException(ErrorKind kind, String message) {
    this(kind, null, message);
  }

  public ErrorKind kind() {
    return kind;
  }

  /** The table the error is about, when one table is to blame (null otherwise). */
  public String table() {
    return table;
  }

  /** The barrier the way out starts from (the newest still complete, the oldest retained...), or null. */
  public Long barrier() {
    return barrier;
  }

  /** For NO_WATERMARK: whether {@link #table} is a root (ingest or advance its watermark), not a derived table. */
  public boolean root() {
    return root;
  }

  public String pythonName() {
    return kind.pythonName();
  }

  static ConsistentException malformed(String message) {
    return new ConsistentException(ErrorKind.MALFORMED_METADATA, message);
  }

  static ConsistentException malformed(String table, String message) {
    return new ConsistentException(ErrorKind.MALFORMED_METADATA, table, message);
  }
}
