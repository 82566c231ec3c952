package io.consistentcatalog.spark.write;

import io.consistentcatalog.spark.context.CatalogContext;
import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.EpochPlanning;
import io.consistentcatalog.spark.context.EventTime;
import io.consistentcatalog.spark.context.StatementLoads;
import io.consistentcatalog.spark.context.FencedCommit;
import io.consistentcatalog.spark.context.JobRegistration;
import io.consistentcatalog.spark.context.Names;
import io.consistentcatalog.spark.context.PlanFingerprint;
import io.consistentcatalog.spark.context.Roles;
import io.consistentcatalog.spark.context.Settings;
import io.consistentcatalog.spark.context.EpochCommit;
import io.consistentcatalog.spark.context.IngestCommit;
import io.consistentcatalog.spark.context.StatementText;
import io.consistentcatalog.spark.context.WriteStatements;
import io.consistentcatalog.spark.context.WriterInstance;
import io.consistentcatalog.spark.context.ServedTables;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.Definitions;
import io.consistentcatalog.core.EpochPlanner;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.openlineage.EpochEmitter;
import io.consistentcatalog.openlineage.EpochRun;
import io.consistentcatalog.spark.line.LineSpark;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.spark.sql.AnalysisException;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.AppendData;
import org.apache.spark.sql.catalyst.plans.logical.CTERelationDef;
import org.apache.spark.sql.catalyst.plans.logical.CTERelationRef;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.MergeIntoTable;
import org.apache.spark.sql.catalyst.plans.logical.OneRowRelation;
import org.apache.spark.sql.catalyst.plans.logical.Range;
import org.apache.spark.sql.catalyst.plans.logical.V2WriteCommand;
import org.apache.spark.sql.catalyst.plans.logical.WithCTE;
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
 *   <li>a root: an ingest (§5.6), skipped when its idempotency key already landed; refused when it reads tables of
 *       this catalog, unless {@code spark.sql.consistent.ingestFromLake} says so (a forgotten job would make a table
 *       computed from others a root without lineage, issue 42).
 * </ul>
 *
 * <p>Refusals start with the sink's role as the catalog sees it ({@link Roles#describe}), then the way out that fits.
 *
 * <p>With OpenLineage configured, an epoch with work gets its run ({@link EpochEmitter}, protocol §5.8), which
 * {@link EpochCommit} reports; a plan that fails after the registration sends its {@code FAIL} from here (as
 * {@code EpochJob.run_epoch} does when {@code plan} raises). A registration that fails sends nothing, as Python's
 * {@code register} does not.
 *
 * <p>Built from the catalog's {@link CatalogContext}, never the catalog: the writer ({@link WriterInstance}: the
 * instance id, its registrations, the fenced committer) and the tables served at a cut ({@link ServedTables}).
 */
public final class EpochWrites {
  private final CatalogContext context;
  private final WriterInstance writer;
  private final FencedCommit committer;
  private final String instance;

  public EpochWrites(CatalogContext context) {
    this.context = context;
    this.writer = context.writer();
    this.committer = writer.committer();
    this.instance = writer.instance;
  }

  // --- analysis ---------------------------------------------------------------------------------------

  /** The write command rewritten into an epoch or an ingest of its sink. */
  public LogicalPlan plan(V2WriteCommand write, DataSourceV2Relation target, SparkSession spark) {
    Identifier ident = target.identifier().get();
    String sink = Names.tableName(ident);
    Settings.Writes settings = Settings.Writes.read(spark);
    checkWriteOptions(write);
    TableIdentifier sinkIdent = Names.icebergIdentifier(sink);
    String text = WriteStatements.takeText(context.catalogName(), sink);
    StatementLoads loads = statementLoads(text, sink);
    Table table = sinkTable(loads, sink, sinkIdent);
    TableState state = loads != null ? loads.state(sink) : state(sink, table);
    if (!state.isRoot() || settings.job != null) {
      if (state.isRoot() && !Roles.readsTables(write.query())) {
        throw leftoverJob(sink, state, settings.job);
      }
      return derived(write, target, sink, sinkIdent, table, state, loads, settings,
          definition(settings, text, write.query()));
    }
    return ingest(write, target, sink, sinkIdent, table, state, settings);
  }

  /**
   * What the SQL statement's cut resolution loaded ({@code text}: the statement's, null for a DataFrame write, whose
   * planning began when the DataFrame was analysed, maybe long before: its tables are loaded now); null when none.
   */
  private StatementLoads statementLoads(String text, String sink) {
    return text == null ? null : context.states().statementLoads(sink);
  }

