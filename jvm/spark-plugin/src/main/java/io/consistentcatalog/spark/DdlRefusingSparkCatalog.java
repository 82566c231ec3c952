package io.consistentcatalog.spark;

import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.Names;
import java.util.Map;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.NamespaceChange;
import org.apache.spark.sql.connector.catalog.StagedTable;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.catalog.View;
import org.apache.spark.sql.connector.catalog.ViewChange;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;

/**
 * The consistent catalog's base: Iceberg's SparkCatalog with every DDL refused (reads are served at a cut and writes
 * become epochs and ingests in {@link ConsistentSparkCatalog}; the catalog's structure is changed only through the
 * plain catalog): creating, replacing,
 * altering, renaming and dropping tables, views and namespaces. Each refusal is the one-line
 * {@code [CONSISTENT_CUT.READ_ONLY]} error naming the statement and the plain catalog to write through
 * ({@link Errors#readOnly}). Writes to a served table are refused by the table itself ({@link PinnedTable},
 * {@link EmptyTable}).
 */
abstract class DdlRefusingSparkCatalog extends LineSparkCatalog {
  /** This catalog's name as Spark configured it ({@code lake_consistent}), as the refusals name it. */
  abstract String catalogName();

  /** The plain catalog's name: where a refusal points the writer. */
  public abstract String plainCatalogName();

  /** The READ_ONLY error refusing {@code what}, to be thrown. */
  RuntimeException refused(String what) {
    return Errors.raise(Errors.readOnly(catalogName(), plainCatalogName(), what));
  }

  @Override
  RuntimeException refusedView(String statement, Identifier ident) {
    return refused(statement + " " + table(ident));
  }

  private String table(Identifier ident) {
    return catalogName() + "." + Names.tableName(ident);
  }

  private String namespace(String[] namespace) {
    return catalogName() + "." + String.join(".", namespace);
  }

  @Override
  public Table createTable(Identifier ident, StructType schema, Transform[] transforms, Map<String, String> properties) {
    throw refused("CREATE TABLE " + table(ident));
  }

  @Override
  public StagedTable stageCreate(Identifier ident, StructType schema, Transform[] transforms, Map<String, String> properties) {
    throw refused("CREATE TABLE " + table(ident));
  }

  @Override
  public StagedTable stageReplace(Identifier ident, StructType schema, Transform[] transforms, Map<String, String> properties) {
    throw refused("REPLACE TABLE " + table(ident));
  }

  @Override
  public StagedTable stageCreateOrReplace(
      Identifier ident, StructType schema, Transform[] transforms, Map<String, String> properties) {
    throw refused("CREATE OR REPLACE TABLE " + table(ident));
  }

  @Override
  public Table alterTable(Identifier ident, TableChange... changes) {
    throw refused("ALTER TABLE " + table(ident));
  }

  @Override
  public boolean dropTable(Identifier ident) {
    throw refused("DROP TABLE " + table(ident));
  }

  @Override
  public boolean purgeTable(Identifier ident) {
    throw refused("DROP TABLE ... PURGE " + table(ident));
  }

  @Override
  public void renameTable(Identifier from, Identifier to) {
    throw refused("ALTER TABLE " + table(from) + " RENAME");
  }

  @Override
  public void createNamespace(String[] namespace, Map<String, String> metadata) {
    throw refused("CREATE NAMESPACE " + namespace(namespace));
  }

  @Override
  public void alterNamespace(String[] namespace, NamespaceChange... changes) {
    throw refused("ALTER NAMESPACE " + namespace(namespace));
  }

  @Override
  public boolean dropNamespace(String[] namespace, boolean cascade) {
    throw refused("DROP NAMESPACE " + namespace(namespace));
  }

  @Override
  public View alterView(Identifier ident, ViewChange... changes) {
    throw refused("ALTER VIEW " + table(ident));
  }

  @Override
  public boolean dropView(Identifier ident) {
    throw refused("DROP VIEW " + table(ident));
  }

  @Override
  public void renameView(Identifier from, Identifier to) {
    throw refused("ALTER VIEW " + table(from) + " RENAME");
  }
}
