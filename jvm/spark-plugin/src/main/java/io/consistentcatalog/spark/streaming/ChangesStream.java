package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.core.ChangeRange;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.spark.context.CatalogContext;
import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.Names;
import io.consistentcatalog.spark.context.StatementState;
import io.consistentcatalog.spark.streaming.BarrierStream.BarrierOffset;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Table;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;

/**
 * A table read as its changes by a streaming query (protocol §5.7, §5.10): the offsets are the barriers of the
 * table's {@link BarrierStream} (so every source of the query ends each micro-batch at the same {@code T}), and the
 * micro-batch from {@code T1} to {@code T2} holds {@code changes(t, T1, T2)}, the net difference with
 * {@code _change_type} and {@code _barrier}, whatever the epochs in between did. The first micro-batch holds
 * {@code snap(t, T2)} whole, as INSERTs.
 *
 * <p>The net difference needs a shuffle (rows deleted and written again cancel; a key pairs updates), which a
 * partition reader cannot do: {@link #planInputPartitions} runs the batch query of changes ({@link ChangesQuery}) for the range as a
 * nested Spark job on the driver and hands its rows to the input partitions. The driver holds the net changes of
 * one micro-batch (what the batch holds anyway), not the table; a range is deterministic, so a micro-batch run again
 * after a restart gives the same rows.
 */
