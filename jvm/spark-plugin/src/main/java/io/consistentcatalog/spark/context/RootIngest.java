package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Keys;
import io.consistentcatalog.core.RetryPolicy;
import io.consistentcatalog.core.TableState;
import java.util.Collections;
import java.util.LinkedHashMap;
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
 * One ingest into a root (protocol §5.6), shared by SQL and DataFrame ingests ({@link SqlEpoch}) and the
 * streaming sink ({@link StreamingIngest}): Spark's own commit of the rows lands on main through
 * {@link FencedOperations} with {@code consistent.barrier = max(barrier, W + 1)} (and the idempotency key), requiring
 * the fence and main as read; refused because main moved (another ingest landed), it is sent again after the key
 * and the barrier are checked against the new head, after a jittered wait ({@link RetryPolicy#replans}). Catalog
 * faults on the way are waited out by {@link FencedCommit} and {@link FencedOperations} (protocol §6.8).
 */
public final class RootIngest {
  static final int ATTEMPTS = 10;
  /**
   * The barrier of rows that have no event time (their column is null): late rows, {@code W + 1} (the clock when the
   * table has no watermark yet), so they never change a completed barrier.
   */
  public static final long LATE = Long.MIN_VALUE;

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
      TableState state = TableState.fromMetadata(sink, read);
      if (key != null) {
        Long landed = state.ingestedWithKey(key);
        if (landed != null) {
          spark.abort();
          return new Outcome(null, null, landed);
        }
      }
      Map<String, Long> refs = new LinkedHashMap<>();
      refs.put(Keys.FENCE_BRANCH, state.head(Keys.FENCE_BRANCH));
      refs.put(Keys.MAIN_BRANCH, state.head());
      requirements = FencedCommit.refsAt(refs);
      long now = System.currentTimeMillis();
      if (barrier != null && barrier == LATE) {
        barrier = state.watermark() == null ? now : state.watermark() + 1;
      }
      if (barrier != null && barrier > now + state.clockSkewMs()) {
        spark.abort();
        throw new ConsistentException(ErrorKind.INVALID_BARRIER, sink, sink + ": the ingest's barrier "
            + Barriers.format(barrier) + " lies in the future beyond the table's clock-skew allowance ("
            + state.clockSkewMs() + " ms, table property consistent.clock-skew-ms); a barrier ahead of the clock holds "
            + "every later ingest there — " + futureHint + "; nothing was written");
      }
      long written = barrier == null ? now : barrier;
      Long watermark = state.watermark();
      if (watermark != null && written <= watermark) {
        written = watermark + 1; // late rows never change a completed barrier (§3.2)
      }
      Map<String, String> properties = new LinkedHashMap<>();
      properties.put(Keys.BARRIER, Long.toString(written));
      if (key != null) {
        properties.put(Keys.INGEST_KEY, key);
      }
      Failpoints.at("before-ingest");
      try {
        withCommitProperties(properties, spark::commit);
      } catch (FencedCommit.Refused e) {
        continue; // main moved: another ingest landed; check the key and the barrier again
      }
      TableMetadata committed = fenced.committed();
      if (committed == null) { // Iceberg's streaming write found this query's batch on main (its own record)
        return new Outcome(null, null, FencedCommit.state(sink, committer.load(ident)).head());
      }
      Failpoints.at("after-ingest");
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
