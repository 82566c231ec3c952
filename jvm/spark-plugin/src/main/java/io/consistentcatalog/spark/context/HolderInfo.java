package io.consistentcatalog.spark.context;

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

  private static String quoted(String text) {
    return "\"" + text.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }
}
