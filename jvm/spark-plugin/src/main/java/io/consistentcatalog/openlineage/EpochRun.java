package io.consistentcatalog.openlineage;

import io.consistentcatalog.core.EpochPlanner;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The events of one epoch attempt (one OpenLineage run), the JVM's {@code openlineage_events.EpochRun}: {@code START}
 * once Spark carries the planned epoch out, then exactly one of {@code COMPLETE} (after the publish) and
 * {@code FAIL}; a plan that itself failed is a {@code FAIL} alone. Safe to call from any thread: the first end wins.
 */
public final class EpochRun {
  private final EpochEmitter emitter;
  /** The run's id: a UUIDv7. */
  public final String runId;
  private final List<String> sources;
  private final Set<String> sinks;
  private final AtomicBoolean started = new AtomicBoolean();
  private final AtomicBoolean ended = new AtomicBoolean();
  private volatile Planned plan;

  /** The epoch as planned: barrier T, inputs {@code snap(source, T)} (null: empty at T), per sink its action. */
  private static final class Planned {
    final long barrier;
    final Map<String, Long> inputs;
    final Map<String, String> actions;
    final String instance;

    Planned(long barrier, Map<String, Long> inputs, Map<String, String> actions, String instance) {
      this.barrier = barrier;
      this.inputs = inputs;
      this.actions = actions;
      this.instance = instance;
    }
  }

  EpochRun(EpochEmitter emitter, String runId, Collection<String> sources, Collection<String> sinks) {
    this.emitter = emitter;
    this.runId = runId;
    this.sources = sorted(sources);
    this.sinks = new TreeSet<>(EpochPlanner.CODE_POINT_ORDER);
    this.sinks.addAll(sinks);
  }

  private static List<String> sorted(Collection<String> names) {
    Set<String> ordered = new TreeSet<>(EpochPlanner.CODE_POINT_ORDER);
    ordered.addAll(names);
    return new ArrayList<>(ordered);
  }

  /** The plan found work: its barrier, inputs and each sink's planned action ({@code stage}, ...), and the instance. */
  public void planned(long barrier, Map<String, Long> inputs, Map<String, String> actions, String instance) {
    Map<String, Long> ordered = new TreeMap<>(EpochPlanner.CODE_POINT_ORDER);
    ordered.putAll(inputs);
    this.plan = new Planned(barrier, ordered, new LinkedHashMap<>(actions), instance);
  }

  /** {@code START}, once, when the planned epoch is carried out; false when it was sent before or the run ended. */
  public boolean start() {
    Planned planned = plan;
    if (planned == null || ended.get() || !started.compareAndSet(false, true)) {
      return false;
    }
    Map<String, Map<String, Object>> sinkFacets = actions(planned.actions, Map.of());
    emitter.send("START", () -> event("START", planned, Map.of(), epochFacet(planned, sinkFacets)));
    return true;
  }

  /** Whether the run sent its end ({@code COMPLETE} or {@code FAIL}). */
  public boolean ended() {
    return ended.get();
  }

  /**
   * {@code COMPLETE}: per sink the result ({@code published}, {@code republished}, {@code watermark}) and the attempt
   * of the snapshots now on main; outputs at {@code snapshots} (the snapshot id now on main).
   */
  public void complete(Map<String, String> results, Map<String, Long> snapshots, Map<String, String> attempts) {
    Planned planned = plan;
    if (planned == null || !ended.compareAndSet(false, true)) {
      return;
    }
    Map<String, Long> outputs = new TreeMap<>();
    results.forEach((sink, action) -> {
      if (action.equals("published") || action.equals("republished") || action.equals("regenerated")
          || action.equals("watermark")) {
        outputs.put(sink, snapshots.get(sink));
      }
    });
    Map<String, Map<String, Object>> sinkFacets = actions(results, attempts);
    emitter.send("COMPLETE", () -> event("COMPLETE", planned, outputs, epochFacet(planned, sinkFacets)));
  }

  /**
   * {@code FAIL} with the error ({@code errorMessage}: {@code <type>: <message>}, {@code java}, the stack trace); a
   * planned epoch not started yet sends its {@code START} first, so a consumer sees one of each.
   */
  public void fail(Throwable error) {
    Planned planned = plan;
    if (planned != null) {
      start();
    }
    if (!ended.compareAndSet(false, true)) {
      return;
    }
    emitter.send("FAIL", () -> {
      Map<String, Object> facets = planned == null ? new TreeMap<>() : epochFacet(planned, actions(planned.actions, Map.of()));
      Map<String, Object> message = EpochEmitter.facet(EpochEmitter.ERROR_MESSAGE_SCHEMA);
      message.put("message", error.getClass().getSimpleName() + ": " + (error.getMessage() == null ? "" : error.getMessage()));
      message.put("programmingLanguage", "java");
      StringWriter trace = new StringWriter();
      error.printStackTrace(new PrintWriter(trace));
      message.put("stackTrace", trace.toString());
      facets.put("errorMessage", message);
      return event("FAIL", planned, Map.of(), facets);
    });
  }

  private static Map<String, Map<String, Object>> actions(Map<String, String> actions, Map<String, String> attempts) {
    Map<String, Map<String, Object>> out = new TreeMap<>(EpochPlanner.CODE_POINT_ORDER);
    actions.forEach((sink, action) -> {
      Map<String, Object> entry = new TreeMap<>();
      entry.put("action", action);
      if (attempts.containsKey(sink)) {
        entry.put("attempt", attempts.get(sink));
      }
      out.put(sink, entry);
    });
    return out;
  }

  /** Our run facet ({@code consistentCatalog_epoch}): barrier, instance, per sink action (and attempt). */
  private static Map<String, Object> epochFacet(Planned planned, Map<String, Map<String, Object>> sinks) {
    Map<String, Object> facet = EpochEmitter.facet(EpochEmitter.EPOCH_FACET_SCHEMA);
    facet.put("barrier", planned.barrier);
    if (planned.instance != null) {
      facet.put("instance", planned.instance);
    }
    facet.put("sinks", sinks);
    Map<String, Object> facets = new TreeMap<>();
    facets.put(EpochEmitter.EPOCH_FACET, facet);
    return facets;
  }

  private Map<String, Object> event(String type, Planned planned, Map<String, Long> outputs, Map<String, Object> facets) {
    Map<String, Object> run = new TreeMap<>();
    run.put("runId", runId);
    Map<String, Object> runFacets = new TreeMap<>(facets);
    runFacets.put("tags", EpochEmitter.tagsFacet());
    run.put("facets", runFacets);
    Map<String, Object> job = new TreeMap<>();
    job.put("namespace", emitter.jobNamespace);
    job.put("name", emitter.job);
    job.put("facets", emitter.jobFacets());
    List<Object> inputs = new ArrayList<>();
    if (planned != null) {
      planned.inputs.forEach((table, version) -> inputs.add(emitter.dataset(table, version, true)));
    } else {
      sources.forEach(table -> inputs.add(emitter.dataset(table, null, true)));
    }
    List<Object> outputList = new ArrayList<>();
    sinks.forEach(table -> outputList.add(emitter.dataset(table, outputs.get(table), false)));
    Map<String, Object> event = new TreeMap<>();
    event.put("eventType", type);
    event.put("eventTime", EpochEmitter.now());
    event.put("producer", EpochEmitter.PRODUCER);
    event.put("schemaURL", EpochEmitter.RUN_EVENT_SCHEMA);
    event.put("run", run);
    event.put("job", job);
    event.put("inputs", inputs);
    event.put("outputs", outputList);
    return event;
  }
}
