package io.consistentcatalog.core;

import java.time.DateTimeException;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Effective barriers of snapshots and watermarks of tables: a port of {@code consistent_catalog.barrier}.
 *
 * <p>Every rule, and the order in which errors surface, follows the Python module line by line; the
 * conformance corpus ({@code tests/conformance}) runs both over the same metadata.
 */
public final class Barriers {
  private Barriers() {}

  /** Summary counters that show a snapshot changed table content ({@code _CHANGE_COUNTERS}). */
  private static final String[] CHANGE_COUNTERS = {
    "added-data-files",
    "deleted-data-files",
    "added-delete-files",
    "removed-delete-files",
    "added-records",
    "deleted-records",
    "added-position-deletes",
    "removed-position-deletes",
    "added-equality-deletes",
    "removed-equality-deletes",
  };

  static boolean changesData(String operation, Map<String, String> summary) {
    if ("replace".equals(operation)) {
      return false;
    }
    if (!summary.containsKey("total-records")) {
      return true;
    }
    for (String key : CHANGE_COUNTERS) {
      String value = summary.get(key);
      if (value != null && !value.equals("0") && !value.isEmpty()) {
        return true;
      }
    }
    return false;
  }

  /** {@code parse_barrier_value}: a barrier stored in metadata; malformed values raise MalformedMetadataError. */
  public static long parseBarrierValue(String value, String where) {
    String text = Py.strip(value);
    if (!Py.isAsciiDigits(text)) {
      throw ConsistentException.malformed(
          where + ": " + Keys.BARRIER + "-style value " + Py.repr(value)
              + " is not a non-negative integer of milliseconds; fix or remove the property "
              + "(it must be written by consistent-catalog)");
    }
    return Py.parseDigits(text, where);
  }

  // --- barriers given by callers (as-of) ---------------------------------------------------------

  /**
   * The plausible range of a barrier a person writes (protocol §3.8, {@code PLAUSIBLE_MIN_MS}/{@code _MAX_MS}):
   * 1973-03-03T09:46:40Z up to 2200-01-01T00:00:00Z; 0, the start of time, too.
   */
  public static final long PLAUSIBLE_MIN_MS = 100_000_000_000L;

  public static final long PLAUSIBLE_MAX_MS = 7_258_118_400_000L;

  private static final Pattern RELATIVE = Pattern.compile("now\\s*([+-])\\s*(.+)", Pattern.CASE_INSENSITIVE);
  private static final Pattern BEFORE_NOW =
      Pattern.compile("-\\s*(\\d+(?:\\.\\d+)?\\s*(?:ms|s|m|min|h|d|w))", Pattern.CASE_INSENSITIVE);
  private static final String FORMS = "milliseconds since the epoch, an ISO-8601 time, now, now-5m or -5m "
      + "(e.g. 1700000000000 or 2023-11-14T22:13:20Z)";
  private static final String NOT_UNDERSTOOD = "is neither milliseconds since the epoch nor an ISO-8601 time, now, "
      + "now-5m or -5m (e.g. 1700000000000 or 2023-11-14T22:13:20Z)";

  /** {@code fmt_ms}: {@code 2026-11-22 22:44:27.123Z}. */
  static String readable(long ms) {
    if (ms <= -62_135_596_800_000L || ms >= 253_402_300_800_000L) {
      return "beyond year 9999";
    }
    java.time.format.DateTimeFormatter f =
        java.time.format.DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss.SSS").withZone(ZoneOffset.UTC);
    return f.format(java.time.Instant.ofEpochMilli(ms)) + "Z";
  }

  private static boolean plausible(long ms) {
    return PLAUSIBLE_MIN_MS <= ms && ms < PLAUSIBLE_MAX_MS;
  }

  /** {@code implausible}: why {@code ms} is no plausible barrier (with its value in ms if it was seconds...), or null. */
  public static String implausible(long ms) {
    if (ms == 0 || plausible(ms)) {
      return null;
    }
    String where = ms + " ms is " + readable(ms) + ", outside the plausible barriers (1973-03-03 to 2200-01-01)";
    String[] units = {"seconds", "microseconds", "nanoseconds"};
    boolean fits = Math.abs(ms) < Long.MAX_VALUE / 1000;
    long[] values = {fits ? ms * 1000 : -1, Math.floorDiv(ms, 1000L), Math.floorDiv(ms, 1_000_000L)};
    for (int i = 0; i < units.length; i++) {
      if (plausible(values[i])) {
        return where + ": barriers are milliseconds \u2014 in " + units[i] + " " + ms + " would be " + values[i] + " ("
            + readable(values[i]) + ")";
      }
    }
    return where + "; give " + FORMS;
  }

