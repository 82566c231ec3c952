package io.consistentcatalog.spark;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.Cut;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Resolver;
import io.consistentcatalog.core.TableCut;
import io.consistentcatalog.core.TableState;
import java.lang.ref.WeakReference;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.iceberg.BaseMetadataTable;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.SnapshotRef;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.spark.SparkCatalog;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.QueryPlanningTracker;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchProcedureException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
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
  private static final String SUFFIX = "_consistent";
  private static final ThreadLocal<Boolean> BYPASS = ThreadLocal.withInitial(() -> Boolean.FALSE);

  private String catalogName;
  private String plainName;
  private final Map<String, String> defaults = new HashMap<>();

  private final Object lock = new Object();
  private final ThreadLocal<Statement> statement = new ThreadLocal<>();
  private Statement held;
  private final Map<String, Floor> floors = new HashMap<>();
  private final Map<String, TableState> parsed = new HashMap<>();
  /** The session's loaded tables: refreshed at each resolution (one catalog query each, a metadata read only when changed). */
  private final Map<String, org.apache.iceberg.Table> loadedTables = new HashMap<>();

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
      Option<String> cut = session.conf().getOption(Settings.PREFIX + "cut");
      if (cut.isDefined() && cut.get().trim().equalsIgnoreCase("latest")) {
        session.conf().unset(Settings.PREFIX + "cut");
        refresh();
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

  /** Every table of the catalog, in every (nested) namespace, sorted. */
  List<String> listAllTables() {
    List<String> found = new ArrayList<>();
    List<String[]> pending = new ArrayList<>();
    Collections.addAll(pending, listNamespaces());
    while (!pending.isEmpty()) {
      String[] namespace = pending.remove(pending.size() - 1);
      try {
        for (Identifier ident : listTables(namespace)) {
          found.add(tableName(ident));
        }
        Collections.addAll(pending, listNamespaces(namespace));
      } catch (NoSuchNamespaceException | RuntimeException e) {
        // dropped meanwhile, or a catalog without nested namespaces
      }
    }
    Collections.sort(found);
    return found;
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

  /** A table of the catalog, from the session's cache (refreshed) or loaded; null when it does not exist. */
  private org.apache.iceberg.Table table(String name) {
    org.apache.iceberg.Table table = loadedTables.get(name);
    try {
      if (table == null) {
        table = icebergCatalog().loadTable(icebergIdentifier(name));
        loadedTables.put(name, table);
      } else {
        table.refresh();
      }
      return table;
    } catch (RuntimeException e) { // dropped meanwhile, or not a table at all
      loadedTables.remove(name);
      return null;
    }
  }

  private volatile long[] lastTimings = new long[4];

  /** Nanoseconds the last resolution spent listing the catalog, loading/refreshing tables, parsing states, resolving. */
  public long[] lastResolutionTimings() {
    return lastTimings.clone();
  }

  /** Refresh every table of the catalog and resolve the cut of {@code name}'s lineage component. */
  Scope resolveScope(String name, Settings settings) {
    synchronized (lock) {
      long started = System.nanoTime();
      long[] timings = new long[4];
      List<String> names = listAllTables();
      timings[0] = System.nanoTime() - started;
      if (!names.contains(name)) {
        org.apache.iceberg.Table table = table(name);
        if (table == null || table instanceof BaseMetadataTable) {
          loadedTables.remove(name);
          return null;
        }
        names.add(name); // created after the listing
        Collections.sort(names);
      }
      loadedTables.keySet().retainAll(names);
      Map<String, org.apache.iceberg.Table> tables = new TreeMap<>();
      Map<String, TableState> states = new LinkedHashMap<>();
      for (String other : names) {
        long before = System.nanoTime();
        org.apache.iceberg.Table table = table(other);
        long loaded = System.nanoTime();
        timings[1] += loaded - before;
        if (table != null && !(table instanceof BaseMetadataTable)) {
          tables.put(other, table);
          states.put(other, stateOf(other, table));
        }
        timings[2] += System.nanoTime() - loaded;
      }
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
      return settings.latest() ? monotone(scope, cut.cut, component) : scope;
    }
  }

  /** Never serve a latest cut older than one this session already served (unless a revision rolled back). */
  private Scope monotone(Scope scope, Cut cut, List<String> component) {
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
                    + "empty at the cut); list them with consistent-catalog pins / retained, or RESET "
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
      return readOnly(super.loadTable(ident), name); // a selector (branch_x, tag_x, ...), a metadata table, a changelog
    }
    return serve(scope, name);
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

  /** The cut the session serves for {@code table}'s component now (resolving it when needed). */
  List<Object[]> describe(String table, boolean fresh) throws NoSuchTableException {
    Settings settings = settings();
    if (fresh) {
      refresh();
    }
    Scope scope = scopeFor(table, settings);
    if (scope == null) {
      TableIdentifier id = TableIdentifier.parse(table);
      throw new NoSuchTableException(Identifier.of(id.namespace().levels(), id.name()));
    }
    List<Object[]> rows = new ArrayList<>();
    for (String name : scope.tables.keySet()) {
      ConsistentException blocked = scope.blocked.get(name);
      rows.add(
          new Object[] {
            name,
            scope.snapshots.get(name),
            scope.barriers.get(name),
            scope.branches.get(name),
            scope.barrier,
            scope.tag != null ? "tag " + scope.tag : scope.level,
            blocked == null ? "ok" : blocked.pythonName() + ": " + blocked.getMessage()
          });
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
                + " (this catalog has only system.refresh_cut() and system.current_cut(table); run Iceberg's "
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