  /**
   * The sink as the statement loaded it when it resolved its cut ({@link StatementLoads}: loaded once per statement),
   * else loaded now (a statement that resolved no cut of the sink, or a cut held across statements).
   */
  private Table sinkTable(StatementLoads loads, String sink, TableIdentifier sinkIdent) {
    Table loaded = loads == null ? null : loads.table(sink);
    return loaded != null ? loaded : committer.load(sinkIdent);
  }

  /**
   * A batch write takes the session's settings, not options: a {@code consistent.*} write option (a streaming query's
   * option given to a batch write, or a typo) would be ignored, so it is refused naming the setting it is nearest to.
   */
  private static void checkWriteOptions(V2WriteCommand write) {
    scala.collection.Map<String, String> options = null;
    if (write instanceof AppendData) {
      options = ((AppendData) write).writeOptions();
    } else if (write instanceof org.apache.spark.sql.catalyst.plans.logical.OverwriteByExpression) {
      options = ((org.apache.spark.sql.catalyst.plans.logical.OverwriteByExpression) write).writeOptions();
    } else if (write instanceof org.apache.spark.sql.catalyst.plans.logical.OverwritePartitionsDynamic) {
      options = ((org.apache.spark.sql.catalyst.plans.logical.OverwritePartitionsDynamic) write).writeOptions();
    }
    if (options == null) {
      return;
    }
    for (String key : JavaConverters.mapAsJavaMap(options).keySet()) {
      if (key.toLowerCase(java.util.Locale.ROOT).startsWith("consistent.")) {
        String setting = Settings.nearest(key.substring("consistent.".length()));
        throw Errors.raise(Errors.analysis("CONSISTENT_WRITE.INVALID_OPTION", "option " + key + " is not an option of a "
            + "batch write through the consistent catalog: a batch write takes session settings" + (setting == null
            ? " (SET " + Settings.PREFIX + "...)" : "; did you mean SET " + Settings.PREFIX + setting + "=...?")));
      }
    }
  }

  private static TableState state(String name, Table table) {
    return FencedCommit.state(name, table);
  }

  private RuntimeException refused(String sink, String problem) {
    return Errors.raise(Errors.analysis("CONSISTENT_WRITE.REFUSED", context.catalogName() + "." + sink + ": " + problem));
  }

  /** A refusal that starts with the sink's role as the catalog sees it ({@link Roles#describe}). */
  private RuntimeException refusedAs(String sink, TableState state, String problem) {
    return Errors.raise(Errors.analysis("CONSISTENT_WRITE.REFUSED", Roles.describe(context.catalogName(), sink, state)
        + problem));
  }

  /**
   * {@code spark.sql.consistent.job} set (often left from an earlier statement) and a write into a root or new table
   * that reads no table of the catalog: an epoch would have no sources; the statement is an ingest once the job is
   * reset.
   */
  private RuntimeException leftoverJob(String sink, TableState state, String job) {
    return refusedAs(sink, state, Roles.isNew(state)
        ? " and the statement reads no table of " + context.catalogName() + ", while " + Settings.PREFIX + Settings.JOB
            + "=" + job + " makes it an epoch of that job, computed from its sources — RESET " + Settings.PREFIX
            + Settings.JOB + " to ingest into it as a root"
        : ": RESET " + Settings.PREFIX + Settings.JOB + " to ingest into it (" + Settings.PREFIX + Settings.JOB + "="
            + job + " is still set, e.g. from an earlier statement)");
  }

  private RuntimeException failed(ConsistentException e) {
    return Errors.raise(Errors.analysis(Errors.errorClass(e.kind()), e.getMessage()));
  }

  private LogicalPlan derived(
      V2WriteCommand write, DataSourceV2Relation target, String sink, TableIdentifier sinkIdent, Table table,
      TableState state, StatementLoads loads, Settings.Writes settings, String definition) {
    Planned planned = planDerived(write.query(), sink, sinkIdent, table, state, loads, settings, definition);
    return (LogicalPlan) write.withNewTable(withTable(target, new EpochSinkTable(planned.table, planned.epoch)))
        .withNewQuery(planned.query);
  }

  /** An epoch as planned: what Spark writes and the query it runs (the sources at the plan's inputs, or no rows). */
  private static final class Planned {
    final EpochCommit epoch;
    final Table table;
    final LogicalPlan query;

