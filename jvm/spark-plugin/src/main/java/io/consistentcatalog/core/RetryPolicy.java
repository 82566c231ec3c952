package io.consistentcatalog.core;

import java.util.concurrent.ThreadLocalRandom;

/**
 * How often a call is tried again and how long to wait in between: the one retry policy of the plugin, a port
 * of Python's {@code consistent_catalog.faults.RetryPolicy} (protocol §6.8).
 *
 * <p>Waits grow exponentially from {@code baseDelayMs} to {@code maxDelayMs} with full jitter (so that writers
 * refused by each other do not retry in lock step). At most {@code attemptsMax} attempts, and none starts after
 * {@code deadlineMs} from the first (negative: no deadline); a wait that would cross the deadline is cut short
 * to end on it, and that last attempt is made. Two uses: waiting out catalog faults ({@link #forFaults}, until
 * the catalog option {@code consistent.retry-deadline}) and re-planning a commit another writer's commit
 * refused ({@link #replans}, a few quick attempts).
 */
public final class RetryPolicy {
  public static final String DEADLINE_OPTION = "consistent.retry-deadline";
  public static final long DEFAULT_DEADLINE_MS = 120_000L;

  private final int attemptsMax;
  private final long baseDelayMs;
  private final long maxDelayMs;
  private final long deadlineMs;

  public RetryPolicy(int attemptsMax, long baseDelayMs, long maxDelayMs, long deadlineMs) {
    if (attemptsMax < 1) {
      throw new IllegalArgumentException("retries must be at least 1, got " + attemptsMax);
    }
    this.attemptsMax = attemptsMax;
    this.baseDelayMs = baseDelayMs;
    this.maxDelayMs = maxDelayMs;
    this.deadlineMs = deadlineMs;
  }

  /** Faults: 50 ms doubling to 2 s, until {@code deadlineMs} (0: one attempt, no retry). */
  public static RetryPolicy forFaults(long deadlineMs) {
    if (deadlineMs == 0) {
      return new RetryPolicy(1, 0L, 0L, 0L);
    }
    return new RetryPolicy(1_000_000, 50L, 2_000L, deadlineMs);
  }

  /** Re-planning after refusals: {@code attempts} attempts, 20 ms doubling to 1 s, no deadline. */
  public static RetryPolicy replans(int attempts) {
    return new RetryPolicy(attempts, 20L, 1_000L, -1L);
  }

  /** The catalog option {@code consistent.retry-deadline} of {@code catalog} ({@link Durations}; null: 2m). */
  public static long deadlineOption(String catalog, String text) {
    if (text == null || text.trim().isEmpty()) {
      return DEFAULT_DEADLINE_MS;
    }
    try {
      return Durations.parseMs(text);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("spark.sql.catalog." + catalog + "." + DEADLINE_OPTION + ": " + e.getMessage()
          + " (0: no retry)");
    }
  }

  public long deadlineMs() {
    return deadlineMs;
  }

  public int attemptsMax() {
    return attemptsMax;
  }

  /** Milliseconds to wait before {@code attempt} (2, 3, ...): uniform in [0, min(max, base * 2^(attempt-2))]. */
  public long delayMs(int attempt) {
    long cap = Math.min(maxDelayMs, baseDelayMs << Math.min(Math.max(attempt - 2, 0), 30));
    return cap <= 0 ? 0L : ThreadLocalRandom.current().nextLong(cap + 1);
  }

  /** A run of attempts under this policy, its clock started now. */
  public Attempts start() {
    return new Attempts();
  }

  /** {@code while (attempts.next()) { try ... }}: attempt 1 at once, each later one after its wait. */
  public final class Attempts {
    private final long end = deadlineMs < 0 ? Long.MAX_VALUE : System.nanoTime() + deadlineMs * 1_000_000L;
    private int attempt;

    private Attempts() {}

    /**
     * Whether another attempt is to be made; sleeps before every attempt after the first. False once the
     * attempts are used up, the deadline has passed, or the thread was interrupted (its flag set again).
     */
    public boolean next() {
      if (attempt >= attemptsMax) {
        return false;
      }
      if (attempt > 0) {
        long wait = delayMs(attempt + 1);
        if (deadlineMs >= 0) {
          long left = (end - System.nanoTime()) / 1_000_000L;
          if (left <= 0) {
            return false;
          }
          wait = Math.min(wait, left);
        }
        if (wait > 0) {
          try {
            Thread.sleep(wait);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
          }
        }
      }
      attempt++;
      return true;
    }

    /** The attempt being made (1, 2, ...). */
    public int number() {
      return attempt;
    }
  }
}
