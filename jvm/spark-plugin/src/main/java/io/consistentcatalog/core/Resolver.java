package io.consistentcatalog.core;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Function;

/**
 * Consistent cuts over a set of tables: a port of {@code consistent_catalog.resolver.resolve} and of
 * the upstream closure {@code ConsistentCatalog.resolve} loads. Pure: takes TableStates, returns a Cut
 * or throws a {@link ConsistentException} whose kind names the Python exception class.
 */
public final class Resolver {
  private Resolver() {}

  public static final List<String> LEVELS =
      Collections.unmodifiableList(Arrays.asList(Keys.REPEATABLE_READ, Keys.READ_COMMITTED, Keys.READ_UNCOMMITTED));

  public static String checkLevel(String level) {
    if (level == null || !LEVELS.contains(level)) {
      throw new ConsistentException(
          ErrorKind.INVALID_INPUT,
          "unknown isolation level " + (level == null ? "None" : Py.repr(level)) + "; use one of " + String.join(", ", LEVELS));
    }
    return level;
  }

  static String branchFor(TableState state, String level) {
    return Keys.REPEATABLE_READ.equals(level) ? Keys.MAIN_BRANCH : state.newestBranch();
  }

  /** Why {@code state} has no watermark, naming the root or job that holds it back (the error's table) and what to do. */
  static ConsistentException noWatermarkError(TableState state, Map<String, TableState> known) {
    if (state.isRoot()) {
      return new ConsistentException(
          ErrorKind.NO_WATERMARK,
          state.identifier,
          state.identifier + " is an empty root table with no " + Keys.WATERMARK + ", so it blocks every consistent "
              + "cut that includes it; ingest into it, or advance its watermark",
          null,
          true);
    }
    for (String source : state.sources()) {
      TableState upstream = known.get(source);
      if (upstream != null && upstream.watermark() == null) {
        ConsistentException cause = noWatermarkError(upstream, known);
        return new ConsistentException(
            ErrorKind.NO_WATERMARK,
            cause.table(),
            state.identifier + " has no published epoch yet because its source " + source + " has none: "
                + cause.getMessage(),
            null,
            cause.root());
      }
    }
    String job = state.job() != null ? state.job() : state.lastWriter();
    if (job != null && state.leaseHolder() == null) { // registered once; its run ended before its first epoch
      return new ConsistentException(
          ErrorKind.NO_WATERMARK,
          state.identifier,
          state.identifier + " is the derived table of job " + job + ", which registered but has not published an "
              + "epoch and has no running instance (it stopped, failed or was killed before its first epoch), so it "
              + "blocks every consistent cut that includes it; start the job again (if it failed, fix what failed first)",
          null,
          false);
    }
    return new ConsistentException(
        ErrorKind.NO_WATERMARK,
        state.identifier,
        state.identifier + " has no published epoch yet, so it blocks every consistent cut that includes it; its "
            + "job " + (job == null ? "(none registered)" : job) + " has not published an epoch — start it (restart a "
            + "crashed instance with takeover=True); the status of the table shows its sources' progress",
        null,
        false);
  }

  /** {@code T* = min over Q of W(X)} on the branch the level reads; NoWatermarkError for a blocking table. */
  public static long cutBarrier(List<TableState> states, String level, Map<String, TableState> known) {
    Long barrier = null;
    for (TableState state : states) {
      Long w = state.watermark(branchFor(state, level));
      if (w == null) {
        throw noWatermarkError(state, known);
      }
      barrier = barrier == null ? w : Math.min(barrier, w);
    }
    if (barrier == null) {
      throw new ConsistentException(ErrorKind.INVALID_INPUT, "a cut needs at least one table");
    }
    return barrier;
  }

  /** Barriers below this (1973-03-03 in milliseconds) are seconds far more often than they are real. */
  private static final long PROBABLY_SECONDS = 100_000_000_000L;

