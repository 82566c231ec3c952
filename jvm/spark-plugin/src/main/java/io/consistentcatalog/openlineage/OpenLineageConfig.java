package io.consistentcatalog.openlineage;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Pattern;
import org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonParser;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.DeserializationFeature;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

/**
 * Whether OpenLineage is configured, and where events go, decided as the Python side decides it (protocol §5.8):
 * first {@code consistent_catalog.openlineage_events.configured} ({@link #configured}), then what
 * openlineage-python's {@code OpenLineageClient()} makes of the configuration ({@link #resolve}):
 *
 * <ol>
 *   <li>{@code OPENLINEAGE_DISABLED=true}: off;
 *   <li>the configuration is the first readable file of {@code $OPENLINEAGE_CONFIG}, {@code ./openlineage.yml},
 *       {@code ~/.openlineage/openlineage.yml} (YAML, read with SnakeYAML as PyYAML's {@code safe_load} reads it)
 *       merged over the {@code OPENLINEAGE__*} variables ({@code OPENLINEAGE__TRANSPORT__URL=...} is
 *       {@code transport.url}; a value is JSON where it parses as JSON): the file wins;
 *   <li>its {@code transport} with a {@code type}; else {@code OPENLINEAGE_URL} (with {@code OPENLINEAGE_ENDPOINT},
 *       {@code OPENLINEAGE_API_KEY}) over HTTP; else the console;
 *   <li>its {@code filters} ({@code exact}/{@code regex} on the job name) drop a job's events.
 * </ol>
 *
 * <p>Transports here: {@code http}, {@code console}, {@code file} ({@link HttpTransport}, {@link ConsoleTransport},
 * {@link FileTransport}); {@code noop} sends nothing. Any other type (Kafka, composite, ...), or a configuration the
 * Python client would not load, is one warning and no events. The client's own additions (tag, environment and
 * source-code facets) are Python's alone.
 */
