package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.RetryPolicy;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.core.WritePlanner;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.UpdateRequirement;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.spark.CommitMetadata;

/**
 * One ingest into a root (protocol §5.6), shared by SQL and DataFrame ingests ({@link IngestCommit}) and the
 * streaming sink ({@link StreamingIngest}), planned by {@link WritePlanner#ingest} (Python's {@code write_plans.ingest}):
 * Spark's own commit of the rows lands on main through {@link FencedOperations} with {@code consistent.barrier =
 * max(barrier, W + 1)} (and the idempotency key), requiring the fence and main as read; refused because main moved (another ingest landed), it is sent again after the key
 * and the barrier are checked against the new head, after a jittered wait ({@link RetryPolicy#replans}). Catalog
 * faults on the way are waited out by {@link FencedCommit} and {@link FencedOperations} (protocol §6.8).
 */
public final class RootIngest {
  static final int ATTEMPTS = 10;
  /**
   * The barrier of rows that have no event time (their column is null): late rows, {@code W + 1} (the clock when the
   * table has no watermark yet), so they never change a completed barrier.
   */
  public static final long LATE = WritePlanner.LATE;

  /** Spark's commit of the rows (Iceberg's batch or streaming write), and giving them up. */
  public interface SparkCommit {
    void commit();

    /** Gives the write up (what happens to its files is the caller's: Iceberg's abort keeps them unless refused). */
    void abort();

    static SparkCommit of(Runnable commit, Runnable abort) {
      return new SparkCommit() {
        @Override
        public void commit() {
          commit.run();
        }

        @Override
        public void abort() {
          abort.run();
        }
      };
    }
  }

  /** How an ingest ended: the barrier written and the snapshot it landed in, or the snapshot that already held its key. */
  public static final class Outcome {
    public final Long barrier;
    public final Long snapshot;
    public final Long skippedBy;

    private Outcome(Long barrier, Long snapshot, Long skippedBy) {
      this.barrier = barrier;
      this.snapshot = snapshot;
      this.skippedBy = skippedBy;
    }
  }

  private final FencedCommit committer;
  private final TableIdentifier ident;
  private final String sink;
  private final FencedOperations fenced;
  /** What the next fenced commit requires: the fence and main as last read. */
  private volatile List<UpdateRequirement> requirements = Collections.emptyList();

  private IngestLineage lineage;

  /** The OpenLineage run of each ingest that lands (null: none). */
  public void lineage(IngestLineage lineage) {
    this.lineage = lineage;
  }

  public RootIngest(FencedCommit committer, TableIdentifier ident, String sink, Table table, String what) {
    this.committer = committer;
    this.ident = ident;
    this.sink = sink;
    this.fenced = new FencedOperations(((HasTableOperations) table).operations(), committer, ident, () -> requirements, what);
  }

  /** The table Spark's write goes to: main, every commit fenced. */
  public Table writeTable(String name) {
    return new BaseTable(fenced, name);
  }

  /**
   * Lands the rows Spark wrote: {@code barrier} is the ingest's own (an event time; {@link #LATE}: rows without one;
   * null: the clock when it commits), {@code futureHint} the way out named when it lies beyond the table's clock-skew
   * allowance.
   */
  public Outcome land(String key, Long barrier, String futureHint, SparkCommit spark) {
    long began = System.currentTimeMillis();
    RetryPolicy.Attempts attempts = RetryPolicy.replans(ATTEMPTS).start(); // refused: again after a jittered wait
    while (attempts.next()) {
      TableMetadata read = FencedCommit.metadata(committer.load(ident));
      fenced.prime(read); // Spark's commit builds on what the key and the barrier were checked against
      WritePlanner.IngestPlan plan; // the rule is the core's, as Python's write_plans.ingest
      try {
        plan = WritePlanner.ingest(TableState.fromMetadata(sink, read), System.currentTimeMillis(), barrier, key, false,
            futureHint + "; nothing was written");
      } catch (ConsistentException e) {
        spark.abort();
        throw e;
      }
      if (plan.skippedBy != null) {
        spark.abort();
        return new Outcome(null, null, plan.skippedBy);
      }
      requirements = plan.commit.requirements;
      long written = plan.barrier;
      Map<String, String> properties = plan.commit.summary;
      Failpoints.at("before-ingest", sink);
      try {
        withCommitProperties(properties, spark::commit);
      } catch (FencedCommit.Refused e) {
        continue; // main moved: another ingest landed; check the key and the barrier again
      }
      TableMetadata committed = fenced.committed();
      if (committed == null) { // Iceberg's streaming write found this query's batch on main (its own record)
        return new Outcome(null, null, FencedCommit.state(sink, committer.load(ident)).head());
      }
      Failpoints.at("after-ingest", sink);
      Long snapshot = TableState.fromMetadata(sink, committed).head();
      if (lineage != null && snapshot != null) {
        lineage.landed(began, written, snapshot, key); // OpenLineage, when configured (issue 34)
      }
      return new Outcome(written, snapshot, null);
    }
    spark.abort();
    throw new ConsistentException(ErrorKind.FENCED, sink, sink + ": the ingest kept losing the race to other ingests ("
        + ATTEMPTS + " attempts); run it again" + (key == null ? "" : " — the key makes it safe to repeat"));
  }

  static void withCommitProperties(Map<String, String> properties, Runnable commit) {
    CommitMetadata.withCommitProperties(properties, () -> {
      commit.run();
      return null;
    }, RuntimeException.class);
  }
}
