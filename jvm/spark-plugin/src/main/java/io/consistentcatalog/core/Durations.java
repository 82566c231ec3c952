package io.consistentcatalog.core;

import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Durations given by people, the one grammar of the project: {@code 500ms}, {@code 90s}, {@code 30m}
 * ({@code 30min}), {@code 12h}, {@code 7d}, {@code 2w}; a bare number is milliseconds; a decimal fraction is
 * allowed ({@code 1.5s}); units in any case. A port of {@code consistent_catalog.util.durations.parse_duration}
 * (the conformance corpus holds the cases both answer).
 */
public final class Durations {
  private static final Pattern DURATION =
      Pattern.compile("\\s*(\\d+(?:\\.\\d+)?)\\s*(ms|s|m|min|h|d|w)?\\s*", Pattern.CASE_INSENSITIVE);

  private Durations() {}

  /** Milliseconds of {@code text}; an IllegalArgumentException naming the grammar when it is not a duration. */
  public static long parseMs(String text) {
    return parseMs(text, false);
  }

  /**
   * Milliseconds of {@code text}; with {@code unitRequired} a bare number is refused too (options where a bare
   * number is more likely a mistake than milliseconds, such as a streaming query's delays).
   */
  public static long parseMs(String text, boolean unitRequired) {
    Matcher m = DURATION.matcher(text == null ? "" : text);
    if (text == null || !m.matches() || (unitRequired && m.group(2) == null)) {
      throw new IllegalArgumentException("duration '" + text + "' is not understood; write a number with a unit: "
          + "500ms, 90s, 30m, 12h, 7d, 2w (a bare number is milliseconds)");
    }
    String unit = m.group(2) == null ? "ms" : m.group(2).toLowerCase(Locale.ROOT);
    long factor;
    switch (unit) {
      case "s":
        factor = 1_000L;
        break;
      case "m":
      case "min":
        factor = 60_000L;
        break;
      case "h":
        factor = 3_600_000L;
        break;
      case "d":
        factor = 86_400_000L;
        break;
      case "w":
        factor = 7 * 86_400_000L;
        break;
      default:
        factor = 1L;
    }
    return (long) (Double.parseDouble(m.group(1)) * factor);
  }
}