  /**
   * {@code parse_barrier}: the barrier grammar of protocol §3.8, what every barrier a person writes goes through
   * (the settings, read options and procedures): ms, ISO-8601 (without a zone: UTC), {@code now}, {@code now-5m} /
   * {@code now+30s}, {@code -5m}; an implausible magnitude is refused with its value in milliseconds.
   */
  public static long parse(String value, long now) {
    String raw = value;
    String text = Py.strip(value);
    long ms;
    Matcher relative = RELATIVE.matcher(text);
    Matcher beforeNow = BEFORE_NOW.matcher(text);
    if (Py.isAsciiDigits(text)) {
      try {
        ms = Long.parseLong(text);
      } catch (NumberFormatException e) {
        throw invalidBarrier("barrier " + Py.repr(raw) + ": " + text + " ms is beyond year 9999, outside the plausible "
            + "barriers (1973-03-03 to 2200-01-01); give " + FORMS);
      }
    } else if (text.equalsIgnoreCase("now")) {
      ms = now;
    } else if (relative.matches() || beforeNow.matches()) {
      boolean before = beforeNow.matches() || relative.group(1).equals("-");
      long offset;
      try {
        offset = Durations.parseMs(beforeNow.matches() ? beforeNow.group(1) : relative.group(2));
      } catch (IllegalArgumentException e) {
        throw invalidBarrier("barrier " + Py.repr(raw) + ": " + e.getMessage());
      }
      ms = before ? now - offset : now + offset;
    } else {
      Long parsed = parseIsoMillis(text.replace("Z", "+00:00"));
      if (parsed == null) {
        throw invalidBarrier("barrier " + Py.repr(raw) + " " + NOT_UNDERSTOOD);
      }
      ms = parsed;
    }
    String why = implausible(ms);
    if (why != null) {
      throw invalidBarrier("barrier " + Py.repr(raw) + ": " + why);
    }
    return ms;
  }

  /**
   * {@code to_barrier}: a String through the grammar ({@link #parse}, now the wall clock), or a non-negative Long or
   * Integer of ms taken as given (a value a program computed); anything else is refused the way Python refuses a
   * float or a boolean.
   */
  public static long toBarrier(Object value) {
    if (value instanceof Boolean) {
      throw invalidBarrier("barrier " + (((Boolean) value) ? "True" : "False")
          + " is a boolean; give milliseconds since the epoch or a datetime");
    }
    if (value instanceof Long || value instanceof Integer || value instanceof Short || value instanceof Byte) {
      long ms = ((Number) value).longValue();
      if (ms < 0) {
        throw invalidBarrier("barrier " + ms + " is negative; give milliseconds since 1970-01-01 UTC");
      }
      return ms;
    }
    if (value instanceof String) {
      return parse((String) value, System.currentTimeMillis());
    }
    String type = value == null ? "NoneType" : (value instanceof Number ? "float" : value.getClass().getSimpleName());
    throw invalidBarrier("barrier " + value + " has type " + type + "; give an int or a datetime");
  }

  private static ConsistentException invalidBarrier(String message) {
    return new ConsistentException(ErrorKind.INVALID_BARRIER, message);
  }

  // Python 3.11 datetime.fromisoformat, the common forms: a date (YYYY-MM-DD or YYYYMMDD), then
  // optionally any one separator character and a time hh[:mm[:ss[.f...]]] (or basic hhmmss[.f...]),
  // then an optional offset +hh[:mm[:ss[.ffffff]]]. Week and ordinal dates are not accepted.
  private static final Pattern ISO_DATE = Pattern.compile("(\\d{4})-(\\d{2})-(\\d{2})|(\\d{4})(\\d{2})(\\d{2})");
  private static final Pattern ISO_TIME =
      Pattern.compile(
          "(?:(\\d{2})(?::(\\d{2})(?::(\\d{2})(?:[.,](\\d+))?)?)?"
              + "|(\\d{2})(?:(\\d{2})(?:(\\d{2})(?:[.,](\\d+))?)?)?)"
              + "([+-]\\d{2}(?::?\\d{2}(?::?\\d{2}(?:\\.\\d{1,6})?)?)?)?");

