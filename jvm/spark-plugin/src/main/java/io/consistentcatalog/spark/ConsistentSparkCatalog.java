package io.consistentcatalog.spark;

import io.consistentcatalog.spark.line.LineSpark;
import io.consistentcatalog.spark.line.LineSparkTable;
import io.consistentcatalog.spark.read.CatalogConnections;
import io.consistentcatalog.spark.context.StatementLoads;
import io.consistentcatalog.spark.context.StatementState;
import io.consistentcatalog.spark.context.CatalogContext;
import io.consistentcatalog.spark.context.CatalogOptions;
import io.consistentcatalog.spark.read.CutTables;
import io.consistentcatalog.spark.read.CutSession;
import io.consistentcatalog.spark.read.DeferredTable;
import io.consistentcatalog.spark.read.EmptyTable;
import io.consistentcatalog.spark.write.EpochWrites;
import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.Faults;
import io.consistentcatalog.spark.context.Names;
import io.consistentcatalog.spark.read.PinnedTable;
import io.consistentcatalog.spark.read.ResolutionTimings;
import io.consistentcatalog.spark.context.Settings;
import io.consistentcatalog.spark.write.MergeTargetTable;
import io.consistentcatalog.spark.write.SinkTable;
import io.consistentcatalog.spark.context.WriteStatements;
import io.consistentcatalog.spark.read.TableLoader;
import io.consistentcatalog.core.Resolver;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.NoSuchViewException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.iceberg.catalog.Procedure;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.Option;

/**
 * An Iceberg catalog whose tables are read at a consistent cut and written as epochs of their jobs and ingests into
 * roots (protocol §5.9), through the plain catalog's tables.
 *
 * <p>Configure it next to the plain catalog over the same catalog database:
 *
 * <pre>
 * spark.sql.catalog.lake_consistent            io.consistentcatalog.spark.ConsistentSparkCatalog
 * spark.sql.catalog.lake_consistent.type       jdbc            (the same type/uri/warehouse/jdbc.* as lake)
 * spark.sql.catalog.lake_consistent.plain-catalog  lake        (default: the name without "_consistent")
 * </pre>
 *
 * <p>The Iceberg catalog underneath is opened under the plain catalog's name (the JDBC catalog keys its
 * tables by catalog name), so both see the same tables.
 *
 * <p>This class only adapts Spark's catalog API, the way Iceberg's SparkCatalog does. It builds one
 * {@link CatalogContext} (names, options, the Iceberg catalog, every table's state, the writer) and hands it down;
 * the packages below never see this class ({@code PackageLayeringTest} pins it): {@code read} (the cut session and
 * the tables served at a cut), {@code write} (a SQL statement as an epoch or an ingest), {@code streaming} (the
 * stream source and sink), {@code context} (what they share), {@code core} (the pure protocol). The work is done by:
 *
 * <ul>
 *   <li>{@link CatalogOptions}: the catalog options ({@value #PLAIN_CATALOG}, {@value #LOAD_THREADS},
 *       {@code consistent.retry-deadline}, defaults of the read settings); {@code CatalogGuard}: the writers' check of
 *       the catalog (the probe's recorded result, {@code consistent.require-probe}; the property size limits,
 *       {@code consistent.max-property-chars}; protocol §6.5);
 *   <li>{@link CutSession}: <b>the cut.</b> The first time a statement loads a table, the session resolves
 *       the cut of that table's lineage component (every table connected to it through
 *       {@code consistent.sources}) with the JVM port of the Python resolver ({@link Resolver#scopedCut});
 *       every table of that component the statement loads is served at that cut ({@link Scope}), pinned
 *       ({@link PinnedTable}) or empty at the cut ({@link EmptyTable}); latest cuts never go back
 *       ({@link CutFloors});
 *   <li>{@link TableLoader}: <b>loading.</b> Resolving needs every table of the catalog, so the first load
 *       of a statement lists the catalog (one query over Iceberg's JDBC catalog: {@link JdbcTableListing})
 *       and loads or refreshes each table once on {@code load-threads} daemon threads (default
 *       {@value #DEFAULT_LOAD_THREADS}; {@code 1}: one after the other on the querying thread), as the
 *       querying thread's Hadoop user ({@link ResolutionLoads}); over REST with Iceberg 1.11+'s table cache a
 *       table the session holds is refreshed by a conditional load (a 304 when unchanged) on
 *       {@code refresh-threads} threads of their own (default {@value #DEFAULT_REFRESH_THREADS}); the tables it
 *       serves are those very loads, never loaded again. Catalog faults are waited out ({@link Faults});
 *   <li>{@link CutProcedures}: {@code CALL <catalog>.system.refresh_cut()} and {@code current_cut()};
 *   <li>{@link DdlRefusingSparkCatalog}: every DDL refused (tables, views and namespaces change through the plain
 *       catalog).
 * </ul>
 *
 * <p><b>Refresh rule.</b> {@code spark.sql.consistent.refresh=statement} (default): a statement is one
 * query planning (one Spark QueryExecution: a SQL statement, a {@code spark.table(...)} call); every
 * statement takes a fresh cut at its first table load and keeps it for all its loads.
 * {@code manual}: the cut is taken at the first load and held for the session until {@code CALL
 * <catalog>.system.refresh_cut()} or {@code SET spark.sql.consistent.cut=latest} (consumed by the next
 * load), or a change of the level, asOf or tag settings; use it to build several DataFrames at one cut.
 * Either way a newer cut is never older: for the same level, a latest cut whose barrier is below one this
 * session already served is not used, the earlier cut is served again (unless a revision rolled a table
 * back: {@code consistent.revision} changed).
 *
 * <p><b>Pass-through.</b> {@code VERSION AS OF}, {@code TIMESTAMP AS OF} and the {@code branch_},
 * {@code tag_}, {@code snapshot_id_} and {@code at_timestamp_} suffixes, metadata tables and changelogs
 * are served exactly as Iceberg's SparkCatalog serves them, read-only. Writes to a table by its name are epochs
 * or ingests ({@link WriteRule}, {@code write.EpochWrites}, a streaming query's sink: {@link ServedStreams}); every DDL and
 * every procedure other than this catalog's own is refused.
 */
