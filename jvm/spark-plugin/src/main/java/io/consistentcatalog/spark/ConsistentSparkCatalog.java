package io.consistentcatalog.spark;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.Cut;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Keys;
import io.consistentcatalog.core.Resolver;
import io.consistentcatalog.core.TableCut;
import io.consistentcatalog.core.TableState;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.lang.ref.WeakReference;
import java.security.PrivilegedExceptionAction;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.FutureTask;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.iceberg.BaseMetadataTable;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.SnapshotRef;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.jdbc.JdbcClientPool;
import org.apache.iceberg.spark.SparkCatalog;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.QueryPlanningTracker;
import org.apache.spark.sql.AnalysisException;
import org.apache.spark.sql.catalyst.analysis.NoSuchProcedureException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.NoSuchViewException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.NamespaceChange;
import org.apache.spark.sql.connector.catalog.StagedTable;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.catalog.View;
import org.apache.spark.sql.connector.catalog.ViewChange;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.iceberg.catalog.Procedure;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.Option;

/**
 * A read-only Iceberg catalog whose tables are served at a consistent cut.
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
 * <p><b>The cut.</b> The first time a statement loads a table, the catalog resolves the cut of that
 * table's lineage component (every table connected to it through {@code consistent.sources}, upstream,
 * downstream and siblings) from the catalog metadata, with the JVM port of the Python resolver
 * ({@link Resolver#scopedCut}: {@code ConsistentCatalog.resolve(component)}, leaving out tables that
 * cannot take part). Every table of that component the statement loads is served at that cut; a table
 * of another component gets that component's own cut.
 *
 * <p><b>Loading.</b> Resolving needs every table of the catalog (a downstream table names its sources,
 * not the other way round), so the first load of a statement lists the catalog and loads (or, when
 * the session loaded it before, refreshes) each table once; the tables it serves are those very loads,
 * pinned to the cut's snapshots, never loaded again. Over Iceberg's JDBC catalog the listing is one
 * query that also reads each table's current metadata file, and a table the session holds at that file
 * already is not refreshed; other catalogs are listed through their API (the asked table loading
 * meanwhile, the others from when the listing finds them). The loads run on {@code load-threads} daemon
 * threads (catalog option, default {@value #DEFAULT_LOAD_THREADS}; {@code 1}: one after the other on the
 * querying thread), as the querying thread's Hadoop user; the querying thread runs those no loading
 * thread has started yet. A table's state is parsed from the TableMetadata its load holds, and kept by
 * metadata file.
 *
 * <p><b>Refresh rule.</b> {@code spark.sql.consistent.refresh=statement} (default): a statement is one
 * query planning (one Spark QueryExecution: a SQL statement, a {@code spark.table(...)} call); every
 * statement takes a fresh cut at its first table load and keeps it for all its loads.
 * {@code manual}: the cut is taken at the first load and held for the session until {@code CALL
 * <catalog>.system.refresh_cut()} or {@code SET spark.sql.consistent.cut=latest} (consumed by the next
 * load), or a change of the level, asOf or tag settings; use it to build several DataFrames at one cut. Either way a newer cut is never older: for the same level, a latest cut
 * whose barrier is below one this session already served is not used, the earlier cut is served again
 * (unless a revision rolled a table back: {@code consistent.revision} changed).
 *
 * <p><b>Pass-through.</b> {@code VERSION AS OF}, {@code TIMESTAMP AS OF} and the {@code branch_},
 * {@code tag_}, {@code snapshot_id_} and {@code at_timestamp_} suffixes, metadata tables and changelogs
 * are served exactly as Iceberg's SparkCatalog serves them. Every write, DDL and procedure other than
 * this catalog's own is refused.
 */
public class ConsistentSparkCatalog extends SparkCatalog {
  public static final String PLAIN_CATALOG = "plain-catalog";
  /**
   * Catalog option {@code load-threads}: how many tables a resolution loads at once (default
   * {@value #DEFAULT_LOAD_THREADS}; 1 loads them one after the other on the querying thread).
   */
  public static final String LOAD_THREADS = "load-threads";
  static final int DEFAULT_LOAD_THREADS = 8;
  private static final String SUFFIX = "_consistent";
  private static final ThreadLocal<Boolean> BYPASS = ThreadLocal.withInitial(() -> Boolean.FALSE);

  private String catalogName;
  private String plainName;
  private final Map<String, String> defaults = new HashMap<>();

