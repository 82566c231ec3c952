package io.consistentcatalog.spark.streaming;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;

/**
 * The output columns of a streaming query that are its aggregation's grouping columns, which update output mode
 * merges by: the sink's identifier fields must be exactly those (protocol §5.7), or a merge by key would keep two
 * rows of one group (a key narrower than the grouping) or never replace a group's row (a key that takes in an
 * aggregate). Found by following the plan from its top down its single-child nodes to the first {@code Aggregate},
 * then the grouping columns back up through the projections (renames included) to the query's output. A plan this
 * cannot follow (a join or union above the aggregation, an aggregation on an expression that no output column
 * carries) gives null: nothing to check against.
 */
final class GroupingKey {
  private GroupingKey() {}

  /**
   * The grouping columns among {@code plan}'s output, lower-cased, and each grouping column the output drops as
   * {@code "<name> (not written)"}; null when the plan cannot be followed.
   */
  static Set<String> of(LogicalPlan plan) {
    List<LogicalPlan> path = new ArrayList<>();
    LogicalPlan node = plan;
    while (node != null && !(node instanceof Aggregate)) {
      path.add(node);
      node = node.children().size() == 1 ? node.children().head() : null;
    }
    if (node == null) {
      return null;
    }
    Aggregate aggregate = (Aggregate) node;
    Map<ExprId, String> grouping = new HashMap<>(); // a grouping column's id -> its name
    for (scala.collection.Iterator<Expression> it = aggregate.groupingExpressions().iterator(); it.hasNext(); ) {
      Expression expression = it.next();
      if (!(expression instanceof Attribute)) {
        return null; // groupBy(expression): its output column is an alias the aggregate makes; not followed
      }
      grouping.put(((Attribute) expression).exprId(), ((Attribute) expression).name());
    }
    Map<ExprId, String> carried = carried(aggregate.aggregateExpressions(), grouping);
    List<Attribute> output = attributes(aggregate.output());
    for (int i = path.size() - 1; i >= 0; i--) {
      LogicalPlan above = path.get(i);
      if (above instanceof Project) {
        carried = carried(((Project) above).projectList(), carried);
      }
      if (above.output().nonEmpty()) {
        output = attributes(above.output()); // the write node on top has no output: the query's is the one below it
      }
    }
    Set<String> names = new TreeSet<>();
    Set<String> written = new HashSet<>();
    for (Attribute attribute : output) {
      String origin = carried.get(attribute.exprId());
      if (origin != null) {
        names.add(attribute.name().toLowerCase(Locale.ROOT));
        written.add(origin);
      }
    }
    for (String column : grouping.values()) {
      if (!written.contains(column)) {
        names.add(column.toLowerCase(Locale.ROOT) + " (not written)"); // a group's rows would share one key
      }
    }
    return names;
  }

  /**
   * The expressions of {@code list} that carry one of {@code ids} (the id itself or an alias of it), by their id, each
   * with the grouping column it carries.
   */
  private static Map<ExprId, String> carried(
      scala.collection.Seq<? extends NamedExpression> list, Map<ExprId, String> ids) {
    Map<ExprId, String> out = new HashMap<>();
    for (scala.collection.Iterator<? extends NamedExpression> it = list.iterator(); it.hasNext(); ) {
      NamedExpression expression = it.next();
      if (ids.containsKey(expression.exprId())) {
        out.put(expression.exprId(), ids.get(expression.exprId()));
      } else if (expression instanceof Alias && ((Alias) expression).child() instanceof Attribute) {
        String origin = ids.get(((Attribute) ((Alias) expression).child()).exprId());
        if (origin != null) {
          out.put(expression.exprId(), origin);
        }
      }
    }
    return out;
  }

  private static List<Attribute> attributes(scala.collection.Seq<Attribute> seq) {
    List<Attribute> out = new ArrayList<>();
    for (scala.collection.Iterator<Attribute> it = seq.iterator(); it.hasNext(); ) {
      out.add(it.next());
    }
    return out;
  }
}
