package io.consistentcatalog.rest;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.BadRequestException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.exceptions.ForbiddenException;
import org.apache.iceberg.exceptions.NamespaceNotEmptyException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.NoSuchViewException;
import org.apache.iceberg.exceptions.NotAuthorizedException;
import org.apache.iceberg.exceptions.UnprocessableEntityException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.CatalogHandlers;
import org.apache.iceberg.rest.Endpoint;
import org.apache.iceberg.rest.RESTRequest;
import org.apache.iceberg.rest.RESTSerializers;
import org.apache.iceberg.rest.RESTUtil;
import org.apache.iceberg.rest.requests.CommitTransactionRequest;
import org.apache.iceberg.rest.requests.CreateNamespaceRequest;
import org.apache.iceberg.rest.requests.CreateTableRequest;
import org.apache.iceberg.rest.requests.RegisterTableRequest;
import org.apache.iceberg.rest.requests.RenameTableRequest;
import org.apache.iceberg.rest.requests.ReportMetricsRequest;
import org.apache.iceberg.rest.requests.UpdateNamespacePropertiesRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.responses.ConfigResponse;
import org.apache.iceberg.rest.responses.ErrorResponse;
import org.apache.iceberg.rest.responses.LoadTableResponse;
import org.apache.iceberg.shaded.com.fasterxml.jackson.annotation.JsonAutoDetect;
import org.apache.iceberg.shaded.com.fasterxml.jackson.annotation.PropertyAccessor;
import org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonFactory;
import org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonFactoryBuilder;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.DeserializationFeature;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.PropertyNamingStrategies;

/**
 * Maps the Iceberg REST routes to {@link CatalogHandlers} calls on the catalog they address (no
 * prefix: the root catalog; {@code /v1/<prefix>/...}: the catalog {@code GET /v1/config?warehouse=}
 * handed out that prefix for, see {@link Catalogs}), following Iceberg's
 * reference {@code RESTCatalogAdapter} / {@code RESTCatalogServlet}: the same handlers (so table
 * commits validate their requirements against the metadata they compare-and-swap, with Iceberg's
 * retry on a lost race), the same exception to status mapping, and {@code {"error": {...}}} bodies.
 *
 * <p>Differences from the reference, on purpose: a request body that does not parse (bad JSON, an
 * unknown requirement type or update action, a missing field) is a 400 (the reference servlet lets
 * it surface as a 500); {@code NamespaceNotEmptyException} is a 409 as in the REST spec (the adapter
 * has 400 with a TODO, and pyiceberg maps 409 to {@code NamespaceNotEmptyError}); and {@code POST
 * /v1/transactions/commit} is atomic across tables ({@link TransactionCommitter}); and, started with {@code
 * --idempotency-key-lifetime}, {@code GET /v1/config} advertises that lifetime and mutations carrying an {@code
 * Idempotency-Key} are applied once per key ({@link IdempotencyKeys}; Iceberg 1.10.2 has no such handling).
 */
final class RestRoutes implements HttpHandler {
  static final ObjectMapper MAPPER = newMapper();

  /** What GET /v1/config advertises; pyiceberg only calls what is listed here. */
  static final List<Endpoint> ENDPOINTS =
      Collections.unmodifiableList(
          Arrays.asList(
              Endpoint.V1_LIST_NAMESPACES,
              Endpoint.V1_LOAD_NAMESPACE,
              Endpoint.V1_NAMESPACE_EXISTS,
              Endpoint.V1_CREATE_NAMESPACE,
              Endpoint.V1_UPDATE_NAMESPACE,
              Endpoint.V1_DELETE_NAMESPACE,
              Endpoint.V1_LIST_TABLES,
              Endpoint.V1_LOAD_TABLE,
              Endpoint.V1_TABLE_EXISTS,
              Endpoint.V1_CREATE_TABLE,
              Endpoint.V1_UPDATE_TABLE,
              Endpoint.V1_DELETE_TABLE,
              Endpoint.V1_RENAME_TABLE,
              Endpoint.V1_REGISTER_TABLE,
              Endpoint.V1_REPORT_METRICS,
              Endpoint.V1_COMMIT_TRANSACTION));