  private final Object lock = new Object();
  private final ThreadLocal<Statement> statement = new ThreadLocal<>();
  private Statement held;
  private final Map<String, Floor> floors = new HashMap<>();
  /** TableStates by table and metadata file (built by the loading threads, hence concurrent). */
  private final Map<String, TableState> parsed = new ConcurrentHashMap<>();
  /**
   * The session's loaded tables: refreshed at each resolution (one catalog query each, or none when the
   * listing read the same metadata file; a metadata read only when changed).
   */
  private final Map<String, org.apache.iceberg.Table> loadedTables = new HashMap<>();
  /** How many tables a resolution loads (or refreshes) at once ({@link #LOAD_THREADS}; 1: one after the other). */
  private int loadThreads = DEFAULT_LOAD_THREADS;
  private ThreadPoolExecutor loader;
  /** The options the Iceberg catalog underneath was built with (a JDBC catalog's listing query connects with them). */
  private Map<String, String> catalogOptions = Collections.emptyMap();
  /** One connection of our own to a JDBC catalog's database, for {@link #listJdbcTables}. */
  private JdbcClientPool listingConnection;
  /** Whether {@link #listJdbcTables} may be tried (false once the catalog turned out not to be Iceberg's JDBC catalog). */
  private boolean jdbcListing = true;
  /** Whether the JDBC catalog's table has the iceberg_type column (tables and views; false: tables only). */
  private boolean jdbcTypeColumn = true;
  /** How long a resolution waits out catalog faults ({@link Faults}; catalog option consistent.retry-deadline). */
  private long retryDeadlineMs = Faults.DEFAULT_DEADLINE_MS;

  // --- set-up ----------------------------------------------------------------------------------------

  @Override
  protected Catalog buildIcebergCatalog(String name, CaseInsensitiveStringMap options) {
    this.catalogName = name;
    String plain = options.get(PLAIN_CATALOG);
    if (plain == null || plain.trim().isEmpty()) {
      plain = name.endsWith(SUFFIX) && name.length() > SUFFIX.length() ? name.substring(0, name.length() - SUFFIX.length()) : name;
    }
    this.plainName = plain.trim();
    for (String key : new String[] {Settings.LEVEL, Settings.AS_OF, "as-of", "as_of", Settings.TAG, Settings.REFRESH}) {
      String value = options.get(key);
      if (value != null) {
        defaults.put(key, value);
      }
    }
    String threads = options.get(LOAD_THREADS);
    if (threads != null && !threads.trim().isEmpty()) {
      try {
        loadThreads = Integer.parseInt(threads.trim());
      } catch (NumberFormatException e) {
        loadThreads = 0;
      }
      if (loadThreads < 1) {
        throw new IllegalArgumentException(
            "spark.sql.catalog." + name + "." + LOAD_THREADS + "=" + threads + " is not a positive number of threads");
      }
    }
    this.retryDeadlineMs = Faults.parseDeadline(name, options.get(Faults.DEADLINE));
    this.catalogOptions = new HashMap<>(options.asCaseSensitiveMap());
    return super.buildIcebergCatalog(plainName, options);
  }

  /** The plain catalog's name: the Iceberg catalog underneath, and where errors point writers and readers. */
  public String plainCatalogName() {
    return plainName;
  }

  Settings settings() {
    SparkSession session = activeSession();
    if (session != null) {
      // SET spark.sql.consistent.cut=latest: a one-shot refresh of a held cut (refresh=manual), consumed here
      String cut = Settings.conf(session, Settings.PREFIX + Settings.CUT);
      if (cut != null && cut.trim().equalsIgnoreCase("latest")) {
        session.conf().unset(Settings.PREFIX + Settings.CUT);
        refresh();
      } else if (cut != null) {
        throw Errors.raise(Errors.setting(Settings.PREFIX + Settings.CUT + "=" + cut + " is not a request; SET "
            + Settings.PREFIX + Settings.CUT + "=latest takes a new cut at the next statement"));
      }
    }
    return Settings.read(session, defaults);
  }

  private static SparkSession activeSession() {
    Option<SparkSession> session = SparkSession.getActiveSession();
    if (session.isDefined()) {
      return session.get();
    }
    Option<SparkSession> fallback = SparkSession.getDefaultSession();
    return fallback.isDefined() ? fallback.get() : null;
  }

  // --- statements and cuts ---------------------------------------------------------------------------

  /** One component's cut, with the tables loaded to resolve it (served without loading them again). */
  static final class Scope {
    final String level;
    final Long barrier;
    final String tag;
    final Map<String, org.apache.iceberg.Table> tables;
    final Map<String, Long> snapshots;
    final Map<String, String> branches;
    final Map<String, Long> barriers;
    final Map<String, ConsistentException> blocked;

    Scope(
        String level,
        Long barrier,
        String tag,
        Map<String, org.apache.iceberg.Table> tables,
        Map<String, Long> snapshots,
        Map<String, String> branches,
        Map<String, Long> barriers,
        Map<String, ConsistentException> blocked) {
      this.level = level;
      this.barrier = barrier;
      this.tag = tag;
      this.tables = tables;
      this.snapshots = snapshots;
      this.branches = branches;
      this.barriers = barriers;
      this.blocked = blocked;
    }

    Scope withBlocked(Map<String, ConsistentException> more) {
      Map<String, ConsistentException> all = new LinkedHashMap<>(blocked);
      all.putAll(more);
      return new Scope(level, barrier, tag, tables, snapshots, branches, barriers, all);
    }
  }

  /** The cuts of one statement (or, with refresh=manual, of the session until refresh_cut()). */
  static final class Statement {
    final WeakReference<Object> planning;
    final String key;
    final Map<String, Scope> scopes = new ConcurrentHashMap<>();

