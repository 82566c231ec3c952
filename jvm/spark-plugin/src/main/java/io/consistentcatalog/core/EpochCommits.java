package io.consistentcatalog.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.SnapshotRefType;
import org.apache.iceberg.UpdateRequirement;

/**
 * The metadata commits of an epoch (protocol §5.2-§5.3), pure: what each commit requires and changes, in the
 * order the Python {@code EpochJob} sends them (requirements: the fence as planned first, then the refs; the
 * table uuid is added by whoever sends). The conformance corpus compares them with Python's in Iceberg's REST
 * JSON. Commits that add a snapshot (genesis, the staged data write) take it from the caller.
 */
public final class EpochCommits {
  private EpochCommits() {}

  /** One commit: its requirements (without the table uuid) and updates. */
  public static final class Commit {
    public final String what;
    public final List<UpdateRequirement> requirements;
    public final List<MetadataUpdate> updates;

    Commit(String what, List<UpdateRequirement> requirements, List<MetadataUpdate> updates) {
      this.what = what;
      this.requirements = Collections.unmodifiableList(requirements);
      this.updates = Collections.unmodifiableList(updates);
    }
  }

  public static MetadataUpdate branchRef(String name, long snapshotId) {
    return new MetadataUpdate.SetSnapshotRef(name, snapshotId, SnapshotRefType.BRANCH, null, null, null);
  }

  /** {@code EpochJob._fenced}: the fence as planned, then {@code refs} in order. */
  public static List<UpdateRequirement> fenced(Long fence, Map<String, Long> refs) {
    List<UpdateRequirement> out = new ArrayList<>();
    out.add(new UpdateRequirement.AssertRefSnapshotID(Keys.FENCE_BRANCH, fence));
    for (Map.Entry<String, Long> e : refs.entrySet()) {
      if (!e.getKey().equals(Keys.FENCE_BRANCH)) {
        out.add(new UpdateRequirement.AssertRefSnapshotID(e.getKey(), e.getValue()));
      }
    }
    return out;
  }

  private static Map<String, Long> refs(String a, Long headA, String b, Long headB) {
    Map<String, Long> out = new LinkedHashMap<>();
    out.put(a, headA);
    if (b != null) {
      out.put(b, headB);
    }
    return out;
  }

  /** §5.2 step 1: the genesis of a sink a revision emptied ({@code genesis}: an empty snapshot tagged with the job). */
  public static Commit genesis(EpochPlanner.SinkPlan plan, org.apache.iceberg.Snapshot genesis) {
    List<MetadataUpdate> updates = new ArrayList<>();
    updates.add(new MetadataUpdate.AddSnapshot(genesis));
    updates.add(branchRef(Keys.MAIN_BRANCH, genesis.snapshotId()));
    return new Commit("creating the genesis snapshot", fenced(plan.fence, refs(Keys.MAIN_BRANCH, null, null, null)), updates);
  }

  /** §5.2 step 2: point {@code consistent-staged} (now at {@code staged}) at main's head {@code base}. */
  public static Commit reset(EpochPlanner.SinkPlan plan, long base, Long staged) {
    List<MetadataUpdate> updates = new ArrayList<>();
    updates.add(branchRef(Keys.STAGED_BRANCH, base));
    return new Commit("resetting the staged branch",
        fenced(plan.fence, refs(Keys.MAIN_BRANCH, base, Keys.STAGED_BRANCH, staged)), updates);
  }

  /** §5.2 step 3: what the staged data write requires (its updates are the writer's: the snapshot and its ref). */
  public static List<UpdateRequirement> stagedWrite(EpochPlanner.SinkPlan plan, long base) {
    return fenced(plan.fence, refs(Keys.STAGED_BRANCH, base, Keys.MAIN_BRANCH, base));
  }