    Planned(EpochCommit epoch, Table table, LogicalPlan query) {
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
      LogicalPlan reads, String sink, TableIdentifier sinkIdent, Table table, TableState state, StatementLoads loads,
      Settings.Writes settings, String definition) {
    if (settings.job == null) {
      String owner = state.owner();
      throw refusedAs(sink, state, ": a write to it is an epoch of its job — SET " + Settings.PREFIX + Settings.JOB + "="
          + (owner == null ? "<job>" : owner) + " first");
    }
    String job = settings.job;
    Map<String, LogicalPlan> found = new TreeMap<>();
    collectSources(reads, sink, found, new java.util.HashSet<>());
    Set<String> sources = found.keySet();
    if (sources.isEmpty()) {
      throw refused(sink, "the statement reads no table of " + context.catalogName() + "; an epoch of job '" + job
          + "' computes its sink from its sources — read them through " + context.catalogName());
    }
    if (sources.contains(sink)) {
      throw failed(new ConsistentException(ErrorKind.CYCLE, "job '" + job + "' would read and write " + sink
          + ": a table cannot be its own source; write to a new table instead"));
    }
    // the metadata the sink's state was read from (the statement's loads: the table may be refreshed meanwhile)
    TableMetadata metadata = loads != null ? loads.metadata(sink) : FencedCommit.metadata(table);
    try {
      boolean holds = job.equals(state.job()) && instance.equals(state.leaseHolder())
          && new TreeSet<>(state.sources()).equals(new TreeSet<>(sources));
      if (!holds) { // registration: one commit, its cycle check over the statement's loads of every table
        Map<String, TableState> all = loads != null ? loads.states() : context.states().catalogStates(sink);
        metadata = JobRegistration.register(committer, sinkIdent, sink, table, job, sources, instance,
            settings.takeover, settings.leaseMs, all == null ? Collections.emptyMap() : all, context.catalogName(), false);
        writer.registered(sink, job);
      }
    } catch (ConsistentException e) {
      if (e.kind() == ErrorKind.INVALID_INPUT) { // the sink cannot be the job's (a root holding rows): the write is refused
        throw Errors.raise(Errors.analysis("CONSISTENT_WRITE.REFUSED", e.getMessage()));
      }
      throw failed(e);
    }
    Map<String, Table> known = new TreeMap<>(); // the tables the statement loaded: its events' columns
    if (loads != null) {
      for (String name : sources) {
        if (loads.table(name) != null) {
          known.put(name, loads.table(name));
        }
      }
    }
    known.put(sink, table);
    EpochRun lineage = writer.lineage(job, sources, sink, reads, known);
    try {
      EpochPlanning.Planned planned = EpochPlanning.plan(writer,
          EpochPlanning.Request.statement(job, sink, sources, definition, settings.rebuild), table, metadata, loads);
      EpochPlanner.Plan plan = planned.plan;
      EpochPlanner.Action action = planned.sinkPlan.action;
      if (action == EpochPlanner.Action.STAGE || action == EpochPlanner.Action.REGENERATE) {
        planned.warnEmptySources(writer);
      }
      boolean work = planned.hasWork(); // nothing to do: no run, no event
      if (lineage != null && work) {
        Map<String, String> actions = new LinkedHashMap<>();
        actions.put(sink, action.protocolName);
        lineage.planned(plan.barrier, plan.inputs, actions, instance);
      }
      EpochCommit epoch = EpochCommit.statement(writer, sink, sinkIdent, planned, settings, work ? lineage : null);
      if (!epoch.runsQuery()) {
        return new Planned(epoch, table, noRows(reads));
      }
      if (settings.incremental) { // the sources' appends since the sink's last epoch (§5.5)
        Increments increments = Increments.of(context.served(), context.catalogName(), sink, plan, planned.tables,
            planned.closure);
        epoch.reading(increments.description);
        return new Planned(epoch, table, served(reads, increments.tables));
      }
      Map<String, org.apache.spark.sql.connector.catalog.Table> inputs = new TreeMap<>();
      for (Map.Entry<String, Long> input : plan.inputs.entrySet()) {
        inputs.put(input.getKey(), context.served().atInput(planned.tables.get(input.getKey()), input.getValue(),
            input.getKey()));
      }
      return new Planned(epoch, table, served(reads, inputs));
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
  public LogicalPlan planMerge(MergeIntoTable merge, DataSourceV2Relation target, SparkSession spark) {
    String sink = Names.tableName(target.identifier().get());
    Settings.Writes settings = Settings.Writes.read(spark);
    String text = WriteStatements.takeText(context.catalogName(), sink);
    TableIdentifier sinkIdent = Names.icebergIdentifier(sink);
    StatementLoads loads = statementLoads(text, sink);
    Table table = sinkTable(loads, sink, sinkIdent);
    TableState state = loads != null ? loads.state(sink) : state(sink, table);
    if (state.isRoot() && settings.job == null) {
      throw refusedAs(sink, state, ": an ingest appends rows (INSERT INTO, DataFrame append()); MERGE INTO would "
          + "change barriers already complete — MERGE INTO is an epoch of a job's derived table (SET "
          + Settings.PREFIX + Settings.JOB + "=<job>)");
    }
    Planned planned = planDerived(merge.sourceTable(), sink, sinkIdent, table, state, loads, settings,
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
      if (Roles.isNew(state)) {
        throw refusedAs(sink, state, ": an overwrite is an epoch of a job — SET " + Settings.PREFIX + Settings.JOB
            + "=<job> makes this table that job's sink (an ingest into a root appends: INSERT INTO)");
      }
      throw refusedAs(sink, state, ": an ingest appends rows (INSERT INTO, DataFrame append()); overwriting a root "
          + "would change barriers already complete — to compute a table from others, SET " + Settings.PREFIX
          + Settings.JOB + "=<job> and write a new table");
    }
    java.util.TreeSet<String> reads = Roles.lakeReads(write.query(), context.catalogName());
    reads.remove(context.catalogName() + "." + sink); // an ingest that reads its own root (`WHERE id NOT IN (...)`)
    if (!reads.isEmpty() && !settings.ingestFromLake) { // a forgotten job setting (issue 42): never a silent root
      throw refusedAs(sink, state, " and the statement reads " + String.join(", ", reads) + " with no job set: SET "
          + Settings.PREFIX + Settings.JOB + "=<job> " + (Roles.isNew(state) ? "to make it that job's derived table"
          : "and write a new table (a root keeps its ingests)") + ", or SET " + Settings.PREFIX
          + Settings.INGEST_FROM_LAKE + "=true to ingest the rows as a root on purpose");
    }
    EventTime eventTime = settings.eventTimeColumn == null ? null : EventTime.of(table, sink, settings.eventTimeColumn);
    IngestCommit epoch = IngestCommit.statement(writer, sink, sinkIdent, table, state, settings.ingestKey, eventTime,
        StatementText.of((LogicalPlan) write)); // its SQL text: its OpenLineage run's sql facet
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
   * Every table the statement reads, by name (the plan as Spark resolved it, subqueries and common table expressions
   * included); anything read from elsewhere is refused: a derived table is a function of its sources. A reference to
   * a common table expression ({@code WITH c AS (...)}) reads what the expression's definition reads: Spark 4.1 keeps
   * the definitions in the analysed write ({@code WithCTE}) where 3.5 inlines them; a reference is accepted when its
   * definition is part of the statement's query ({@code defined}: the ids met so far), so its tables are sources too.
   */
  private void collectSources(LogicalPlan plan, String sink, Map<String, LogicalPlan> out, Set<Long> defined) {
    if (plan instanceof DataSourceV2Relation) {
      DataSourceV2Relation relation = (DataSourceV2Relation) plan;
      String name = sourceName(relation);
      if (name == null) {
        throw refused(sink, "the statement reads " + relation.name() + ", which is not a table of "
            + context.catalogName() + " at its cut (another catalog, a branch, tag or version, a metadata table); an "
            + "epoch reads its sources at its plan — read them through " + context.catalogName() + " by their names");
      }
      out.put(name, plan);
      return;
    }
    if (plan instanceof WithCTE) {
      for (CTERelationDef definition : JavaConverters.seqAsJavaList(((WithCTE) plan).cteDefs())) {
        defined.add(definition.id());
      }
    }
    if (plan instanceof CTERelationRef && defined.contains(((CTERelationRef) plan).cteId())) {
      return; // its definition's tables are collected where WithCTE holds it
    }
    if (plan.children().isEmpty() && !(plan instanceof LocalRelation || plan instanceof OneRowRelation
        || plan instanceof Range)) {
      throw refused(sink, "the statement reads " + plan.nodeName() + " (" + firstLine(plan.simpleStringWithNodeId())
          + "), not a table of " + context.catalogName() + "; an epoch computes its sink only from tables of "
          + context.catalogName() + " (and constants)");
    }
    for (LogicalPlan child : JavaConverters.seqAsJavaList(plan.children())) {
      collectSources(child, sink, out, defined);
    }
    for (LogicalPlan subquery : JavaConverters.seqAsJavaList(plan.subqueries())) {
      collectSources(subquery, sink, out, defined);
    }
  }

  private static String firstLine(String text) {
    return text.split("\\R", 2)[0];
  }

  /** The name of a table of this catalog served at the statement's cut; null for anything else. */
  private String sourceName(DataSourceV2Relation relation) {
    if (relation.catalog().isEmpty() || !relation.catalog().get().name().equals(context.catalogName()) || relation.identifier().isEmpty()) {
      return null;
    }
    org.apache.spark.sql.connector.catalog.Table table = relation.table();
    return context.served().servedAtCut(table);
  }

  /** The query with every source read as {@code inputs} serve it (at the plan's input, or its increment). */
  private LogicalPlan served(LogicalPlan query, Map<String, org.apache.spark.sql.connector.catalog.Table> inputs) {
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
        org.apache.spark.sql.connector.catalog.Table served = inputs.get(name);
        @SuppressWarnings("unchecked")
        B1 out = (B1) withTable(relation, served);
        return out;
      }
    });
  }}
