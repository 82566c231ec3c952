package io.consistentcatalog.spark.read;

/**
 * One row of {@code current_cut()} / {@code refresh_cut('t')} ({@link CutProcedures#OUTPUT}): how the session
 * serves one table of a lineage component now.
 */
public final class CutRow {
  public final String table;
  /** The snapshot served; null when the table is empty at the cut or left out of it. */
  public final Long snapshotId;
  /** The served snapshot's own barrier. */
  public final Long barrier;
  /** The branch (or, for a tag cut, the tag) the snapshot was found on. */
  public final String branch;
  /** The cut's barrier T* (null at read-uncommitted and for a tag). */
  public final Long cutBarrier;
  /** The isolation level, or {@code tag <name>}. */
  public final String level;
  /** {@code ok}, or the error class and message of a table left out of the cut. */
  public final String status;

  CutRow(String table, Long snapshotId, Long barrier, String branch, Long cutBarrier, String level, String status) {
    this.table = table;
    this.snapshotId = snapshotId;
    this.barrier = barrier;
    this.branch = branch;
    this.cutBarrier = cutBarrier;
    this.level = level;
    this.status = status;
  }
}
