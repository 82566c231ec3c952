package io.consistentcatalog.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.HistoryEntry;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.SnapshotRef;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;

/**
 * A table's consistent-catalog state as plain data, parsed from Iceberg metadata without I/O
 * ({@code consistent_catalog.state.TableState}). Lazily parsed properties raise MalformedMetadataError
 * when first used, and again on every later use, exactly as the Python cached properties do.
 */
public final class TableState {
  public final String identifier;
  public final Map<Long, SnapshotRecord> snapshots;
  /** Branch name -> head snapshot id (tags excluded). */
  public final Map<String, Long> branches;
  public final Map<String, String> properties;
  public final Map<String, Long> tags;
  /** The snapshot log: {time main moved, snapshot id}, oldest first. */
  public final List<long[]> mainLog;
  /** The table's current schema id (null: unknown). */
  public final Integer currentSchemaId;

  private List<String> sources;
  private boolean watermarkParsed;
  private Long watermarkProperty;
  private boolean floorParsed;
  private Barriers.Floor floor;
  private Map<Long, Long> overrides;
  private Long revision;
  private final Map<String, BranchBarriers> branchCache = new HashMap<>();

  public TableState(
      String identifier,
      Map<Long, SnapshotRecord> snapshots,
      Map<String, Long> branches,
      Map<String, String> properties,
      Map<String, Long> tags,
      List<long[]> mainLog) {
    this(identifier, snapshots, branches, properties, tags, mainLog, null);
  }

  public TableState(
      String identifier,
      Map<Long, SnapshotRecord> snapshots,
      Map<String, Long> branches,
      Map<String, String> properties,
      Map<String, Long> tags,
      List<long[]> mainLog,
      Integer currentSchemaId) {
    this.currentSchemaId = currentSchemaId;
    this.identifier = identifier;
    this.snapshots = snapshots;
    this.branches = branches;
    this.properties = properties == null ? Collections.emptyMap() : properties;
    this.tags = tags == null ? Collections.emptyMap() : tags;
    this.mainLog = mainLog == null ? Collections.emptyList() : mainLog;
  }

  /** {@code TableState.from_metadata}: snapshots, refs (branches and tags), properties and the snapshot log. */
  public static TableState fromMetadata(String identifier, TableMetadata metadata) {
    Map<Long, SnapshotRecord> snapshots = new LinkedHashMap<>();
    for (Snapshot s : metadata.snapshots()) {
      Map<String, String> summary = s.summary() == null ? Collections.emptyMap() : s.summary();
      snapshots.put(
          s.snapshotId(), new SnapshotRecord(s.snapshotId(), s.parentId(), s.timestampMillis(), s.operation(), summary,
              s.schemaId()));
    }
    Map<String, Long> branches = new LinkedHashMap<>();
    Map<String, Long> tags = new LinkedHashMap<>();
    for (Map.Entry<String, SnapshotRef> ref : metadata.refs().entrySet()) {
      (ref.getValue().isBranch() ? branches : tags).put(ref.getKey(), ref.getValue().snapshotId());
    }
    if (!branches.containsKey(Keys.MAIN_BRANCH) && metadata.currentSnapshot() != null) {
      branches.put(Keys.MAIN_BRANCH, metadata.currentSnapshot().snapshotId()); // as pyiceberg builds its refs
    }
    List<long[]> log = new ArrayList<>();
    for (HistoryEntry entry : metadata.snapshotLog()) {
      log.add(new long[] {entry.timestampMillis(), entry.snapshotId()});
    }
    return new TableState(identifier, snapshots, branches, new LinkedHashMap<>(metadata.properties()), tags, log,
        metadata.currentSchemaId());
  }

  // --- table properties ------------------------------------------------------------------------

  private Long intProperty(String key) {
    String value = properties.get(key);
    if (value == null) {
      return null;
    }
    return Barriers.parseBarrierValue(value, identifier + " table property " + key);
  }

