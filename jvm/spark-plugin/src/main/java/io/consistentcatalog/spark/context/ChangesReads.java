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
