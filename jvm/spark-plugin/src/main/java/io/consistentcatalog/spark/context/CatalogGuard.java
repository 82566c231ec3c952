package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Keys;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.SupportsNamespaces;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

/**
 * What a writer checks of its catalog before it commits (protocol §6.5), the JVM side of
 * {@code consistent_catalog.probe}'s {@code require_sound} and {@code check_property_sizes}.
 *
 * <p>The probe: on a Hive Metastore, Glue and catalogs of other kinds (on SQL and REST ones only with the catalog
 * option {@value #PROBE_SETTING}{@code =always}) a writer's first commit (every commit goes through
 * {@link FencedCommit}; readers never check) reads the result {@code consistent-catalog
 * check-catalog} recorded as the property {@value #CATALOG_PROBE} of the namespace {@value #PROBE_NAMESPACE}, once per
 * catalog and JVM (one namespace read; the answer is kept for the JVM's life), and refuses a catalog that failed it
 * ({@code CATALOG_PROBE}, one line: the failed capability, its evidence, the way out). The JVM does not run the probe
 * itself: a catalog with no result recorded by the current probe version is refused with the command that records
 * one ({@code check-catalog} runs the probe from Python, the same on every catalog both languages reach).
 *
 * <p>The limits: Hive Metastore and Glue copy every Iceberg table property into their own table parameters, which hold
 * at most {@value #HIVE_LIMIT} characters (HMS 2.3 on Derby/Oracle) or {@value #GLUE_LIMIT} bytes (Glue's API); a
 * longer value fails inside the catalog after the metadata file was written. A commit setting one is refused before
 * it is sent ({@code CATALOG_LIMIT}, naming the table, the property and the way out); {@value #PROPERTY_LIMIT_SETTING}
 * sets another limit.
 */
public final class CatalogGuard {
  static final String PROBE_NAMESPACE = "consistent_probe";
  static final String CATALOG_PROBE = "consistent.catalog-probe";
  /** {@code consistent_catalog.probe.PROBE_VERSION}: a result recorded by another version is not taken. */
  static final int PROBE_VERSION = 1;
  /** Catalog option: {@code auto} (default: Hive, Glue and other kinds) or {@code always} (SQL and REST too). */
  public static final String PROBE_SETTING = "consistent.require-probe";
  /** Catalog option: the longest table property value (UTF-8 bytes) the catalog stores. */
  public static final String PROPERTY_LIMIT_SETTING = "consistent.max-property-chars";
  static final long HIVE_LIMIT = 32_672L;
  static final long GLUE_LIMIT = 512_000L;

  private static final ObjectMapper JSON = new ObjectMapper();
  /** Per JVM: a catalog's recorded probe result (the namespace property's value), by {@link #key}. */
  private static final Map<List<String>, String> KNOWN = new ConcurrentHashMap<>();

  /** The catalog's name as pyiceberg and the CLI name it (the plain catalog's). */
  private final String name;
  /** {@code sql}, {@code rest}, {@code hive}, {@code glue} or the class name of another kind. */
  private final String kind;
  private final boolean probed;
  private final Long propertyLimit;
  private final List<String> key;

  private CatalogGuard(String name, String kind, boolean probed, Long propertyLimit, List<String> key) {
    this.name = name;
    this.kind = kind;
    this.probed = probed;
    this.propertyLimit = propertyLimit;
    this.key = key;
  }

  /** The guard of the Iceberg catalog built with {@code options} (Spark's catalog options), named {@code name}. */
  public static CatalogGuard of(String name, Map<String, String> options) {
    String kind = kind(options);
    String setting = options.getOrDefault(PROBE_SETTING, "auto").trim().toLowerCase(Locale.ROOT);
    if (!setting.equals("auto") && !setting.equals("always")) {
      throw new IllegalArgumentException("spark.sql.catalog." + name + "." + PROBE_SETTING + "=" + options.get(PROBE_SETTING)
          + " is not auto or always");
    }
    boolean probed = setting.equals("always") || !(kind.equals("sql") || kind.equals("rest"));
    Long limit = kind.equals("hive") ? Long.valueOf(HIVE_LIMIT) : kind.equals("glue") ? Long.valueOf(GLUE_LIMIT) : null;
    String given = options.get(PROPERTY_LIMIT_SETTING);
    if (given != null && !given.trim().isEmpty()) {
      try {
        limit = Long.parseLong(given.trim());
      } catch (NumberFormatException e) {
        limit = -1L;
      }
      if (limit < 1) {
        throw new IllegalArgumentException("spark.sql.catalog." + name + "." + PROPERTY_LIMIT_SETTING + "=" + given
            + " is not a positive number of bytes");
      }
    }
    List<String> key = Arrays.asList(kind, name, options.getOrDefault("uri", ""), options.getOrDefault("glue.endpoint", ""),
        options.getOrDefault("glue.id", ""), options.getOrDefault("client.region", ""), options.getOrDefault("warehouse", ""));
    return new CatalogGuard(name, kind, probed, limit, key);
  }

