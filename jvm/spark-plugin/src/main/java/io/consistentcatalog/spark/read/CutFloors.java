package io.consistentcatalog.spark.read;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.Cut;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.TableCut;
import io.consistentcatalog.core.TableState;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The monotone rule of a session's latest cuts: for the same isolation level, a latest cut whose barrier
 * is below one this session already served is not used, the earlier cut is served again; unless a
 * revision rolled a table of the component back (protocol §8: its {@code consistent.revision} changed),
 * which legitimately moves the component's cut back. Not thread-safe: {@link CutSession} calls it under
 * its lock.
 */
final class CutFloors {
  /** The newest latest cut served for a table at a level: later latest cuts are never older. */
  private static final class Floor {
    final long barrier;
    final long revision;
    final Scope scope;

    Floor(long barrier, long revision, Scope scope) {
      this.barrier = barrier;
      this.revision = revision;
      this.scope = scope;
    }
  }

  /** By {@code level|table}. */
  private final Map<String, Floor> floors = new HashMap<>();

  private static String key(String level, String table) {
    return level + "|" + table;
  }

  /**
   * The scope to serve instead of {@code scope}, the freshly resolved latest cut {@code cut} of
   * {@code component}: {@code scope} itself (and it becomes the floor of its tables) unless an earlier,
   * newer cut of the same tables at the same revisions was served; then that earlier scope, with the
   * tables that joined the component since left out (they are not complete at its barrier yet). A changed
   * revision of any table of the component first forgets every floor of the component.
   */
  Scope apply(Scope scope, Cut cut, List<String> component, Map<String, TableState> states) {
    for (String table : component) {
      Floor floor = floors.get(key(scope.level, table));
      TableState state = states.get(table);
      if (floor != null && state != null && floor.revision != state.revision()) {
        for (String member : component) {
          floors.remove(key(scope.level, member));
        }
        break;
      }
    }
    if (cut == null || cut.barrier == null) {
      return scope;
    }
    Scope previous = null;
    for (TableCut t : cut.tables.values()) {
      Floor floor = floors.get(key(scope.level, t.table));
      if (floor != null && cut.barrier < floor.barrier && floor.revision == t.revision) {
        previous = floor.scope;
        break;
      }
    }
    if (previous != null) {
      Map<String, ConsistentException> joined = new LinkedHashMap<>();
      for (String table : component) {
        if (!previous.members.containsKey(table) && scope.members.containsKey(table)) {
          joined.put(
              table,
              new ConsistentException(
                  ErrorKind.RESOLUTION,
                  table,
                  table + " joined the pipeline after this session read it at barrier " + previous.barrier
                      + " and is not complete at that barrier yet; a cut never goes back, so it is readable once its "
                      + "job catches up (or in a new session)"));
        }
      }
      return joined.isEmpty() ? previous : previous.withBlocked(joined);
    }
    for (TableCut t : cut.tables.values()) {
      floors.put(key(scope.level, t.table), new Floor(cut.barrier, t.revision, scope));
    }
    return scope;
  }
}
