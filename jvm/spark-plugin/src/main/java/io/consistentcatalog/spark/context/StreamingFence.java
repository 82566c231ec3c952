package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.Keys;
import java.util.List;
import java.util.function.Supplier;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.UpdateRequirement;
import org.apache.iceberg.catalog.TableIdentifier;

/**
 * The fenced operations a micro-batch's write is built on (when Spark plans the batch), armed with the epoch's
 * requirements when it commits. Iceberg's streaming write knows no branch: it builds on main's head and its ref
 * update is sent to {@code consistent-staged}, reset to that head just before.
 */
public final class StreamingFence {
  private volatile Supplier<List<UpdateRequirement>> requirements;
  private final FencedOperations operations;

  public StreamingFence(Table table, FencedCommit committer, TableIdentifier ident, String what) {
    this.requirements = () -> {
      throw new IllegalStateException("a streaming epoch's write committed before its epoch was planned");
    };
    this.operations = new FencedOperations(((HasTableOperations) table).operations(), committer, ident,
        () -> requirements.get(), what, Keys.STAGED_BRANCH);
  }

  public FencedOperations arm(Supplier<List<UpdateRequirement>> epochRequirements) {
    this.requirements = epochRequirements;
    return operations;
  }

  public Table table(String name) {
    return new BaseTable(operations, name);
  }

  public org.apache.iceberg.io.FileIO io() {
    return operations.io();
  }
}
