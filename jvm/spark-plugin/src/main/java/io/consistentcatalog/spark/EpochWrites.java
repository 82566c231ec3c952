package io.consistentcatalog.spark;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.Definitions;
import io.consistentcatalog.core.EpochPlanner;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Resolver;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.openlineage.EpochEmitter;
import io.consistentcatalog.openlineage.EpochRun;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.spark.sql.AnalysisException;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.AppendData;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.MergeIntoTable;
import org.apache.spark.sql.catalyst.plans.logical.OneRowRelation;
import org.apache.spark.sql.catalyst.plans.logical.Range;
import org.apache.spark.sql.catalyst.plans.logical.V2WriteCommand;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import scala.collection.JavaConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * Writes through the consistent catalog (protocol §5.9), as analysed: which epoch or ingest a write
 * statement is. Called by {@link WriteRule} once Spark has resolved a write command whose target is a table
 * of this catalog; returns the command rewritten so that Spark carries the epoch out ({@link EpochSinkTable}).
 *
 * <ul>
 *   <li>a derived sink (or an empty table while {@code spark.sql.consistent.job} is set): the statement's
 *       sources are the tables of this catalog it reads; registration ({@link JobRegistration}) when this
 *       instance does not hold the sink with those sources yet; the plan of §5.1 ({@link EpochPlanner});
 *       the source reads replaced by the plan's inputs, or the query by no rows when the action runs none;
 *   <li>a root: an ingest (§5.6), skipped when its idempotency key already landed.
 * </ul>
 *
 * <p>With OpenLineage configured, an epoch with work gets its run ({@link EpochEmitter}, protocol §5.8), which
 * {@link SqlEpoch} reports; a plan that fails after the registration sends its {@code FAIL} from here (as
 * {@code EpochJob.run_epoch} does when {@code plan} raises). A registration that fails sends nothing, as Python's
 * {@code register} does not.
 *
 * <p>The instance id is the JVM's (one per Spark application, shared by all its sessions: a Thrift server's JDBC
 * connections write the same jobs as one writer; statements racing in two sessions are kept apart by the fenced
 * commits, the loser refused); the sinks registered are unregistered when the JVM shuts down normally.
 */
final class EpochWrites {
  private final ConsistentSparkCatalog catalog;
  private final FencedCommit committer;
  /** This JVM's instance id: the lease-holder its registrations write (one per Spark application). */
  static final String INSTANCE = UUID.randomUUID().toString().replace("-", "").substring(0, 12);

  final String instance = INSTANCE;
  /** Sink -> job, for the sinks this instance registered (unregistered at shutdown). */
  private final Map<String, String> registered = Collections.synchronizedMap(new TreeMap<>());
  private volatile Thread shutdownHook;
  /** How long unregistering at shutdown waits out catalog faults. */
  private static final long SHUTDOWN_DEADLINE_MS = 5_000L;

  EpochWrites(ConsistentSparkCatalog catalog, FencedCommit committer) {
    this.catalog = catalog;
    this.committer = committer;
  }

  FencedCommit committer() {
    return committer;
  }

  // --- analysis ---------------------------------------------------------------------------------------

  /** The write command rewritten into an epoch or an ingest of its sink. */
  LogicalPlan plan(V2WriteCommand write, DataSourceV2Relation target, SparkSession spark) {
    Identifier ident = target.identifier().get();
    String sink = Names.tableName(ident);
    Settings.Writes settings = Settings.Writes.read(spark);
    TableIdentifier sinkIdent = Names.icebergIdentifier(sink);
    String text = WriteStatements.takeText(catalog.catalogName(), sink);
    Table table = committer.load(sinkIdent);
    TableState state = state(sink, table);
    if (!state.isRoot() || settings.job != null) {
      return derived(write, target, sink, sinkIdent, table, state, settings, definition(settings, text, write.query()));
    }
    return ingest(write, target, sink, sinkIdent, table, state, settings);
  }

  static TableState state(String name, Table table) {
    return TableState.fromMetadata(name, FencedCommit.metadata(table));
  }

  private RuntimeException refused(String sink, String problem) {
    return Errors.raise(Errors.analysis("CONSISTENT_WRITE.REFUSED", catalog.catalogName() + "." + sink + ": " + problem));
  }

  private RuntimeException failed(ConsistentException e) {
    return Errors.raise(Errors.analysis(Errors.errorClass(e.kind()), e.getMessage()));
  }

