package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.Keys;
import io.consistentcatalog.core.Resolver;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import scala.collection.JavaConverters;

/**
 * The read settings of one load: session settings ({@code SET spark.sql.consistent.level=...}) over
 * the catalog's own options ({@code spark.sql.catalog.lake_consistent.level=...}) over the defaults.
 *
 * <ul>
 *   <li>{@code spark.sql.consistent.level}: repeatable-read (default), read-committed, read-uncommitted
 *   <li>{@code spark.sql.consistent.asOf}: a historical cut, a barrier of the grammar of protocol §3.8 (ms, an
 *       ISO-8601 time, {@code now-1h}, ...; {@code latest}: the newest cut)
 *   <li>{@code spark.sql.consistent.tag}: read every table at a reader pin or retained-cut tag
 *   <li>{@code spark.sql.consistent.refresh}: {@code statement} (default: a fresh cut for every
 *       statement) or {@code manual} (the cut is held until {@code CALL <catalog>.system.refresh_cut()})
 * </ul>
 */
public final class Settings {
  public static final String PREFIX = "spark.sql.consistent.";
  static final String LEVEL = "level";
  static final String AS_OF = "asOf";
  /** Other spellings of asOf ({@code as-of} needs backquotes in SET: SET `spark.sql.consistent.as-of`=...). */
  static final String[] AS_OF_ALIASES = {"as-of", "as_of"};
  public static final String TAG = "tag";
  static final String REFRESH = "refresh";
  /** {@code SET spark.sql.consistent.cut=latest}: a one-shot refresh of a held cut. */
  public static final String CUT = "cut";
  // writers (protocol §5.9)
  public static final String JOB = "job";
  static final String TAKEOVER = "takeover";
  static final String LEASE = "lease";
  static final String INGEST_KEY = "ingestKey";
  static final String EVENT_TIME_COLUMN = "eventTimeColumn";
  /** {@code true}: the next epoch of each statement's sink is a revision (§6.10; dbt's --full-refresh). */
  static final String REBUILD = "rebuild";
  /** A declared definition version (§6.10, kind {@code version}) instead of the statement's text. */
  static final String VERSION = "version";
  /** {@code true}: an epoch reads each source's rows appended since the sink's last epoch (§5.5; dbt incremental). */
  static final String INCREMENTAL = "incremental";
  /** {@code true}: a write into a root or new table that reads tables of the catalog is an ingest on purpose (§5.9). */
  public static final String INGEST_FROM_LAKE = Roles.INGEST_FROM_LAKE;
  /** Every setting name; any other {@code spark.sql.consistent.*} key is a typo and is refused. */
  static final List<String> NAMES =
      Arrays.asList(LEVEL, AS_OF, AS_OF_ALIASES[0], AS_OF_ALIASES[1], TAG, REFRESH, CUT, JOB, TAKEOVER, LEASE, INGEST_KEY, EVENT_TIME_COLUMN, REBUILD,
          VERSION, INCREMENTAL, INGEST_FROM_LAKE);

  public final String level;
  public final Long asOf;
  final String asOfText;
  public final String tag;
  public final boolean manual;

  private Settings(String level, Long asOf, String asOfText, String tag, boolean manual) {
    this.level = level;
    this.asOf = asOf;
    this.asOfText = asOfText;
    this.tag = tag;
    this.manual = manual;
  }

  /** A cut is "latest" (subject to the monotone rule) when it is neither historical nor a tag. */
  public boolean latest() {
    return asOf == null && tag == null;
  }

  /** What makes two cuts different: settings changes start a new cut. */
  public String key() {
    return level + "|" + asOf + "|" + tag;
  }

  private static String value(SparkSession session, Map<String, String> defaults, String name) {
    String found = session == null ? null : conf(session, PREFIX + name);
    if (found == null) {
      found = defaults.get(name);
    }
    if (found == null) {
      return null;
    }
    found = found.trim();
    return found.isEmpty() ? null : found;
  }

  /**
   * A session setting, or null when unset. Not {@code conf().getOption}: for an unset key it builds
   * and catches a NoSuchElementException (a stack trace), seven of them per table load.
   */
  public static String conf(SparkSession session, String key) {
    return session.conf().get(key, null);
  }

  /** The setting name nearest to {@code name} (without the prefix), or null when none is near. */
  public static String nearest(String name) {
    return Roles.nearest(name, NAMES);
  }

  /** Refuse a {@code spark.sql.consistent.*} key that is not a setting (a typo would otherwise be ignored). */
  static void checkNames(SparkSession session) {
    if (session == null) {
      return;
    }
    for (String key : JavaConverters.mapAsJavaMap(session.conf().getAll()).keySet()) {
      if (key.startsWith(PREFIX) && !NAMES.contains(key.substring(PREFIX.length()))) {
        String near = nearest(key.substring(PREFIX.length()));
        throw Errors.raise(Errors.setting(key + " is not a setting of the consistent catalog; the settings are "
            + PREFIX + LEVEL + ", " + PREFIX + AS_OF + ", " + PREFIX + TAG + ", " + PREFIX + REFRESH + ", "
            + PREFIX + CUT + " (reads) and " + PREFIX + JOB + ", " + PREFIX + TAKEOVER + ", " + PREFIX + LEASE + ", "
            + PREFIX + INGEST_KEY + ", " + PREFIX + EVENT_TIME_COLUMN + ", " + PREFIX + REBUILD + ", " + PREFIX + VERSION
            + ", " + PREFIX + INCREMENTAL + ", " + PREFIX + INGEST_FROM_LAKE + " (writes) — RESET " + key
            + (near == null ? "" : " (did you mean " + PREFIX + near + "?)")));
      }
    }
  }

