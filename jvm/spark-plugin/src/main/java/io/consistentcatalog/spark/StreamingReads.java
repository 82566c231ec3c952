package io.consistentcatalog.spark;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.streaming.StreamingRelationV2;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * The analyser's check (injected by {@link ConsistentSqlExtensions}) that refuses a streaming read of a table served
 * at a cut ({@code spark.readStream.table("<catalog>.ns.t")}). Iceberg's stream of such a table would read every
 * append of main as it lands, barrier by barrier of nothing: neither at the cut nor aligned with the query's other
 * sources. Consistent streaming reads (micro-batches whose offsets are barriers) are not there yet; until then the
 * error names the ways that are.
 */
final class StreamingReads extends AbstractFunction1<LogicalPlan, BoxedUnit> {
  @Override
  public BoxedUnit apply(LogicalPlan plan) {
    plan.foreach(new AbstractFunction1<LogicalPlan, BoxedUnit>() {
      @Override
      public BoxedUnit apply(LogicalPlan node) {
        if (node instanceof StreamingRelationV2) {
          org.apache.spark.sql.connector.catalog.Table table = ((StreamingRelationV2) node).table();
          String name = table instanceof PinnedTable ? ((PinnedTable) table).tableName()
              : table instanceof EmptyTable ? ((EmptyTable) table).tableName()
              : table instanceof DeferredTable ? table.name() : null;
          if (name != null) {
            throw Errors.raise(Errors.analysis("CONSISTENT_CUT.STREAMING_READ", name + ": a streaming read through the "
                + "consistent catalog is not supported yet (it would read every append as it lands, not at barriers "
                + "aligned with the query's other sources); read it in batch at the cut, run a streaming epoch job "
                + "(consistent_catalog.spark.streaming.start_streaming_job), or stream the plain catalog's table for "
                + "Iceberg's own stream of every append"));
          }
        }
        return BoxedUnit.UNIT;
      }
    });
    return BoxedUnit.UNIT;
  }
}
