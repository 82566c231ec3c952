package io.consistentcatalog.spark.context;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.spark.sql.connector.catalog.Identifier;

/** Table names as the plugin keys them: dotted ({@code demo.words}), from and to Spark's and Iceberg's identifiers. */
public final class Names {
  /** The SQL extension's class (in the adapter): writes through the catalog need it installed. */
  public static final String SQL_EXTENSIONS = "io.consistentcatalog.spark.ConsistentSqlExtensions";

  private Names() {}

  /** {@code demo.words} for Spark's identifier of it (nested namespaces joined with dots). */
  public static String tableName(Identifier ident) {
    List<String> parts = new ArrayList<>(Arrays.asList(ident.namespace()));
    parts.add(ident.name());
    return String.join(".", parts);
  }

  public static TableIdentifier icebergIdentifier(String name) {
    return TableIdentifier.parse(name);
  }

  public static Identifier sparkIdentifier(String name) {
    TableIdentifier id = TableIdentifier.parse(name);
    return Identifier.of(id.namespace().levels(), id.name());
  }
}
