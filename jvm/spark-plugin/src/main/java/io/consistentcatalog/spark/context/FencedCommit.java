package io.consistentcatalog.spark.context;

import io.consistentcatalog.core.CatalogFaults;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.ErrorKind;
import io.consistentcatalog.core.RetryPolicy;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.SnapshotRef;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.UpdateRequirement;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.ImmutableTableCommit;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.rest.CatalogHandlers;
import org.apache.iceberg.rest.RESTCatalog;
import org.apache.iceberg.rest.requests.UpdateTableRequest;

/**
 * One catalog commit of metadata updates that lands only if the given requirements hold, validated inside
 * the catalog's compare-and-swap (protocol §6.3) — the JVM side of Python's {@code TableStore.commit}.
 *
 * <p>A REST catalog gets the requirements and updates as they are ({@code POST /v1/transactions/commit}
 * through {@link RESTCatalog#commitTransaction}, the server validates them); any other catalog (JDBC)
 * commits them the way Iceberg's REST handlers do ({@link CatalogHandlers#updateTable}: the requirements are
 * checked against the current metadata and the pointer swap requires that very metadata file).
 *
 * <p>A refused requirement is {@code FENCED}. A commit whose answer was lost (a 5xx, a timeout, a dropped
 * connection) is settled (protocol §6.8): the table is read back, a commit found there is taken as landed,
 * one not found is sent again, until the catalog's {@code consistent.retry-deadline}. Against a REST server that
 * advertises an {@code idempotency-key-lifetime}, Iceberg's REST client (1.11+) puts an {@code Idempotency-Key} on
 * the transactions POST, and from 1.12 sends it again under that key after a lost answer: the server's first answer
 * then reaches this class and nothing is read back (protocol §6.8; on 1.11 a lost answer is read back here).
 */
public final class FencedCommit {
  private final Catalog catalog;
  private final String catalogName;
  private final long deadlineMs;
  /** The catalog's probe result and property limits, checked before a commit is sent (protocol §6.5). */
  private final CatalogGuard guard;
  /** Whether the catalog was checked not to be a REST catalog behind another one (checked once). */
  private volatile boolean wrappedRestChecked;

  public FencedCommit(Catalog catalog, String catalogName, long deadlineMs, CatalogGuard guard) {
    this.catalog = catalog;
    this.catalogName = catalogName;
    this.deadlineMs = deadlineMs;
    this.guard = guard;
  }

  Catalog catalog() {
    return catalog;
  }

  /** The same catalog with another deadline (a shutdown hook must not wait minutes for a catalog that is gone). */
  public FencedCommit withDeadline(long deadlineMs) {
    return new FencedCommit(catalog, catalogName, deadlineMs, guard);
  }

  long deadlineMs() {
    return deadlineMs;
  }

  /** {@code refs_at}: one {@code assert-ref-snapshot-id} per ref (null: the ref must be absent). */
  static List<UpdateRequirement> refsAt(Map<String, Long> heads) {
    List<UpdateRequirement> out = new ArrayList<>();
    for (Map.Entry<String, Long> e : heads.entrySet()) {
      out.add(new UpdateRequirement.AssertRefSnapshotID(e.getKey(), e.getValue()));
    }
    return out;
  }

  /** Refuse a catalog that failed the catalog probe, or has none recorded where writers require it (§6.5). */
  void requireSound() {
    guard.requireSound(catalog, load -> retrying("reading the catalog probe's result", load));
  }

  /** The table as the catalog holds it now (faults waited out). */
  public Table load(TableIdentifier ident) {
    return Faults.retrying(catalogName, "loading " + ident, deadlineMs, () -> catalog.loadTable(ident));
  }

  /** {@code call} (a read, or a call safe to repeat) with faults waited out until the deadline ({@link Faults#retrying}). */
  <T> T retrying(String what, java.util.concurrent.Callable<T> call) {
    return Faults.retrying(catalogName, what, deadlineMs, call);
  }

  public static TableMetadata metadata(Table table) {
    return ((HasTableOperations) table).operations().current();
  }

  /** The protocol's view of {@code table} as loaded ({@code name}: its {@code ns.t}). */
  public static io.consistentcatalog.core.TableState state(String name, Table table) {
    return io.consistentcatalog.core.TableState.fromMetadata(name, metadata(table));
  }

  /**
   * Commit {@code updates} to the table {@code base} was read from, requiring {@code requirements} and the
   * table's uuid; returns the metadata after the commit. {@code what} names the commit in errors.
   */
  TableMetadata commit(
      TableIdentifier ident, TableMetadata base, List<UpdateRequirement> requirements, List<MetadataUpdate> updates, String what) {
    return commit(ident, base, requirements, updates, what, true);
  }

