package io.consistentcatalog.openlineage;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.zip.GZIPOutputStream;

/**
 * {@code type: http}, openlineage-python's HTTP transport: a POST of the event to {@code urljoin(url, endpoint)}
 * (endpoint default {@code api/v1/lineage}) with {@code timeout} seconds (default 5) to connect and to each read,
 * {@code auth} of type {@code api_key} ({@code Authorization: Bearer <apiKey>}), {@code compression: gzip},
 * {@code custom_headers}, and {@code retry} as urllib3's {@code Retry} over the client's defaults (total 5,
 * connect 5, read 5, backoff_factor 0.3, status_forcelist 500/502/503/504): connection errors, read errors and
 * those statuses are tried again after {@code backoff_factor * 2^(n-1)} seconds. A status of 400 or more fails
 * the event. TLS is verified with the JVM's trust store ({@code verify} and {@code sslContext} are Python-only);
 * other auth types ({@code jwt}, {@code oauth2}, a class) are refused by {@link #create}.
 */
final class HttpTransport implements Transport {
  static final String DEFAULT_ENDPOINT = "api/v1/lineage";
  static final double DEFAULT_TIMEOUT_SECONDS = 5.0;
  private static final double BACKOFF_MAX_SECONDS = 120.0;

  private final URI target;
  private final int timeoutMs;
  private final double timeoutSeconds;
  private final String authorization;
  private final boolean gzip;
  private final Map<String, String> headers;
  private final Retry retry;

  private HttpTransport(URI target, double timeoutSeconds, String authorization, boolean gzip, Map<String, String> headers,
      Retry retry) {
    this.target = target;
    this.timeoutSeconds = timeoutSeconds;
    this.timeoutMs = (int) Math.max(1, Math.min(Integer.MAX_VALUE, Math.round(timeoutSeconds * 1000)));
    this.authorization = authorization;
    this.gzip = gzip;
    this.headers = headers;
    this.retry = retry;
  }

  /** urllib3's {@code Retry} as the client configures it: the counters and what is tried again. */
  private static final class Retry {
    final int total;
    final int connect;
    final int read;
    final Integer status;
    final double backoffFactor;
    final List<Integer> statusForcelist;
    final boolean postRetried;

    Retry(Map<String, Object> config) {
      Map<String, Object> merged = new LinkedHashMap<>();
      merged.put("total", 5);
      merged.put("read", 5);
      merged.put("connect", 5);
      merged.put("backoff_factor", 0.3);
      merged.put("status_forcelist", List.of(500, 502, 503, 504));
      merged.put("allowed_methods", List.of("HEAD", "POST"));
      merged.putAll(config);
      this.total = counter(merged.get("total"), "retry.total");
      this.connect = counter(merged.get("connect"), "retry.connect");
      this.read = counter(merged.get("read"), "retry.read");
      this.status = merged.get("status") == null ? null : ConfigValues.integer(merged.get("status"), "retry.status");
      this.backoffFactor = merged.get("backoff_factor") == null ? 0 : ConfigValues.number(merged.get("backoff_factor"), "retry.backoff_factor");
      List<Integer> forcelist = new ArrayList<>();
      Object statuses = merged.get("status_forcelist");
      if (statuses instanceof Collection) {
        for (Object code : (Collection<?>) statuses) {
          forcelist.add(ConfigValues.integer(code, "retry.status_forcelist"));
        }
      }
      this.statusForcelist = forcelist;
      Object methods = merged.get("allowed_methods");
      boolean post = !(methods instanceof Collection); // None/False: urllib3 retries every method
      if (methods instanceof Collection) {
        for (Object method : (Collection<?>) methods) {
          post |= "POST".equalsIgnoreCase(String.valueOf(method));
        }
      }
      this.postRetried = post;
    }

