package io.consistentcatalog.spark;

import java.nio.file.Files;
import java.nio.file.Paths;

/**
 * Named points of a write where a crash test stops the driver (the crash harness, tests/spark): off unless the
 * environment variable {@code CONSISTENT_FAILPOINT} names the point. {@code CONSISTENT_FAILPOINT_ACTION}:
 * {@code halt} (default) ends the JVM at once, as kill -9 does (no shutdown hook runs); {@code pause} prints
 * {@code [failpoint] <name> pid <pid>} to standard error and waits until the file named by
 * {@code CONSISTENT_FAILPOINT_RELEASE} exists (the test stops, takes over, resumes the process meanwhile).
 *
 * <p>Points: {@code before-stage} (planned, Spark's data written, nothing committed), {@code after-stage}
 * (the staged epoch committed and verified, not published), {@code after-publish} (the publish landed, the
 * statement not finished), {@code before-ingest} (an ingest's rows written, not committed).
 */
final class Failpoints {
  private static final String POINT = System.getenv("CONSISTENT_FAILPOINT");

  private Failpoints() {}

  static void at(String name) {
    if (POINT == null || !POINT.equals(name)) {
      return;
    }
    String action = System.getenv().getOrDefault("CONSISTENT_FAILPOINT_ACTION", "halt");
    System.err.println("[failpoint] " + name + " pid " + ProcessHandle.current().pid());
    System.err.flush();
    if (action.equals("pause")) {
      String release = System.getenv("CONSISTENT_FAILPOINT_RELEASE");
      while (release == null || !Files.exists(Paths.get(release))) {
        try {
          Thread.sleep(100);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return;
        }
      }
      return;
    }
    Runtime.getRuntime().halt(137);
  }
}
