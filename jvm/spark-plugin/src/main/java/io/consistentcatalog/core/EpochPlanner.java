package io.consistentcatalog.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Epoch planning (docs/protocol.md §5.1), pure: table states in, a plan out. The JVM port of
 * {@code consistent_catalog.epoch_plan}: {@link #plan} is {@code plan_epoch}, {@link #stagedEpochMatches}
 * is {@code staged_epoch_matches}; {@link #checkNewEdges} is {@code LineageGraph.check_new_edges}. The
 * conformance corpus checks that both give the same plans.
 */
public final class EpochPlanner {
  private EpochPlanner() {}

  /**
   * Table names in Python's order ({@code sorted}, {@code json.dumps(sort_keys)}): by Unicode code point. Java's
   * {@code String} order compares UTF-16 units, which puts a name with a character beyond U+FFFF before one
   * with a character in U+E000-U+FFFF; {@code consistent.sources} must be the same string from both writers.
   */
  public static final Comparator<String> CODE_POINT_ORDER = (a, b) -> {
    int i = 0;
    int j = 0;
    while (i < a.length() && j < b.length()) {
      int x = a.codePointAt(i);
      int y = b.codePointAt(j);
      if (x != y) {
        return Integer.compare(x, y);
      }
      i += Character.charCount(x);
      j += Character.charCount(y);
    }
    return i < a.length() ? 1 : (j < b.length() ? -1 : 0);
  };

  /** What one sink of an epoch has to do (§5.1's table). */
  public enum Action {
    /**
     * A new generation (§6.10): the sink's last epoch was computed by another definition or schema, a rebuild was
     * asked, or a source switched generations since the sink's last epoch.
     */
    REGENERATE("regenerate"),
    DONE("done"),
    PUBLISH_STAGED("publish-staged"),
    WATERMARK("watermark"),
    STAGE("stage");

    public final String protocolName;

    Action(String protocolName) {
      this.protocolName = protocolName;
    }
  }

  /** {@code SinkPlan}: one sink's action and the heads every commit of the epoch asserts. */
  public static final class SinkPlan {
    public final String sink;
    public final Action action;
    public final Long mainHead;
    public final Long stagedHead;
    public final Map<String, Long> previousInputs;
    /** The fence ref's head as planned: every commit of the epoch asserts it (§6.3). */
    public final Long fence;
    /** Why the sink starts a new generation ({@link Action#REGENERATE}; null otherwise). */
    public final Definitions.Change change;
    /**
     * {@link Action#REGENERATE} only: {@code consistent-staged} already holds this regeneration, finished — publish it
     * as it is (§6.10 step 2, §5.4).
     */
    public final boolean replay;

    SinkPlan(String sink, Action action, Long mainHead, Long stagedHead, Map<String, Long> previousInputs, Long fence) {
      this(sink, action, mainHead, stagedHead, previousInputs, fence, null, false);
    }

    SinkPlan(
        String sink, Action action, Long mainHead, Long stagedHead, Map<String, Long> previousInputs, Long fence,
        Definitions.Change change, boolean replay) {
      this.change = change;
      this.replay = replay;
      this.sink = sink;
      this.action = action;
      this.mainHead = mainHead;
      this.stagedHead = stagedHead;
      this.previousInputs = previousInputs;
      this.fence = fence;
    }
  }

  /** {@code EpochPlan}: the barrier T (null: nothing to do), the inputs {@code snap(source, T)} and the sinks' plans. */
  public static final class Plan {
    public final String job;
    public final Long barrier;
    /** Source -> input snapshot id (null: empty at T), sorted by name ({@link #CODE_POINT_ORDER}). */
    public final Map<String, Long> inputs;
    public final Map<String, SinkPlan> sinks;
    /** The job's definition fingerprint (§6.10), recorded on every snapshot the epoch stages; null: unknown. */
    public final String definition;

    Plan(String job, Long barrier, Map<String, Long> inputs, Map<String, SinkPlan> sinks) {
      this(job, barrier, inputs, sinks, null);
    }

    Plan(String job, Long barrier, Map<String, Long> inputs, Map<String, SinkPlan> sinks, String definition) {
      this.definition = definition;
      this.job = job;
      this.barrier = barrier;
      this.inputs = inputs;
      this.sinks = sinks;
    }
  }

  /**
   * {@code plan_epoch}: the next epoch of {@code job} from metadata alone (re-planning after a crash is the
   * same call). {@code upstream} holds the sources' transitive sources (may be empty).
   */
  public static Plan plan(
      String job, Map<String, TableState> sources, Map<String, TableState> sinks, Map<String, TableState> upstream) {
    return plan(job, sources, sinks, upstream, null, false);
  }

  /**
   * {@code plan_epoch} with the job's {@code definition} fingerprint (null: unknown) and a {@code rebuild} request:
   * a sink whose last epoch was computed otherwise {@code regenerate}s (§5.1, §6.10).
   */
  public static Plan plan(
      String job, Map<String, TableState> sources, Map<String, TableState> sinks, Map<String, TableState> upstream,
      String definition, boolean rebuild) {
    if (sources.isEmpty()) {
      throw new ConsistentException(ErrorKind.INVALID_INPUT, "job '" + job + "' has no sources");
    }
    Long barrier = null;
    Long lowest = null;
    boolean allMarked = true;
    for (TableState state : sources.values()) {
      Long mark = state.watermark();
      if (mark == null) {
        allMarked = false;
        break;
      }
      lowest = lowest == null ? mark : Math.min(lowest, mark);
    }
    if (allMarked) {
      Map<String, TableState> known = new LinkedHashMap<>(upstream);
      known.putAll(sources);
      barrier = new Completeness(known, s -> Keys.MAIN_BRANCH).latest(new ArrayList<>(sources.keySet()), lowest);
    }
    return planAt(job, barrier, sources, sinks, definition, rebuild);
  }

  /**
   * The epoch of {@code job} at a barrier chosen elsewhere (a streaming query's micro-batch, whose sources' offsets
   * are that barrier: every source is complete at it), or at none ({@code null}: nothing to do).
   */
  public static Plan planAt(String job, Long barrier, Map<String, TableState> sources, Map<String, TableState> sinks) {
    return planAt(job, barrier, sources, sinks, null, false);
  }

  /** {@link #planAt} with the job's definition and a rebuild request (§6.10). */
  public static Plan planAt(
      String job, Long barrier, Map<String, TableState> sources, Map<String, TableState> sinks, String definition,
      boolean rebuild) {
    for (TableState state : sinks.values()) {
      BranchBarriers main = state.branch(Keys.MAIN_BRANCH);
      if (main.untracked != null) { // never publish on top of a foreign write
        throw main.untrackedError(state.untrackedWriter(Keys.MAIN_BRANCH), state.watermark());
      }
    }
    Map<String, SinkPlan> plans = new TreeMap<>();
    if (barrier == null) {
      for (Map.Entry<String, TableState> e : sinks.entrySet()) {
        TableState state = e.getValue();
        plans.put(e.getKey(), new SinkPlan(e.getKey(), Action.DONE, state.head(), state.head(Keys.STAGED_BRANCH),
            Collections.emptyMap(), state.head(Keys.FENCE_BRANCH)));
      }
      return new Plan(job, null, Collections.emptyMap(), plans, definition);
    }
    Map<String, Long> inputs = new TreeMap<>(CODE_POINT_ORDER);
    for (Map.Entry<String, TableState> e : sources.entrySet()) {
      long[] point = e.getValue().branch(Keys.MAIN_BRANCH).snapAt(barrier);
      inputs.put(e.getKey(), point == null ? null : point[0]);
    }
    for (Map.Entry<String, TableState> e : sinks.entrySet()) {
      TableState state = e.getValue();
      Long mainHead = state.head();
      Long sinkMark = state.watermark();
      Map<String, Long> previous = state.recordedInputs(mainHead);
      boolean unchanged = true;
      boolean allEmpty = true;
      for (Map.Entry<String, Long> input : inputs.entrySet()) {
        TableState source = sources.get(input.getKey());
        if (!source.branch(Keys.MAIN_BRANCH).sameData(previous.get(input.getKey()), input.getValue())) {
          unchanged = false;
        }
        allEmpty &= input.getValue() == null;
      }
      Action action;
      Definitions.Change change = definitionChange(state, job, definition, rebuild);
      if (change == null) {
        change = switchedSource(sources, inputs, previous);
      }
      boolean replay = false;
      if (change != null) {
        action = Action.REGENERATE;
        replay = stagedEpochMatches(state, job, barrier, inputs, change.reason, definition)
            && stagedRegenerationFinished(state);
      } else if (sinkMark != null && barrier <= sinkMark) {
        action = Action.DONE;
      } else if (stagedEpochMatches(state, job, barrier, inputs)) {
        action = Action.PUBLISH_STAGED;
      } else if (unchanged && (mainHead != null || sinkMark != null || allEmpty)) {
        action = Action.WATERMARK;
      } else {
        action = Action.STAGE;
      }
      plans.put(e.getKey(), new SinkPlan(e.getKey(), action, mainHead, state.head(Keys.STAGED_BRANCH), previous,
          state.head(Keys.FENCE_BRANCH), change, replay));
    }
    return new Plan(job, barrier, Collections.unmodifiableMap(inputs), plans, definition);
  }

  /**
   * {@code definition_change} (§6.10): why {@code job}'s next epoch on {@code sink} must start a new generation (null:
   * it need not): its last epoch on main was computed by another definition, under another schema, or a rebuild is
   * asked.
   */
  public static Definitions.Change definitionChange(TableState sink, String job, String definition, boolean rebuild) {
    return Definitions.change(sink, job, definition, rebuild);
  }

  /**
   * §6.10 step 4 ({@code upstream_change}): the first source (by name) whose range (previous input, new input] holds a
   * snapshot carrying {@code consistent.regenerate} — it switched generations since the sink's last epoch; null when
   * none did. Only for a sink with an epoch that read the source (a previous input that is not null).
   */
  static Definitions.Change switchedSource(
      Map<String, TableState> sources, Map<String, Long> inputs, Map<String, Long> previous) {
    for (Map.Entry<String, Long> input : inputs.entrySet()) {
      Long stop = previous.get(input.getKey());
      Long current = input.getValue();
      if (stop == null || current == null || stop.equals(current)) {
        continue;
      }
      TableState source = sources.get(input.getKey());
      Set<Long> seen = new HashSet<>();
      while (current != null && !current.equals(stop) && seen.add(current)) {
        SnapshotRecord record = source.snapshots.get(current);
        if (record == null) {
          break;
        }
        if (record.summary.get(Keys.REGENERATE) != null) {
          return Definitions.Change.upstream(input.getKey());
        }
        current = record.parentId;
      }
    }
    return null;
  }

  /** Whether {@code consistent-staged} holds exactly one finished epoch for {@code barrier} with these inputs. */
  public static boolean stagedEpochMatches(TableState state, String job, long barrier, Map<String, Long> inputs) {
    return stagedEpochMatches(state, job, barrier, inputs, null, null);
  }

  /**
   * {@code staged_epoch_matches}: whether {@code consistent-staged} holds exactly one finished epoch for {@code barrier}
   * with these inputs; for a new generation ({@code regenerate}: its reason, else null) one whose snapshots all record
   * it and {@code definition} (§6.10 step 2, §5.4); an ordinary epoch's snapshots record no regeneration.
   */
  public static boolean stagedEpochMatches(
      TableState state, String job, long barrier, Map<String, Long> inputs, String regenerate, String definition) {
    if (!state.stagedAhead()) {
      return false;
    }
    Long main = state.head();
    Long current = state.head(Keys.STAGED_BRANCH);
    Set<String> attempts = new HashSet<>();
    while (current != null && !current.equals(main)) {
      SnapshotRecord record = state.snapshots.get(current);
      if (record == null) {
        return false;
      }
      Long recorded = record.barrier();
      if (recorded == null || recorded != barrier || !job.equals(record.job())) {
        return false;
      }
      if (!Objects.equals(record.summary.get(Keys.REGENERATE), regenerate)) {
        return false;
      }
      if (regenerate != null && !Objects.equals(record.summary.get(Keys.DEFINITION), definition)) {
        return false;
      }
      attempts.add(record.summary.get(Keys.ATTEMPT));
      if (attempts.size() > 1) { // two writers staged the same epoch on top of each other
        return false;
      }
      String value = record.summary.get(Keys.SOURCES);
      Map<String, Long> recordedInputs =
          value == null ? null : TableState.parseSummarySources(value, state.identifier + " snapshot " + current);
      if (!Objects.equals(recordedInputs, inputs)) {
        return false;
      }
      current = record.parentId;
    }
    return true;
  }

  /**
   * Whether a staged regeneration the plan would {@link SinkPlan#replay} is more than the JVM writer's first commit of
   * it (§5.2 step 5: the delete of every row, committed before Spark writes the output): a {@code delete} snapshot
   * alone on {@code consistent-staged} is a write that stopped half-way, never a new generation to switch to (a
   * finished one holds the delete and at least one write, an empty output's empty append included).
   */
  public static boolean stagedRegenerationFinished(TableState state) {
    Long staged = state.head(Keys.STAGED_BRANCH);
    SnapshotRecord head = staged == null ? null : state.snapshots.get(staged);
    return head != null && !(Objects.equals(head.parentId, state.head()) && "delete".equals(head.operation));
  }

  /**
   * {@code LineageGraph.check_new_edges}: refuse ({@link ErrorKind#CYCLE}, Python's CycleError) edges source -> sink
   * that would close a cycle in the lineage of {@code states} (the sinks' current edges left out by the caller).
   */
  public static void checkNewEdges(String job, Set<String> sources, Set<String> sinks, Map<String, TableState> states) {
    Set<String> both = new TreeSet<>(CODE_POINT_ORDER);
    both.addAll(sources);
    both.retainAll(sinks);
    if (!both.isEmpty()) {
      throw new ConsistentException(ErrorKind.CYCLE, "job '" + job + "' would read and write " + both.iterator().next()
          + ": a table cannot be its own source; write to a new table instead");
    }
    Set<String> reachable = new HashSet<>(sinks);
    List<String> frontier = new ArrayList<>(sinks);
    while (!frontier.isEmpty()) {
      String table = frontier.remove(frontier.size() - 1);
      for (Map.Entry<String, TableState> e : states.entrySet()) {
        if (!sinks.contains(e.getKey()) && e.getValue().sources().contains(table) && reachable.add(e.getKey())) {
          frontier.add(e.getKey());
        }
      }
    }
    Set<String> closing = new TreeSet<>(CODE_POINT_ORDER);
    closing.addAll(sources);
    closing.retainAll(reachable);
    if (!closing.isEmpty()) {
      throw new ConsistentException(ErrorKind.CYCLE, "registering job '" + job + "' would close a cycle: source "
          + closing.iterator().next() + " is already downstream of its sink(s) " + String.join(", ", sortedNames(sinks))
          + "; a pipeline must be a DAG — read from an upstream table instead");
    }
    checkJobEdges(job, sources, sinks, states);
  }

  /**
   * The job-level cycle check (§6.1): {@code job}'s sinks are every table it owns ({@link TableState#owner}) and
   * {@code sinks}; its sources the registered sources of the tables it owns with {@code sinks}' replaced by
   * {@code sources}. Refused ({@link ErrorKind#CYCLE}) when those sources include one of its sinks or a table
   * downstream of one ({@code states}: the catalog without {@code sinks}' current edges): a job that reads its own
   * output, through any number of statements or registrations.
   */
  public static void checkJobEdges(String job, Set<String> sources, Set<String> sinks, Map<String, TableState> states) {
    Set<String> owned = new TreeSet<>(CODE_POINT_ORDER);
    for (Map.Entry<String, TableState> e : states.entrySet()) {
      if (!sinks.contains(e.getKey()) && !e.getValue().isRoot() && job.equals(e.getValue().owner())) {
        owned.add(e.getKey());
      }
    }
    if (owned.isEmpty()) {
      return;
    }
    Set<String> allSinks = new TreeSet<>(CODE_POINT_ORDER);
    allSinks.addAll(owned);
    allSinks.addAll(sinks);
    Set<String> jobSources = new HashSet<>(sources);
    for (String table : owned) {
      jobSources.addAll(states.get(table).sources());
    }
    Set<String> produced = new HashSet<>(allSinks);
    List<String> frontier = new ArrayList<>(allSinks);
    while (!frontier.isEmpty()) {
      String table = frontier.remove(frontier.size() - 1);
      for (Map.Entry<String, TableState> e : states.entrySet()) {
        if (!sinks.contains(e.getKey()) && e.getValue().sources().contains(table) && produced.add(e.getKey())) {
          frontier.add(e.getKey());
        }
      }
    }
    Set<String> readingOwn = new TreeSet<>(CODE_POINT_ORDER);
    readingOwn.addAll(jobSources);
    readingOwn.retainAll(produced);
    if (!readingOwn.isEmpty()) {
      String table = readingOwn.iterator().next();
      String how = allSinks.contains(table) ? "is its own sink" : "is downstream of its sinks";
      throw new ConsistentException(ErrorKind.CYCLE, table, "job '" + job + "' would read its own output: " + table + " "
          + how + " (" + String.join(", ", allSinks) + "); a job's epoch reads its sources at a barrier it has not "
          + "written yet — compute this table in another job, or read from the tables upstream of it");
    }
  }

  private static Set<String> sortedNames(Set<String> names) {
    Set<String> sorted = new TreeSet<>(CODE_POINT_ORDER);
    sorted.addAll(names);
    return sorted;
  }

  /** {@code encode_summary_sources}: the inputs as the JSON object written to {@code consistent.sources}. */
  public static String encodeSummarySources(Map<String, Long> inputs) {
    StringBuilder out = new StringBuilder("{");
    Map<String, Long> sorted = new TreeMap<>(CODE_POINT_ORDER);
    sorted.putAll(inputs);
    for (Map.Entry<String, Long> e : sorted.entrySet()) {
      if (out.length() > 1) {
        out.append(',');
      }
      out.append(Py.jsonString(e.getKey())).append(':').append(e.getValue() == null ? "null" : e.getValue().toString());
    }
    return out.append('}').toString();
  }

  /** {@code encode_table_sources}: the sources as the JSON array of the table property {@code consistent.sources}. */
  public static String encodeTableSources(java.util.Collection<String> sources) {
    StringBuilder out = new StringBuilder("[");
    for (String source : sortedNames(new HashSet<>(sources))) {
      if (out.length() > 1) {
        out.append(',');
      }
      out.append(Py.jsonString(source));
    }
    return out.append(']').toString();
  }
}
