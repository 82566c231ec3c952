package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.EpochPlanner;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Resolver;
import io.consistentcatalog.core.TableState;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.exceptions.NoSuchTableException;

/**
 * The one epoch planner of the JVM (protocol §5.1): what every epoch of a job into its derived sink runs before it
 * writes, as Python's {@code EpochJob.plan} serves batch, Spark and streaming jobs. SQL and DataFrame statements and
 * {@code MERGE INTO} ({@code write.EpochWrites}), streaming micro-batches ({@code streaming.StreamingEpoch}) all call
 * {@link #plan}; the caller then carries the plan out with its {@link EpochCommit} ({@link Planned#statement},
 * {@link Planned#microBatch}).
 *
 * <p>Given the job, the sink as registered, its sources, the definition, an optional barrier and what the statement
 * already loaded ({@link StatementLoads}: the statement's cut resolution, or the stream group's plan of the
 * micro-batch), it checks that this instance holds the sink's lease, takes the sources' closure from those loads
 * (loading only a table they lack), advances idle roots when asked (a statement does; a stream group advanced them
 * when it chose the batch's barrier, through the same {@link #closure}), and plans: at the newest complete barrier, or at {@code barrier}. Nothing is
 * loaded that the loads hold: the commits' requirements, not these copies, decide whether the epoch lands.
 */
public final class EpochPlanning {
  private EpochPlanning() {}

  /** What to plan: the job's epoch into {@code sink} from {@code sources}. */
  public static final class Request {
    final String job;
    final String sink;
    final Set<String> sources;
    final String definition;
    final Long barrier;
    final boolean rebuild;
    final boolean streaming;

    private Request(String job, String sink, Set<String> sources, String definition, Long barrier, boolean rebuild,
        boolean streaming) {
      this.job = job;
      this.sink = sink;
      this.sources = sources;
      this.definition = definition;
      this.barrier = barrier;
      this.rebuild = rebuild;
      this.streaming = streaming;
    }

    /** A statement's epoch: at the newest barrier at which every source is complete, idle roots advanced first. */
    public static Request statement(String job, String sink, Set<String> sources, String definition, boolean rebuild) {
      return new Request(job, sink, sources, definition, null, rebuild, false);
    }

    /**
     * A micro-batch's epoch: at the barrier its sources' offsets end at (the stream group chose it; null: its sources
     * have none yet, and the plan is that there is nothing to do).
     */
    public static Request microBatch(String job, String sink, Set<String> sources, String definition, Long barrier) {
      return new Request(job, sink, sources, definition, barrier, false, true);
    }
  }

  /** An epoch as planned: the plan, the sink it was planned on, and the sources' closure as loaded. */
  public static final class Planned {
    public final EpochPlanner.Plan plan;
    public final EpochPlanner.SinkPlan sinkPlan;
    /** The sink as loaded and the metadata its state was read from (the epoch's commits build on it). */
    public final Table sinkTable;
    public final TableMetadata sinkMetadata;
    /** The sources and their upstream tables: states, and the tables as loaded (the inputs are read from these). */
    public final Map<String, TableState> closure;
    public final Map<String, Table> tables;
    /** The sources' states, by name. */
    public final Map<String, TableState> sources;
    private final Request request;

    private Planned(Request request, EpochPlanner.Plan plan, Table sinkTable, TableMetadata sinkMetadata,
        Map<String, TableState> closure, Map<String, Table> tables, Map<String, TableState> sources) {
      this.request = request;
      this.plan = plan;
      this.sinkPlan = plan.sinks.get(request.sink);
      this.sinkTable = sinkTable;
      this.sinkMetadata = sinkMetadata;
      this.closure = closure;
      this.tables = tables;
      this.sources = sources;
    }

    /** The tables the epoch planned from, by name: the closure's and the sink's ({@code sink}). */
    public Map<String, Table> loaded(String sink) {
      Map<String, Table> all = new HashMap<>(tables);
      all.put(sink, sinkTable);
      return all;
    }