public class ConsistentSparkCatalog extends DdlRefusingSparkCatalog {
  public static final String PLAIN_CATALOG = CatalogOptions.PLAIN_CATALOG;
  /**
   * Catalog option {@code load-threads}: how many tables a resolution loads at once (default
   * {@value #DEFAULT_LOAD_THREADS}; 1 loads them one after the other on the querying thread).
   */
  public static final String LOAD_THREADS = CatalogOptions.LOAD_THREADS;
  public static final int DEFAULT_LOAD_THREADS = CatalogOptions.DEFAULT_LOAD_THREADS;
  /**
   * Catalog option {@code refresh-threads}: how many conditional refreshes (REST, Iceberg 1.11+) a resolution runs
   * at once (default {@value #DEFAULT_REFRESH_THREADS}; they wait on the network, not the CPU).
   */
  public static final String REFRESH_THREADS = CatalogOptions.REFRESH_THREADS;
  public static final int DEFAULT_REFRESH_THREADS = CatalogOptions.DEFAULT_REFRESH_THREADS;

  private CatalogOptions options;
  private CutSession session;
  /** What the catalog hands down to its tables, scans, writes and streams (never the catalog itself). */
  private CatalogContext context;
  private volatile EpochWrites writes;

  // --- set-up ----------------------------------------------------------------------------------------

  @Override
  protected Catalog buildIcebergCatalog(String name, CaseInsensitiveStringMap options) {
    this.options = CatalogOptions.parse(name, options);
    this.session = new CutSession(name, this.options.plainName, new TableLoader(this, this.options));
    this.context = new CatalogContext(this.options, this::icebergCatalog, session,
        new CutTables(name, this.options.plainName));
    // the catalog connects as it initialises (the first statement that names it): faults waited out, as every call
    Catalog built = Faults.retrying(this.options.plainName, "connecting", this.options.retryDeadlineMs,
        () -> super.buildIcebergCatalog(this.options.plainName, options));
    CatalogConnections.install(built, this.options.icebergOptions);
    return built;
  }

  @Override
  public String catalogName() {
    return options.catalogName;
  }

  /** The plain catalog's name: the Iceberg catalog underneath, and where errors point writers and readers. */
  @Override
  public String plainCatalogName() {
    return options.plainName;
  }

  /** The Iceberg catalog's options as configured ({@code type}, {@code uri}, {@code warehouse}, ...). */
  public java.util.Map<String, String> icebergOptions() {
    return context.icebergOptions();
  }

  /** The session's cuts (the procedures read and refresh them). */
  public CutSession cutSession() {
    return session;
  }

  /** The read settings of this load, after consuming a one-shot {@code SET spark.sql.consistent.cut=latest}. */
  Settings settings() {
    SparkSession spark = activeSession();
    if (spark != null) {
      // SET spark.sql.consistent.cut=latest: a one-shot refresh of a held cut (refresh=manual), consumed here
      String cut = Settings.conf(spark, Settings.PREFIX + Settings.CUT);
      if (cut != null && cut.trim().equalsIgnoreCase("latest")) {
        spark.conf().unset(Settings.PREFIX + Settings.CUT);
        session.refresh();
      } else if (cut != null) {
        throw Errors.raise(Errors.setting(Settings.PREFIX + Settings.CUT + "=" + cut + " is not a request; SET "
            + Settings.PREFIX + Settings.CUT + "=latest takes a new cut at the next statement"));
      }
    }
    return Settings.read(spark, options.settingDefaults);
  }