  /** Milliseconds (floor) of an ISO-8601 time, or null when Python would not parse it. */
  static Long parseIsoMillis(String text) {
    if (text.length() < 8) {
      return null;
    }
    int dateLength = text.length() >= 10 && text.charAt(4) == '-' ? 10 : 8;
    if (text.length() < dateLength) {
      return null;
    }
    Matcher date = ISO_DATE.matcher(text.substring(0, dateLength));
    if (!date.matches()) {
      return null;
    }
    int d = date.group(1) != null ? 1 : 4;
    try {
      int year = Integer.parseInt(date.group(d));
      int month = Integer.parseInt(date.group(d + 1));
      int day = Integer.parseInt(date.group(d + 2));
      int hour = 0;
      int minute = 0;
      int second = 0;
      int micros = 0;
      long offsetMicros = 0;
      if (text.length() > dateLength) {
        if (text.length() == dateLength + 1) {
          return null; // a separator without a time
        }
        Matcher time = ISO_TIME.matcher(text.substring(dateLength + 1));
        if (!time.matches()) {
          return null;
        }
        int t = time.group(1) != null ? 1 : 5;
        hour = Integer.parseInt(time.group(t));
        minute = time.group(t + 1) == null ? 0 : Integer.parseInt(time.group(t + 1));
        second = time.group(t + 2) == null ? 0 : Integer.parseInt(time.group(t + 2));
        String fraction = time.group(t + 3);
        if (fraction != null) {
          micros = Integer.parseInt((fraction + "000000").substring(0, 6));
        }
        String offset = time.group(9);
        if (offset != null) {
          offsetMicros = offsetMicros(offset);
          if (offsetMicros == Long.MIN_VALUE) {
            return null;
          }
        }
      }
      LocalDateTime local =
          LocalDateTime.of(LocalDate.of(year, month, day), java.time.LocalTime.of(hour, minute, second, micros * 1000));
      long epochSeconds = local.toEpochSecond(ZoneOffset.UTC);
      long totalMicros = epochSeconds * 1_000_000L + micros - offsetMicros;
      return Math.floorDiv(totalMicros, 1000L);
    } catch (DateTimeException | NumberFormatException e) {
      return null;
    }
  }

  private static long offsetMicros(String offset) {
    int sign = offset.charAt(0) == '-' ? -1 : 1;
    String digits = offset.substring(1).replace(":", "");
    String fraction = null;
    int dot = digits.indexOf('.');
    if (dot >= 0) {
      fraction = digits.substring(dot + 1);
      digits = digits.substring(0, dot);
    }
    if (digits.length() != 2 && digits.length() != 4 && digits.length() != 6) {
      return Long.MIN_VALUE;
    }
    int hours = Integer.parseInt(digits.substring(0, 2));
    int minutes = digits.length() >= 4 ? Integer.parseInt(digits.substring(2, 4)) : 0;
    int seconds = digits.length() >= 6 ? Integer.parseInt(digits.substring(4, 6)) : 0;
    if (hours > 23 || minutes > 59 || seconds > 59) {
      return Long.MIN_VALUE;
    }
    long micros = ((hours * 60L + minutes) * 60L + seconds) * 1_000_000L;
    if (fraction != null) {
      micros += Integer.parseInt((fraction + "000000").substring(0, 6));
    }
    return sign * micros;
  }

  // --- branches ----------------------------------------------------------------------------------

  /** A watermark floor: (main head when the watermark was set, or null for an empty table; watermark). */
  public static final class Floor {
    final Long snapshotId;
    final long watermark;

    Floor(Long snapshotId, long watermark) {
      this.snapshotId = snapshotId;
      this.watermark = watermark;
    }
  }

