package io.consistentcatalog.openlineage;

import java.util.Collection;
import java.util.Map;

/** Configuration values as openlineage-python reads them (Python's truthiness, numbers from YAML or JSON). */
final class ConfigValues {
  private ConfigValues() {}

  /** Python's {@code bool(value)}. */
  static boolean truthy(Object value) {
    if (value == null) {
      return false;
    }
    if (value instanceof Boolean) {
      return (Boolean) value;
    }
    if (value instanceof Number) {
      return ((Number) value).doubleValue() != 0;
    }
    if (value instanceof CharSequence) {
      return ((CharSequence) value).length() > 0;
    }
    if (value instanceof Map) {
      return !((Map<?, ?>) value).isEmpty();
    }
    if (value instanceof Collection) {
      return !((Collection<?>) value).isEmpty();
    }
    return true;
  }

  /** A number (YAML/JSON integer or float); anything else is refused, naming {@code what}. */
  static double number(Object value, String what) {
    if (value instanceof Number && !(value instanceof Boolean)) {
      return ((Number) value).doubleValue();
    }
    throw new IllegalArgumentException(what + " must be a number, not " + describe(value));
  }

  /** An integer; refused otherwise. */
  static int integer(Object value, String what) {
    double number = number(value, what);
    if (number != Math.rint(number)) {
      throw new IllegalArgumentException(what + " must be an integer, not " + value);
    }
    return (int) number;
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> map(Object value, String what) {
    if (value instanceof Map) {
      return (Map<String, Object>) value;
    }
    throw new IllegalArgumentException(what + " must be a mapping, not " + describe(value));
  }

  static String describe(Object value) {
    return value == null ? "null" : value.getClass().getSimpleName() + " " + value;
  }
}
