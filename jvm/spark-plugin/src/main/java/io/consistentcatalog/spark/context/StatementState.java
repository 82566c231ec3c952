package io.consistentcatalog.spark.context;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.WeakHashMap;

/**
 * The state one statement (or one micro-batch) of a Spark thread passes from one Spark callback to a later one: the
 * only per-statement state of the plugin, one object per thread ({@link #current}).
 *
 * <p>Why a thread-local: Spark calls the plugin through interfaces that carry no statement — the SQL parser
 * ({@code parsePlan(String)}), {@code TableCatalog.loadTable(Identifier)}, {@code MicroBatchStream.planInputPartitions}
 * and {@code StreamingWrite.commit} — and runs every callback of one statement, and every phase of one micro-batch,
 * on the thread that runs the statement (a query's stream thread). No other hand-off reaches the later callback.
 *
 * <table>
 *   <caption>What it holds, who sets it, who reads it, when it is cleared</caption>
 *   <tr><th>field</th><th>set by</th><th>read by</th><th>cleared</th></tr>
 *   <tr><td>{@link #parsed}: whether the statement parsed last is an {@code INSERT} or a {@code MERGE INTO}; a write
 *       statement's target and text</td><td>the SQL extension's parser, for every statement ({@link WriteStatements#parsed})</td>
 *       <td>{@code loadTable} (an INSERT's sources defer a missing cut to their scan; a MERGE's target on Spark 4.1,
 *       {@link WriteStatements#mergeInto}); the epoch of that target (its
 *       definition, §6.10, {@link WriteStatements#takeText})</td><td>overwritten by the next statement parsed; the
 *       text taken once</td></tr>
 *   <tr><td>{@link #bypass}: Iceberg's own table loading runs (tableExists, VERSION AS OF)</td>
 *       <td>{@code ConsistentSparkCatalog} around that call</td><td>{@code ConsistentSparkCatalog.loadTable}: no cut is
 *       resolved then</td><td>restored when the call returns</td></tr>
 *   <tr><td>{@link #cut}: the cut each catalog's session serves the statement (by Spark's query planning)</td>
 *       <td>{@code read.CutSession}, the first load of a statement</td><td>the statement's other loads (one cut per
 *       statement)</td><td>replaced when another planning starts; dropped by {@code refresh_cut()}; weakly held</td></tr>
 *   <tr><td>{@link #batchInput}: the offsets of each consistent source of the micro-batch the thread runs</td>
 *       <td>{@code streaming.BarrierStream.planInputPartitions}</td><td>{@code streaming.StreamingEpoch.commit} (the
 *       batch is the epoch of those offsets' barrier)</td><td>taken by that commit</td></tr>
 * </table>
 *
 * <p>Not statement state, so not here: the runs of executing epochs by Spark's SQL execution id
 * ({@link StatementEnds}: the query thread registers, Spark's listener thread ends them, so it crosses threads) and
 * the source groups of running streaming queries by checkpoint ({@code streaming.BarrierStream}: they live from a
 * query's start to its stop, across its micro-batches).
 */
public final class StatementState {
  private static final ThreadLocal<StatementState> CURRENT = ThreadLocal.withInitial(StatementState::new);

  /** Whether the statement parsed last is an {@code INSERT}. */
  boolean insert;
  /** Whether the statement parsed last is a {@code MERGE INTO} (its target: {@link #writeTarget}). */
  boolean merge;
  /** The target name parts of the write statement parsed last (null: none, or its text was taken). */
  List<String> writeTarget;
  /** That write statement's text. */
  String writeText;
  private boolean bypass;
  /** Each catalog session's cut of this thread's statement, by session (weakly: a dropped catalog lets it go). */
  private final Map<Object, Object> cuts = new WeakHashMap<>();
  /** The micro-batch's source offsets, by table name. */
  private final Map<String, Object> batchInputs = new TreeMap<>();

  private StatementState() {}

  /** The state of the statement this thread runs. */
  public static StatementState current() {
    return CURRENT.get();
  }

  /** The statement parsed last on this thread ({@link WriteStatements}). */
  void parsed(boolean insert, boolean merge, List<String> writeTarget, String writeText) {
    this.insert = insert;
    this.merge = merge;
    this.writeTarget = writeTarget;
    this.writeText = writeText;
  }

  /** Whether Iceberg's own table loading runs on this thread (no cut is resolved then). */
  public boolean bypassed() {
    return bypass;
  }

  /** Sets whether Iceberg's own table loading runs; returns what it was, to be restored. */
  public boolean bypass(boolean bypass) {
    boolean before = this.bypass;
    this.bypass = bypass;
    return before;
  }

  /** The cut {@code session} serves this thread's statement (null: none yet). */
  public Object cut(Object session) {
    return cuts.get(session);
  }

  /** Sets (null: drops) the cut {@code session} serves this thread's statement. */
  public void cut(Object session, Object cut) {
    if (cut == null) {
      cuts.remove(session);
    } else {
      cuts.put(session, cut);
    }
  }

  /** Records where the micro-batch this thread runs reads {@code table} ({@code range}: its start and end offsets). */
  public void batchInput(String table, Object range) {
    batchInputs.put(table, range);
  }

  /** The micro-batch's source offsets by table name, taken (cleared). */
  public Map<String, Object> takeBatchInputs() {
    Map<String, Object> inputs = new TreeMap<>(batchInputs);
    batchInputs.clear();
    return inputs;
  }
}