  /** {@code consistent.sources}: the table's source tables (empty for a root). */
  public List<String> sources() {
    if (sources == null) {
      String value = properties.get(Keys.SOURCES);
      if (value == null || Py.strip(value).isEmpty()) {
        sources = Collections.emptyList();
      } else {
        JsonNode parsed = Py.loads(value);
        if (parsed == null) {
          throw ConsistentException.malformed(identifier,
              identifier + ": table property " + Keys.SOURCES + " is not valid JSON; re-register the table's job to rewrite it");
        }
        boolean ok = parsed.isArray();
        List<String> found = new ArrayList<>();
        if (ok) {
          for (JsonNode item : parsed) {
            if (!item.isTextual()) {
              ok = false;
              break;
            }
            found.add(item.textValue());
          }
        }
        if (!ok) {
          throw ConsistentException.malformed(identifier,
              identifier + ": table property " + Keys.SOURCES + " must be a JSON array of table names, got "
                  + Py.repr(value) + "; re-register the table's job to rewrite it");
        }
        sources = Collections.unmodifiableList(found);
      }
    }
    return sources;
  }

  public boolean isRoot() {
    return sources().isEmpty();
  }

  public String job() {
    String job = properties.get(Keys.JOB);
    return job == null || job.isEmpty() ? null : job;
  }

  /**
   * The job that owns the table (protocol §6.2): {@code consistent.job}, else, for a derived table unregistered by an
   * earlier version (which removed it), the {@code consistent.job} of main's head snapshot; null: nobody.
   */
  public String owner() {
    String job = job();
    if (job != null) {
      return job;
    }
    if (isRoot()) {
      return null;
    }
    String last = lastWriter();
    return last == null || last.isEmpty() ? null : last;
  }

  public Long watermarkProperty() {
    if (!watermarkParsed) {
      watermarkProperty = intProperty(Keys.WATERMARK);
      watermarkParsed = true;
    }
    return watermarkProperty;
  }

  /** (main head when the watermark was set, watermark): later snapshots must land above it. */
  Barriers.Floor floor() {
    if (!floorParsed) {
      String marker = properties.get(Keys.WATERMARK_SNAPSHOT);
      Long value = watermarkProperty();
      Barriers.Floor result;
      if (marker == null || value == null) {
        result = null;
      } else if (marker.equals(Keys.NO_SNAPSHOT)) {
        result = new Barriers.Floor(null, value);
      } else {
        Long id = Py.pyInt(marker);
        if (id == null) {
          throw ConsistentException.malformed(identifier,
              identifier + ": table property " + Keys.WATERMARK_SNAPSHOT + " is " + Py.repr(marker)
                  + ", not a snapshot id; advance the watermark again to rewrite it");
        }
        result = new Barriers.Floor(id, value);
      }
      floor = result;
      floorParsed = true;
    }
    return floor;
  }

  /** {@code consistent.barrier-overrides}: snapshot id -> barrier. */
  Map<Long, Long> barrierOverrides() {
    if (overrides == null) {
      String value = properties.get(Keys.BARRIER_OVERRIDES);
      if (value == null || value.isEmpty()) {
        overrides = Collections.emptyMap();
      } else {
        JsonNode parsed = Py.loads(value);
        String problem = identifier + ": table property " + Keys.BARRIER_OVERRIDES
            + " must be a JSON object of snapshot id -> barrier, got " + Py.repr(value)
            + "; remove it to fall back to the snapshots' own barriers";
        if (parsed == null || !parsed.isObject()) {
          throw ConsistentException.malformed(identifier, problem);
        }
        Map<Long, Long> found = new HashMap<>();
        Iterator<Map.Entry<String, JsonNode>> fields = parsed.fields();
        while (fields.hasNext()) {
          Map.Entry<String, JsonNode> field = fields.next();
          Long key = Py.pyInt(field.getKey());
          if (key == null) {
            throw ConsistentException.malformed(identifier, problem);
          }
          found.put(key, Barriers.parseBarrierValue(Py.str(field.getValue()), identifier + " " + Keys.BARRIER_OVERRIDES));
        }
        overrides = found;
      }
    }
    return overrides;
  }

  /** {@code consistent.revision} (0 when unset). */
  public long revision() {
    if (revision == null) {
      Long value = intProperty(Keys.REVISION);
      revision = value == null ? 0L : value;
    }
    return revision;
  }

  // --- branches --------------------------------------------------------------------------------

  public Long head(String branch) {
    return branches.get(branch);
  }

  public Long head() {
    return head(Keys.MAIN_BRANCH);
  }

  public BranchBarriers branch(String branch) {
    BranchBarriers cached = branchCache.get(branch);
    if (cached == null) {
      boolean root = isRoot();
      Barriers.Floor f = floor();
      Map<Long, Long> o = barrierOverrides();
      cached = Barriers.branchBarriers(identifier, branch, branches.get(branch), snapshots, root, f, o);
      branchCache.put(branch, cached);
    }
    return cached;
  }