  public static Settings read(SparkSession session, Map<String, String> defaults) {
    checkNames(session);
    String level = value(session, defaults, LEVEL);
    level = level == null ? Keys.DEFAULT_LEVEL : level.toLowerCase(Locale.ROOT);
    if (!Resolver.LEVELS.contains(level)) {
      throw Errors.raise(Errors.setting(PREFIX + LEVEL + "=" + level + " is not an isolation level; use one of "
          + String.join(", ", Resolver.LEVELS)));
    }
    String asOfText = value(session, defaults, AS_OF);
    for (String alias : AS_OF_ALIASES) {
      if (asOfText == null) {
        asOfText = value(session, defaults, alias);
      }
    }
    if (asOfText != null && asOfText.equalsIgnoreCase("latest")) {
      asOfText = null;
    }
    Long asOf = null;
    if (asOfText != null) {
      long now = System.currentTimeMillis();
      try {
        asOf = Barriers.parse(asOfText, now);
      } catch (ConsistentException e) {
        throw Errors.raise(Errors.setting(PREFIX + AS_OF + "=" + asOfText + ": " + e.getMessage()
            + "; or RESET " + PREFIX + AS_OF + " for the newest cut"));
      }
      if (asOf > now + Keys.DEFAULT_CLOCK_SKEW_MS) { // protocol §4.4, as the Python readers refuse it
        throw Errors.raise(Errors.setting(PREFIX + AS_OF + "=" + asOfText + " lies in the future (" + asOf + " ms, now is "
            + now + "): it would read the newest cut now and another one later — give a past time, or RESET "
            + PREFIX + AS_OF + " for the newest cut"));
      }
    }
    String tag = value(session, defaults, TAG);
    if (tag != null && asOf != null) {
      throw Errors.raise(Errors.setting(PREFIX + TAG + "=" + tag + " and " + PREFIX + AS_OF + "=" + asOfText
          + " are both set; a tag names one cut already — RESET one of them"));
    }
    String refresh = value(session, defaults, REFRESH);
    refresh = refresh == null ? "statement" : refresh.toLowerCase(Locale.ROOT);
    if (!refresh.equals("statement") && !refresh.equals("manual")) {
      throw Errors.raise(Errors.setting(PREFIX + REFRESH + "=" + refresh
          + " is not a refresh rule; use statement (a fresh cut for every statement) or manual (hold the cut until "
          + "CALL <catalog>.system.refresh_cut())"));
    }
    return new Settings(level, asOf, asOfText, tag, refresh.equals("manual"));
  }

  /** The write settings of one statement (protocol §5.9). */
  public static final class Writes {
    public final String job;
    public final boolean takeover;
    public final long leaseMs;
    public final String ingestKey;
    public final String eventTimeColumn;
    /** {@code spark.sql.consistent.rebuild=true}: the sink's next epoch is a revision (§6.10). */
    public boolean rebuild;
    /** {@code spark.sql.consistent.version}: the declared definition version, or null. */
    public String version;
    /** {@code spark.sql.consistent.incremental=true}: the sources are read as their appends since the last epoch. */
    public boolean incremental;
    /** {@code spark.sql.consistent.ingestFromLake=true}: a root ingest that reads tables of the catalog, on purpose. */
    public boolean ingestFromLake;

    private Writes(String job, boolean takeover, long leaseMs, String ingestKey, String eventTimeColumn) {
      this.job = job;
      this.takeover = takeover;
      this.leaseMs = leaseMs;
      this.ingestKey = ingestKey;
      this.eventTimeColumn = eventTimeColumn;
    }

    public static Writes read(SparkSession session) {
      checkNames(session);
      java.util.Map<String, String> none = java.util.Collections.emptyMap();
      String job = value(session, none, JOB);
      boolean take = flag(value(session, none, TAKEOVER), TAKEOVER);
      String lease = value(session, none, LEASE);
      long leaseMs = JobRegistration.DEFAULT_LEASE_MS;
      if (lease != null) {
        try {
          leaseMs = Faults.parseDuration(lease);
        } catch (IllegalArgumentException e) {
          throw Errors.raise(setting(PREFIX + LEASE + "=" + lease + " is not a duration; write e.g. 5m, 30s or 90000ms"));
        }
        if (leaseMs <= 0) {
          throw Errors.raise(setting(PREFIX + LEASE + "=" + lease + " must be positive"));
        }
      }
      Writes writes = new Writes(job, take, leaseMs, value(session, none, INGEST_KEY), value(session, none, EVENT_TIME_COLUMN));
      writes.rebuild = flag(value(session, none, REBUILD), REBUILD);
      writes.version = value(session, none, VERSION);
      writes.incremental = flag(value(session, none, INCREMENTAL), INCREMENTAL);
      writes.ingestFromLake = flag(value(session, none, INGEST_FROM_LAKE), INGEST_FROM_LAKE);
      return writes;
    }

    private static boolean flag(String text, String name) {
      if (text == null) {
        return false;
      }
      String t = text.toLowerCase(Locale.ROOT);
      if (!t.equals("true") && !t.equals("false")) {
        throw Errors.raise(setting(PREFIX + name + "=" + text + " is not true or false"));
      }
      return t.equals("true");
    }

    private static org.apache.spark.sql.AnalysisException setting(String message) {
      return Errors.setting(message);
    }
  }
}
