package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.EpochPlanner;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Keys;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.core.WritePlanner;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.SnapshotRef;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.UpdateRequirement;
import org.apache.iceberg.catalog.TableIdentifier;

/**
 * Registration, lease and the fence (protocol §6.1-§6.3) in the JVM, as {@code consistent_catalog.ownership}
 * and {@code TableStore.commit(take_fence=...)} do them in Python: each commit planned by {@link WritePlanner} (Python's
 * {@code write_plans}), sent here.
 */
public final class JobRegistration {
  public static final long DEFAULT_LEASE_MS = 5 * 60 * 1000L;

  private JobRegistration() {}

  static MetadataUpdate branchRef(String name, long snapshotId) {
    return io.consistentcatalog.core.EpochCommits.branchRef(name, snapshotId);
  }

  /** {@code check_can_own}: refuse registering {@code job} (instance {@code instance}) on {@code state} while somebody else may write it. */
  static void checkCanOwn(TableState state, String job, String instance, boolean takeover) {
    checkCanOwn(state, job, instance, takeover, "lake_consistent", false);
  }

  /**
   * {@code check_can_own} (§6.2): a table owned by another job is refused whatever that job's lease (one line naming
   * the owner and the ways out: write it as the owner, or {@code reassign}); another live instance of the same job
   * unless {@code takeover}. {@code streaming}: the job is a streaming query's option, not a session setting.
   */
  static void checkCanOwn(TableState state, String job, String instance, boolean takeover, String catalog, boolean streaming) {
    io.consistentcatalog.core.Ownership.checkCanOwn(state, job, instance, takeover, System.currentTimeMillis(), catalog,
        streaming, HolderInfo.processGone(state));
  }

  /**
   * {@code register_job} for one sink: lineage checked over {@code catalog} (every table's state), then one commit
   * that sets the ownership properties, gives an empty sink its genesis and takes the fence. Returns the sink's
   * metadata as committed.
   */
  public static TableMetadata register(
      FencedCommit committer, TableIdentifier ident, String sink, Table table, String job, Collection<String> sources,
      String instance, boolean takeover, long leaseMs, Map<String, TableState> catalog) {
    return register(committer, ident, sink, table, job, sources, instance, takeover, leaseMs, catalog, "lake_consistent", false);
  }

  /** {@link #register}, naming {@code catalogName} in its refusals; {@code streaming}: a streaming query's job. */
  public static TableMetadata register(
      FencedCommit committer, TableIdentifier ident, String sink, Table table, String job, Collection<String> sources,
      String instance, boolean takeover, long leaseMs, Map<String, TableState> catalog, String catalogName,
      boolean streaming) {
    TableMetadata base = FencedCommit.metadata(table);
    TableState state = TableState.fromMetadata(sink, base);
    // whose table it is comes first: a foreign job's name is refused as such, not as the cycle it would make
    WritePlanner.Commit plan = WritePlanner.register(state, job, sources, instance, takeover, System.currentTimeMillis(),
        leaseMs, HolderInfo.json(), catalogName, streaming, HolderInfo.processGone(state));
    Map<String, TableState> others = new LinkedHashMap<>(catalog);
    others.remove(sink);
    EpochPlanner.checkNewEdges(job, new TreeSet<>(sources), Collections.singleton(sink), others);
    TableOperations ops = ((HasTableOperations) table).operations();
    List<MetadataUpdate> updates = new ArrayList<>();
    long sequence = base.lastSequenceNumber() + 1;
    if (plan.genesis) { // genesis, with main asserted absent: of two racing registrations one wins
      Snapshot genesis = EmptySnapshot.genesis(ops, base, job);
      sequence++;
      updates.add(new MetadataUpdate.AddSnapshot(genesis));
      updates.add(branchRef(Keys.MAIN_BRANCH, genesis.snapshotId()));
    }
    return send(committer, ops, ident, base, plan, updates, sequence, plan.what);
  }

  /**
   * Sends the planned {@code plan} ({@link WritePlanner}) to the table {@code base} was read from: {@code before} (a
   * genesis) and the plan's updates, the fence taken when the plan says so ({@link #takeFence}, its empty snapshot at
   * {@code sequence}). Returns the metadata as committed.
   */
  static TableMetadata send(
      FencedCommit committer, TableOperations ops, TableIdentifier ident, TableMetadata base, WritePlanner.Commit plan,
      List<MetadataUpdate> before, long sequence, String what) {
    List<UpdateRequirement> requirements = new ArrayList<>(plan.requirements);
    List<MetadataUpdate> updates = new ArrayList<>(before);
    updates.addAll(plan.updates);
    if (plan.fence == null) {
      return committer.commit(ident, base, requirements, updates, what);
    }
    WritePlanner.FenceMove fence = plan.fence;
    takeFence(ops, base, fence.expected, fence.reason, fence.holder, fence.job, sequence, requirements, updates);
    return commitTakingFence(committer, ops, ident, base, requirements, updates, what);
  }

