package io.consistentcatalog.core;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.UpdateRequirement;

/**
 * The protocol's commits other than an epoch's, as pure plans (protocol §5.6, §6.1-§6.3, §6.9): a port of Python's
 * {@code consistent_catalog.write_plans}, as {@link EpochPlanner}/{@link EpochCommits} are of {@code epoch_plan}/{@code
 * epoch_commits}. Each takes a table's state, the clock, the writer and the inputs, and returns the {@link Commit}: the
 * refs it asserts (the fence as read first, then the refs it builds on), its property updates or, for an ingest, the
 * summary keys of the data snapshot, and whether it takes the fence ({@link FenceMove}) — or throws the protocol's
 * refusal. No I/O, no Spark: the plugin's writers ({@code RootIngest}, {@code JobRegistration}) send what the plan says,
 * and the conformance corpus ({@code "write-commit"} queries) compares the plans with Python's.
 */
public final class WritePlanner {
  /** The barrier of rows without an event time: {@code W + 1} (the clock while the table has no watermark). */
  public static final long LATE = Long.MIN_VALUE;
  /** The lease's properties, in the order a release removes them. */
  public static final List<String> LEASE_KEYS =
      Collections.unmodifiableList(java.util.Arrays.asList(Keys.LEASE_HOLDER, Keys.LEASE_UNTIL, Keys.LEASE_HOLDER_INFO));

  private WritePlanner() {}

  /** {@code TakeFence}: the fence moves to a new empty snapshot in the same commit, from {@code expected}. */
  public static final class FenceMove {
    public final Long expected;
    public final String reason;
    /** The lease holder after the move (the fence snapshot's summary); null: none. */
    public final String holder;
    public final String job;

    public FenceMove(Long expected, String reason, String holder, String job) {
      this.expected = expected;
      this.reason = reason;
      this.holder = holder;
      this.job = job;
    }
  }

  /** One catalog commit as planned (the table uuid is added when it is sent). */
  public static final class Commit {
    public final String what;
    public final List<UpdateRequirement> requirements;
    /** Metadata updates (properties); an ingest's data snapshot and its ref are the writer's. */
    public final List<MetadataUpdate> updates;
    /** The fence moves in the same commit (null: it is only asserted, if at all). */
    public final FenceMove fence;
    /** The summary keys of the data snapshot the commit adds (an ingest's barrier and key). */
    public final Map<String, String> summary;
    /** The sink has no snapshot: the sender adds its genesis (creating it writes a manifest list). */
    public final boolean genesis;

    Commit(String what, List<UpdateRequirement> requirements, List<MetadataUpdate> updates, FenceMove fence,
        Map<String, String> summary, boolean genesis) {
      this.what = what;
      this.requirements = Collections.unmodifiableList(requirements);
      this.updates = Collections.unmodifiableList(updates);
      this.fence = fence;
      this.summary = Collections.unmodifiableMap(summary);
      this.genesis = genesis;
    }

    static Commit metadata(String what, List<UpdateRequirement> requirements, List<MetadataUpdate> updates, FenceMove fence) {
      return new Commit(what, requirements, updates, fence, Collections.<String, String>emptyMap(), false);
    }
  }

  /** An ingest as planned (§5.6): skipped because its key landed ({@link #skippedBy}), or the commit landing it. */
  public static final class IngestPlan {
    public final String table;
    public final String key;
    /** The barrier written, {@code max(wanted, W + 1)}; for a skipped ingest, that of the snapshot holding the key. */
    public final Long barrier;
    /** The snapshot on main that already holds the key (null: not skipped). */
    public final Long skippedBy;
    public final Commit commit;

    IngestPlan(String table, String key, Long barrier, Long skippedBy, Commit commit) {
      this.table = table;
      this.key = key;
      this.barrier = barrier;
      this.skippedBy = skippedBy;
      this.commit = commit;
    }
  }

