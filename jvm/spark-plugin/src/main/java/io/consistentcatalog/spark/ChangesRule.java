package io.consistentcatalog.spark;

import io.consistentcatalog.spark.read.PinnedTable;
import io.consistentcatalog.spark.streaming.ChangesTable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.Product;
import scala.collection.JavaConverters;
import scala.runtime.AbstractFunction1;

/**
 * The analyser rule (resolution, {@link ConsistentSqlExtensions}) that gives a streaming read of a table of a
 * consistent catalog with the read option {@code consistent.read=changes} the columns of its changes: Spark takes a
 * stream's columns from the table the catalog loads (its {@code StreamingRelationV2}) before it looks at the
 * options, so this rule puts {@link ChangesTable} (the table's columns, {@code _change_type}, {@code _barrier}) and
 * those columns in the relation's place while the query is resolved. The relation is a case class whose fields
 * differ between Spark lines: the rule copies it field by field ({@code makeCopy}), replacing the table and its
 * output only.
 */
final class ChangesRule extends Rule<LogicalPlan> {
  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!plan.isStreaming()) {
      return plan;
    }
    LogicalPlan replaced = replace(plan);
    if (replaced != null) {
      return replaced;
    }
    return plan.mapChildren(new AbstractFunction1<LogicalPlan, LogicalPlan>() {
      @Override
      public LogicalPlan apply(LogicalPlan child) {
        return ChangesRule.this.apply(child);
      }
    });
  }

  /** The relation reading changes in place of {@code node}, or null (not a stream of ours asking for changes). */
  private static LogicalPlan replace(LogicalPlan node) {
    if (!node.getClass().getSimpleName().equals("StreamingRelationV2") || !(node instanceof Product)) {
      return null;
    }
    Product relation = (Product) node;
    Object[] args = new Object[relation.productArity()];
    int tableAt = -1;
    int outputAt = -1;
    CaseInsensitiveStringMap options = null;
    for (int i = 0; i < args.length; i++) {
      args[i] = relation.productElement(i);
      if (args[i] instanceof Table && tableAt < 0) {
        tableAt = i;
      } else if (args[i] instanceof CaseInsensitiveStringMap && options == null) {
        options = (CaseInsensitiveStringMap) args[i];
      } else if (args[i] instanceof scala.collection.Seq && outputAt < 0 && attributes(args[i])) {
        outputAt = i;
      }
    }
    if (tableAt < 0 || outputAt < 0 || options == null || !(args[tableAt] instanceof PinnedTable)
        || !ChangesTable.asked(options.asCaseSensitiveMap())) {
      return null;
    }
    List<AttributeReference> output = new ArrayList<>(
        JavaConverters.seqAsJavaListConverter((scala.collection.Seq<AttributeReference>) args[outputAt]).asJava());
    scala.collection.immutable.List<String> noQualifier =
        JavaConverters.asScalaBufferConverter(new ArrayList<String>()).asScala().toList();
    output.add(new AttributeReference("_change_type", DataTypes.StringType, true, Metadata.empty(),
        NamedExpression$.MODULE$.newExprId(), noQualifier));
    output.add(new AttributeReference("_barrier", DataTypes.LongType, true, Metadata.empty(),
        NamedExpression$.MODULE$.newExprId(), noQualifier));
    args[tableAt] = ChangesTable.of((Table) args[tableAt]);
    args[outputAt] = JavaConverters.asScalaBufferConverter(output).asScala().toList();
    return node.makeCopy(args);
  }

  private static boolean attributes(Object seq) {
    scala.collection.Iterator<?> it = ((scala.collection.Seq<?>) seq).iterator();
    while (it.hasNext()) {
      if (!(it.next() instanceof AttributeReference)) {
        return false;
      }
    }
    return true;
  }
}
