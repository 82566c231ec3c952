package io.consistentcatalog.spark.read;

import io.consistentcatalog.core.TableState;
import org.apache.iceberg.Table;

/** One table loaded (or refreshed) for a resolution, with its state and what the load cost. */
final class LoadedTable {
  /** Null when the table does not exist (dropped meanwhile, or not a table at all). */
  final Table table;
  /** Null for a missing table or a metadata table. */
  final TableState state;
  /** The thread that loaded it (the querying thread's own loads cost no extra CPU). */
  final Thread thread;
  /** Building the state from the loaded metadata, in ns. */
  final long stateNanos;
  /** CPU time of the whole load, in ns. */
  final long cpuNanos;

  LoadedTable(Table table, TableState state, Thread thread, long stateNanos, long cpuNanos) {
    this.table = table;
    this.state = state;
    this.thread = thread;
    this.stateNanos = stateNanos;
    this.cpuNanos = cpuNanos;
  }
}
