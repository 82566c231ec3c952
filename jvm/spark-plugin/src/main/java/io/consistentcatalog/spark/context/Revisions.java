package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.EpochPlanner;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.Keys;
import io.consistentcatalog.core.TableState;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.UpdateRequirement;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.NoSuchTableException;

/**
 * A revision in §8's {@code full} mode, as a job whose definition changed carries it out (§6.10): the sink and every
 * table downstream of it are emptied, upstream first, one fenced commit per table ({@code consistent_catalog.revise}
 * with {@code mode="full"}): {@code main} and {@code consistent-staged} removed, the watermark removed,
 * {@code consistent.revision} bumped, the fence taken (reason {@code revise}, keeping the holder), asserting
 * {@code main} and {@code consistent-staged} as read. Their jobs rebuild them.
 */
public final class Revisions {
  private static final int ATTEMPTS = 10;

  private Revisions() {}

  /** {@code affected_tables}: {@code table} and every table downstream of it in {@code states}, sources first. */
  static List<String> affected(String table, Map<String, TableState> states) {
    Set<String> found = new TreeSet<>(EpochPlanner.CODE_POINT_ORDER);
    found.add(table);
    boolean grew = true;
    while (grew) {
      grew = false;
      for (Map.Entry<String, TableState> e : states.entrySet()) {
        if (found.contains(e.getKey())) {
          continue;
        }
        for (String source : sources(e.getValue())) {
          if (found.contains(source)) {
            found.add(e.getKey());
            grew = true;
            break;
          }
        }
      }
    }
    List<String> order = new ArrayList<>();
    Set<String> left = new TreeSet<>(EpochPlanner.CODE_POINT_ORDER);
    left.addAll(found);
    while (!left.isEmpty()) {
      String next = null;
      for (String candidate : left) {
        boolean ready = true;
        TableState state = states.get(candidate);
        for (String source : state == null ? new ArrayList<String>() : sources(state)) {
          if (left.contains(source) && !source.equals(candidate)) {
            ready = false;
            break;
          }
        }
        if (ready) {
          next = candidate;
          break;
        }
      }
      if (next == null) { // a cycle in malformed lineage: the rest in name order
        order.addAll(left);
        break;
      }
      order.add(next);
      left.remove(next);
    }
    return order;
  }

  private static List<String> sources(TableState state) {
    try {
      return state.sources();
    } catch (ConsistentException e) {
      return new ArrayList<>();
    }
  }

  /** Revise {@code table} and everything downstream ({@code states}: the catalog's lineage) in full mode; returns the tables emptied. */
  public static List<String> reviseFull(FencedCommit committer, String table, Map<String, TableState> states, long barrier) {
    List<String> emptied = new ArrayList<>();
    for (String name : affected(table, states)) {
      if (reviseTable(committer, name, barrier)) {
        emptied.add(name);
      }
    }
    return emptied;
  }

  private static boolean reviseTable(FencedCommit committer, String name, long barrier) {
    TableIdentifier ident = Names.icebergIdentifier(name);
    String what = "revising to barrier " + Barriers.format(barrier);
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
      Table table;
      try {
        table = committer.load(ident);
      } catch (NoSuchTableException e) {
        return false; // dropped meanwhile
      }
      TableMetadata base = FencedCommit.metadata(table);
      TableState state = TableState.fromMetadata(name, base);
      if (state.isRoot()) {
        return false; // a job's definition never revises a root
      }
      Long main = state.head();
      Long staged = state.head(Keys.STAGED_BRANCH);
      if (main == null && state.watermark() == null && !state.stagedAhead()) {
        return false; // empty already: no commit, no revision bump
      }
      List<MetadataUpdate> updates = new ArrayList<>();
      for (String branch : new String[] {Keys.MAIN_BRANCH, Keys.STAGED_BRANCH}) {
        if (base.ref(branch) != null) {
          updates.add(new MetadataUpdate.RemoveSnapshotRef(branch));
        }
      }
      Set<String> removals = new TreeSet<>();
      for (String key : new String[] {Keys.WATERMARK, Keys.WATERMARK_SNAPSHOT}) {
        if (base.properties().containsKey(key)) {
          removals.add(key);
        }
      }
      if (!removals.isEmpty()) {
        updates.add(new MetadataUpdate.RemoveProperties(removals));
      }
      Map<String, String> properties = new LinkedHashMap<>();
      properties.put(Keys.REVISION, Long.toString(state.revision() + 1));
      updates.add(new MetadataUpdate.SetProperties(properties));
      List<UpdateRequirement> requirements = new ArrayList<>();
      requirements.add(new UpdateRequirement.AssertRefSnapshotID(Keys.MAIN_BRANCH, main));
      requirements.add(new UpdateRequirement.AssertRefSnapshotID(Keys.STAGED_BRANCH, staged));
      JobRegistration.takeFence(((HasTableOperations) table).operations(), base, state.head(Keys.FENCE_BRANCH), "revise",
          base.properties().get(Keys.LEASE_HOLDER), base.properties().get(Keys.JOB), base.lastSequenceNumber() + 1,
          requirements, updates);
      try {
        JobRegistration.commitTakingFence(committer, ((HasTableOperations) table).operations(), ident, base,
            requirements, updates, what);
        return true;
      } catch (FencedCommit.Refused e) {
        // a job or ingest committed meanwhile: plan this table again
      }
    }
    throw new ConsistentException(ErrorKind.FENCED, name, name + ": revision to barrier " + Barriers.format(barrier)
        + " kept conflicting with other commits; run the statement again");
  }
}
