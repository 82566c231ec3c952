package io.consistentcatalog.spark.read;

/**
 * What one resolution of a cut spent, in nanoseconds ({@link ConsistentSparkCatalog#lastResolutionTimings}):
 * the benchmark ({@code bench/bench_plugin.py}) splits a statement's first table load with it.
 *
 * <ul>
 *   <li>{@link #listNanos}: listing the catalog;
 *   <li>{@link #loadNanos}: loading or refreshing the tables after the listing (until the last one is in);
 *   <li>{@link #stateNanos}: building their states, summed over the tables (inside {@link #loadNanos});
 *   <li>{@link #resolveNanos}: resolving the cut;
 *   <li>{@link #workerCpuNanos}: CPU time of the loading threads, what ran beside the querying thread
 *       (0 with {@code load-threads=1}).
 * </ul>
 */
public final class ResolutionTimings {
  /** Before any resolution: every figure 0. */
  static final ResolutionTimings NONE = new ResolutionTimings(0L, 0L, 0L, 0L, 0L);

  private final long listNanos;
  private final long loadNanos;
  private final long stateNanos;
  private final long resolveNanos;
  private final long workerCpuNanos;

  ResolutionTimings(long listNanos, long loadNanos, long stateNanos, long resolveNanos, long workerCpuNanos) {
    this.listNanos = listNanos;
    this.loadNanos = loadNanos;
    this.stateNanos = stateNanos;
    this.resolveNanos = resolveNanos;
    this.workerCpuNanos = workerCpuNanos;
  }

  /** These loading figures with the time the cut took to resolve. */
  ResolutionTimings withResolveNanos(long nanos) {
    return new ResolutionTimings(listNanos, loadNanos, stateNanos, nanos, workerCpuNanos);
  }

  /** Listing the catalog. */
  public long listNanos() {
    return listNanos;
  }

  /** Loading or refreshing the tables after the listing, until the last one is in. */
  public long loadNanos() {
    return loadNanos;
  }

  /** Building the tables' states, summed over the tables (part of {@link #loadNanos}). */
  public long stateNanos() {
    return stateNanos;
  }

  /** Resolving the cut from the states. */
  public long resolveNanos() {
    return resolveNanos;
  }

  /** CPU time of the loading threads (what ran beside the querying thread; 0 with load-threads=1). */
  public long workerCpuNanos() {
    return workerCpuNanos;
  }

  @Override
  public String toString() {
    return "ResolutionTimings{list=" + listNanos + "ns, load=" + loadNanos + "ns, states=" + stateNanos + "ns, resolve="
        + resolveNanos + "ns, workerCpu=" + workerCpuNanos + "ns}";
  }
}
