package io.consistentcatalog.spark.read;

import io.consistentcatalog.spark.context.CatalogOptions;
import io.consistentcatalog.spark.context.Faults;
import io.consistentcatalog.spark.context.Names;
import io.consistentcatalog.core.Keys;
import io.consistentcatalog.core.TableState;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.iceberg.BaseMetadataTable;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.exceptions.ServiceFailureException;
import org.apache.iceberg.spark.SparkCatalog;
import org.apache.spark.sql.connector.catalog.Identifier;

/**
 * Loads every table of the catalog for a resolution: resolving needs them all (a downstream table names
 * its sources, not the other way round).
 *
 * <p>The first step lists the catalog. Over Iceberg's JDBC catalog that is one query that also reads each
 * table's current metadata file ({@link JdbcTableListing}), and a table the session holds at that file
 * already is not refreshed; other catalogs are listed through their API (the asked table loading
 * meanwhile, the others from when the listing finds them). The loads (or, for a table the session loaded
 * before, refreshes) run on {@code load-threads} daemon threads ({@link ResolutionLoads}), as the querying
 * thread's Hadoop user; the querying thread runs those no loading thread has started yet. Over REST with
 * Iceberg's table cache (1.11+) a table the session holds is refreshed by a conditional load (a 304 when
 * unchanged): those refreshes wait on the network, not the CPU, so they run on {@code refresh-threads}
 * threads of their own (default 64), and they start before the listing (the tables held are known; one the
 * listing no longer finds is left out as before), so the warm statement costs the listing's round trips
 * and about {@code tables / refresh-threads} more, not one round trip per {@code load-threads} tables. A table's state
 * is parsed from the TableMetadata its load holds, and kept by metadata file. Catalog faults are waited
 * out ({@link Faults}, catalog option {@code consistent.retry-deadline}).
 *
 * <p>Not thread-safe but for the loading threads it starts itself: {@link CutSession} calls it under its lock.
 */
public final class TableLoader {
  private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

  /** The catalog whose tables are loaded (its Iceberg catalog, its namespaces and tables). */
  private final SparkCatalog catalog;
  private final CatalogOptions options;
  private final JdbcTableListing jdbcListing;
  /** TableStates by table and metadata file (built by the loading threads, hence concurrent). */
  private final Map<String, TableState> parsed = new ConcurrentHashMap<>();
  /**
   * The session's loaded tables: refreshed at each resolution (one catalog query each, or none when the
   * listing read the same metadata file; a metadata read only when changed).
   */
  private final Map<String, Table> loadedTables = new HashMap<>();
  /**
   * Whether a table the session holds is refreshed by loading it again through the catalog: over REST with an
   * Iceberg that keeps loaded tables with their ETags (1.11 and later, {@code RESTTableCache}), a load sends
   * {@code If-None-Match} and an unchanged table answers 304 with no body, where {@code refresh()} would
   * fetch the whole metadata again. The cache holds {@code rest-table-cache.max-entries} tables (Iceberg's
   * default 100); a catalog with more tables sets it higher.
   */
  private final boolean conditionalReloads;
  private ThreadPoolExecutor pool;
  /** The threads of the conditional refreshes ({@link #conditionalRefresh}), created on first use. */
  private ThreadPoolExecutor refreshPool;

  public TableLoader(SparkCatalog catalog, CatalogOptions options) {
    this.catalog = catalog;
    this.options = options;
    this.jdbcListing = new JdbcTableListing(options.plainName, options.icebergOptions);
    this.conditionalReloads = "rest".equalsIgnoreCase(options.icebergOptions.get("type")) && restTableCache();
  }

  private static boolean restTableCache() {
    try {
      Class.forName("org.apache.iceberg.rest.RESTTableCache", false, TableLoader.class.getClassLoader());
      return true;
    } catch (ClassNotFoundException e) {
      return false;
    }
  }

  /** How many tables a resolution loads at once (1: one after the other on the querying thread). */
  int loadThreads() {
    return options.loadThreads;
  }

  /** How many conditional refreshes a resolution runs at once (1: on the querying thread). */
  int refreshThreads() {
    return options.refreshThreads;
  }

