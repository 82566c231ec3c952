package io.consistentcatalog.spark.read;

import io.consistentcatalog.spark.context.StatementState;
import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.Names;
import io.consistentcatalog.spark.context.Settings;
import io.consistentcatalog.spark.context.CatalogStates;
import io.consistentcatalog.spark.context.StatementLoads;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Resolver;
import io.consistentcatalog.core.TableState;
import java.lang.ref.WeakReference;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.iceberg.SnapshotRef;
import org.apache.iceberg.Table;
import org.apache.spark.sql.catalyst.QueryPlanningTracker;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import scala.Option;

/**
 * The cuts a Spark session is served: which cut each table load of a statement gets.
 *
 * <p>The first time a statement loads a table, the session loads the catalog ({@link TableLoader}) and
 * resolves the cut of that table's lineage component (every table connected to it through
 * {@code consistent.sources}, upstream, downstream and siblings) with the JVM port of the Python resolver
 * ({@link Resolver#scopedCut}: {@code ConsistentCatalog.resolve(component)}, leaving out tables that cannot
 * take part); with {@code spark.sql.consistent.tag} set, every table of the component is read at that tag
 * instead. Every table of that component the statement loads is served at that cut ({@link Scope}); a
 * table of another component gets that component's own cut.
 *
 * <p>A statement is one query planning (one Spark QueryExecution). With {@code refresh=manual} the cut is
 * held for the session until {@link #refresh}. Latest cuts never go back ({@link CutFloors}).
 */
public final class CutSession implements CatalogStates {
  /** The cuts of one statement (or, with refresh=manual, of the session until refresh_cut()). */
  private static final class Statement {
    final WeakReference<Object> planning;
    final String key;
    /** Table -> the scope serving it in this statement. */
    final Map<String, Scope> scopes = new ConcurrentHashMap<>();
    /** What the statement's last resolution loaded (every table of the catalog), for its epoch; null before one. */
    volatile StatementLoads loads;

    Statement(Object planning, String key) {
      this.planning = new WeakReference<>(planning);
      this.key = key;
    }
  }

  private final String catalogName;
  private final String plainName;
  private final TableLoader loader;
  /** Guards the held cut, the floors and the loader: one resolution at a time. */
  private final Object lock = new Object();
  private Statement held;
  private final CutFloors floors = new CutFloors();
  private volatile ResolutionTimings lastTimings = ResolutionTimings.NONE;

  public CutSession(String catalogName, String plainName, TableLoader loader) {
    this.catalogName = catalogName;
    this.plainName = plainName;
    this.loader = loader;
  }

  /** What the last resolution that resolved a cut spent ({@link ResolutionTimings#NONE} before any). */
  public ResolutionTimings lastTimings() {
    return lastTimings;
  }

  /** Drop the session's table and metadata caches (the next resolution loads every table again). */
  public void clearCaches() {
    synchronized (lock) {
      loader.clear();
    }
    refresh();
  }

  /** Forget the held cut and this thread's statement: the next load resolves a new (never older) cut. */
  public void refresh() {
    synchronized (lock) {
      held = null;
    }
    StatementState.current().cut(this, null);
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
    Statement current = (Statement) StatementState.current().cut(this); // this thread's statement
    if (current == null || current.planning.get() != planning || !current.key.equals(settings.key())) {
      current = new Statement(planning, settings.key());
      StatementState.current().cut(this, current);
    }
    return current;
  }

  /**
   * {@code name} as the current statement serves it: pinned to its cut's snapshot, or empty at the cut;
   * null when {@code name} is not a table of the catalog (a selector such as {@code branch_x}, a metadata
   * table, or nothing). A table left out of the cut raises its one-line error.
   */
  public org.apache.spark.sql.connector.catalog.Table tableAtCut(String name, Settings settings) {
    Scope scope = scopeFor(name, settings);
    if (scope == null) {
      return null;
    }
    ConsistentException blocked = scope.blocked.get(name);
    if (blocked != null) {
      throw Errors.raise(Errors.blocked(catalogName, plainName, name, blocked));
    }
    Scope.Member member = scope.members.get(name);
    if (member == null || !member.inCut) {
      throw Errors.raise(
          Errors.analysis("CONSISTENT_CUT.NO_COMPLETE_BARRIER", catalogName + "." + name + " is not part of the cut"));
    }
    if (member.snapshotId == null) {
      return new EmptyTable(member.table, catalogName, plainName, name);
    }
    return new PinnedTable(member.table, member.snapshotId, catalogName, plainName, name, true);
  }