final class ChangesStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  /** Rows per input partition of a micro-batch. */
  private static final int PER_PARTITION = 50_000;

  private final CatalogContext context;
  private final String name;
  private final List<String> declaredKey;
  /** The table's columns when the query was analysed: the stream's, whatever the table's are later. */
  private final AnalysedColumns analysed;
  private final BarrierStream offsets;
  private final ChangesQuery query;
  /**
   * The partitions of the last micro-batch planned: Spark asks a micro-batch's scan for its partitions once per copy
   * of its physical scan node (the planner's rules copy it several times), and each ask would run the nested job of
   * changes again; a range's changes are deterministic, so the second ask of the same range gets the first's rows.
   */
  private volatile Planned planned;

  ChangesStream(CatalogContext context, String name, String checkpointLocation, long waitMs, List<String> key,
      ChangesQuery query, AnalysedColumns analysed) {
    this.context = context;
    this.analysed = analysed;
    this.query = query;
    this.name = name;
    this.declaredKey = key;
    this.offsets = new BarrierStream(context, name, checkpointLocation, waitMs, analysed);
  }

  @Override
  public Offset initialOffset() {
    return offsets.initialOffset();
  }

  @Override
  public Offset deserializeOffset(String json) {
    return offsets.deserializeOffset(json);
  }

  @Override
  public Offset latestOffset() {
    return offsets.latestOffset();
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    return offsets.latestOffset(start, limit);
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    offsets.prepareForTriggerAvailableNow(); // the end of the run at the query's start, as for appends
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {
    offsets.stop();
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    BarrierOffset from = (BarrierOffset) start;
    BarrierOffset to = (BarrierOffset) end;
    Planned last = planned;
    if (last == null || !last.covers(from, to)) {
      InternalRow[] rows = Objects.equals(from.snapshot, to.snapshot) || to.barrier == null
          ? new InternalRow[0] : changes(from, to);
      List<InputPartition> partitions = new ArrayList<>();
      for (int i = 0; i < rows.length; i += PER_PARTITION) {
        partitions.add(new Rows(Arrays.copyOfRange(rows, i, Math.min(rows.length, i + PER_PARTITION))));
      }
      last = new Planned(from, to, partitions.toArray(new InputPartition[0]));
      planned = last;
    }
    // for the sink's commit of this batch, on this thread (after the nested job, which is no batch of the query)
    StatementState.current().batchInput(name, new BarrierStream.Range(from, to));
    return last.partitions.clone();
  }

  /** A micro-batch's range and its partitions. */
  private static final class Planned {
    final BarrierOffset from;
    final BarrierOffset to;
    final InputPartition[] partitions;

    Planned(BarrierOffset from, BarrierOffset to, InputPartition[] partitions) {
      this.from = from;
      this.to = to;
      this.partitions = partitions;
    }

    boolean covers(BarrierOffset start, BarrierOffset end) {
      return BarrierStream.same(from, start) && BarrierStream.same(to, end);
    }
  }

  /** {@code changes(t, from, to)} (from empty: {@code snap(t, to)} as INSERTs), collected on the driver. */
  private InternalRow[] changes(BarrierOffset from, BarrierOffset to) {
    Table table = context.committer().load(Names.icebergIdentifier(name));
    List<String> columns = analysed.names(table.schema());
    List<String> key = declaredKey != null ? declaredKey : new ArrayList<>(table.schema().identifierFieldNames());
    if (!columns.containsAll(key)) {
      List<String> missing = new ArrayList<>(key);
      missing.removeAll(columns);
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.INVALID_KEY", context.catalogName() + "." + name
          + ": the read option " + ChangesTable.KEY + " names " + missing + ", no column of the table; its columns "
          + "are " + String.join(", ", columns) + " — name columns of the table, or leave the option out for the "
          + "table's identifier fields (none: whole rows)"));
    }
    SparkSession spark = SparkSession.active();
    Dataset<Row> changes;
    Long barrier;
    try {
      TableState state = TableState.fromMetadata(name, ((HasTableOperations) table).operations().current());
      if (from.barrier == null) {
        ChangeRange at = ChangeRange.plan(state, to.barrier, to.barrier); // b(snap(t, T2)), the rows' _barrier
        if (at.toSnapshotId == null) {
          return new InternalRow[0];
        }
        changes = query.whole(spark, name, columns, at.toSnapshotId, at.barrier);
        barrier = at.barrier;
      } else {
        ChangeRange range = ChangeRange.plan(state, from.barrier, to.barrier);
        if (!Objects.equals(range.fromSnapshotId, from.snapshot)) {
          throw new ConsistentException(ErrorKind.HISTORY_EXPIRED, name, name + ": the stream read snapshot "
              + from.snapshot + " at barrier " + from.barrier + ", but main holds " + range.fromSnapshotId
              + " there now (a revision rewrote the history); start the query with a new checkpoint location");
        }
        changes = query.between(spark, name, columns, range, key);
        barrier = range.barrier;
      }
    } catch (ConsistentException e) {
      throw Errors.raise(Errors.analysis(Errors.errorClass(e.kind()), context.catalogName() + "." + e.getMessage()));
    }
    // _barrier, one value for the whole range, is set here rather than collected: as a literal in the plan it would
    // make the generated code of each micro-batch's job new source, compiled again at every batch
    Dataset<Row> rows = changes.drop("_barrier");
    org.apache.spark.sql.types.DataType[] types = java.util.Arrays.stream(rows.schema().fields())
        .map(org.apache.spark.sql.types.StructField::dataType).toArray(org.apache.spark.sql.types.DataType[]::new);
    InternalRow[] collected = rows.queryExecution().executedPlan().executeCollect();
    InternalRow[] out = new InternalRow[collected.length];
    for (int i = 0; i < collected.length; i++) {
      InternalRow row = collected[i].copy();
      Object[] values = new Object[types.length + 1];
      for (int c = 0; c < types.length; c++) {
        values[c] = row.isNullAt(c) ? null : row.get(c, types[c]);
      }
      values[types.length] = barrier;
      out[i] = new org.apache.spark.sql.catalyst.expressions.GenericInternalRow(values);
    }
    return out;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new RowsReader();
  }

  @Override
  public String toString() {
    return "ConsistentChanges(" + context.catalogName() + "." + name + ")";
  }

  /** One input partition: rows of the micro-batch's changes, computed on the driver. */
  static final class Rows implements InputPartition {
    private static final long serialVersionUID = 1L;
    final InternalRow[] rows;

    Rows(InternalRow[] rows) {
      this.rows = rows;
    }
  }

  /** Reads a {@link Rows} partition. */
  static final class RowsReader implements PartitionReaderFactory, Serializable {
    private static final long serialVersionUID = 1L;

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      InternalRow[] rows = ((Rows) partition).rows;
      return new PartitionReader<InternalRow>() {
        private int next = -1;

        @Override
        public boolean next() {
          next++;
          return next < rows.length;
        }

        @Override
        public InternalRow get() {
          return rows[next];
        }

        @Override
        public void close() {}
      };
    }
  }
}
