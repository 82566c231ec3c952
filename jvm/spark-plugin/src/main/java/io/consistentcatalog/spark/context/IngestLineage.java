package io.consistentcatalog.spark.context;

import io.consistentcatalog.openlineage.EpochEmitter;
import io.consistentcatalog.openlineage.IngestRun;
import java.util.Map;
import org.apache.iceberg.Table;

/**
 * The OpenLineage run of an ingest into a root (a SQL {@code INSERT INTO} through the consistent catalog, a
 * streaming query's micro-batch): {@link IngestRun}'s events once {@link RootIngest} landed the rows, when OpenLineage
 * is configured (read at every ingest, as for epoch statements). Never throws: lineage never stops an ingest.
 */
public final class IngestLineage {
  private final String plainCatalog;
  private final Map<String, String> properties;
  private final String sink;
  private final Table table;
  private final String sql;

  public IngestLineage(String plainCatalog, Map<String, String> properties, String sink, Table table, String sql) {
    this.plainCatalog = plainCatalog;
    this.properties = properties;
    this.sink = sink;
    this.table = table;
    this.sql = sql;
  }

  /** The ingest that began at {@code startedMs} landed its rows at {@code barrier} in {@code snapshot}. */
  void landed(long startedMs, long barrier, long snapshot, String key) {
    try {
      EpochEmitter emitter = EpochEmitter.forJob(IngestRun.JOB_PREFIX + sink, plainCatalog, properties);
      if (emitter == null) {
        return;
      }
      emitter.schemaOf(name -> table.schema());
      emitter.sql(sql);
      IngestRun.landed(emitter, sink, startedMs, barrier, snapshot, key);
    } catch (RuntimeException | LinkageError e) {
      System.err.println("[openlineage] " + IngestRun.JOB_PREFIX + sink + ": no OpenLineage events for this ingest (it "
          + "landed): " + e.getClass().getSimpleName() + ": " + e.getMessage());
    }
  }
}
