package io.consistentcatalog.spark;

import org.apache.spark.sql.catalyst.plans.logical.InsertIntoStatement;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * Whether the SQL statement this thread parsed last is an {@code INSERT}: its source loads then defer a table's
 * missing cut to the scan ({@link DeferredTable}) instead of failing at once, because an epoch reads its sources
 * at its own plan, whatever cut a read would be served (protocol §5.9). Set by the SQL extension's parser for
 * every statement it parses, so it never outlives the next one.
 */
final class WriteStatements {
  private static final ThreadLocal<Boolean> INSERT = ThreadLocal.withInitial(() -> Boolean.FALSE);

  private WriteStatements() {}

  static void parsed(LogicalPlan plan) {
    INSERT.set(plan instanceof InsertIntoStatement);
  }

  static boolean inInsert() {
    return INSERT.get();
  }
}