  private final Catalogs catalogs;
  /** Null: the server does not advertise Idempotency-Key support, and keys are ignored. */
  private final IdempotencyKeys keys;

  RestRoutes(Catalogs catalogs) {
    this(catalogs, null);
  }

  RestRoutes(Catalogs catalogs, IdempotencyKeys keys) {
    this.catalogs = catalogs;
    this.keys = keys;
  }

  /** Like Iceberg's (package-private) RESTObjectMapper. */
  private static ObjectMapper newMapper() {
    JsonFactory factory =
        new JsonFactoryBuilder()
            .configure(JsonFactory.Feature.INTERN_FIELD_NAMES, false)
            .configure(JsonFactory.Feature.FAIL_ON_SYMBOL_HASH_OVERFLOW, false)
            .build();
    ObjectMapper mapper = new ObjectMapper(factory);
    mapper.setVisibility(PropertyAccessor.FIELD, JsonAutoDetect.Visibility.ANY);
    mapper.configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);
    mapper.setPropertyNamingStrategy(new PropertyNamingStrategies.KebabCaseStrategy());
    RESTSerializers.registerAll(mapper);
    return mapper;
  }

  /** A status, a body (a REST response, an ErrorResponse, or null for no body) and an ETag or null. */
  private static final class Reply {
    final int status;
    final Object body;
    final String etag;

    Reply(int status, Object body) {
      this(status, body, null);
    }

    Reply(int status, Object body, String etag) {
      this.status = status;
      this.body = body;
      this.etag = etag;
    }
  }

  private static final Reply NO_CONTENT = new Reply(204, null);

  private static Reply ok(Object body) {
    return body == null ? NO_CONTENT : new Reply(200, body);
  }

  @Override
  public void handle(HttpExchange exchange) throws IOException {
    try {
      Reply reply = null;
      IdempotencyKeys.Claim claim = null;
      try {
        claim = claim(exchange);
        if (claim != null && claim.mismatched()) {
          reply = new Reply(422, ErrorResponse.builder().responseCode(422)
              .withType("UnprocessableEntityException")
              .withMessage("Idempotency-Key " + exchange.getRequestHeaders().getFirst(IdempotencyKeys.HEADER)
                  + " was first used for another request (method, path or body); send a new key for a new request")
              .build());
        } else if (claim != null && !claim.first()) {
          reply = (Reply) claim.replayed(); // the first answer, as it was sent
          if (reply == null) { // the first request died without an answer (an Error): not settled
            throw new IllegalStateException("the first request with this Idempotency-Key failed; send it again");
          }
        } else {
          reply = route(exchange);
        }
      } catch (Exception e) {
        reply = error(e, exchange);
      } finally {
        if (claim != null && claim.first() && !claim.mismatched()) {
          Reply answered = reply;
          claim.answered(answered, answered != null && answered.status < 500);
        }
      }
      send(exchange, reply);
    } catch (IOException | RuntimeException e) {
      System.err.println("RestCatalogServer: failed to send a response: " + e);
    } finally {
      exchange.close();
    }
  }

  /**
   * The key's claim for a mutation carrying an {@code Idempotency-Key} (null: none, or the server keeps no keys);
   * the body is read here (its digest tells a repeat from another request) and handed on to the route.
   */
  private IdempotencyKeys.Claim claim(HttpExchange exchange) throws IOException {
    String method = exchange.getRequestMethod();
    String key = exchange.getRequestHeaders().getFirst(IdempotencyKeys.HEADER);
    if (keys == null || key == null || method.equals("GET") || method.equals("HEAD")) {
      return null;
    }
    byte[] body;
    try (InputStream in = exchange.getRequestBody()) {
      body = in.readAllBytes();
    }
    exchange.setStreams(new java.io.ByteArrayInputStream(body), null);
    return keys.claim(key, method, exchange.getRequestURI().toString(), body);
  }

  private Reply route(HttpExchange exchange) {
    String method = exchange.getRequestMethod();
    String rawPath = exchange.getRequestURI().getRawPath();
    Map<String, String> query = parseQuery(exchange.getRequestURI().getRawQuery());
    String[] p = rawPath.startsWith("/") ? rawPath.substring(1).split("/", -1) : new String[0];

    if (p.length >= 2 && p[0].equals("v1")) {
      String[] r = Arrays.copyOfRange(p, 1, p.length);
      if (method.equals("GET") && is(r, "config")) {
        ConfigResponse.Builder config = ConfigResponse.builder().withEndpoints(ENDPOINTS);
        String warehouse = query.get("warehouse");
        if (warehouse != null && !warehouse.trim().isEmpty()) {
          // a catalog of its own behind a prefix (Catalogs); without a warehouse: the root catalog
          config.withOverride("prefix", catalogs.configure(warehouse));
        }
        if (keys == null) {
          return ok(config.build());
        }
        // Iceberg 1.10.2's ConfigResponse has no idempotency-key-lifetime field: added to its JSON
        org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ObjectNode node = MAPPER.valueToTree(config.build());
        node.put("idempotency-key-lifetime", keys.lifetime());
        return ok(node);
      }
      Catalogs.Served served;
      if (r.length >= 2 && !Catalogs.RESERVED.contains(r[0]) && Catalogs.RESERVED.contains(r[1])) {
        served = catalogs.forPrefix(RESTUtil.decodeString(r[0])); // /v1/<prefix>/namespaces/...
        r = Arrays.copyOfRange(r, 1, r.length);
      } else {
        served = catalogs.root();
      }
      JdbcCatalog catalog = served.catalog;
      switch (method) {
        case "GET":
          if (is(r, "namespaces")) {
            Namespace parent =
                query.containsKey("parent")
                    ? Namespace.of(
                        RESTUtil.NAMESPACE_SPLITTER
                            .splitToStream(query.get("parent"))
                            .toArray(String[]::new))
                    : Namespace.empty();
            String pageSize = query.get("pageSize");
            return ok(
                pageSize == null
                    ? CatalogHandlers.listNamespaces(catalog, parent)
                    : CatalogHandlers.listNamespaces(
                        catalog, parent, query.get("pageToken"), pageSize));
          }
          if (is(r, "namespaces", "*")) {
            return ok(CatalogHandlers.loadNamespace(catalog, namespace(r[1])));
          }
          if (is(r, "namespaces", "*", "tables")) {
            String pageSize = query.get("pageSize");
            return ok(
                pageSize == null
                    ? CatalogHandlers.listTables(catalog, namespace(r[1]))
                    : CatalogHandlers.listTables(
                        catalog, namespace(r[1]), query.get("pageToken"), pageSize));
          }
          if (is(r, "namespaces", "*", "tables", "*")) {
            return loadTable(served, table(r[1], r[3]), exchange);
          }
          break;

        case "HEAD":
          if (is(r, "namespaces", "*")) {
            CatalogHandlers.namespaceExists(catalog, namespace(r[1]));
            return NO_CONTENT;
          }
          if (is(r, "namespaces", "*", "tables", "*")) {
            CatalogHandlers.tableExists(catalog, table(r[1], r[3]));
            return NO_CONTENT;
          }
          break;

        case "DELETE":
          if (is(r, "namespaces", "*")) {
            CatalogHandlers.dropNamespace(catalog, namespace(r[1]));
            return NO_CONTENT;
          }
          if (is(r, "namespaces", "*", "tables", "*")) {
            if (Boolean.parseBoolean(query.getOrDefault("purgeRequested", "false"))) {
              CatalogHandlers.purgeTable(catalog, table(r[1], r[3]));
            } else {
              CatalogHandlers.dropTable(catalog, table(r[1], r[3]));
            }
            return NO_CONTENT;
          }
          break;

        case "POST":
          if (is(r, "namespaces")) {
            return ok(
                CatalogHandlers.createNamespace(
                    catalog, body(exchange, CreateNamespaceRequest.class)));
          }
          if (is(r, "namespaces", "*", "properties")) {
            return ok(
                CatalogHandlers.updateNamespaceProperties(
                    catalog,
                    namespace(r[1]),
                    body(exchange, UpdateNamespacePropertiesRequest.class)));
          }
          if (is(r, "namespaces", "*", "tables")) {
            CreateTableRequest request = body(exchange, CreateTableRequest.class);
            return ok(
                request.stageCreate()
                    ? CatalogHandlers.stageTableCreate(catalog, namespace(r[1]), request)
                    : CatalogHandlers.createTable(catalog, namespace(r[1]), request));
          }
          if (is(r, "namespaces", "*", "register")) {
            return ok(
                CatalogHandlers.registerTable(
                    catalog, namespace(r[1]), body(exchange, RegisterTableRequest.class)));
          }
          if (is(r, "namespaces", "*", "tables", "*")) {
            // the commit: requirements are validated against the base that the JDBC
            // compare-and-swap (UPDATE ... WHERE metadata_location = base) then replaces
            return ok(
                CatalogHandlers.updateTable(
                    catalog, table(r[1], r[3]), body(exchange, UpdateTableRequest.class)));
          }
          if (is(r, "namespaces", "*", "tables", "*", "metrics")) {
            body(exchange, ReportMetricsRequest.class); // accepted and dropped, like the reference
            return NO_CONTENT;
          }
          if (is(r, "tables", "rename")) {
            CatalogHandlers.renameTable(catalog, body(exchange, RenameTableRequest.class));
            return NO_CONTENT;
          }
          if (is(r, "transactions", "commit")) {
            served.committer.commit(body(exchange, CommitTransactionRequest.class));
            return NO_CONTENT;
          }
          break;

        default:
          break;
      }
    }

    return new Reply(
        400,
        ErrorResponse.builder()
            .responseCode(400)
            .withType("BadRequestException")
            .withMessage(String.format("No route for request: %s %s", method, rawPath))
            .build());
  }

  /**
   * loadTable, freshness-aware (REST spec: {@code ETag}, {@code If-None-Match}, {@code 304}): a client
   * holding the current metadata file gets a 304 with no body, decided from the catalog's pointer
   * alone ({@link MetadataPointers}); otherwise the full answer, with the ETag of its metadata file.
   * "snapshots=refs" may be ignored by a server: all snapshots are returned.
   */
  private static Reply loadTable(Catalogs.Served served, TableIdentifier table, HttpExchange exchange) {
    String ifNoneMatch = exchange.getRequestHeaders().getFirst("If-None-Match");
    String unchanged = ifNoneMatch == null ? null : served.pointers.unchanged(table, ifNoneMatch);
    if (unchanged != null) {
      return new Reply(304, null, unchanged); // a 304 carries the ETag a 200 would (RFC 9110 15.4.5)
    }
    LoadTableResponse response = CatalogHandlers.loadTable(served.catalog, table);
    String location = response.metadataLocation();
    return new Reply(200, response, location == null ? null : MetadataPointers.etag(location));
  }

  /** Path segments against a pattern, "*" matching one non-empty segment. */
  private static boolean is(String[] segments, String... pattern) {
    if (segments.length != pattern.length) {
      return false;
    }
    for (int i = 0; i < pattern.length; i++) {
      if (pattern[i].equals("*") ? segments[i].isEmpty() : !pattern[i].equals(segments[i])) {
        return false;
      }
    }
    return true;
  }

  private static Namespace namespace(String rawSegment) {
    return RESTUtil.decodeNamespace(rawSegment);
  }

  private static TableIdentifier table(String rawNamespace, String rawTable) {
    return TableIdentifier.of(namespace(rawNamespace), RESTUtil.decodeString(rawTable));
  }

  /** The request body as {@code type}; anything that does not parse or validate is a 400. */
  private static <T extends RESTRequest> T body(HttpExchange exchange, Class<T> type) {
    byte[] bytes;
    try (InputStream in = exchange.getRequestBody()) {
      bytes = in.readAllBytes();
    } catch (IOException e) {
      throw new BadRequestException(e, "Cannot read the request body: %s", e.getMessage());
    }
    T request;
    try {
      request = MAPPER.readValue(bytes, type);
    } catch (IOException | RuntimeException e) {
      // bad JSON, an unknown requirement type or update action, a missing field: the client's fault
      throw new BadRequestException(
          e, "Malformed %s: %s", type.getSimpleName(), rootMessage(e));
    }
    if (request == null) {
      throw new BadRequestException("Missing request body: %s", type.getSimpleName());
    }
    try {
      request.validate();
    } catch (RuntimeException e) {
      throw new BadRequestException(e, "Invalid %s: %s", type.getSimpleName(), rootMessage(e));
    }
    return request;
  }

  private static String rootMessage(Throwable e) {
    Throwable t = e;
    while (t.getCause() != null && t.getCause() != t) {
      t = t.getCause();
    }
    String message = t.getMessage() != null ? t.getMessage() : t.getClass().getSimpleName();
    return message.split("\n", 2)[0];
  }

  private static Map<String, String> parseQuery(String rawQuery) {
    Map<String, String> params = new LinkedHashMap<>();
    if (rawQuery == null || rawQuery.isEmpty()) {
      return params;
    }
    for (String pair : rawQuery.split("&")) {
      if (pair.isEmpty()) {
        continue;
      }
      int eq = pair.indexOf('=');
      String key = eq < 0 ? pair : pair.substring(0, eq);
      String value = eq < 0 ? "" : pair.substring(eq + 1);
      params.putIfAbsent(
          URLDecoder.decode(key, StandardCharsets.UTF_8),
          URLDecoder.decode(value, StandardCharsets.UTF_8));
    }
    return params;
  }

  /** The reference adapter's mapping (exact classes there; subclasses included here). */
  static int statusFor(Throwable e) {
    if (e instanceof BadRequestException
        || e instanceof IllegalArgumentException
        || e instanceof ValidationException) {
      return 400;
    } else if (e instanceof NotAuthorizedException) {
      return 401;
    } else if (e instanceof ForbiddenException) {
      return 403;
    } else if (e instanceof NoSuchNamespaceException
        || e instanceof NoSuchTableException
        || e instanceof NoSuchViewException) {
      return 404; // NoSuchIcebergTableException is a NoSuchTableException
    } else if (e instanceof UnsupportedOperationException) {
      return 406;
    } else if (e instanceof AlreadyExistsException
        || e instanceof CommitFailedException
        || e instanceof NamespaceNotEmptyException) {
      return 409;
    } else if (e instanceof UnprocessableEntityException) {
      return 422;
    } else if (e instanceof CommitStateUnknownException) {
      return 500;
    }
    return 500;
  }

  private static Reply error(Exception e, HttpExchange exchange) {
    int status = statusFor(e);
    ErrorResponse.Builder builder =
        ErrorResponse.builder()
            .responseCode(status)
            .withType(e.getClass().getSimpleName())
            .withMessage(e.getMessage() != null ? e.getMessage() : e.getClass().getName());
    if (status >= 500) {
      System.err.println(
          "RestCatalogServer: "
              + exchange.getRequestMethod()
              + " "
              + exchange.getRequestURI()
              + " -> "
              + status);
      e.printStackTrace();
      builder.withStackTrace(e);
    }
    return new Reply(status, builder.build());
  }

  private static void send(HttpExchange exchange, Reply reply) throws IOException {
    boolean head = exchange.getRequestMethod().equals("HEAD");
    if (reply.etag != null) {
      exchange.getResponseHeaders().set("ETag", reply.etag);
    }
    if (reply.body == null || head) {
      // HEAD, 204 and 304 carry no body; -1 tells HttpServer so
      exchange.sendResponseHeaders(reply.status, -1);
      return;
    }
    byte[] bytes = MAPPER.writeValueAsBytes(reply.body);
    exchange.getResponseHeaders().set("Content-Type", "application/json");
    exchange.sendResponseHeaders(reply.status, bytes.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(bytes);
    }
  }
}
