package io.consistentcatalog.openlineage;

import java.security.SecureRandom;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Collection;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.function.Supplier;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

/**
 * One job's OpenLineage events (protocol §5.8), the JVM's {@code openlineage_events.EpochEmitter}: the job's and its
 * tables' names, and a run per epoch that has work ({@link EpochRun}). Events are built on the caller's thread and
 * serialised with the Iceberg runtime's (shaded) Jackson, then handed to {@link EventSender}; a failure to build one
 * is a warning, never the epoch's.
 */
public final class EpochEmitter {
  /** {@code producer} of every event and {@code _producer} of every facet: the package the plugin ships in. */
  public static final String PRODUCER = "https://pypi.org/project/consistent-catalog/";
  /** Key of our run facet in {@code run.facets}. */
  public static final String EPOCH_FACET = "consistentCatalog_epoch";
  /** {@code _schemaURL} of our run facet (docs/openlineage/ConsistentCatalogEpochRunFacet.json). */
  public static final String EPOCH_FACET_SCHEMA = "urn:consistent-catalog:openlineage:ConsistentCatalogEpochRunFacet:1-0-0";
  static final String DEFAULT_JOB_NAMESPACE = "consistent-catalog";
  static final String RUN_EVENT_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent";
  static final String DATASET_VERSION_SCHEMA =
      "https://openlineage.io/spec/facets/1-0-1/DatasetVersionDatasetFacet.json#/$defs/DatasetVersionDatasetFacet";
  static final String ERROR_MESSAGE_SCHEMA =
      "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet";
  static final String SCHEMA_FACET_SCHEMA =
      "https://openlineage.io/spec/facets/1-2-0/SchemaDatasetFacet.json#/$defs/SchemaDatasetFacet";
  static final String SQL_FACET_SCHEMA = "https://openlineage.io/spec/facets/1-1-0/SQLJobFacet.json#/$defs/SQLJobFacet";
  static final String TAGS_FACET_SCHEMA = "https://openlineage.io/spec/facets/1-0-0/TagsRunFacet.json#/$defs/TagsRunFacet";
  /** The tag every run carries ({@code tags} run facet), as the Python side's runs do: the package's version. */
  static final String VERSION_TAG = "consistent_catalog_version";

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final DateTimeFormatter EVENT_TIME = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);
  private static final SecureRandom RANDOM = new SecureRandom();
  private static final Map<String, String> GLUE = java.util.Collections.singletonMap("type", "glue");

  final String job;
  /** The namespace of the job's tables: the catalog ({@link Naming#datasetNamespace}). */
  final String namespace;
  final String jobNamespace;
  /** Whether the catalog is AWS Glue, whose tables OpenLineage names {@code table/<database>/<table>}. */
  private final boolean glue;
  private final Transport transport;
  private volatile java.util.function.Function<String, org.apache.iceberg.Schema> schemaOf;
  private volatile String sql;
  private final Map<String, java.util.List<Map<String, Object>>> fields = new java.util.concurrent.ConcurrentHashMap<>();

  EpochEmitter(Transport transport, String job, String namespace, String jobNamespace) {
    this(transport, job, namespace, jobNamespace, false);
  }

  EpochEmitter(Transport transport, String job, String namespace, String jobNamespace, boolean glue) {
    this.glue = glue;
    this.transport = transport;
    this.job = job;
    this.namespace = namespace;
    this.jobNamespace = jobNamespace;
  }

  /**
   * {@code emitter_for}: the emitter of {@code job}, whose tables belong to catalog {@code catalogName} (Iceberg
   * catalog properties {@code properties}), when OpenLineage is configured ({@link OpenLineageConfig#current});
   * null otherwise (nothing else is built). Never throws: lineage never stops a statement.
   */
  public static EpochEmitter forJob(String job, String catalogName, Map<String, String> properties) {
    try {
      OpenLineageConfig.Resolution resolution = OpenLineageConfig.current();
      if (resolution.transport == null || resolution.filtered(job)) {
        return null;
      }
      return new EpochEmitter(resolution.transport, job, Naming.datasetNamespace(catalogName, properties),
          resolution.jobNamespace, Naming.isGlue(properties));
    } catch (RuntimeException | LinkageError e) {
      EventSender.warn(job + ": OpenLineage is configured but no events will be sent: " + e.getClass().getSimpleName() + ": "
          + OpenLineageConfig.firstLine(e.getMessage()));
      return null;
    }
  }

  /** How a table's Iceberg schema is found: the {@code schema} facet of its datasets (read once per emitter). */
  public void schemaOf(java.util.function.Function<String, org.apache.iceberg.Schema> lookup) {
    this.schemaOf = lookup;
  }

  /** The statement's SQL text (null: none, a DataFrame write): the spec's {@code sql} job facet. */
  public void sql(String text) {
    this.sql = text == null || text.isBlank() ? null : text;
  }

  /** A run for one epoch attempt of the job, reading {@code sources} and writing {@code sinks}. */
  public EpochRun newRun(Collection<String> sources, Collection<String> sinks) {
    return new EpochRun(this, uuid7().toString(), sources, sinks);
  }

  /** Build the event now and queue it; a failure to build it is a warning. */
  void send(String eventType, Supplier<Map<String, Object>> build) {
    String json;
    try {
      json = JSON.writeValueAsString(build.get());
    } catch (Exception | LinkageError e) {
      EventSender.warn(job + ": the OpenLineage " + eventType + " event could not be built (the "
          + (job.startsWith(IngestRun.JOB_PREFIX) ? "ingest" : "epoch") + " goes on): "
          + e.getClass().getSimpleName() + ": " + OpenLineageConfig.firstLine(e.getMessage()));
      return;
    }
    EventSender.send(transport, job, eventType, json);
  }

  /** An input or output dataset; {@code version} (a snapshot id) as its {@code version} facet when there is one. */
  Map<String, Object> dataset(String table, Long version, boolean input) {
    Map<String, Object> facets = new TreeMap<>();
    if (version != null) {
      Map<String, Object> facet = facet(DATASET_VERSION_SCHEMA);
      facet.put("datasetVersion", Long.toString(version));
      facets.put("version", facet);
    }
    java.util.List<Map<String, Object>> columns = columns(table);
    if (columns != null) {
      Map<String, Object> facet = facet(SCHEMA_FACET_SCHEMA);
      facet.put("fields", columns);
      facets.put("schema", facet);
    }
    Map<String, Object> dataset = new TreeMap<>();
    dataset.put("namespace", namespace);
    dataset.put("name", glue ? Naming.datasetName(GLUE, table) : table);
    dataset.put("facets", facets);
    dataset.put(input ? "inputFacets" : "outputFacets", new TreeMap<>());
    return dataset;
  }

  /** The table's columns for its schema facet, or null (no lookup, or it failed: lineage never fails a statement). */
  private java.util.List<Map<String, Object>> columns(String table) {
    java.util.function.Function<String, org.apache.iceberg.Schema> lookup = schemaOf;
    if (lookup == null) {
      return null;
    }
    java.util.List<Map<String, Object>> found = fields.get(table);
    if (found == null) {
      try {
        found = fieldsOf(lookup.apply(table));
      } catch (RuntimeException e) {
        EventSender.warn(job + ": no schema facet for " + table + ": " + e.getClass().getSimpleName() + ": "
            + OpenLineageConfig.firstLine(e.getMessage()));
        return null;
      }
      fields.put(table, found);
    }
    return found;
  }

  /** An Iceberg schema's top-level columns as the schema facet's {@code fields}: name and type. */
  static java.util.List<Map<String, Object>> fieldsOf(org.apache.iceberg.Schema schema) {
    java.util.List<Map<String, Object>> out = new java.util.ArrayList<>();
    for (org.apache.iceberg.types.Types.NestedField field : schema.columns()) {
      Map<String, Object> column = new TreeMap<>();
      column.put("name", field.name());
      column.put("type", field.type().toString());
      column.put("fields", java.util.List.of()); // top-level columns only, as openlineage-python writes them
      out.add(column);
    }
    return out;
  }

  /** The job's facets: {@code sql} when the statement's text is known. */
  Map<String, Object> jobFacets() {
    Map<String, Object> facets = new TreeMap<>();
    String text = sql;
    if (text != null) {
      Map<String, Object> facet = facet(SQL_FACET_SCHEMA);
      facet.put("query", text);
      facet.put("dialect", "spark");
      facets.put("sql", facet);
    }
    return facets;
  }

  /** The {@code tags} run facet: the package's version (source {@code CONSISTENT_CATALOG}). */
  static Map<String, Object> tagsFacet() {
    Map<String, Object> tag = new TreeMap<>();
    tag.put("key", VERSION_TAG);
    String version = EpochEmitter.class.getPackage().getImplementationVersion();
    tag.put("value", version == null ? "unknown" : version);
    tag.put("source", "CONSISTENT_CATALOG");
    Map<String, Object> facet = facet(TAGS_FACET_SCHEMA);
    facet.put("tags", java.util.List.of(tag));
    return facet;
  }

  /** A facet's {@code _producer} and {@code _schemaURL}. */
  static Map<String, Object> facet(String schemaUrl) {
    Map<String, Object> facet = new TreeMap<>();
    facet.put("_producer", PRODUCER);
    facet.put("_schemaURL", schemaUrl);
    return facet;
  }

  static String now() {
    return EVENT_TIME.format(Instant.now());
  }

  static String format(long epochMs) {
    return EVENT_TIME.format(Instant.ofEpochMilli(epochMs));
  }

  /** A UUIDv7 run id (time-ordered, what OpenLineage recommends): 48 bits of ms, version 7, random, variant 10. */
  static UUID uuid7() {
    long ms = System.currentTimeMillis();
    long high = (ms << 16) | 0x7000L | (RANDOM.nextInt() & 0x0fffL);
    long low = (RANDOM.nextLong() & 0x3fffffffffffffffL) | 0x8000000000000000L;
    return new UUID(high, low);
  }
}
