package io.consistentcatalog.conformance;

import io.consistentcatalog.core.ChangeRange;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.TableState;
import java.util.function.Function;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.JsonNodeFactory;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * {@code {"kind": "changes", "table", "from", "to"}} queries (tests/conformance/change_ranges.py): the range of
 * {@code changes(t, T1, T2)} by {@link ChangeRange#plan}, as Python's {@code changelog.plan_changes} answers it.
 */
final class ChangeRanges {
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  private ChangeRanges() {}

  static boolean handles(JsonNode query) {
    return query.path("kind").asText("").equals("changes");
  }

  static JsonNode answer(Function<String, TableState> load, JsonNode query) {
    ObjectNode node = NODES.objectNode();
    try {
      Long to = query.hasNonNull("to") ? query.get("to").asLong() : null;
      ChangeRange range = ChangeRange.plan(load.apply(query.get("table").asText()), query.get("from").asLong(), to);
      putLong(node, "from_snapshot_id", range.fromSnapshotId);
      putLong(node, "to_snapshot_id", range.toSnapshotId);
      putLong(node, "barrier", range.barrier);
      node.put("to_barrier", range.toBarrier);
      node.put("read", range.read == ChangeRange.Read.NONE || range.read == ChangeRange.Read.APPENDS
          ? range.read.label() : "rewrites");
    } catch (ConsistentException e) {
      node.removeAll();
      node.put("error", e.pythonName());
      node.put("message", e.getMessage());
    }
    return node;
  }

  private static void putLong(ObjectNode node, String key, Long value) {
    if (value == null) {
      node.putNull(key);
    } else {
      node.put(key, value);
    }
  }
}
