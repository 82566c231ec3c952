package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.Definitions;
import io.consistentcatalog.spark.line.LineSpark;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.streaming.StreamingRelationV2;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import scala.collection.JavaConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * The fingerprint of a query without SQL text (§6.10, kind {@code plan}): a DataFrame write's analysed query or a
 * streaming query's. Spark's canonical plan alone is not stable across sessions: a table's relation prints what is
 * loaded (a snapshot, an empty table at the cut, a stream's offsets). So the text hashed is the names of the tables
 * read, in plan order, the output columns (names and types; the canonical plan drops names), then the canonical
 * plan with every leaf that reads a table replaced by a relation of its
 * columns only, its expression ids renumbered in order of appearance.
 */
public final class PlanFingerprint {
  private static final Pattern EXPR_ID = Pattern.compile("#(\\d+)");

  private PlanFingerprint() {}

  public static String of(LogicalPlan query) {
    return Definitions.fingerprint(Definitions.PLAN, text(query));
  }

  static String text(LogicalPlan query) {
    List<String> names = new ArrayList<>();
    collect(query, names);
    LogicalPlan stripped = query.transformUpWithSubqueries(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
      @Override
      public boolean isDefinedAt(LogicalPlan node) {
        return name(node) != null;
      }

      @Override
      public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 node, scala.Function1<A1, B1> fallback) {
        if (name(node) == null) {
          return fallback.apply(node);
        }
        @SuppressWarnings("unchecked")
        // no rows, not streaming: the same on every Spark line (only the fingerprint's text sees it)
        B1 out = (B1) org.apache.spark.sql.catalyst.plans.logical.LocalRelation$.MODULE$.apply(node.output());
        return out;
      }
    });
    String tree;
    try {
      tree = stripped.canonicalized().treeString();
    } catch (RuntimeException e) { // a plan Spark cannot canonicalise: its text as it is
      tree = stripped.treeString();
    }
    String output; // the canonical plan drops names: the output columns' are part of the definition
    try {
      output = query.schema().catalogString();
    } catch (RuntimeException e) {
      output = "";
    }
    return String.join("\n", names) + "\noutput " + output + "\n" + renumber(tree);
  }

  /** Expression ids renumbered by first appearance: {@code #1234} and {@code #0} of two sessions become the same. */
  private static String renumber(String tree) {
    Map<String, Integer> ids = new HashMap<>();
    Matcher m = EXPR_ID.matcher(tree);
    StringBuffer out = new StringBuffer();
    while (m.find()) {
      Integer id = ids.computeIfAbsent(m.group(1), k -> ids.size());
      m.appendReplacement(out, "#" + id);
    }
    m.appendTail(out);
    return out.toString();
  }

  private static void collect(LogicalPlan plan, List<String> out) {
    String name = name(plan);
    if (name != null) {
      out.add(name);
      return;
    }
    for (LogicalPlan child : JavaConverters.seqAsJavaList(plan.children())) {
      collect(child, out);
    }
    for (LogicalPlan subquery : JavaConverters.seqAsJavaList(plan.subqueries())) {
      collect(subquery, out);
    }
  }

  /** The name of the table a leaf reads (null: not a table's relation). */
  private static String name(LogicalPlan node) {
    if (node instanceof DataSourceV2Relation) {
      DataSourceV2Relation relation = (DataSourceV2Relation) node;
      return "table " + (relation.identifier().isDefined() ? Names.tableName(relation.identifier().get()) : relation.name());
    }
    if (node instanceof StreamingRelationV2) {
      // "<catalog>.<ns.t>" as the stream source was named before its table became the served one (issue 35), so
      // that a job's plan fingerprint (§6.10) stays what its earlier runs recorded
      StreamingRelationV2 stream = (StreamingRelationV2) node;
      if (stream.catalog().isDefined() && stream.identifier().isDefined()) {
        return "stream " + stream.catalog().get().name() + "." + Names.tableName(stream.identifier().get());
      }
      return "stream " + stream.table().name();
    }
    Object source = LineSpark.streamSource(node);
    if (source != null) {
      return "stream " + source;
    }
    return null;
  }
}
