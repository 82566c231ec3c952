package io.consistentcatalog.spark;

import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.jdbc.JdbcCatalog;

/**
 * Iceberg's JDBC catalog over {@link CatalogConnections}: the consistent catalog builds it for
 * {@code type=jdbc}, so that no call reuses a connection a restart of the database broke (protocol §6.8).
 * Everything else is Iceberg's.
 */
public class ConsistentJdbcCatalog extends JdbcCatalog {
  public ConsistentJdbcCatalog() {
    super(null, properties -> new CatalogConnections(properties.get(CatalogProperties.URI), properties), true);
  }
}
