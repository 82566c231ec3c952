package io.consistentcatalog.rest;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Map;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.jdbc.JdbcClientPool;

/**
 * Freshness-aware loading (the REST spec's {@code ETag} / {@code If-None-Match} / {@code 304 Not
 * Modified} on loadTable): a table's ETag names its current metadata file, and whether a client's ETag
 * is still current is answered from the catalog's pointer alone, one indexed query over the JDBC
 * catalog's {@code iceberg_tables} row, without reading or parsing the metadata file that a full
 * loadTable reads (Iceberg 1.10's {@code CatalogHandlers} has no ETag support; servers that do, such as
 * Polaris and Gravitino, compare an entity version or the metadata location the same way).
 *
 * <p>The body of a loadTable answer is a function of the metadata file alone (this server adds no
 * config or credentials), so an ETag derived from the location is a strong validator.
 */
final class MetadataPointers implements AutoCloseable {
  private static final String POINTER =
      "SELECT metadata_location FROM iceberg_tables"
          + " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?";
  /** With the V1 schema the row may be a view's: a view is no table (loadTable answers 404 for it). */
  private static final String TABLE_POINTER =
      POINTER + " AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)";

  private final String catalogName;
  private final JdbcClientPool connections;
  private volatile Boolean typed; // whether iceberg_tables has the V1 iceberg_type column

  MetadataPointers(String catalogName, Map<String, String> catalogProperties) {
    this.catalogName = catalogName;
    this.connections =
        new JdbcClientPool(2, catalogProperties.get(CatalogProperties.URI), catalogProperties);
  }

  /** The strong ETag of a table whose current metadata file is {@code metadataLocation}. */
  static String etag(String metadataLocation) {
    return "\"" + sha256Hex(metadataLocation).substring(0, 32) + "\"";
  }

  /**
   * The current ETag of {@code table} when {@code ifNoneMatch} (a list of ETags, or {@code *}) names
   * its current metadata file, else null; null too when the table does not exist (the full load then
   * answers 404).
   */
  String unchanged(TableIdentifier table, String ifNoneMatch) {
    String location = currentLocation(table);
    if (location == null) {
      return null;
    }
    String current = etag(location);
    for (String candidate : ifNoneMatch.split(",")) {
      String tag = candidate.trim();
      if (tag.startsWith("W/")) {
        tag = tag.substring(2); // weak comparison, as RFC 9110 prescribes for If-None-Match
      }
      if (tag.equals("*") || tag.equals(current)) {
        return current;
      }
    }
    return null;
  }

  private String currentLocation(TableIdentifier table) {
    try {
      return connections.run(
          connection -> {
            if (typed == null) {
              typed = hasTypeColumn(connection);
            }
            try (PreparedStatement query =
                connection.prepareStatement(typed ? TABLE_POINTER : POINTER)) {
              query.setString(1, catalogName);
              query.setString(2, String.join(".", table.namespace().levels()));
              query.setString(3, table.name());
              try (ResultSet rows = query.executeQuery()) {
                return rows.next() ? rows.getString(1) : null;
              }
            }
          });
    } catch (SQLException | InterruptedException | RuntimeException e) {
      if (e instanceof InterruptedException) {
        Thread.currentThread().interrupt();
      }
      return null; // cannot tell: the full load answers (200 or its own error)
    }
  }

  private static boolean hasTypeColumn(java.sql.Connection connection) throws SQLException {
    try (ResultSet columns = connection.getMetaData().getColumns(null, null, "iceberg_tables", null)) {
      while (columns.next()) {
        if ("iceberg_type".equalsIgnoreCase(columns.getString("COLUMN_NAME"))) {
          return true;
        }
      }
    }
    return false;
  }

  static String sha256Hex(String text) {
    try {
      byte[] digest =
          MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8));
      StringBuilder hex = new StringBuilder();
      for (byte b : digest) {
        hex.append(String.format("%02x", b));
      }
      return hex.toString();
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  @Override
  public void close() {
    connections.close();
  }
}
