package io.consistentcatalog.openlineage;

import java.io.IOException;
import java.util.Map;

/**
 * Where events go: one of the OpenLineage client's transports ({@code http}, {@code console}, {@code file}), with
 * the configuration keys of openlineage-python's. Called only from {@link EventSender}'s thread.
 */
public interface Transport {
  /** Send one event ({@code json}, serialised); {@code job} and {@code eventType} name it (file names, messages). */
  void emit(String json, String job, String eventType) throws IOException;

  /** The transport's settings as plain data (the configuration test compares them with the Python client's). */
  Map<String, Object> describe();
}
