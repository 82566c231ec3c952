package io.consistentcatalog.spark;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.spark.context.ChangesReads;
import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.Names;
import io.consistentcatalog.spark.context.Roles;
import io.consistentcatalog.spark.context.WriteStatements;
import io.consistentcatalog.spark.read.EmptyTable;
import io.consistentcatalog.spark.read.PinnedTable;
import io.consistentcatalog.spark.streaming.ChangesTable;
import io.consistentcatalog.spark.streaming.RewrittenSource;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute$;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.streaming.StreamingRelationV2;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.Option;
import scala.Product;
import scala.collection.JavaConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractPartialFunction;

/**
 * The analyser rule (resolution, {@link ConsistentSqlExtensions}) that gives a streaming read of a table of a
 * consistent catalog with the read option {@code consistent.read=changes} the columns of its changes: Spark takes a
 * stream's columns from the table the catalog loads (its {@code StreamingRelationV2}) before it looks at the
 * options, so this rule puts {@link ChangesTable} (the table's columns, {@code _change_type}, {@code _barrier}) and
 * those columns in the relation's place while the query is resolved. The relation is a case class whose fields
 * differ between Spark lines: the rule copies it field by field ({@code makeCopy}), replacing the table and its
 * output only.
 *
 * <p>A batch read with that option ({@code spark.read.option("consistent.read", "changes")
 * .option("consistent.fromBarrier", T1)[.option("consistent.toBarrier", T2)][.option("consistent.key", "id")]
 * .table(...)}, or SQL's {@code WITH (...)} options on the table's name) becomes, in the relation's place, the query of
 * {@code changes(t, T1, T2)} that {@code CALL create_changes_view} registers as its view ({@link ChangesView#read}).
 */