  /**
   * The scope (component cut) that serves {@code name} in the current statement, resolving it if
   * needed; null when {@code name} is not a table of the catalog.
   */
  private Scope scopeFor(String name, Settings settings) {
    Statement current = currentStatement(settings);
    Scope scope = current.scopes.get(name);
    if (scope == null) {
      scope = resolveScope(name, settings, current);
      if (scope == null) {
        return null;
      }
      for (String table : scope.members.keySet()) {
        current.scopes.putIfAbsent(table, scope);
      }
      // a table the scope leaves out without holding it (one that joined the component after the session's
      // earlier, newer cut: CutFloors) is served by it too, as its one-line refusal, never by Iceberg's load
      for (String table : scope.blocked.keySet()) {
        current.scopes.putIfAbsent(table, scope);
      }
      scope = current.scopes.get(name);
    }
    return scope;
  }

  /** Load every table of the catalog and resolve the cut of {@code name}'s lineage component. */
  private Scope resolveScope(String name, Settings settings, Statement statement) {
    synchronized (lock) {
      LoadedCatalog loaded = loader.loadAll(name, settings.level);
      if (loaded == null) {
        return null;
      }
      if (statement.planning.get() != null) { // a held cut's loads (refresh=manual) may be old: never planned from
        statement.loads = new StatementLoads(new TreeMap<>(loaded.tables), new LinkedHashMap<>(loaded.states));
      }
      long resolving = System.nanoTime();
      List<String> component = Resolver.component(name, loaded.states);
      Map<String, Table> scoped = new TreeMap<>();
      for (String table : component) {
        if (loaded.tables.containsKey(table)) {
          scoped.put(table, loaded.tables.get(table));
        }
      }
      if (settings.tag != null) {
        return tagScope(settings, scoped);
      }
      Resolver.ScopedCut cut;
      try {
        cut = Resolver.scopedCut(component, loaded.states, settings.level, settings.asOf);
      } catch (ConsistentException e) {
        throw Errors.raise(Errors.setting(catalogName + ": " + e.getMessage()));
      }
      Scope scope = Scope.ofCut(settings.level, cut.cut, scoped, cut.blocked);
      lastTimings = loaded.timings.withResolveNanos(System.nanoTime() - resolving);
      return settings.latest() ? floors.apply(scope, cut.cut, component, loaded.states) : scope;
    }
  }

  /** Every table of the component at the tag {@code settings.tag}; a table without that tag is left out. */
  private static Scope tagScope(Settings settings, Map<String, Table> tables) {
    Map<String, Scope.Member> members = new TreeMap<>();
    Map<String, ConsistentException> blocked = new LinkedHashMap<>();
    for (Map.Entry<String, Table> e : tables.entrySet()) {
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
        members.put(e.getKey(), Scope.Member.outside(e.getValue()));
      } else {
        members.put(e.getKey(), Scope.Member.at(e.getValue(), ref.snapshotId(), settings.tag, null));
      }
    }
    return new Scope(settings.level, null, settings.tag, members, blocked);
  }

  /**
   * The cut the session serves now for {@code table}'s lineage component, one row per table of it; for every
   * table of the catalog (each component at its own cut) when {@code table} is null. {@code fresh}: forget
   * the held cut first (refresh_cut).
   */
  public List<CutRow> describe(String table, boolean fresh, Settings settings) throws NoSuchTableException {
    if (fresh) {
      refresh();
    }
    List<String> asked = new ArrayList<>();
    if (table != null) {
      asked.add(table);
    } else {
      synchronized (lock) { // the listing connection is shared with resolutions
        asked.addAll(loader.listTableNames());
      }
    }
    List<CutRow> rows = new ArrayList<>();
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
        throw new NoSuchTableException(Names.sparkIdentifier(name));
      }
      for (Map.Entry<String, Scope.Member> e : scope.members.entrySet()) {
        String member = e.getKey();
        if (!shown.add(member)) {
          continue;
        }
        Scope.Member at = e.getValue();
        ConsistentException blocked = scope.blocked.get(member);
        rows.add(
            new CutRow(
                member,
                at.snapshotId,
                at.barrier,
                at.branch,
                scope.barrier,
                scope.tag != null ? "tag " + scope.tag : scope.level,
                blocked == null ? "ok" : Errors.errorClass(blocked.kind()) + ": " + blocked.getMessage()));
      }
    }
    return rows;
  }

  @Override
  public StatementLoads statementLoads(String name) {
    Object planning = currentPlanning();
    Statement current = planning == null ? null : (Statement) StatementState.current().cut(this);
    if (current == null || current.planning.get() != planning) {
      return null;
    }
    StatementLoads loads = current.loads;
    return loads == null || loads.state(name) == null ? null : loads;
  }

  /** Every table of the catalog as loaded now (a registration's cycle check); null when {@code name} is not a table. */
  public Map<String, TableState> catalogStates(String name) {
    synchronized (lock) {
      LoadedCatalog loaded = loader.loadAll(name, io.consistentcatalog.core.Keys.DEFAULT_LEVEL);
      return loaded == null ? null : loaded.states;
    }
  }
}
