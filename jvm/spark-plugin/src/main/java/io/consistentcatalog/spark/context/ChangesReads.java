package io.consistentcatalog.spark.context;

import java.util.Locale;
import java.util.Map;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The read option that asks for a table's changes ({@code consistent.read=changes}, protocol §5.7, §5.10), as the
 * tables a catalog serves see it in their scan's options: a read of changes is given the changes' columns by the
 * catalog's SQL extensions ({@code ChangesRule}) while it is analysed, so one whose options reach a served table's
 * scan unmarked ran without them.
 */
public final class ChangesReads {
  /** The read option that asks for changes, and its value. */
  public static final String READ = "consistent.read";

  public static final String CHANGES = "changes";
  /** Set on the options of the loaded table's scan by a stream of changes: the query was given the changes' columns. */
  public static final String SHAPED = "consistent.read.changes-columns";

  private ChangesReads() {}

  /** The read option naming the columns that pair updates (comma-separated). */
  public static final String KEY = "consistent.key";

  /**
   * The columns of the read option {@value #KEY} of a read of {@code table} (null: not given, the table's identifier
   * fields), blanks and repeats left out; refused when it names none.
   */
  public static java.util.List<String> key(String table, String option) {
    if (option == null) {
      return null;
    }
    java.util.List<String> key = new java.util.ArrayList<>();
    for (String part : option.split(",")) {
      if (!part.trim().isEmpty() && !key.contains(part.trim())) {
        key.add(part.trim());
      }
    }
    if (key.isEmpty()) {
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.INVALID_KEY", table + ": the read option " + KEY
          + " names no column; give comma-separated columns of the table, or leave it out for the table's identifier "
          + "fields"));
    }
    return key;
  }

  /** Whether a read with these options asks for changes. */
  public static boolean asked(Map<String, String> options) {
    String value = new CaseInsensitiveStringMap(options).get(READ);
    return value != null && value.trim().toLowerCase(Locale.ROOT).equals(CHANGES);
  }

  /**
   * Refuses a read whose options ask for changes but reached the table's scan as they were given: the catalog's SQL
   * extensions were not there to give the read the changes' columns (a batch read's relation is replaced by the
   * changes' query, a stream's scan is marked {@value #SHAPED}).
   */
  public static void refuseUnshaped(String catalog, String name, CaseInsensitiveStringMap options) {
    if (options.get(READ) != null && asked(options) && options.get(SHAPED) == null) {
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.NO_EXTENSIONS", catalog + "." + name
          + ": the read option " + READ + "=" + CHANGES + " needs the catalog's SQL "
          + "extensions, which give the read the columns _change_type and _barrier — add "
          + "io.consistentcatalog.spark.ConsistentSqlExtensions to spark.sql.extensions"));
    }
  }
}
