package io.consistentcatalog.conformance;

import io.consistentcatalog.openlineage.EpochEmitter;
import io.consistentcatalog.openlineage.EpochRun;
import io.consistentcatalog.openlineage.Naming;
import io.consistentcatalog.openlineage.OpenLineageConfig;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The plugin's OpenLineage emitter without Spark, for tests/spark/test_sql_writer_openlineage.py (a test main, not in
 * the plugin jar):
 *
 * <ul>
 *   <li>{@code resolve}: one JSON case per line on standard input, {@code {"env": {...}, "cwd": dir, "home": dir}};
 *       one line per case on standard output: {@code {"configured": bool, ...OpenLineageConfig.Resolution.describe()}};
 *   <li>{@code names}: one {@code {"catalog": name, "properties": {...}}} per line in, the tables' OpenLineage namespace
 *       (a JSON string) per line out;
 *   <li>{@code emit JOB CATALOG_URI}: with this process's own environment, working directory and home, the
 *       {@code START} and {@code COMPLETE} of one made-up epoch of {@code JOB} (demo.words -> demo.word_counts), then
 *       {@code main} returns at once: the JVM's shutdown sends what is queued (or gives up after 10 s).
 * </ul>
 */
public final class OpenLineageProbe {
  private static final ObjectMapper JSON = new ObjectMapper();

  private OpenLineageProbe() {}

  public static void main(String[] args) throws IOException {
    PrintStream out = new PrintStream(System.out, true, "UTF-8");
    if (args.length == 1 && args[0].equals("resolve")) {
      BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      for (String line = in.readLine(); line != null; line = in.readLine()) {
        if (line.isBlank()) {
          continue;
        }
        JsonNode input = JSON.readTree(line);
        Map<String, String> env = new TreeMap<>();
        input.get("env").fields().forEachRemaining(e -> env.put(e.getKey(), e.getValue().asText()));
        java.nio.file.Path cwd = Paths.get(input.get("cwd").asText());
        java.nio.file.Path home = Paths.get(input.get("home").asText());
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("configured", OpenLineageConfig.configured(env, cwd, home));
        answer.putAll(OpenLineageConfig.resolve(env, cwd, home).describe());
        out.println(JSON.writeValueAsString(answer));
      }
      return;
    }
    if (args.length == 1 && args[0].equals("names")) {
      BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      for (String line = in.readLine(); line != null; line = in.readLine()) {
        if (line.isBlank()) {
          continue;
        }
        JsonNode input = JSON.readTree(line);
        Map<String, String> properties = new TreeMap<>();
        input.get("properties").fields().forEachRemaining(e -> properties.put(e.getKey(), e.getValue().asText()));
        out.println(JSON.writeValueAsString(Naming.datasetNamespace(input.get("catalog").asText(), properties)));
      }
      return;
    }
    if (args.length == 3 && args[0].equals("emit")) {
      EpochEmitter emitter = EpochEmitter.forJob(args[1], "lake", Map.of("uri", args[2]));
      if (emitter == null) {
        out.println("off");
        return;
      }
      EpochRun run = emitter.newRun(List.of("demo.words"), List.of("demo.word_counts"));
      run.planned(1_700_000_060_000L, Map.of("demo.words", 6638747140084354033L), Map.of("demo.word_counts", "stage"),
          "3f2a9c0d1e2b");
      run.start();
      run.complete(Map.of("demo.word_counts", "published"), Map.of("demo.word_counts", 2944848789731531313L),
          Map.of("demo.word_counts", "5b0e9c21d4a7"));
      out.println("queued " + run.runId);
      return;
    }
    System.err.println("usage: OpenLineageProbe resolve < cases.jsonl | OpenLineageProbe emit JOB CATALOG_URI");
    System.exit(2);
  }
}