  /** {@code check_as_of}: refuse an as-of before the first barrier of every table of the cut (it holds nothing). */
  static void checkAsOf(List<TableState> states, long asOf) {
    List<Long> firsts = new ArrayList<>();
    for (TableState state : states) {
      if (state.head() != null && state.branch(Keys.MAIN_BRANCH).truncated) {
        return;
      }
      Long first = state.firstBarrier();
      if (first != null) { // a table with no barrier yet (empty, maybe with a watermark) says nothing
        firsts.add(first);
      }
    }
    if (!firsts.isEmpty()) {
      long min = Collections.min(firsts);
      if (asOf < min) {
        String hint = asOf < PROBABLY_SECONDS
            ? "; barriers are milliseconds — in seconds " + asOf + " would be " + (asOf * 1000)
            : "";
        throw new ConsistentException(
            ErrorKind.INVALID_BARRIER,
            "as-of " + asOf + " is before the first barrier of every table of the cut (the earliest is " + min
                + "): the cut would hold no data" + hint);
      }
    }
  }

  /**
   * {@code resolve(states, level, as_of, upstream=...)}: the newest barrier at or below min W (and
   * as-of) at which every table is complete; at read-uncommitted each table's newest state.
   */
  public static Cut resolve(List<TableState> states, String level, Object asOf, Collection<TableState> upstream) {
    String checked = checkLevel(level);
    Long limit = asOf == null ? null : Barriers.toBarrier(asOf);
    if (limit != null) {
      checkAsOf(states, limit);
    }
    if (Keys.READ_UNCOMMITTED.equals(checked)) {
      Map<String, TableCut> tables = new LinkedHashMap<>();
      for (TableState state : states) {
        String branch = state.newestBranch();
        BranchBarriers history = state.branch(branch);
        if (limit == null && history.untracked != null) { // dirty reads include the foreign write
          tables.put(state.identifier, new TableCut(state.identifier, history.headId(), null, branch, state.revision()));
          continue;
        }
        long[] point;
        if (limit == null) {
          Long head = history.headBarrier();
          point = history.headId() == null || head == null ? null : new long[] {history.headId(), head};
        } else {
          point = history.snapAt(limit);
        }
        tables.put(state.identifier, tableCut(state, branch, point));
      }
      return new Cut(checked, null, tables);
    }
    List<TableState> closure = new ArrayList<>(upstream);
    Cut found = null;
    ConsistentException error = null;
    try {
      found = search(states, checked, limit, closure);
    } catch (ConsistentException e) {
      error = e;
    }
    List<TableState> everyone = new ArrayList<>(states);
    everyone.addAll(closure);
    Map<String, TableState> previous = previousViews(everyone); // §4.8: a second search with every switch undone
    Cut older = null;
    if (!previous.isEmpty()) {
      try {
        older = search(replaced(states, previous), checked, limit, replaced(closure, previous));
      } catch (ConsistentException e) {
        // the current search's answer (or error) stands
      }
    }
    if (older == null || (found != null && orZero(found.barrier) >= orZero(older.barrier))) {
      if (found == null) {
        throw error;
      }
      return found;
    }
    Map<String, TableCut> tables = new LinkedHashMap<>();
    for (Map.Entry<String, TableCut> e : older.tables.entrySet()) {
      TableCut cut = e.getValue();
      tables.put(e.getKey(), previous.containsKey(e.getKey())
          ? new TableCut(cut.table, cut.snapshotId, cut.barrier, cut.branch, cut.revision, TableCut.PREVIOUS) : cut);
    }
    return new Cut(older.level, older.barrier, tables);
  }

  private static long orZero(Long value) {
    return value == null ? 0L : value;
  }

  /** {@code _previous_views}: the previous view (§4.8) of every table among {@code states} that has one. */
  static Map<String, TableState> previousViews(Collection<TableState> states) {
    Map<String, TableState> views = new LinkedHashMap<>();
    for (TableState state : states) {
      TableState view;
      try {
        view = state.previousView();
      } catch (ConsistentException e) { // a malformed record: the table is read as it is
        continue;
      }
      if (view != null) {
        views.put(state.identifier, view);
      }
    }
    return views;
  }

  private static List<TableState> replaced(Collection<TableState> states, Map<String, TableState> views) {
    List<TableState> out = new ArrayList<>();
    for (TableState state : states) {
      out.add(views.getOrDefault(state.identifier, state));
    }
    return out;
  }

