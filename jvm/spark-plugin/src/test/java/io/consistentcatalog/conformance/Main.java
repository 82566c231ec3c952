package io.consistentcatalog.conformance;

import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.Cut;
import io.consistentcatalog.core.Keys;
import io.consistentcatalog.core.Resolver;
import io.consistentcatalog.core.TableCut;
import io.consistentcatalog.core.TableState;
import java.io.File;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableMetadataParser;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.JsonNodeFactory;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * Runs the JVM resolver over conformance cases ({@code tests/conformance/cases/*.json}) and prints one
 * JSON line per query: {@code {"case": file, "index": i, "answer": ...}}. An answer is a cut
 * {@code {"level", "barrier", "tables": {name: {"snapshot_id", "barrier", "branch", "revision"}}}},
 * a component cut {@code {"cut": cut|null, "blocked": {name: error class}}}, or {@code {"error": class}}
 * where class is the Python exception class name; a write plan ({@code "kind": "write-plan"} or
 * {@code "new-edges"}) is answered by {@link WritePlans}. Arguments: case files or directories of them.
 * A test main (tests/conformance/corpus.py runs it with build/jvm/spark-plugin/test-classes on the
 * classpath), not part of the plugin jar.
 */
public final class Main {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  private Main() {}

  public static void main(String[] args) throws IOException {
    List<File> files = new ArrayList<>();
    for (String arg : args) {
      File f = new File(arg);
      if (f.isDirectory()) {
        File[] found = f.listFiles((dir, name) -> name.endsWith(".json"));
        if (found != null) {
          Arrays.sort(found);
          files.addAll(Arrays.asList(found));
        }
      } else {
        files.add(f);
      }
    }
    PrintStream out = new PrintStream(System.out, false, "UTF-8");
    for (File file : files) {
      JsonNode root = JSON.readTree(new String(Files.readAllBytes(file.toPath()), StandardCharsets.UTF_8));
      Map<String, JsonNode> metadata = new LinkedHashMap<>();
      Iterator<Map.Entry<String, JsonNode>> tables = root.path("tables").fields();
      while (tables.hasNext()) {
        Map.Entry<String, JsonNode> e = tables.next();
        metadata.put(e.getKey(), e.getValue());
      }
      int index = 0;
      for (JsonNode query : root.path("queries")) {
        ObjectNode line = NODES.objectNode();
        line.put("case", file.getName());
        line.put("index", index++);
        line.set("answer", answer(metadata, query));
        out.println(JSON.writeValueAsString(line));
      }
    }
    out.flush();
  }

  static JsonNode answer(Map<String, JsonNode> metadata, JsonNode query) {
    Map<String, TableMetadata> parsed = new HashMap<>();
    java.util.function.Function<String, TableState> load =
        name -> {
          JsonNode node = metadata.get(name);
          if (node == null) {
            return null;
          }
          TableMetadata m = parsed.computeIfAbsent(name, k -> TableMetadataParser.fromJson(node.toString()));
          return TableState.fromMetadata(name, m);
        };
    if (FaultCases.handles(query)) {
      return FaultCases.answer(query);
    }
    if (ChangeRanges.handles(query)) {
      return ChangeRanges.answer(load, query);
    }
    if (WritePlans.handles(query)) {
      return WritePlans.answer(metadata, name -> {
        JsonNode node = metadata.get(name);
        return node == null ? null : parsed.computeIfAbsent(name, k -> TableMetadataParser.fromJson(node.toString()));
      }, load, query);
    }
    String level = query.hasNonNull("level") ? query.get("level").asText() : Keys.DEFAULT_LEVEL;
    Object asOf = asOf(query.get("as_of"));
    try {
      if ("component".equals(query.path("kind").asText(""))) {
        Map<String, TableState> states = new LinkedHashMap<>();
        for (String name : metadata.keySet()) {
          states.put(name, load.apply(name));
        }
        String table = query.get("table").asText();
        Resolver.ScopedCut scoped = Resolver.scopedCut(Resolver.component(table, states), states, level, asOf);
        ObjectNode node = NODES.objectNode();
        node.set("cut", scoped.cut == null ? NODES.nullNode() : cutJson(scoped.cut));
        ObjectNode blocked = NODES.objectNode();
        for (Map.Entry<String, ConsistentException> e : scoped.blocked.entrySet()) {
          blocked.put(e.getKey(), e.getValue().pythonName());
        }
        node.set("blocked", blocked);
        return node;
      }
      List<String> names = new ArrayList<>();
      for (JsonNode t : query.path("tables")) {
        names.add(t.asText());
      }
      return cutJson(Resolver.resolveTables(names, load, level, asOf));
    } catch (ConsistentException e) {
      ObjectNode node = NODES.objectNode();
      node.put("error", e.pythonName());
      node.put("message", e.getMessage());
      return node;
    }
  }

  static Object asOf(JsonNode node) {
    if (node == null || node.isNull()) {
      return null;
    }
    if (node.isBoolean()) {
      return node.booleanValue();
    }
    if (node.isIntegralNumber()) {
      return node.longValue();
    }
    if (node.isNumber()) {
      return node.doubleValue();
    }
    if (node.isTextual()) {
      return node.textValue();
    }
    return node.toString();
  }

  static ObjectNode cutJson(Cut cut) {
    ObjectNode node = NODES.objectNode();
    node.put("level", cut.level);
    if (cut.barrier == null) {
      node.putNull("barrier");
    } else {
      node.put("barrier", cut.barrier);
    }
    ObjectNode tables = NODES.objectNode();
    for (TableCut t : cut.tables.values()) {
      ObjectNode tn = NODES.objectNode();
      if (t.snapshotId == null) {
        tn.putNull("snapshot_id");
      } else {
        tn.put("snapshot_id", t.snapshotId);
      }
      if (t.barrier == null) {
        tn.putNull("barrier");
      } else {
        tn.put("barrier", t.barrier);
      }
      tn.put("branch", t.branch);
      tn.put("revision", t.revision);
      tables.set(t.table, tn);
    }
    node.set("tables", tables);
    return node;
  }
}
