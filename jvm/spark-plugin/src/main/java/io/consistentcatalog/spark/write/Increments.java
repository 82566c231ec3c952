package io.consistentcatalog.spark.write;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ChangeRange;
import io.consistentcatalog.core.EpochPlanner;
import io.consistentcatalog.core.SnapshotRecord;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.ServedTables;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import org.apache.iceberg.Table;

/**
 * What an incremental epoch reads ({@code spark.sql.consistent.incremental=true}, protocol §5.5 "Incremental epochs
 * in Spark SQL"): each source as the rows appended between the sink's previous input (its {@code main} head's
 * recorded {@code consistent.sources}) and the plan's input, so the range is fixed by the plan inside the statement.
 * A sink without a previous epoch reads each source whole at its input; a source unchanged is read empty; a range
 * with a data-changing snapshot that is not an append is refused with the way out (recompute the sink whole).
 */
final class Increments {
  /** The table each source is read as, by name. */
  final Map<String, org.apache.spark.sql.connector.catalog.Table> tables = new TreeMap<>();
  /** For the epoch's line: e.g. {@code incremental: raw.orders snapshots (1, 2]}. */
  final String description;

  private Increments(String description) {
    this.description = description;
  }

  static Increments of(
      ServedTables served, String catalogName, String sink, EpochPlanner.Plan plan, Map<String, Table> loaded,
      Map<String, TableState> states) {
    Map<String, Long> previous = plan.sinks.get(sink).previousInputs;
    boolean first = previous == null || previous.isEmpty() // a new generation reads its sources whole (§6.10)
        || plan.sinks.get(sink).action == io.consistentcatalog.core.EpochPlanner.Action.REGENERATE;
    List<String> parts = new ArrayList<>();
    Map<String, org.apache.spark.sql.connector.catalog.Table> tables = new TreeMap<>();
    for (Map.Entry<String, Long> input : plan.inputs.entrySet()) {
      String name = input.getKey();
      Long to = input.getValue();
      Table source = loaded.get(name);
      if (first || !previous.containsKey(name) || previous.get(name) == null) {
        tables.put(name, served.atInput(source, to, name)); // from nothing: everything at the input is new
        parts.add(name + " whole");
        continue;
      }
      long from = previous.get(name);
      if (Objects.equals(from, to)) {
        tables.put(name, served.atInput(source, null, name));
        parts.add(name + " unchanged");
        continue;
      }
      TableState state = states.get(name);
      if (to == null || !ChangeRange.appendsOnly(state, from, to)) {
        throw Errors.raise(Errors.analysis("CONSISTENT_READ.NOT_INCREMENTAL", catalogName + "." + sink + ": an "
            + "incremental epoch reads the rows appended to each source since the sink's last epoch, but " + name
            + " changed otherwise between snapshot " + from + " (" + barrier(state, from) + ") and "
            + (to == null ? "barrier " + Barriers.format(plan.barrier) + ", where it is empty" : "snapshot " + to + " ("
            + barrier(state, to) + ")") + " (rows overwritten, deleted or merged: a derived table recomputed, a "
            + "revision, or retention cut the history short): its changes are not all inserts — recompute "
            + sink + " whole (SET spark.sql.consistent.rebuild=true and write it without spark.sql.consistent."
            + "incremental; dbt: dbt run --full-refresh -s <the model>)"));
      }
      tables.put(name, served.appendedBetween(source, from, to, name));
      parts.add(name + " snapshots (" + from + ", " + to + "]");
    }
    Increments increments = new Increments("incremental: " + String.join(", ", parts));
    increments.tables.putAll(tables);
    return increments;
  }

  private static String barrier(TableState state, long snapshot) {
    SnapshotRecord record = state == null ? null : state.snapshots.get(snapshot);
    Long barrier = record == null ? null : record.barrier();
    return barrier == null ? "barrier unknown" : "barrier " + Barriers.format(barrier);
  }
}
