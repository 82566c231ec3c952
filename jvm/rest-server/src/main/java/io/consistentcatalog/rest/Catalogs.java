package io.consistentcatalog.rest;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.exceptions.BadRequestException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.jdbc.JdbcCatalog;

/**
 * The catalogs one server serves: the root catalog (routes without a prefix: {@code /v1/namespaces/...},
 * from {@code --jdbc-uri}/{@code --warehouse}) and, with {@code --catalogs-dir DIR}, any number of
 * catalogs behind a prefix ({@code /v1/<prefix>/namespaces/...}), each a {@code JdbcCatalog} on its own
 * SQLite file, created on first use.
 *
 * <p>A client chooses one the REST way: {@code GET /v1/config?warehouse=W} answers {@code overrides:
 * {"prefix": P}} and the client then calls {@code /v1/P/...} (pyiceberg's {@code RestCatalog} and
 * Iceberg's Java {@code RESTCatalog} both send their {@code warehouse} property there). {@code W} is
 * either
 *
 * <ul>
 *   <li>a name ({@code [A-Za-z0-9][A-Za-z0-9_.-]*}, at most 64 characters): the prefix is the name,
 *       the warehouse is {@code DIR/<name>/warehouse}; or
 *   <li>a location URI ({@code file:///tmp/x/warehouse}, {@code s3://b/w}): the prefix is {@code wh-}
 *       + 16 hex digits of its SHA-256 (so every client naming the same location reaches the same
 *       catalog), and table data goes to that location.
 * </ul>
 *
 * <p>Either way the catalog database is {@code DIR/<prefix>/catalog.db} and the warehouse location is
 * written next to it ({@code DIR/<prefix>/warehouse.txt}), so a restarted server on the same {@code
 * DIR} serves the same prefixes again. A prefix the server has never configured is a 404.
 */
final class Catalogs {
  /** One served catalog and its cross-table committer. */
  static final class Served {
    final String prefix; // null for the root catalog
    final JdbcCatalog catalog;
    final TransactionCommitter committer;
    final Path database; // the SQLite file of a prefixed catalog, null for the root
    final MetadataPointers pointers;

    Served(
        String prefix,
        JdbcCatalog catalog,
        TransactionCommitter committer,
        Path database,
        MetadataPointers pointers) {
      this.prefix = prefix;
      this.catalog = catalog;
      this.committer = committer;
      this.database = database;
      this.pointers = pointers;
    }
  }

  /** First path segments of the routes without a prefix: never a prefix. */
  static final Set<String> RESERVED =
      Collections.unmodifiableSet(
          new HashSet<>(
              Arrays.asList("config", "namespaces", "tables", "transactions", "oauth", "views", "v1")));

  private static final Pattern NAME = Pattern.compile("[A-Za-z0-9][A-Za-z0-9_.-]{0,63}");
  private static final Pattern LOCATION = Pattern.compile("^[A-Za-z][A-Za-z0-9+.-]*://.+");
  private static final String WAREHOUSE_FILE = "warehouse.txt";

  private final Served root;
  private final Path catalogsDir; // null: no prefixed catalogs
  private final String catalogName;
  private final Map<String, String> extra;
  private final Map<String, Served> byPrefix = new ConcurrentHashMap<>();

  Catalogs(Served root, Path catalogsDir, String catalogName, Map<String, String> extra) {
    this.root = root;
    this.catalogsDir = catalogsDir;
    this.catalogName = catalogName;
    this.extra = extra;
  }

  Served root() {
    return root;
  }

  /** The prefix for {@code GET /v1/config?warehouse=W}, its catalog opened (created) on the way. */
  String configure(String warehouse) {
    if (catalogsDir == null) {
      throw new BadRequestException(
          "This server has one catalog (started without --catalogs-dir): omit the warehouse parameter");
    }
    String w = warehouse.trim();
    String prefix;
    String location;
    if (NAME.matcher(w).matches()) {
      if (RESERVED.contains(w) || w.startsWith("wh-")) {
        throw new BadRequestException("Warehouse name %s is reserved", w);
      }
      prefix = w;
      location = catalogsDir.resolve(prefix).resolve("warehouse").toUri().toString();
    } else if (LOCATION.matcher(w).matches()) {
      location = stripTrailingSlash(w);
      prefix = "wh-" + MetadataPointers.sha256Hex(location).substring(0, 16);
    } else {
      throw new BadRequestException(
          "Warehouse %s is neither a name ([A-Za-z0-9][A-Za-z0-9_.-]*) nor a location URI", w);
    }
    Served served = open(prefix, location);
    return served.prefix;
  }