    /** urllib3: None (or False) means no limit of its own. */
    private static int counter(Object value, String what) {
      if (value == null || Boolean.FALSE.equals(value)) {
        return Integer.MAX_VALUE;
      }
      return ConfigValues.integer(value, what);
    }
  }

  /** {@code HttpConfig.from_dict} and {@code HttpTransport.__init__}; an IllegalArgumentException says why not. */
  static HttpTransport create(Map<String, Object> config) {
    if (!config.containsKey("url")) {
      throw new IllegalArgumentException("`url` key not passed to HttpConfig");
    }
    String url = String.valueOf(config.get("url")).strip();
    URI base;
    try {
      base = new URI(url);
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException("Need valid url for OpenLineageClient, passed " + url);
    }
    if (base.getScheme() == null || base.getRawAuthority() == null || base.getRawAuthority().isEmpty()) {
      throw new IllegalArgumentException("Need valid url for OpenLineageClient, passed " + url);
    }
    Object endpoint = config.containsKey("endpoint") ? config.get("endpoint") : DEFAULT_ENDPOINT;
    URI target = urljoin(base, endpoint == null ? "" : String.valueOf(endpoint));
    double timeout = config.containsKey("timeout") ? ConfigValues.number(config.get("timeout"), "timeout") : DEFAULT_TIMEOUT_SECONDS;
    if (!(timeout > 0)) {
      throw new IllegalArgumentException("timeout must be a positive number of seconds, not " + config.get("timeout"));
    }
    String authorization = null;
    Object auth = config.get("auth");
    if (auth != null) {
      Map<String, Object> authConfig = ConfigValues.map(auth, "auth");
      Object type = authConfig.get("type");
      if (type != null) {
        if (!"api_key".equals(type)) {
          throw new IllegalArgumentException("auth type '" + type + "' is supported by the Python client alone (here: api_key)");
        }
        Object key = firstTruthy(authConfig.get("apiKey"), authConfig.get("apikey"), authConfig.get("api_key"));
        if (key == null) {
          throw new IllegalArgumentException("apiKey is required for HTTP Transport when auth type is `api_key`.");
        }
        authorization = "Bearer " + key;
      }
    }
    Object compression = config.get("compression");
    if (ConfigValues.truthy(compression) && !"gzip".equals(compression)) {
      throw new IllegalArgumentException("'" + compression + "' is not a valid HttpCompression (gzip)");
    }
    Map<String, String> headers = new TreeMap<>();
    Object custom = config.get("custom_headers");
    if (custom != null) {
      ConfigValues.map(custom, "custom_headers").forEach((k, v) -> headers.put(k, String.valueOf(v)));
    }
    Object retry = config.get("retry");
    Map<String, Object> retryConfig = retry == null ? Map.of() : ConfigValues.map(retry, "retry");
    return new HttpTransport(target, timeout, authorization, ConfigValues.truthy(compression), headers, new Retry(retryConfig));
  }

  private static Object firstTruthy(Object... values) {
    for (Object value : values) {
      if (ConfigValues.truthy(value)) {
        return value;
      }
    }
    return null;
  }

  /** Python's {@code urljoin(url, endpoint)} (RFC 3986; java.net.URI leaves out the '/' after a bare authority). */
  static URI urljoin(URI base, String endpoint) {
    if (endpoint.isEmpty()) {
      return base;
    }
    URI from = base;
    if (base.getRawPath() == null || base.getRawPath().isEmpty()) {
      try {
        from = new URI(base.getScheme(), base.getRawAuthority(), "/", null, null);
      } catch (URISyntaxException e) {
        throw new IllegalArgumentException("Need valid url for OpenLineageClient, passed " + base, e);
      }
    }
    return from.resolve(endpoint);
  }

