package io.consistentcatalog.core;

/** One table's part of a cut: the snapshot to read (null when the table is empty at the cut). */
public final class TableCut {
  public final String table;
  public final Long snapshotId;
  public final Long barrier;
  public final String branch;
  public final long revision;

  public TableCut(String table, Long snapshotId, Long barrier, String branch, long revision) {
    this.table = table;
    this.snapshotId = snapshotId;
    this.barrier = barrier;
    this.branch = branch;
    this.revision = revision;
  }
}
