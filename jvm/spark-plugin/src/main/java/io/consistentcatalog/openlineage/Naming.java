package io.consistentcatalog.openlineage;

import java.nio.file.Paths;
import java.util.Locale;
import java.util.Map;

/**
 * OpenLineage names of a catalog's tables, as {@code openlineage_events.dataset_namespace} gives them for the same
 * catalog (protocol §5.8): the namespace is the catalog, named by its {@code uri} without user, password and query,
 * else by its warehouse's scheme and authority, else {@code iceberg://<catalog name>}; a Hive Metastore
 * ({@code thrift://host:port}) is {@code hive://host:port}, as OpenLineage's naming spec says. A Spark JDBC catalog's
 * {@code jdbc:} URI is first spelled as pyiceberg's SQL catalog spells the same database
 * ({@code consistent_catalog.spark.session.parse_catalog_uri}): {@code jdbc:sqlite:/abs/catalog.db} is
 * {@code sqlite:////abs/catalog.db}, {@code jdbc:postgresql://host:5432/db} is {@code postgresql+psycopg2://host:5432/db}.
 * AWS Glue is {@code arn:aws:glue:<region>:<account id>} and its tables {@code table/<database>/<table>}, as the spec
 * says ({@code glue.id}, else the account STS names for the catalog's credentials).
 */
public final class Naming {
  private Naming() {}

  /** The namespace of the tables of catalog {@code catalogName} with these Iceberg catalog properties. */
  public static String datasetNamespace(String catalogName, Map<String, String> properties) {
    if (isGlue(properties)) { // OpenLineage's naming spec: arn:aws:glue:<region>:<account id>
      return "arn:aws:glue:" + glueRegion(properties) + ":" + glueAccount(properties);
    }
    String uri = properties.get("uri");
    if (uri != null && !uri.isEmpty()) {
      Split parts = Split.of(pyicebergUri(uri.split(",", 2)[0])); // a Hive catalog may list several metastores
      if (parts.scheme.equals("thrift")) { // OpenLineage's naming spec names a Hive Metastore hive://host:port
        String port = parts.port();
        return "hive://" + parts.hostname() + (port.isEmpty() ? "" : ":" + port);
      }
      String host = parts.hostname();
      host = host.contains(":") ? "[" + host + "]" : host;
      String port = parts.port();
      return parts.scheme + "://" + host + (port.isEmpty() ? "" : ":" + port) + parts.path;
    }
    String warehouse = properties.get("warehouse");
    if (warehouse != null && warehouse.contains("://")) {
      Split parts = Split.of(warehouse);
      return parts.netloc.isEmpty() ? parts.scheme + "://" + parts.path : parts.scheme + "://" + parts.netloc;
    }
    return "iceberg://" + catalogName;
  }

  /** A table's OpenLineage name: its identifier ({@code db.table}), or for Glue {@code table/<database>/<table>}. */
  public static String datasetName(Map<String, String> properties, String table) {
    if (!isGlue(properties)) {
      return table;
    }
    int dot = table.lastIndexOf('.');
    return "table/" + (dot < 0 ? "" : table.substring(0, dot)) + "/" + table.substring(dot + 1);
  }

  /** An AWS Glue catalog: {@code type=glue}, or no type and configured by {@code glue.*} keys. */
  static boolean isGlue(Map<String, String> properties) {
    String type = properties.getOrDefault("type", "").trim().toLowerCase(Locale.ROOT);
    String impl = properties.getOrDefault("catalog-impl", "");
    return type.equals("glue") || impl.endsWith(".GlueCatalog")
        || (type.isEmpty() && impl.isEmpty() && properties.keySet().stream().anyMatch(k -> k.startsWith("glue.")));
  }

  private static String glueRegion(Map<String, String> properties) {
    for (String value : new String[] {properties.get("glue.region"), properties.get("client.region"),
        System.getenv("AWS_REGION"), System.getenv("AWS_DEFAULT_REGION")}) {
      if (value != null && !value.trim().isEmpty()) {
        return value.trim();
      }
    }
    return "us-east-1";
  }

