package io.consistentcatalog.spark.context;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import scala.Option;

/**
 * The SQL text a write command was parsed from (Spark keeps it in the parsed nodes' origin, and analysis keeps the
 * origin): the OpenLineage {@code sql} job facet of a statement's run. None for DataFrame writes.
 */
public final class StatementText {
  private StatementText() {}

  public static String of(LogicalPlan plan) {
    try {
      Option<String> text = plan.origin().sqlText();
      return text.isDefined() ? text.get() : null;
    } catch (RuntimeException | LinkageError e) {
      return null; // the facet is optional
    }
  }
}