  /** Python's {@code repr()} of a string (the quotes it picks; backslashes escaped), as the commits' names show it. */
  static String repr(String text) {
    if (text.contains("'") && !text.contains("\"")) {
      return "\"" + text.replace("\\", "\\\\") + "\"";
    }
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'";
  }

  private static List<UpdateRequirement> refsAt(String ref, Long head) {
    List<UpdateRequirement> out = new ArrayList<>();
    out.add(new UpdateRequirement.AssertRefSnapshotID(ref, head));
    return out;
  }

  // --- roots (§5.6) ---------------------------------------------------------------------------------------

  /** {@code check_not_future}: refuse {@code barrier} beyond {@code now} plus the table's clock-skew allowance. */
  public static void checkNotFuture(TableState state, long barrier, boolean allowFuture, String what, long now, String wayOut) {
    if (barrier > now + state.clockSkewMs() && !allowFuture) {
      throw new ConsistentException(ErrorKind.INVALID_BARRIER, state.identifier, state.identifier + ": " + what + " "
          + Barriers.format(barrier) + " lies in the future, " + (barrier - now) + " ms ahead of the clock (allowed: "
          + state.clockSkewMs() + " ms of clock skew, table property consistent.clock-skew-ms); a barrier ahead of the clock holds every later "
          + "ingest there — " + (wayOut == null ? "pass the current time" : wayOut));
    }
  }

  /**
   * {@code write_plans.ingest}: one ingest into the root {@code state}, keyed or not ({@code key} null), at {@code
   * barrier} (null: {@code now}; {@link #LATE}: rows without an event time). A key already on main skips it; the
   * barrier written is {@code max(barrier, W + 1)}, refused beyond the clock-skew allowance ({@code wayOut} names
   * what to do); the commit asserts the fence and main as read.
   */
  public static IngestPlan ingest(
      TableState state, long now, Long barrier, String key, boolean allowFuture, String wayOut) {
    if (key != null && key.trim().isEmpty()) {
      throw new ConsistentException(ErrorKind.INVALID_INPUT, state.identifier,
          "an ingest key must be a non-empty string (e.g. the source's batch or file id)");
    }
    if (!state.isRoot()) {
      throw new ConsistentException(ErrorKind.INVALID_INPUT, state.identifier, state.identifier + " is derived from "
          + String.join(", ", state.sources()) + "; only root tables take ingested data");
    }
    if (key != null) {
      Long done = state.ingestedWithKey(key);
      if (done != null) {
        return new IngestPlan(state.identifier, key, state.branch(Keys.MAIN_BRANCH).barrierOf(done), done, null);
      }
    }
    Long current = state.watermark();
    long wanted;
    if (barrier == null) {
      wanted = now;
    } else if (barrier == LATE) {
      wanted = current == null ? now : current + 1;
    } else {
      wanted = barrier;
    }
    checkNotFuture(state, wanted, allowFuture, "barrier", now, wayOut);
    long effective = current == null || wanted > current ? wanted : current + 1; // late rows never change a completed barrier (§3.2)
    Map<String, String> summary = new LinkedHashMap<>();
    summary.put(Keys.BARRIER, Long.toString(effective));
    if (key != null) {
      summary.put(Keys.INGEST_KEY, key);
    }
    Map<String, Long> refs = new LinkedHashMap<>();
    refs.put(Keys.MAIN_BRANCH, state.head());
    Commit commit = new Commit(key == null ? "ingesting" : "ingesting key " + repr(key),
        EpochCommits.fenced(state.head(Keys.FENCE_BRANCH), refs), Collections.<MetadataUpdate>emptyList(), null, summary,
        false);
    return new IngestPlan(state.identifier, key, effective, null, commit);
  }

  private static Commit advance(TableState state, long value, String what) {
    List<MetadataUpdate> updates = new ArrayList<>();
    updates.add(new MetadataUpdate.SetProperties(state.watermarkProperties(value)));
    return Commit.metadata(what, refsAt(Keys.MAIN_BRANCH, state.head()), updates,
        new FenceMove(state.head(Keys.FENCE_BRANCH), "advance", state.leaseHolder(), state.properties.get(Keys.JOB)));
  }