    Statement(Object planning, String key) {
      this.planning = new WeakReference<>(planning);
      this.key = key;
    }
  }

  /** The newest latest cut served for a table at a level: later latest cuts are never older. */
  static final class Floor {
    final long barrier;
    final long revision;
    final Scope scope;

    Floor(long barrier, long revision, Scope scope) {
      this.barrier = barrier;
      this.revision = revision;
      this.scope = scope;
    }
  }

  /** The query planning the current thread is in (Spark's QueryPlanningTracker of the QueryExecution), or null. */
  private static Object currentPlanning() {
    try {
      Option<QueryPlanningTracker> tracker = QueryPlanningTracker.get();
      return tracker.isDefined() ? tracker.get() : null;
    } catch (LinkageError e) {
      return null;
    }
  }

  private Statement currentStatement(Settings settings) {
    if (settings.manual) {
      synchronized (lock) {
        if (held == null || !held.key.equals(settings.key())) {
          held = new Statement(null, settings.key());
        }
        return held;
      }
    }
    Object planning = currentPlanning();
    if (planning == null) {
      return new Statement(null, settings.key()); // not inside a query planning: a cut for this load alone
    }
    Statement current = statement.get();
    if (current == null || current.planning.get() != planning || !current.key.equals(settings.key())) {
      current = new Statement(planning, settings.key());
      statement.set(current);
    }
    return current;
  }

  /** Drop the session's table and metadata caches (the next resolution loads every table again). */
  public void clearCaches() {
    synchronized (lock) {
      loadedTables.clear();
      parsed.clear();
    }
    refresh();
  }

  /** Forget the held cut and this thread's statement: the next load resolves a new (never older) cut. */
  void refresh() {
    synchronized (lock) {
      held = null;
    }
    statement.remove();
  }

  private static String tableName(Identifier ident) {
    List<String> parts = new ArrayList<>(java.util.Arrays.asList(ident.namespace()));
    parts.add(ident.name());
    return String.join(".", parts);
  }

  private static TableIdentifier icebergIdentifier(String name) {
    return TableIdentifier.parse(name);
  }

  /**
   * The scope (component cut) that serves {@code name} in the current statement, resolving it if
   * needed; null when {@code name} is not a table of the catalog (a selector such as {@code branch_x},
   * a metadata table, or nothing).
   */
  Scope scopeFor(String name, Settings settings) {
    Statement current = currentStatement(settings);
    Scope scope = current.scopes.get(name);
    if (scope == null) {
      scope = resolveScope(name, settings);
      if (scope == null) {
        return null;
      }
      for (String table : scope.tables.keySet()) {
        current.scopes.putIfAbsent(table, scope);
      }
      scope = current.scopes.get(name);
    }
    return scope;
  }

  private static final String JDBC_TABLES =
      "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables WHERE catalog_name = ?";
  private static final String JDBC_TABLES_ONLY = JDBC_TABLES + " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)";

  /**
   * Every table of the catalog with its current metadata file, in one query, when the catalog underneath
   * is Iceberg's JDBC catalog: the rows its {@code listTables} reads namespace by namespace (and its
   * {@code loadTable} one by one), read at once from its {@code iceberg_tables} table (views left out, as
   * {@code listTables} leaves them out), as {@code consistent_catalog.loading} does for pyiceberg's SQL
   * catalog. Null for another catalog, or when the query fails (the caller then lists through the API).
   */
  Map<String, String> listJdbcTables() {
    if (!jdbcListing) {
      return null;
    }
    if (icebergCatalog().getClass() != JdbcCatalog.class || catalogOptions.get(CatalogProperties.URI) == null) {
      jdbcListing = false; // another catalog (REST, Hive, Glue, a caching or custom one): its own API
      return null;
    }
    try {
      if (listingConnection == null) {
        listingConnection = new JdbcClientPool(1, catalogOptions.get(CatalogProperties.URI), catalogOptions);
      }
      Map<String, String> found = new TreeMap<>();
      listingConnection.run(
          connection -> {
            SQLException failed = null;
            for (String sql : jdbcTypeColumn ? new String[] {JDBC_TABLES_ONLY, JDBC_TABLES} : new String[] {JDBC_TABLES}) {
              try (PreparedStatement query = connection.prepareStatement(sql)) {
                query.setString(1, plainName);
                try (ResultSet rows = query.executeQuery()) {
                  while (rows.next()) {
                    String namespace = rows.getString(1);
                    String table = rows.getString(2);
                    found.put(namespace == null || namespace.isEmpty() ? table : namespace + "." + table, rows.getString(3));
                  }
                }
                return null;
              } catch (SQLException e) { // a catalog database from before Iceberg had views: no iceberg_type column
                found.clear();
                failed = e;
                jdbcTypeColumn = false;
              }
            }
            throw failed;
          });
      return found;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return null;
    } catch (SQLException | RuntimeException e) {
      jdbcTypeColumn = true; // maybe a passing failure (the database busy): try both queries again next time
      return null;
    }
  }