  /** Per JVM: the account STS names for a catalog's endpoint, credentials and region. */
  private static final Map<java.util.List<String>, String> ACCOUNTS = new java.util.concurrent.ConcurrentHashMap<>();

  /**
   * {@code glue.id} (the Data Catalog id is the account id), else the account STS names for the catalog's
   * credentials (at the catalog's endpoint when that is not AWS's own: moto, LocalStack), asked once per JVM through
   * the AWS SDK v2 that Iceberg's GlueCatalog uses ({@code iceberg-aws-bundle}); "unknown" when that cannot answer.
   */
  private static String glueAccount(Map<String, String> properties) {
    String id = properties.get("glue.id");
    if (id != null && !id.trim().isEmpty()) {
      return id.trim();
    }
    String endpoint = properties.getOrDefault("sts.endpoint", properties.get("glue.endpoint"));
    if (endpoint != null && endpoint.contains("amazonaws.com")) {
      endpoint = null;
    }
    String key = first(properties, "glue.access-key-id", "client.access-key-id", "s3.access-key-id");
    String secret = first(properties, "glue.secret-access-key", "client.secret-access-key", "s3.secret-access-key");
    String region = glueRegion(properties);
    java.util.List<String> cacheKey = java.util.Arrays.asList(String.valueOf(endpoint), String.valueOf(key), region);
    String endpointUri = endpoint;
    return ACCOUNTS.computeIfAbsent(cacheKey, k -> stsAccount(endpointUri, key, secret, region));
  }

  private static String first(Map<String, String> properties, String... keys) {
    for (String k : keys) {
      String value = properties.get(k);
      if (value != null && !value.isEmpty()) {
        return value;
      }
    }
    return null;
  }

  /** {@code sts.getCallerIdentity().account()} by reflection (the AWS SDK is not a compile-time dependency). */
  private static String stsAccount(String endpoint, String key, String secret, String region) {
    try {
      ClassLoader loader = Naming.class.getClassLoader();
      Class<?> sts = Class.forName("software.amazon.awssdk.services.sts.StsClient", true, loader);
      Class<?> awsBuilder = Class.forName("software.amazon.awssdk.awscore.client.builder.AwsClientBuilder", true, loader);
      Class<?> sdkBuilder = Class.forName("software.amazon.awssdk.core.client.builder.SdkClientBuilder", true, loader);
      Class<?> regionClass = Class.forName("software.amazon.awssdk.regions.Region", true, loader);
      Class<?> provider = Class.forName("software.amazon.awssdk.auth.credentials.AwsCredentialsProvider", true, loader);
      Object builder = sts.getMethod("builder").invoke(null);
      awsBuilder.getMethod("region", regionClass).invoke(builder, regionClass.getMethod("of", String.class).invoke(null, region));
      if (endpoint != null) {
        sdkBuilder.getMethod("endpointOverride", java.net.URI.class).invoke(builder, java.net.URI.create(endpoint));
      }
      if (key != null && secret != null) {
        Class<?> basic = Class.forName("software.amazon.awssdk.auth.credentials.AwsBasicCredentials", true, loader);
        Class<?> credentials = Class.forName("software.amazon.awssdk.auth.credentials.AwsCredentials", true, loader);
        Class<?> fixed = Class.forName("software.amazon.awssdk.auth.credentials.StaticCredentialsProvider", true, loader);
        Object pair = basic.getMethod("create", String.class, String.class).invoke(null, key, secret);
        awsBuilder.getMethod("credentialsProvider", provider)
            .invoke(builder, fixed.getMethod("create", credentials).invoke(null, pair));
      }
      Object client = sdkBuilder.getMethod("build").invoke(builder);
      try {
        Object identity = sts.getMethod("getCallerIdentity").invoke(client);
        return String.valueOf(identity.getClass().getMethod("account").invoke(identity));
      } finally {
        ((AutoCloseable) client).close();
      }
    } catch (Exception | LinkageError e) {
      return "unknown"; // no AWS SDK, no credentials: set glue.id (the account id) to name the catalog
    }
  }

