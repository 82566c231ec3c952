package io.consistentcatalog.spark.read;

import io.consistentcatalog.core.TableState;
import java.util.Map;
import org.apache.iceberg.Table;

/**
 * Every table of the catalog as one resolution loaded it ({@link TableLoader#loadAll}): what the resolver
 * reads (the states) and what the cut then serves (the very same loads, pinned).
 */
final class LoadedCatalog {
  /** Table -> its load, sorted by name; metadata tables and tables dropped meanwhile left out. */
  final Map<String, Table> tables;
  /** Table -> its state, for the same tables in listing order. */
  final Map<String, TableState> states;
  /** Listing and loading figures; the resolution adds its own. */
  final ResolutionTimings timings;

  LoadedCatalog(Map<String, Table> tables, Map<String, TableState> states, ResolutionTimings timings) {
    this.tables = tables;
    this.states = states;
    this.timings = timings;
  }
}