  private static SparkSession activeSession() {
    Option<SparkSession> active = SparkSession.getActiveSession();
    if (active.isDefined()) {
      return active.get();
    }
    Option<SparkSession> fallback = SparkSession.getDefaultSession();
    return fallback.isDefined() ? fallback.get() : null;
  }

  /** Drop the session's table and metadata caches (the next resolution loads every table again). */
  public void clearCaches() {
    session.clearCaches();
  }

  /** What the last resolution of a cut spent (the benchmark's split of a cold first load). */
  public ResolutionTimings lastResolutionTimings() {
    return session.lastTimings();
  }

  /** What this catalog hands down to its tables, scans, writes and streams. */
  CatalogContext context() {
    return context;
  }

  /** Writes through this catalog: epochs and ingests (protocol §5.9). */
  public EpochWrites writes() {
    EpochWrites found = writes;
    if (found == null) {
      synchronized (this) {
        if (writes == null) {
          writes = new EpochWrites(context);
        }
        found = writes;
      }
    }
    return found;
  }

  // --- loading -----------------------------------------------------------------------------------------

  /**
   * The target of a write (INSERT, a DataFrame write): the table as it is now, no cut; the SQL extension's
   * {@link WriteRule} makes the write an epoch or an ingest. A selector (branch_x, VERSION AS OF) stays read-only.
   */
  @Override
  public Table loadTable(Identifier ident, java.util.Set<org.apache.spark.sql.connector.catalog.TableWritePrivilege> privileges)
      throws NoSuchTableException {
    String name = Names.tableName(ident);
    StatementLoads loads = WriteStatements.writing(catalogName(), name) ? session.statementLoads(name) : null;
    if (loads != null) { // the SQL statement resolved its cut already (Spark 4.1 resolves the query first): loaded once
      return sinkTable(loads.table(name), name);
    }
    Table loaded;
    try {
      loaded = retryingLoad(name, () -> bypassed(() -> super.loadTable(ident)));
    } catch (NoSuchTableException e) {
      throw notFound(ident, name, e);
    }
    if (loaded instanceof SparkTable) {
      SparkTable table = (SparkTable) loaded;
      if (LineSparkTable.isCurrent(table)
          && !(table.table() instanceof org.apache.iceberg.BaseMetadataTable)) {
        return sinkTable(table.table(), name);
      }
    }
    return readOnly(loaded, name);
  }

  /** The target of a write, {@code table} as loaded for it. */
  private Table sinkTable(org.apache.iceberg.Table table, String name) {
    SinkTable sink = new SinkTable(table, catalogName(), name);
    // Spark 4.1 would rewrite the MERGE before WriteRule sees it (LineSpark.mergeRewrittenInResolution)
    return LineSpark.mergeRewrittenInResolution() && WriteStatements.mergeInto(catalogName(), name)
        ? new MergeTargetTable(sink) : sink;
  }

