package io.consistentcatalog.openlineage;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * An ingest into a root as one OpenLineage run (protocol §5.8), the JVM's {@code openlineage_events.report_ingest}:
 * the job {@code ingest:<table>}, {@code START} at the time the ingest began and {@code COMPLETE} with the root at the
 * snapshot it landed ({@code version}), its columns ({@code schema}) and our {@code consistentCatalog_ingest} facet.
 * An ingest whose key had landed already writes nothing and sends nothing.
 */
public final class IngestRun {
  /** The job of ingests into root {@code ns.t}: {@code ingest:ns.t} (roots have no job of their own). */
  public static final String JOB_PREFIX = "ingest:";
  /** Key of our ingest facet in {@code run.facets}. */
  public static final String INGEST_FACET = "consistentCatalog_ingest";
  /** {@code _schemaURL} of our ingest facet (docs/openlineage/ConsistentCatalogIngestRunFacet.json). */
  public static final String INGEST_FACET_SCHEMA =
      "urn:consistent-catalog:openlineage:ConsistentCatalogIngestRunFacet:1-0-0";

  private IngestRun() {}

  /** Queues {@code START} (at {@code startedMs}) and {@code COMPLETE} of an ingest that landed. */
  public static void landed(EpochEmitter emitter, String table, long startedMs, long barrier, long snapshot, String key) {
    String runId = EpochEmitter.uuid7().toString();
    String started = EpochEmitter.format(startedMs);
    emitter.send("START", () -> event(emitter, runId, "START", started, table, null, new TreeMap<>()));
    emitter.send("COMPLETE", () -> {
      Map<String, Object> facet = EpochEmitter.facet(INGEST_FACET_SCHEMA);
      facet.put("barrier", barrier);
      facet.put("snapshot", snapshot);
      if (key != null) {
        facet.put("key", key);
      }
      Map<String, Object> facets = new TreeMap<>();
      facets.put(INGEST_FACET, facet);
      return event(emitter, runId, "COMPLETE", EpochEmitter.now(), table, snapshot, facets);
    });
  }

  private static Map<String, Object> event(
      EpochEmitter emitter, String runId, String type, String time, String table, Long version, Map<String, Object> facets) {
    Map<String, Object> run = new TreeMap<>();
    run.put("runId", runId);
    facets.put("tags", EpochEmitter.tagsFacet());
    run.put("facets", facets);
    Map<String, Object> job = new TreeMap<>();
    job.put("namespace", emitter.jobNamespace);
    job.put("name", emitter.job);
    job.put("facets", emitter.jobFacets());
    List<Object> outputs = new ArrayList<>();
    outputs.add(emitter.dataset(table, version, false));
    Map<String, Object> event = new TreeMap<>();
    event.put("eventType", type);
    event.put("eventTime", time);
    event.put("producer", EpochEmitter.PRODUCER);
    event.put("schemaURL", EpochEmitter.RUN_EVENT_SCHEMA);
    event.put("run", run);
    event.put("job", job);
    event.put("inputs", new ArrayList<>());
    event.put("outputs", outputs);
    return event;
  }
}