  /**
   * {@code write_plans.advance_watermark}: declare the idle root complete up to {@code barrier}; null when it already
   * is. Refused on a derived table, beyond the clock-skew allowance and below the watermark (it never moves back).
   */
  public static Commit advanceWatermark(TableState state, long barrier, long now, boolean allowFuture) {
    if (!state.isRoot()) {
      String writer = state.job() != null ? state.job() : state.lastWriter() != null ? state.lastWriter() : "-";
      throw new ConsistentException(ErrorKind.INVALID_INPUT, state.identifier, state.identifier + " is derived (written "
          + "by job " + writer + "); its watermark advances when its job runs an epoch — advance the watermark of its "
          + "root tables instead");
    }
    checkNotFuture(state, barrier, allowFuture, "watermark", now, null);
    Long current = state.watermark();
    if (current != null && barrier <= current) {
      if (barrier == current) {
        return null;
      }
      throw new ConsistentException(ErrorKind.INVALID_BARRIER, state.identifier, state.identifier + " is already "
          + "complete up to " + Barriers.format(current) + "; a watermark never moves back — nothing was changed");
    }
    return advance(state, barrier, "advancing the watermark");
  }

  /**
   * {@code write_plans.idle_advance}: advance a root to {@code target} (null: {@code now} minus its declared idle
   * allowance) when it is behind; null when it is not a root, not declared idle (without a target) or not behind.
   */
  public static Commit idleAdvance(TableState state, long now, Long target) {
    if (!state.isRoot()) {
      return null;
    }
    if (target == null) {
      Long after = state.idleAfterMs();
      if (after == null) {
        return null;
      }
      target = now - after;
    }
    Long current = state.watermark();
    if (current != null && target <= current) {
      return null;
    }
    return advance(state, target, "advancing the watermark of idle root " + state.identifier);
  }

  // --- ownership (§6.1-§6.3, §6.9) ------------------------------------------------------------------------

  /**
   * {@code write_plans.register}: {@code job} (instance {@code instance}) becomes the writer of the sink {@code state}:
   * the ownership properties and a lease until {@code now + leaseMs}, the fence taken; an empty sink gets its genesis
   * in the same commit with main asserted absent. Refused ({@link Ownership#checkCanOwn}, naming {@code catalog} and
   * whether the job is a {@code streaming} query's) while another job owns it or another live instance holds it
   * ({@code holderGone}: the caller found the holder's process gone from this host, which the refusal then says).
   */
  public static Commit register(
      TableState state, String job, Collection<String> sources, String instance, boolean takeover, long now, long leaseMs,
      String holderInfo, String catalog, boolean streaming, boolean holderGone) {
    Ownership.checkCanOwn(state, job, instance, takeover, now, catalog, streaming, holderGone);
    boolean genesis = state.head() == null;
    Map<String, String> owned = new LinkedHashMap<>();
    owned.put(Keys.JOB, job);
    owned.put(Keys.SOURCES, EpochPlanner.encodeTableSources(sources));
    owned.put(Keys.LEASE_HOLDER, instance);
    owned.put(Keys.LEASE_UNTIL, Long.toString(now + leaseMs));
    owned.put(Keys.LEASE_HOLDER_INFO, holderInfo);
    List<MetadataUpdate> updates = new ArrayList<>();
    updates.add(new MetadataUpdate.SetProperties(owned));
    return new Commit("registering job " + repr(job),
        genesis ? refsAt(Keys.MAIN_BRANCH, null) : new ArrayList<UpdateRequirement>(), updates,
        new FenceMove(state.head(Keys.FENCE_BRANCH), "register", instance, job), Collections.<String, String>emptyMap(),
        genesis);
  }

