package io.consistentcatalog.spark.context;

import java.util.List;
import java.util.Locale;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.plans.logical.InsertIntoStatement;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.MergeIntoTable;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import scala.collection.JavaConverters;

/**
 * What the SQL statement this thread parsed last is, set by the SQL extension's parser for every statement it
 * parses, so it never outlives the next one; kept in the thread's {@link StatementState}:
 *
 * <ul>
 *   <li>whether it is an {@code INSERT}: its source loads then defer a table's missing cut to the scan
 *       ({@link DeferredTable}) instead of failing at once, because an epoch reads its sources at its own plan,
 *       whatever cut a read would be served (protocol §5.9);
 *   <li>for a write statement ({@code INSERT}, {@code MERGE INTO}), its text and target: the epoch's definition
 *       (§6.10, kind {@code sql}), taken once by the epoch of that target ({@link #takeText}).
 * </ul>
 */
public final class WriteStatements {
  private WriteStatements() {}

  public static void parsed(LogicalPlan plan) {
    parsed(plan, null);
  }

  public static void parsed(LogicalPlan plan, String text) {
    List<String> target = text == null ? null : target(plan);
    StatementState.current().parsed(plan instanceof InsertIntoStatement, plan instanceof MergeIntoTable, target,
        target == null ? null : text);
  }

  /**
   * {@code read}'s result, with this thread's record of the statement parsed last kept as it was: a read that runs
   * nested queries while the statement is analysed (the batch read of changes, {@code ChangesRule}) parses SQL of
   * its own, which is no statement of the user's.
   */
  public static <T> T nested(java.util.function.Supplier<T> read) {
    StatementState state = StatementState.current();
    boolean insert = state.insert;
    boolean merge = state.merge;
    List<String> target = state.writeTarget;
    String text = state.writeText;
    try {
      return read.get();
    } finally {
      state.parsed(insert, merge, target, text);
    }
  }

  public static boolean inInsert() {
    return StatementState.current().insert;
  }

  /** The name a parsed write statement writes, as written (null: not a write statement, or not a table name). */
  private static List<String> target(LogicalPlan plan) {
    LogicalPlan table;
    if (plan instanceof InsertIntoStatement) {
      table = ((InsertIntoStatement) plan).table();
    } else if (plan instanceof MergeIntoTable) {
      table = ((MergeIntoTable) plan).targetTable();
    } else {
      return null;
    }
    while (table instanceof SubqueryAlias) {
      table = ((SubqueryAlias) table).child();
    }
    if (!(table instanceof UnresolvedRelation)) {
      return null;
    }
    return JavaConverters.seqAsJavaList(((UnresolvedRelation) table).multipartIdentifier());
  }

  /**
   * Whether the statement parsed last on this thread is a {@code MERGE INTO} {@code sink} ({@code ns.t}, with or
   * without the catalog's name before it) whose text no epoch has taken yet: Spark 4.1 loads its target before it
   * rewrites the MERGE, and the catalog serves that target so that the write rule sees the MERGE as on 3.5
   * ({@code write.MergeTargetTable}).
   */
  public static boolean mergeInto(String catalog, String sink) {
    StatementState state = StatementState.current();
    return state.merge && writes(state, catalog, sink);
  }

  /**
   * Whether the statement parsed last on this thread is a SQL write of {@code sink} whose text no epoch has taken yet:
   * its analysis is the statement, so what its cut resolution loaded is current (a DataFrame's write shares the
   * planning of the DataFrame's analysis, which may be long before: its loads are not the write's).
   */
  public static boolean writing(String catalog, String sink) {
    return writes(StatementState.current(), catalog, sink);
  }

  private static boolean writes(StatementState state, String catalog, String sink) {
    List<String> target = state.writeTarget;
    if (target == null) {
      return false;
    }
    String written = String.join(".", target).toLowerCase(Locale.ROOT);
    String name = sink.toLowerCase(Locale.ROOT);
    return written.equals(name) || written.equals(catalog.toLowerCase(Locale.ROOT) + "." + name);
  }

  /**
   * The text of the write statement parsed last on this thread when it writes {@code sink} ({@code ns.t}, with or
   * without the catalog's name before it); taken once. Null otherwise (a DataFrame write, another statement's sink).
   */
  public static String takeText(String catalog, String sink) {
    StatementState state = StatementState.current();
    if (!writes(state, catalog, sink)) {
      return null;
    }
    String text = state.writeText;
    state.writeTarget = null;
    state.writeText = null;
    return text;
  }
}