    /** Whether the epoch has work (a barrier, and an action other than done): a run, an event. */
    public boolean hasWork() {
      return plan.barrier != null && sinkPlan.action != EpochPlanner.Action.DONE;
    }

    /** The warning for each source still empty at the plan's inputs, when the epoch computes its sink. */
    public void warnEmptySources(WriterInstance writer) {
      writer.warnEmptySources(request.job, request.sink, plan, sources, request.streaming);
    }
  }

  /**
   * Plans the epoch of {@code request} on {@code sink} as registered ({@code sinkMetadata}: its metadata then),
   * the closure taken from {@code loads} (null: none; each table then loaded once). Raises {@code FENCED} when this
   * instance does not hold the sink's lease.
   */
  public static Planned plan(
      WriterInstance writer, Request request, Table sink, TableMetadata sinkMetadata, StatementLoads loads) {
    String name = request.sink;
    TableState state = TableState.fromMetadata(name, sinkMetadata);
    if (!request.job.equals(state.job()) || !writer.instance.equals(state.leaseHolder())) {
      throw new ConsistentException(ErrorKind.FENCED, name, name + " is now written by job '" + state.job()
          + "' instance " + state.leaseHolder() + ", not by this application's instance (" + writer.instance + ") of '"
          + request.job + "': its lease was taken over; " + (request.streaming
              ? "stop this query (restarting it from its checkpoint takes over again)"
              : "this application's writes to it are refused"));
    }
    // idle sources keep the DAG moving (protocol §5.6); a stream group advanced them when it chose the barrier
    StatementLoads loaded = closure(writer.committer(), request.sources, loads, !request.streaming);
    Map<String, TableState> closure = loaded.states();
    Map<String, TableState> sources = new TreeMap<>();
    for (String source : request.sources) {
      sources.put(source, closure.get(source));
    }
    Map<String, TableState> sinks = Collections.singletonMap(name, state);
    EpochPlanner.Plan plan = !request.streaming
        ? EpochPlanner.plan(request.job, sources, sinks, closure, request.definition, request.rebuild)
        : EpochPlanner.planAt(request.job, request.barrier, sources, sinks, request.definition, request.rebuild);
    return new Planned(request, plan, sink, sinkMetadata, closure, loaded.tables(), sources);
  }

  /**
   * {@code sources} and every table upstream of them (§5.1's closure), states and tables: taken from {@code loads}
   * where they hold the table (null: none), else loaded once now; with {@code advanceIdle}, the idle roots among them
   * advanced first (§5.6). What an epoch plans from ({@link #plan}) and what a stream group chooses the barrier of a
   * micro-batch from, once for the query's sources (the batch's epoch then plans from the same loads).
   */
  public static StatementLoads closure(
      FencedCommit committer, Collection<String> sources, StatementLoads loads, boolean advanceIdle) {
    Map<String, Table> tables = new HashMap<>();
    Map<String, TableState> closure = Resolver.upstreamStates(new ArrayList<>(sources), source -> {
      TableState loaded = loads == null ? null : loads.state(source);
      if (loaded != null) {
        tables.put(source, loads.table(source));
        return loaded;
      }
      try {
        Table table = committer.load(Names.icebergIdentifier(source));
        tables.put(source, table);
        return FencedCommit.state(source, table);
      } catch (NoSuchTableException e) {
        return null;
      }
    }, true);
    if (advanceIdle) {
      long now = System.currentTimeMillis();
      for (String table : new ArrayList<>(closure.keySet())) {
        Table advanced = JobRegistration.advanceIdleRoot(committer, Names.icebergIdentifier(table), table,
            tables.get(table), now);
        if (advanced != null) {
          tables.put(table, advanced);
          closure.put(table, FencedCommit.state(table, advanced));
        }
      }
    }
    return new StatementLoads(tables, closure);
  }
}