public final class OpenLineageConfig {
  public static final String CONFIG_FILE = "openlineage.yml";
  static final String ENV_PREFIX = "OPENLINEAGE__";
  private static final ObjectMapper JSON = new ObjectMapper()
      .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
      .enable(JsonParser.Feature.ALLOW_NON_NUMERIC_NUMBERS);
  private static final int CACHED = 8;
  /** Resolutions by what they were made from (the configuration file's content): a warning is said once. */
  private static final Map<String, Resolution> CACHE = new LinkedHashMap<String, Resolution>(16, 0.75f, true) {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, Resolution> eldest) {
      return size() > CACHED;
    }
  };

  private OpenLineageConfig() {}

  /** What a configuration amounts to: where events go (null: nowhere), which jobs' events are dropped, why not. */
  public static final class Resolution {
    /** Where events go; null: no events. */
    public final Transport transport;
    /** The job namespace ({@code OPENLINEAGE_NAMESPACE}, default {@code consistent-catalog}). */
    public final String jobNamespace;
    /** To say once when this configuration is first used (a transport this JVM lacks, a file it cannot read). */
    public final String warning;
    private final List<JobFilter> filters;

    Resolution(Transport transport, String jobNamespace, String warning, List<JobFilter> filters) {
      this.transport = transport;
      this.jobNamespace = jobNamespace;
      this.warning = warning;
      this.filters = filters;
    }

    /** Whether the client's filters drop the events of {@code job}. */
    public boolean filtered(String job) {
      for (JobFilter filter : filters) {
        if (filter.matches(job)) {
          return true;
        }
      }
      return false;
    }

    /** As plain data, for the configuration test: transport (null: off), filters, job namespace, warning. */
    public Map<String, Object> describe() {
      Map<String, Object> out = new TreeMap<>();
      out.put("transport", transport == null ? null : transport.describe());
      List<Object> described = new ArrayList<>();
      for (JobFilter filter : filters) {
        described.add(List.of(filter.type, filter.pattern));
      }
      out.put("filters", described);
      out.put("job_namespace", jobNamespace);
      out.put("warning", warning);
      return out;
    }
  }

  /** A filter of the client's {@code filters}: {@code exact} (the job name) or {@code regex} (matched at its start). */
  private static final class JobFilter {
    final String type;
    final String pattern;
    private final Pattern regex;

    JobFilter(String type, String pattern) {
      this.type = type;
      this.pattern = pattern;
      this.regex = type.equals("regex") ? Pattern.compile(pattern) : null;
    }

    boolean matches(String job) {
      return regex == null ? pattern.equals(job) : regex.matcher(job).lookingAt();
    }
  }

  // --- this JVM's configuration -------------------------------------------------------------------

  /**
   * The configuration as this JVM finds it now (its environment, working directory and home): read each time, so
   * a changed {@code openlineage.yml} counts from the next epoch; a warning is printed the first time a
   * configuration is met.
   */
  public static Resolution current() {
    Map<String, String> env = System.getenv();
    Path cwd = Paths.get("").toAbsolutePath();
    Path home = home(env);
    String key = fingerprint(env, cwd, home);
    Resolution resolution;
    boolean fresh = false;
    synchronized (CACHE) {
      resolution = CACHE.get(key);
      if (resolution == null) {
        resolution = resolve(env, cwd, home);
        CACHE.put(key, resolution);
        fresh = true;
      }
    }
    if (fresh && resolution.warning != null) {
      EventSender.warn(resolution.warning);
    }
    return resolution;
  }

  /** {@code Path.home()}: {@code $HOME}, else the account's home directory. */
  static Path home(Map<String, String> env) {
    String home = env.get("HOME");
    return Paths.get(home != null && !home.isEmpty() ? home : System.getProperty("user.home"));
  }

  private static String fingerprint(Map<String, String> env, Path cwd, Path home) {
    if (!configured(env, cwd, home)) {
      return "off";
    }
    Path file = configFile(env, cwd, home);
    String content = "";
    if (file != null) {
      try {
        content = new String(Files.readAllBytes(file), StandardCharsets.UTF_8);
      } catch (IOException e) {
        content = "unreadable: " + e;
      }
    }
    return file + "\n" + content;
  }

  // --- the decision ---------------------------------------------------------------------------------

  /**
   * {@code configured()} of openlineage_events.py: {@code OPENLINEAGE_DISABLED=true} turns it off; a config file,
   * {@code OPENLINEAGE__TRANSPORT*} variables or {@code OPENLINEAGE_URL} turn it on; nothing else does.
   */
  public static boolean configured(Map<String, String> env, Path cwd, Path home) {
    if (env.getOrDefault("OPENLINEAGE_DISABLED", "").strip().toLowerCase(Locale.ROOT).equals("true")) {
      return false;
    }
    String file = env.get("OPENLINEAGE_CONFIG");
    if (nonEmpty(env.get("OPENLINEAGE_URL")) || (nonEmpty(file) && Files.isRegularFile(cwd.resolve(file)))) {
      return true;
    }
    for (String key : env.keySet()) {
      if (key.startsWith("OPENLINEAGE__TRANSPORT")) {
        return true;
      }
    }
    return Files.isRegularFile(cwd.resolve(CONFIG_FILE)) || Files.isRegularFile(home.resolve(".openlineage").resolve(CONFIG_FILE));
  }

  /** Where the events of this configuration go ({@code configured()}, then the client's resolution). */
  public static Resolution resolve(Map<String, String> env, Path cwd, Path home) {
    String namespace = nonEmpty(env.get("OPENLINEAGE_NAMESPACE")) ? env.get("OPENLINEAGE_NAMESPACE") : EpochEmitter.DEFAULT_JOB_NAMESPACE;
    if (!configured(env, cwd, home)) {
      return new Resolution(null, namespace, null, Collections.emptyList());
    }
    String warning = null;
    Path file = configFile(env, cwd, home);
    Map<String, Object> fromFile = new LinkedHashMap<>();
    if (file != null) {
      try {
        Object loaded = Yaml.load(file);
        if (loaded instanceof Map) {
          fromFile = ConfigValues.map(loaded, "the configuration");
        } else if (ConfigValues.truthy(loaded)) {
          return off(namespace, file + " holds " + ConfigValues.describe(loaded) + ", not a mapping");
        }
      } catch (IOException | RuntimeException | LinkageError e) { // the client logs it and goes on without the file
        warning = "could not read the OpenLineage configuration " + file + " (" + e.getClass().getSimpleName() + ": "
            + firstLine(e.getMessage()) + "); it is left out";
      }
    }
    try {
      Map<String, Object> config = deepMerge(fromEnvironment(env), fromFile);
      List<JobFilter> filters = filters(config.get("filters"));
      Object transport = config.get("transport");
      Transport chosen;
      if (ConfigValues.truthy(transport) && ConfigValues.truthy(ConfigValues.map(transport, "transport").get("type"))) {
        Map<String, Object> settings = ConfigValues.map(transport, "transport");
        String type = String.valueOf(settings.get("type"));
        switch (type) {
          case "http":
            chosen = HttpTransport.create(settings);
            break;
          case "console":
            chosen = new ConsoleTransport();
            break;
          case "file":
            chosen = FileTransport.create(settings);
            break;
          case "noop":
            return new Resolution(null, namespace, warning, filters);
          default:
            return off(namespace, "its transport type '" + type + "' is supported by the Python client alone (here: "
                + "http, console, file)");
        }
      } else if (nonEmpty(env.get("OPENLINEAGE_URL"))) {
        Map<String, Object> settings = new LinkedHashMap<>();
        settings.put("url", env.get("OPENLINEAGE_URL"));
        settings.put("endpoint", env.getOrDefault("OPENLINEAGE_ENDPOINT", HttpTransport.DEFAULT_ENDPOINT));
        if (nonEmpty(env.get("OPENLINEAGE_API_KEY"))) {
          settings.put("auth", Map.of("type", "api_key", "apiKey", env.get("OPENLINEAGE_API_KEY")));
        }
        chosen = HttpTransport.create(settings);
      } else {
        chosen = new ConsoleTransport();
      }
      return new Resolution(chosen, namespace, warning, filters);
    } catch (RuntimeException e) {
      return off(namespace, firstLine(e.getMessage()));
    }
  }

  private static Resolution off(String namespace, String why) {
    return new Resolution(null, namespace, "OpenLineage is configured but the JVM writer sends no events: " + why,
        Collections.emptyList());
  }

  /** The client's {@code _find_yaml_config_path}: the first readable file. */
  static Path configFile(Map<String, String> env, Path cwd, Path home) {
    List<Path> candidates = new ArrayList<>();
    if (nonEmpty(env.get("OPENLINEAGE_CONFIG"))) {
      candidates.add(cwd.resolve(env.get("OPENLINEAGE_CONFIG")));
    }
    candidates.add(cwd.resolve(CONFIG_FILE));
    candidates.add(home.resolve(".openlineage").resolve(CONFIG_FILE));
    for (Path candidate : candidates) {
      if (Files.isRegularFile(candidate) && Files.isReadable(candidate)) {
        return candidate;
      }
    }
    return null;
  }

  /**
   * The client's {@code _load_config_from_env_variables}: {@code OPENLINEAGE__A__B=v} is {@code {"a": {"b": v}}},
   * {@code v} parsed as JSON where it is JSON; variables in reverse order, so a whole {@code OPENLINEAGE__TRANSPORT}
   * JSON object wins over its parts.
   */
  static Map<String, Object> fromEnvironment(Map<String, String> env) {
    List<String> keys = new ArrayList<>();
    for (String key : env.keySet()) {
      if (key.startsWith(ENV_PREFIX)) {
        keys.add(key);
      }
    }
    keys.sort(Collections.reverseOrder());
    Map<String, Object> config = new LinkedHashMap<>();
    for (String key : keys) {
      String[] path = key.substring(ENV_PREFIX.length()).split("__", -1);
      Map<String, Object> current = config;
      for (int i = 0; i < path.length - 1; i++) {
        String part = path[i].toLowerCase(Locale.ROOT);
        Object next = current.get(part);
        if (next == null && !current.containsKey(part)) {
          next = new LinkedHashMap<String, Object>();
          current.put(part, next);
        }
        current = ConfigValues.map(next, key);
      }
      current.put(path[path.length - 1].toLowerCase(Locale.ROOT), jsonOrText(env.get(key)));
    }
    return config;
  }

  private static Object jsonOrText(String value) {
    try {
      return JSON.readValue(value, Object.class);
    } catch (IOException | RuntimeException e) {
      return value;
    }
  }

  /** {@code deep_merge_dicts}: {@code over} wins; maps are merged key by key. */
  @SuppressWarnings("unchecked")
  static Map<String, Object> deepMerge(Map<String, Object> under, Map<String, Object> over) {
    Map<String, Object> merged = new LinkedHashMap<>(under);
    for (Map.Entry<String, Object> e : over.entrySet()) {
      Object mine = merged.get(e.getKey());
      if (e.getValue() instanceof Map && mine instanceof Map) {
        merged.put(e.getKey(), deepMerge((Map<String, Object>) mine, (Map<String, Object>) e.getValue()));
      } else {
        merged.put(e.getKey(), e.getValue());
      }
    }
    return merged;
  }

  /** The client's {@code filters}: a list of {@code {type, match | regex}}; unknown types are passed over. */
  private static List<JobFilter> filters(Object config) {
    List<JobFilter> filters = new ArrayList<>();
    if (config == null) {
      return filters;
    }
    if (!(config instanceof Collection)) {
      throw new IllegalArgumentException("filters must be a list, not " + ConfigValues.describe(config));
    }
    for (Object entry : (Collection<?>) config) {
      Map<String, Object> filter = ConfigValues.map(entry, "a filter");
      for (String key : filter.keySet()) {
        if (!key.equals("type") && !key.equals("match") && !key.equals("regex")) {
          throw new IllegalArgumentException("Failed to parse OpenLineage config: a filter has no '" + key + "'");
        }
      }
      Object type = filter.get("type");
      if ("exact".equals(type) && ConfigValues.truthy(filter.get("match"))) {
        filters.add(new JobFilter("exact", String.valueOf(filter.get("match"))));
      } else if ("regex".equals(type) && ConfigValues.truthy(filter.get("regex"))) {
        filters.add(new JobFilter("regex", String.valueOf(filter.get("regex"))));
      }
    }
    return filters;
  }

  private static boolean nonEmpty(String value) {
    return value != null && !value.isEmpty();
  }

  static String firstLine(String text) {
    return text == null ? "" : text.split("\\R", 2)[0];
  }

  /** SnakeYAML (Spark ships it) as PyYAML's {@code safe_load}: plain maps, lists and scalars; empty is null. */
  private static final class Yaml {
    static Object load(Path file) throws IOException {
      String text = new String(Files.readAllBytes(file), StandardCharsets.UTF_8);
      org.yaml.snakeyaml.LoaderOptions options = new org.yaml.snakeyaml.LoaderOptions();
      return new org.yaml.snakeyaml.Yaml(new org.yaml.snakeyaml.constructor.SafeConstructor(options)).load(text);
    }
  }
}
