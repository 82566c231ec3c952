package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.ErrorKind;
import org.apache.spark.QueryContext;
import org.apache.spark.sql.AnalysisException;
import scala.Option;

/** Spark SQL style one-line errors: {@code [CONSISTENT_CUT.KIND] <table>: <what>; <the way out>}. */
public final class Errors {
  private Errors() {}

  @SuppressWarnings("unchecked")
  public static AnalysisException analysis(String errorClass, String message) {
    String line = ("[" + errorClass + "] " + message).replace('\n', ' ').replace('\r', ' ');
    return new AnalysisException(
        line,
        Option.empty(),
        Option.empty(),
        Option.empty(),
        Option.empty(),
        emptyMap(),
        new QueryContext[0]);
  }

  /**
   * A name that is no table of the catalog: the one-line {@code [CONSISTENT_CUT.TABLE_NOT_FOUND]} message, under Spark's
   * own condition {@code TABLE_OR_VIEW_NOT_FOUND} (SQLSTATE 42P01), the one Spark 4's {@code Catalog.tableExists} takes
   * for "no table" (it analyses the name and answers false on that condition alone), as for Spark's own catalogs.
   */
  public static AnalysisException tableNotFound(String message) {
    String line = ("[CONSISTENT_CUT.TABLE_NOT_FOUND] " + message).replace('\n', ' ').replace('\r', ' ');
    return new AnalysisException(
        line,
        Option.empty(),
        Option.empty(),
        Option.empty(),
        Option.apply("TABLE_OR_VIEW_NOT_FOUND"),
        emptyMap(),
        new QueryContext[0]);
  }

  /** Throws a (checked) AnalysisException from a method that cannot declare it (Spark's write builders). */
  public static RuntimeException raise(AnalysisException e) {
    return Errors.<RuntimeException>sneakyThrow(e);
  }

  /** Throws {@code e} as it is (a checked AnalysisException kept for later, e.g. a deferred table's scan). */
  public static RuntimeException rethrow(Throwable e) {
    return Errors.<RuntimeException>sneakyThrow(e);
  }

  @SuppressWarnings("unchecked")
  private static <T extends Throwable> T sneakyThrow(Throwable e) throws T {
    throw (T) e;
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  private static scala.collection.immutable.Map<String, String> emptyMap() {
    return (scala.collection.immutable.Map) scala.collection.immutable.Map$.MODULE$.empty();
  }

  public static String errorClass(ErrorKind kind) {
    switch (kind) {
      case NO_WATERMARK:
        return "CONSISTENT_CUT.NO_WATERMARK";
      case HISTORY_EXPIRED:
        return "CONSISTENT_CUT.HISTORY_EXPIRED";
      case UNTRACKED_WRITE:
        return "CONSISTENT_CUT.UNTRACKED_WRITE";
      case STRANDED_DATA:
        return "CONSISTENT_CUT.STRANDED_DATA";
      case MALFORMED_METADATA:
        return "CONSISTENT_CUT.MALFORMED_METADATA";
      case RESOLUTION:
        return "CONSISTENT_CUT.NO_COMPLETE_BARRIER";
      case TABLE_NOT_FOUND:
        return "CONSISTENT_CUT.TABLE_NOT_FOUND";
      case CYCLE:
        return "CONSISTENT_WRITE.CYCLE";
      case OWNERSHIP:
        return "CONSISTENT_WRITE.OWNERSHIP";
      case FENCED:
        return "CONSISTENT_WRITE.FENCED";
      case CATALOG_UNAVAILABLE:
        return "CONSISTENT_CUT.CATALOG_UNAVAILABLE";
      case CATALOG_PROBE:
        return "CONSISTENT_WRITE.CATALOG_PROBE";
      case CATALOG_LIMIT:
        return "CONSISTENT_WRITE.CATALOG_LIMIT";
      case INVALID_BARRIER:
      case INVALID_INPUT:
      default:
        return "CONSISTENT_CUT.INVALID_SETTING";
    }
  }

  /** A table of the query that has no consistent cut: what is wrong, the way out in Spark SQL, and the plain catalog. */
  public static AnalysisException blocked(String catalog, String plain, String table, ConsistentException cause) {
    String culprit = cause.table() != null && !cause.table().equals(table) ? " (because of " + cause.table() + ")" : "";
    String hint = hint(cause);
    return analysis(
        errorClass(cause.kind()),
        catalog + "." + table + " has no consistent cut" + culprit + ": " + cause.getMessage()
            + (hint == null ? "" : ". " + hint)
            + ". To read the table as it is now, without a consistent cut, use " + plain + "." + table);
  }

  /** What a Spark SQL user does about {@code cause}: a session setting, or the administrator's command. */
  static String hint(ConsistentException cause) {
    String asOf = Settings.PREFIX + Settings.AS_OF;
    switch (cause.kind()) {
      case UNTRACKED_WRITE:
        if (cause.barrier() == null) {
          return "`consistent-catalog revise " + cause.table() + " --to-barrier <a barrier before it> --mode full` "
              + "removes the write";
        }
        return "SET " + asOf + "=" + cause.barrier() + " reads the cut from before the write; `consistent-catalog "
            + "revise " + cause.table() + " --to-barrier " + cause.barrier() + "` removes the write (the next "
            + "statement then reads the revised table)";
      case STRANDED_DATA:
        return "`consistent-catalog revise " + cause.table() + " --to-barrier " + cause.barrier() + " --mode full` "
            + "empties it; its job's next statement rebuilds it";
      case HISTORY_EXPIRED:
        return "SET " + asOf + " to a later barrier (the retained history starts at " + cause.barrier()
            + "), or SET " + Settings.PREFIX + Settings.TAG + " to a retained cut (`consistent-catalog retain --list`)";
      case NO_WATERMARK:
        return cause.root()
            ? "`consistent-catalog advance-watermark " + cause.table() + " BARRIER` declares it complete"
            : "`consistent-catalog status " + cause.table() + "` shows its sources' progress";
      case RESOLUTION:
        return cause.barrier() == null ? null : "SET " + asOf + " to a later barrier, or RESET " + asOf;
      default:
        return null;
    }
  }

  /**
   * A statement's epoch or ingest refused when it commits. {@code FENCED} there means the catalog refused its commit
   * inside its compare-and-swap: nothing of the statement landed, so the message says that running it again is safe.
   */
  static AnalysisException statementRefusal(ConsistentException e) {
    String message = e.getMessage();
    if (e.kind() == ErrorKind.FENCED && !message.contains("run the statement again")) {
      message += "; nothing of this statement was published, so running it again is safe: it plans afresh (an epoch "
          + "another writer published meanwhile is found done, not written twice)";
    }
    return analysis(errorClass(e.kind()), message);
  }

  public static AnalysisException setting(String message) {
    return analysis("CONSISTENT_CUT.INVALID_SETTING", message);
  }

  /** Writes through the consistent catalog are refused: they would bypass the barriers. */
  public static AnalysisException readOnly(String catalog, String plain, String what) {
    return analysis(
        "CONSISTENT_CUT.READ_ONLY",
        catalog + " is read-only but for epochs and ingests (INSERT INTO, INSERT OVERWRITE and DataFrame writes into a "
            + "table of it, by name); " + what + " was refused. Run DDL and maintenance through the plain catalog "
            + plain + "; a derived table changes only through its epoch job, a root by appending, so that every commit "
            + "carries its consistent.barrier");
  }

}
