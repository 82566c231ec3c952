package io.consistentcatalog.spark;

import org.apache.iceberg.spark.SparkCatalog;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.View;
import org.apache.spark.sql.connector.catalog.ViewInfo;

/**
 * Spark 4's part of {@link ReadOnlySparkCatalog}: the refusals of the catalog methods whose signatures differ
 * between Spark lines (Spark 4's {@code ViewCatalog} creates and replaces views from a {@code ViewInfo}).
 */
abstract class LineSparkCatalog extends SparkCatalog {
  /** The READ_ONLY error refusing {@code statement} on {@code ident}, to be thrown. */
  abstract RuntimeException refusedView(String statement, Identifier ident);

  @Override
  public View createView(ViewInfo info) {
    throw refusedView("CREATE VIEW", info.ident());
  }

  @Override
  public View replaceView(ViewInfo info, boolean orCreate) {
    throw refusedView("CREATE OR REPLACE VIEW", info.ident());
  }
}