  /**
   * {@code TakeFence}: move {@code consistent-fence} to a new empty snapshot in the commit of {@code updates},
   * asserting the fence as {@code expected} and every branch head of {@code base} not asserted yet, and remove
   * the fence snapshot it replaces.
   */
  static void takeFence(
      TableOperations ops, TableMetadata base, Long expected, String reason, String holder, String job, long sequence,
      List<UpdateRequirement> requirements, List<MetadataUpdate> updates) {
    Set<String> asserted = new TreeSet<>();
    for (UpdateRequirement r : requirements) {
      if (r instanceof UpdateRequirement.AssertRefSnapshotID) {
        asserted.add(((UpdateRequirement.AssertRefSnapshotID) r).refName());
      }
    }
    Map<String, Long> heads = new LinkedHashMap<>();
    heads.put(Keys.FENCE_BRANCH, expected);
    for (Map.Entry<String, SnapshotRef> e : base.refs().entrySet()) {
      if (e.getValue().isBranch()) {
        heads.putIfAbsent(e.getKey(), e.getValue().snapshotId());
      }
    }
    for (Map.Entry<String, Long> e : heads.entrySet()) {
      if (asserted.add(e.getKey())) {
        requirements.add(new UpdateRequirement.AssertRefSnapshotID(e.getKey(), e.getValue()));
      }
    }
    Map<String, String> summary = new LinkedHashMap<>();
    summary.put(Keys.FENCE_REASON, reason);
    if (holder != null) {
      summary.put(Keys.FENCE_HOLDER, holder);
    }
    if (job != null) {
      summary.put(Keys.FENCE_JOB, job);
    }
    Snapshot fence = EmptySnapshot.create(ops, base, sequence, summary);
    updates.add(new MetadataUpdate.AddSnapshot(fence));
    updates.add(branchRef(Keys.FENCE_BRANCH, fence.snapshotId()));
    Long retired = retiredFence(base, expected);
    if (retired != null) { // one fence snapshot at a time: the old one goes in the same commit
      updates.add(new MetadataUpdate.RemoveSnapshots(Collections.singleton(retired)));
    }
  }

  /**
   * A commit that takes the fence ({@link #takeFence}), its files kept in order as Python's {@code TableStore.commit}
   * keeps them: landed, the manifest list of the fence snapshot it removed is deleted; refused, those of the empty
   * snapshots it created (the fence, a genesis) are. A commit of unknown outcome keeps both.
   */
  static TableMetadata commitTakingFence(
      FencedCommit committer, TableOperations ops, TableIdentifier ident, TableMetadata base,
      List<UpdateRequirement> requirements, List<MetadataUpdate> updates, String what) {
    TableMetadata committed;
    try {
      committed = committer.commit(ident, base, requirements, updates, what);
    } catch (FencedCommit.Refused e) {
      for (MetadataUpdate update : updates) {
        if (update instanceof MetadataUpdate.AddSnapshot && ((MetadataUpdate.AddSnapshot) update).snapshot() instanceof EmptySnapshot) {
          deleteQuietly(ops, ((MetadataUpdate.AddSnapshot) update).snapshot().manifestListLocation());
        }
      }
      throw e;
    }
    for (MetadataUpdate update : updates) {
      if (update instanceof MetadataUpdate.RemoveSnapshots) {
        for (Long retired : ((MetadataUpdate.RemoveSnapshots) update).snapshotIds()) {
          Snapshot snapshot = base.snapshot(retired);
          if (snapshot != null) {
            deleteQuietly(ops, snapshot.manifestListLocation());
          }
        }
      }
    }
    return committed;
  }

  private static void deleteQuietly(TableOperations ops, String path) {
    try {
      ops.io().deleteFile(path);
    } catch (RuntimeException e) {
      // an orphan at worst, removed by orphan cleanup (protocol §9.7)
    }
  }

  /** {@code retired_fence}: the fence snapshot a move makes unreachable, when it is one no other ref points at. */
  static Long retiredFence(TableMetadata base, Long expected) {
    if (expected == null) {
      return null;
    }
    Snapshot snapshot = base.snapshot(expected);
    if (snapshot == null || snapshot.parentId() != null || snapshot.summary() == null
        || !snapshot.summary().containsKey(Keys.FENCE_REASON)) {
      return null;
    }
    for (Map.Entry<String, SnapshotRef> e : base.refs().entrySet()) {
      if (!e.getKey().equals(Keys.FENCE_BRANCH) && e.getValue().snapshotId() == expected) {
        return null;
      }
    }
    return expected;
  }

