package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.EpochCommits;
import io.consistentcatalog.core.EpochPlanner;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Keys;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.openlineage.EpochRun;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.UpdateRequirement;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One epoch of a job into its derived sink (protocol §5.9 for a statement, §5.7 for a micro-batch), as carried
 * out for the plan {@link EpochPlanner} made: where Spark's write goes and what happens when Spark commits it.
 *
 * <p>A staged epoch ({@code stage}) resets {@code consistent-staged} to main's head, has Spark write onto it through
 * {@link FencedOperations} (the fence, main and the staged branch asserted inside the catalog's compare-and-swap),
 * the summary keys carried by Iceberg's commit properties, then verifies the staged epoch (§5.2) and publishes it
 * (§5.3). {@code publish-staged} and {@code watermark} only publish; {@code done} does nothing and says so. A
 * statement's staged branch is reset when Spark builds the write ({@link #writeTable}); a micro-batch's when the
 * batch commits, its files landing through the streaming sink's {@link StreamingFence}.
 *
 * <p>An epoch with work is one OpenLineage run when OpenLineage is configured (§5.8, {@link EpochRun}):
 * {@code START} when Spark starts writing ({@link #executing}; a micro-batch's when it commits), {@code COMPLETE}
 * after the publish, {@code FAIL} when the staged-branch reset, the commit or the publish raises, or the statement
 * fails elsewhere ({@link StatementEnds}).
 */
public final class EpochCommit implements WriteCommit {
  private static final Logger LOG = LoggerFactory.getLogger(EpochCommit.class);

  private final WriterInstance writes;
  private final String sink;
  private final TableIdentifier ident;
  private final Table table;
  /** The sink's metadata the plan was made from (the table's own may have been refreshed since, or be older). */
  private final TableMetadata read;
  private final String job;
  private final long leaseMs;
  private final EpochPlanner.Plan plan;
  private final EpochPlanner.SinkPlan sinkPlan;
  /** The epoch's OpenLineage run (null: OpenLineage is not configured, or the epoch has nothing to do). */
  private final EpochRun lineage;
  /** A micro-batch's fenced operations, armed when the batch commits (null: a statement's epoch). */
  private final StreamingFence streamingFence;
  /**
   * A new generation (§6.10) computed now ({@code regenerate}, no staged regeneration to republish): its staged write
   * first deletes every row of the sink, and its publish is the switch.
   */
  private final boolean regenerating;
  /** The staging attempt's id (every snapshot it stages carries it, the delete of a new generation too). */
  private final String attempt = UUID.randomUUID().toString().replace("-", "").substring(0, 12);
  /** What the statement read, when not the sources whole at the inputs (an incremental epoch's ranges); or null. */
  private volatile String reading;
  /** Whether the statement's end is watched for the run ({@link StatementEnds}). */
  private volatile boolean watched;
  /** What the staged write's fenced commit requires. */
  private volatile List<UpdateRequirement> requirements = Collections.emptyList();
  /** Main's head the staged epoch is written on (set when the staged branch is reset). */
  private long base;
  /** A new generation's delete of every row on the staged branch (§5.2 step 5; null before it, or without one). */
  private Long deleted;
  /** The fenced operations the staged write commits through (set when the staged branch is reset). */
  private FencedOperations fenced;
  /** The sink's metadata once the staged branch is prepared (what the reset's commit returned). */
  private TableMetadata prepared;

  private EpochCommit(
      WriterInstance writes, String sink, TableIdentifier ident, Table table, TableMetadata read, String job,
      long leaseMs, EpochPlanner.Plan plan, EpochRun lineage, StreamingFence streamingFence) {
    this.writes = writes;
    this.sink = sink;
    this.ident = ident;
    this.table = table;
    this.read = read;
    this.job = job;
    this.leaseMs = leaseMs;
    this.plan = plan;
    this.sinkPlan = plan.sinks.get(sink);
    this.lineage = lineage;
    this.streamingFence = streamingFence;
    this.regenerating = plan.barrier != null && sinkPlan.action == EpochPlanner.Action.REGENERATE
        && !sinkPlan.replay;
  }

  /** A statement's epoch as {@link EpochPlanning} planned it ({@code lineage}: its run, planned; null: none). */
  public static EpochCommit statement(
      WriterInstance writes, String sink, TableIdentifier ident, EpochPlanning.Planned planned, Settings.Writes settings,
      EpochRun lineage) {
    return new EpochCommit(writes, sink, ident, planned.sinkTable, planned.sinkMetadata, settings.job, settings.leaseMs,
        planned.plan, lineage, null);
  }

  /** Names what the statement reads ({@code incremental: ...}) in the line of the epoch it publishes. */
  public void reading(String what) {
    this.reading = what;
  }

  /**
   * A streaming query's micro-batch as the epoch of {@code plan} ({@code streaming.StreamingEpoch}): Spark's files are
   * written; when the action stages, {@code consistent-staged} is reset at {@link #commit} and Spark's commit of the
   * files (through {@code fence}, which the write was built on) lands there, then is verified and published. Its run
   * (when there is work) starts now.
   */
  public static EpochCommit microBatch(
      WriterInstance writes, String sink, TableIdentifier ident, EpochPlanning.Planned planned, String job, long leaseMs,
      StreamingFence fence) {
    EpochPlanner.Plan plan = planned.plan;
    EpochPlanner.Action action = plan.sinks.get(sink).action;
    EpochRun lineage = plan.barrier == null || action == EpochPlanner.Action.DONE ? null
        : writes.lineage(job, plan.inputs.keySet(), sink, null, planned.loaded(sink)); // nothing to do sends nothing
    if (lineage != null) {
      lineage.planned(plan.barrier, plan.inputs, Collections.singletonMap(sink, action.protocolName), writes.instance);
      lineage.start();
    }
    return new EpochCommit(writes, sink, ident, planned.sinkTable, planned.sinkMetadata, job, leaseMs, plan, lineage,
        fence);
  }

  @Override
  public String sink() {
    return sink;
  }

  @Override
  public boolean runsQuery() {
    return plan.barrier != null && (sinkPlan.action == EpochPlanner.Action.STAGE || regenerating);
  }

  /**
   * Whether the epoch computes a new generation of its sink (§6.10): the transform runs as on a first epoch (sources
   * whole, an empty sink) and its output replaces every row.
   */
  public boolean regenerating() {
    return regenerating;
  }

  @Override
  public String action() {
    return plan.barrier == null ? "done" : sinkPlan.action.protocolName;
  }

  private FencedCommit committer() {
    return writes.committer();
  }

  // --- where Spark writes --------------------------------------------------------------------------

  /**
   * For a staged epoch {@code consistent-staged}, reset to main's head first, through {@link FencedOperations};
   * otherwise the table as loaded (Spark writes no rows).
   */
  @Override
  public Table writeTable() {
    if (!runsQuery()) {
      return table; // Spark writes no rows; commit() never hands them to Iceberg
    }
    try {
      return fencedWriteTable();
    } catch (ConsistentException e) {
      throw failed(Errors.statementRefusal(e));
    } catch (Throwable e) {
      throw failed(e);
    }
  }

  private Table fencedWriteTable() {
    Table current = table; // as the statement's analysis loaded it: the reset's requirements check it is still so
    base = prepareStagedBranch(current);
    requirements = EpochCommits.stagedWrite(sinkPlan, base);
    fenced = new FencedOperations(((HasTableOperations) current).operations(), committer(), ident, () -> requirements,
        "staging barrier " + Barriers.format(plan.barrier));
    fenced.prime(prepared); // Spark's write builds on the branch as planned or just reset, with no load
    if (regenerating) { // §5.2 step 5: every row deleted on the staged branch, then the statement's own write
      deleteEveryRow();
    }
    return new BaseTable(fenced, table.name());
  }

  /**
   * §5.2 step 5: one snapshot on {@code consistent-staged} that deletes every row of the sink, tagged with the epoch's
   * keys (this attempt's id, {@code consistent.regenerate}); the staged write then asserts the branch at it.
   */
  private void deleteEveryRow() {
    org.apache.iceberg.DeleteFiles delete = new BaseTable(fenced, table.name()).newDelete()
        .deleteFromRowFilter(org.apache.iceberg.expressions.Expressions.alwaysTrue()).toBranch(Keys.STAGED_BRANCH);
    EpochCommits.summary(plan, sink, job, attempt).forEach(delete::set);
    delete.commit();
    deleted = TableState.fromMetadata(sink, fenced.committed()).head(Keys.STAGED_BRANCH);
    java.util.Map<String, Long> refs = new java.util.LinkedHashMap<>();
    refs.put(Keys.STAGED_BRANCH, deleted);
    refs.put(Keys.MAIN_BRANCH, base);
    requirements = EpochCommits.fenced(sinkPlan.fence, refs);
  }

  @Override
  public String writeBranch() {
    return runsQuery() ? Keys.STAGED_BRANCH : null;
  }

  /**
   * {@code prepare_staged_branch}: a sink a revision emptied gets its genesis, then {@code consistent-staged} is
   * pointed at main's head (discarding a stale staged epoch); returns that head, the epoch's base.
   */
  private long prepareStagedBranch(Table current) {
    TableMetadata metadata = read;
    prepared = metadata;
    TableState state = TableState.fromMetadata(sink, metadata);
    Long expectedMain = sinkPlan.mainHead;
    if (expectedMain == null) {
      Snapshot genesis = EmptySnapshot.genesis(((HasTableOperations) current).operations(), metadata, job);
      metadata = send(metadata, EpochCommits.genesis(sinkPlan, genesis));
      state = TableState.fromMetadata(sink, metadata);
      expectedMain = state.head();
    }
    Long staged = state.head(Keys.STAGED_BRANCH);
    if (!expectedMain.equals(staged)) {
      metadata = send(metadata, EpochCommits.reset(sinkPlan, expectedMain, staged));
    }
    prepared = metadata;
    return expectedMain;
  }

  private TableMetadata send(TableMetadata base, EpochCommits.Commit commit) {
    return committer().commit(ident, base, new ArrayList<>(commit.requirements), commit.updates, commit.what);
  }

  // --- Spark commits ------------------------------------------------------------------------------

  @Override
  public String commit(WriterCommitMessage[] messages, RootIngest.SparkCommit spark) {
    Published published;
    try {
      published = carryOut(spark);
    } catch (ConsistentException e) {
      throw failed(Errors.statementRefusal(e));
    } catch (Throwable e) {
      throw failed(e);
    }
    completed(published);
    if (streamingFence == null) { // a statement's: what it did, for the session's recent_results()
      StatementResults.record(sink, job, published.outcome, plan.barrier, published.snapshot, published.rows,
          published.attempt, published.line);
    }
    return published.line;
  }

  /** The run's COMPLETE, once the epoch published. */
  private void completed(Published published) {
    if (lineage != null && published.action != null) {
      Map<String, Long> snapshots = new HashMap<>();
      snapshots.put(sink, published.snapshot);
      lineage.complete(Collections.singletonMap(sink, published.action), snapshots,
          published.attempt == null ? Collections.emptyMap() : Collections.singletonMap(sink, published.attempt));
    }
  }

  /** The epoch failed with {@code error} (its FAIL event, once); returns it to be thrown as it is. */
  private RuntimeException failed(Throwable error) {
    if (lineage != null) {
      lineage.fail(error);
    }
    return Errors.rethrow(error);
  }

  /** Spark starts writing the statement's epoch (its BatchWrite): the run's START, its statement's end watched. */
  @Override
  public void executing() {
    if (lineage != null && lineage.start()) {
      watched = StatementEnds.watch(lineage);
    }
  }

  /** Spark aborted the write: without a watched statement end (which names the error), FAIL now. */
  @Override
  public void aborted() {
    if (lineage != null && !watched && !lineage.ended()) {
      lineage.fail(new IllegalStateException("Spark aborted the write of " + sink + " (a task of the statement failed)"));
    }
  }

  /**
   * What the commit did: the line reported, and what a publish left on main (the result as
   * {@code EpochResult.actions} names it, the snapshot, the attempt; all null when it published nothing), and what
   * the statement did as {@code recent_results()} names it ({@code outcome}; the rows staged, when it staged).
   */
  private static final class Published {
    final String line;
    final String action;
    final Long snapshot;
    final String attempt;
    final String outcome;
    final Long rows;

    Published(String line, String action, Long snapshot, String attempt) {
      this(line, action, snapshot, attempt, action, null);
    }

    Published(String line, String action, Long snapshot, String attempt, String outcome, Long rows) {
      this.line = line;
      this.action = action;
      this.snapshot = snapshot;
      this.attempt = attempt;
      this.outcome = outcome;
      this.rows = rows;
    }
  }

  /** The epoch's commit: what it published (nothing when done). */
  private Published carryOut(RootIngest.SparkCommit spark) {
    if (plan.barrier == null) {
      spark.abort();
      return nothing("nothing", report("nothing to do: no barrier at which every source (" + String.join(", ",
          plan.inputs.keySet().isEmpty() ? sinkPlan.previousInputs.keySet() : plan.inputs.keySet()) + ") is complete yet"));
    }
    String barrier = sinkPlan.action != EpochPlanner.Action.REGENERATE ? "barrier " + Barriers.format(plan.barrier)
        : sinkPlan.change.describe(plan.barrier) + ",";
    switch (sinkPlan.action) {
      case DONE:
        spark.abort();
        return nothing("done", report(barrier + " done: the sink already holds it, nothing written"));
      case REGENERATE:
        if (regenerating) {
          return stageOrMicroBatch(spark, barrier);
        }
        spark.abort(); // §5.4: an earlier run staged this regeneration and did not switch to it
        publish(sinkPlan.mainHead, sinkPlan.stagedHead, null);
        return new Published(report(barrier + " republished (an earlier run staged this new generation and did not "
            + "switch to it)"), "regenerated", sinkPlan.stagedHead, lineage == null ? null : stagedAttempt(sinkPlan.stagedHead),
            "regenerated", null);
      case PUBLISH_STAGED:
        spark.abort();
        publish(sinkPlan.mainHead, sinkPlan.stagedHead, null);
        return new Published(report(barrier + " republished (an earlier run staged this epoch and did not publish it)"),
            "republished", sinkPlan.stagedHead, lineage == null ? null : stagedAttempt(sinkPlan.stagedHead));
      case WATERMARK:
        spark.abort();
        publish(sinkPlan.mainHead, null, null);
        return new Published(report(barrier + " watermark (inputs unchanged, nothing to compute)"), "watermark",
            sinkPlan.mainHead, null, "watermark", 0L);
      default:
        return stageOrMicroBatch(spark, barrier);
    }
  }

  /**
   * A micro-batch's staged branch is reset now (a statement's was when Spark built its write), then the epoch staged;
   * a micro-batch's new generation replaces every row in its one commit ({@code streaming.StreamingEpoch}).
   */
  private Published stageOrMicroBatch(RootIngest.SparkCommit spark, String barrier) {
    if (streamingFence != null) {
      base = prepareStagedBranch(table);
      requirements = EpochCommits.stagedWrite(sinkPlan, base);
      fenced = streamingFence.arm(() -> requirements);
      fenced.prime(prepared); // Iceberg's commit builds on the branch as just reset, with no load
    }
    return stage(spark, barrier);
  }

  private static Published nothing(String outcome, String line) {
    return new Published(line, null, null, null, outcome, 0L);
  }

  /** The attempt id of the staged epoch the plan found (a replay publishes it unchanged); null when unknown. */
  private String stagedAttempt(Long head) {
    try {
      io.consistentcatalog.core.SnapshotRecord record = head == null ? null : TableState.fromMetadata(sink, read).snapshots.get(head);
      return record == null ? null : record.summary.get(Keys.ATTEMPT);
    } catch (RuntimeException e) { // lineage's detail, never the published epoch's failure
      return null;
    }
  }

  private Published stage(RootIngest.SparkCommit spark, String barrier) {
    Map<String, String> properties = EpochCommits.summary(plan, sink, job, attempt);
    Failpoints.at("before-stage", sink);
    RootIngest.withCommitProperties(properties, spark::commit);
    TableMetadata staged = fenced.committed(); // what Spark's fenced commit produced (null: it committed nothing)
    if (staged == null && streamingFence != null) {
      throw new ConsistentException(ErrorKind.FENCED, sink, sink + ": Iceberg's streaming write skipped the batch "
          + "at " + barrier + ", since main already holds this query's batch of that id or a later one (a checkpoint "
          + "whose offsets and commits were reset); nothing was staged — start the query with a new checkpoint");
    }
    Long written = staged == null ? null : TableState.fromMetadata(sink, staged).head(Keys.STAGED_BRANCH);
    if (written == null || written == base || written.equals(deleted)) {
      recordEmptyEpoch(properties); // Spark committed nothing (an empty dynamic overwrite, an empty new generation)
      staged = fenced.committed();
    }
    TableState state = TableState.fromMetadata(sink, staged);
    long rows = verifyStaged(state, base, attempt);
    Failpoints.at("after-stage", sink);
    Long head = state.head(Keys.STAGED_BRANCH);
    publish(base, head, staged);
    Failpoints.at("after-publish", sink);
    String outcome = regenerating ? "regenerated" : "published";
    return new Published(report(barrier + " published (" + rows + " rows, attempt " + attempt
        + (reading == null ? "" : "; " + reading) + (regenerating ? "; " + Keys.PREVIOUS_BRANCH + " keeps the previous "
        + "generation" : "") + ")"), outcome, head, attempt, outcome, rows);
  }

  /** §5.2 step 4: an empty snapshot tagged like any other records the epoch's barrier and inputs. */
  private void recordEmptyEpoch(Map<String, String> properties) {
    AppendFiles append = new BaseTable(fenced, table.name()).newFastAppend().toBranch(Keys.STAGED_BRANCH);
    properties.forEach(append::set);
    append.commit();
  }

  /** {@code verify_staged}: every snapshot from the staged head down to {@code base} carries this attempt; returns the rows added. */
  private long verifyStaged(TableState state, long base, String attempt) {
    Long head = state.head(Keys.STAGED_BRANCH);
    long rows = 0;
    Long current = head;
    while (current != null && current != base) {
      io.consistentcatalog.core.SnapshotRecord record = state.snapshots.get(current);
      if (record == null || !attempt.equals(record.summary.get(Keys.ATTEMPT))) {
        throw new ConsistentException(ErrorKind.FENCED, sink, sink + ": snapshot " + current + " on "
            + Keys.STAGED_BRANCH + " was not written by this attempt at barrier " + Barriers.format(plan.barrier)
            + ": another writer interfered; run the statement again — it re-plans");
      }
      String added = record.summary.get("added-records");
      rows += added == null || added.isEmpty() ? 0 : Long.parseLong(added);
      current = record.parentId;
    }
    if (current == null || current != base || head == null || head == base) {
      throw new ConsistentException(ErrorKind.FENCED, sink, sink + ": " + Keys.STAGED_BRANCH
          + " no longer descends from main's head " + base + "; run the statement again — it re-plans");
    }
    return rows;
  }

  /**
   * §5.3: one fenced commit moves main to the staged head (or, with none, sets the watermark to T) and renews
   * the lease; requires the fence and main as planned and the staged branch at its head.
   */
  private void publish(Long mainHead, Long stagedHead, TableMetadata read) {
    // the requirements, not this copy, decide whether the publish lands: the staging commit's answer is enough
    TableMetadata metadata = read != null ? read : this.read; // as staged, else as planned
    TableState state = TableState.fromMetadata(sink, metadata);
    EpochCommits.Commit commit = EpochCommits.publish(plan, sink, state, mainHead, stagedHead,
        System.currentTimeMillis() + leaseMs);
    // the epoch's last commit: nothing reads the sink after it, so a REST answer without metadata is not followed by a load
    committer().commit(ident, metadata, new ArrayList<>(commit.requirements), commit.updates, commit.what, false);
  }

  /** One line per epoch: a statement's on standard error, a micro-batch's logged (and returned). */
  private String report(String what) {
    String line = "[" + writes.catalogName() + "] " + job + ": " + sink + " " + what;
    if (streamingFence == null) {
      System.err.println(line); // once: a log at INFO on stderr too (a Thrift server's) printed it twice
      LOG.debug(line);
    } else {
      LOG.info(line);
    }
    return line;
  }
}