  /** {@code _search}: the search of §4.3 over one set of histories (the tables as they are, or their previous views). */
  private static Cut search(List<TableState> states, String checked, Long limit, Collection<TableState> upstream) {
    for (TableState state : states) { // an untracked write: only cuts from before it resolve
      String branch = branchFor(state, checked);
      BranchBarriers history = state.branch(branch);
      Long trackedUntil = state.watermark(branch); // W: the tracked head, or a watermark set on top of it
      if (history.untracked != null && (limit == null || trackedUntil == null || limit > trackedUntil)) {
        throw history.untrackedError(state.untrackedWriter(branch), trackedUntil);
      }
    }
    Map<String, TableState> known = new LinkedHashMap<>();
    for (TableState s : upstream) {
      known.put(s.identifier, s);
    }
    for (TableState s : states) {
      known.put(s.identifier, s);
    }
    long upper = cutBarrier(states, checked, known);
    if (limit != null) {
      upper = Math.min(upper, limit);
    }
    final String lvl = checked;
    Completeness completeness = new Completeness(known, state -> branchFor(state, lvl));
    List<String> names = new ArrayList<>();
    for (TableState s : states) {
      names.add(s.identifier);
    }
    Long barrier = completeness.latest(names, upper);
    if (barrier == null) {
      throw new ConsistentException(
          ErrorKind.RESOLUTION,
          null,
          "no barrier at or below " + upper + " has every table of the cut complete (" + String.join(", ", names)
              + "); run their jobs" + (limit != null ? ", or resolve as of a later barrier" : ""),
          limit,
          false);
    }
    ConsistentException stranded = strandedError(states, known, upper, barrier, state -> branchFor(state, lvl));
    if (stranded != null) {
      throw stranded;
    }
    Map<String, TableCut> tables = new LinkedHashMap<>();
    for (TableState state : states) {
      String branch = branchFor(state, checked);
      tables.put(state.identifier, tableCut(state, branch, state.branch(branch).snapAt(barrier)));
    }
    return new Cut(checked, barrier, tables);
  }

  /** {@code _holds_data}: {@code snap(X, barrier)} when the table holds rows there, else null. */
  private static long[] holdsData(TableState state, String branch, long barrier) {
    BranchBarriers history = state.branch(branch);
    long[] point = history.snapAt(barrier);
    if (point == null || history.sameData(null, point[0])) {
      return null;
    }
    return point;
  }

  /**
   * {@code stranded_error} (protocol §4.3 step 5): the cut found lies below {@code upper} because of a derived table
   * whose metadata no job could have written, and it would read a table of the cut that holds rows at {@code upper}
   * as empty, or that derived table is itself in the cut. Null when none is (a table only lags).
   */
  static ConsistentException strandedError(
      List<TableState> states, Map<String, TableState> known, long upper, long barrier,
      Function<TableState, String> branchOf) {
    if (barrier >= upper) {
      return null;
    }
    for (TableState state : states) {
      String branch = branchOf.apply(state);
      long[] held = holdsData(state, branch, upper);
      if (held == null || state.branch(branch).snapAt(barrier) != null) {
        continue;
      }
      String[] why = new String[1];
      Set<String> seen = new HashSet<>();
      TableState culprit = holdingBack(state, known, branchOf, seen, why);
      for (int i = 0; culprit == null && i < states.size(); i++) { // then its siblings in the cut
        culprit = holdingBack(states.get(i), known, branchOf, seen, why);
      }
      if (culprit != null) {
        return stranded(culprit, why[0], upper, "a cut would read " + state.identifier + " as empty");
      }
    }
    for (TableState state : states) {
      String why = broken(state, known, branchOf);
      if (why != null) {
        return stranded(state, why, upper, "a cut of " + state.identifier + " would lie before its sources' data");
      }
    }
    return null; // a table lags: the cut lies before the data until its job catches up, as §4.3 defines it
  }

  private static ConsistentException stranded(TableState culprit, String why, long upper, String effect) {
    Long first = culprit.firstBarrier();
    long reviseTo = (first == null ? upper : first) - 1;
    return new ConsistentException(
        ErrorKind.STRANDED_DATA,
        culprit.identifier,
        culprit.identifier + " holds every consistent cut with it back: " + why + "; " + effect + " — revise "
            + culprit.identifier + " to barrier " + reviseTo + " (mode full) to empty it, then run its job "
            + (culprit.owner() == null ? "(none registered)" : culprit.owner()) + " to rebuild it",
        reviseTo,
        false);
  }

