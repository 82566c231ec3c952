package io.consistentcatalog.openlineage;

import java.io.IOException;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.Map;
import java.util.TreeMap;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

/**
 * {@code type: file}, openlineage-python's file transport on local paths: {@code log_file_path} (a path or a
 * {@code file://} URL), {@code append} (one JSON line per event in that file; otherwise a file per event,
 * {@code <log_file_path>-<yyyyMMdd-HHmmss.ffffff>.json}) and {@code debug_mode} (file names with the job and
 * the event type, indented JSON). Remote file systems (fsspec's {@code s3://}..., {@code filesystem},
 * {@code storage_options}) are Python-only: such a configuration is refused by {@link #create}.
 */
final class FileTransport implements Transport {
  private static final DateTimeFormatter PLAIN = DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss.SSSSSS");
  private static final DateTimeFormatter DEBUG = DateTimeFormatter.ofPattern("yyMMdd'T'HHmmss.SSSSSS");
  private static final ObjectMapper JSON = new ObjectMapper();

  private final String logFilePath;
  private final boolean append;
  private final boolean debugMode;

  private FileTransport(String logFilePath, boolean append, boolean debugMode) {
    this.logFilePath = logFilePath;
    this.append = append;
    this.debugMode = debugMode;
  }

  /** {@code FileConfig.from_dict}; an IllegalArgumentException says why the configuration cannot be used here. */
  static FileTransport create(Map<String, Object> config) {
    Object path = config.get("log_file_path");
    if (path == null) {
      throw new IllegalArgumentException("`log_file_path` key not passed to FileConfig");
    }
    String text = String.valueOf(path);
    if (config.get("filesystem") != null || (text.contains("://") && !text.startsWith("file://"))) {
      throw new IllegalArgumentException("the file transport writes local files only here (" + text
          + "); remote file systems (fsspec) are supported by the Python client alone");
    }
    return new FileTransport(text, ConfigValues.truthy(config.get("append")), ConfigValues.truthy(config.get("debug_mode")));
  }

  @Override
  public void emit(String json, String job, String eventType) throws IOException {
    Path file = localPath(fileName(job, eventType));
    String text = debugMode ? JSON.writerWithDefaultPrettyPrinter().writeValueAsString(JSON.readTree(json)) : json;
    byte[] line = (text + "\n").getBytes(StandardCharsets.UTF_8);
    if (append) {
      Files.write(file, line, StandardOpenOption.CREATE, StandardOpenOption.APPEND, StandardOpenOption.WRITE);
    } else {
      Files.write(file, line);
    }
  }

  private String fileName(String job, String eventType) {
    if (append) {
      return logFilePath;
    }
    LocalDateTime now = LocalDateTime.now();
    if (!debugMode) {
      return logFilePath + "-" + PLAIN.format(now) + ".json";
    }
    StringBuilder safe = new StringBuilder();
    job.codePoints().forEach(c -> {
      if (Character.isLetterOrDigit(c) || c == '_' || c == '.' || c == '-') {
        safe.appendCodePoint(c);
      } else {
        safe.append("__");
      }
    });
    return logFilePath + "-" + DEBUG.format(now) + "-" + safe + "-" + eventType + ".json";
  }

  /** {@code LocalFileHandler._to_local_path}: a {@code file://} URL as a path, anything else as it is. */
  private static Path localPath(String name) {
    if (!name.startsWith("file:")) {
      return Paths.get(name);
    }
    URI uri = URI.create(name);
    String path = URLDecoder.decode(uri.getRawPath() == null ? "" : uri.getRawPath().replace("+", "%2B"), StandardCharsets.UTF_8);
    String host = uri.getRawAuthority();
    return Paths.get(host != null && !host.isEmpty() && !host.equals("localhost") ? "//" + host + path : path);
  }

  @Override
  public Map<String, Object> describe() {
    Map<String, Object> out = new TreeMap<>();
    out.put("type", "file");
    out.put("log_file_path", logFilePath);
    out.put("append", append);
    out.put("debug_mode", debugMode);
    return out;
  }
}