  /**
   * {@link #commit}; {@code readBack} false: the caller needs no metadata after it (an epoch's publish, its last
   * commit), so a REST catalog's answer without one (204) is not followed by a load, and null is returned. A commit
   * whose answer was lost is still read back to settle it.
   */
  TableMetadata commit(
      TableIdentifier ident, TableMetadata base, List<UpdateRequirement> requirements, List<MetadataUpdate> updates,
      String what, boolean readBack) {
    guard.checkPropertySizes(ident.toString(), updates);
    requireSound();
    List<UpdateRequirement> sent = new ArrayList<>(requirements);
    sent.add(new UpdateRequirement.AssertTableUUID(base.uuid()));
    RuntimeException last = null;
    boolean maybeLanded = false; // a fault that may have come after the commit was applied: look for it first
    RetryPolicy.Attempts attempts = RetryPolicy.forFaults(deadlineMs).start(); // one deadline for sends and read-backs
    while (attempts.next()) {
      try {
        if (maybeLanded) {
          TableMetadata now = metadata(catalog.loadTable(ident));
          if (landed(now, updates)) {
            return now;
          }
        }
        TableMetadata committed = send(ident, sent, updates);
        if (committed != null || !readBack) {
          return committed;
        }
        maybeLanded = true; // landed; what it made is read now (a fault on the way: read again on the next attempt)
        return metadata(catalog.loadTable(ident));
      } catch (CommitFailedException e) {
        // Believed only once the table is read back without the commit: after a lost answer the lost attempt may
        // have landed meanwhile (a slow server), and Iceberg's JDBC connection pool sends a statement again by
        // itself after it reconnected (JdbcClientPool), so a commit that landed can come back refused.
        if (maybeLanded || !(catalog instanceof RESTCatalog)) {
          TableMetadata now = metadata(load(ident));
          if (recognisable(updates) && landed(now, updates)) {
            return now;
          }
        }
        throw new Refused(ident.toString(),
            ident + ": " + what + " was refused by the catalog (" + firstLine(e) + "): the table changed since it was "
                + "planned (another writer, a takeover, a revision); nothing of this commit landed");
      } catch (RuntimeException e) {
        CatalogFaults.Fault fault = CatalogFaults.of(e);
        if (fault == null) {
          throw e;
        }
        last = e;
        // Nothing was sent only when a SQL catalog's connection could not be had (refused, starting up, locked): a
        // REST 503 or 429 to a commit may come from a gateway that forwarded it (as in Python, §6.8)
        maybeLanded |= fault == CatalogFaults.Fault.UNKNOWN || catalog instanceof RESTCatalog;
        Faults.record(catalogName, what.contains(ident.toString()) ? what : what + " on " + ident, e);
        if (maybeLanded && !recognisable(updates)) { // an unrecognisable commit is never sent twice
          break;
        }
      }
    }
    String landed = maybeLanded ? "unknown" + addedSnapshot(updates) : "no";
    String fault = last == null ? "interrupted" : "last: " + Faults.describe(last);
    throw new ConsistentException(ErrorKind.CATALOG_UNAVAILABLE, ident.toString(),
        "catalog " + catalogName + " did not answer " + (what.contains(ident.toString()) ? what : what + " on " + ident)
            + " for " + (deadlineMs / 1000.0)
            + " s (" + fault + "); landed: " + landed + ". Check that the catalog is up and reachable, then run the "
            + "statement again: it re-plans from the catalog and never doubles an epoch or a keyed ingest (the catalog "
            + "option " + Faults.DEADLINE + " sets how long to wait)");
  }

  /** {@code " (snapshot N, which `consistent-catalog history` lists if it landed)"} for a commit that adds one. */
  private static String addedSnapshot(List<MetadataUpdate> updates) {
    for (MetadataUpdate update : updates) {
      if (update instanceof MetadataUpdate.AddSnapshot) {
        return " (snapshot " + ((MetadataUpdate.AddSnapshot) update).snapshot().snapshotId()
            + ", which `consistent-catalog history TABLE` lists if it landed)";
      }
    }
    return "";
  }

