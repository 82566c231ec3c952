package io.consistentcatalog.spark;

import io.consistentcatalog.spark.read.EmptyTable;
import io.consistentcatalog.spark.read.PinnedTable;
import io.consistentcatalog.spark.line.LineSpark;
import io.consistentcatalog.spark.write.MergeTargetTable;
import io.consistentcatalog.spark.write.SinkTable;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.MergeIntoTable;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.catalyst.plans.logical.V2WriteCommand;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;

/**
 * The analyser rule (post-hoc resolution, {@link ConsistentSqlExtensions}) that turns a resolved write command
 * whose target is a table of a consistent catalog into an epoch or an ingest ({@link EpochWrites}). A target
 * already rewritten ({@link EpochSinkTable}) is left alone, so analysing a plan twice plans it once.
 */
final class WriteRule extends Rule<LogicalPlan> {
  private final SparkSession spark;

  WriteRule(SparkSession spark) {
    this.spark = spark;
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (plan instanceof MergeIntoTable) {
      DataSourceV2Relation target = mergeTarget(((MergeIntoTable) plan).targetTable());
      if (target == null) {
        return plan;
      }
      LogicalPlan planned = ((ConsistentSparkCatalog) target.catalog().get()).writes().planMerge((MergeIntoTable) plan, target, spark);
      return LineSpark.rewriteMerge(planned); // Spark 4.1 rewrote MERGEs before this rule: its rewrite runs here
    }
    if (!(plan instanceof V2WriteCommand)) {
      return plan;
    }
    V2WriteCommand write = (V2WriteCommand) plan;
    if (!(write.table() instanceof DataSourceV2Relation) || !write.query().resolved()) {
      return plan;
    }
    DataSourceV2Relation target = (DataSourceV2Relation) write.table();
    if (target.catalog().isEmpty() || !(target.catalog().get() instanceof ConsistentSparkCatalog)
        || target.identifier().isEmpty() || !plannable(target.table())) {
      return plan;
    }
    return ((ConsistentSparkCatalog) target.catalog().get()).writes().plan(write, target, spark);
  }

  /** The relation a MERGE writes (under its alias) when it is a table of a consistent catalog, else null. */
  private static DataSourceV2Relation mergeTarget(LogicalPlan target) {
    LogicalPlan node = target;
    while (node instanceof SubqueryAlias) {
      node = ((SubqueryAlias) node).child();
    }
    if (!(node instanceof DataSourceV2Relation)) {
      return null;
    }
    DataSourceV2Relation relation = (DataSourceV2Relation) node;
    boolean ours = relation.catalog().isDefined() && relation.catalog().get() instanceof ConsistentSparkCatalog
        && relation.identifier().isDefined()
        && (relation.table() instanceof SinkTable || relation.table() instanceof MergeTargetTable);
    return ours ? relation : null;
  }

  /**
   * A target loaded for writing, or served at the statement's cut (Spark resolves a table the statement also
   * reads once, for both: the planner then refuses the cycle).
   */
  private static boolean plannable(org.apache.spark.sql.connector.catalog.Table table) {
    return table instanceof SinkTable || table instanceof EmptyTable || (table instanceof PinnedTable && ((PinnedTable) table).atCut);
  }
}