  /** Whether {@code ancestorId} is {@code snapshotId} or one of its ancestors (null is everyone's ancestor). */
  public boolean isAncestor(Long ancestorId, Long snapshotId) {
    if (ancestorId == null) {
      return true;
    }
    Long current = snapshotId;
    while (current != null) {
      if (current.equals(ancestorId)) {
        return true;
      }
      SnapshotRecord record = snapshots.get(current);
      current = record == null ? null : record.parentId;
    }
    return false;
  }

  /** The epoch inputs ({@code consistent.sources} summary) that the content at {@code snapshotId} reflects. */
  public Map<String, Long> recordedInputs(Long snapshotId) {
    Long current = snapshotId;
    while (current != null) {
      SnapshotRecord record = snapshots.get(current);
      if (record == null) {
        return Collections.emptyMap();
      }
      String value = record.summary.get(Keys.SOURCES);
      if (value != null) {
        return parseSummarySources(value, identifier + " snapshot " + current);
      }
      if (record.changesData() && !"replace".equals(record.operation)) {
        return Collections.emptyMap();
      }
      current = record.parentId;
    }
    return Collections.emptyMap();
  }

  /** {@code parse_summary_sources}: a snapshot's {"ns.src": snapshot_id} object (values may be null). */
  static Map<String, Long> parseSummarySources(String value, String where) {
    JsonNode parsed = Py.loads(value);
    if (parsed == null) {
      throw ConsistentException.malformed(where + ": " + Keys.SOURCES + " is not valid JSON: " + Py.repr(value));
    }
    String problem = where + ": " + Keys.SOURCES + " must be a JSON object of table -> snapshot id, got " + Py.repr(value);
    if (!parsed.isObject()) {
      throw ConsistentException.malformed(problem);
    }
    Map<String, Long> found = new LinkedHashMap<>();
    Iterator<Map.Entry<String, JsonNode>> fields = parsed.fields();
    while (fields.hasNext()) {
      Map.Entry<String, JsonNode> field = fields.next();
      JsonNode v = field.getValue();
      if (v.isNull()) {
        found.put(field.getKey(), null);
      } else if (v.isIntegralNumber() && v.canConvertToLong()) {
        found.put(field.getKey(), v.longValue());
      } else {
        throw ConsistentException.malformed(problem);
      }
    }
    return found;
  }

  /** True when {@code consistent-staged} holds processed snapshots that {@code main} does not have yet. */
  public boolean stagedAhead() {
    Long staged = branches.get(Keys.STAGED_BRANCH);
    Long main = branches.get(Keys.MAIN_BRANCH);
    return staged != null && !staged.equals(main) && isAncestor(main, staged);
  }

  public String newestBranch() {
    return stagedAhead() ? Keys.STAGED_BRANCH : Keys.MAIN_BRANCH;
  }

  /**
   * {@code W(X)} on {@code branch}: max of its head barrier and the watermark property. After an
   * untracked write the table is complete only up to its newest tracked snapshot: the watermark
   * property counts only if it was set on top of that snapshot.
   */
  public Long watermark(String branch) {
    BranchBarriers history = branch(branch);
    if (history.untracked != null) {
      Barriers.Floor f = floor();
      if (f == null || !java.util.Objects.equals(f.snapshotId, history.trackedHead())) {
        return history.headBarrier();
      }
    }
    return Barriers.watermark(history.headBarrier(), watermarkProperty());
  }

  /** The oldest effective barrier of main's retained history (null: no barrier yet). */
  public Long firstBarrier() {
    if (head() == null) {
      return null;
    }
    BranchBarriers history = branch(Keys.MAIN_BRANCH);
    Long found = null;
    for (int i = 0; i < history.size(); i++) {
      Long b = history.barrierAt(i);
      if (b != null && (found == null || b < found)) {
        found = b;
      }
    }
    return found;
  }

  /** {@code consistent.job} of main's head snapshot: who wrote the table last. */
  public String lastWriter() {
    Long head = head();
    SnapshotRecord record = head == null ? null : snapshots.get(head);
    return record == null ? null : record.job();
  }

