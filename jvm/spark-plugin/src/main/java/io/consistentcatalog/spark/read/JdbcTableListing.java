package io.consistentcatalog.spark.read;

import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Map;
import java.util.TreeMap;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.jdbc.JdbcClientPool;

/**
 * Every table of Iceberg's JDBC catalog with its current metadata file, in one query: the rows its
 * {@code listTables} reads namespace by namespace (and its {@code loadTable} one by one), read at once
 * from its {@code iceberg_tables} table (views left out, as {@code listTables} leaves them out), as
 * {@code consistent_catalog.loading} does for pyiceberg's SQL catalog. Holds one connection of its own to
 * the catalog's database. Not thread-safe: {@link TableLoader}'s callers hold the session's lock.
 */
final class JdbcTableListing {
  private static final String JDBC_TABLES =
      "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables WHERE catalog_name = ?";
  private static final String JDBC_TABLES_ONLY = JDBC_TABLES + " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)";

  /** The JDBC catalog's name in {@code iceberg_tables} (the plain catalog's name). */
  private final String catalogName;
  /** The options the Iceberg catalog underneath was built with (the listing connects with them). */
  private final Map<String, String> catalogOptions;
  /** One connection of our own to a JDBC catalog's database. */
  private JdbcClientPool connection;
  /** Whether the listing may be tried (false once the catalog turned out not to be Iceberg's JDBC catalog). */
  private boolean enabled = true;
  /** Whether the JDBC catalog's table has the iceberg_type column (tables and views; false: tables only). */
  private boolean typeColumn = true;

  JdbcTableListing(String catalogName, Map<String, String> catalogOptions) {
    this.catalogName = catalogName;
    this.catalogOptions = catalogOptions;
  }

  /**
   * Table -> its current metadata file, sorted by table, when {@code catalog} is Iceberg's JDBC catalog.
   * Null for another catalog, or when the query fails (the caller then lists through the API).
   */
  Map<String, String> list(Catalog catalog) {
    if (!enabled) {
      return null;
    }
    if (catalog.getClass() != JdbcCatalog.class || catalogOptions.get(CatalogProperties.URI) == null) {
      enabled = false; // another catalog (REST, Hive, Glue, a caching or custom one): its own API
      return null;
    }
    try {
      if (connection == null) {
        connection = new CatalogConnections(1, catalogOptions.get(CatalogProperties.URI), catalogOptions);
      }
      Map<String, String> found = new TreeMap<>();
      connection.run(
          conn -> {
            SQLException failed = null;
            for (String sql : typeColumn ? new String[] {JDBC_TABLES_ONLY, JDBC_TABLES} : new String[] {JDBC_TABLES}) {
              try (PreparedStatement query = conn.prepareStatement(sql)) {
                query.setString(1, catalogName);
                try (ResultSet rows = query.executeQuery()) {
                  while (rows.next()) {
                    String namespace = rows.getString(1);
                    String table = rows.getString(2);
                    found.put(namespace == null || namespace.isEmpty() ? table : namespace + "." + table, rows.getString(3));
                  }
                }
                return null;
              } catch (SQLException e) { // a catalog database from before Iceberg had views: no iceberg_type column
                found.clear();
                failed = e;
                typeColumn = false;
              }
            }
            throw failed;
          });
      return found;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return null;
    } catch (SQLException | RuntimeException e) {
      typeColumn = true; // maybe a passing failure (the database busy): try both queries again next time
      return null;
    }
  }
}