  /**
   * {@code unregister_job} for one sink: clear the lease if this instance still holds it, asserting the fence as read.
   * {@code consistent.job} stays: the job still owns the table (§6.1).
   */
  public static void unregister(FencedCommit committer, TableIdentifier ident, String instance, String job) {
    Table table = committer.load(ident);
    TableMetadata base = FencedCommit.metadata(table);
    WritePlanner.Commit plan = WritePlanner.unregister(TableState.fromMetadata(ident.toString(), base), job, instance);
    if (plan == null) {
      return; // taken over meanwhile: not ours to clear
    }
    try {
      committer.commit(ident, base, new ArrayList<>(plan.requirements), new ArrayList<>(plan.updates), plan.what);
    } catch (FencedCommit.Refused e) {
      // taken over meanwhile
    }
  }

  /** What a reassign did (§6.9): the owner before (null: none) and whether it committed. */
  public static final class Reassigned {
    public final String fromJob;
    public final boolean changed;

    public Reassigned(String fromJob, boolean changed) {
      this.fromJob = fromJob;
      this.changed = changed;
    }
  }

  /**
   * {@code reassign} (§6.9): hand the derived table {@code name} to {@code job}. Refused for a root, while an instance
   * holds a live lease (unless {@code takeover}), and when {@code job} would read its own output ({@code catalog}:
   * every table's state, for the job-level cycle check). One commit sets {@code consistent.job}, removes the lease
   * and takes the fence (reason {@code reassign}, no holder); nothing when {@code job} already owns it with no live lease.
   */
  public static Reassigned reassign(
      FencedCommit committer, TableIdentifier ident, String name, Table table, String job, boolean takeover,
      Map<String, TableState> catalog, String catalogName) {
    TableMetadata base = FencedCommit.metadata(table);
    TableState state = TableState.fromMetadata(name, base);
    WritePlanner.Commit plan = WritePlanner.reassign(state, job, takeover, System.currentTimeMillis(), catalogName);
    String from = state.owner();
    if (plan == null) {
      return new Reassigned(from, false);
    }
    Map<String, TableState> others = new LinkedHashMap<>(catalog);
    others.remove(name);
    EpochPlanner.checkJobEdges(job, new TreeSet<>(state.sources()), Collections.singleton(name), others);
    try {
      send(committer, ((HasTableOperations) table).operations(), ident, base, plan, new ArrayList<MetadataUpdate>(),
          base.lastSequenceNumber() + 1, plan.what);
    } catch (FencedCommit.Refused e) {
      throw new ConsistentException(ErrorKind.OWNERSHIP, name, e.getMessage() + "; the table changed while it was being "
          + "reassigned — run reassign again");
    }
    return new Reassigned(from, true);
  }

  /**
   * {@code advance_idle_roots} for one root: a root declared idle ({@code consistent.idle-after-ms}) whose watermark
   * is behind {@code now} minus its allowance is advanced there, in one commit requiring main as read and taking
   * the fence (keeping the holder). Returns the table as committed, or null when nothing was advanced (not idle,
   * not behind, or an ingest or another advance got there first).
   */
  public static Table advanceIdleRoot(FencedCommit committer, TableIdentifier ident, String name, Table table, long now) {
    TableState state = TableState.fromMetadata(name, FencedCommit.metadata(table));
    Long after = state.idleAfterMs();
    if (!state.isRoot() || after == null) {
      return null;
    }
    return advanceRoot(committer, ident, name, table, now - after, "advancing the watermark of idle root " + name);
  }

  /**
   * {@code advance_watermark} of a root to {@code target} when it is behind it (§5.6): one commit requiring main as
   * read and taking the fence (keeping the holder). Returns the table as committed, or null when nothing was
   * advanced (a derived table, not behind, or an ingest or another advance got there first).
   */
  public static Table advanceRoot(FencedCommit committer, TableIdentifier ident, String name, Table table, long target, String what) {
    TableMetadata base = FencedCommit.metadata(table);
    WritePlanner.Commit plan = WritePlanner.idleAdvance(TableState.fromMetadata(name, base), System.currentTimeMillis(), target);
    if (plan == null) {
      return null;
    }
    try {
      send(committer, ((HasTableOperations) table).operations(), ident, base, plan, new ArrayList<MetadataUpdate>(),
          base.lastSequenceNumber() + 1, what);
    } catch (FencedCommit.Refused e) {
      return null;
    }
    return committer.load(ident);
  }
}
