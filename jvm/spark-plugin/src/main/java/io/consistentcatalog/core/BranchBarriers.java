package io.consistentcatalog.core;

import java.util.HashMap;
import java.util.Map;

/** Effective barriers along one branch, oldest snapshot first ({@code barrier.BranchBarriers}). */
public final class BranchBarriers {
  public final String table;
  public final String branch;
  final long[] snapshotIds;
  /** Effective barriers; {@link #NONE} where a snapshot has none (before the first barrier, or untracked). */
  final long[] barriers;
  static final long NONE = Long.MIN_VALUE;
  /** True when the oldest retained snapshot has a parent that was expired. */
  public final boolean truncated;
  /** Id of the first data-changing snapshot of a derived table written without a barrier. */
  public final Long untracked;
  final int[] changeCounts;
  private Map<Long, Integer> positions;

  BranchBarriers(
      String table, String branch, long[] snapshotIds, long[] barriers, boolean truncated, Long untracked, int[] changeCounts) {
    this.table = table;
    this.branch = branch;
    this.snapshotIds = snapshotIds;
    this.barriers = barriers;
    this.truncated = truncated;
    this.untracked = untracked;
    this.changeCounts = changeCounts;
  }

  public int size() {
    return snapshotIds.length;
  }

  public long snapshotId(int index) {
    return snapshotIds[index];
  }

  /** Effective barrier at {@code index} (null before the first barrier); no tracking check. */
  public Long barrierAt(int index) {
    return barriers[index] == NONE ? null : barriers[index];
  }

  private Map<Long, Integer> positions() {
    if (positions == null) {
      Map<Long, Integer> found = new HashMap<>();
      for (int i = 0; i < snapshotIds.length; i++) {
        found.put(snapshotIds[i], i);
      }
      positions = found;
    }
    return positions;
  }

  /** Position of a snapshot on the branch (null: not on it); the newest few are scanned before a map is built. */
  private Integer indexOf(long snapshotId) {
    if (positions == null) {
      int stop = Math.max(0, snapshotIds.length - 32);
      for (int i = snapshotIds.length - 1; i >= stop; i--) {
        if (snapshotIds[i] == snapshotId) {
          return i;
        }
      }
      if (stop == 0) {
        return null;
      }
    }
    return positions().get(snapshotId);
  }

  private Integer count(Long snapshotId) {
    if (snapshotId == null) {
      // empty table; when older history was expired, changes before it are unknown: never "same"
      return truncated ? -1 : 0;
    }
    Integer index = indexOf(snapshotId);
    return index == null ? null : changeCounts[index];
  }

  /** Whether the table holds the same rows at {@code older} and {@code newer} (null: before its first snapshot). */
  public boolean sameData(Long older, Long newer) {
    Integer a = count(older);
    Integer b = count(newer);
    return a != null && a.equals(b);
  }

  public Long headId() {
    return snapshotIds.length == 0 ? null : snapshotIds[snapshotIds.length - 1];
  }

  /** How many of the oldest snapshots carry barriers: all of them, or those before the untracked one. */
  public int tracked() {
    return untracked == null ? snapshotIds.length : indexOf(untracked);
  }

  /** The newest snapshot before an untracked write (the head when there is none). */
  public Long trackedHead() {
    int tracked = tracked();
    return tracked == 0 ? null : snapshotIds[tracked - 1];
  }

  /** The error a cut that needs the untracked part of this branch raises. */
  public ConsistentException untrackedError(String writer) {
    return untrackedError(writer, null);
  }

  /** The error for a cut past the untracked write; {@code completeUntil} is the table's W (null: b(tracked head)). */
  public ConsistentException untrackedError(String writer, Long completeUntil) {
    int tracked = tracked();
    Long last = completeUntil != null ? completeUntil : (tracked == 0 ? null : barrierAt(tracked - 1));
    String by = writer == null ? "" : " by " + writer;
    String before =
        last != null
            ? "cuts up to barrier " + last + " still resolve (as of " + last + "); revise " + table + " to barrier "
                + last + " to remove the foreign write"
            : "revise " + table + " to a barrier before it (mode full) to remove the foreign write";
    return new ConsistentException(
        ErrorKind.UNTRACKED_WRITE,
        table,
        table + ": snapshot " + untracked + " on branch " + branch + " changed data without " + Keys.BARRIER
            + " (written" + by + " outside the table's job), so the table is untracked from that snapshot on; "
            + before + "; then write it only through its job",
        last,
        false);
  }

  /** The barrier of the newest tracked snapshot (the head's, unless an untracked write followed it). */
  public Long headBarrier() {
    int tracked = tracked();
    return tracked == 0 ? null : barrierAt(tracked - 1);
  }

  /**
   * {@code snap(X, T)}: {snapshot id, effective barrier} of the newest snapshot with b <= T, or null
   * if none. Only the tracked snapshots count: an untracked write and everything after it have no barrier.
   */
  public long[] snapAt(long barrier) {
    int end = tracked();
    // bisect_left(barriers, True, hi=end, key=lambda b: b is not None)
    int lo = 0;
    int hi = end;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (barriers[mid] == NONE) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    int first = lo;
    // bisect_right(barriers, barrier, lo=first, hi=end) - 1
    lo = first;
    hi = end;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (barrier < barriers[mid]) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    int index = lo - 1;
    if (index < first) {
      if (truncated && first < end) {
        throw new ConsistentException(
            ErrorKind.HISTORY_EXPIRED,
            table,
            table + " has no snapshot at or before barrier " + barrier + "; its retained history starts at "
                + barriers[first] + " (older snapshots were expired) — resolve as of a later barrier, or keep such "
                + "cuts with a retained cut or a pin before they expire",
            barriers[first],
            false);
      }
      return null;
    }
    return new long[] {snapshotIds[index], barriers[index]};
  }

  /** Effective barrier of a snapshot on this branch (null: not on it, or before the first barrier). */
  public Long barrierOf(long snapshotId) {
    Integer index = indexOf(snapshotId);
    return index == null ? null : barrierAt(index);
  }
}