final class ChangesRule extends Rule<LogicalPlan> {
  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!plan.isStreaming()) {
      return batch(plan);
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

  /** Option: the range's first barrier (epoch milliseconds; required for a batch read of changes). */
  static final String FROM_BARRIER = "consistent.fromBarrier";
  /** Option: the range's last barrier (epoch milliseconds; default the table's watermark). */
  static final String TO_BARRIER = "consistent.toBarrier";
  /** Every read option of a table of the catalog; any other {@code consistent.*} option is a typo and is refused. */
  static final List<String> READ_OPTIONS = java.util.Arrays.asList(ChangesTable.READ, FROM_BARRIER, TO_BARRIER,
      ChangesTable.KEY, "consistent.waitFor", ChangesReads.SHAPED);

  /**
   * A parsed SQL statement with every batch read of changes ({@code FROM t WITH ('consistent.read' = 'changes', ...)})
   * under a filter on {@code _change_type} (never null, so no row is dropped) that only the changes' columns
   * resolve: until this rule has put the changes in the relation's place, the read's parent is unresolved and Spark
   * does not expand a {@code *} above it, so {@code SELECT *} is the changes' columns, whatever else the statement
   * resolves in the same pass (Spark would otherwise expand it to the table's columns when nothing delays it).
   */
  static LogicalPlan marked(LogicalPlan parsed) {
    if (parsed == null) {
      return null;
    }
    return parsed.transformUpWithSubqueries(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
      @Override
      public boolean isDefinedAt(LogicalPlan node) {
        return node instanceof UnresolvedRelation && !((UnresolvedRelation) node).isStreaming()
            && ChangesTable.asked(((UnresolvedRelation) node).options().asCaseSensitiveMap());
      }

      @Override
      public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 node, scala.Function1<A1, B1> fallback) {
        if (!isDefinedAt(node)) {
          return fallback.apply(node);
        }
        @SuppressWarnings("unchecked")
        B1 filtered = (B1) new Filter(new IsNotNull(UnresolvedAttribute$.MODULE$.quoted(TableChanges.CHANGE_TYPE)), node);
        return filtered;
      }
    });
  }

  /** {@code plan} with every batch relation of a consistent catalog whose options ask for changes read as them. */
  private static LogicalPlan batch(LogicalPlan plan) {
    if (plan instanceof DataSourceV2Relation) {
      LogicalPlan changes = changes((DataSourceV2Relation) plan);
      return changes == null ? plan : changes;
    }
    if (plan.children().isEmpty()) {
      return plan;
    }
    if (plan instanceof Project) {
      refuseExpandedStar((Project) plan);
    }
    return plan.mapChildren(new AbstractFunction1<LogicalPlan, LogicalPlan>() {
      @Override
      public LogicalPlan apply(LogicalPlan child) {
        return batch(child);
      }
    });
  }

  /**
   * Refuses a {@code SELECT *} over a SQL read of changes that the parser's mark ({@link #marked}) did not reach (the
   * definition of a common table expression): Spark expands {@code *} to the table's columns in the pass that
   * resolves the table, before this rule sees the options, so the query would drop {@code _change_type} and
   * {@code _barrier} — which rows are deletes — without a word. A projection of exactly the table's columns (through
   * aliases and filters) over a read of changes is refused, naming the way out.
   */
  private static void refuseExpandedStar(Project project) {
    LogicalPlan below = project.child();
    while (below instanceof SubqueryAlias || below instanceof Filter) {
      below = below.children().head();
    }
    if (!(below instanceof DataSourceV2Relation)) {
      return;
    }
    DataSourceV2Relation relation = (DataSourceV2Relation) below;
    if (relation.catalog().isEmpty() || !(relation.catalog().get() instanceof ConsistentSparkCatalog)
        || !ChangesTable.asked(relation.options().asCaseSensitiveMap())) {
      return;
    }
    List<ExprId> selected = new ArrayList<>();
    for (NamedExpression e : JavaConverters.seqAsJavaListConverter(project.projectList()).asJava()) {
      if (!((org.apache.spark.sql.catalyst.expressions.Expression) e).resolved()) {
        return; // a column not the table's (_change_type, ...): resolved once the changes are in place
      }
      selected.add(e.exprId());
    }
    List<ExprId> columns = new ArrayList<>();
    for (Attribute a : JavaConverters.seqAsJavaListConverter(relation.output()).asJava()) {
      columns.add(a.exprId());
    }
    if (selected.equals(columns)) {
      String table = ((ConsistentSparkCatalog) relation.catalog().get()).catalogName() + "."
          + (relation.identifier().isEmpty() ? relation.name() : Names.tableName(relation.identifier().get()));
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.INVALID_OPTION", table + ": a SQL read of changes that "
          + "selects the table's columns only (SELECT * is expanded to them before the read option is seen) would "
          + "drop _change_type and _barrier — select them by name: SELECT *, _change_type, _barrier FROM " + table
          + " WITH ('" + ChangesTable.READ + "' = '" + ChangesTable.CHANGES + "', '" + FROM_BARRIER + "' = ...)"));
    }
  }

  /** The analysed query of the changes {@code relation}'s options ask for, or null (no such option, not ours). */
  private static LogicalPlan changes(DataSourceV2Relation relation) {
    if (relation.catalog().isEmpty() || !(relation.catalog().get() instanceof ConsistentSparkCatalog)
        || relation.identifier().isEmpty()) {
      return null;
    }
    ConsistentSparkCatalog catalog = (ConsistentSparkCatalog) relation.catalog().get();
    CaseInsensitiveStringMap options = relation.options();
    Roles.checkOptions(options.asCaseSensitiveMap(), READ_OPTIONS, "CONSISTENT_READ.INVALID_OPTION", "read");
    String read = options.get(ChangesTable.READ);
    String from = options.get(FROM_BARRIER);
    String to = options.get(TO_BARRIER);
    if (read == null && from == null && to == null) {
      return null;
    }
    String name = Names.tableName(relation.identifier().get());
    String table = catalog.catalogName() + "." + name;
    String usage = "spark.read.option(\"" + ChangesTable.READ + "\", \"" + ChangesTable.CHANGES + "\").option(\""
        + FROM_BARRIER + "\", <barrier>)[.option(\"" + TO_BARRIER + "\", <barrier>)][.option(\"" + ChangesTable.KEY
        + "\", \"col,...\")].table(\"" + table + "\")";
    if (read == null || !ChangesTable.asked(options.asCaseSensitiveMap())) {
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.INVALID_OPTION", table + ": "
          + (read == null ? "the read option " + (from != null ? FROM_BARRIER : TO_BARRIER) + " is given without "
              + ChangesTable.READ + "=" + ChangesTable.CHANGES
              : "the read option " + ChangesTable.READ + " is '" + read + "'; a batch read takes '"
                  + ChangesTable.CHANGES + "' (the changes between two barriers) or no such option (the table at the "
                  + "cut)")
          + " — read the changes with " + usage));
    }
    if (from == null) {
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.INVALID_RANGE", table + ": a batch read of changes needs "
          + "the read option " + FROM_BARRIER + " (the first barrier of the range: ms, ISO-8601, now-1h; protocol §3.8): "
          + usage));
    }
    long fromBarrier = barrier(table, FROM_BARRIER, from, usage);
    Long toBarrier = to == null ? null : barrier(table, TO_BARRIER, to, usage);
    List<String> key = ChangesReads.key(table, options.get(ChangesTable.KEY));
    LogicalPlan changes = WriteStatements.nested(
        () -> ChangesView.read(catalog, name, fromBarrier, toBarrier, key).rows.queryExecution().analyzed());
    return keepingIds(changes, JavaConverters.seqAsJavaListConverter(relation.output()).asJava());
  }

  /**
   * {@code changes} with the table's columns under the relation's own attribute ids: what the query above already
   * resolved against the relation (in the same pass as the relation) still refers to them. The changes' columns
   * follow with ids of their own.
   */
  private static LogicalPlan keepingIds(LogicalPlan changes, List<AttributeReference> columns) {
    List<Attribute> output = JavaConverters.seqAsJavaListConverter(changes.output()).asJava();
    scala.collection.immutable.List<String> noQualifier =
        JavaConverters.asScalaBufferConverter(new ArrayList<String>()).asScala().toList();
    List<NamedExpression> projected = new ArrayList<>();
    for (Attribute attribute : output) {
      AttributeReference column = null;
      for (AttributeReference c : columns) {
        if (c.name().equals(attribute.name())) {
          column = c;
        }
      }
      projected.add(column == null ? attribute
          : new Alias(attribute, column.name(), column.exprId(), noQualifier, Option.empty(), noQualifier));
    }
    return new Project(JavaConverters.asScalaBufferConverter(projected).asScala().toList(), changes);
  }

  /** A barrier option's value, through the barrier grammar (protocol §3.8), as the procedure's {@code from_barrier}. */
  private static long barrier(String table, String option, String value, String usage) {
    try {
      return Barriers.parse(value, System.currentTimeMillis());
    } catch (ConsistentException e) {
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.INVALID_OPTION", table + ": the read option " + option
          + " is '" + value + "', not a barrier: " + e.getMessage() + " (protocol §3.8): " + usage));
    }
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
    if (tableAt >= 0 && options != null && (args[tableAt] instanceof PinnedTable || args[tableAt] instanceof EmptyTable)) {
      Roles.checkOptions(options.asCaseSensitiveMap(), READ_OPTIONS, "CONSISTENT_READ.INVALID_OPTION", "streaming read");
    }
    if (tableAt >= 0 && options != null && args[tableAt] instanceof PinnedTable
        && options.get(ChangesTable.READ) == null && node instanceof StreamingRelationV2) {
      // a stream of a table its job rewrites: refused here, when the query is defined, not at its first trigger
      StreamingRelationV2 stream = (StreamingRelationV2) node;
      if (stream.catalog().isDefined() && stream.catalog().get() instanceof ConsistentSparkCatalog) {
        PinnedTable pinned = (PinnedTable) args[tableAt];
        RewrittenSource.refuse(((ConsistentSparkCatalog) stream.catalog().get()).catalogName(), pinned.table(),
            pinned.tableName());
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
