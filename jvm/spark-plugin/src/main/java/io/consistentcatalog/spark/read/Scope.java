package io.consistentcatalog.spark.read;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.Cut;
import io.consistentcatalog.core.TableCut;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.iceberg.Table;

/**
 * One lineage component's cut as a statement serves it: for each table of the component, the table
 * loaded to resolve the cut (served without loading it again) and where the cut puts it; and the tables
 * left out of the cut, with why. Immutable; a statement shares one Scope among the tables it covers.
 */
final class Scope {
  /** One table of the component: its loaded table and, when the cut holds it, the snapshot to serve. */
  static final class Member {
    final Table table;
    /** Whether the cut holds the table (false: it is served as "not part of the cut"). */
    final boolean inCut;
    /** The snapshot to serve; null when the table is empty at the cut. */
    final Long snapshotId;
    /** The branch (or, for a tag scope, the tag) the snapshot was found on. */
    final String branch;
    /** The snapshot's own barrier (null for a tag scope). */
    final Long barrier;

    private Member(Table table, boolean inCut, Long snapshotId, String branch, Long barrier) {
      this.table = table;
      this.inCut = inCut;
      this.snapshotId = snapshotId;
      this.branch = branch;
      this.barrier = barrier;
    }

    /** A table the cut does not hold (left out, or no cut at all). */
    static Member outside(Table table) {
      return new Member(table, false, null, null, null);
    }

    /** A table at a snapshot (or empty: null) found on {@code branch}. */
    static Member at(Table table, Long snapshotId, String branch, Long barrier) {
      return new Member(table, true, snapshotId, branch, barrier);
    }
  }

  final String level;
  /** The cut's barrier T*; null at read-uncommitted, for a tag, or when nothing could be resolved. */
  final Long barrier;
  /** The tag every table is read at, or null for a resolved cut. */
  final String tag;
  /** The component's tables that exist, by name, sorted. */
  final Map<String, Member> members;
  /** Tables left out of the cut -> why (an error raised when the statement loads one). */
  final Map<String, ConsistentException> blocked;

  Scope(String level, Long barrier, String tag, Map<String, Member> members, Map<String, ConsistentException> blocked) {
    this.level = level;
    this.barrier = barrier;
    this.tag = tag;
    this.members = Collections.unmodifiableMap(new TreeMap<>(members));
    this.blocked = Collections.unmodifiableMap(new LinkedHashMap<>(blocked));
  }

  /**
   * The scope of a resolved cut over {@code tables} (the component's tables that exist): each table the
   * cut holds at its snapshot, the others outside it; {@code cut} is null when no table could be resolved.
   */
  static Scope ofCut(String level, Cut cut, Map<String, Table> tables, Map<String, ConsistentException> blocked) {
    Map<String, Member> members = new TreeMap<>();
    for (Map.Entry<String, Table> e : tables.entrySet()) {
      TableCut at = cut == null ? null : cut.tables.get(e.getKey());
      members.put(e.getKey(), at == null ? Member.outside(e.getValue()) : Member.at(e.getValue(), at.snapshotId, at.branch, at.barrier));
    }
    return new Scope(level, cut == null ? null : cut.barrier, null, members, blocked);
  }

  /** The same cut with more tables left out. */
  Scope withBlocked(Map<String, ConsistentException> more) {
    Map<String, ConsistentException> all = new LinkedHashMap<>(blocked);
    all.putAll(more);
    return new Scope(level, barrier, tag, members, all);
  }
}