  /** {@code _holding_back}: the table among {@code state} and its upstream tables (the most upstream first) that is broken. */
  private static TableState holdingBack(
      TableState state, Map<String, TableState> known, Function<TableState, String> branchOf, Set<String> seen,
      String[] why) {
    if (!seen.add(state.identifier)) {
      return null;
    }
    for (String source : state.sources()) {
      TableState upstream = known.get(source);
      if (upstream != null) {
        TableState found = holdingBack(upstream, known, branchOf, seen, why);
        if (found != null) {
          return found;
        }
      }
    }
    why[0] = broken(state, known, branchOf);
    return why[0] == null ? null : state;
  }

  /**
   * {@code _broken}: why the derived table {@code state} has metadata no job could have written (null: it has not) —
   * rows ingested while it was a root, or, before any epoch, a watermark beyond a source's.
   */
  private static String broken(TableState state, Map<String, TableState> known, Function<TableState, String> branchOf) {
    if (state.isRoot()) {
      return null;
    }
    String branch = branchOf.apply(state);
    BranchBarriers history = state.branch(branch);
    boolean epochs = false;
    for (int i = 0; i < history.tracked(); i++) {
      long id = history.snapshotId(i);
      SnapshotRecord record = state.snapshots.get(id);
      Long barrier = history.barrierAt(i);
      if (record.summary.containsKey(Keys.SOURCES)) {
        epochs = true;
      } else if (barrier != null && record.job() == null && record.changesData() && !"replace".equals(record.operation)) {
        return "it holds rows ingested while it was a root, before job " + (state.owner() == null ? "(none)" : state.owner())
            + " registered on it (snapshot " + id + ", barrier " + Barriers.format(barrier) + "): no epoch computed them "
            + "from " + String.join(", ", state.sources());
      }
    }
    Long mark = state.watermark(branch);
    for (String source : state.sources()) {
      TableState upstream = known.get(source);
      Long sourceMark = upstream == null ? null : upstream.watermark(branchOf.apply(upstream));
      if (!epochs && mark != null && sourceMark != null && mark > sourceMark) {
        return "it is complete up to " + Barriers.format(mark) + " by a watermark set before any epoch, beyond its "
            + "source " + source + " (" + Barriers.format(sourceMark) + "), which no epoch can publish";
      }
    }
    return null;
  }

  private static TableCut tableCut(TableState state, String branch, long[] point) {
    if (point == null) {
      return new TableCut(state.identifier, null, null, branch, state.revision());
    }
    return new TableCut(state.identifier, point[0], point[1], branch, state.revision());
  }

  /**
   * {@code TableStore.upstream_states}: the tables and every table they derive from, transitively, in
   * the same (depth-first, last-pushed-first) order. {@code load} returns null for a missing table; a
   * missing table of {@code tables} itself raises TableNotFoundError when {@code required}.
   */
  public static Map<String, TableState> upstreamStates(
      List<String> tables, Function<String, TableState> load, boolean required) {
    Map<String, TableState> found = new LinkedHashMap<>();
    List<String> pending = new ArrayList<>(tables);
    Set<String> first = required ? new HashSet<>(tables) : Collections.emptySet();
    while (!pending.isEmpty()) {
      String name = pending.remove(pending.size() - 1);
      if (found.containsKey(name)) {
        continue;
      }
      TableState state = load.apply(name);
      if (state == null) {
        if (first.contains(name)) {
          throw new ConsistentException(
              ErrorKind.TABLE_NOT_FOUND, name, "table " + name + " does not exist in the catalog; check the name");
        }
        continue;
      }
      found.put(name, state);
      for (String source : state.sources()) {
        if (!found.containsKey(source)) {
          pending.add(source);
        }
      }
    }
    return found;
  }

  /** {@code ConsistentCatalog.resolve(tables, level, as_of)} over already-loaded states. */
  public static Cut resolveTables(
      List<String> tables, Function<String, TableState> load, String level, Object asOf) {
    List<String> names = new ArrayList<>(new java.util.LinkedHashSet<>(tables));
    Map<String, TableState> closure = upstreamStates(names, load, true);
    List<TableState> states = new ArrayList<>();
    for (String name : names) {
      states.add(closure.get(name));
    }
    return resolve(states, level, asOf, closure.values());
  }

  // --- lineage components (what the Spark plugin resolves one cut over) ----------------------------

