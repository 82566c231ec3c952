package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.Durations;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.spark.context.CatalogContext;
import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.EventTime;
import io.consistentcatalog.spark.context.FencedCommit;
import io.consistentcatalog.spark.context.JobRegistration;
import io.consistentcatalog.spark.context.Names;
import io.consistentcatalog.spark.context.PlanFingerprint;
import io.consistentcatalog.spark.context.Roles;
import io.consistentcatalog.spark.context.RootIngest;
import io.consistentcatalog.spark.context.StreamingFence;
import io.consistentcatalog.spark.context.WriterInstance;
import io.consistentcatalog.spark.line.LineSpark;
import io.consistentcatalog.spark.line.LineSparkTable;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.StreamingQueryStatus;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The sink of a streaming query's {@code toTable("<catalog>.ns.root")} through the consistent catalog (protocol
 * §5.7): every micro-batch is one keyed ingest into the root ({@link StreamingIngest}). Options of the query
 * ({@code writeStream.option(...)}):
 *
 * <ul>
 *   <li>{@value #EVENT_TIME_COLUMN}: a timestamp, date or epoch-ms column; a batch's barrier is its latest value
 *       minus {@value #EVENT_TIME_DELAY} (what Spark's {@code withWatermark(column, delay)} holds once the batch is
 *       in) instead of the clock;
 *   <li>{@value #IDLE_AFTER}: while the query runs but has had no micro-batch for this long (Spark reports no data
 *       available and no trigger running), the root's watermark is advanced to now (minus the delay), so that the
 *       tables downstream keep moving; it starts with the query's first micro-batch.
 * </ul>
 *
 * Into a root only appends: complete and update output modes (which would rewrite rows of completed barriers) are
 * refused with the way out, and a derived table is written only as the epochs of its job (option {@value #JOB}):
 * append, complete or update output mode ({@link StreamingEpoch}; update mode merges each batch by the table's
 * identifier fields, {@link KeyedMerge}).
 */
public final class StreamingSinkTable implements org.apache.spark.sql.connector.catalog.Table, SupportsWrite {
  private static final Logger LOG = LoggerFactory.getLogger(StreamingSinkTable.class);
  static final String EVENT_TIME_COLUMN = "consistent.eventTimeColumn";
  static final String EVENT_TIME_DELAY = "consistent.eventTimeDelay";
  static final String IDLE_AFTER = "consistent.idleAfter";
  static final String JOB = "consistent.job";
  static final String LEASE = "consistent.lease";
  /** A job's declared definition version (§6.10, kind {@code version}); without it, the query's plan fingerprint. */
  static final String VERSION = "consistent.version";
  /** Update mode: a predicate over the sink's columns; a key whose new row satisfies it is deleted (a neutral value). */
  static final String DELETE_WHERE = "consistent.deleteWhere";
  /** {@code true}: a query that reads tables of the catalog into a root or new table ingests on purpose (§5.7). */
  static final String INGEST_FROM_LAKE = "consistent." + io.consistentcatalog.spark.context.Roles.INGEST_FROM_LAKE;
  /** Every write option of the sink; any other {@code consistent.*} option is a typo and is refused. */
  static final java.util.List<String> OPTIONS = java.util.Arrays.asList(JOB, LEASE, VERSION, DELETE_WHERE,
      EVENT_TIME_COLUMN, EVENT_TIME_DELAY, IDLE_AFTER, INGEST_FROM_LAKE);

  private final CatalogContext context;
  private final org.apache.iceberg.Table table;
  private final String name;
  private final TableIdentifier ident;
  /** The session that started the query (its stream manager knows the query; the query's own clone does not). */
  private final SparkSession session;
  private final SparkTable current;
  /** When the query last landed a batch, or the watcher last advanced the watermark. */
  private volatile long lastActivity = System.currentTimeMillis();
  private volatile Thread watcher;

  /**
   * The sink {@code name}, {@code table} as the query's {@code toTable} loaded it, {@code session} the one that starts
   * the query (the served table captures it when Spark loads it; the query's own clone does not know the query).
   */
  public StreamingSinkTable(CatalogContext context, org.apache.iceberg.Table table, String name, SparkSession session) {
    this.context = context;
    this.table = table;
    this.name = name;
    this.ident = Names.icebergIdentifier(name);
    this.session = session;
    this.current = LineSparkTable.current(table);
    this.derived = !FencedCommit.state(name, table).isRoot();
  }

  /** Whether the table is a job's (its batches are epochs of the query's option {@value #JOB}). */
  private final boolean derived;

  WriterInstance writer() {
    return context.writer();
  }

  String catalogName() {
    return context.catalogName();
  }

  String tableName() {
    return name;
  }

  /** The table as the plain catalog (where DDL goes) names it, {@code <plain catalog>.ns.t}. */
  String plainName() {
    return context.plainCatalogName() + "." + name;
  }

  private TableState state() {
    return FencedCommit.state(name, table);
  }

  /** A refusal that starts with the sink's role as the catalog sees it ({@link Roles#describe}). */
  RuntimeException refusedAs(String problem) {
    return Errors.raise(Errors.analysis("CONSISTENT_WRITE.REFUSED", Roles.describe(context.catalogName(), name, state())
        + problem));
  }

  private static boolean flag(String option, String text) {
    if (text == null) {
      return false;
    }
    String t = text.trim().toLowerCase(java.util.Locale.ROOT);
    if (!t.equals("true") && !t.equals("false")) {
      throw Errors.raise(Errors.setting("option " + option + "=" + text + " is not true or false"));
    }
    return t.equals("true");
  }

  RuntimeException refused(String problem) {
    return refused("CONSISTENT_WRITE.REFUSED", problem);
  }

  RuntimeException refused(String errorClass, String problem) {
    return Errors.raise(Errors.analysis(errorClass, context.catalogName() + "." + name + ": " + problem));
  }

  @Override
  public String name() {
    return current.name();
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return current.schema();
  }

  @Override
  public Transform[] partitioning() {
    return current.partitioning();
  }

  @Override
  public Map<String, String> properties() {
    return current.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.STREAMING_WRITE);
  }

  /** The query's options as the sink reads them. */
  static final class Options {
    final EventTime eventTime;
    final long delayMs;
    final Long idleAfterMs;
    /** The job the query's batches are epochs of (null: an ingest into a root). */
    final String job;
    final long leaseMs;
    /** Complete output mode (the write truncates: an overwrite epoch); set by the write builder. */
    final boolean complete;
    /** The option {@value StreamingSinkTable#VERSION}: the job's declared definition version, or null. */
    String version;
    /** Update output mode (each batch merges its rows by key into the sink); set when the write is built. */
    boolean update;
    /** The option {@value StreamingSinkTable#INGEST_FROM_LAKE}: a query reading the catalog's tables ingests on purpose. */
    boolean ingestFromLake;
    /** Update mode's {@value StreamingSinkTable#DELETE_WHERE}, as Iceberg evaluates it; null: none. */
    org.apache.iceberg.expressions.Expression deleteWhere;
    /** A job's sink: its required columns the query writes as nullable, checked at each batch ({@link RequiredColumns}). */
    java.util.List<org.apache.iceberg.types.Types.NestedField> required = java.util.Collections.emptyList();

    Options(EventTime eventTime, long delayMs, Long idleAfterMs, String job, long leaseMs, boolean complete) {
      this.eventTime = eventTime;
      this.delayMs = delayMs;
      this.idleAfterMs = idleAfterMs;
      this.job = job;
      this.leaseMs = leaseMs;
      this.complete = complete;
    }

    Options completeMode() {
      Options out = new Options(eventTime, delayMs, idleAfterMs, job, leaseMs, true);
      out.version = version;
      out.update = update;
      out.deleteWhere = deleteWhere;
      out.required = required;
      out.ingestFromLake = ingestFromLake;
      return out;
    }
  }

  private Options options(CaseInsensitiveStringMap options) {
    Roles.checkOptions(options.asCaseSensitiveMap(), OPTIONS, "CONSISTENT_WRITE.INVALID_OPTION", "streaming write");
    String column = options.get(EVENT_TIME_COLUMN);
    String delay = options.get(EVENT_TIME_DELAY);
    String idle = options.get(IDLE_AFTER);
    String job = options.get(JOB);
    String lease = options.get(LEASE);
    if (job != null && job.trim().isEmpty()) {
      throw Errors.raise(Errors.setting("option " + JOB + " is empty; name the job the query's batches are epochs of"));
    }
    if (derived && job == null) {
      throw refusedAs(": a streaming query writes it as the epochs of its job — set the write option " + JOB + "="
          + (state().owner() == null ? "<job>" : state().owner()));
    }
    if (job != null && (column != null || delay != null || idle != null)) {
      throw Errors.raise(Errors.setting("options " + EVENT_TIME_COLUMN + ", " + EVENT_TIME_DELAY + " and " + IDLE_AFTER
          + " are a root's (an ingest's barrier); a job's batches are epochs at their sources' barrier — remove them"));
    }
    EventTime eventTime = null;
    if (column != null) {
      eventTime = EventTime.of(table, name, column, "option " + EVENT_TIME_COLUMN + "=" + column,
          "remove the option " + EVENT_TIME_COLUMN);
    } else if (delay != null) {
      throw Errors.raise(Errors.setting("option " + EVENT_TIME_DELAY + "=" + delay + " needs " + EVENT_TIME_COLUMN
          + " (the event-time column the delay applies to); set both, or neither for processing-time barriers"));
    }
    String version = options.get(VERSION);
    if (version != null && (job == null || version.trim().isEmpty())) {
      throw Errors.raise(Errors.setting("option " + VERSION + "=" + version + " is a job's declared definition version: "
          + (job == null ? "set it with the option " + JOB + ", or remove it" : "give a non-empty version")));
    }
    Options out = new Options(eventTime, delay == null ? 0L : duration(EVENT_TIME_DELAY, delay),
        idle == null ? null : duration(IDLE_AFTER, idle), job == null ? null : job.trim(),
        lease == null ? JobRegistration.DEFAULT_LEASE_MS : duration(LEASE, lease), false);
    out.version = version;
    out.ingestFromLake = flag(INGEST_FROM_LAKE, options.get(INGEST_FROM_LAKE));
    return out;
  }

  /**
   * A query with no job that reads tables of the catalog into a root or new table: refused (issue 42: a forgotten
   * {@value #JOB} would make a table computed from others a root without lineage), unless {@value #INGEST_FROM_LAKE}.
   */
  private void checkLakeReads(String queryId, Options options) {
    if (derived || options.job != null || options.ingestFromLake) {
      return;
    }
    java.util.Set<String> reads = lakeReads(queryId);
    if (!reads.isEmpty()) {
      throw refusedAs(" and the query reads " + String.join(", ", reads) + " with no job: set the write option "
          + JOB + "=<job> " + (Roles.isNew(state()) ? "to make it that job's derived table"
          : "and write a new table (a root keeps its ingests)") + ", or " + INGEST_FROM_LAKE + "=true to ingest the "
          + "rows as a root on purpose");
    }
  }

  /** The tables of the catalog the running query {@code queryId} reads (empty: none, or the query is not found). */
  java.util.Set<String> lakeReads(String queryId) {
    StreamingQuery query = session.streams().get(java.util.UUID.fromString(queryId));
    org.apache.spark.sql.catalyst.plans.logical.LogicalPlan plan = query == null ? null : LineSpark.analyzedPlan(query);
    return plan == null ? java.util.Collections.emptySet() : Roles.lakeReads(plan, context.catalogName());
  }

  /** The one way out of an update or complete mode query into a root or new table with no job. */
  private String rewriteWayOut(String queryId) {
    if (lakeReads(queryId).isEmpty()) {
      return "write its rows in append mode";
    }
    return Roles.isNew(state()) ? "set the write option " + JOB + "=<job> to make this table that job's derived table"
        : "set the write option " + JOB + "=<job> and write into a new table (a root keeps its ingests)";
  }

  static long duration(String option, String text) {
    try {
      return Durations.parseMs(text, true);
    } catch (IllegalArgumentException e) {
      throw Errors.raise(Errors.setting("option " + option + "=" + text + " is not a duration with a unit; write e.g. "
          + "2s, 500ms, 5m or 1h (" + e.getMessage() + ")"));
    }
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    Options options = options(info.options());
    options.update = "update".equalsIgnoreCase(outputMode(info.queryId()));
    if (options.update) {
      if (options.job == null) {
        throw refusedAs(": update output mode rewrites the rows of keys it saw before, and a root only takes appends"
            + " — " + rewriteWayOut(info.queryId()));
      }
      KeyedMerge.check(this, table);
      checkGroupingKey(info.queryId());
      String where = info.options().get(DELETE_WHERE);
      if (where != null) {
        options.deleteWhere = deleteWhere(where);
      }
    } else if (info.options().containsKey(DELETE_WHERE)) {
      throw Errors.raise(Errors.setting("option " + DELETE_WHERE + " deletes the keys whose new row satisfies it, in "
          + "update output mode only (a batch in " + outputMode(info.queryId()).toLowerCase(java.util.Locale.ROOT)
          + " mode does not merge by key); write in update output mode, or remove the option"));
    }
    checkLakeReads(info.queryId(), options);
    FencedCommit committer = context.committer();
    org.apache.iceberg.Table loaded = table; // as toTable loaded it: Iceberg refreshes it when it commits a batch
    LogicalWriteInfo attempt = new AttemptWriteInfo(info, true);
    if (options.job != null) {
      java.util.List<org.apache.iceberg.types.Types.NestedField> required = RequiredColumns.of(table.schema(), info.schema());
      if (required != null && !required.isEmpty()) {
        // a key nullable by Spark's analysis (read from JSON, filtered before an aggregation) into a NOT NULL column:
        // Iceberg would refuse the query outright; each batch's rows are checked instead (StreamingEpoch)
        options.required = required;
        attempt = new AttemptWriteInfo(info, false);
      }
      StreamingFence fence = new StreamingFence(loaded, committer, ident, "job '" + options.job
          + "': a micro-batch staged on " + name);
      WriteBuilder iceberg = LineSparkTable.current(fence.table(table.name())).newWriteBuilder(attempt);
      return new Builder(this, iceberg, null, fence, info.queryId(), options);
    }
    RootIngest ingest = new RootIngest(committer, ident, name, loaded, "a micro-batch into " + name);
    ingest.lineage(context.writer().ingestLineage(name, loaded, null)); // each batch that lands: an OpenLineage run
    WriteBuilder iceberg = LineSparkTable.current(ingest.writeTable(table.name())).newWriteBuilder(attempt);
    startWatcher(info.queryId(), options);
    return new Builder(this, iceberg, ingest, null, info.queryId(), options);
  }

  /**
   * The write as Iceberg is told it, its query id made unique to this attempt of the batch. Iceberg names a streaming
   * write's files after {@code <query id>-<batch id>}, the partition and Spark's task id, and task ids start again
   * at 0 in a new application: a batch replayed after a crash would write files of the same names as the attempt
   * that landed, truncating files that committed snapshots reference (a reader then finds them empty or half
   * written). The batch's key keeps the query's own id; Iceberg's own record of the batch
   * ({@code spark.sql.streaming.queryId}) holds the attempt's.
   */
  private static final class AttemptWriteInfo implements LogicalWriteInfo {
    private final LogicalWriteInfo info;
    private final String queryId;
    private final CaseInsensitiveStringMap options;

    /** {@code checkNullability} false: Iceberg's write does not check it (the sink checks the batch's rows instead). */
    AttemptWriteInfo(LogicalWriteInfo info, boolean checkNullability) {
      this.info = info;
      this.queryId = info.queryId() + "-" + java.util.UUID.randomUUID().toString().substring(0, 8);
      if (checkNullability) {
        this.options = info.options();
      } else {
        java.util.Map<String, String> map = new java.util.HashMap<>(info.options().asCaseSensitiveMap());
        map.put(RequiredColumns.CHECK_NULLABILITY, "false");
        this.options = new CaseInsensitiveStringMap(map);
      }
    }

    @Override
    public CaseInsensitiveStringMap options() {
      return options;
    }

    @Override
    public String queryId() {
      return queryId;
    }

    @Override
    public StructType schema() {
      return info.schema();
    }

    @Override
    public java.util.Optional<StructType> rowIdSchema() {
      return info.rowIdSchema();
    }

    @Override
    public java.util.Optional<StructType> metadataSchema() {
      return info.metadataSchema();
    }
  }

  /** The option {@value #DELETE_WHERE} last resolved, and its Iceberg expression (resolved once, not per batch). */
  private volatile java.util.Map.Entry<String, org.apache.iceberg.expressions.Expression> resolvedDeleteWhere;

  /** {@code where} as Iceberg evaluates it ({@link KeyedMerge#deleteWhere}), resolved at the query's first batch. */
  private org.apache.iceberg.expressions.Expression deleteWhere(String where) {
    java.util.Map.Entry<String, org.apache.iceberg.expressions.Expression> resolved = resolvedDeleteWhere;
    if (resolved == null || !resolved.getKey().equals(where)) {
      resolved = new java.util.AbstractMap.SimpleImmutableEntry<>(where, KeyedMerge.deleteWhere(this, session, where));
      resolvedDeleteWhere = resolved;
    }
    return resolved.getValue();
  }

  /**
   * Update mode merges by the sink's identifier fields: refused, naming both, when they are not the query's grouping
   * columns ({@link GroupingKey}; a plan it cannot follow is not checked).
   */
  private void checkGroupingKey(String queryId) {
    StreamingQuery query = session.streams().get(java.util.UUID.fromString(queryId));
    java.util.Set<String> grouping = query == null ? null : GroupingKey.of(LineSpark.analyzedPlan(query));
    org.apache.iceberg.Schema schema = table.schema();
    java.util.Set<String> key = new java.util.TreeSet<>();
    for (int id : schema.identifierFieldIds()) {
      key.add(schema.findColumnName(id).toLowerCase(java.util.Locale.ROOT));
    }
    if (grouping != null && !grouping.equals(key)) {
      throw refused("update output mode merges each batch's rows by the table's identifier fields " + key + ", and the "
          + "query groups by " + (grouping.isEmpty() ? "columns it does not write" : grouping) + ": a key other than "
          + "the grouping would keep two rows of a group or never replace one. Group by the key, or make the key the "
          + "grouping columns (ALTER TABLE " + plainName() + " SET IDENTIFIER FIELDS ...)");
    }
  }

  /** The output mode of the running query {@code queryId} ({@code Append}, {@code Complete}, {@code Update}). */
  private String outputMode(String queryId) {
    StreamingQuery query = session.streams().get(java.util.UUID.fromString(queryId));
    String mode = query == null ? null : LineSpark.outputMode(query);
    if (mode == null) {
      throw new IllegalStateException("streaming query " + queryId + " is not running in the session that started it");
    }
    return mode;
  }

  /** Called by each batch's commit. */
  void batchDone() {
    lastActivity = System.currentTimeMillis();
  }

  /**
   * Iceberg's streaming write builder: into a root an ingest per batch (complete and update mode refused), into a
   * derived table an epoch per batch (complete mode overwrites, update mode merges by key). Spark asks update mode
   * of a builder that is {@code SupportsStreamingUpdateAsAppend} and builds it like append mode: the sink told the
   * two apart by the query's output mode ({@link Options#update}).
   */
  private static final class Builder implements SupportsTruncate,
      org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend {
    private final StreamingSinkTable sink;
    private final WriteBuilder delegate;
    private final RootIngest ingest;
    private final StreamingFence fence;
    private final String queryId;
    private Options options;

    Builder(StreamingSinkTable sink, WriteBuilder delegate, RootIngest ingest, StreamingFence fence, String queryId,
        Options options) {
      this.sink = sink;
      this.delegate = delegate;
      this.ingest = ingest;
      this.fence = fence;
      this.queryId = queryId;
      this.options = options;
    }

    @Override
    public WriteBuilder truncate() {
      if (fence == null) {
        throw sink.refusedAs(": complete output mode rewrites the whole table every batch, and a root only takes "
            + "appends — " + sink.rewriteWayOut(queryId));
      }
      ((SupportsTruncate) delegate).truncate();
      options = options.completeMode();
      return this;
    }

    @Override
    public Write build() {
      Write write = delegate.build();
      return new Write() {
        @Override
        public String description() {
          return (fence == null ? "consistent streaming ingest into " : "consistent streaming epochs of job '"
              + options.job + "' into ") + sink.name + " via " + write.description();
        }

        @Override
        public StreamingWrite toStreaming() {
          return fence == null
              ? new StreamingIngest(sink, write.toStreaming(), ingest, queryId, options, sink.table.io())
              : new StreamingEpoch(sink, write.toStreaming(), fence, queryId, options);
        }

        @Override
        public org.apache.spark.sql.connector.metric.CustomMetric[] supportedCustomMetrics() {
          return write.supportedCustomMetrics();
        }
      };
    }
  }

  // --- a job's registration ------------------------------------------------------------------------------

  /** The run of a streaming query that writes each sink now, in this JVM (whose instance id its registration holds). */
  private static final java.util.Map<String, java.util.UUID> RUNS = new java.util.concurrent.ConcurrentHashMap<>();
  /** This query run's id, once its first batch registered (null before). */
  private volatile java.util.UUID run;

  /**
   * §6.1 for a streaming epoch job, at each micro-batch (its sources are known then), given the sink as just loaded:
   * nothing when this instance holds it with these sources; otherwise, as the Python streaming jobs do (§5.7), this
   * instance is first recorded in {@code <checkpoint>/consistent-catalog/instances}, and the registration takes over
   * when the sink's lease-holder is one listed there (an earlier run of the same checkpoint that died). The job is
   * unregistered when this query run ends (unless a newer run of it in this JVM holds the sink by then), or when the
   * JVM shuts down. Returns the sink as registered.
   */
  synchronized org.apache.iceberg.Table register(
      String job, java.util.Set<String> sources, String queryId, Options options, org.apache.iceberg.Table loaded) {
    if (run == null) {
      StreamingQuery query = session.streams().get(java.util.UUID.fromString(queryId));
      run = query == null ? null : query.runId();
      if (run == null) {
        throw new IllegalStateException("streaming query " + queryId + " is not running in the session that started it");
      }
      RUNS.put(name, run);
      releaseWhenTerminated(run, job);
    }
    TableState state = FencedCommit.state(name, loaded);
    if (job.equals(state.job()) && WriterInstance.INSTANCE.equals(state.leaseHolder())
        && new java.util.TreeSet<>(state.sources()).equals(new java.util.TreeSet<>(sources))) {
      return loaded;
    }
    WriterInstance writes = context.writer();
    FencedCommit committer = writes.committer();
    CheckpointInstances instances = CheckpointInstances.of(session, queryId);
    java.util.List<String> earlier = instances.read();
    boolean takeover = state.leaseHolder() != null && earlier.contains(state.leaseHolder());
    earlier.add(WriterInstance.INSTANCE);
    instances.write(earlier);
    java.util.Map<String, TableState> all = context.states().catalogStates(name);
    try {
      JobRegistration.register(committer, ident, name, loaded, job, sources, WriterInstance.INSTANCE, takeover,
          options.leaseMs, all == null ? java.util.Collections.emptyMap() : all, context.catalogName(), true);
    } catch (io.consistentcatalog.core.ConsistentException e) {
      if (e.kind() != io.consistentcatalog.core.ErrorKind.OWNERSHIP || !job.equals(state.owner())) {
        throw e;
      }
      throw new io.consistentcatalog.core.ConsistentException(e.kind(), name, name + ": job '" + job + "' cannot "
          + "register: " + state.leaseHolder() + " holds the sink (lease until " + (state.leaseUntil() == null ? "-"
          : io.consistentcatalog.core.Barriers.format(state.leaseUntil())) + ") and is not an instance this query's "
          + "checkpoint recorded. "
          + "A restart from the checkpoint of the run that holds it takes over; another deployment waits until that "
          + "run stops or its lease lapses (`consistent-catalog status` shows it)");
    }
    writes.registered(name, job);
    return committer.load(ident);
  }

  /**
   * The definition fingerprint of the streaming query {@code queryId} (§6.10): its declared version (option
   * {@value #VERSION}), else kind {@code plan} over the query's analysed plan ({@link PlanFingerprint}); null when the
   * query cannot be found.
   */
  String definition(String queryId, Options options) {
    if (options.version != null) {
      return io.consistentcatalog.core.Definitions.fingerprint(io.consistentcatalog.core.Definitions.VERSION,
          options.version.trim());
    }
    StreamingQuery query = session.streams().get(java.util.UUID.fromString(queryId));
    org.apache.spark.sql.catalyst.plans.logical.LogicalPlan plan = LineSpark.analyzedPlan(query);
    return plan == null ? null : PlanFingerprint.of(plan);
  }

  /** Unregisters the job when this query run ends, unless a newer run in this JVM holds the sink by then. */
  private void releaseWhenTerminated(java.util.UUID runId, String job) {
    session.streams().addListener(new org.apache.spark.sql.streaming.StreamingQueryListener() {
      @Override
      public void onQueryStarted(QueryStartedEvent event) {}

      @Override
      public void onQueryProgress(QueryProgressEvent event) {}

      @Override
      public void onQueryTerminated(QueryTerminatedEvent event) {
        if (!event.runId().equals(runId)) {
          return;
        }
        session.streams().removeListener(this);
        if (!RUNS.remove(name, runId)) {
          return; // a newer run of the query (restarted in this JVM) holds the sink now
        }
        try {
          JobRegistration.unregister(context.committer(), ident, WriterInstance.INSTANCE, job);
          context.writer().released(name);
        } catch (RuntimeException e) {
          LOG.warn("[{}] {}: could not unregister job '{}' when its query ended: {}", context.catalogName(), name, job,
              e.toString());
        }
      }
    });
  }

  // --- idle source ----------------------------------------------------------------------------------

  private synchronized void startWatcher(String queryId, Options options) {
    if (options.idleAfterMs == null || watcher != null) {
      return;
    }
    Thread thread = new Thread(() -> watch(queryId, options), "consistent-idle-" + name);
    thread.setDaemon(true);
    watcher = thread;
    thread.start();
  }

  /**
   * While the query runs and has had no micro-batch for the idle allowance, with no data available and no trigger
   * running, advance the root's watermark to now minus the delay; ends with the query.
   */
  private void watch(String queryId, Options options) {
    long idle = options.idleAfterMs;
    long poll = Math.max(50L, Math.min(idle / 4, 1_000L));
    long started = System.currentTimeMillis();
    boolean seen = false;
    java.util.UUID pinned = null; // the run this watcher belongs to
    while (true) {
      try {
        Thread.sleep(poll);
      } catch (InterruptedException e) {
        return;
      }
      StreamingQuery query = find(queryId);
      if (query == null || !query.isActive() || (pinned != null && !pinned.equals(query.runId()))) {
        if (seen || System.currentTimeMillis() - started > 60_000L) {
          return; // stopped, failed or killed (or restarted: the new run has a watcher of its own)
        }
        continue;
      }
      seen = true;
      pinned = query.runId();
      StreamingQueryStatus status = query.status();
      long now = System.currentTimeMillis();
      if (status.isDataAvailable() || status.isTriggerActive() || now - lastActivity < idle) {
        continue;
      }
      long target = now - options.delayMs;
      try {
        FencedCommit committer = context.committer();
        if (JobRegistration.advanceRoot(committer, ident, name, committer.load(ident), target,
            "advancing the watermark of idle streaming root " + name) != null) {
          LOG.info("[{}] {}: idle for {} ms; watermark advanced to {}", context.catalogName(), name, now - lastActivity,
              Barriers.format(target));
        }
      } catch (RuntimeException e) {
        LOG.warn("[{}] {}: could not advance the idle root's watermark: {}", context.catalogName(), name, e.toString());
      }
      lastActivity = now;
    }
  }

  private StreamingQuery find(String queryId) {
    for (StreamingQuery query : session.streams().active()) {
      if (query.id().toString().equals(queryId)) {
        return query;
      }
    }
    return null;
  }

  @Override
  public String toString() {
    return "ConsistentStreamingSink(" + context.catalogName() + "." + name + ")";
  }
}
