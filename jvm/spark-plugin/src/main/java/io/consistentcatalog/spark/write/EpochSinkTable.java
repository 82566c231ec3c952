package io.consistentcatalog.spark.write;

import io.consistentcatalog.spark.context.BatchFiles;
import io.consistentcatalog.spark.context.RootIngest;
import io.consistentcatalog.spark.context.WriteCommit;
import io.consistentcatalog.spark.line.LineSparkTable;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.distributions.Distribution;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.RequiresDistributionAndOrdering;
import org.apache.spark.sql.connector.write.SupportsDynamicOverwrite;
import org.apache.spark.sql.connector.write.SupportsOverwrite;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

/**
 * The sink of a write statement as {@link EpochWrites} planned it: Spark writes through Iceberg's own writer
 * (on {@code consistent-staged} for an epoch, on main for an ingest, both fenced), and Spark's commit of it is
 * the epoch's or the ingest's ({@link WriteCommit#commit}). Distribution, ordering, file formats and partitioning are Iceberg's.
 */
final class EpochSinkTable implements org.apache.spark.sql.connector.catalog.Table, SupportsWrite {
  private final SparkTable current;
  private final WriteCommit epoch;

  EpochSinkTable(org.apache.iceberg.Table table, WriteCommit epoch) {
    this.current = LineSparkTable.current(table);
    this.epoch = epoch;
  }

  /** Where the sink's files are (the write's: a given-up write's files are deleted through it). */
  private FileIO io() {
    return current.table().io();
  }

  @Override
  public String name() {
    return current.name();
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return current.schema();
  }

  @Override
  public Transform[] partitioning() {
    return current.partitioning();
  }

  @Override
  public Map<String, String> properties() {
    return current.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.TRUNCATE, TableCapability.OVERWRITE_BY_FILTER,
        TableCapability.OVERWRITE_DYNAMIC);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    SparkTable target = epoch.writeBranch() == null
        ? LineSparkTable.current(epoch.writeTable())
        : LineSparkTable.onBranch(epoch.writeTable(), epoch.writeBranch());
    return new Builder(target.newWriteBuilder(info), epoch, io());
  }

  /** Iceberg's write builder {@code delegate}, its commit made {@code epoch}'s; {@code io}: the sink's files. */
  static WriteBuilder wrap(WriteBuilder delegate, WriteCommit epoch, FileIO io) {
    return new Builder(delegate, epoch, io);
  }

  @Override
  public String toString() {
    return "EpochSink(" + epoch.sink() + ", " + epoch.action() + ")";
  }

  /** Iceberg's write builder, its build wrapped so that the commit is the epoch's. */
  private static final class Builder implements SupportsDynamicOverwrite, SupportsOverwrite {
    private final WriteBuilder delegate;
    private final WriteCommit epoch;
    private final FileIO io;

    Builder(WriteBuilder delegate, WriteCommit epoch, FileIO io) {
      this.delegate = delegate;
      this.epoch = epoch;
      this.io = io;
    }

    @Override
    public WriteBuilder overwriteDynamicPartitions() {
      ((SupportsDynamicOverwrite) delegate).overwriteDynamicPartitions();
      return this;
    }

    @Override
    public WriteBuilder overwrite(Filter[] filters) {
      ((SupportsOverwrite) delegate).overwrite(filters);
      return this;
    }

    @Override
    public WriteBuilder truncate() {
      if (delegate instanceof SupportsTruncate) {
        ((SupportsTruncate) delegate).truncate();
      } else {
        ((SupportsOverwrite) delegate).truncate();
      }
      return this;
    }

    @Override
    public Write build() {
      return new EpochWrite(delegate.build(), epoch, io);
    }
  }

  /** Iceberg's write, its distribution and ordering kept, its batch commit the epoch's. */
  private static final class EpochWrite implements RequiresDistributionAndOrdering {
    private final Write delegate;
    private final RequiresDistributionAndOrdering requires;
    private final WriteCommit epoch;
    private final FileIO io;

    EpochWrite(Write delegate, WriteCommit epoch, FileIO io) {
      this.delegate = delegate;
      this.requires = delegate instanceof RequiresDistributionAndOrdering ? (RequiresDistributionAndOrdering) delegate : null;
      this.epoch = epoch;
      this.io = io;
    }

    @Override
    public Distribution requiredDistribution() {
      return requires == null ? org.apache.spark.sql.connector.distributions.Distributions.unspecified()
          : requires.requiredDistribution();
    }

    @Override
    public boolean distributionStrictlyRequired() {
      return requires == null || requires.distributionStrictlyRequired();
    }

    @Override
    public int requiredNumPartitions() {
      return requires == null ? 0 : requires.requiredNumPartitions();
    }

    @Override
    public long advisoryPartitionSizeInBytes() {
      return requires == null ? 0 : requires.advisoryPartitionSizeInBytes();
    }

    @Override
    public SortOrder[] requiredOrdering() {
      return requires == null ? new SortOrder[0] : requires.requiredOrdering();
    }

    @Override
    public String description() {
      return "consistent " + epoch.action() + " of " + epoch.sink() + " via " + delegate.description();
    }

    @Override
    public BatchWrite toBatch() { // Spark executes the write (never for EXPLAIN): the epoch starts
      epoch.executing();
      BatchWrite batch = delegate.toBatch();
      return new BatchWrite() {
        /** Whether Iceberg's commit of the files was sent (from then on they may be referenced). */
        private volatile boolean sent;
        /** Whether the write was given up already (the epoch's {@code abort}, then Spark's). */
        private volatile boolean abandoned;

        @Override
        public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
          return batch.createBatchWriterFactory(info);
        }

        @Override
        public boolean useCommitCoordinator() {
          return batch.useCommitCoordinator();
        }

        @Override
        public void onDataWriterCommit(WriterCommitMessage message) {
          batch.onDataWriterCommit(message);
        }

        @Override
        public void commit(WriterCommitMessage[] messages) {
          // a write that is done, a watermark, an ingest whose key landed: its files are deleted, never committed
          epoch.commit(messages, RootIngest.SparkCommit.of(() -> {
            sent = true;
            batch.commit(messages);
          }, () -> abandon(messages)));
        }

        @Override
        public void abort(WriterCommitMessage[] messages) {
          abandon(messages);
          epoch.aborted();
        }

        private void abandon(WriterCommitMessage[] messages) {
          if (!abandoned) {
            abandoned = true;
            BatchFiles.abandon(io, messages, sent, () -> batch.abort(messages));
          }
        }
      };
    }

    @Override
    public StreamingWrite toStreaming() {
      throw new UnsupportedOperationException("a streaming write through the consistent catalog is not supported yet");
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
      return delegate.supportedCustomMetrics();
    }
  }
}
