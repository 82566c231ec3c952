package io.consistentcatalog.spark;

import java.util.Map;
import org.apache.iceberg.spark.SparkCatalog;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.View;
import org.apache.spark.sql.types.StructType;

/**
 * Spark 3.5's part of {@link DdlRefusingSparkCatalog}: the refusals of the catalog methods whose signatures differ
 * between Spark lines (Spark 3.5's {@code ViewCatalog} creates and replaces views from their parts; Spark 4's
 * from a {@code ViewInfo}). Each line module has its own copy of this class.
 */
abstract class LineSparkCatalog extends SparkCatalog {
  /** The READ_ONLY error refusing {@code statement} on {@code ident}, to be thrown. */
  abstract RuntimeException refusedView(String statement, Identifier ident);

  @Override
  public View createView(
      Identifier ident,
      String sql,
      String currentCatalog,
      String[] currentNamespace,
      StructType schema,
      String[] queryColumnNames,
      String[] columnAliases,
      String[] columnComments,
      Map<String, String> properties) {
    throw refusedView("CREATE VIEW", ident);
  }

  @Override
  public View replaceView(
      Identifier ident,
      String sql,
      String currentCatalog,
      String[] currentNamespace,
      StructType schema,
      String[] queryColumnNames,
      String[] columnAliases,
      String[] columnComments,
      Map<String, String> properties) {
    throw refusedView("CREATE OR REPLACE VIEW", ident);
  }
}