  /**
   * The weakly connected lineage component of {@code table} among {@code states} (edges from each
   * derived table's {@code consistent.sources}; a table whose sources cannot be parsed has no edges),
   * sorted by name. {@code LineageGraph.from_states(...).components([table])}.
   */
  public static List<String> component(String table, Map<String, TableState> states) {
    Map<String, Set<String>> undirected = new TreeMap<>();
    for (TableState state : states.values()) {
      List<String> sources;
      try {
        sources = state.sources();
      } catch (ConsistentException e) {
        continue;
      }
      for (String source : sources) {
        undirected.computeIfAbsent(state.identifier, k -> new HashSet<>()).add(source);
        undirected.computeIfAbsent(source, k -> new HashSet<>()).add(state.identifier);
      }
    }
    Set<String> found = new HashSet<>();
    found.add(table);
    List<String> stack = new ArrayList<>();
    stack.add(table);
    while (!stack.isEmpty()) {
      String node = stack.remove(stack.size() - 1);
      for (String next : undirected.getOrDefault(node, Collections.emptySet())) {
        if (found.add(next)) {
          stack.add(next);
        }
      }
    }
    List<String> sorted = new ArrayList<>(found);
    Collections.sort(sorted);
    return sorted;
  }

  /** A component's cut: the tables that take part in it, and why the others cannot. */
  public static final class ScopedCut {
    /** The cut over the members (null when no member can be resolved). */
    public final Cut cut;
    /** Table -> why it is left out (its own error, or the error of the upstream table that is left out). */
    public final Map<String, ConsistentException> blocked;

    ScopedCut(Cut cut, Map<String, ConsistentException> blocked) {
      this.cut = cut;
      this.blocked = blocked;
    }
  }

  /** Errors that belong to a table (it is left out of the component's cut), not to the caller's input. */
  static boolean tableError(ConsistentException e) {
    return e.kind() != ErrorKind.INVALID_INPUT && e.kind() != ErrorKind.INVALID_BARRIER;
  }

  /**
   * The cut the Spark plugin serves for a lineage component ({@code tests/conformance/corpus.component_cut}
   * is the Python reference): {@code ConsistentCatalog.resolve(component, level, as_of)} when that
   * resolves. Otherwise every table that cannot be resolved on its own (no watermark, untracked write,
   * expired history, malformed metadata, no complete barrier) is left out together with every table
   * derived from it, and the rest (the members) are resolved together; when that fails too, every member
   * is left out with its error. A bad level or as-of is the caller's error and is thrown.
   */
  public static ScopedCut scopedCut(List<String> component, Map<String, TableState> states, String level, Object asOf) {
    String checked = checkLevel(level);
    if (asOf != null) {
      Barriers.toBarrier(asOf);
    }
    List<String> present = new ArrayList<>();
    for (String name : component) {
      if (states.containsKey(name)) {
        present.add(name);
      }
    }
    Collections.sort(present);
    Map<String, ConsistentException> blocked = new LinkedHashMap<>();
    if (present.isEmpty()) {
      return new ScopedCut(null, blocked);
    }
    try {
      return new ScopedCut(resolveTables(present, states::get, checked, asOf), blocked);
    } catch (ConsistentException e) {
      if (!tableError(e)) {
        throw e;
      }
    }
    for (String name : present) {
      try {
        resolveTables(Collections.singletonList(name), states::get, checked, asOf);
      } catch (ConsistentException e) {
        if (tableError(e)) {
          blocked.put(name, e);
        }
      }
    }
    boolean changed = true;
    while (changed) { // a table derived from a left-out table cannot be in the cut either
      changed = false;
      for (String name : present) {
        if (blocked.containsKey(name)) {
          continue;
        }
        for (String source : states.get(name).sources()) {
          if (blocked.containsKey(source)) {
            blocked.put(name, blocked.get(source));
            changed = true;
            break;
          }
        }
      }
    }
    List<String> members = new ArrayList<>();
    for (String name : present) {
      if (!blocked.containsKey(name)) {
        members.add(name);
      }
    }
    if (members.isEmpty()) {
      return new ScopedCut(null, blocked);
    }
    try {
      return new ScopedCut(resolveTables(members, states::get, checked, asOf), blocked);
    } catch (ConsistentException e) {
      for (String name : members) {
        blocked.put(name, e);
      }
      return new ScopedCut(null, blocked);
    }
  }
}