  /** Sends one commit; returns the metadata it produced when the catalog's answer carries it (null: load it). */
  private TableMetadata send(TableIdentifier ident, List<UpdateRequirement> requirements, List<MetadataUpdate> updates) {
    if (catalog instanceof RESTCatalog) {
      ((RESTCatalog) catalog).commitTransaction(
          ImmutableTableCommit.builder().identifier(ident).requirements(requirements).updates(updates).build());
      return null; // the transactions route answers 204: no metadata
    }
    checkNotWrappedRest(ident);
    return CatalogHandlers.updateTable(catalog, ident, UpdateTableRequest.create(ident, requirements, updates)).tableMetadata();
  }

  /** Refuse a REST catalog behind another catalog (a caching catalog): Iceberg's REST operations would replace our requirements. */
  private void checkNotWrappedRest(TableIdentifier ident) {
    if (wrappedRestChecked) {
      return;
    }
    Table table = catalog.loadTable(ident);
    TableOperations ops = table instanceof BaseTable ? ((BaseTable) table).operations() : null;
    if (ops != null && ops.getClass().getSimpleName().startsWith("REST")) {
      throw new IllegalStateException("catalog " + catalogName + " wraps a REST catalog (a caching catalog?); set "
          + "spark.sql.catalog." + catalogName + ".cache-enabled=false so that fenced commits reach the server as they are");
    }
    wrappedRestChecked = true;
  }

  /**
   * {@code landed_in}: whether {@code metadata} holds the commit of {@code updates}: every snapshot it adds,
   * every ref where it set it, every property as it set it and none it removed.
   */
  static boolean landed(TableMetadata metadata, List<MetadataUpdate> updates) {
    for (MetadataUpdate update : updates) {
      if (update instanceof MetadataUpdate.AddSnapshot) {
        if (metadata.snapshot(((MetadataUpdate.AddSnapshot) update).snapshot().snapshotId()) == null) {
          return false;
        }
      } else if (update instanceof MetadataUpdate.SetSnapshotRef) {
        MetadataUpdate.SetSnapshotRef set = (MetadataUpdate.SetSnapshotRef) update;
        SnapshotRef ref = metadata.ref(set.name());
        if (ref == null || ref.snapshotId() != set.snapshotId()) {
          return false;
        }
      } else if (update instanceof MetadataUpdate.SetProperties) {
        for (Map.Entry<String, String> e : ((MetadataUpdate.SetProperties) update).updated().entrySet()) {
          if (!Objects.equals(metadata.properties().get(e.getKey()), e.getValue())) {
            return false;
          }
        }
      } else if (update instanceof MetadataUpdate.RemoveProperties) {
        for (String key : ((MetadataUpdate.RemoveProperties) update).removed()) {
          if (metadata.properties().containsKey(key)) {
            return false;
          }
        }
      } else if (update instanceof MetadataUpdate.RemoveSnapshotRef) {
        if (metadata.ref(((MetadataUpdate.RemoveSnapshotRef) update).name()) != null) {
          return false;
        }
      } else if (!(update instanceof MetadataUpdate.RemoveSnapshots)) {
        return false; // never taken for landed (recognisable() keeps such commits from being resent)
      }
    }
    return true;
  }

  /**
   * {@code recognisable}: whether a landed commit of {@code updates} can be told from the table — a commit that
   * adds a snapshot (by its id, exact), or one made only of ref and property changes (by all of its effects;
   * such commits are idempotent). Anything else is never sent again after a lost answer.
   */
  static boolean recognisable(List<MetadataUpdate> updates) {
    boolean adds = false;
    for (MetadataUpdate update : updates) {
      if (update instanceof MetadataUpdate.AddSnapshot) {
        adds = true;
      } else if (!(update instanceof MetadataUpdate.SetSnapshotRef || update instanceof MetadataUpdate.SetProperties
          || update instanceof MetadataUpdate.RemoveProperties || update instanceof MetadataUpdate.RemoveSnapshots
          || update instanceof MetadataUpdate.RemoveSnapshotRef)) {
        return false;
      }
    }
    return adds || !updates.isEmpty();
  }

  public static String firstLine(Throwable e) {
    return String.valueOf(e.getMessage()).split("\\R", 2)[0];
  }

  static List<MetadataUpdate> list(MetadataUpdate... updates) {
    List<MetadataUpdate> out = new ArrayList<>();
    Collections.addAll(out, updates);
    return out;
  }

  /** A commit the catalog refused: nothing of it landed, so what it wrote may be deleted ({@code CleanableFailure}). */
  static final class Refused extends ConsistentException implements org.apache.iceberg.exceptions.CleanableFailure {
    Refused(String table, String message) {
      super(ErrorKind.FENCED, table, message);
    }
  }
}
