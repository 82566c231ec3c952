package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.spark.context.StatementLoads;
import io.consistentcatalog.spark.context.StatementState;
import io.consistentcatalog.spark.context.CatalogContext;
import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.EpochPlanning;
import io.consistentcatalog.spark.context.Names;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.EpochPlanner;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.spark.line.LineSparkTable;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import org.apache.iceberg.DataOperations;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A consistent streaming read of one table (protocol §5.7): a micro-batch stream whose offsets are barriers. The
 * micro-batch from offset {@code T_prev} to {@code T} holds exactly the rows that moved the table from
 * {@code snap(t, T_prev)} to {@code snap(t, T)} (Iceberg's incremental read of main's appends between the two
 * snapshots; a table rewritten in between is refused, it cannot be read as increments).
 *
 * <p>The streams of one query (their checkpoint locations share {@code <checkpoint>/sources/}) form a group that
 * agrees on {@code T}: the newest barrier at which every table of the group is complete (§5.1's plan over the
 * group's tables, after advancing idle roots, §5.6), computed once per micro-batch for the whole group, so a query
 * over several consistent sources never mixes barriers. While no such barrier exists (a source without a watermark)
 * the stream has no new data, and before the group's first {@code T} it has no offset at all, so a query started
 * before its sources have a barrier runs no (empty) batch 0. The end offsets of the micro-batch being run on a
 * thread are kept for the streaming sink of the same query ({@link #batchInputs}), which commits the batch as the
 * epoch of {@code T}. Every micro-batch reads the columns the query was analysed with ({@link AnalysedColumns}), not
 * the table's current ones.
 *
 * <p>Under {@code trigger(availableNow=true)} the group fixes its end when the query starts
 * ({@link #prepareForTriggerAvailableNow}, as Iceberg's {@code SparkMicroBatchStream} fixes its last offset): the
 * micro-batches, a pending one of the checkpoint first, run until the sources reach that {@code T}. A source that is
 * not {@link SupportsTriggerAvailableNow} makes Spark run the trigger as {@code Trigger.Once} (SPARK-45178): one
 * micro-batch, which after a restart is the pending one, short of the sources' barriers.
 */
final class BarrierStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  private static final ObjectMapper JSON = new ObjectMapper();
  /**
   * The source groups of the running streaming queries, by checkpoint location (not statement state: a group lives
   * from its query's first source to its last one's stop, across micro-batches; see {@link StatementState}).
   */
  private static final Map<String, Group> GROUPS = new HashMap<>();

  private final CatalogContext context;
  final String name;
  private final Group group;
  private volatile Batch lastBatch;
  /**
   * The last micro-batch planned: Spark asks a micro-batch's scan for its partitions once per copy of its physical
   * scan node (the planner's rules copy it several times); each ask would load the table and plan Iceberg's scan
   * again, for the same files.
   */
  private volatile Planned planned;

  /** How long a micro-batch that finds no new barrier waits for one (the read option {@value #WAIT_FOR}). */
  private final long waitMs;
  /** The columns Spark analysed the query with: every micro-batch reads these, whatever the table's are later. */
  private final AnalysedColumns columns;

  static final String WAIT_FOR = "consistent.waitFor";

  BarrierStream(CatalogContext context, String name, String checkpointLocation, long waitMs, AnalysedColumns columns) {
    this.context = context;
    this.name = name;
    this.waitMs = waitMs;
    this.columns = columns;
    String key = groupOf(checkpointLocation);
    synchronized (GROUPS) {
      this.group = GROUPS.computeIfAbsent(key, k -> new Group(k, context));
      group.members.add(this);
    }
  }

  /** The query a source belongs to: its checkpoint location without the trailing {@code /sources/<n>}. */
  private static String groupOf(String checkpointLocation) {
    String location = checkpointLocation.replaceAll("/+$", "");
    int slash = location.lastIndexOf('/');
    String parent = slash < 0 ? location : location.substring(0, slash);
    return parent.endsWith("/sources") ? parent.substring(0, parent.length() - "/sources".length()) : location;
  }

  /**
   * The offsets of the consistent sources of the micro-batch this thread runs, by table name, taken (cleared): what a
   * streaming epoch's sink commits the batch as.
   */
  static Map<String, Range> batchInputs() {
    Map<String, Range> inputs = new TreeMap<>();
    StatementState.current().takeBatchInputs().forEach((table, range) -> inputs.put(table, (Range) range));
    return inputs;
  }

  /** Where one source's part of a micro-batch starts (exclusive) and ends. */
  static final class Range {
    final BarrierOffset start;
    final BarrierOffset end;

    Range(BarrierOffset start, BarrierOffset end) {
      this.start = start;
      this.end = end;
    }

    @Override
    public String toString() {
      return start.json() + " -> " + end.json();
    }
  }

  // --- offsets ------------------------------------------------------------------------------------------

  /**
   * A barrier and {@code snap(t, barrier)} (both null: nothing read yet); for an offset the group computed in this
   * run, the tables its plan loaded ({@code loads}, never in the checkpoint): the batch's epoch plans from them.
   */
  static final class BarrierOffset extends Offset {
    final Long barrier;
    final Long snapshot;
    final transient StatementLoads loads;

    BarrierOffset(Long barrier, Long snapshot) {
      this(barrier, snapshot, null);
    }

    BarrierOffset(Long barrier, Long snapshot, StatementLoads loads) {
      this.barrier = barrier;
      this.snapshot = snapshot;
      this.loads = loads;
    }

    @Override
    public String json() {
      ObjectNode node = JSON.createObjectNode();
      if (barrier == null) {
        node.putNull("barrier");
      } else {
        node.put("barrier", barrier);
      }
      if (snapshot == null) {
        node.putNull("snapshot");
      } else {
        node.put("snapshot", snapshot);
      }
      return node.toString();
    }

    static BarrierOffset parse(String json) {
      try {
        JsonNode node = JSON.readTree(json);
        JsonNode barrier = node.get("barrier");
        JsonNode snapshot = node.get("snapshot");
        return new BarrierOffset(barrier == null || barrier.isNull() ? null : barrier.asLong(),
            snapshot == null || snapshot.isNull() ? null : snapshot.asLong());
      } catch (IOException | RuntimeException e) {
        throw new IllegalArgumentException("not an offset of a consistent stream (a barrier and a snapshot id): " + json
            + "; was this checkpoint written by another source? Start the query with a new checkpoint location", e);
      }
    }
  }

  @Override
  public Offset initialOffset() {
    return new BarrierOffset(null, null);
  }

  @Override
  public Offset deserializeOffset(String json) {
    return BarrierOffset.parse(json);
  }

  /** The group's {@code T} for this source; null (no offset, no micro-batch) while the group has none yet. */
  @Override
  public Offset latestOffset() {
    return group.latest(this);
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    return group.latest(this);
  }

  /** The query runs with {@code availableNow}: its end is the group's {@code T} now, computed once for all members. */
  @Override
  public void prepareForTriggerAvailableNow() {
    group.prepareAvailableNow();
  }

  // --- planning -----------------------------------------------------------------------------------------

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    BarrierOffset from = (BarrierOffset) start;
    BarrierOffset to = (BarrierOffset) end;
    StatementState.current().batchInput(name, new Range(from, to)); // for the sink's commit of this batch, on this thread
    Planned last = planned;
    if (last != null && same(last.from, from) && same(last.to, to)) { // the same micro-batch's scan, asked again
      lastBatch = last.batch;
      return last.partitions.clone();
    }
    InputPartition[] partitions = plan(from, to);
    planned = new Planned(from, to, lastBatch, partitions);
    return partitions.clone();
  }

  /** Whether two offsets are the same barrier and snapshot. */
  static boolean same(BarrierOffset a, BarrierOffset b) {
    return Objects.equals(a.barrier, b.barrier) && Objects.equals(a.snapshot, b.snapshot);
  }

  /** A micro-batch's range, its scan and its partitions. */
  private static final class Planned {
    final BarrierOffset from;
    final BarrierOffset to;
    final Batch batch;
    final InputPartition[] partitions;

    Planned(BarrierOffset from, BarrierOffset to, Batch batch, InputPartition[] partitions) {
      this.from = from;
      this.to = to;
      this.batch = batch;
      this.partitions = partitions;
    }
  }

  private InputPartition[] plan(BarrierOffset from, BarrierOffset to) {
    lastBatch = null;
    if (Objects.equals(from.snapshot, to.snapshot)) {
      return new InputPartition[0];
    }
    Table planned = to.loads == null ? null : to.loads.table(name); // as the group's plan of this batch loaded it
    Table table = planned != null ? planned : context.committer().load(Names.icebergIdentifier(name));
    checkAppendsOnly(table, from, to);
    if (to.snapshot == null) {
      return new InputPartition[0];
    }
    ScanBuilder scan;
    if (from.snapshot == null) { // a first read: snap(t, T) whole, by the table's time travel (every line takes it)
      scan = LineSparkTable.atSnapshot(table, to.snapshot).newScanBuilder(CaseInsensitiveStringMap.empty());
    } else { // the appends after the last barrier read up to this one
      Map<String, String> options = new HashMap<>();
      options.put("start-snapshot-id", Long.toString(from.snapshot));
      options.put("end-snapshot-id", Long.toString(to.snapshot));
      scan = LineSparkTable.current(table).newScanBuilder(new CaseInsensitiveStringMap(options));
    }
    Batch batch = columns.scan(scan, table.schema()).toBatch(); // the query's columns, not the table's current ones
    lastBatch = batch;
    return batch.planInputPartitions();
  }

  /**
   * Every snapshot after {@code from} up to {@code to} on main appended or changed no data (a compaction): what an
   * incremental read holds exactly. A first read ({@code from} empty) reads {@code to} whole, so its history does not
   * matter.
   */
  private void checkAppendsOnly(Table table, BarrierOffset from, BarrierOffset to) {
    if (from.snapshot == null) {
      return;
    }
    String way = "stream its changes instead (the read option " + ChangesTable.READ + "=" + ChangesTable.CHANGES
        + ", with a new checkpoint location)";
    if (to.snapshot == null) {
      throw notIncremental("it holds nothing at barrier " + Barriers.format(to.barrier) + " any more, but the stream "
          + "read snapshot " + from.snapshot + " at " + describe(from.barrier) + " (a revision emptied it); " + way);
    }
    Snapshot snapshot = table.snapshot(to.snapshot);
    while (snapshot != null && !Objects.equals(snapshot.snapshotId(), from.snapshot)) {
      String operation = snapshot.operation();
      if (!DataOperations.APPEND.equals(operation) && !DataOperations.REPLACE.equals(operation)) {
        throw notIncremental("snapshot " + snapshot.snapshotId() + " (" + operation + ") between barriers "
            + describe(from.barrier) + " and " + Barriers.format(to.barrier) + " rewrites rows, and a streaming read "
            + "holds only the rows appended between two barriers; " + way);
      }
      snapshot = snapshot.parentId() == null ? null : table.snapshot(snapshot.parentId());
    }
    if (snapshot == null) {
      throw notIncremental("snapshot " + from.snapshot + " (barrier " + describe(from.barrier) + ", where the stream "
          + "stopped) is no longer an ancestor of main (a revision rewrote the history, or it expired); " + way);
    }
  }

  private RuntimeException notIncremental(String problem) {
    return Errors.raise(Errors.analysis("CONSISTENT_READ.NOT_INCREMENTAL", context.catalogName() + "." + name + ": "
        + problem));
  }

  private static String describe(Long barrier) {
    return barrier == null ? "(start)" : Barriers.format(barrier);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    Batch batch = lastBatch;
    if (batch != null) {
      return batch.createReaderFactory();
    }
    return partition -> {
      throw new IllegalStateException("a consistent stream's micro-batch without input files has nothing to read");
    };
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {
    synchronized (GROUPS) {
      group.members.remove(this);
      if (group.members.isEmpty()) {
        GROUPS.remove(group.key);
      }
    }
  }

  @Override
  public String toString() {
    return "ConsistentStream(" + context.catalogName() + "." + name + ")";
  }

  // --- the query's sources agree on T -----------------------------------------------------------------

  /** The consistent streams of one query: one barrier per micro-batch for all of them. */
  private static final class Group {
    final String key;
    final CatalogContext context;
    final Set<BarrierStream> members = Collections.newSetFromMap(new java.util.IdentityHashMap<>());
    /** The offsets of the round being asked (each member asks once per micro-batch), and who has asked. */
    private Map<String, BarrierOffset> current;
    private final Set<BarrierStream> asked = new HashSet<>();
    private Long last;
    /** Under {@code availableNow}: the offsets at the query's start, the end of its last micro-batch. */
    private Map<String, BarrierOffset> availableNow;

    Group(String key, CatalogContext context) {
      this.key = key;
      this.context = context;
    }

    /**
     * The stream's end offset of this micro-batch. The first member asked computes {@code T} for all; when it finds
     * no new barrier and a member waits ({@value #WAIT_FOR}), it watches the tables (a catalog read every 50 ms, idle
     * roots not advanced again) until a barrier is complete or the wait is over: a hop of the DAG then costs its
     * epoch, not also the wait for the next trigger.
     */
    synchronized Offset latest(BarrierStream stream) {
      if (availableNow != null) {
        return availableNow.get(stream.name); // null: no barrier when the query started, nothing to run
      }
      if (current == null || asked.contains(stream)) {
        Long before = last;
        current = compute(true);
        long waitMs = 0;
        synchronized (GROUPS) {
          for (BarrierStream member : members) {
            waitMs = Math.max(waitMs, member.waitMs);
          }
        }
        long until = System.currentTimeMillis() + waitMs;
        while (java.util.Objects.equals(before, last) && System.currentTimeMillis() < until) {
          try {
            Thread.sleep(Math.min(50L, Math.max(1L, until - System.currentTimeMillis())));
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt(); // the query is stopping
            break;
          }
          current = compute(false);
        }
        asked.clear();
      }
      asked.add(stream);
      return current.get(stream.name); // null before the group's first T: no offset, so no empty batch 0
    }

    /** The offsets of the group's newest {@code T} (idle roots advanced), fixed as the end of an availableNow run. */
    synchronized void prepareAvailableNow() {
      if (availableNow == null) {
        availableNow = compute(true);
      }
    }

    /** §5.1's plan over the group's tables (idle roots advanced first, if asked): T and {@code snap(t, T)} of each. */
    private Map<String, BarrierOffset> compute(boolean advanceIdle) {
      ArrayList<String> names = new ArrayList<>();
      synchronized (GROUPS) {
        for (BarrierStream member : members) {
          if (!names.contains(member.name)) {
            names.add(member.name);
          }
        }
      }
      try {
        // the plan's closure, loaded once for the group (issue 46): the batch's scan and its epoch plan from these
        StatementLoads loads = EpochPlanning.closure(context.committer(), names, null, advanceIdle);
        Map<String, TableState> closure = loads.states();
        Map<String, TableState> sources = new TreeMap<>();
        for (String n : names) {
          sources.put(n, closure.get(n));
        }
        EpochPlanner.Plan plan = EpochPlanner.plan("stream", sources, Collections.emptyMap(), closure);
        Map<String, BarrierOffset> out = new LinkedHashMap<>();
        if (plan.barrier == null || (last != null && plan.barrier < last)) {
          return current == null ? out : current; // nothing complete yet (or not beyond): no new data
        }
        last = plan.barrier;
        for (Map.Entry<String, Long> input : plan.inputs.entrySet()) {
          out.put(input.getKey(), new BarrierOffset(plan.barrier, input.getValue(), loads));
        }
        return out;
      } catch (ConsistentException e) {
        throw Errors.raise(Errors.analysis(Errors.errorClass(e.kind()), e.getMessage()));
      }
    }
  }
}
