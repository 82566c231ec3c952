package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.Ownership;
import io.consistentcatalog.core.TableState;
import java.net.InetAddress;
import org.apache.spark.sql.SparkSession;

/**
 * {@code consistent.lease-holder-info} of this JVM's instance ({@link EpochWrites#INSTANCE}): host, process id, the
 * Spark application id and when the instance started, as {@code consistent_catalog.ownership.holder_info} writes it
 * (compact JSON, keys sorted). Read by people only: ownership refusals quote it (protocol §6.2).
 */
final class HolderInfo {
  /** When this JVM's instance started: the class's first use, about the first registration. */
  private static final long SINCE = System.currentTimeMillis();

  private HolderInfo() {}

  static String json() {
    StringBuilder out = new StringBuilder("{");
    scala.Option<SparkSession> active = SparkSession.getActiveSession();
    if (active.isDefined()) {
      out.append("\"app\":").append(quoted(active.get().sparkContext().applicationId())).append(',');
    }
    try {
      out.append("\"host\":").append(quoted(InetAddress.getLocalHost().getHostName())).append(',');
    } catch (java.io.IOException | RuntimeException e) {
      // no host name: left out
    }
    out.append("\"pid\":").append(ProcessHandle.current().pid()).append(",\"since\":").append(SINCE).append('}');
    return out.toString();
  }

  /**
   * Whether the lease holder of {@code state} was a process on this host that exists no more (killed, crashed): its
   * {@code consistent.lease-holder-info} names this host (as this JVM and Python write it, the system's host name) and
   * no process has its pid. False whenever that is not known (no info, another host, the pid in use): only then is
   * the holder called gone in a refusal. A pid reused by another process since reads as alive.
   */
  static boolean processGone(TableState state) {
    String host = Ownership.holderHost(state);
    Long pid = Ownership.holderPid(state);
    if (host == null || pid == null || state.leaseHolder() == null) {
      return false;
    }
    try {
      if (!host.equals(InetAddress.getLocalHost().getHostName())) {
        return false;
      }
    } catch (java.io.IOException | RuntimeException e) {
      return false;
    }
    return !ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false);
  }

  private static String quoted(String text) {
    return "\"" + text.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }
}
