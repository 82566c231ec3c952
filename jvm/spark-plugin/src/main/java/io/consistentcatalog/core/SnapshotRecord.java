package io.consistentcatalog.core;

import java.util.Collections;
import java.util.Map;

/** The parts of an Iceberg snapshot that barrier resolution needs ({@code barrier.SnapshotRecord}). */
public final class SnapshotRecord {
  public final long snapshotId;
  public final Long parentId;
  public final long timestampMs;
  public final String operation;
  public final Map<String, String> summary;
  /** Iceberg's {@code schema-id} of the snapshot (null: not recorded). */
  public final Integer schemaId;

  public SnapshotRecord(long snapshotId, Long parentId, long timestampMs, String operation, Map<String, String> summary) {
    this(snapshotId, parentId, timestampMs, operation, summary, null);
  }

  public SnapshotRecord(
      long snapshotId, Long parentId, long timestampMs, String operation, Map<String, String> summary, Integer schemaId) {
    this.snapshotId = snapshotId;
    this.schemaId = schemaId;
    this.parentId = parentId;
    this.timestampMs = timestampMs;
    this.operation = operation == null ? "append" : operation;
    this.summary = summary == null ? Collections.emptyMap() : summary;
  }

  /** The raw {@code consistent.barrier} written on the snapshot, if any (malformed values raise). */
  public Long barrier() {
    String value = summary.get(Keys.BARRIER);
    if (value == null) {
      return null;
    }
    if (Py.isAsciiDigits(value)) {
      return Py.parseDigits(value, "snapshot " + snapshotId + " summary");
    }
    return Barriers.parseBarrierValue(value, "snapshot " + snapshotId + " summary");
  }

  public String job() {
    return summary.get(Keys.JOB);
  }

  /** Whether the snapshot changes rows. Unknown (no counters written) counts as a change. */
  public boolean changesData() {
    return Barriers.changesData(operation, summary);
  }
}
