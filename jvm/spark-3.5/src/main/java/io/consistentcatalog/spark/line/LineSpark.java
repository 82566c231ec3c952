package io.consistentcatalog.spark.line;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.streaming.StreamingExecutionRelation;
import org.apache.spark.sql.execution.streaming.StreamingQueryWrapper;
import org.apache.spark.sql.streaming.StreamingQuery;

/**
 * The Spark internals the shared code uses whose place or shape differs between Spark lines; each line module
 * has its own copy (as of {@link LineSparkCatalog}). Spark 3.5's copy (the streaming execution classes in {@code org.apache.spark.sql.execution.streaming}; Spark 4.1 moved them to its {@code runtime} sub-package).
 * Public, so the shared classes may live in any package.
 */
public final class LineSpark {
  private LineSpark() {}

  /** The resolved checkpoint root of a query run in this JVM; null for another kind of query. */
  public static String checkpointRoot(StreamingQuery query) {
    return query instanceof StreamingQueryWrapper
        ? ((StreamingQueryWrapper) query).streamingQuery().resolvedCheckpointRoot()
        : null;
  }

  /** The output mode of a query run in this JVM ({@code Append}, {@code Complete}, {@code Update}); null for another kind. */
  public static String outputMode(StreamingQuery query) {
    return query instanceof StreamingQueryWrapper
        ? String.valueOf(((StreamingQueryWrapper) query).streamingQuery().outputMode())
        : null;
  }

  /** The analyzed plan of a query run in this JVM; null for another kind of query. */
  public static LogicalPlan analyzedPlan(StreamingQuery query) {
    return query instanceof StreamingQueryWrapper ? ((StreamingQueryWrapper) query).streamingQuery().analyzedPlan() : null;
  }

  /** The source of a running stream's relation ({@code StreamingExecutionRelation}); null for another node. */
  public static Object streamSource(LogicalPlan node) {
    return node instanceof StreamingExecutionRelation ? ((StreamingExecutionRelation) node).source() : null;
  }

  /** {@code relation} reading or writing {@code table} instead, everything else the same. */
  public static DataSourceV2Relation withTable(DataSourceV2Relation relation, Table table) {
    return relation.copy(table, relation.output(), relation.catalog(), relation.identifier(), relation.options());
  }

  /**
   * Whether Spark rewrites a {@code MERGE INTO} before the post-hoc rules: not on this line (its DML rewrite batch runs
   * after them), so the write rule sees the MERGE and the target is the {@code SinkTable} as for any write.
   */
  public static boolean mergeRewrittenInResolution() {
    return false;
  }

  /** A MERGE the write rule planned, as Spark's rewrite leaves it: as it is here (Spark rewrites it after the rule). */
  public static LogicalPlan rewriteMerge(LogicalPlan merge) {
    return merge;
  }
}