  /** The catalog behind {@code prefix} (404 when the server never configured it). */
  Served forPrefix(String prefix) {
    Served served = byPrefix.get(prefix);
    if (served != null) {
      return served;
    }
    if (catalogsDir != null && NAME.matcher(prefix).matches() && !RESERVED.contains(prefix)) {
      Path saved = catalogsDir.resolve(prefix).resolve(WAREHOUSE_FILE);
      if (Files.isRegularFile(saved)) { // configured by an earlier run of the server on this directory
        try {
          return open(prefix, new String(Files.readAllBytes(saved), StandardCharsets.UTF_8).trim());
        } catch (IOException e) {
          throw new IllegalStateException("Cannot read " + saved + ": " + e, e);
        }
      }
    }
    // pyiceberg maps a 404 to NoSuchNamespace/NoSuchTable errors; the message says what happened
    throw new NoSuchNamespaceException(
        "Unknown catalog prefix %s: call GET /v1/config?warehouse=... first", prefix);
  }

  private synchronized Served open(String prefix, String location) {
    Served served = byPrefix.get(prefix);
    if (served != null) {
      return served;
    }
    Path dir = catalogsDir.resolve(prefix);
    Path database = dir.resolve("catalog.db");
    try {
      Files.createDirectories(dir);
      if (location.startsWith("file:")) {
        Files.createDirectories(Path.of(java.net.URI.create(location)));
      }
      Path saved = dir.resolve(WAREHOUSE_FILE);
      if (!Files.isRegularFile(saved)) {
        Files.write(saved, (location + "\n").getBytes(StandardCharsets.UTF_8));
      }
    } catch (IOException | IllegalArgumentException e) {
      throw new IllegalStateException("Cannot prepare catalog " + prefix + " in " + dir + ": " + e, e);
    }
    Map<String, String> props = new LinkedHashMap<>();
    extra.forEach(
        (key, value) -> {
          // connection settings of the root catalog (a PostgreSQL user...) do not apply to SQLite
          if (!key.equals("jdbc.user") && !key.equals("jdbc.password")) {
            props.put(key, value);
          }
        });
    props.put(CatalogProperties.URI, "jdbc:sqlite:" + database);
    props.put(CatalogProperties.WAREHOUSE_LOCATION, location);
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.setConf(hadoopConf());
    catalog.initialize(catalogName, props);
    served =
        new Served(
            prefix,
            catalog,
            new TransactionCommitter(catalog, props),
            database,
            new MetadataPointers(catalogName, props));
    byPrefix.put(prefix, served);
    System.err.println("RestCatalogServer: catalog " + prefix + " -> " + location + " (" + database + ")");
    return served;
  }

  /**
   * The Hadoop configuration of HadoopFileIO (the JdbcCatalog default FileIO). Local files go through
   * Hadoop's raw local file system: the default (checksummed) one writes a hidden {@code .<name>.crc}
   * next to every metadata file, which no Iceberg metadata references and which pyiceberg and other
   * writers do not make; an orphan-file census of a warehouse would count them.
   */
  static Configuration hadoopConf() {
    Configuration conf = new Configuration();
    conf.set("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem");
    conf.setBoolean("fs.file.impl.disable.cache", true);
    return conf;
  }

  void closeAll() {
    for (Served served : byPrefix.values()) {
      close(served);
    }
    byPrefix.clear();
    close(root);
  }

  private static void close(Served served) {
    try {
      served.pointers.close();
      served.catalog.close();
    } catch (RuntimeException e) {
      System.err.println("RestCatalogServer: closing catalog " + served.prefix + ": " + e);
    }
  }

  private static String stripTrailingSlash(String location) {
    String out = location;
    while (out.endsWith("/") && !out.endsWith("://")) {
      out = out.substring(0, out.length() - 1);
    }
    return out;
  }

}
