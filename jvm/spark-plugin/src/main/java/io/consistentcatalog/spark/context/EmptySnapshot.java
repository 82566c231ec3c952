package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.Keys;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.ManifestFile;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.avro.Avro;
import org.apache.iceberg.io.FileAppender;
import org.apache.iceberg.io.FileIO;

/**
 * A snapshot holding no data and without a parent, its empty manifest list written: the fence snapshot and
 * the genesis snapshot of protocol §5.2/§6.3 (Python's {@code _pyiceberg.empty_snapshot}). Without a parent it
 * starts no history of its own and catalogs accept any sequence number for it; it takes the sequence number
 * it is given, exact as long as its commit asserts every branch head.
 */
final class EmptySnapshot implements Snapshot {
  private static final String[] EMPTY_TOTALS = {
    "total-records", "total-files-size", "total-data-files", "total-delete-files", "total-position-deletes",
    "total-equality-deletes"
  };

  private final long sequenceNumber;
  private final long snapshotId;
  private final long timestampMillis;
  private final Map<String, String> summary;
  private final String manifestList;
  private final Integer schemaId;
  private final Long firstRowId;
  private final Long addedRows;

  private EmptySnapshot(long sequenceNumber, long snapshotId, Map<String, String> summary, String manifestList,
      Integer schemaId, Long firstRowId, Long addedRows) {
    this.sequenceNumber = sequenceNumber;
    this.snapshotId = snapshotId;
    this.timestampMillis = System.currentTimeMillis();
    this.summary = summary;
    this.manifestList = manifestList;
    this.schemaId = schemaId;
    this.firstRowId = firstRowId;
    this.addedRows = addedRows;
  }

  /**
   * The genesis of a sink without {@code main} (protocol §5.2 step 1): empty, untagged but for {@code consistent.job},
   * the next sequence number of {@code base} (registration, and an epoch after a revision emptied the sink).
   */
  static EmptySnapshot genesis(TableOperations ops, TableMetadata base, String job) {
    return create(ops, base, base.lastSequenceNumber() + 1, java.util.Collections.singletonMap(Keys.JOB, job));
  }

  /** A new empty snapshot of the table {@code ops} operates on ({@code base} as read), with {@code extra} in its summary. */
  static EmptySnapshot create(TableOperations ops, TableMetadata base, long sequenceNumber, Map<String, String> extra) {
    long id = ops.newSnapshotId();
    String path = ops.metadataFileLocation("snap-" + id + "-0-" + UUID.randomUUID() + ".avro");
    Map<String, String> meta = new LinkedHashMap<>();
    meta.put("snapshot-id", Long.toString(id));
    meta.put("parent-snapshot-id", "null");
    meta.put("format-version", Integer.toString(base.formatVersion()));
    if (base.formatVersion() >= 2) {
      meta.put("sequence-number", Long.toString(sequenceNumber));
    }
    if (base.formatVersion() >= 3) {
      meta.put("first-row-id", Long.toString(base.nextRowId()));
    }
    try (FileAppender<Object> writer = Avro.write(ops.io().newOutputFile(path))
        .schema(ManifestFile.schema())
        .named("manifest_file")
        .meta(meta)
        .overwrite()
        .build()) {
      // no manifests: the snapshot holds no data
    } catch (IOException e) {
      throw new UncheckedIOException("writing the empty manifest list " + path, e);
    }
    Map<String, String> summary = new LinkedHashMap<>();
    for (String key : EMPTY_TOTALS) {
      summary.put(key, "0");
    }
    summary.putAll(extra);
    boolean v3 = base.formatVersion() >= 3;
    return new EmptySnapshot(base.formatVersion() >= 2 ? sequenceNumber : 0L, id, Collections.unmodifiableMap(summary), path,
        base.currentSchemaId(), v3 ? base.nextRowId() : null, v3 ? 0L : null);
  }

  @Override
  public long sequenceNumber() {
    return sequenceNumber;
  }

  @Override
  public long snapshotId() {
    return snapshotId;
  }

  @Override
  public Long parentId() {
    return null;
  }

  @Override
  public long timestampMillis() {
    return timestampMillis;
  }

  @Override
  public List<ManifestFile> allManifests(FileIO io) {
    return Collections.emptyList();
  }

  @Override
  public List<ManifestFile> dataManifests(FileIO io) {
    return Collections.emptyList();
  }

  @Override
  public List<ManifestFile> deleteManifests(FileIO io) {
    return Collections.emptyList();
  }

  @Override
  public String operation() {
    return "append";
  }

  @Override
  public Map<String, String> summary() {
    return summary;
  }

  @Override
  public Iterable<DataFile> addedDataFiles(FileIO io) {
    return Collections.emptyList();
  }

  @Override
  public Iterable<DataFile> removedDataFiles(FileIO io) {
    return Collections.emptyList();
  }

  @Override
  public String manifestListLocation() {
    return manifestList;
  }

  @Override
  public Integer schemaId() {
    return schemaId;
  }

  @Override
  public Long firstRowId() {
    return firstRowId;
  }

  @Override
  public Long addedRows() {
    return addedRows;
  }
}
