package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.TableState;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;

/**
 * Every table of the catalog as the current statement's cut resolution loaded it (the read side's one listing and
 * loads, {@code read.TableLoader}): the Iceberg table and its state. An epoch plans from these ({@link EpochPlanning}:
 * the sink, its sources and their closure, the registration's cycle check) instead of loading them again, as
 * Python's {@code EpochJob.plan} plans from its one load of the catalog; the commits' requirements, not these copies,
 * decide whether what is planned from them lands.
 */
public final class StatementLoads {
  private final Map<String, Table> tables;
  private final Map<String, TableState> states;
  /** The metadata each state was read from (a table's operations may be refreshed later by another statement). */
  private final Map<String, TableMetadata> metadata = new HashMap<>();

  /** {@code tables} and their {@code states}, taken as loaded (before anything refreshes the tables again). */
  public StatementLoads(Map<String, Table> tables, Map<String, TableState> states) {
    this.tables = Collections.unmodifiableMap(tables);
    this.states = Collections.unmodifiableMap(states);
    for (Map.Entry<String, Table> e : tables.entrySet()) {
      if (states.containsKey(e.getKey()) && e.getValue() instanceof HasTableOperations) {
        metadata.put(e.getKey(), ((HasTableOperations) e.getValue()).operations().current());
      }
    }
  }

  /** The metadata {@code name}'s state was read from (null: not a table when the statement resolved its cut). */
  public TableMetadata metadata(String name) {
    return metadata.get(name);
  }

  /** {@code name} as loaded (null: not a table when the statement resolved its cut). */
  public Table table(String name) {
    return tables.get(name);
  }

  /** Every table as loaded, by name. */
  public Map<String, Table> tables() {
    return tables;
  }

  /** {@code name}'s state as loaded (null: not a table when the statement resolved its cut). */
  public TableState state(String name) {
    return metadata.containsKey(name) ? states.get(name) : null;
  }

  /** Every table's state, in listing order. */
  public Map<String, TableState> states() {
    return states;
  }
}
