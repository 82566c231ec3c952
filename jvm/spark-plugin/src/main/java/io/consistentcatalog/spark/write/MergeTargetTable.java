package io.consistentcatalog.spark.write;

import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;

/**
 * The target of a {@code MERGE INTO} as loaded on a Spark line that rewrites a MERGE in its resolution batch (4.1,
 * {@code LineSpark.mergeRewrittenInResolution}): the {@link SinkTable}'s schema, partitioning and properties, but no
 * row-level operations, so that Spark leaves the MERGE as it is until the post-hoc {@code WriteRule} plans it as an
 * epoch ({@code EpochWrites.planMerge}, which puts the epoch's {@link EpochMergeTable} in its place) and then runs
 * Spark's rewrite of it, the order Spark 3.5 and 4.0 keep by themselves (protocol §5.9).
 */
public final class MergeTargetTable implements org.apache.spark.sql.connector.catalog.Table {
  private final SinkTable sink;

  public MergeTargetTable(SinkTable sink) {
    this.sink = sink;
  }

  @Override
  public String name() {
    return sink.name();
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return sink.schema();
  }

  @Override
  public Transform[] partitioning() {
    return sink.partitioning();
  }

  @Override
  public Map<String, String> properties() {
    return sink.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return sink.capabilities();
  }

  @Override
  public String toString() {
    return "MergeTarget(" + sink.name() + ")";
  }
}
