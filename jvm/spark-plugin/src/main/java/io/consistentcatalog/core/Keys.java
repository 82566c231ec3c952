package io.consistentcatalog.core;

/** Every metadata key consistent-catalog reads (mirror of {@code consistent_catalog.properties}). */
public final class Keys {
  private Keys() {}

  public static final String PREFIX = "consistent.";
  // snapshot summary properties
  public static final String BARRIER = "consistent.barrier";
  public static final String JOB = "consistent.job";
  public static final String ATTEMPT = "consistent.attempt";
  public static final String SOURCES = "consistent.sources";
  public static final String INGEST_KEY = "consistent.ingest-key";
  /** The fingerprint of what computed an epoch (protocol §6.10): {@code <kind>:<16 hex>}. */
  public static final String DEFINITION = "consistent.definition";
  /** Every snapshot of an epoch that starts a new generation of its sink (§6.10): why ({@link #REGENERATE_REASONS}). */
  public static final String REGENERATE = "consistent.regenerate";
  public static final java.util.List<String> REGENERATE_REASONS =
      java.util.Collections.unmodifiableList(java.util.Arrays.asList("definition", "schema", "rebuild", "upstream"));
  // the fence snapshot's summary (protocol §6.3)
  public static final String FENCE_REASON = "consistent.fence-reason";
  public static final String FENCE_HOLDER = "consistent.fence-holder";
  public static final String FENCE_JOB = "consistent.fence-job";
  // table properties
  public static final String LEASE_UNTIL = "consistent.lease-until";
  /** Where the lease holder runs: {@code {"app":..,"host":..,"pid":..,"since":..}}, read by people only (§6.2). */
  public static final String LEASE_HOLDER_INFO = "consistent.lease-holder-info";
  public static final String LEASE_HOLDER = "consistent.lease-holder";
  public static final String WATERMARK = "consistent.watermark";
  public static final String WATERMARK_SNAPSHOT = "consistent.watermark-snapshot";
  public static final String BARRIER_OVERRIDES = "consistent.barrier-overrides";
  public static final String REVISION = "consistent.revision";
  /**
   * The previous generation of a table (§6.10): compact JSON {@code {"snapshot":..,"watermark":..,"watermark-snapshot":..}},
   * beside the {@link #PREVIOUS_BRANCH} branch at that snapshot.
   */
  public static final String PREVIOUS = "consistent.previous";
  // refs
  public static final String MAIN_BRANCH = "main";
  public static final String STAGED_BRANCH = "consistent-staged";
  /** Main's head before a generation switch (§6.10): read while tables downstream have not switched (§4.8). */
  public static final String PREVIOUS_BRANCH = "consistent-previous";
  public static final String FENCE_BRANCH = "consistent-fence";
  public static final String TAG_PREFIX = "consistent-";
  public static final String PIN_PREFIX = "consistent-pin-";

  public static final String NO_SNAPSHOT = "-1";
  /** How far ahead of the clock a barrier may lie by default ({@code DEFAULT_CLOCK_SKEW_MS}); also an as-of's allowance. */
  public static final long DEFAULT_CLOCK_SKEW_MS = 5 * 60 * 1000L;

  // isolation levels (consistent_catalog.resolver.LEVELS)
  public static final String REPEATABLE_READ = "repeatable-read";
  public static final String READ_COMMITTED = "read-committed";
  public static final String READ_UNCOMMITTED = "read-uncommitted";
  public static final String DEFAULT_LEVEL = REPEATABLE_READ;
}
