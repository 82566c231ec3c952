package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.Keys;
import java.util.Map;
import java.util.Objects;
import org.apache.iceberg.DataOperations;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;

/**
 * A streaming read of a table whose job rewrites it at every epoch is refused when the query starts (its stream is
 * made: {@code writeStream...start()}; issue 35 moved it there from {@code spark.readStream.table(...)}, whose load is
 * no different from a batch read's), not at its second micro-batch (protocol §5.7, issue 34): a stream holds only
 * the rows appended between two barriers, so the first rewrite after the first micro-batch would end it. What the
 * catalog knows: the newest epoch on {@code main} of a derived table (its data-changing snapshots sharing one
 * {@code consistent.barrier}) rewrote rows (an {@code overwrite} or {@code delete}: an overwrite or merge epoch, a
 * streaming job in complete output mode). A derived table without such an epoch yet, and a root, are streamed; a
 * later rewrite still ends the stream at that micro-batch ({@link BarrierStream}).
 */
public final class RewrittenSource {
  private RewrittenSource() {}

  /** Refuses a stream of {@code table} (the consistent catalog's {@code name}) whose newest epoch rewrote it. */
  public static void refuse(String catalog, Table table, String name) {
    String rewrite = rewritingEpoch(table);
    if (rewrite == null) {
      return;
    }
    throw Errors.raise(Errors.analysis("CONSISTENT_READ.NOT_INCREMENTAL", catalog + "." + name + ": " + rewrite
        + ", and a stream holds only rows appended between barriers — stream its changes instead: spark.readStream"
        + ".option(\"" + ChangesTable.READ + "\", \"" + ChangesTable.CHANGES + "\").table(\"" + catalog + "." + name
        + "\")"));
  }

  /** How the newest epoch on main rewrote a derived table, or null (a root, no epoch yet, an appending epoch). */
  static String rewritingEpoch(Table table) {
    if (!table.properties().containsKey(Keys.SOURCES)) {
      return null;
    }
    Snapshot snapshot = table.currentSnapshot();
    String barrier = null;
    while (snapshot != null) {
      Map<String, String> summary = snapshot.summary() == null ? Map.of() : snapshot.summary();
      String own = summary.get(Keys.BARRIER);
      String operation = snapshot.operation();
      if (own != null && !DataOperations.REPLACE.equals(operation)) {
        if (barrier != null && !barrier.equals(own)) {
          return null; // past the newest epoch: it only appended
        }
        barrier = own;
        if (!DataOperations.APPEND.equals(operation)) {
          String job = Objects.requireNonNullElse(summary.get(Keys.JOB), "its job");
          return "its job " + job + " rewrites it (its newest epoch, at barrier " + Barriers.format(
              Barriers.parseBarrierValue(own, "snapshot " + snapshot.snapshotId() + " summary"))
              + ", committed snapshot " + snapshot.snapshotId() + " as " + operation + ")";
        }
      }
      snapshot = snapshot.parentId() == null ? null : table.snapshot(snapshot.parentId());
    }
    return null;
  }
}
