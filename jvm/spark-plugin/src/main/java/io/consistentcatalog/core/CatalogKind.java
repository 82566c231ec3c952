package io.consistentcatalog.core;

import java.util.Locale;
import java.util.Map;

/**
 * The kind of an Iceberg catalog built from Spark's catalog options, as Iceberg picks the catalog class
 * ({@code CatalogUtil.buildIcebergCatalog}: {@code catalog-impl} when set, else {@code type}, else a Hive catalog;
 * both set is Iceberg's own error). The one answer the writers' catalog guard (protocol §6.5: which catalogs need the
 * probe, which property limit) and the OpenLineage names (§5.8: Glue's ARN) both follow, the JVM side of
 * {@code consistent_catalog.probe.catalog_kind}. A catalog without {@code type} and {@code catalog-impl} is Hive's
 * whatever its other keys say: Iceberg builds a {@code HiveCatalog} for it, {@code glue.*} keys or not.
 */
public final class CatalogKind {
  private CatalogKind() {}

  public static final String SQL = "sql";
  public static final String REST = "rest";
  public static final String HIVE = "hive";
  public static final String GLUE = "glue";

  /** {@value #SQL}, {@value #REST}, {@value #HIVE}, {@value #GLUE}, or the class's simple name (or type) of another kind. */
  public static String of(Map<String, String> options) {
    String type = options.get("type");
    String impl = options.get("catalog-impl");
    String name = impl != null && !impl.trim().isEmpty() ? impl.trim().substring(impl.trim().lastIndexOf('.') + 1)
        : type != null && !type.trim().isEmpty() ? type.trim().toLowerCase(Locale.ROOT) : HIVE;
    switch (name) {
      case "jdbc":
      case "JdbcCatalog":
        return SQL;
      case "rest":
      case "RESTCatalog":
        return REST;
      case "hive":
      case "HiveCatalog":
        return HIVE;
      case "glue":
      case "GlueCatalog":
        return GLUE;
      default:
        return name;
    }
  }

  /** An AWS Glue catalog: {@code type=glue} or a {@code catalog-impl} named {@code GlueCatalog}. */
  public static boolean isGlue(Map<String, String> options) {
    return GLUE.equals(of(options));
  }
}
