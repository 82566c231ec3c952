package io.consistentcatalog.core;

/** One table's part of a cut: the snapshot to read (null when the table is empty at the cut). */
public final class TableCut {
  public final String table;
  public final Long snapshotId;
  public final Long barrier;
  public final String branch;
  public final long revision;
  /** {@code current}, or {@code previous} when the cut read the table's previous generation (§4.8); not in the JSON. */
  public final String generation;

  public TableCut(String table, Long snapshotId, Long barrier, String branch, long revision) {
    this(table, snapshotId, barrier, branch, revision, CURRENT);
  }

  public static final String CURRENT = "current";
  public static final String PREVIOUS = "previous";

  public TableCut(String table, Long snapshotId, Long barrier, String branch, long revision, String generation) {
    this.generation = generation;
    this.table = table;
    this.snapshotId = snapshotId;
    this.barrier = barrier;
    this.branch = branch;
    this.revision = revision;
  }
}
