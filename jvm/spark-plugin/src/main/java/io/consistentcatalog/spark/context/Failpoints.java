package io.consistentcatalog.spark.context;

import java.nio.file.Files;
import java.nio.file.Paths;

/**
 * Named points of a write where a crash test stops the driver (the crash harness, tests/spark): off unless the
 * environment variable {@code CONSISTENT_FAILPOINT} names the point. {@code CONSISTENT_FAILPOINT_ACTION}:
 * {@code halt} (default) ends the JVM at once, as kill -9 does (no shutdown hook runs); {@code pause} prints
 * {@code [failpoint] <name> pid <pid>} to standard error and waits until the file named by
 * {@code CONSISTENT_FAILPOINT_RELEASE} exists (the test stops, takes over, resumes the process meanwhile);
 * {@code kill-group} sends SIGKILL to the JVM's whole process group (a PySpark driver and its JVM die together,
 * as on a lost machine). {@code CONSISTENT_FAILPOINT_AFTER=N} lets the point pass N times first.
 * {@code CONSISTENT_FAILPOINT_TABLE} (a table name as the plugin says it, e.g. {@code s.count_histogram}): only
 * that table's writes pass or stop at the point (one process runs several streaming queries); the line printed
 * before the action names the table: {@code [failpoint] <name> pid <pid> table <table>}.
 *
 * <p>Points: {@code before-stage} (planned, Spark's data written, nothing committed), {@code after-stage}
 * (the staged epoch committed and verified, not published), {@code after-publish} (the publish landed, the
 * statement not finished), {@code before-ingest} (an ingest's rows written, not committed), {@code after-ingest}
 * (an ingest landed; for a streaming query, before Spark's commit log records the batch).
 */
final class Failpoints {
  private static final String POINT = System.getenv("CONSISTENT_FAILPOINT");
  private static final java.util.concurrent.atomic.AtomicInteger PASSED = new java.util.concurrent.atomic.AtomicInteger();

  private Failpoints() {}

  /** The point {@code name} reached by a write into {@code table}. */
  static void at(String name, String table) {
    if (POINT == null || !POINT.equals(name)) {
      return;
    }
    String only = System.getenv("CONSISTENT_FAILPOINT_TABLE");
    if (only != null && !only.isEmpty() && !only.equals(table)) {
      return;
    }
    if (PASSED.getAndIncrement() < Integer.parseInt(System.getenv().getOrDefault("CONSISTENT_FAILPOINT_AFTER", "0"))) {
      return;
    }
    String action = System.getenv().getOrDefault("CONSISTENT_FAILPOINT_ACTION", "halt");
    System.err.println("[failpoint] " + name + " pid " + ProcessHandle.current().pid() + " table " + table);
    System.err.flush();
    if (action.equals("kill-group")) {
      try {
        String stat = new String(Files.readAllBytes(Paths.get("/proc/self/stat")), java.nio.charset.StandardCharsets.UTF_8);
        String pgid = stat.substring(stat.lastIndexOf(')') + 2).split(" ")[2]; // after "pid (comm) state ppid"
        new ProcessBuilder("kill", "-KILL", "--", "-" + pgid).inheritIO().start().waitFor();
      } catch (java.io.IOException | InterruptedException | RuntimeException e) {
        System.err.println("[failpoint] could not kill the process group: " + e);
      }
    }
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
