package io.consistentcatalog.core;

import java.io.IOException;
import java.math.BigInteger;
import java.util.regex.Pattern;
import org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonParser;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.DeserializationFeature;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The few Python built-ins whose exact behaviour the resolver depends on: {@code str.strip()},
 * {@code str.isdigit()} on ASCII, {@code int(str)}, {@code str(value)} of a JSON value and
 * {@code json.loads} (trailing data is an error, NaN/Infinity are accepted).
 */
final class Py {
  private Py() {}

  private static final ObjectMapper JSON =
      new ObjectMapper()
          .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
          .enable(JsonParser.Feature.ALLOW_NON_NUMERIC_NUMBERS);

  private static final Pattern PY_INT = Pattern.compile("[+-]?[0-9]+(?:_[0-9]+)*");
  private static final BigInteger LONG_MIN = BigInteger.valueOf(Long.MIN_VALUE);
  private static final BigInteger LONG_MAX = BigInteger.valueOf(Long.MAX_VALUE);

  /** Python's {@code str.isspace()} for one character (close enough outside exotic code points). */
  static boolean isSpace(char c) {
    return Character.isWhitespace(c) || c == '\u0085' || c == '\u00a0' || c == '\u2007' || c == '\u202f';
  }

  /** Python's {@code str.strip()}. */
  static String strip(String text) {
    int start = 0;
    int end = text.length();
    while (start < end && isSpace(text.charAt(start))) {
      start++;
    }
    while (end > start && isSpace(text.charAt(end - 1))) {
      end--;
    }
    return text.substring(start, end);
  }

  /** {@code text.isascii() and text.isdigit()}. */
  static boolean isAsciiDigits(String text) {
    if (text.isEmpty()) {
      return false;
    }
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c < '0' || c > '9') {
        return false;
      }
    }
    return true;
  }

  /** {@code int(text)} of an ASCII digit string; values beyond a Java long are reported as malformed. */
  static long parseDigits(String digits, String where) {
    try {
      return Long.parseLong(digits);
    } catch (NumberFormatException e) {
      throw ConsistentException.malformed(
          where + ": value " + digits + " is too large for a barrier or snapshot id (more than 2^63-1)");
    }
  }

  /** Python's {@code int(text)} (base 10): surrounding whitespace, a sign and digit-separating underscores allowed. */
  static Long pyInt(String text) {
    String stripped = strip(text);
    if (!PY_INT.matcher(stripped).matches()) {
      return null;
    }
    BigInteger value = new BigInteger(stripped.replace("_", "").replace("+", ""));
    if (value.compareTo(LONG_MIN) < 0 || value.compareTo(LONG_MAX) > 0) {
      return null;
    }
    return value.longValue();
  }

  /** {@code json.loads(text)}; null when the text is not valid JSON. */
  static JsonNode loads(String text) {
    try {
      JsonNode node = JSON.readTree(text);
      return node == null || node.isMissingNode() ? null : node;
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }

  /** {@code str(value)} of a parsed JSON value (what {@code parse_barrier_value} sees). */
  static String str(JsonNode value) {
    if (value == null || value.isNull()) {
      return "None";
    }
    if (value.isTextual()) {
      return value.textValue();
    }
    if (value.isBoolean()) {
      return value.booleanValue() ? "True" : "False";
    }
    if (value.isIntegralNumber()) {
      return value.bigIntegerValue().toString();
    }
    if (value.isNumber()) {
      return "float:" + value.asText(); // a Python float's str() is never a digit string
    }
    return value.toString(); // list / dict: never a digit string either
  }

  /** Python's {@code repr()} of a short string, for messages. */
  static String repr(String text) {
    String shown = text.length() > 80 ? text.substring(0, 80) : text;
    return "'" + shown.replace("\\", "\\\\").replace("'", "\\'") + "'";
  }

  /** {@code json.dumps(text)} (ASCII only, as Python writes it): the quoted JSON string. */
  public static String jsonString(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      switch (c) {
        case '"': out.append("\\\""); break;
        case '\\': out.append("\\\\"); break;
        case '\n': out.append("\\n"); break;
        case '\r': out.append("\\r"); break;
        case '\t': out.append("\\t"); break;
        case '\b': out.append("\\b"); break;
        case '\f': out.append("\\f"); break;
        default:
          if (c < 0x20 || c > 0x7e) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
      }
    }
    return out.append('"').toString();
  }
}
