package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.spark.line.LineSpark;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;

/**
 * The lease-holder ids a streaming epoch job's runs used, kept in its checkpoint as
 * {@code <checkpoint>/consistent-catalog/instances} (the last 20, one per line; any Hadoop file system): the same
 * file as the Python streaming jobs' ({@code consistent_catalog.spark.streaming.CheckpointInstances}, protocol §5.7).
 */
final class CheckpointInstances {
  static final String FILE = "consistent-catalog/instances";
  private static final int KEEP = 20;

  private final SparkSession session;
  private final Path path;

  private CheckpointInstances(SparkSession session, Path path) {
    this.session = session;
    this.path = path;
  }

  /** The file of the running query {@code queryId} (its resolved checkpoint root). */
  static CheckpointInstances of(SparkSession session, String queryId) {
    for (StreamingQuery query : session.streams().active()) {
      String root = query.id().toString().equals(queryId) ? LineSpark.checkpointRoot(query) : null;
      if (root != null) {
        return new CheckpointInstances(session, new Path(root.replaceAll("/+$", "") + "/" + FILE));
      }
    }
    throw new IllegalStateException("streaming query " + queryId + " is not running in the session that started it");
  }

  private FileSystem fs() throws IOException {
    return path.getFileSystem(session.sparkContext().hadoopConfiguration());
  }

  List<String> read() {
    List<String> out = new ArrayList<>();
    try {
      FileSystem fs = fs();
      if (!fs.exists(path)) {
        return out;
      }
      try (BufferedReader reader = new BufferedReader(new InputStreamReader(fs.open(path), StandardCharsets.UTF_8))) {
        for (String line = reader.readLine(); line != null; line = reader.readLine()) {
          if (line.trim().matches("[0-9a-f]{12}")) {
            out.add(line.trim());
          }
        }
      }
      return out;
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read " + path, e);
    }
  }

  void write(List<String> instances) {
    List<String> kept = new ArrayList<>(new LinkedHashSet<>(instances));
    kept = kept.subList(Math.max(0, kept.size() - KEEP), kept.size());
    try {
      FileSystem fs = fs();
      fs.mkdirs(path.getParent());
      try (OutputStream out = fs.create(path, true)) {
        out.write((String.join("\n", kept) + "\n").getBytes(StandardCharsets.UTF_8));
      }
    } catch (IOException e) {
      throw new UncheckedIOException("cannot write " + path, e);
    }
  }
}
