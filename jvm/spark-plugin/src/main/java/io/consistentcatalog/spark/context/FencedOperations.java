package io.consistentcatalog.spark.context;

import java.util.List;
import java.util.function.Supplier;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.UpdateRequirement;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.encryption.EncryptionManager;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;

/**
 * A table's operations whose commits carry the protocol's requirements instead of Iceberg's: Spark's own
 * write (Iceberg's {@code SparkWrite} committing through {@code SnapshotProducer}) then lands only if the
 * fence and the planned heads still hold, inside the catalog's compare-and-swap (protocol §5.9). The snapshot
 * Iceberg built and its ref update are sent as they are ({@code metadata.changes()}) through
 * {@link FencedCommit}; a refusal is {@code FENCED} (a {@code CleanableFailure}: Iceberg and Spark delete
 * what the write produced) and is never retried by Iceberg. Iceberg's reads of the table inside the write
 * ({@link #current}, {@link #refresh}) wait out catalog faults under the catalog's retry deadline (protocol §6.8).
 */
public final class FencedOperations implements TableOperations {
  private final TableOperations delegate;
  private final FencedCommit committer;
  private final TableIdentifier ident;
  private final Supplier<List<UpdateRequirement>> requirements;
  private final String what;
  /** The branch a ref update of main is sent to instead (null: as Iceberg built it). */
  private final String mainTo;

  public FencedOperations(
      TableOperations delegate, FencedCommit committer, TableIdentifier ident, Supplier<List<UpdateRequirement>> requirements,
      String what) {
    this(delegate, committer, ident, requirements, what, null);
  }

  /**
   * Operations whose commits move {@code mainTo} where Iceberg's commit would move main: a write Iceberg built on
   * main's head (a streaming write, which knows no branch) lands on a branch that was just reset to that head.
   */
  public FencedOperations(
      TableOperations delegate, FencedCommit committer, TableIdentifier ident, Supplier<List<UpdateRequirement>> requirements,
      String what, String mainTo) {
    this.delegate = delegate;
    this.committer = committer;
    this.ident = ident;
    this.requirements = requirements;
    this.what = what;
    this.mainTo = mainTo;
  }

  /**
   * Metadata read or produced just now by this write (the ingest's check of the key, the staged branch's reset, the
   * last commit), served by {@link #current} and {@link #refresh} instead of another catalog load: the commit's
   * requirements, not this copy, decide whether it lands.
   */
  private volatile TableMetadata primed;

  void prime(TableMetadata metadata) {
    primed = metadata;
  }

  @Override
  public TableMetadata current() {
    TableMetadata known = primed;
    return known != null ? known : committer.retrying("loading " + ident, delegate::current);
  }

  @Override
  public TableMetadata refresh() {
    TableMetadata known = primed;
    return known != null ? known : committer.retrying("loading " + ident, delegate::refresh);
  }

  /** The metadata the last commit through these operations produced (null before any). */
  private volatile TableMetadata committed;

  @Override
  public void commit(TableMetadata base, TableMetadata metadata) {
    List<org.apache.iceberg.MetadataUpdate> changes = metadata.changes();
    if (mainTo != null) {
      changes = new java.util.ArrayList<>(changes);
      changes.replaceAll(change -> redirected(change, mainTo));
    }
    TableMetadata answered = committer.commit(ident, base, requirements.get(), changes, what, false);
    // a catalog that answers without metadata (REST's transactions route, 204): what the commit made is the base it
    // built on with its changes, as the catalog applied them inside its compare-and-swap; the requirements asserted
    // what is read from it (the refs it moves, the fence), as Python's verify reads its commit's own answer
    committed = answered != null ? answered : applied(base, changes);
    if (primed != null) {
      primed = committed;
    }
  }

  /** {@code base} with {@code changes} applied, as a catalog applies a commit's updates (Iceberg's CatalogHandlers). */
  static TableMetadata applied(TableMetadata base, List<org.apache.iceberg.MetadataUpdate> changes) {
    TableMetadata.Builder builder = TableMetadata.buildFrom(base);
    for (org.apache.iceberg.MetadataUpdate change : changes) {
      change.applyTo(builder);
    }
    return builder.build();
  }

  private static org.apache.iceberg.MetadataUpdate redirected(org.apache.iceberg.MetadataUpdate change, String branch) {
    if (change instanceof org.apache.iceberg.MetadataUpdate.SetSnapshotRef) {
      org.apache.iceberg.MetadataUpdate.SetSnapshotRef ref = (org.apache.iceberg.MetadataUpdate.SetSnapshotRef) change;
      if (ref.name().equals(io.consistentcatalog.core.Keys.MAIN_BRANCH)) {
        return new org.apache.iceberg.MetadataUpdate.SetSnapshotRef(branch, ref.snapshotId(),
            org.apache.iceberg.SnapshotRefType.valueOf(ref.type().toUpperCase(java.util.Locale.ROOT)),
            ref.minSnapshotsToKeep(), ref.maxSnapshotAgeMs(), ref.maxRefAgeMs());
      }
    }
    return change;
  }

  /**
   * What the last commit produced, so that its writer reads it without loading the table again (Iceberg's own
   * snapshot producer refreshes before it builds a snapshot, so {@link #current} is not advanced here).
   */
  TableMetadata committed() {
    return committed;
  }

  @Override
  public FileIO io() {
    return delegate.io();
  }

  @Override
  public EncryptionManager encryption() {
    return delegate.encryption();
  }

  @Override
  public String metadataFileLocation(String fileName) {
    return delegate.metadataFileLocation(fileName);
  }

  @Override
  public LocationProvider locationProvider() {
    return delegate.locationProvider();
  }

  @Override
  public long newSnapshotId() {
    return delegate.newSnapshotId();
  }

  @Override
  public boolean requireStrictCleanup() {
    return true; // only a refusal (a CleanableFailure) deletes what was written; a lost answer keeps it
  }
}
