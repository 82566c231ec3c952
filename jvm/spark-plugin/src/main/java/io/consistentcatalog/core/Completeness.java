package io.consistentcatalog.core;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.function.Function;

/**
 * Which barriers a table is complete at: its content reflects exactly its sources' state there
 * ({@code consistent_catalog.completeness.Completeness}). A source missing from the states is trusted.
 */
public final class Completeness {
  private final Map<String, TableState> states;
  private final Function<TableState, String> branchOf;
  private final Map<String, Map<Long, Boolean>> memo = new HashMap<>();

  public Completeness(Map<String, TableState> states, Function<TableState, String> branchOf) {
    this.states = states;
    this.branchOf = branchOf;
  }

  public boolean complete(String name, long barrier) {
    Map<Long, Boolean> byBarrier = memo.computeIfAbsent(name, k -> new HashMap<>());
    Boolean known = byBarrier.get(barrier);
    if (known == null) {
      known = computeComplete(name, barrier);
      byBarrier.put(barrier, known);
    }
    return known;
  }

  private boolean computeComplete(String name, long barrier) {
    TableState state = states.get(name);
    if (state == null) {
      return true;
    }
    String branch = branchOf.apply(state);
    Long mark = state.watermark(branch);
    if (mark == null || barrier > mark) {
      return false;
    }
    if (state.isRoot()) {
      return true;
    }
    BranchBarriers history = state.branch(branch);
    long[] point = history.snapAt(barrier);
    Long content = point == null ? null : point[0];
    Long head = state.head(branch);
    boolean atHead =
        (content == null ? head == null : content.equals(head))
            || (content == null && state.branch(branch).headBarrier() == null);
    Long watermarkProperty = state.watermarkProperty();
    if (watermarkProperty != null && barrier == watermarkProperty && atHead && markedOn(state, content)) {
      // docs/protocol.md §4.2, watermark-only epochs (published as in §5.3): an empty epoch published only
      // the watermark on top of this content
      for (String source : state.sources()) {
        if (!complete(source, barrier)) {
          return false;
        }
      }
      return true;
    }
    Map<String, Long> recorded = state.recordedInputs(content);
    for (String source : state.sources()) {
      TableState sourceState = states.get(source);
      if (sourceState == null) {
        continue;
      }
      if (!complete(source, barrier)) {
        return false;
      }
      BranchBarriers sourceHistory = sourceState.branch(branchOf.apply(sourceState));
      long[] sourcePoint = sourceHistory.snapAt(barrier);
      if (!sourceHistory.sameData(recorded.get(source), sourcePoint == null ? null : sourcePoint[0])) {
        return false;
      }
    }
    return true;
  }

  private static boolean markedOn(TableState state, Long content) {
    String marker = state.properties.get(Keys.WATERMARK_SNAPSHOT);
    Long main = state.head();
    return marker == null
        || marker.equals(main == null ? "None" : Long.toString(main))
        || marker.equals(content == null ? Keys.NO_SNAPSHOT : Long.toString(content));
  }

  public boolean allComplete(List<String> names, long barrier) {
    for (String name : names) {
      if (!complete(name, barrier)) {
        return false;
      }
    }
    return true;
  }

  /** {@code upper}, then every barrier b and b - 1 below it of the known tables' snapshots, newest first. */
  public List<Long> candidates(long upper) {
    TreeSet<Long> points = new TreeSet<>();
    points.add(upper);
    for (TableState state : states.values()) {
      BranchBarriers history = state.branch(branchOf.apply(state));
      for (int i = 0; i < history.size(); i++) {
        Long value = history.barrierAt(i);
        if (value != null && value <= upper) {
          points.add(value);
          if (value > 0) {
            points.add(value - 1);
          }
        }
      }
    }
    return new ArrayList<>(points.descendingSet());
  }

  /** The newest barrier <= {@code upper} at which every table in {@code names} is complete (null: none is). */
  public Long latest(List<String> names, long upper) {
    if (allComplete(names, upper)) {
      return upper;
    }
    for (long barrier : candidates(upper)) {
      if (allComplete(names, barrier)) {
        return barrier;
      }
    }
    return null;
  }
}