  /** Who made the untracked write on {@code branch}, from its snapshot summary (engine, app id), if known. */
  public String untrackedWriter(String branch) {
    Long untracked = branch(branch).untracked;
    if (untracked == null) {
      return null;
    }
    Map<String, String> summary = snapshots.get(untracked).summary;
    List<String> parts = new ArrayList<>();
    String engine = (nonEmpty(summary.get("engine-name")) + " " + nonEmpty(summary.get("engine-version"))).trim();
    if (!engine.isEmpty()) {
      parts.add(engine);
    }
    if (!nonEmpty(summary.get("spark.app.id")).isEmpty()) {
      parts.add("app " + summary.get("spark.app.id"));
    }
    if (!nonEmpty(summary.get("app-id")).isEmpty() && !parts.contains("app " + summary.get("app-id"))) {
      parts.add("app " + summary.get("app-id")); // Spark writes its app id under both keys: name it once
    }
    return parts.isEmpty() ? null : String.join(", ", parts);
  }

  private static String nonEmpty(String value) {
    return value == null ? "" : value;
  }

  public Long watermark() {
    return watermark(Keys.MAIN_BRANCH);
  }

  // --- what writers read (protocol §5, §6) ------------------------------------------------------

  /** {@code consistent.lease-holder}: the instance that holds the job's lease, or null. */
  public String leaseHolder() {
    String holder = properties.get(Keys.LEASE_HOLDER);
    return holder == null || holder.isEmpty() ? null : holder;
  }

  /** {@code consistent.lease-until} in ms, or null. */
  public Long leaseUntil() {
    return intProperty(Keys.LEASE_UNTIL);
  }

  /** The snapshot in {@code main}'s retained ancestry written by the ingest with idempotency {@code key}, if any. */
  public Long ingestedWithKey(String key) {
    Long current = head();
    while (current != null) {
      SnapshotRecord record = snapshots.get(current);
      if (record == null) {
        return null;
      }
      if (key.equals(record.summary.get(Keys.INGEST_KEY))) {
        return current;
      }
      current = record.parentId;
    }
    return null;
  }

  /**
   * {@code watermark_properties}: the table properties that set the watermark to {@code value} on main's
   * head, keeping as overrides the barriers the floor being replaced raised (protocol §3.6).
   */
  public Map<String, String> watermarkProperties(long value) {
    return watermarkProperties(value, head());
  }

  /** {@link #watermarkProperties(long)} on {@code head} instead of main's head (a generation switch: the staged head). */
  public Map<String, String> watermarkProperties(long value, Long head) {
    Map<String, String> out = new LinkedHashMap<>();
    out.put(Keys.WATERMARK, Long.toString(value));
    out.put(Keys.WATERMARK_SNAPSHOT, head == null ? Keys.NO_SNAPSHOT : Long.toString(head));
    Map<Long, Long> kept = new java.util.TreeMap<>();
    for (Map.Entry<Long, Long> e : barrierOverrides().entrySet()) {
      if (snapshots.containsKey(e.getKey())) {
        kept.put(e.getKey(), e.getValue());
      }
    }
    if (floor() != null) {
      BranchBarriers withFloor = branch(Keys.MAIN_BRANCH);
      BranchBarriers without = Barriers.branchBarriers(identifier, Keys.MAIN_BRANCH, head, snapshots, isRoot(), null, kept);
      int n = Math.min(withFloor.size(), without.size());
      for (int i = 0; i < n; i++) {
        Long k = withFloor.barrierAt(i);
        Long plain = without.barrierAt(i);
        if (k != null && !k.equals(plain)) {
          kept.put(withFloor.snapshotId(i), k);
        }
      }
    }
    if (!kept.isEmpty() || properties.containsKey(Keys.BARRIER_OVERRIDES)) {
      StringBuilder json = new StringBuilder("{");
      for (Map.Entry<Long, Long> e : kept.entrySet()) {
        if (json.length() > 1) {
          json.append(',');
        }
        json.append('"').append(e.getKey()).append("\":").append(e.getValue());
      }
      out.put(Keys.BARRIER_OVERRIDES, json.append('}').toString());
    }
    return out;
  }

  // --- generations (protocol §6.10, §4.8) -------------------------------------------------------

  private boolean previousParsed;
  private Map<String, Long> previousRecord;
  private TableState previousView;

