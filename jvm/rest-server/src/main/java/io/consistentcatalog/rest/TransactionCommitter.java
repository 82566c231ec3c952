package io.consistentcatalog.rest;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableMetadataParser;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.UpdateRequirement;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.BadRequestException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.requests.CommitTransactionRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.util.LocationUtil;

/**
 * {@code POST /v1/transactions/commit}, all or nothing across tables.
 *
 * <p>Iceberg's reference adapter commits the tables one after the other (its own comment: "does not
 * guarantee true transactional atomicity"). Here every table's requirements are validated against
 * its current metadata and every new metadata file is written first; then one JDBC transaction runs
 * each table's compare-and-swap, the very statement {@code JdbcTableOperations} uses ({@code UPDATE
 * iceberg_tables SET metadata_location = new ... WHERE ... AND metadata_location = base}), and
 * commits only if every row matched. A table that only carries requirements gets a no-op update
 * under the same condition, so it too must be unchanged at commit time.
 *
 * <p>Not supported in a transaction: creating a table ({@code assert-create}) - a 400.
 */
final class TransactionCommitter {
  private static final String CAS_SQL =
      "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ?"
          + " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?"
          + " AND metadata_location = ?";
  private static final String ASSERT_SQL =
      "UPDATE iceberg_tables SET metadata_location = metadata_location"
          + " WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?"
          + " AND metadata_location = ?";

  private final JdbcCatalog catalog;
  private final String jdbcUri;
  private final Properties jdbcProperties = new Properties();

  TransactionCommitter(JdbcCatalog catalog, Map<String, String> catalogProperties) {
    this.catalog = catalog;
    this.jdbcUri = catalogProperties.get(CatalogProperties.URI);
    // as JdbcClientPool does: catalog properties "jdbc.X" are JDBC connection properties "X"
    catalogProperties.forEach(
        (key, value) -> {
          if (key.startsWith(JdbcCatalog.PROPERTY_PREFIX)) {
            jdbcProperties.put(key.substring(JdbcCatalog.PROPERTY_PREFIX.length()), value);
          }
        });
  }

  private static final class Prepared {
    final TableIdentifier ident;
    final TableOperations ops;
    final String baseLocation;
    final String newLocation; // null: requirements only, nothing to write

    Prepared(TableIdentifier ident, TableOperations ops, String baseLocation, String newLocation) {
      this.ident = ident;
      this.ops = ops;
      this.baseLocation = baseLocation;
      this.newLocation = newLocation;
    }
  }

  void commit(CommitTransactionRequest request) {
    List<Prepared> prepared = new ArrayList<>();
    Set<TableIdentifier> seen = new HashSet<>();
    try {
      for (UpdateTableRequest change : request.tableChanges()) {
        TableIdentifier ident = change.identifier();
        if (ident == null) {
          throw new BadRequestException("Every table change needs an identifier");
        }
        if (!seen.add(ident)) {
          throw new BadRequestException("Table %s appears twice in the transaction", ident);
        }
        for (UpdateRequirement requirement : change.requirements()) {
          if (requirement instanceof UpdateRequirement.AssertTableDoesNotExist) {
            throw new BadRequestException(
                "Creating a table (assert-create) in a multi-table transaction is not supported: %s",
                ident);
          }
        }
        prepared.add(prepare(ident, change));
      }
      casAll(prepared);
    } catch (RuntimeException e) {
      if (!(e instanceof CommitStateUnknownException)) {
        deleteWritten(prepared);
      }
      throw e;
    }
  }

  /** Validate the requirements against the current metadata, apply the updates, write the file. */
  private Prepared prepare(TableIdentifier ident, UpdateTableRequest change) {
    Table table = catalog.loadTable(ident); // NoSuchTableException -> 404
    if (!(table instanceof BaseTable)) {
      throw new IllegalStateException("Not a BaseTable: " + ident);
    }
    TableOperations ops = ((BaseTable) table).operations();
    TableMetadata base = ops.current();
    change.requirements().forEach(requirement -> requirement.validate(base)); // -> 409
    TableMetadata.Builder builder = TableMetadata.buildFrom(base);
    change.updates().forEach(update -> update.applyTo(builder));
    TableMetadata updated = builder.build();
    if (updated.changes().isEmpty()) {
      return new Prepared(ident, ops, base.metadataFileLocation(), null);
    }
    String location = newMetadataLocation(base, updated);
    TableMetadataParser.write(updated, ops.io().newOutputFile(location));
    return new Prepared(ident, ops, base.metadataFileLocation(), location);
  }