  @Override
  public void emit(String json, String job, String eventType) throws IOException {
    byte[] body = body(json);
    int total = retry.total;
    int connect = retry.connect;
    int read = retry.read;
    Integer status = retry.status;
    for (int errors = 1; ; errors++) {
      Attempt attempt = post(body);
      if (attempt.error == null && attempt.status < 400) {
        return;
      }
      IOException failure = attempt.error != null ? attempt.error : new IOException("HTTP " + attempt.status + " from " + target);
      boolean again;
      total--;
      if (attempt.error == null) {
        status = status == null ? null : status - 1;
        again = retry.postRetried && retry.statusForcelist.contains(attempt.status) && (status == null || status >= 0);
      } else if (attempt.connected) {
        read--;
        again = retry.postRetried && read >= 0;
      } else {
        connect--;
        again = connect >= 0;
      }
      if (!again || total < 0) {
        throw failure;
      }
      sleep(backoffSeconds(errors));
    }
  }

  /** One POST: the status, or the error and whether the connection was made (a read error) or not (a connect error). */
  private static final class Attempt {
    final int status;
    final IOException error;
    final boolean connected;

    Attempt(int status, IOException error, boolean connected) {
      this.status = status;
      this.error = error;
      this.connected = connected;
    }
  }

  private Attempt post(byte[] body) {
    HttpURLConnection connection = null;
    boolean connected = false;
    try {
      connection = (HttpURLConnection) target.toURL().openConnection();
      connection.setConnectTimeout(timeoutMs);
      connection.setReadTimeout(timeoutMs);
      connection.setRequestMethod("POST");
      connection.setDoOutput(true);
      connection.setFixedLengthStreamingMode(body.length);
      connection.setRequestProperty("Content-Type", "application/json");
      if (authorization != null) {
        connection.setRequestProperty("Authorization", authorization);
      }
      headers.forEach(connection::setRequestProperty);
      if (gzip) {
        connection.setRequestProperty("Content-Encoding", "gzip");
      }
      connection.connect();
      connected = true;
      try (OutputStream out = connection.getOutputStream()) {
        out.write(body);
      }
      int code = connection.getResponseCode();
      drain(connection, code);
      return new Attempt(code, null, true);
    } catch (IOException e) {
      return new Attempt(0, e, connected);
    } finally {
      if (connection != null) {
        connection.disconnect();
      }
    }
  }

  /** urllib3 2's {@code get_backoff_time} after {@code errors} consecutive errors. */
  private double backoffSeconds(int errors) {
    return errors <= 1 ? 0 : Math.min(BACKOFF_MAX_SECONDS, retry.backoffFactor * Math.pow(2, errors - 1));
  }

  private static void sleep(double seconds) throws IOException {
    try {
      Thread.sleep((long) (seconds * 1000));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted while waiting to send again", e);
    }
  }

  private byte[] body(String json) throws IOException {
    byte[] raw = json.getBytes(StandardCharsets.UTF_8);
    if (!gzip) {
      return raw;
    }
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (GZIPOutputStream zipped = new GZIPOutputStream(out)) {
      zipped.write(raw);
    }
    return out.toByteArray();
  }

  private static void drain(HttpURLConnection connection, int code) {
    try (InputStream in = code < 400 ? connection.getInputStream() : connection.getErrorStream()) {
      if (in != null) {
        in.readAllBytes();
      }
    } catch (IOException e) {
      // the status is what counts
    }
  }

  @Override
  public Map<String, Object> describe() {
    Map<String, Object> out = new TreeMap<>();
    out.put("type", "http");
    out.put("url", target.toString());
    out.put("timeout", timeoutSeconds);
    out.put("authorization", authorization);
    out.put("compression", gzip ? "gzip" : null);
    out.put("custom_headers", new TreeMap<>(headers));
    Map<String, Object> retried = new TreeMap<>();
    retried.put("total", retry.total);
    retried.put("connect", retry.connect);
    retried.put("read", retry.read);
    retried.put("backoff_factor", retry.backoffFactor);
    retried.put("status_forcelist", retry.statusForcelist);
    out.put("retry", retried);
    return out;
  }
}