  /**
   * {@code write_plans.unregister}: release the lease of {@code instance}, the fence as read asserted; null when
   * another instance holds it now. {@code consistent.job} stays: the job keeps owning the table.
   */
  public static Commit unregister(TableState state, String job, String instance) {
    if (!instance.equals(state.leaseHolder())) {
      return null;
    }
    Set<String> removals = new LinkedHashSet<>();
    for (String key : LEASE_KEYS) {
      if (state.properties.containsKey(key)) {
        removals.add(key);
      }
    }
    List<MetadataUpdate> updates = new ArrayList<>();
    updates.add(new MetadataUpdate.RemoveProperties(removals));
    return Commit.metadata("unregistering job " + repr(job),
        EpochCommits.fenced(state.head(Keys.FENCE_BRANCH), Collections.<String, Long>emptyMap()), updates, null);
  }

  /** {@code write_plans.renew}: extend the lease of {@code instance} to {@code until}; FENCED when it is not its own. */
  public static Commit renew(TableState state, String job, String instance, long until) {
    String holder = state.leaseHolder();
    String owner = state.properties.get(Keys.JOB);
    if (!job.equals(owner) || !instance.equals(holder)) {
      throw new ConsistentException(ErrorKind.FENCED, state.identifier, state.identifier + ": renewing the lease of job "
          + repr(job) + " was refused: the table is now written by job " + owner + " instance " + holder
          + ", not by this instance (" + instance + "); stop this instance");
    }
    List<MetadataUpdate> updates = new ArrayList<>();
    updates.add(new MetadataUpdate.SetProperties(Collections.singletonMap(Keys.LEASE_UNTIL, Long.toString(until))));
    return Commit.metadata("renewing the lease of job " + repr(job),
        EpochCommits.fenced(state.head(Keys.FENCE_BRANCH), Collections.<String, Long>emptyMap()), updates, null);
  }

  /**
   * {@code write_plans.reassign} (§6.9): hand the derived table to {@code toJob}: {@code consistent.job} set, the lease
   * removed, the fence taken; null when {@code toJob} owns it already and no instance holds a live lease. Refused for
   * a root and while an instance holds a live lease (unless {@code takeover}); {@code catalog} names the way out.
   */
  public static Commit reassign(TableState state, String toJob, boolean takeover, long now, String catalog) {
    String name = state.identifier;
    if (toJob == null || toJob.trim().isEmpty()) {
      throw new ConsistentException(ErrorKind.INVALID_INPUT, name, "reassign needs the job to hand the table to, not an "
          + "empty id");
    }
    if (state.isRoot()) {
      throw new ConsistentException(ErrorKind.INVALID_INPUT, name, name + " is a root: a root has no owning job (it is "
          + "written by ingests); reassign hands a derived table to another job");
    }
    String from = state.owner();
    Long until = state.leaseUntil();
    String holder = state.leaseHolder();
    boolean live = holder != null && until != null && until > now;
    if (live && !takeover) {
      throw new ConsistentException(ErrorKind.OWNERSHIP, name, name + " is being written by job '" + from + "' ("
          + Ownership.describeHolder(state) + ", lease until " + Barriers.format(until) + "); stop that job first, or, if "
          + "it is dead, CALL " + catalog + ".system.reassign(table => '" + name + "', job => '" + toJob
          + "', takeover => true)");
    }
    if (toJob.equals(from) && !live) {
      return null;
    }
    List<MetadataUpdate> updates = new ArrayList<>();
    updates.add(new MetadataUpdate.SetProperties(Collections.singletonMap(Keys.JOB, toJob)));
    Set<String> lease = new LinkedHashSet<>();
    for (String key : LEASE_KEYS) {
      if (state.properties.containsKey(key)) {
        lease.add(key);
      }
    }
    if (!lease.isEmpty()) {
      updates.add(new MetadataUpdate.RemoveProperties(lease));
    }
    return Commit.metadata("reassigning " + name + " to job " + repr(toJob), new ArrayList<UpdateRequirement>(), updates,
        new FenceMove(state.head(Keys.FENCE_BRANCH), "reassign", null, toJob));
  }
}
