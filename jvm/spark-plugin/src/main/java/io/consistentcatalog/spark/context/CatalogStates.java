package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.TableState;
import java.util.Map;

/**
 * Every table of the catalog as its state, for the writes' cycle checks and revisions: the read side's loads
 * ({@code read.CutSession}: one listing and the session's cached loads), handed to writes and streams through the
 * {@link CatalogContext} instead of the cut session itself.
 */
public interface CatalogStates {
  /** Every table's state, loaded as a resolution loads them ({@code name} among them); null when it is not a table. */
  Map<String, TableState> catalogStates(String name);

  /**
   * What the current statement's cut resolution loaded, when it loaded {@code name} (every table of the catalog,
   * {@link StatementLoads}); null outside a statement, for a cut held across statements ({@code refresh=manual}: its
   * loads may be old), or when the statement has not resolved a cut that loaded {@code name}.
   */
  StatementLoads statementLoads(String name);
}