  /** Every table of the catalog, in every (nested) namespace, sorted; {@code listed} sees each one as it is found. */
  List<String> listAllTables(Consumer<String> listed) {
    List<String> found = new ArrayList<>();
    List<String[]> pending = new ArrayList<>();
    Collections.addAll(pending, Faults.retrying(plainName, "listing namespaces", retryDeadlineMs, this::listNamespaces));
    while (!pending.isEmpty()) {
      String[] namespace = pending.remove(pending.size() - 1);
      String what = "listing " + String.join(".", namespace);
      Identifier[] tables;
      try {
        tables = Faults.retrying(plainName, what, retryDeadlineMs, () -> listTables(namespace));
      } catch (RuntimeException e) { // dropped meanwhile (NoSuchNamespaceException is not a fault: not retried)
        continue;
      }
      for (Identifier ident : tables) {
        String table = tableName(ident);
        found.add(table);
        listed.accept(table);
      }
      try {
        Collections.addAll(pending, Faults.retrying(plainName, what, retryDeadlineMs, () -> listNamespaces(namespace)));
      } catch (RuntimeException e) {
        // dropped meanwhile, or a catalog without nested namespaces
      }
    }
    Collections.sort(found);
    return found;
  }

  private static String metadataLocation(org.apache.iceberg.Table table) {
    return table instanceof HasTableOperations
        ? ((HasTableOperations) table).operations().current().metadataFileLocation()
        : null;
  }

  private TableState stateOf(String name, org.apache.iceberg.Table table) {
    TableMetadata metadata = ((HasTableOperations) table).operations().current();
    String key = name + "@" + metadata.metadataFileLocation();
    TableState state = parsed.get(key);
    if (state == null) {
      state = TableState.fromMetadata(name, metadata);
      if (parsed.size() > 10_000) {
        parsed.clear();
      }
      parsed.put(key, state);
    }
    return state;
  }

  private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

  private static long cpuNanos() {
    try {
      return THREADS.isCurrentThreadCpuTimeSupported() ? THREADS.getCurrentThreadCpuTime() : 0L;
    } catch (UnsupportedOperationException e) {
      return 0L;
    }
  }

  /** One table loaded (or refreshed) for a resolution, with its state; {@code table} is null when it does not exist. */
  private static final class Loaded {
    final org.apache.iceberg.Table table;
    /** Null for a missing table or a metadata table. */
    final TableState state;
    final Thread thread;
    final long stateNanos;
    final long cpuNanos;

    Loaded(org.apache.iceberg.Table table, TableState state, Thread thread, long stateNanos, long cpuNanos) {
      this.table = table;
      this.state = state;
      this.thread = thread;
      this.stateNanos = stateNanos;
      this.cpuNanos = cpuNanos;
    }
  }

  /**
   * Load {@code name} (or refresh {@code cached}, its table from an earlier resolution, unless it already
   * holds {@code location}, the metadata file the listing just read for it) and build its state. What
   * the loading threads run: it takes no lock and touches only {@link #parsed}.
   */
  private Loaded load(String name, org.apache.iceberg.Table cached, String location, String level) {
    long cpu = cpuNanos();
    org.apache.iceberg.Table table;
    try {
      table = Faults.retrying(plainName, "loading " + name, retryDeadlineMs, () -> {
        if (cached == null) {
          return icebergCatalog().loadTable(icebergIdentifier(name));
        }
        if (location == null || !location.equals(metadataLocation(cached))) {
          cached.refresh();
        }
        return cached;
      });
    } catch (RuntimeException e) { // dropped meanwhile, or not a table at all (faults past the deadline: raised)
      table = null;
    }
    long loaded = System.nanoTime();
    TableState state = table == null || table instanceof BaseMetadataTable ? null : stateOf(name, table);
    if (state != null) {
      prepare(state, level);
    }
    long stateNanos = System.nanoTime() - loaded;
    return new Loaded(table, state, Thread.currentThread(), stateNanos, cpuNanos() - cpu);
  }

  /**
   * Compute what the resolver reads of every table, the effective barriers of the branch {@code level}
   * reads, here on the loading thread rather than later on the querying one. TableState keeps only what
   * it computed without error: a table whose barriers raise raises again when the resolver asks.
   */
  private static void prepare(TableState state, String level) {
    try {
      state.branch(Keys.REPEATABLE_READ.equals(level) ? Keys.MAIN_BRANCH : state.newestBranch());
    } catch (RuntimeException e) {
      // the resolver meets it again and decides (the table is left out of the cut with its error)
    }
  }

  /** The querying thread's Hadoop user when it is not the process's own (a doAs), else null. */
  private static UserGroupInformation impersonatedUser() {
    try {
      UserGroupInformation user = UserGroupInformation.getCurrentUser();
      return user.equals(UserGroupInformation.getLoginUser()) ? null : user;
    } catch (IOException | RuntimeException | LinkageError e) {
      return null;
    }
  }