  /**
   * {@code consistent.previous} parsed: {@code snapshot}, {@code watermark}, {@code watermark-snapshot} (values may be
   * null); null when absent. MalformedMetadataError when it is not such an object.
   */
  public Map<String, Long> previousRecord() {
    if (!previousParsed) {
      String value = properties.get(Keys.PREVIOUS);
      Map<String, Long> record = null;
      if (value != null) {
        JsonNode parsed = Py.loads(value);
        boolean ok = parsed != null && parsed.isObject();
        record = new LinkedHashMap<>();
        for (String key : new String[] {"snapshot", "watermark", "watermark-snapshot"}) {
          JsonNode v = ok ? parsed.get(key) : null;
          if (v == null || v.isNull()) {
            record.put(key, null);
          } else if (v.isIntegralNumber() && v.canConvertToLong()) {
            record.put(key, v.longValue());
          } else {
            ok = false;
          }
        }
        if (!ok) {
          throw ConsistentException.malformed(identifier, identifier + ": table property " + Keys.PREVIOUS
              + " must be a JSON object of snapshot, watermark and watermark-snapshot, got "
              + Py.repr(value.length() > 80 ? value.substring(0, 80) : value)
              + "; abandon the previous generation (abandon_generation) or remove the property");
        }
      }
      previousRecord = record;
      previousParsed = true;
    }
    return previousRecord;
  }

  /**
   * The table as it was before its generation switch (§4.8, {@code TableState.previous_view}): main at
   * {@code consistent-previous}'s head, the watermark properties recorded in {@code consistent.previous}, no staged
   * branch. Null without a previous generation.
   */
  public TableState previousView() {
    Long head = branches.get(Keys.PREVIOUS_BRANCH);
    if (head == null) {
      return null;
    }
    if (previousView == null) {
      Map<String, Long> record = previousRecord();
      Map<String, String> props = new LinkedHashMap<>(properties);
      props.remove(Keys.WATERMARK);
      props.remove(Keys.WATERMARK_SNAPSHOT);
      props.remove(Keys.PREVIOUS);
      if (record != null && record.get("watermark") != null) {
        props.put(Keys.WATERMARK, Long.toString(record.get("watermark")));
      }
      if (record != null && record.get("watermark-snapshot") != null) {
        props.put(Keys.WATERMARK_SNAPSHOT, Long.toString(record.get("watermark-snapshot")));
      }
      Map<String, Long> refs = new LinkedHashMap<>();
      for (Map.Entry<String, Long> e : branches.entrySet()) {
        String name = e.getKey();
        if (!name.equals(Keys.MAIN_BRANCH) && !name.equals(Keys.STAGED_BRANCH) && !name.equals(Keys.PREVIOUS_BRANCH)) {
          refs.put(name, e.getValue());
        }
      }
      refs.put(Keys.MAIN_BRANCH, head);
      previousView = new TableState(identifier, snapshots, refs, props, tags, mainLog, currentSchemaId);
    }
    return previousView;
  }

  /**
   * {@code previous_properties}: {@code consistent.previous} for a switch of this table (§6.10 step 3): main's head now
   * and the watermark properties it has, compact JSON with sorted keys.
   */
  public Map<String, String> previousProperties() {
    String marker = properties.get(Keys.WATERMARK_SNAPSHOT);
    Long mark = watermarkProperty();
    Long head = head();
    Long markerId = null;
    if (marker != null) {
      markerId = Py.pyInt(marker);
      if (markerId == null) {
        throw ConsistentException.malformed(identifier, identifier + ": table property " + Keys.WATERMARK_SNAPSHOT + " is "
            + Py.repr(marker) + ", not a snapshot id; advance the watermark again to rewrite it");
      }
    }
    String json = "{\"snapshot\":" + (head == null ? "null" : head.toString()) + ",\"watermark\":"
        + (mark == null ? "null" : mark.toString()) + ",\"watermark-snapshot\":"
        + (markerId == null ? "null" : markerId.toString()) + "}";
    Map<String, String> out = new LinkedHashMap<>();
    out.put(Keys.PREVIOUS, json);
    return out;
  }

  /** The first data-changing snapshot on main without a barrier were this table derived ({@code check_can_own}'s test). */
  public Long untrackedAsDerived() {
    return Barriers.branchBarriers(identifier, Keys.MAIN_BRANCH, head(), snapshots, false, null, Collections.emptyMap()).untracked;
  }

  /** How far ahead of now a barrier written to this table may lie ({@code consistent.clock-skew-ms}, else the default). */
  public long clockSkewMs() {
    Long value = intProperty("consistent.clock-skew-ms");
    return value == null ? Keys.DEFAULT_CLOCK_SKEW_MS : value;
  }

  /** {@code consistent.idle-after-ms} of a root declared an idle source (§5.6), or null. */
  public Long idleAfterMs() {
    return intProperty("consistent.idle-after-ms");
  }
}
