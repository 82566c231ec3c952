package io.consistentcatalog.rest;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.Arrays;
import java.util.Iterator;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;

/**
 * The REST spec's {@code Idempotency-Key} on mutations (iceberg#14196), for a server started with {@code
 * --idempotency-key-lifetime}: {@code GET /v1/config} advertises the lifetime, and a mutation repeating a key
 * within it is not applied again. A repeat of a finished request answers with the first answer (status, body
 * and ETag); a repeat of one still in progress waits for it; a repeat whose method, path or body differ is
 * refused with 422 (the IETF draft's status). A 5xx answer is not kept: the key may be sent again and is then
 * handled as new (a server failing at a request has not settled it). Keys live in memory for the lifetime
 * counted from their first request (a restart forgets them: clients then read back, protocol §6.8).
 *
 * <p>Iceberg 1.11's {@code CatalogHandlers.withIdempotency} does the same for its REST fixture (by key alone,
 * 30 minutes, errors kept too); this server runs Iceberg 1.10.2, which has none, so it is done here.
 */
final class IdempotencyKeys {
  static final String HEADER = "Idempotency-Key";

  /** One key's request (its digest) and answer (done once the first request was answered). */
  private static final class Entry {
    final byte[] digest;
    final long expiresAtNanos;
    final CompletableFuture<Object> answer = new CompletableFuture<>();

    Entry(byte[] digest, long expiresAtNanos) {
      this.digest = digest;
      this.expiresAtNanos = expiresAtNanos;
    }
  }

  /** What a keyed request gets: run it ({@link #first}), or an answer already decided ({@link #replayed}). */
  static final class Claim {
    private final IdempotencyKeys keys;
    private final String key;
    private final Entry entry;
    private final boolean first;
    private final boolean mismatched;

    private Claim(IdempotencyKeys keys, String key, Entry entry, boolean first, boolean mismatched) {
      this.keys = keys;
      this.key = key;
      this.entry = entry;
      this.first = first;
      this.mismatched = mismatched;
    }

    /** Whether this request is the key's first (to be applied), not a repeat. */
    boolean first() {
      return first;
    }

    /** A repeat with another method, path or body than the key's first request. */
    boolean mismatched() {
      return mismatched;
    }

    /** The first request's answer (waits for it while in progress). */
    Object replayed() {
      try {
        return entry.answer.get();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted waiting for the first request of key " + key, e);
      } catch (ExecutionException e) {
        throw new IllegalStateException("the first request of key " + key + " failed", e.getCause());
      }
    }

    /** The first request's answer, to replay; {@code keep} false (a 5xx): forget the key instead. */
    void answered(Object answer, boolean keep) {
      if (!keep) {
        keys.entries.remove(key, entry);
      }
      entry.answer.complete(answer);
    }
  }

  private final Duration lifetime;
  private final Map<String, Entry> entries = new ConcurrentHashMap<>();

  IdempotencyKeys(Duration lifetime) {
    this.lifetime = lifetime;
  }

  /** The lifetime, as {@code GET /v1/config} advertises it (ISO-8601). */
  String lifetime() {
    return lifetime.toString();
  }

  /** Parses {@code --idempotency-key-lifetime}: an ISO-8601 duration, positive. */
  static IdempotencyKeys parse(String iso) {
    Duration lifetime;
    try {
      lifetime = Duration.parse(iso);
    } catch (RuntimeException e) {
      throw new IllegalArgumentException(
          "--idempotency-key-lifetime wants an ISO-8601 duration such as PT30M, got " + iso);
    }
    if (lifetime.isZero() || lifetime.isNegative()) {
      throw new IllegalArgumentException("--idempotency-key-lifetime must be positive, got " + iso);
    }
    return new IdempotencyKeys(lifetime);
  }

  /** Claims {@code key} for a request ({@code method} {@code path} with {@code body}). */
  Claim claim(String key, String method, String path, byte[] body) {
    long now = System.nanoTime();
    purgeExpired(now);
    byte[] digest = digest(method, path, body);
    Entry fresh = new Entry(digest, now + lifetime.toNanos());
    Entry[] found = new Entry[1];
    entries.compute(
        key,
        (k, existing) -> {
          if (existing == null || existing.expiresAtNanos - now <= 0) {
            return fresh;
          }
          found[0] = existing;
          return existing;
        });
    if (found[0] == null) {
      return new Claim(this, key, fresh, true, false);
    }
    return new Claim(this, key, found[0], false, !Arrays.equals(found[0].digest, digest));
  }

  private void purgeExpired(long now) {
    if (entries.size() < 256) {
      return;
    }
    for (Iterator<Entry> it = entries.values().iterator(); it.hasNext(); ) {
      Entry entry = it.next();
      if (entry.expiresAtNanos - now <= 0 && entry.answer.isDone()) {
        it.remove();
      }
    }
  }

  private static byte[] digest(String method, String path, byte[] body) {
    try {
      MessageDigest sha = MessageDigest.getInstance("SHA-256");
      sha.update((method + " " + path + "\n").getBytes(StandardCharsets.UTF_8));
      sha.update(body);
      return sha.digest();
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }
}
