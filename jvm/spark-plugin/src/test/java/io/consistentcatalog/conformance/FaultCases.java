package io.consistentcatalog.conformance;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.CatalogFaults;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.Durations;
import java.io.EOFException;
import java.net.SocketException;
import java.sql.SQLException;
import org.apache.iceberg.jdbc.UncheckedSQLException;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.JsonNodeFactory;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * The JVM's answers to the corpus's {@code fault}, {@code duration} and {@code barrier} queries
 * (tests/conformance/fault_cases.py): how {@link CatalogFaults} classifies an error as a JDBC driver raises it under
 * Iceberg's JDBC catalog, what {@link Durations} makes of a duration and {@link Barriers#parse} of a barrier.
 */
final class FaultCases {
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  private FaultCases() {}

  static boolean handles(JsonNode query) {
    String kind = query.path("kind").asText("");
    return kind.equals("fault") || kind.equals("duration") || kind.equals("barrier");
  }

  static JsonNode answer(JsonNode query) {
    ObjectNode node = NODES.objectNode();
    if (query.path("kind").asText().equals("barrier")) {
      try {
        node.put("ms", Barriers.parse(query.path("text").asText(), query.path("now").asLong()));
      } catch (ConsistentException e) {
        node.put("error", e.kind().pythonName());
      }
      return node;
    }
    if (query.path("kind").asText().equals("duration")) {
      try {
        node.put("ms", Durations.parseMs(query.path("text").asText()));
      } catch (IllegalArgumentException e) {
        node.put("error", "InvalidInputError");
      }
      return node;
    }
    String state = query.hasNonNull("sqlstate") ? query.get("sqlstate").asText() : null;
    String message = query.path("message").asText();
    CatalogFaults.Fault fault;
    if (query.path("driver").asText().equals("sql")) {
      fault = CatalogFaults.ofSql(state, message);
    } else {
      Throwable io = null;
      String kind = query.path("io").asText("");
      if (kind.equals("eof")) {
        io = new EOFException();
      } else if (kind.equals("reset")) {
        io = new SocketException("Connection reset");
      }
      SQLException driver = new SQLException(message, state, io); // PSQLException and SQLiteException are SQLExceptions
      fault = CatalogFaults.of(new UncheckedSQLException(driver, "Failed to get table %s from catalog %s", "db.t", "lake"));
    }
    if (fault == null) {
      node.putNull("fault");
    } else {
      node.put("fault", fault.label());
    }
    return node;
  }
}