  /** The summary keys every snapshot of one staging attempt carries. */
  public static Map<String, String> summary(EpochPlanner.Plan plan, String job, String attempt) {
    Map<String, String> out = new LinkedHashMap<>();
    out.put(Keys.BARRIER, Long.toString(plan.barrier));
    out.put(Keys.JOB, job);
    out.put(Keys.SOURCES, EpochPlanner.encodeSummarySources(plan.inputs));
    out.put(Keys.ATTEMPT, attempt);
    if (plan.definition != null) { // what computed the epoch (§6.10)
      out.put(Keys.DEFINITION, plan.definition);
    }
    return out;
  }

  /** {@link #summary}, and {@code consistent.regenerate} on every snapshot of a sink's new generation (§6.10 step 2). */
  public static Map<String, String> summary(EpochPlanner.Plan plan, String sink, String job, String attempt) {
    Map<String, String> out = summary(plan, job, attempt);
    EpochPlanner.SinkPlan sinkPlan = plan.sinks.get(sink);
    if (sinkPlan != null && sinkPlan.action == EpochPlanner.Action.REGENERATE) {
      out.put(Keys.REGENERATE, sinkPlan.change.reason);
    }
    return out;
  }

  /**
   * §5.3: main to the staged head ({@code stagedHead} not null), or the watermark to T ({@code sink}: the sink as
   * read before publishing), and the lease renewed to {@code leaseUntil}.
   */
  public static Commit publish(
      EpochPlanner.Plan plan, String sinkName, TableState sink, Long mainHead, Long stagedHead, long leaseUntil) {
    EpochPlanner.SinkPlan sinkPlan = plan.sinks.get(sinkName);
    List<MetadataUpdate> updates = new ArrayList<>();
    Map<String, String> properties = new LinkedHashMap<>();
    properties.put(Keys.LEASE_UNTIL, Long.toString(leaseUntil));
    if (stagedHead != null && sinkPlan.action == EpochPlanner.Action.REGENERATE) {
      return switchGeneration(plan, sinkPlan, sink, mainHead, stagedHead, properties);
    }
    if (stagedHead != null) {
      updates.add(branchRef(Keys.MAIN_BRANCH, stagedHead));
    } else {
      properties.putAll(sink.watermarkProperties(plan.barrier));
    }
    updates.add(new MetadataUpdate.SetProperties(properties));
    return new Commit("publishing barrier " + Barriers.format(plan.barrier),
        fenced(sinkPlan.fence, refs(Keys.MAIN_BRANCH, mainHead, stagedHead == null ? null : Keys.STAGED_BRANCH, stagedHead)),
        updates);
  }

  /**
   * §5.3's publish of a new generation, the switch of §6.10 step 3: main to the staged head, {@code consistent.revision}
   * + 1, the watermark T on the staged head (with overrides, §3.6) and, when the sink has no {@code consistent-previous},
   * that branch at main's head as read with {@code consistent.previous}; requires {@code consistent-previous} as read.
   */
  private static Commit switchGeneration(
      EpochPlanner.Plan plan, EpochPlanner.SinkPlan sinkPlan, TableState sink, Long mainHead, long stagedHead,
      Map<String, String> properties) {
    Long previous = sink.head(Keys.PREVIOUS_BRANCH);
    List<MetadataUpdate> updates = new ArrayList<>();
    updates.add(branchRef(Keys.MAIN_BRANCH, stagedHead));
    if (previous == null && mainHead != null) {
      updates.add(branchRef(Keys.PREVIOUS_BRANCH, mainHead));
      properties.putAll(sink.previousProperties());
    }
    properties.put(Keys.REVISION, Long.toString(sink.revision() + 1));
    // overrides for main's history as it is (§3.6); the new floor starts at the staged head
    properties.putAll(sink.watermarkProperties(plan.barrier, mainHead));
    properties.put(Keys.WATERMARK_SNAPSHOT, Long.toString(stagedHead));
    updates.add(new MetadataUpdate.SetProperties(properties));
    Map<String, Long> asserted = refs(Keys.MAIN_BRANCH, mainHead, Keys.STAGED_BRANCH, stagedHead);
    asserted.put(Keys.PREVIOUS_BRANCH, previous);
    return new Commit("publishing barrier " + Barriers.format(plan.barrier), fenced(sinkPlan.fence, asserted), updates);
  }
}