  /** The loading threads: daemons that end after a minute idle; they carry the catalog's class loader. */
  private ThreadPoolExecutor loader() {
    if (loader == null) {
      ClassLoader classes = Thread.currentThread().getContextClassLoader();
      ClassLoader context = classes != null ? classes : ConsistentSparkCatalog.class.getClassLoader();
      AtomicInteger count = new AtomicInteger();
      String prefix = "consistent-catalog-" + catalogName + "-load-";
      ThreadPoolExecutor pool =
          new ThreadPoolExecutor(
              loadThreads,
              loadThreads,
              60,
              TimeUnit.SECONDS,
              new LinkedBlockingQueue<>(),
              runnable -> {
                Thread thread = new Thread(runnable, prefix + count.incrementAndGet());
                thread.setDaemon(true);
                thread.setContextClassLoader(context);
                return thread;
              });
      pool.allowCoreThreadTimeOut(true);
      loader = pool;
    }
    return loader;
  }

  /**
   * The table loads of one resolution (under {@link #lock}). With more than one load thread each load
   * is handed to the loading threads as soon as its name is known, and the querying thread runs those
   * none has started yet itself; with one, every load runs on the querying thread.
   */
  private final class Loads {
    private final Map<String, FutureTask<Loaded>> tasks = new HashMap<>();
    private final boolean parallel = loadThreads > 1;
    /** Whom the querying thread runs as if not the process's user (a Thrift server impersonating): the loads too. */
    private final UserGroupInformation user = parallel ? impersonatedUser() : null;

    /** Table -> its current metadata file, when the listing read them (a JDBC catalog), else empty. */
    Map<String, String> locations = Collections.emptyMap();
    /** The isolation level resolved for (which branch's barriers the loads prepare). */
    private final String level;

    Loads(String level) {
      this.level = level;
    }

    void start(String name) {
      if (tasks.containsKey(name)) {
        return;
      }
      org.apache.iceberg.Table cached = loadedTables.get(name);
      String location = locations.get(name);
      Callable<Loaded> body = () -> load(name, cached, location, level);
      FutureTask<Loaded> task =
          new FutureTask<>(user == null ? body : () -> user.doAs((PrivilegedExceptionAction<Loaded>) body::call));
      tasks.put(name, task);
      if (parallel) {
        loader().execute(task);
      }
    }

    /** Run {@code name}'s load on this thread unless it was started already (then return at once). */
    void run(String name) {
      start(name);
      tasks.get(name).run(); // a no-op when it runs or ran on a loading thread
    }

    /** {@code name}'s load (run here if no loading thread started it), waited for; the session's cache follows it. */
    Loaded get(String name) {
      run(name);
      FutureTask<Loaded> task = tasks.get(name);
      Loaded loaded;
      try {
        loaded = task.get();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted while loading " + name, e);
      } catch (ExecutionException e) {
        Throwable cause = e.getCause();
        if (cause instanceof RuntimeException) {
          throw (RuntimeException) cause;
        }
        if (cause instanceof AnalysisException) { // the catalog stayed unavailable: its one-line error
          throw Errors.raise((AnalysisException) cause);
        }
        if (cause instanceof Error) {
          throw (Error) cause;
        }
        throw new IllegalStateException(cause);
      }
      if (loaded.table == null) {
        loadedTables.remove(name);
      } else {
        loadedTables.put(name, loaded.table);
      }
      return loaded;
    }

    /** Drop the loads not started (the resolution ended early or failed). */
    void cancel() {
      for (Future<Loaded> task : tasks.values()) {
        task.cancel(false);
      }
    }
  }

  private volatile long[] lastTimings = new long[5];

  /**
   * What the last resolution spent, in nanoseconds: [0] listing the catalog, [1] loading or refreshing
   * the tables after the listing (until the last one is in), [2] building their states (summed over
   * the tables, inside [1]), [3] resolving the cut, [4] CPU time of the loading threads (what ran
   * beside the querying thread; 0 with load-threads=1).
   */
  public long[] lastResolutionTimings() {
    return lastTimings.clone();
  }

  /** Refresh every table of the catalog and resolve the cut of {@code name}'s lineage component. */
  Scope resolveScope(String name, Settings settings) {
    synchronized (lock) {
      Loads loads = new Loads(settings.level);
      try {
        return resolveScope(name, settings, loads);
      } finally {
        loads.cancel();
      }
    }
  }

