package io.consistentcatalog.openlineage;

import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The JVM's one sending thread (a daemon): events are handed to their transports in the order they were queued,
 * off the statement's thread, so a transport that is slow or down never holds an epoch up; a failure is one
 * warning on standard error and never reaches the epoch. At JVM shutdown the events still queued get at most
 * {@link #FLUSH_MS} (Python's {@code FLUSH_SECONDS}), then are dropped with a warning.
 */
public final class EventSender {
  /** How long the JVM's shutdown waits for queued events. */
  public static final long FLUSH_MS = 10_000L;
  private static final String PREFIX = "[openlineage] ";

  private static final BlockingQueue<Runnable> QUEUE = new LinkedBlockingQueue<>();
  private static final AtomicInteger UNSENT = new AtomicInteger();
  private static Thread sender;
  private static boolean hooked;

  private EventSender() {}

  /** Queue {@code json} for {@code transport}; {@code job} and {@code eventType} name it in a warning. */
  public static void send(Transport transport, String job, String eventType, String json) {
    UNSENT.incrementAndGet();
    QUEUE.add(() -> {
      try {
        transport.emit(json, job, eventType);
      } catch (Exception | LinkageError e) {
        warn(job + ": the OpenLineage " + eventType + " event could not be sent (the epoch goes on): "
            + e.getClass().getSimpleName() + ": " + OpenLineageConfig.firstLine(e.getMessage()));
      } finally {
        UNSENT.decrementAndGet();
      }
    });
    started();
  }

  private static synchronized void started() {
    if (sender == null || !sender.isAlive()) {
      sender = new Thread(EventSender::sendQueued, "consistent-catalog-openlineage");
      sender.setDaemon(true);
      sender.start();
    }
    if (!hooked) {
      hooked = true;
      try {
        Runtime.getRuntime().addShutdownHook(new Thread(EventSender::flushAtShutdown, "consistent-catalog-openlineage-flush"));
      } catch (IllegalStateException e) {
        // the JVM is shutting down already: what is queued goes as far as the daemon gets
      }
    }
  }

  private static void sendQueued() {
    while (true) {
      try {
        QUEUE.take().run();
      } catch (InterruptedException e) {
        return;
      } catch (RuntimeException | LinkageError e) {
        warn("the OpenLineage sender went on after " + e);
      }
    }
  }

  /** Wait until the events queued so far are handed to their transports, at most {@code timeoutMs}; false if not. */
  public static boolean flush(long timeoutMs) {
    synchronized (EventSender.class) {
      if (sender == null || !sender.isAlive()) {
        return UNSENT.get() == 0;
      }
    }
    CountDownLatch done = new CountDownLatch(1);
    QUEUE.add(done::countDown);
    try {
      return done.await(timeoutMs, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  private static void flushAtShutdown() {
    if (!flush(FLUSH_MS)) {
      warn(UNSENT.get() + " OpenLineage event(s) still unsent after " + FLUSH_MS / 1000 + " s are dropped (is the transport "
          + "reachable?)");
    }
  }

  /** One line on standard error, as the plugin's other lines. */
  static void warn(String line) {
    System.err.println(PREFIX + line);
    System.err.flush();
  }
}
