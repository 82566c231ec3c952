package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.spark.context.BatchFiles;
import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.StreamingFence;
import io.consistentcatalog.spark.context.WriterInstance;
import io.consistentcatalog.spark.context.FencedCommit;
import io.consistentcatalog.spark.context.Names;
import io.consistentcatalog.spark.context.RootIngest;
import io.consistentcatalog.spark.context.EpochCommit;
import io.consistentcatalog.spark.context.EpochPlanning;
import io.consistentcatalog.spark.context.StatementLoads;
import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.EpochPlanner;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Keys;
import io.consistentcatalog.core.TableState;
import java.util.Collections;
import java.util.Map;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A streaming query's micro-batch into a derived table as one epoch of its job (protocol §5.7): the query reads its
 * sources through the consistent catalog ({@link BarrierStream}), so the batch's end offsets are one barrier
 * {@code T} and {@code snap(source, T)} of each source; the batch commits as the epoch of {@code T} (§5.1's actions
 * at that barrier: a batch Spark replays after a crash is {@code done}, or republished when it was staged), its
 * write staged on {@code consistent-staged} through the fence, verified and published ({@link EpochCommit}). Complete
 * output mode is Iceberg's streaming overwrite (the sink becomes the query's whole result at {@code T}), append mode
 * its streaming append (the rows the batch added), update mode a merge by the sink's identifier fields
 * ({@link KeyedMerge}: the batch's rows replace those of their keys, copy-on-write).
 */
public final class StreamingEpoch implements StreamingWrite {
  private static final Logger LOG = LoggerFactory.getLogger(StreamingEpoch.class);

  private final StreamingSinkTable sink;
  private final StreamingWrite delegate;
  private final StreamingFence fence;
  private final String queryId;
  private final StreamingSinkTable.Options options;

  StreamingEpoch(StreamingSinkTable sink, StreamingWrite delegate, StreamingFence fence, String queryId, StreamingSinkTable.Options options) {
    this.sink = sink;
    this.delegate = delegate;
    this.fence = fence;
    this.queryId = queryId;
    this.options = options;
  }

  @Override
  public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
    return delegate.createStreamingWriterFactory(info);
  }

  @Override
  public boolean useCommitCoordinator() {
    return delegate.useCommitCoordinator();
  }

  @Override
  public void commit(long epochId, WriterCommitMessage[] messages) {
    // a batch that is not staged (done, republished, a watermark, refused) never commits its files, named for
    // this attempt (StreamingSinkTable.AttemptWriteInfo): abort() deletes them
    regenerating = false;
    RootIngest.SparkCommit spark = RootIngest.SparkCommit.of(options.update ? () -> merge(messages) : () -> {
      sent = true; // from here the files may be on the staged branch (also when the commit's answer is lost)
      if (regenerating && !options.complete) {
        replaceEveryRow(messages);
      } else {
        delegate.commit(epochId, messages); // complete mode's overwrite replaces every row itself
      }
    }, () -> abort(epochId, messages));
    Map<String, BarrierStream.Range> inputs = BarrierStream.batchInputs();
    if (inputs.isEmpty()) {
      spark.abort();
      if (BatchFiles.rows(messages) == 0) {
        return; // a batch Spark ran without new input (its watermark moved): the sources' barrier did not move either
      }
      boolean streamsSources = !sink.lakeReads(queryId).isEmpty(); // then a batch without new input (a watermark's)
      throw sink.refused("job '" + options.job + "': micro-batch " + epochId + " wrote rows but read no table of "
          + sink.catalogName() + " as a stream, so it has no barrier to be the epoch of — " + (streamsSources
          ? "Spark ran it without new input (a watermark moved): SET spark.sql.streaming.noDataMicroBatches.enabled="
              + "false, so that what it would emit comes with the next batch of input"
          : "read the job's sources with spark.readStream.table(\"" + sink.catalogName() + ".ns.t\") and nothing else"));
    }
    Long barrier = null;
    for (BarrierStream.Range range : inputs.values()) {
      if (barrier != null && !barrier.equals(range.end.barrier)) {
        throw new IllegalStateException("the sources of one micro-batch end at different barriers: " + inputs);
      }
      barrier = range.end.barrier;
    }
    String name = sink.tableName();
    TableIdentifier ident = Names.icebergIdentifier(name);
    WriterInstance writes = sink.writer();
    FencedCommit committer = writes.committer();
    StatementLoads loads = null; // what the stream group's plan of this batch loaded (none on a replay from the checkpoint)
    for (BarrierStream.Range range : inputs.values()) {
      loads = loads != null ? loads : range.end.loads;
    }
    try {
      Table table = sink.register(options.job, inputs.keySet(), queryId, options, committer.load(ident));
      EpochPlanning.Planned planned;
      try {
        planned = EpochPlanning.plan(writes, EpochPlanning.Request.microBatch(options.job, name, inputs.keySet(),
            sink.definition(queryId, options), barrier), table, FencedCommit.metadata(table), loads);
      } catch (ConsistentException e) {
        spark.abort();
        throw e;
      }
      EpochPlanner.Plan plan = planned.plan;
      Map<String, TableState> sources = planned.sources;
      for (Map.Entry<String, Long> input : plan.inputs.entrySet()) {
        Long read = inputs.get(input.getKey()).end.snapshot;
        if (!java.util.Objects.equals(read, input.getValue())) {
          spark.abort();
          throw new ConsistentException(ErrorKind.FENCED, name, name + ": the batch read " + input.getKey() + " at snapshot "
              + read + ", but snap(" + input.getKey() + ", " + Barriers.format(barrier) + ") is now " + input.getValue()
              + " (its history was revised or expired under the stream); the query cannot go on from this checkpoint");
        }
      }
      EpochPlanner.SinkPlan sinkPlan = plan.sinks.get(name);
      EpochCommit epoch = EpochCommit.microBatch(writes, name, ident, planned, options.job, options.leaseMs, fence);
      regenerating = epoch.regenerating(); // §6.10: the batch's output replaces every row, in its one staged commit
      if (!options.complete && sinkPlan.action == EpochPlanner.Action.STAGE) {
        checkContinues(name, inputs, sources, sinkPlan.previousInputs, null);
      }
      if (!options.complete && regenerating) { // a new generation is computed from nothing: the batch must hold it all
        checkContinues(name, inputs, sources, Collections.emptyMap(), sinkPlan.change.describe());
      }
      if (sinkPlan.action == EpochPlanner.Action.STAGE || regenerating) {
        checkRequired(epochId, table, messages, spark);
        planned.warnEmptySources(writes);
      }
      String line = epoch.commit(messages, spark);
      LOG.info("batch {}: {}", epochId, line);
    } catch (ConsistentException e) {
      throw Errors.raise(Errors.analysis(Errors.errorClass(e.kind()), e.getMessage()));
    }
  }

  /**
   * Refuses, before anything of the batch is committed, a batch whose rows hold a null in a required column of the
   * sink that the query writes as nullable ({@link RequiredColumns}; Iceberg's own check was turned off for them).
   */
  private void checkRequired(long epochId, Table table, WriterCommitMessage[] messages, RootIngest.SparkCommit spark) {
    if (options.required.isEmpty()) {
      return;
    }
    RequiredColumns.Nulls nulls = RequiredColumns.firstNull(table, BatchFiles.of(messages), options.required);
    if (nulls == null) {
      return;
    }
    spark.abort();
    String column = nulls.column.name();
    boolean key = table.schema().identifierFieldIds().contains(nulls.column.fieldId());
    throw sink.refused(key ? "CONSISTENT_WRITE.NULL_KEY" : "CONSISTENT_WRITE.NULL_VALUE", "job '" + options.job
        + "': micro-batch " + epochId + " holds " + nulls.rows + (nulls.rows == 1 ? " row" : " rows") + " with a null "
        + column + ", and " + column + " is the table's " + (key ? "key (an identifier field, NOT NULL)" : "NOT NULL "
        + "column") + "; nothing of the batch was committed. Drop those rows before the aggregation (.where(\"" + column
        + " IS NOT NULL\")) or give them a value (coalesce(" + column + ", <a value>)), then restart the query");
  }

  /**
   * Update mode's commit of the batch (called by the epoch's staged write, the fence armed and the commit properties
   * set): the files holding the batch's keys rewritten, then one fenced overwrite on the staged branch.
   */
  private void merge(WriterCommitMessage[] messages) {
    KeyedMerge.Merge merge = new KeyedMerge.Merge(fence.table(sink.tableName()), BatchFiles.of(messages), options.deleteWhere,
        regenerating);
    try {
      merge.prepare();
    } catch (RuntimeException e) {
      merge.discard();
      throw e;
    }
    sent = true; // from here the files may be on the staged branch (also when the commit's answer is lost)
    merge.commit(org.apache.iceberg.spark.CommitMetadata.commitProperties());
  }

  /**
   * An append (or update-mode) epoch adds the rows the batch read, those between its start and end offsets: exact only when the
   * start is what the sink's last epoch read. A checkpoint that does not continue the sink's epochs (another
   * checkpoint, another deployment, a Python run or a revision in between) would double or lose rows, and is refused.
   */
  private void checkContinues(
      String name, Map<String, BarrierStream.Range> inputs, Map<String, TableState> sources,
      Map<String, Long> previousInputs, String regenerate) {
    for (Map.Entry<String, BarrierStream.Range> input : inputs.entrySet()) {
      Long start = input.getValue().start.snapshot;
      Long previous = previousInputs.get(input.getKey());
      if (regenerate != null && !sources.get(input.getKey()).branch(Keys.MAIN_BRANCH).sameData(null, start)) {
        throw new ConsistentException(ErrorKind.FENCED, name, name + ": job '" + options.job + "' "
            + EpochPlanner.Action.REGENERATE.protocolName + "s the sink (" + regenerate + "), whose new "
            + "generation is computed from each source whole, but this batch starts " + input.getKey() + " at snapshot "
            + start + " (its checkpoint continues an earlier run), so it holds only part of the new output; nothing was "
            + "committed and the sink keeps serving its generation — start the query with a new checkpoint");
      }
      if (regenerate != null) {
        continue;
      }
      if (!sources.get(input.getKey()).branch(Keys.MAIN_BRANCH).sameData(previous, start)) {
        throw new ConsistentException(ErrorKind.FENCED, name, name + ": job '" + options.job + "' "
            + (options.update ? "merges what each micro-batch's aggregation updates" : "appends what each micro-batch reads")
            + ", and this batch starts " + input.getKey() + " at snapshot " + start + " where the "
            + "sink's last epoch read snapshot " + previous + ": this checkpoint does not continue the sink's epochs "
            + "(another checkpoint or deployment, a Python run or a revision came between), so the "
            + (options.update ? "merge" : "append") + " would double or lose rows — restart the query from the "
            + "checkpoint that wrote the sink's last epoch");
      }
    }
  }

  /**
   * Gives the batch up ({@link BatchFiles#abandon}): its files deleted unless its commit was sent, else Iceberg's
   * abort (which deletes them after a refused commit). Also what Spark calls when the batch fails or the query stops.
   */
  @Override
  public void abort(long epochId, WriterCommitMessage[] messages) {
    if (sent && options.update) {
      return; // Iceberg's abort would delete the files of a merge whose commit may have landed (its answer lost)
    }
    BatchFiles.abandon(fence.io(), messages, sent, () -> delegate.abort(epochId, messages));
  }

  /**
   * A new generation's commit of an append-mode batch (§6.10, §5.2 step 5): one overwrite on the staged branch that
   * deletes every row of the sink and adds the batch's files.
   */
  private void replaceEveryRow(WriterCommitMessage[] messages) {
    org.apache.iceberg.OverwriteFiles overwrite = fence.table(sink.tableName()).newOverwrite()
        .overwriteByRowFilter(org.apache.iceberg.expressions.Expressions.alwaysTrue());
    BatchFiles.of(messages).forEach(overwrite::addFile);
    org.apache.iceberg.spark.CommitMetadata.commitProperties().forEach(overwrite::set);
    overwrite.commit();
  }

  /** Whether the batch being committed computes a new generation of the sink (set once its epoch is planned). */
  private volatile boolean regenerating;

  /** Whether Spark's commit of the batch's files was sent (they may be referenced from then on). */
  private volatile boolean sent;

  @Override
  public String toString() {
    return "ConsistentStreamingEpoch(" + options.job + " -> " + sink.tableName() + ")";
  }
}