  /** {@code ancestry}: head back to the oldest retained ancestor, oldest first; and whether history was cut short. */
  static List<SnapshotRecord> ancestry(Long headId, Map<Long, SnapshotRecord> snapshots, boolean[] truncated) {
    List<SnapshotRecord> chain = new ArrayList<>();
    Long current = headId;
    int limit = snapshots.size();
    truncated[0] = false;
    while (current != null) {
      SnapshotRecord record = snapshots.get(current);
      if (record == null) {
        if (chain.isEmpty()) {
          throw ConsistentException.malformed(
              "branch head snapshot " + current + " is missing from the table metadata");
        }
        Collections.reverse(chain);
        truncated[0] = true;
        return chain;
      }
      if (chain.size() == limit) { // longer than the table's snapshots: the parents loop
        throw ConsistentException.malformed("snapshot " + current + " is its own ancestor: the metadata is corrupt");
      }
      chain.add(record);
      current = record.parentId;
    }
    Collections.reverse(chain);
    return chain;
  }

  /**
   * {@code branch_barriers}: the effective barriers of docs/protocol.md §3.2 over the ancestry of
   * {@code headId}. Replace keeps the parent's barrier, late snapshots get b(p)+1, on a root a raw
   * barrier equal to the parent's is late too; the floor lifts every snapshot after the watermark's
   * marker above it and overrides stand in for raw barriers (§3.6, §3.1); a data-changing snapshot of
   * a derived table without a barrier makes it untracked (§3.3).
   */
  static BranchBarriers branchBarriers(
      String table,
      String branch,
      Long headId,
      Map<Long, SnapshotRecord> snapshots,
      boolean isRoot,
      Floor floor,
      Map<Long, Long> overrides) {
    boolean[] truncated = new boolean[1];
    List<SnapshotRecord> chain = ancestry(headId, snapshots, truncated);
    final long none = BranchBarriers.NONE;
    int n = chain.size();
    long[] ids = new long[n];
    long[] barriers = new long[n];
    int[] counts = new int[n];
    int changes = 0;
    long previous = none;
    Long untracked = null;
    long lower = floor != null && floor.snapshotId == null ? floor.watermark : none;
    boolean noOverrides = overrides.isEmpty();
    for (int i = 0; i < n; i++) {
      SnapshotRecord record = chain.get(i);
      long snapshotId = record.snapshotId;
      ids[i] = snapshotId;
      boolean changed = changesData(record.operation, record.summary);
      if (changed) {
        changes++;
      }
      counts[i] = changes;
      if (untracked != null) {
        barriers[i] = none;
        continue;
      }
      long raw = none;
      if (!noOverrides) {
        Long override = overrides.get(snapshotId);
        if (override != null) {
          raw = override;
        }
      }
      if (raw == none) {
        String text = record.summary.get(Keys.BARRIER);
        if (text != null) {
          raw = Py.isAsciiDigits(text) ? Py.parseDigits(text, "snapshot " + snapshotId + " summary") : record.barrier();
        }
      }
      long effective;
      if (previous != none && "replace".equals(record.operation)) {
        effective = previous;
      } else if (raw == none && !isRoot) {
        if (changed) {
          untracked = snapshotId;
          barriers[i] = none;
          continue;
        }
        effective = previous; // an untagged empty commit changes nothing
      } else {
        long value = raw == none ? record.timestampMs : raw;
        if (previous == none || value > previous || (value == previous && !isRoot)) {
          effective = value;
        } else {
          effective = previous + 1;
        }
        if (lower != none && effective <= lower) {
          effective = lower + 1;
        }
      }
      barriers[i] = effective;
      previous = effective;
      if (floor != null && floor.snapshotId != null && floor.snapshotId == snapshotId) {
        lower = floor.watermark;
      }
    }
    return new BranchBarriers(table, branch, ids, barriers, truncated[0], untracked, counts);
  }

  /** {@code W(X) = max(b(head), consistent.watermark)}; null when the table is empty and has no watermark. */
  static Long watermark(Long headBarrier, Long watermarkProperty) {
    if (headBarrier == null) {
      return watermarkProperty;
    }
    if (watermarkProperty == null) {
      return headBarrier;
    }
    return Math.max(headBarrier, watermarkProperty);
  }

  /** {@code fmt_barrier}: the raw milliseconds and the UTC time, {@code 1767225600000 (2026-01-01 00:00:00.000Z)}; "-" for null. */
  public static String format(Long ms) {
    if (ms == null) {
      return "-";
    }
    java.time.format.DateTimeFormatter f =
        java.time.format.DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss.SSS").withZone(java.time.ZoneOffset.UTC);
    return ms + " (" + f.format(java.time.Instant.ofEpochMilli(ms)) + "Z)";
  }
}