  /**
   * The catalog's kind from its Spark options, as Iceberg picks the catalog ({@code CatalogUtil.buildIcebergCatalog}:
   * {@code type}, else {@code catalog-impl}, else a Hive catalog).
   */
  static String kind(Map<String, String> options) {
    String type = options.get("type");
    String impl = options.get("catalog-impl");
    String name = type != null && !type.trim().isEmpty() ? type.trim().toLowerCase(Locale.ROOT)
        : impl != null && !impl.trim().isEmpty() ? impl.substring(impl.lastIndexOf('.') + 1) : "hive";
    Map<String, String> kinds = new HashMap<>();
    kinds.put("jdbc", "sql");
    kinds.put("JdbcCatalog", "sql");
    kinds.put("rest", "rest");
    kinds.put("RESTCatalog", "rest");
    kinds.put("hive", "hive");
    kinds.put("HiveCatalog", "hive");
    kinds.put("glue", "glue");
    kinds.put("GlueCatalog", "glue");
    return kinds.getOrDefault(name, name);
  }

  String kind() {
    return kind;
  }

  /** The longest property value the catalog stores (UTF-8 bytes), or null when no limit is known. */
  Long propertyLimit() {
    return propertyLimit;
  }

  /** {@code CATALOG_LIMIT} when a property set by {@code updates} on {@code table} is longer than the catalog stores. */
  void checkPropertySizes(String table, List<MetadataUpdate> updates) {
    if (propertyLimit == null) {
      return;
    }
    for (MetadataUpdate update : updates) {
      if (!(update instanceof MetadataUpdate.SetProperties)) {
        continue;
      }
      for (Map.Entry<String, String> e : ((MetadataUpdate.SetProperties) update).updated().entrySet()) {
        long size = String.valueOf(e.getValue()).getBytes(StandardCharsets.UTF_8).length;
        if (size > propertyLimit) {
          String hint = e.getKey().equals(Keys.BARRIER_OVERRIDES)
              ? "expire old snapshots (consistent-catalog expire) to drop the overrides of expired ones" : "keep it shorter";
          throw new TooLarge(table, String.format(Locale.ROOT,
              "%s: table property %s would be %,d bytes; catalog '%s' (%s) stores at most %,d per table property "
                  + "(%s sets another limit): %s",
              table, e.getKey(), size, name, kind, propertyLimit, PROPERTY_LIMIT_SETTING, hint));
        }
      }
    }
  }

  /**
   * Refuse to write to a catalog that failed the probe, or on which none is recorded ({@code CATALOG_PROBE}). Once
   * per catalog and JVM: one read of the recorded result ({@code read}: the namespace's properties, faults waited out).
   */
  void requireSound(Catalog catalog, Reader read) {
    if (!probed) {
      return;
    }
    String recorded = KNOWN.get(key);
    if (recorded == null) {
      recorded = recorded(catalog, read);
      if (recorded == null) {
        throw new Unsound("catalog '" + name + "' (" + kind + ") has no catalog "
            + "probe result (property " + CATALOG_PROBE + " of namespace " + PROBE_NAMESPACE + ", probe version "
            + PROBE_VERSION + "): writers require one on it and lake_consistent does not run the probe itself. Run "
            + "`consistent-catalog --catalog " + name + " check-catalog` once (it checks the catalog's compare-and-swap and "
            + "records the result), then the statement again");
      }
      KNOWN.put(key, recorded);
    }
    JsonNode result = parse(recorded);
    if (result != null && result.path("holds").asBoolean(false)) {
      return;
    }
    JsonNode failed = result == null ? null : result.path("failed");
    String capability = failed != null && failed.size() > 0 ? failed.get(0).asText() : "?";
    String why = result == null ? "" : result.path("evidence").path(capability).asText("");
    throw new Unsound("catalog '" + name + "' failed the catalog probe: "
        + capability + " does not hold (" + why + "); writers would lose commits without an error there. Use a catalog "
        + "whose commits are compare-and-swap (docs/catalogs.md), then run `consistent-catalog --catalog " + name
        + " check-catalog` to probe it again");
  }

  /** The result recorded by the current probe version, or null (none recorded, an older probe, no namespaces). */
  private static String recorded(Catalog catalog, Reader read) {
    if (!(catalog instanceof SupportsNamespaces)) {
      return null;
    }
    Map<String, String> properties;
    try {
      properties = read.namespaceProperties(() ->
          ((SupportsNamespaces) catalog).loadNamespaceMetadata(Namespace.of(PROBE_NAMESPACE)));
    } catch (NoSuchNamespaceException e) {
      return null;
    }
    String value = properties.get(CATALOG_PROBE);
    JsonNode parsed = value == null ? null : parse(value);
    return parsed != null && parsed.path("version").asInt(-1) == PROBE_VERSION ? value : null;
  }

  private static JsonNode parse(String value) {
    try {
      JsonNode node = JSON.readTree(value);
      return node != null && node.isObject() ? node : null;
    } catch (java.io.IOException | RuntimeException e) {
      return null;
    }
  }

  /** Forget this JVM's recorded results (a catalog fixed and probed again by another process; tests). */
  public static void forget() {
    KNOWN.clear();
  }

  /** A commit refused before it was sent (the catalog failed the probe, or has none): what it wrote may be deleted. */
  static final class Unsound extends ConsistentException implements org.apache.iceberg.exceptions.CleanableFailure {
    Unsound(String message) {
      super(ErrorKind.CATALOG_PROBE, message);
    }
  }

  /** A commit refused before it was sent: nothing of it landed, so what it wrote may be deleted. */
  static final class TooLarge extends ConsistentException implements org.apache.iceberg.exceptions.CleanableFailure {
    TooLarge(String table, String message) {
      super(ErrorKind.CATALOG_LIMIT, table, message);
    }
  }

  /** How the namespace's properties are read (with the committer's fault handling). */
  interface Reader {
    Map<String, String> namespaceProperties(java.util.concurrent.Callable<Map<String, String>> load);
  }
}
