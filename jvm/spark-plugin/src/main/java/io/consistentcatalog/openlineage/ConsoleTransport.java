package io.consistentcatalog.openlineage;

import java.util.Map;
import java.util.TreeMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code type: console}: each event logged at INFO (logger {@code io.consistentcatalog.openlineage.ConsoleTransport}),
 * as the Python and Java clients' console transports log theirs; what a configuration without a transport falls
 * back to.
 */
final class ConsoleTransport implements Transport {
  private static final Logger LOG = LoggerFactory.getLogger(ConsoleTransport.class);

  @Override
  public void emit(String json, String job, String eventType) {
    LOG.info(json);
  }

  @Override
  public Map<String, Object> describe() {
    Map<String, Object> out = new TreeMap<>();
    out.put("type", "console");
    return out;
  }
}
