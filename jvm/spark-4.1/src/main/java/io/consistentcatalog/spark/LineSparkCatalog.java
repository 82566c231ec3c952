package io.consistentcatalog.spark;

import org.apache.iceberg.spark.SparkCatalog;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.StagedTable;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableInfo;
import org.apache.spark.sql.connector.catalog.View;
import org.apache.spark.sql.connector.catalog.ViewInfo;

/**
 * Spark 4.1's part of {@link DdlRefusingSparkCatalog}: the refusals of the catalog methods whose signatures differ
 * between Spark lines. As on 4.0, views are created and replaced from a {@code ViewInfo}; and Spark 4.1 creates
 * and stages tables from a {@code TableInfo}, which Iceberg's 4.1 {@code SparkCatalog} implements directly
 * (without going through the {@code StructType} variants the shared class refuses), so they are refused here too.
 */
abstract class LineSparkCatalog extends SparkCatalog {
  /** The READ_ONLY error refusing {@code statement} on {@code ident} (a table or a view), to be thrown. */
  abstract RuntimeException refusedView(String statement, Identifier ident);

  @Override
  public View createView(ViewInfo info) {
    throw refusedView("CREATE VIEW", info.ident());
  }

  @Override
  public View replaceView(ViewInfo info, boolean orCreate) {
    throw refusedView("CREATE OR REPLACE VIEW", info.ident());
  }

  @Override
  public Table createTable(Identifier ident, TableInfo info) {
    throw refusedView("CREATE TABLE", ident);
  }

  @Override
  public StagedTable stageCreate(Identifier ident, TableInfo info) {
    throw refusedView("CREATE TABLE", ident);
  }

  @Override
  public StagedTable stageReplace(Identifier ident, TableInfo info) {
    throw refusedView("REPLACE TABLE", ident);
  }

  @Override
  public StagedTable stageCreateOrReplace(Identifier ident, TableInfo info) {
    throw refusedView("CREATE OR REPLACE TABLE", ident);
  }
}
