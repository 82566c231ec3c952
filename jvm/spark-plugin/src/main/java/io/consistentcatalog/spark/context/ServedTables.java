package io.consistentcatalog.spark.context;

import org.apache.spark.sql.connector.catalog.Table;

/**
 * The tables the read side serves at a cut, as a write sees them: an epoch's sources are the tables of its statement
 * served at the statement's cut, and its query reads them at the plan's inputs instead. Implemented by the read
 * side ({@code read.CutTables}); writes get it from the {@link CatalogContext}, so they never name the read classes.
 */
public interface ServedTables {
  /** The name ({@code ns.t}) of {@code table} when it is a table of this catalog served at a cut; null otherwise. */
  String servedAtCut(Table table);

  /** {@code source} read at {@code snapshot} ({@code snap(source, T)}), or empty at the cut when {@code snapshot} is null. */
  Table atInput(org.apache.iceberg.Table source, Long snapshot, String name);

  /** The rows of {@code source} appended after snapshot {@code from} up to snapshot {@code to} (§5.5's increment). */
  Table appendedBetween(org.apache.iceberg.Table source, long from, long to, String name);
}
