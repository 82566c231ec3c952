package io.consistentcatalog.core;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/** Snapshot ids that all reflect the same root data, the same barrier ({@code resolver.Cut}). */
public final class Cut {
  public final String level;
  /** The cut's barrier T*; null at read-uncommitted. */
  public final Long barrier;
  public final Map<String, TableCut> tables;

  public Cut(String level, Long barrier, Map<String, TableCut> tables) {
    this.level = level;
    this.barrier = barrier;
    this.tables = Collections.unmodifiableMap(new LinkedHashMap<>(tables));
  }

  public TableCut get(String table) {
    return tables.get(table);
  }
}
