package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.EpochPlanner;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.openlineage.EpochEmitter;
import io.consistentcatalog.openlineage.EpochRun;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import org.apache.iceberg.Table;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * This JVM as a writer (protocol §5.9): its instance id, the lease-holder its registrations write, the sinks it
 * registered (unregistered when the JVM shuts down normally; a killed process keeps its lease until it lapses), the
 * fenced committer, and what every write kind does alike: an epoch's OpenLineage run, an ingest's and the warning about sources empty at the barrier. SQL statements ({@code write.EpochWrites}) and
 * streaming queries ({@code streaming.StreamingSinkTable}) share it through the {@link CatalogContext}.
 *
 * <p>The instance id is the JVM's (one per Spark application, shared by all its sessions: a Thrift server's JDBC
 * connections write the same jobs as one writer; statements racing in two sessions are kept apart by the fenced
 * commits, the loser refused).
 */
public final class WriterInstance {
  /** This JVM's instance id: the lease-holder its registrations write (one per Spark application). */
  public static final String INSTANCE = UUID.randomUUID().toString().replace("-", "").substring(0, 12);

  public final String instance = INSTANCE;
  private final CatalogContext context;
  private final FencedCommit committer;
  /** Sink -> job, for the sinks this instance registered (unregistered at shutdown). */
  private final Map<String, String> registered = Collections.synchronizedMap(new TreeMap<>());
  private volatile Thread shutdownHook;
  /** How long unregistering at shutdown waits out catalog faults. */
  private static final long SHUTDOWN_DEADLINE_MS = 5_000L;
  private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(WriterInstance.class);

  WriterInstance(CatalogContext context, FencedCommit committer) {
    this.context = context;
    this.committer = committer;
  }

  public FencedCommit committer() {
    return committer;
  }

  public String catalogName() {
    return context.catalogName();
  }

  /**
   * §6.10's last point: an epoch that stages while a source was empty at its barrier although that source holds data
   * later says so, once, naming the source, its first barrier and the way out (the lagging sources brought forward: a
   * root by advancing its watermark, a derived one by an epoch of its job).
   */
  public void warnEmptySources(String job, String sink, EpochPlanner.Plan plan, Map<String, TableState> sources, boolean streaming) {
    for (Map.Entry<String, Long> input : plan.inputs.entrySet()) {
      if (input.getValue() != null) {
        continue;
      }
      TableState source = sources.get(input.getKey());
      Long first;
      try {
        first = source == null ? null : source.firstBarrier();
      } catch (ConsistentException e) {
        continue;
      }
      if (first == null || first <= plan.barrier) {
        continue;
      }
      List<String> steps = new ArrayList<>();
      for (Map.Entry<String, TableState> other : sources.entrySet()) {
        Long mark;
        try {
          mark = other.getKey().equals(input.getKey()) ? null : other.getValue().watermark();
        } catch (ConsistentException e) {
          mark = null;
        }
        if (mark != null && mark < first) { // a root moves by its watermark, a derived source by its job's epoch
          steps.add(other.getValue().isRoot() ? "consistent-catalog advance-watermark " + other.getKey() + " now"
              : "an epoch of job " + java.util.Objects.requireNonNullElse(other.getValue().owner(), "?") + ", which writes "
                  + other.getKey());
        }
      }
      String line = "[" + context.catalogName() + "] warning: " + job + ": " + sink + " read " + input.getKey()
          + " empty at barrier " + io.consistentcatalog.core.Barriers.format(plan.barrier) + "; its first data is at barrier "
          + io.consistentcatalog.core.Barriers.format(first) + ": its rows reach the sinks at a later epoch"
          + (steps.isEmpty() ? "" : ". If the sources were loaded one after another, bring the lagging source"
              + (steps.size() == 1 ? "" : "s") + " forward (" + String.join("; ", steps) + ") and the job computes them together");
      LOG.warn(line);
      if (!streaming) {
        System.err.println(line);
      }
    }
  }

  /** A new OpenLineage run of an epoch of {@code job} (null: OpenLineage is not configured), as a statement's. */
  public EpochRun lineage(String job, java.util.Collection<String> sources, String sink) {
    return lineage(job, sources, sink, null);
  }

  /** {@link #lineage}, its events carrying the SQL of {@code statement} (null: none, or no text). */
  public EpochRun lineage(String job, java.util.Collection<String> sources, String sink, LogicalPlan statement) {
    return lineage(job, sources, sink, statement, Collections.emptyMap());
  }

  /** {@link #lineage}, the datasets' columns read from {@code loaded} (the tables the epoch planned from) first. */
  public EpochRun lineage(String job, java.util.Collection<String> sources, String sink, LogicalPlan statement,
      Map<String, Table> loaded) {
    EpochEmitter emitter = EpochEmitter.forJob(job, context.plainCatalogName(), context.icebergOptions());
    describe(emitter, statement, loaded);
    return emitter == null ? null : emitter.newRun(sources, Collections.singleton(sink));
  }

  /**
   * The datasets' columns and the statement's SQL (when it has a text) on its OpenLineage events (issue 34); a table
   * the epoch loaded already is not loaded again.
   */
  private void describe(EpochEmitter emitter, LogicalPlan statement, Map<String, Table> loaded) {
    if (emitter != null) {
      emitter.schemaOf(name -> {
        Table table = loaded.get(name);
        return (table != null ? table : committer.load(Names.icebergIdentifier(name))).schema();
      });
      emitter.sql(statement == null ? null : StatementText.of(statement));
    }
  }

  /** The OpenLineage run of an ingest into {@code sink} (sent only when OpenLineage is configured when it lands). */
  public IngestLineage ingestLineage(String sink, Table table, String sql) {
    return new IngestLineage(context.plainCatalogName(), context.icebergOptions(), sink, table, sql);
  }

  /** A sink this instance registered (a streaming epoch job's): unregistered when the JVM shuts down normally. */
  public void registered(String sink, String job) {
    registered.put(sink, job);
    unregisterAtShutdown();
  }

  /** A sink this instance released itself (its streaming query ended): nothing left to do at shutdown. */
  public void released(String sink) {
    registered.remove(sink);
  }

  /** Unregister every sink this instance registered (a normal JVM exit); a killed process keeps its lease. */
  private void unregisterAtShutdown() {
    if (shutdownHook != null) {
      return;
    }
    synchronized (this) {
      if (shutdownHook != null) {
        return;
      }
      shutdownHook = new Thread(this::unregisterAll, "consistent-catalog-unregister-" + instance);
      Runtime.getRuntime().addShutdownHook(shutdownHook);
    }
  }

  void unregisterAll() {
    Map<String, String> sinks;
    synchronized (registered) {
      sinks = new TreeMap<>(registered);
      registered.clear();
    }
    FencedCommit quick = committer.withDeadline(SHUTDOWN_DEADLINE_MS);
    for (Map.Entry<String, String> e : sinks.entrySet()) {
      try {
        JobRegistration.unregister(quick, Names.icebergIdentifier(e.getKey()), instance, e.getValue());
      } catch (Exception ex) { // Errors.raise throws Spark's (checked) AnalysisException
        System.err.println("[" + context.catalogName() + "] could not unregister job '" + e.getValue() + "' from "
            + e.getKey() + " (" + FencedCommit.firstLine(ex) + "); its lease lapses by itself");
      }
    }
  }
}