  /**
   * Whether refreshing {@code cached} (the session's table, or null) is a conditional load: over REST with
   * Iceberg's table cache, a table the session holds that the listing read no metadata file for.
   */
  boolean conditionalRefresh(Table cached, String location) {
    return conditionalReloads && cached != null && location == null;
  }

  /** The tables the session holds whose refresh is a conditional load (started before the listing), sorted. */
  List<String> heldForConditionalRefresh() {
    if (!conditionalReloads) {
      return Collections.emptyList();
    }
    List<String> held = new ArrayList<>(loadedTables.keySet());
    Collections.sort(held);
    return held;
  }

  /** Drop the loaded tables and parsed states (the next resolution loads every table again). */
  void clear() {
    loadedTables.clear();
    parsed.clear();
  }

  /**
   * List the catalog and load every table of it, {@code name} included, preparing each state for
   * {@code level}. Null when {@code name} is not a table of the catalog (a selector such as
   * {@code branch_x}, a metadata table, or nothing).
   */
  LoadedCatalog loadAll(String name, String level) {
    ResolutionLoads loads = new ResolutionLoads(this, level);
    try {
      return loadAll(name, loads);
    } finally {
      loads.cancel();
    }
  }

  private LoadedCatalog loadAll(String name, ResolutionLoads loads) {
    long started = System.nanoTime();
    Thread querying = Thread.currentThread();
    if (conditionalReloads) { // REST (no JDBC listing): the asked table, then every table the session holds,
      loads.start(name); // refreshed by conditional loads that wait on the network while the catalog is listed
      heldForConditionalRefresh().forEach(loads::start);
    }
    Map<String, String> locations = jdbcListing.list(catalog.icebergCatalog()); // one query, metadata files included
    List<String> names;
    if (locations != null) {
      names = new ArrayList<>(locations.keySet());
      loads.locations(locations);
    } else {
      List<String> listedBefore = new ArrayList<>();
      boolean[] listedAsked = new boolean[1];
      Consumer<String> found = table -> {}; // one after the other: every load waits for the whole listing
      if (loads.parallel()) {
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
    long listNanos = listed - started;
    if (!names.contains(name)) {
      LoadedTable loaded = loads.get(name);
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
    Map<String, Table> tables = new TreeMap<>();
    Map<String, TableState> states = new LinkedHashMap<>();
    long stateNanos = 0L;
    long workerCpuNanos = 0L;
    for (String other : names) {
      LoadedTable loaded = loads.get(other);
      stateNanos += loaded.stateNanos;
      if (loaded.thread != querying) {
        workerCpuNanos += loaded.cpuNanos;
      }
      if (loaded.state != null) {
        tables.put(other, loaded.table);
        states.put(other, loaded.state);
      }
    }
    loadedTables.keySet().retainAll(names);
    long loadNanos = System.nanoTime() - listed;
    if (!tables.containsKey(name)) {
      return null;
    }
    return new LoadedCatalog(tables, states, new ResolutionTimings(listNanos, loadNanos, stateNanos, 0L, workerCpuNanos));
  }

  /** Every table of the catalog, sorted: one JDBC query where the catalog allows, else through its API. */
  List<String> listTableNames() {
    Map<String, String> listed = jdbcListing.list(catalog.icebergCatalog());
    return listed != null ? new ArrayList<>(listed.keySet()) : listAllTables(name -> {});
  }

  /** Every table of the catalog, in every (nested) namespace, sorted; {@code listed} sees each one as it is found. */
  private List<String> listAllTables(Consumer<String> listed) {
    String plainName = options.plainName;
    long deadline = options.retryDeadlineMs;
    List<String> found = new ArrayList<>();
    List<String[]> pending = new ArrayList<>();
    Collections.addAll(pending, Faults.retrying(plainName, "listing namespaces", deadline, catalog::listNamespaces));
    while (!pending.isEmpty()) {
      String[] namespace = pending.remove(pending.size() - 1);
      String what = "listing " + String.join(".", namespace);
      Identifier[] tables;
      try {
        tables = Faults.retrying(plainName, what, deadline, () -> catalog.listTables(namespace));
      } catch (RuntimeException e) { // dropped meanwhile (NoSuchNamespaceException is not a fault: not retried)
        continue;
      }
      for (Identifier ident : tables) {
        String table = Names.tableName(ident);
        found.add(table);
        listed.accept(table);
      }
      try {
        Collections.addAll(pending, Faults.retrying(plainName, what, deadline, () -> catalog.listNamespaces(namespace)));
      } catch (RuntimeException e) {
        // dropped meanwhile, or a catalog without nested namespaces
      }
    }
    Collections.sort(found);
    return found;
  }

  /** The session's table {@code name} from an earlier resolution, or null. */
  Table cached(String name) {
    return loadedTables.get(name);
  }

  /** Keep {@code table} as the session's {@code name} for the next resolution (null: forget it). */
  void remember(String name, Table table) {
    if (table == null) {
      loadedTables.remove(name);
    } else {
      loadedTables.put(name, table);
    }
  }

  /**
   * Load {@code name} (or refresh {@code cached}, its table from an earlier resolution, unless it already
   * holds {@code location}, the metadata file the listing just read for it) and build its state. What
   * the loading threads run: it takes no lock and touches only {@link #parsed}.
   */
  LoadedTable load(String name, Table cached, String location, String level) {
    long cpu = cpuNanos();
    Table table;
    try {
      table = Faults.retrying(options.plainName, "loading " + name, options.retryDeadlineMs, () -> {
        if (cached == null || (conditionalReloads && location == null)) {
          return catalog.icebergCatalog().loadTable(Names.icebergIdentifier(name));
        }
        if (location == null || !location.equals(metadataLocation(cached))) {
          cached.refresh();
        }
        return cached;
      });
    } catch (ServiceFailureException e) {
      throw e; // the server failed at the load (a 500): its error, never taken for a missing table
    } catch (RuntimeException e) { // dropped meanwhile, or not a table at all (faults past the deadline: raised)
      table = null;
    }
    long loaded = System.nanoTime();
    TableState state = table == null || table instanceof BaseMetadataTable ? null : stateOf(name, table);
    if (state != null) {
      prepare(state, level);
    }
    long stateNanos = System.nanoTime() - loaded;
    return new LoadedTable(table, state, Thread.currentThread(), stateNanos, cpuNanos() - cpu);
  }

  private static String metadataLocation(Table table) {
    return table instanceof HasTableOperations
        ? ((HasTableOperations) table).operations().current().metadataFileLocation()
        : null;
  }

  private TableState stateOf(String name, Table table) {
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

  private static long cpuNanos() {
    try {
      return THREADS.isCurrentThreadCpuTimeSupported() ? THREADS.getCurrentThreadCpuTime() : 0L;
    } catch (UnsupportedOperationException e) {
      return 0L;
    }
  }

  /** The querying thread's Hadoop user when it is not the process's own (a doAs), else null. */
  static UserGroupInformation impersonatedUser() {
    try {
      UserGroupInformation user = UserGroupInformation.getCurrentUser();
      return user.equals(UserGroupInformation.getLoginUser()) ? null : user;
    } catch (IOException | RuntimeException | LinkageError e) {
      return null;
    }
  }

  /** The loading threads: daemons that end after a minute idle; they carry the catalog's class loader. */
  ThreadPoolExecutor executor() {
    if (pool == null) {
      pool = newPool("load", options.loadThreads);
    }
    return pool;
  }

  /** The threads of the conditional refreshes ({@code refresh-threads}), as {@link #executor()}'s. */
  ThreadPoolExecutor refreshExecutor() {
    if (refreshPool == null) {
      refreshPool = newPool("refresh", options.refreshThreads);
    }
    return refreshPool;
  }

  private ThreadPoolExecutor newPool(String kind, int threads) {
    ClassLoader classes = Thread.currentThread().getContextClassLoader();
    ClassLoader context = classes != null ? classes : TableLoader.class.getClassLoader();
    AtomicInteger count = new AtomicInteger();
    String prefix = "consistent-catalog-" + options.catalogName + "-" + kind + "-";
    ThreadPoolExecutor created =
        new ThreadPoolExecutor(
            threads,
            threads,
            60,
            TimeUnit.SECONDS,
            new LinkedBlockingQueue<>(),
            runnable -> {
              Thread thread = new Thread(runnable, prefix + count.incrementAndGet());
              thread.setDaemon(true);
              thread.setContextClassLoader(context);
              return thread;
            });
    created.allowCoreThreadTimeOut(true);
    return created;
  }
}