  private Scope resolveScope(String name, Settings settings, Loads loads) {
    long started = System.nanoTime();
    long[] timings = new long[5];
    Thread querying = Thread.currentThread();
    Map<String, String> locations = listJdbcTables(); // one query, metadata files included (a JDBC catalog)
    List<String> names;
    if (locations != null) {
      names = new ArrayList<>(locations.keySet());
      loads.locations = locations;
    } else {
      List<String> listedBefore = new ArrayList<>();
      boolean[] listedAsked = new boolean[1];
      Consumer<String> found = table -> {}; // one after the other: every load waits for the whole listing
      if (loads.parallel) {
        loads.start(name); // the asked table loads while the catalog is listed
        found = table -> { // and, once the listing has found it (it is a table), every other table as it is found
          if (listedAsked[0]) {
            loads.start(table);
          } else if (table.equals(name)) {
            listedAsked[0] = true;
            listedBefore.forEach(loads::start);
          } else {
            listedBefore.add(table);
          }
        };
      }
      names = listAllTables(found);
    }
    long listed = System.nanoTime();
    timings[0] = listed - started;
    if (!names.contains(name)) {
      Loaded loaded = loads.get(name);
      if (loaded.table == null || loaded.table instanceof BaseMetadataTable) {
        loadedTables.remove(name);
        return null;
      }
      names.add(name); // created after the listing
      Collections.sort(names);
    }
    for (String other : names) {
      loads.start(other);
    }
    for (int i = names.size() - 1; i >= 0; i--) { // the loading threads take them first to last, this thread
      loads.run(names.get(i)); // runs those none has started yet, last to first, and waits only at the end
    }
    Map<String, org.apache.iceberg.Table> tables = new TreeMap<>();
    Map<String, TableState> states = new LinkedHashMap<>();
    for (String other : names) {
      Loaded loaded = loads.get(other);
      timings[2] += loaded.stateNanos;
      if (loaded.thread != querying) {
        timings[4] += loaded.cpuNanos;
      }
      if (loaded.state != null) {
        tables.put(other, loaded.table);
        states.put(other, loaded.state);
      }
    }
    loadedTables.keySet().retainAll(names);
    timings[1] = System.nanoTime() - listed;
    long resolving = System.nanoTime();
    if (!tables.containsKey(name)) {
      return null;
    }
    List<String> component = Resolver.component(name, states);
    Map<String, org.apache.iceberg.Table> scoped = new TreeMap<>();
    for (String table : component) {
      if (tables.containsKey(table)) {
        scoped.put(table, tables.get(table));
      }
    }
    if (settings.tag != null) {
      return tagScope(settings, scoped);
    }
    Resolver.ScopedCut cut;
    try {
      cut = Resolver.scopedCut(component, states, settings.level, settings.asOf);
    } catch (ConsistentException e) {
      throw Errors.raise(Errors.setting(catalogName + ": " + e.getMessage()));
    }
    Map<String, Long> snapshots = new HashMap<>();
    Map<String, String> branches = new HashMap<>();
    Map<String, Long> barriers = new HashMap<>();
    if (cut.cut != null) {
      for (TableCut t : cut.cut.tables.values()) {
        snapshots.put(t.table, t.snapshotId);
        branches.put(t.table, t.branch);
        barriers.put(t.table, t.barrier);
      }
    }
    Scope scope =
        new Scope(
            settings.level,
            cut.cut == null ? null : cut.cut.barrier,
            null,
            scoped,
            snapshots,
            branches,
            barriers,
            new LinkedHashMap<>(cut.blocked));
    timings[3] = System.nanoTime() - resolving;
    lastTimings = timings;
    return settings.latest() ? monotone(scope, cut.cut, component, states) : scope;
  }

  /**
   * Never serve a latest cut older than one this session already served — unless a revision rolled a
   * table of the component back (protocol §8: its {@code consistent.revision} changed), which legitimately
   * moves the component's cut back: then the session forgets every floor of the component.
   */
  private Scope monotone(Scope scope, Cut cut, List<String> component, Map<String, TableState> states) {
    for (String table : component) {
      Floor floor = floors.get(scope.level + "|" + table);
      TableState state = states.get(table);
      if (floor != null && state != null && floor.revision != state.revision()) {
        for (String member : component) {
          floors.remove(scope.level + "|" + member);
        }
        break;
      }
    }
    if (cut == null || cut.barrier == null) {
      return scope;
    }
    Scope previous = null;
    for (TableCut t : cut.tables.values()) {
      Floor floor = floors.get(scope.level + "|" + t.table);
      if (floor != null && cut.barrier < floor.barrier && floor.revision == t.revision) {
        previous = floor.scope;
        break;
      }
    }
    if (previous != null) {
      Map<String, ConsistentException> joined = new LinkedHashMap<>();
      for (String table : component) {
        if (!previous.tables.containsKey(table) && scope.tables.containsKey(table)) {
          joined.put(
              table,
              new ConsistentException(
                  ErrorKind.RESOLUTION,
                  table,
                  table + " joined the pipeline after this session read it at barrier " + previous.barrier
                      + " and is not complete at that barrier yet; a cut never goes back, so it is readable once its "
                      + "job catches up (or in a new session)"));
        }
      }
      return joined.isEmpty() ? previous : previous.withBlocked(joined);
    }
    for (TableCut t : cut.tables.values()) {
      floors.put(scope.level + "|" + t.table, new Floor(cut.barrier, t.revision, scope));
    }
    return scope;
  }

