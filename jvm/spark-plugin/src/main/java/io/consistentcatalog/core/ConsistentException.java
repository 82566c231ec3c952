package io.consistentcatalog.core;

/** A typed resolution error: its {@link ErrorKind} names the Python exception class it corresponds to. */
public class ConsistentException extends RuntimeException {
  private final ErrorKind kind;
  private final String table;

  public ConsistentException(ErrorKind kind, String table, String message) {
    super(message);
    this.kind = kind;
    this.table = table;
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
