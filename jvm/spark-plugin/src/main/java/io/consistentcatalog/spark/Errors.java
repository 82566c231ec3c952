package io.consistentcatalog.spark;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.ErrorKind;
import org.apache.spark.QueryContext;
import org.apache.spark.sql.AnalysisException;
import scala.Option;

/** Spark SQL style one-line errors: {@code [CONSISTENT_CUT.KIND] <table>: <what>; <the way out>}. */
final class Errors {
  private Errors() {}

  @SuppressWarnings("unchecked")
  static AnalysisException analysis(String errorClass, String message) {
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

  /** Throws a (checked) AnalysisException from a method that cannot declare it (Spark's write builders). */
  static RuntimeException raise(AnalysisException e) {
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

  static String errorClass(ErrorKind kind) {
    switch (kind) {
      case NO_WATERMARK:
        return "CONSISTENT_CUT.NO_WATERMARK";
      case HISTORY_EXPIRED:
        return "CONSISTENT_CUT.HISTORY_EXPIRED";
      case UNTRACKED_WRITE:
        return "CONSISTENT_CUT.UNTRACKED_WRITE";
      case MALFORMED_METADATA:
        return "CONSISTENT_CUT.MALFORMED_METADATA";
      case RESOLUTION:
        return "CONSISTENT_CUT.NO_COMPLETE_BARRIER";
      case TABLE_NOT_FOUND:
        return "CONSISTENT_CUT.TABLE_NOT_FOUND";
      case INVALID_BARRIER:
      case INVALID_INPUT:
      default:
        return "CONSISTENT_CUT.INVALID_SETTING";
    }
  }

  /** A table of the query that has no consistent cut: what is wrong, and the plain catalog as the way out. */
  static AnalysisException blocked(String catalog, String plain, String table, ConsistentException cause) {
    String culprit = cause.table() != null && !cause.table().equals(table) ? " (because of " + cause.table() + ")" : "";
    return analysis(
        errorClass(cause.kind()),
        catalog + "." + table + " has no consistent cut" + culprit + ": " + cause.getMessage()
            + ". To read the table as it is now, without a consistent cut, use " + plain + "." + table
            + " [" + cause.pythonName() + "]");
  }

  static AnalysisException setting(String message) {
    return analysis("CONSISTENT_CUT.INVALID_SETTING", message);
  }

  /** Writes through the consistent catalog are refused: they would bypass the barriers. */
  static AnalysisException readOnly(String catalog, String plain, String what) {
    return analysis(
        "CONSISTENT_CUT.READ_ONLY",
        catalog + " is read-only (it serves consistent cuts); " + what + " was refused. Write through the plain "
            + "catalog " + plain + ": a derived table only through its epoch job (consistent-catalog / SparkEpochJob), "
            + "a root table with ConsistentCatalog.ingest or consistent_catalog.spark.job.ingest_dataframe, so that "
            + "every commit carries its consistent.barrier");
  }
}