  private Scope tagScope(Settings settings, Map<String, org.apache.iceberg.Table> tables) {
    Map<String, Long> snapshots = new HashMap<>();
    Map<String, String> branches = new HashMap<>();
    Map<String, Long> barriers = new HashMap<>();
    Map<String, ConsistentException> blocked = new LinkedHashMap<>();
    for (Map.Entry<String, org.apache.iceberg.Table> e : tables.entrySet()) {
      SnapshotRef ref = e.getValue().refs().get(settings.tag);
      if (ref == null || !ref.isTag()) {
        String what = ref == null ? "carries no tag " + settings.tag : "has a branch, not a tag, named " + settings.tag;
        blocked.put(
            e.getKey(),
            new ConsistentException(
                ErrorKind.INVALID_INPUT,
                e.getKey(),
                e.getKey() + " " + what + " (a pin or retained cut tags only the tables it holds, and not those "
                    + "empty at the cut); list pins with `consistent-catalog pins` and retained cuts with `consistent-catalog "
                    + "retain --list`, or RESET "
                    + Settings.PREFIX + Settings.TAG));
      } else {
        snapshots.put(e.getKey(), ref.snapshotId());
        branches.put(e.getKey(), settings.tag);
      }
    }
    return new Scope(settings.level, null, settings.tag, tables, snapshots, branches, barriers, blocked);
  }

  private Table serve(Scope scope, String name) {
    ConsistentException blocked = scope.blocked.get(name);
    if (blocked != null) {
      throw Errors.raise(Errors.blocked(catalogName, plainName, name, blocked));
    }
    org.apache.iceberg.Table table = scope.tables.get(name);
    if (table == null || !scope.snapshots.containsKey(name)) {
      throw Errors.raise(
          Errors.analysis("CONSISTENT_CUT.NO_COMPLETE_BARRIER", catalogName + "." + name + " is not part of the cut"));
    }
    Long snapshotId = scope.snapshots.get(name);
    if (snapshotId == null) {
      return new EmptyTable(table, catalogName, plainName, name);
    }
    return new PinnedTable(table, snapshotId, catalogName, plainName, name);
  }

