package io.consistentcatalog.core;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * What computed an epoch (protocol §6.10), pure: a definition's fingerprint {@code <kind>:<16 hex>} recorded as
 * {@code consistent.definition} on every snapshot the epoch stages ({@code consistent_catalog.definitions}).
 */
public final class Definitions {
  private Definitions() {}

  public static final String SQL = "sql";
  public static final String PLAN = "plan";
  public static final String VERSION = "version";

  /**
   * A SQL statement as its fingerprint hashes it: comments removed ({@code -- ...} to the end of the line,
   * {@code /* ... *}{@code /}), outside quotes (single, double, back) every run of white space made one space,
   * trimmed, a trailing {@code ;} dropped.
   */
  public static String normalizeSql(String text) {
    StringBuilder out = new StringBuilder(text.length());
    int n = text.length();
    int i = 0;
    boolean pending = false;
    while (i < n) {
      char c = text.charAt(i);
      if (c == '\'' || c == '"' || c == '`') { // a quoted literal or name, copied as it is
        int j = i + 1;
        while (j < n) {
          char d = text.charAt(j);
          if (d == '\\' && c != '`') {
            j += 2;
            continue;
          }
          if (d == c) {
            if (j + 1 < n && text.charAt(j + 1) == c) {
              j += 2;
              continue;
            }
            break;
          }
          j++;
        }
        if (pending && out.length() > 0) {
          out.append(' ');
        }
        pending = false;
        out.append(text, i, Math.min(j + 1, n));
        i = j + 1;
        continue;
      }
      if (c == '-' && text.startsWith("--", i)) {
        int end = text.indexOf('\n', i);
        i = end < 0 ? n : end;
        pending = true;
        continue;
      }
      if (c == '/' && text.startsWith("/*", i)) {
        int end = text.indexOf("*/", i + 2);
        i = end < 0 ? n : end + 2;
        pending = true;
        continue;
      }
      if (Py.isSpace(c)) {
        pending = true;
        i++;
        continue;
      }
      if (pending && out.length() > 0) {
        out.append(' ');
      }
      pending = false;
      out.append(c);
      i++;
    }
    String normalized = Py.strip(out.toString());
    while (normalized.endsWith(";")) {
      normalized = rstrip(normalized.substring(0, normalized.length() - 1));
    }
    return normalized;
  }

  private static String rstrip(String text) {
    int end = text.length();
    while (end > 0 && Py.isSpace(text.charAt(end - 1))) {
      end--;
    }
    return text.substring(0, end);
  }

  /** {@code <kind>:} and the first 16 lowercase hex digits of SHA-256 over {@code text}'s UTF-8 bytes. */
  public static String fingerprint(String kind, String text) {
    try {
      byte[] digest = MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8));
      StringBuilder out = new StringBuilder(kind).append(':');
      for (int i = 0; i < 8; i++) {
        out.append(Character.forDigit((digest[i] >> 4) & 0xf, 16)).append(Character.forDigit(digest[i] & 0xf, 16));
      }
      return out.toString();
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  /** The fingerprint of a SQL statement ({@link #normalizeSql}). */
  public static String sql(String statement) {
    return fingerprint(SQL, normalizeSql(statement));
  }

  /** Why a sink needs a new generation at the job's next epoch ({@code DefinitionChange}, §6.10). */
  public static final class Change {
    /** {@code rebuild}, {@code definition}, {@code schema} or {@code upstream}: the value of {@code consistent.regenerate}. */
    public final String reason;
    /** The last epoch's fingerprint, its schema id for {@code schema}, the source that switched for {@code upstream}. */
    public final String recorded;
    /** The job's fingerprint now, or the sink's current schema id for {@code schema}. */
    public final String current;

    /** {@code upstream}: {@code source}'s range since the sink's last epoch holds a new generation (§6.10 step 4). */
    public static Change upstream(String source) {
      return new Change("upstream", source, null);
    }

    public Change(String reason, String recorded, String current) {
      this.reason = reason;
      this.recorded = recorded;
      this.current = current;
    }

    /**
     * {@code definition changed (sql 3f2a... -> 9b1c...)}, {@code schema changed (schema 0 -> 1)}, {@code rebuild
     * requested}, {@code source demo.words switched generations}.
     */
    public String describe() {
      if (reason.equals("upstream")) {
        return "source " + recorded + " switched generations";
      }
      if (reason.equals("rebuild")) {
        return "rebuild requested";
      }
      if (reason.equals("schema")) {
        return "schema changed (schema " + recorded + " -> " + current + ")";
      }
      String[] then = split(recorded);
      String[] now = split(current);
      if (then[0].equals(now[0])) {
        return "definition changed (" + now[0] + " " + then[1] + " -> " + now[1] + ")";
      }
      return "definition changed (" + recorded + " -> " + current + ")";
    }

    /** The runner's line (§5.1): {@code <describe()>: new generation at barrier T}. */
    public String describe(long barrier) {
      return describe() + ": new generation at barrier " + Barriers.format(barrier);
    }

    private static String[] split(String fingerprint) {
      String text = fingerprint == null ? "" : fingerprint;
      int colon = text.indexOf(':');
      return colon < 0 ? new String[] {text, ""} : new String[] {text.substring(0, colon), text.substring(colon + 1)};
    }
  }

  /**
   * {@code last_epoch}: the sink's last epoch of {@code job} on main, the newest snapshot walking parents that carries
   * a barrier and was written by {@code job}; null when there is none (or the history is expired).
   */
  public static SnapshotRecord lastEpoch(TableState state, String job) {
    Long current = state.head();
    java.util.Set<Long> seen = new java.util.HashSet<>();
    while (current != null && seen.add(current)) {
      SnapshotRecord record = state.snapshots.get(current);
      if (record == null) {
        return null;
      }
      if (record.summary.get(Keys.BARRIER) != null && job.equals(record.job())) {
        return record;
      }
      current = record.parentId;
    }
    return null;
  }

  /**
   * {@code definition_change} (protocol §6.10's rule): whether {@code job}'s next epoch on {@code sink} must start a
   * new generation, and why (null: it need not).
   */
  public static Change change(TableState sink, String job, String definition, boolean rebuild) {
    SnapshotRecord record = lastEpoch(sink, job);
    if (record == null) {
      return null;
    }
    String recorded = record.summary.get(Keys.DEFINITION);
    if (rebuild) {
      return new Change("rebuild", recorded, definition);
    }
    if (definition != null && recorded != null && !recorded.equals(definition)) {
      return new Change("definition", recorded, definition);
    }
    if (record.schemaId != null && sink.currentSchemaId != null && !record.schemaId.equals(sink.currentSchemaId)) {
      return new Change("schema", record.schemaId.toString(), sink.currentSchemaId.toString());
    }
    return null;
  }
}
