package io.consistentcatalog.spark.context;

import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The consistent catalog's options ({@code spark.sql.catalog.<name>.*}), read once when Spark initialises
 * the catalog: the plain catalog's name ({@value #PLAIN_CATALOG}), the catalog-wide
 * defaults of the read settings ({@link Settings}), {@value #LOAD_THREADS}, {@value #REFRESH_THREADS} and
 * {@value Faults#DEADLINE}. Every other option is the Iceberg catalog's own and is passed on to it.
 */
public final class CatalogOptions {
  /** Catalog option {@code plain-catalog}: the plain catalog's name (default: this name without "_consistent"). */
  public static final String PLAIN_CATALOG = "plain-catalog";
  /**
   * Catalog option {@code load-threads}: how many tables a resolution loads at once (default
   * {@value #DEFAULT_LOAD_THREADS}; 1 loads them one after the other on the querying thread).
   */
  public static final String LOAD_THREADS = "load-threads";
  public static final int DEFAULT_LOAD_THREADS = 8;
  /**
   * Catalog option {@code refresh-threads}: how many conditional refreshes a resolution runs at once (default
   * {@value #DEFAULT_REFRESH_THREADS}). Over REST with Iceberg 1.11+ a table the session holds is loaded again
   * with its ETag: an unchanged table answers 304 with no body, a wait on the network that costs next to no
   * CPU, so these run on more threads than the loads that parse metadata. 1: on the querying thread
   * (with {@code load-threads=1}, every load and refresh one after the other). Iceberg's REST client holds
   * {@code rest.client.connections-per-route} connections (default 100): more refreshes than that wait for one.
   */
  public static final String REFRESH_THREADS = "refresh-threads";
  public static final int DEFAULT_REFRESH_THREADS = 64;

  private static final String SUFFIX = "_consistent";
  /** The read settings a catalog option may default ({@code spark.sql.catalog.lake_consistent.level=...}). */
  private static final String[] SETTING_DEFAULTS = {Settings.LEVEL, Settings.AS_OF, "as-of", "as_of", Settings.TAG, Settings.REFRESH};

  /** This catalog's name, as Spark configured it ({@code lake_consistent}). */
  public final String catalogName;
  /** The plain catalog's name: the Iceberg catalog underneath, and where errors point writers and readers. */
  public final String plainName;
  /** The read settings' catalog-wide defaults (a session's {@code SET spark.sql.consistent.*} wins). */
  public final Map<String, String> settingDefaults;
  /** How many tables a resolution loads (or refreshes) at once (1: one after the other). */
  public final int loadThreads;
  /** How many conditional refreshes (REST, Iceberg 1.11+: 304 when unchanged) a resolution runs at once. */
  public final int refreshThreads;
  /** How long a resolution waits out catalog faults ({@link Faults}). */
  public final long retryDeadlineMs;
  /** The options as given (case-sensitive), which the Iceberg catalog underneath is built with. */
  public final Map<String, String> icebergOptions;

  private CatalogOptions(
      String catalogName,
      String plainName,
      Map<String, String> settingDefaults,
      int loadThreads,
      int refreshThreads,
      long retryDeadlineMs,
      Map<String, String> icebergOptions) {
    this.catalogName = catalogName;
    this.plainName = plainName;
    this.settingDefaults = Collections.unmodifiableMap(settingDefaults);
    this.loadThreads = loadThreads;
    this.refreshThreads = refreshThreads;
    this.retryDeadlineMs = retryDeadlineMs;
    this.icebergOptions = icebergOptions;
  }

  /** Read the options of the catalog {@code name}; a malformed option is an IllegalArgumentException naming it. */
  public static CatalogOptions parse(String name, CaseInsensitiveStringMap options) {
    String plain = options.get(PLAIN_CATALOG);
    if (plain == null || plain.trim().isEmpty()) { // default: the name without "_consistent"
      plain = name.endsWith(SUFFIX) && name.length() > SUFFIX.length() ? name.substring(0, name.length() - SUFFIX.length()) : name;
    }
    Map<String, String> defaults = new HashMap<>();
    for (String key : SETTING_DEFAULTS) {
      String value = options.get(key);
      if (value != null) {
        defaults.put(key, value);
      }
    }
    int loadThreads = threads(name, options, LOAD_THREADS, DEFAULT_LOAD_THREADS);
    int refreshThreads = threads(name, options, REFRESH_THREADS, DEFAULT_REFRESH_THREADS);
    long retryDeadlineMs = Faults.parseDeadline(name, options.get(Faults.DEADLINE));
    CatalogGuard.of(plain.trim(), options.asCaseSensitiveMap()); // a malformed probe or limit option fails here, not at a write
    return new CatalogOptions(
        name, plain.trim(), defaults, loadThreads, refreshThreads, retryDeadlineMs, new HashMap<>(options.asCaseSensitiveMap()));
  }

  /** The number of threads option {@code key} sets (else {@code fallback}); not a positive number: an error naming it. */
  private static int threads(String name, CaseInsensitiveStringMap options, String key, int fallback) {
    String value = options.get(key);
    if (value == null || value.trim().isEmpty()) {
      return fallback;
    }
    int threads;
    try {
      threads = Integer.parseInt(value.trim());
    } catch (NumberFormatException e) {
      threads = 0;
    }
    if (threads < 1) {
      throw new IllegalArgumentException(
          "spark.sql.catalog." + name + "." + key + "=" + value + " is not a positive number of threads");
    }
    return threads;
  }
}