  private LogicalPlan derived(
      V2WriteCommand write, DataSourceV2Relation target, String sink, TableIdentifier sinkIdent, Table table,
      TableState state, Settings.Writes settings, String definition) {
    Planned planned = planDerived(write.query(), sink, sinkIdent, table, state, settings, definition);
    return (LogicalPlan) write.withNewTable(withTable(target, new EpochSinkTable(planned.table, planned.epoch)))
        .withNewQuery(planned.query);
  }

  /** An epoch as planned: what Spark writes and the query it runs (the sources at the plan's inputs, or no rows). */
  private static final class Planned {
    final SqlEpoch epoch;
    final Table table;
    final LogicalPlan query;

    Planned(SqlEpoch epoch, Table table, LogicalPlan query) {
      this.epoch = epoch;
      this.table = table;
      this.query = query;
    }
  }

  /**
   * The statement's definition fingerprint (§6.10): the declared version ({@code spark.sql.consistent.version}),
   * else its SQL text, else (a DataFrame write) its analysed query ({@link PlanFingerprint}).
   */
  private String definition(Settings.Writes settings, String text, LogicalPlan query) {
    if (settings.version != null) {
      return Definitions.fingerprint(Definitions.VERSION, settings.version);
    }
    if (text != null) {
      return Definitions.sql(text);
    }
    return PlanFingerprint.of(query);
  }

  private Planned planDerived(
      LogicalPlan reads, String sink, TableIdentifier sinkIdent, Table table, TableState state, Settings.Writes settings,
      String definition) {
    if (settings.job == null) {
      String owner = state.job();
      throw refused(sink, "it is derived from " + String.join(", ", state.sources()) + (owner == null ? "" : " (job '"
          + owner + "')") + "; a write to it is an epoch of its job — SET " + Settings.PREFIX + Settings.JOB + "="
          + (owner == null ? "<job>" : owner) + " first");
    }
    String job = settings.job;
    Map<String, LogicalPlan> found = new TreeMap<>();
    collectSources(reads, sink, found);
    Set<String> sources = found.keySet();
    if (sources.isEmpty()) {
      throw refused(sink, "the statement reads no table of " + catalog.catalogName() + "; an epoch of job '" + job
          + "' computes its sink from its sources — read them through " + catalog.catalogName());
    }
    if (sources.contains(sink)) {
      throw failed(new ConsistentException(ErrorKind.CYCLE, "job '" + job + "' would read and write " + sink
          + ": a table cannot be its own source; write to a new table instead"));
    }
    try {
      boolean holds = job.equals(state.job()) && instance.equals(state.leaseHolder())
          && new TreeSet<>(state.sources()).equals(new TreeSet<>(sources));
      if (!holds) {
        Map<String, TableState> all = catalog.cutSession().catalogStates(sink);
        TableMetadata committed = JobRegistration.register(committer, sinkIdent, sink, table, job, sources, instance,
            settings.takeover, settings.leaseMs, all == null ? Collections.emptyMap() : all, catalog.catalogName(), false);
        registered.put(sink, job);
        unregisterAtShutdown();
        table = committer.load(sinkIdent);
        state = TableState.fromMetadata(sink, committed);
      }
    } catch (ConsistentException e) {
      throw failed(e);
    }
    EpochEmitter emitter = EpochEmitter.forJob(job, catalog.plainCatalogName(), catalog.icebergOptions());
    describe(emitter, reads);
    EpochRun lineage = emitter == null ? null : emitter.newRun(sources, Collections.singleton(sink));
    try {
      if (!job.equals(state.job()) || !instance.equals(state.leaseHolder())) {
        throw new ConsistentException(ErrorKind.FENCED, sink, sink + " is now written by job '" + state.job()
            + "' instance " + state.leaseHolder() + ", not by this application's instance (" + instance + ") of '" + job
            + "': its lease was taken over; this application's writes to it are refused");
      }
      Map<String, Table> loaded = new HashMap<>();
      Map<String, TableState> closure = Resolver.upstreamStates(new ArrayList<>(sources), name -> {
        try {
          Table source = committer.load(Names.icebergIdentifier(name));
          loaded.put(name, source);
          return state(name, source);
        } catch (NoSuchTableException e) {
          return null;
        }
      }, true);
      long now = System.currentTimeMillis();
      for (String name : new ArrayList<>(closure.keySet())) { // idle sources keep the DAG moving (protocol §5.6)
        Table advanced = JobRegistration.advanceIdleRoot(committer, Names.icebergIdentifier(name), name, loaded.get(name), now);
        if (advanced != null) {
          loaded.put(name, advanced);
          closure.put(name, state(name, advanced));
        }
      }
      Map<String, TableState> sourceStates = new TreeMap<>();
      for (String source : sources) {
        sourceStates.put(source, closure.get(source));
      }
      EpochPlanner.Plan plan = EpochPlanner.plan(job, sourceStates, Collections.singletonMap(sink, state), closure,
          definition, settings.rebuild);
      String revised = null;
      if (plan.barrier != null && plan.sinks.get(sink).action == EpochPlanner.Action.REVISE) {
        revised = plan.sinks.get(sink).change.describe();
        revise(job, sink, plan.barrier, revised, false);
        table = committer.load(sinkIdent);
        state = state(sink, table);
        plan = EpochPlanner.plan(job, sourceStates, Collections.singletonMap(sink, state), closure, definition, false);
      }
      EpochPlanner.Action action = plan.sinks.get(sink).action;
      if (action == EpochPlanner.Action.STAGE) {
        warnEmptySources(job, sink, plan, sourceStates, false);
      }
      boolean work = plan.barrier != null && action != EpochPlanner.Action.DONE; // nothing to do: no run, no event
      if (lineage != null && work) {
        Map<String, String> planned = new LinkedHashMap<>();
        planned.put(sink, action.protocolName);
        lineage.planned(plan.barrier, plan.inputs, planned, instance);
      }
      SqlEpoch epoch = SqlEpoch.derived(this, sink, sinkIdent, table, settings, plan, work ? lineage : null);
      epoch.revised(revised);
      return new Planned(epoch, table, epoch.runsQuery() ? pinned(reads, plan, loaded) : noRows(reads));
    } catch (ConsistentException e) {
      AnalysisException refused = Errors.analysis(Errors.errorClass(e.kind()), e.getMessage());
      if (lineage != null) {
        lineage.fail(refused);
      }
      throw Errors.raise(refused);
    } catch (RuntimeException e) {
      if (lineage != null) {
        lineage.fail(e);
      }
      throw e;
    }
  }

