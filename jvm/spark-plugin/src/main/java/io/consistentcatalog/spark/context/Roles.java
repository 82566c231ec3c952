package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.TableState;
import java.util.Map;
import java.util.TreeSet;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.streaming.StreamingRelationV2;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import scala.collection.JavaConverters;

/**
 * A table's role as the catalog sees it (protocol §5.9, issue 42): what a refusal names before its way out, and
 * which tables of the catalog a write's query reads (a root or new table written from them with no job is refused:
 * a forgotten {@code spark.sql.consistent.job} would make a derived table a root without lineage).
 */
public final class Roles {
  /** The session setting (and, without its prefix, {@code consistent.ingestFromLake}, the streaming write option). */
  public static final String INGEST_FROM_LAKE = "ingestFromLake";

  private Roles() {}

  /** Whether the table has neither data nor a watermark on main and no job: a table a first write gives its role. */
  public static boolean isNew(TableState state) {
    return state.isRoot() && state.job() == null && state.head() == null && state.watermark() == null;
  }

  /** {@code <catalog>.<name> is a root (it holds ingests, no job)} and the like: the role, for a refusal's start. */
  public static String describe(String catalog, String name, TableState state) {
    String table = catalog + "." + name;
    if (!state.isRoot()) {
      String owner = state.owner();
      return table + " is derived (" + (owner == null ? "no job holds it" : "owned by job '" + owner + "'")
          + ", sources " + String.join(", ", state.sources()) + ")";
    }
    if (isNew(state)) {
      return table + " is a new, empty table (no job, no ingest yet)";
    }
    return table + " is a root (it holds ingests, no job)";
  }

  /**
   * The tables of catalog {@code catalog} that {@code plan} reads, batch or stream (subqueries included), by name as
   * written ({@code <catalog>.ns.t}); empty when it reads none.
   */
  public static TreeSet<String> lakeReads(LogicalPlan plan, String catalog) {
    TreeSet<String> out = new TreeSet<>();
    collect(plan, catalog, out);
    return out;
  }

  /** Whether {@code plan} reads any table (of any catalog, batch or stream), not only constants. */
  public static boolean readsTables(LogicalPlan plan) {
    if (plan instanceof DataSourceV2Relation || plan instanceof StreamingRelationV2 || plan.children().isEmpty()
        && !(plan instanceof org.apache.spark.sql.catalyst.plans.logical.LocalRelation
        || plan instanceof org.apache.spark.sql.catalyst.plans.logical.OneRowRelation
        || plan instanceof org.apache.spark.sql.catalyst.plans.logical.Range)) {
      return true;
    }
    for (LogicalPlan child : JavaConverters.seqAsJavaList(plan.children())) {
      if (readsTables(child)) {
        return true;
      }
    }
    for (LogicalPlan subquery : JavaConverters.seqAsJavaList(plan.subqueries())) {
      if (readsTables(subquery)) {
        return true;
      }
    }
    return false;
  }

  private static void collect(LogicalPlan plan, String catalog, TreeSet<String> out) {
    if (plan instanceof DataSourceV2Relation) {
      DataSourceV2Relation relation = (DataSourceV2Relation) plan;
      if (relation.catalog().isDefined() && relation.catalog().get().name().equals(catalog)
          && relation.identifier().isDefined()) {
        out.add(catalog + "." + Names.tableName(relation.identifier().get()));
      }
    } else if (plan instanceof StreamingRelationV2) {
      StreamingRelationV2 stream = (StreamingRelationV2) plan;
      if (stream.catalog().isDefined() && stream.catalog().get().name().equals(catalog)
          && stream.identifier().isDefined()) {
        out.add(catalog + "." + Names.tableName(stream.identifier().get()));
      }
    }
    for (LogicalPlan child : JavaConverters.seqAsJavaList(plan.children())) {
      collect(child, catalog, out);
    }
    for (LogicalPlan subquery : JavaConverters.seqAsJavaList(plan.subqueries())) {
      collect(subquery, catalog, out);
    }
  }

  /** The name of {@code known} nearest to {@code given} (edit distance), or null when none is near. */
  static String nearest(String given, Iterable<String> known) {
    String best = null;
    int bestDistance = Integer.MAX_VALUE;
    for (String name : known) {
      int d = distance(given.toLowerCase(java.util.Locale.ROOT), name.toLowerCase(java.util.Locale.ROOT));
      if (d < bestDistance) {
        bestDistance = d;
        best = name;
      }
    }
    return bestDistance <= Math.max(2, given.length() / 3) ? best : null;
  }

  private static int distance(String a, String b) {
    int[] previous = new int[b.length() + 1];
    int[] current = new int[b.length() + 1];
    for (int j = 0; j <= b.length(); j++) {
      previous[j] = j;
    }
    for (int i = 1; i <= a.length(); i++) {
      current[0] = i;
      for (int j = 1; j <= b.length(); j++) {
        int cost = a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1;
        current[j] = Math.min(Math.min(current[j - 1] + 1, previous[j] + 1), previous[j - 1] + cost);
      }
      int[] swap = previous;
      previous = current;
      current = swap;
    }
    return previous[b.length()];
  }

  /**
   * Refuse a {@code consistent.*} option of a read or write that is not in {@code known} (a typo would otherwise be
   * ignored), naming the nearest known option, else the list.
   */
  public static void checkOptions(Map<String, String> options, java.util.List<String> known, String errorClass,
      String what) {
    for (String key : options.keySet()) {
      if (!key.toLowerCase(java.util.Locale.ROOT).startsWith("consistent.")) {
        continue;
      }
      boolean found = false;
      for (String name : known) {
        if (name.equalsIgnoreCase(key)) {
          found = true;
          break;
        }
      }
      if (!found) {
        String near = nearest(key, known);
        throw Errors.raise(Errors.analysis(errorClass, "option " + key + " is not an option of a " + what
            + " through the consistent catalog; " + (near != null ? "did you mean " + near + "?" : "the options are "
            + String.join(", ", known))));
      }
    }
  }
}