  /** A {@code jdbc:} URI as pyiceberg's SQL catalog names the same database; any other URI as it is. */
  static String pyicebergUri(String uri) {
    String text = uri.strip();
    String lowered = text.toLowerCase(Locale.ROOT);
    if (lowered.startsWith("jdbc:sqlite:")) {
      String path = text.substring("jdbc:sqlite:".length()).split("\\?", 2)[0];
      path = path.startsWith("file:") ? path.substring("file:".length()) : path;
      if (path.startsWith("~")) {
        path = System.getProperty("user.home") + path.substring(1);
      }
      return "sqlite:///" + Paths.get(path).toAbsolutePath();
    }
    if (lowered.startsWith("jdbc:postgresql:")) {
      Split parts = Split.of(text.substring("jdbc:".length()));
      String host = parts.netloc.isEmpty() ? "localhost" : parts.netloc;
      return "postgresql+psycopg2://" + host + parts.path + (parts.query.isEmpty() ? "" : "?" + parts.query);
    }
    return text;
  }

  /** Python's {@code urlsplit}: scheme, netloc, path and query (what the naming needs of it). */
  private static final class Split {
    final String scheme;
    final String netloc;
    final String path;
    final String query;

    private Split(String scheme, String netloc, String path, String query) {
      this.scheme = scheme;
      this.netloc = netloc;
      this.path = path;
      this.query = query;
    }

    static Split of(String url) {
      String scheme = "";
      String rest = url;
      int colon = url.indexOf(':');
      if (colon > 0 && url.substring(0, colon).matches("[A-Za-z][A-Za-z0-9+.-]*")) {
        scheme = url.substring(0, colon).toLowerCase(Locale.ROOT);
        rest = url.substring(colon + 1);
      }
      String netloc = "";
      if (rest.startsWith("//")) {
        int end = 2;
        while (end < rest.length() && "/?#".indexOf(rest.charAt(end)) < 0) {
          end++;
        }
        netloc = rest.substring(2, end);
        rest = rest.substring(end);
      }
      int hash = rest.indexOf('#');
      rest = hash < 0 ? rest : rest.substring(0, hash);
      int question = rest.indexOf('?');
      String query = question < 0 ? "" : rest.substring(question + 1);
      String path = question < 0 ? rest : rest.substring(0, question);
      return new Split(scheme, netloc, path, query);
    }

    private String hostPort() {
      int at = netloc.lastIndexOf('@');
      return at < 0 ? netloc : netloc.substring(at + 1);
    }

    /** {@code hostname}: lowercased, without brackets; empty when none. */
    String hostname() {
      String hostPort = hostPort();
      if (hostPort.startsWith("[")) {
        int close = hostPort.indexOf(']');
        return (close < 0 ? hostPort.substring(1) : hostPort.substring(1, close)).toLowerCase(Locale.ROOT);
      }
      int colon = hostPort.indexOf(':');
      return (colon < 0 ? hostPort : hostPort.substring(0, colon)).toLowerCase(Locale.ROOT);
    }

    /** {@code port}, when it is one (1-65535); empty otherwise. */
    String port() {
      String hostPort = hostPort();
      int close = hostPort.startsWith("[") ? hostPort.indexOf(']') : -1;
      int colon = hostPort.indexOf(':', Math.max(close, 0));
      if (colon < 0) {
        return "";
      }
      String digits = hostPort.substring(colon + 1);
      if (!digits.matches("[0-9]{1,5}")) {
        return "";
      }
      int value = Integer.parseInt(digits);
      return value == 0 || value > 65535 ? "" : Integer.toString(value);
    }
  }
}
