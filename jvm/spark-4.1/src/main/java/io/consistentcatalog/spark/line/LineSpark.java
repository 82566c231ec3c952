package io.consistentcatalog.spark.line;

import org.apache.spark.sql.catalyst.analysis.ResolveRowLevelCommandAssignments$;
import org.apache.spark.sql.catalyst.analysis.RewriteMergeIntoTable$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.streaming.runtime.StreamingExecutionRelation;
import org.apache.spark.sql.execution.streaming.runtime.StreamingQueryWrapper;
import org.apache.spark.sql.streaming.StreamingQuery;

/**
 * The Spark internals the shared code uses whose place or shape differs between Spark lines; each line module
 * has its own copy (as of {@link LineSparkCatalog}). Spark 4.1's copy: its streaming execution classes moved to {@code org.apache.spark.sql.execution.streaming.runtime}, and {@code DataSourceV2Relation} carries the statement's time travel ({@code timeTravelSpec}), kept as it is.
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
    return relation.copy(table, relation.output(), relation.catalog(), relation.identifier(), relation.options(), relation.timeTravelSpec());
  }

  /**
   * Whether Spark rewrites a {@code MERGE INTO} before the post-hoc rules: yes on 4.1, which moved
   * {@code ResolveRowLevelCommandAssignments} and {@code RewriteMergeIntoTable} into its resolution batch (3.5 and
   * 4.0 run them in a "DML rewrite" batch after the post-hoc rules). The catalog then serves a MERGE's target without
   * row-level operations ({@code write.MergeTargetTable}), which Spark leaves alone, and the write rule rewrites the
   * planned MERGE itself ({@link #rewriteMerge}).
   */
  public static boolean mergeRewrittenInResolution() {
    return true;
  }

  /**
   * A MERGE the write rule planned (its target the epoch's table), rewritten by Spark's own rules in their order:
   * the assignments aligned, then the MERGE made a row-level write (or, insert-only, an append).
   */
  public static LogicalPlan rewriteMerge(LogicalPlan merge) {
    LogicalPlan aligned = ResolveRowLevelCommandAssignments$.MODULE$.apply(merge);
    return RewriteMergeIntoTable$.MODULE$.apply(aligned);
  }
}
