package io.consistentcatalog.core;

/**
 * The range of {@code changes(t, T1, T2)} on main (protocol §5.10): the JVM port of
 * {@code consistent_catalog.changelog.plan_changes}, same checks, same messages. Pure: a {@link TableState}
 * in, the two bounding snapshots and how little of the data a reader needs out.
 */
public final class ChangeRange {
  /** How little of the data the range needs (§5.10 "Reading only what changed"). */
  public enum Read {
    /** Both snapshots hold the same data: no file is read. */
    NONE,
    /** Every data-changing snapshot in the range is an append: the appended files, all inserts. */
    APPENDS,
    /** No snapshot of the range (its start included) has delete files: Iceberg's changelog scan, netted. */
    CHANGELOG,
    /** Merge-on-read deletes somewhere: both snapshots whole. */
    SNAPSHOTS;

    public String label() {
      return name().toLowerCase(java.util.Locale.ROOT);
    }
  }

  public final String table;
  public final long fromBarrier;
  public final long toBarrier;
  /** {@code snap(t, T1)}; null when the table was empty at T1. */
  public final Long fromSnapshotId;
  /** {@code snap(t, T2)}; null when the table was empty at T2 (then nothing changed). */
  public final Long toSnapshotId;
  /** {@code b(snap(t, T2))}: every change row's {@code _barrier}. */
  public final Long barrier;
  public final Read read;

  private ChangeRange(String table, long fromBarrier, long toBarrier, Long fromSnapshotId, Long toSnapshotId,
      Long barrier, Read read) {
    this.table = table;
    this.fromBarrier = fromBarrier;
    this.toBarrier = toBarrier;
    this.fromSnapshotId = fromSnapshotId;
    this.toSnapshotId = toSnapshotId;
    this.barrier = barrier;
    this.read = read;
  }

  /**
   * The range from {@code fromBarrier} to {@code toBarrier} (null: {@code W(t)}) on main. Throws
   * {@link ConsistentException}: INVALID_BARRIER for {@code T1 > T2} or {@code T2 > W(t)}, NO_WATERMARK for a
   * table without a watermark, HISTORY_EXPIRED when {@code snap(t, T1)} was expired (naming the oldest
   * retained barrier).
   */
  public static ChangeRange plan(TableState state, long fromBarrier, Long toBarrier) {
    String name = state.identifier;
    if (fromBarrier < 0 || (toBarrier != null && toBarrier < 0)) {
      throw new ConsistentException(ErrorKind.INVALID_BARRIER, name, name + ": barriers are non-negative "
          + "milliseconds since 1970-01-01 UTC, got from_barrier " + fromBarrier + ", to_barrier " + toBarrier);
    }
    Long done = state.watermark();
    if (done == null) {
      throw new ConsistentException(ErrorKind.NO_WATERMARK, name, name + " has no watermark yet: nothing is "
          + "complete, so it has no changes to read — ingest into it (a root) or run its job (a derived table) first",
          null, state.isRoot());
    }
    long last = toBarrier == null ? done : toBarrier;
    if (last > done) {
      throw new ConsistentException(ErrorKind.INVALID_BARRIER, name, name + ": changes up to barrier " + last
          + " are not final yet, its watermark is " + done + " — read changes up to " + done
          + ", or wait until the table is complete at " + last, done, false);
    }
    if (fromBarrier > last) {
      throw new ConsistentException(ErrorKind.INVALID_BARRIER, name, name + ": from_barrier " + fromBarrier
          + " lies after to_barrier " + last + "; changes run forward — give from_barrier <= to_barrier");
    }
    Long oldestBarrier = state.firstBarrier();
    String why = Barriers.implausible(fromBarrier);
    if (why != null && oldestBarrier != null && fromBarrier < oldestBarrier && Barriers.implausible(oldestBarrier) == null) {
      // a long in seconds (text never gets here: the grammar refuses it) would read the whole table as inserts
      throw new ConsistentException(ErrorKind.INVALID_BARRIER, name, name + ": from_barrier " + fromBarrier
          + " is before the table's first barrier " + Barriers.format(oldestBarrier) + ", and " + why);
    }
    BranchBarriers history = state.branch(Keys.MAIN_BRANCH);
    long[] start;
    try {
      start = history.snapAt(fromBarrier);
    } catch (ConsistentException e) {
      if (e.kind() != ErrorKind.HISTORY_EXPIRED) {
        throw e;
      }
      Long oldest = e.barrier();
      throw new ConsistentException(ErrorKind.HISTORY_EXPIRED, name, name + ": its state at from_barrier "
          + fromBarrier + " was expired by retention (its retained history starts at barrier " + oldest + "), so "
          + "the changes since then cannot be computed — read the changes from " + oldest + " on, or read the table "
          + "whole as of " + last + " and continue with changes from " + last + "; keep a barrier you will read "
          + "changes from with a pin or a retained cut", oldest, false);
    }
    long[] end = history.snapAt(last);
    Long fromId = start == null ? null : start[0];
    Long toId = end == null ? null : end[0];
    Long barrier = end == null ? null : end[1];
    Read read;
    if (history.sameData(fromId, toId)) {
      read = Read.NONE;
    } else if (appendsOnly(state, fromId, toId)) {
      read = Read.APPENDS;
    } else if (noDeleteFiles(state, fromId, toId)) {
      read = Read.CHANGELOG;
    } else {
      read = Read.SNAPSHOTS;
    }
    return new ChangeRange(name, fromBarrier, last, fromId, toId, barrier, read);
  }

  /** Whether every data-changing snapshot in (start, end] is an append (a compaction changes no data). */
  public static boolean appendsOnly(TableState state, Long start, Long end) {
    Long current = end;
    while (current != null && !current.equals(start)) {
      SnapshotRecord record = state.snapshots.get(current);
      if (record == null) {
        return false; // history cut short before start: not provable
      }
      if (record.changesData() && !record.operation.equals("append") && !record.operation.equals("replace")) {
        return false;
      }
      current = record.parentId;
    }
    return java.util.Objects.equals(current, start);
  }

  /** Whether no snapshot in [start, end] has live delete files ({@code total-delete-files} 0; unknown: no). */
  static boolean noDeleteFiles(TableState state, Long start, Long end) {
    Long current = end;
    while (current != null) {
      SnapshotRecord record = state.snapshots.get(current);
      if (record == null || !"0".equals(record.summary.get("total-delete-files"))) {
        return false;
      }
      if (current.equals(start)) {
        return true;
      }
      current = record.parentId;
    }
    return start == null;
  }
}