  /**
   * {@code MERGE INTO} a derived sink (by keys): an epoch whose staged write is Iceberg's row-level merge into the
   * previous epoch's output on {@code consistent-staged}; its source (the USING clause) is read at the plan.
   */
  LogicalPlan planMerge(MergeIntoTable merge, DataSourceV2Relation target, SparkSession spark) {
    String sink = Names.tableName(target.identifier().get());
    Settings.Writes settings = Settings.Writes.read(spark);
    String text = WriteStatements.takeText(catalog.catalogName(), sink);
    TableIdentifier sinkIdent = Names.icebergIdentifier(sink);
    Table table = committer.load(sinkIdent);
    TableState state = state(sink, table);
    if (state.isRoot() && settings.job == null) {
      throw refused(sink, "it is a root: an ingest appends rows (INSERT INTO, DataFrame append()); MERGE INTO would "
          + "change barriers already complete — MERGE INTO is an epoch of a job's derived table (SET "
          + Settings.PREFIX + Settings.JOB + "=<job>)");
    }
    Planned planned = planDerived(merge.sourceTable(), sink, sinkIdent, table, state, settings,
        definition(settings, text, merge));
    EpochMergeTable sinkTable = planned.epoch.runsQuery()
        ? new EpochMergeTable(planned.epoch.writeTable(), planned.epoch.writeBranch(), planned.epoch)
        : new EpochMergeTable(planned.table, null, planned.epoch);
    LogicalPlan newTarget = merge.targetTable().transformDown(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
      @Override
      public boolean isDefinedAt(LogicalPlan node) {
        return node == target;
      }

      @Override
      public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 node, scala.Function1<A1, B1> fallback) {
        if (node != target) {
          return fallback.apply(node);
        }
        @SuppressWarnings("unchecked")
        B1 out = (B1) withTable(target, sinkTable);
        return out;
      }
    });
    List<LogicalPlan> children = new ArrayList<>();
    children.add(newTarget);
    children.add(planned.query);
    return merge.withNewChildren(JavaConverters.asScalaBuffer(children).toSeq());
  }

  private LogicalPlan ingest(
      V2WriteCommand write, DataSourceV2Relation target, String sink, TableIdentifier sinkIdent, Table table,
      TableState state, Settings.Writes settings) {
    if (!(write instanceof AppendData)) {
      throw refused(sink, "it is a root: an ingest appends rows (INSERT INTO, DataFrame append()); overwriting a root "
          + "would change barriers already complete — to compute it from other tables, make it a job's sink (SET "
          + Settings.PREFIX + Settings.JOB + "=<job>) in a new table");
    }
    EventTime eventTime = settings.eventTimeColumn == null ? null : EventTime.of(table, sink, settings.eventTimeColumn);
    SqlEpoch epoch = SqlEpoch.ingest(this, sink, sinkIdent, table, state, settings.ingestKey, eventTime);
    epoch.sqlText = StatementText.of((LogicalPlan) write); // its OpenLineage run's sql facet
    LogicalPlan query = epoch.runsQuery() ? write.query() : noRows(write.query());
    return (LogicalPlan) write.withNewTable(withTable(target, new EpochSinkTable(table, epoch))).withNewQuery(query);
  }

  private static DataSourceV2Relation withTable(DataSourceV2Relation relation, org.apache.spark.sql.connector.catalog.Table table) {
    return LineSpark.withTable(relation, table);
  }

  /** The write's query with no rows (the action writes nothing): the same output, never run against a source. */
  private static LogicalPlan noRows(LogicalPlan query) {
    return LocalRelation$.MODULE$.apply(query.output()); // no rows, not streaming: the same on every Spark line
  }

  /**
   * Every table the statement reads, by name (the plan as Spark resolved it, subqueries included); anything
   * read from elsewhere is refused: a derived table is a function of its sources.
   */
  private void collectSources(LogicalPlan plan, String sink, Map<String, LogicalPlan> out) {
    if (plan instanceof DataSourceV2Relation) {
      DataSourceV2Relation relation = (DataSourceV2Relation) plan;
      String name = sourceName(relation);
      if (name == null) {
        throw refused(sink, "the statement reads " + relation.name() + ", which is not a table of "
            + catalog.catalogName() + " at its cut (another catalog, a branch, tag or version, a metadata table); an "
            + "epoch reads its sources at its plan — read them through " + catalog.catalogName() + " by their names");
      }
      out.put(name, plan);
      return;
    }
    if (plan.children().isEmpty() && !(plan instanceof LocalRelation || plan instanceof OneRowRelation
        || plan instanceof Range)) {
      throw refused(sink, "the statement reads " + plan.nodeName() + " (" + firstLine(plan.simpleStringWithNodeId())
          + "), not a table of " + catalog.catalogName() + "; an epoch computes its sink only from tables of "
          + catalog.catalogName() + " (and constants)");
    }
    for (LogicalPlan child : JavaConverters.seqAsJavaList(plan.children())) {
      collectSources(child, sink, out);
    }
    for (LogicalPlan subquery : JavaConverters.seqAsJavaList(plan.subqueries())) {
      collectSources(subquery, sink, out);
    }
  }

  private static String firstLine(String text) {
    return text.split("\\R", 2)[0];
  }

  /** The name of a table of this catalog served at the statement's cut; null for anything else. */
  private String sourceName(DataSourceV2Relation relation) {
    if (relation.catalog().isEmpty() || relation.catalog().get() != catalog || relation.identifier().isEmpty()) {
      return null;
    }
    org.apache.spark.sql.connector.catalog.Table table = relation.table();
    if (table instanceof PinnedTable && ((PinnedTable) table).atCut) {
      return ((PinnedTable) table).tableName();
    }
    if (table instanceof EmptyTable) {
      return ((EmptyTable) table).tableName();
    }
    return null;
  }

  /** The query with every source read at the plan's input ({@code snap(source, T)}; empty at T when null). */
  private LogicalPlan pinned(LogicalPlan query, EpochPlanner.Plan plan, Map<String, Table> loaded) {
    return query.transformUpWithSubqueries(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
      @Override
      public boolean isDefinedAt(LogicalPlan node) {
        return node instanceof DataSourceV2Relation && sourceName((DataSourceV2Relation) node) != null;
      }

      @Override
      public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 node, scala.Function1<A1, B1> fallback) {
        if (!isDefinedAt(node)) {
          return fallback.apply(node);
        }
        DataSourceV2Relation relation = (DataSourceV2Relation) node;
        String name = sourceName(relation);
        Table source = loaded.get(name);
        Long input = plan.inputs.get(name);
        org.apache.spark.sql.connector.catalog.Table served = input == null
            ? new EmptyTable(source, catalog.catalogName(), catalog.plainCatalogName(), name)
            : new PinnedTable(source, input, catalog.catalogName(), catalog.plainCatalogName(), name, true);
        @SuppressWarnings("unchecked")
        B1 out = (B1) withTable(relation, served);
        return out;
      }
    });
  }

  /**
   * §6.10: revise {@code sink} and every table downstream of it in §8's full mode (their jobs rebuild them), before the
   * epoch of {@code barrier} recomputes it.
   */
  void revise(String job, String sink, long barrier, String why, boolean streaming) {
    Map<String, TableState> all = catalog.cutSession().catalogStates(sink);
    Map<String, TableState> states = all == null ? new HashMap<>() : new HashMap<>(all);
    List<String> emptied = Revisions.reviseFull(committer, sink, states, barrier);
    List<String> downstream = new ArrayList<>(emptied);
    downstream.remove(sink);
    // said now, not only with the epoch's line: a statement that fails from here on leaves the tables emptied
    String line = "[" + catalog.catalogName() + "] " + job + ": " + sink + " " + why + ": revised"
        + (downstream.isEmpty() ? "" : " with " + String.join(", ", downstream) + " downstream (emptied: their jobs "
            + "rebuild them)") + "; recomputing it at barrier " + io.consistentcatalog.core.Barriers.format(barrier);
    LOG.info(line);
    if (!streaming) {
      System.err.println(line);
    }
  }

  /**
   * §6.10's last point: an epoch that stages while a source was empty at its barrier although that source holds data
   * later says so, once, naming the source, its first barrier and the way out (the lagging sources advanced).
   */
  void warnEmptySources(String job, String sink, EpochPlanner.Plan plan, Map<String, TableState> sources, boolean streaming) {
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
      List<String> lagging = new ArrayList<>();
      for (Map.Entry<String, TableState> other : sources.entrySet()) {
        Long mark;
        try {
          mark = other.getKey().equals(input.getKey()) ? null : other.getValue().watermark();
        } catch (ConsistentException e) {
          mark = null;
        }
        if (mark != null && mark < first) {
          lagging.add(other.getKey());
        }
      }
      String advance = lagging.isEmpty() ? "consistent-catalog advance-watermark " + input.getKey() + " now"
          : "consistent-catalog advance-watermark " + String.join(" now; consistent-catalog advance-watermark ", lagging)
              + " now";
      String line = "[" + catalog.catalogName() + "] warning: " + job + ": " + sink + " read " + input.getKey()
          + " empty at barrier " + io.consistentcatalog.core.Barriers.format(plan.barrier) + "; its first data is at barrier "
          + io.consistentcatalog.core.Barriers.format(first) + ". The epoch is complete, but its sources were loaded "
          + "one after another — advance the lagging source" + (lagging.size() == 1 ? "" : "s") + " (" + advance
          + ") so that the job computes them together";
      LOG.warn(line);
      if (!streaming) {
        System.err.println(line);
      }
    }
  }

  private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(EpochWrites.class);

  /** A new OpenLineage run of an epoch of {@code job} (null: OpenLineage is not configured), as a statement's. */
  EpochRun lineage(String job, java.util.Collection<String> sources, String sink) {
    EpochEmitter emitter = EpochEmitter.forJob(job, catalog.plainCatalogName(), catalog.icebergOptions());
    describe(emitter, null);
    return emitter == null ? null : emitter.newRun(sources, Collections.singleton(sink));
  }

  /** The datasets' columns and the statement's SQL (when it has a text) on its OpenLineage events (issue 34). */
  private void describe(EpochEmitter emitter, LogicalPlan statement) {
    if (emitter != null) {
      emitter.schemaOf(name -> committer.load(Names.icebergIdentifier(name)).schema());
      emitter.sql(statement == null ? null : StatementText.of(statement));
    }
  }

  /** The OpenLineage run of an ingest into {@code sink} (sent only when OpenLineage is configured when it lands). */
  IngestLineage ingestLineage(String sink, Table table, String sql) {
    return new IngestLineage(catalog.plainCatalogName(), catalog.icebergOptions(), sink, table, sql);
  }

  // --- instances ------------------------------------------------------------------------------------

  /** A sink this instance registered (a streaming epoch job's): unregistered when the JVM shuts down normally. */
  void registered(String sink, String job) {
    registered.put(sink, job);
    unregisterAtShutdown();
  }

  /** A sink this instance released itself (its streaming query ended): nothing left to do at shutdown. */
  void released(String sink) {
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
        System.err.println("[" + catalog.catalogName() + "] could not unregister job '" + e.getValue() + "' from "
            + e.getKey() + " (" + FencedCommit.firstLine(ex) + "); its lease lapses by itself");
      }
    }
  }

  String catalogName() {
    return catalog.catalogName();
  }
}