  /** Named as BaseMetastoreTableOperations names them: 00042-uuid.metadata.json. */
  private static String newMetadataLocation(TableMetadata base, TableMetadata updated) {
    String codecName =
        updated.property(
            TableProperties.METADATA_COMPRESSION, TableProperties.METADATA_COMPRESSION_DEFAULT);
    String extension =
        TableMetadataParser.getFileExtension(TableMetadataParser.Codec.fromName(codecName));
    String dir = updated.properties().get(TableProperties.WRITE_METADATA_LOCATION);
    dir = dir != null ? LocationUtil.stripTrailingSlash(dir) : updated.location() + "/metadata";
    return String.format(
        "%s/%05d-%s%s", dir, parseVersion(base.metadataFileLocation()) + 1, UUID.randomUUID(), extension);
  }

  private static int parseVersion(String metadataLocation) {
    if (metadataLocation == null) {
      return -1;
    }
    String name = metadataLocation.substring(metadataLocation.lastIndexOf('/') + 1);
    int dash = name.indexOf('-');
    try {
      return dash > 0 ? Integer.parseInt(name.substring(0, dash)) : -1;
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  private void casAll(List<Prepared> prepared) {
    String catalogName = catalog.name();
    boolean committed = false;
    try (Connection conn = DriverManager.getConnection(jdbcUri, jdbcProperties)) {
      conn.setAutoCommit(false);
      try {
        for (Prepared p : prepared) {
          String namespace = String.join(".", p.ident.namespace().levels());
          int updated;
          if (p.newLocation != null) {
            try (PreparedStatement stmt = conn.prepareStatement(CAS_SQL)) {
              stmt.setString(1, p.newLocation);
              stmt.setString(2, p.baseLocation);
              stmt.setString(3, catalogName);
              stmt.setString(4, namespace);
              stmt.setString(5, p.ident.name());
              stmt.setString(6, p.baseLocation);
              updated = stmt.executeUpdate();
            }
          } else {
            try (PreparedStatement stmt = conn.prepareStatement(ASSERT_SQL)) {
              stmt.setString(1, catalogName);
              stmt.setString(2, namespace);
              stmt.setString(3, p.ident.name());
              stmt.setString(4, p.baseLocation);
              updated = stmt.executeUpdate();
            }
          }
          if (updated != 1) {
            throw new CommitFailedException(
                "Transaction aborted: %s was changed concurrently (expected metadata %s)",
                p.ident, p.baseLocation);
          }
        }
      } catch (SQLException | RuntimeException e) {
        conn.rollback();
        if (e instanceof CommitFailedException) {
          throw (CommitFailedException) e;
        }
        throw new CommitFailedException(e, "Transaction aborted and rolled back: %s", e.getMessage());
      }
      try {
        conn.commit();
        committed = true;
      } catch (SQLException e) {
        throw new CommitStateUnknownException(e);
      }
    } catch (SQLException e) {
      if (committed) { // only closing the connection failed
        System.err.println("RestCatalogServer: closing a JDBC connection: " + e);
        return;
      }
      // opening the connection or rolling back failed: nothing was committed
      throw new CommitFailedException(e, "Transaction not committed: %s", e.getMessage());
    }
  }

  private static void deleteWritten(List<Prepared> prepared) {
    for (Prepared p : prepared) {
      if (p.newLocation != null) {
        try {
          p.ops.io().deleteFile(p.newLocation);
        } catch (RuntimeException e) {
          System.err.println("RestCatalogServer: could not delete " + p.newLocation + ": " + e);
        }
      }
    }
  }
}
