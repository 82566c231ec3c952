package io.consistentcatalog.rest;

import com.sun.net.httpserver.HttpServer;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.jdbc.JdbcCatalog;

/**
 * A small Iceberg REST catalog server for tests: the JDK's {@code HttpServer} in front of Iceberg's
 * own {@code CatalogHandlers} over a {@code JdbcCatalog} (SQLite file or PostgreSQL).
 *
 * <pre>
 * java -cp CLASSES:ICEBERG_RUNTIME_JAR:PYSPARK_JARS/*:JDBC_DRIVERS io.consistentcatalog.rest.RestCatalogServer \
 *   --port 0 --jdbc-uri jdbc:sqlite:/tmp/x/catalog.db --warehouse file:///tmp/x/warehouse \
 *   [--catalog-name lake] [--catalogs-dir DIR] [--threads 8] [--property jdbc.user=...]...
 *   [--idempotency-key-lifetime PT30M] [--exit-on-stdin-close]
 * </pre>
 *
 * <p>With {@code --catalogs-dir} the server also serves one catalog per REST prefix, each on its own
 * SQLite file under that directory, chosen by a client's {@code warehouse} ({@link Catalogs}): one
 * server, many isolated catalogs (a test session gives every test its own).
 *
 * <p>Prints one line {@code READY <port>} on stdout once listening (with {@code --port 0} the port is
 * chosen by the OS), logs to stderr, and stops cleanly on SIGTERM (shutdown hook). With {@code
 * --exit-on-stdin-close} it also exits when its stdin reaches EOF, so a test runner that dies
 * without stopping it does not leave it behind.
 *
 * <p>With {@code --idempotency-key-lifetime} (an ISO-8601 duration) it advertises that lifetime in {@code GET
 * /v1/config} and applies each keyed mutation once ({@link IdempotencyKeys}); without it, keys are ignored.
 */
public final class RestCatalogServer {
  private RestCatalogServer() {}

  private static void usage(String problem) {
    System.err.println("RestCatalogServer: " + problem);
    System.err.println(
        "usage: RestCatalogServer --port N --jdbc-uri URI --warehouse W [--catalog-name NAME]"
            + " [--catalogs-dir DIR] [--threads N] [--property KEY=VALUE]... [--idempotency-key-lifetime PT30M] [--exit-on-stdin-close]");
    System.exit(2);
  }

  public static void main(String[] args) throws Exception {
    Integer port = null;
    String catalogsDir = null;
    String jdbcUri = null;
    String warehouse = null;
    String catalogName = "lake";
    int threads = 8;
    boolean exitOnStdinClose = false;
    IdempotencyKeys keys = null;
    Map<String, String> extra = new LinkedHashMap<>();

    for (int i = 0; i < args.length; i++) {
      String arg = args[i];
      if (arg.equals("--exit-on-stdin-close")) {
        exitOnStdinClose = true;
        continue;
      }
      if (i + 1 >= args.length) {
        usage("missing value for " + arg);
      }
      String value = args[++i];
      switch (arg) {
        case "--port":
          port = Integer.parseInt(value);
          break;
        case "--jdbc-uri":
          jdbcUri = value;
          break;
        case "--warehouse":
          warehouse = value;
          break;
        case "--catalogs-dir":
          catalogsDir = value;
          break;
        case "--catalog-name":
          catalogName = value;
          break;
        case "--idempotency-key-lifetime":
          try {
            keys = IdempotencyKeys.parse(value);
          } catch (IllegalArgumentException e) {
            usage(e.getMessage());
          }
          break;
        case "--threads":
          threads = Integer.parseInt(value);
          break;
        case "--property":
          int eq = value.indexOf('=');
          if (eq <= 0) {
            usage("--property wants KEY=VALUE, got " + value);
          }
          extra.put(value.substring(0, eq), value.substring(eq + 1));
          break;
        default:
          usage("unknown option " + arg);
      }
    }
    if (port == null || jdbcUri == null || warehouse == null) {
      usage("--port, --jdbc-uri and --warehouse are required");
    }

    Map<String, String> props = new LinkedHashMap<>();
    props.put(CatalogProperties.URI, jdbcUri);
    props.put(CatalogProperties.WAREHOUSE_LOCATION, warehouse);
    props.putAll(extra);

    JdbcCatalog catalog = new JdbcCatalog();
    catalog.setConf(Catalogs.hadoopConf()); // HadoopFileIO (the JdbcCatalog default) needs one
    catalog.initialize(catalogName, props);

    Catalogs catalogs =
        new Catalogs(
            new Catalogs.Served(
                null,
                catalog,
                new TransactionCommitter(catalog, props),
                null,
                new MetadataPointers(catalogName, props)),
            catalogsDir == null ? null : Path.of(catalogsDir).toAbsolutePath(),
            catalogName,
            extra);
    RestRoutes routes = new RestRoutes(catalogs, keys);
    // TCP_NODELAY on accepted sockets: HttpServer writes headers and body separately, and on a
    // keep-alive connection (pyiceberg's requests.Session) Nagle + delayed ACK cost ~40 ms a request.
    // Read once by the JDK's ServerConfig, so set before the server is created.
    if (System.getProperty("sun.net.httpserver.nodelay") == null) {
      System.setProperty("sun.net.httpserver.nodelay", "true");
    }
    HttpServer server =
        HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 64);
    ExecutorService pool = Executors.newFixedThreadPool(threads, namedThreads("rest-handler"));
    server.setExecutor(pool);
    server.createContext("/", routes);
    server.start();

    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  server.stop(0);
                  pool.shutdown();
                  try {
                    pool.awaitTermination(5, TimeUnit.SECONDS);
                  } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                  }
                  catalogs.closeAll();
                  System.err.println("RestCatalogServer: stopped");
                },
                "rest-shutdown"));

    System.out.println("READY " + server.getAddress().getPort());
    System.out.flush();

    if (exitOnStdinClose) {
      Thread watcher =
          new Thread(
              () -> {
                try (BufferedReader in =
                    new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                  while (in.readLine() != null) {
                    // ignore input; EOF means the parent went away
                  }
                } catch (IOException e) {
                  // treat as EOF
                }
                System.exit(0);
              },
              "stdin-watch");
      watcher.setDaemon(true);
      watcher.start();
    }

    new CountDownLatch(1).await(); // serve until SIGTERM (the shutdown hook) or System.exit
  }

  private static ThreadFactory namedThreads(String prefix) {
    AtomicInteger counter = new AtomicInteger();
    return runnable -> {
      Thread thread = new Thread(runnable, prefix + "-" + counter.incrementAndGet());
      thread.setDaemon(true);
      return thread;
    };
  }
}