  /**
   * A table by its name, as Spark loads it alike for a batch read, a streaming query's source
   * ({@code readStream.table}) and its sink ({@code toTable}): one table that declares the capabilities Spark asks
   * about and chooses in its scan and its write (issue 35, as Iceberg's {@code SparkTable}): served at the statement's
   * cut for a batch read ({@link PinnedTable}, {@link EmptyTable}), with the streaming half ({@link ServedStreams}) for
   * a micro-batch read and a streaming write. A cut error (no watermark yet, ...) is deferred to the batch scan
   * ({@link DeferredTable}): a stream's source and sink need no cut, and an INSERT's epoch reads its own.
   */
  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    if (StatementState.current().bypassed()) { // Iceberg's own table loading (tableExists, VERSION AS OF): no cut
      return super.loadTable(ident);
    }
    String name = Names.tableName(ident);
    Table served;
    try {
      served = session.tableAtCut(name, settings());
    } catch (Exception e) { // Errors.raise throws Spark's (checked) AnalysisException
      served = deferred(ident, name, e);
    }
    if (served == null) {
      try {
        return readOnly(super.loadTable(ident), name); // a selector (branch_x, tag_x, ...), a metadata table, a changelog
      } catch (NoSuchTableException e) {
        throw notFound(ident, name, e);
      }
    }
    if (served instanceof PinnedTable) {
      PinnedTable pinned = (PinnedTable) served;
      return pinned.streamedAs(new ServedStreams(context, pinned.table(), name, pinned.snapshotId()));
    }
    if (served instanceof EmptyTable) {
      EmptyTable empty = (EmptyTable) served;
      return empty.streamedAs(new ServedStreams(context, empty.icebergTable(), name, null));
    }
    return served;
  }

  /**
   * A table without a cut for a reader (protocol §5.9): deferred to its batch scan ({@link DeferredTable}), since an
   * INSERT's epoch reads it at its own plan and a streaming query needs no cut; a setting error, a missing table or
   * an unreachable catalog is raised now.
   */
  private Table deferred(Identifier ident, String name, Exception error) {
    String message = String.valueOf(error.getMessage());
    boolean cutError = error instanceof org.apache.spark.sql.AnalysisException
        && message.startsWith("[CONSISTENT_CUT.")
        && !message.startsWith("[CONSISTENT_CUT.INVALID_SETTING]")
        && !message.startsWith("[CONSISTENT_CUT.TABLE_NOT_FOUND]")
        && !message.startsWith("[CONSISTENT_CUT.CATALOG_UNAVAILABLE]");
    if (!cutError) {
      throw Errors.rethrow(error);
    }
    org.apache.iceberg.Table table;
    try {
      table = icebergCatalog().loadTable(Names.icebergIdentifier(name));
    } catch (RuntimeException e) {
      throw Errors.rethrow(error);
    }
    return new DeferredTable(table, catalogName(), plainCatalogName(), name, error);
  }

  /**
   * A name that is neither a table nor a view: one line naming it and where to look, instead of Spark's
   * plan dump. A view of that name is left to Spark (it resolves views after tables).
   */
  private NoSuchTableException notFound(Identifier ident, String name, NoSuchTableException missing) {
    try {
      loadView(ident);
      return missing;
    } catch (NoSuchViewException | RuntimeException e) {
      String namespace = ident.namespace().length == 0 ? "" : "." + String.join(".", ident.namespace());
      throw Errors.raise(Errors.tableNotFound(catalogName() + "." + name + " does not "
          + "exist; check the name — SHOW TABLES IN " + catalogName() + namespace + " lists the tables there"));
    }
  }

  /** Whether the table exists, without the one-line error {@link #loadTable} gives a missing one. */
  @Override
  public boolean tableExists(Identifier ident) {
    boolean bypassed = StatementState.current().bypass(true);
    try {
      return super.tableExists(ident);
    } finally {
      StatementState.current().bypass(bypassed);
    }
  }

  @Override
  public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
    return readOnly(bypassed(() -> super.loadTable(ident, version)), Names.tableName(ident));
  }

  @Override
  public Table loadTable(Identifier ident, long timestamp) throws NoSuchTableException {
    return readOnly(bypassed(() -> super.loadTable(ident, timestamp)), Names.tableName(ident));
  }

  private interface Load {
    Table load() throws NoSuchTableException;
  }

  /** A load of the target of a write or a stream, catalog faults waited out ({@link Faults}, protocol §6.8). */
  private <T> T retryingLoad(String name, Loading<T> load) throws NoSuchTableException {
    NoSuchTableException[] missing = new NoSuchTableException[1];
    T loaded = Faults.retrying(options.plainName, "loading " + name, options.retryDeadlineMs, () -> {
      try {
        return load.load();
      } catch (NoSuchTableException e) {
        missing[0] = e;
        return null;
      }
    });
    if (missing[0] != null) {
      throw missing[0];
    }
    return loaded;
  }

  private interface Loading<T> {
    T load() throws NoSuchTableException;
  }

  private static Table bypassed(Load load) throws NoSuchTableException {
    boolean before = StatementState.current().bypass(true);
    try {
      return load.load();
    } finally {
      StatementState.current().bypass(before);
    }
  }

  /** A table Iceberg chose (a selector, VERSION AS OF): the same snapshot or branch, read-only. */
  private Table readOnly(Table table, String name) {
    if (!(table instanceof SparkTable) || table instanceof PinnedTable) {
      return table;
    }
    SparkTable spark = (SparkTable) table;
    if (spark.branch() != null) {
      return new PinnedTable(spark.table(), spark.branch(), catalogName(), plainCatalogName(), name);
    }
    return new PinnedTable(spark.table(), spark.snapshotId(), catalogName(), plainCatalogName(), name);
  }

  // --- procedures ----------------------------------------------------------------------------------------

  @Override
  public Procedure loadProcedure(Identifier ident) {
    return CutProcedures.load(this, ident);
  }
}