  // --- loading -----------------------------------------------------------------------------------------

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    if (BYPASS.get()) {
      return super.loadTable(ident);
    }
    String name = tableName(ident);
    Scope scope = scopeFor(name, settings());
    if (scope == null) {
      try {
        return readOnly(super.loadTable(ident), name); // a selector (branch_x, tag_x, ...), a metadata table, a changelog
      } catch (NoSuchTableException e) {
        throw notFound(ident, name, e);
      }
    }
    return serve(scope, name);
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
      throw Errors.raise(Errors.analysis("CONSISTENT_CUT.TABLE_NOT_FOUND", catalogName + "." + name + " does not "
          + "exist; check the name — SHOW TABLES IN " + catalogName + namespace + " lists the tables there"));
    }
  }

  /** Whether the table exists, without the one-line error {@link #loadTable} gives a missing one. */
  @Override
  public boolean tableExists(Identifier ident) {
    boolean bypassed = BYPASS.get();
    BYPASS.set(Boolean.TRUE);
    try {
      return super.tableExists(ident);
    } finally {
      BYPASS.set(bypassed);
    }
  }

  @Override
  public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
    return readOnly(bypassed(() -> super.loadTable(ident, version)), tableName(ident));
  }

  @Override
  public Table loadTable(Identifier ident, long timestamp) throws NoSuchTableException {
    return readOnly(bypassed(() -> super.loadTable(ident, timestamp)), tableName(ident));
  }

  private interface Load {
    Table load() throws NoSuchTableException;
  }

  private static Table bypassed(Load load) throws NoSuchTableException {
    boolean before = BYPASS.get();
    BYPASS.set(Boolean.TRUE);
    try {
      return load.load();
    } finally {
      BYPASS.set(before);
    }
  }

  /** A table Iceberg chose (a selector, VERSION AS OF): the same snapshot or branch, read-only. */
  private Table readOnly(Table table, String name) {
    if (!(table instanceof SparkTable) || table instanceof PinnedTable) {
      return table;
    }
    SparkTable spark = (SparkTable) table;
    if (spark.branch() != null) {
      return new PinnedTable(spark.table(), spark.branch(), catalogName, plainName, name);
    }
    return new PinnedTable(spark.table(), spark.snapshotId(), catalogName, plainName, name);
  }

  // --- the cut as rows, for the procedures ---------------------------------------------------------------

  /**
   * The cut the session serves now for {@code table}'s lineage component, one row per table of it; for every
   * table of the catalog (each component at its own cut) when {@code table} is null.
   */
  List<Object[]> describe(String table, boolean fresh) throws NoSuchTableException {
    Settings settings = settings();
    if (fresh) {
      refresh();
    }
    List<String> asked = new ArrayList<>();
    if (table != null) {
      asked.add(table);
    } else {
      synchronized (lock) { // the listing connection is shared with resolutions
        Map<String, String> listed = listJdbcTables();
        asked.addAll(listed != null ? listed.keySet() : listAllTables(name -> {}));
      }
    }
    List<Object[]> rows = new ArrayList<>();
    Set<String> shown = new HashSet<>();
    for (String name : asked) {
      if (shown.contains(name)) {
        continue;
      }
      Scope scope = scopeFor(name, settings);
      if (scope == null) {
        if (table == null) {
          continue; // dropped since the listing
        }
        TableIdentifier id = TableIdentifier.parse(name);
        throw new NoSuchTableException(Identifier.of(id.namespace().levels(), id.name()));
      }
      for (String member : scope.tables.keySet()) {
        if (!shown.add(member)) {
          continue;
        }
        ConsistentException blocked = scope.blocked.get(member);
        rows.add(
            new Object[] {
              member,
              scope.snapshots.get(member),
              scope.barriers.get(member),
              scope.branches.get(member),
              scope.barrier,
              scope.tag != null ? "tag " + scope.tag : scope.level,
              blocked == null ? "ok" : Errors.errorClass(blocked.kind()) + ": " + blocked.getMessage()
            });
      }
    }
    return rows;
  }

  // --- procedures ----------------------------------------------------------------------------------------

  @Override
  public Procedure loadProcedure(Identifier ident) throws NoSuchProcedureException {
    String[] namespace = ident.namespace();
    if (namespace.length == 1 && namespace[0].equalsIgnoreCase("system")) {
      String procedure = ident.name().toLowerCase(java.util.Locale.ROOT);
      if (procedure.equals("refresh_cut")) {
        return new CutProcedures.RefreshCut(this);
      }
      if (procedure.equals("current_cut")) {
        return new CutProcedures.CurrentCut(this);
      }
    }
    throw Errors.raise(
        Errors.readOnly(
            catalogName,
            plainName,
            "CALL " + catalogName + "." + String.join(".", namespace) + "." + ident.name()
                + " (this catalog has only system.refresh_cut() and system.current_cut([table]); run Iceberg's "
                + "procedures as CALL " + plainName + ".system." + ident.name() + "(...))"));
  }

  // --- everything that would change the catalog is refused -------------------------------------------

  private RuntimeException refused(String what) {
    return Errors.raise(Errors.readOnly(catalogName, plainName, what));
  }

  @Override
  public Table createTable(Identifier ident, StructType schema, Transform[] transforms, Map<String, String> properties) {
    throw refused("CREATE TABLE " + catalogName + "." + tableName(ident));
  }

  @Override
  public StagedTable stageCreate(Identifier ident, StructType schema, Transform[] transforms, Map<String, String> properties) {
    throw refused("CREATE TABLE " + catalogName + "." + tableName(ident));
  }

  @Override
  public StagedTable stageReplace(Identifier ident, StructType schema, Transform[] transforms, Map<String, String> properties) {
    throw refused("REPLACE TABLE " + catalogName + "." + tableName(ident));
  }

  @Override
  public StagedTable stageCreateOrReplace(
      Identifier ident, StructType schema, Transform[] transforms, Map<String, String> properties) {
    throw refused("CREATE OR REPLACE TABLE " + catalogName + "." + tableName(ident));
  }

  @Override
  public Table alterTable(Identifier ident, TableChange... changes) {
    throw refused("ALTER TABLE " + catalogName + "." + tableName(ident));
  }

  @Override
  public boolean dropTable(Identifier ident) {
    throw refused("DROP TABLE " + catalogName + "." + tableName(ident));
  }

  @Override
  public boolean purgeTable(Identifier ident) {
    throw refused("DROP TABLE ... PURGE " + catalogName + "." + tableName(ident));
  }

  @Override
  public void renameTable(Identifier from, Identifier to) {
    throw refused("ALTER TABLE " + catalogName + "." + tableName(from) + " RENAME");
  }

  @Override
  public void createNamespace(String[] namespace, Map<String, String> metadata) {
    throw refused("CREATE NAMESPACE " + catalogName + "." + String.join(".", namespace));
  }

  @Override
  public void alterNamespace(String[] namespace, NamespaceChange... changes) {
    throw refused("ALTER NAMESPACE " + catalogName + "." + String.join(".", namespace));
  }

  @Override
  public boolean dropNamespace(String[] namespace, boolean cascade) {
    throw refused("DROP NAMESPACE " + catalogName + "." + String.join(".", namespace));
  }

  @Override
  public View createView(
      Identifier ident,
      String sql,
      String currentCatalog,
      String[] currentNamespace,
      StructType schema,
      String[] queryColumnNames,
      String[] columnAliases,
      String[] columnComments,
      Map<String, String> properties) {
    throw refused("CREATE VIEW " + catalogName + "." + tableName(ident));
  }

  @Override
  public View replaceView(
      Identifier ident,
      String sql,
      String currentCatalog,
      String[] currentNamespace,
      StructType schema,
      String[] queryColumnNames,
      String[] columnAliases,
      String[] columnComments,
      Map<String, String> properties) {
    throw refused("CREATE OR REPLACE VIEW " + catalogName + "." + tableName(ident));
  }

  @Override
  public View alterView(Identifier ident, ViewChange... changes) {
    throw refused("ALTER VIEW " + catalogName + "." + tableName(ident));
  }

  @Override
  public boolean dropView(Identifier ident) {
    throw refused("DROP VIEW " + catalogName + "." + tableName(ident));
  }

  @Override
  public void renameView(Identifier from, Identifier to) {
    throw refused("ALTER VIEW " + catalogName + "." + tableName(from) + " RENAME");
  }
}
