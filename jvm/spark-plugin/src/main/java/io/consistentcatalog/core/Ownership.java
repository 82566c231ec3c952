package io.consistentcatalog.core;

/**
 * Who may register a job's sink (protocol §6.2), pure: {@code consistent_catalog.ownership.check_can_own}. The
 * conformance corpus compares its answers with Python's ({@code "can-own"} queries).
 */
public final class Ownership {
  private Ownership() {}

  /**
   * Refuse registering {@code job} (instance {@code instance}) on {@code state} at {@code now}: a table owned by
   * another job, whatever that job's lease ({@link ErrorKind#OWNERSHIP}, one line naming the owner and the ways out);
   * another live instance of the same job unless {@code takeover}; a sink holding data written outside any job
   * ({@link ErrorKind#INVALID_INPUT}). {@code catalog}: the catalog the way out names; {@code streaming}: the job is a
   * streaming query's option, not a session setting.
   */
  public static void checkCanOwn(
      TableState state, String job, String instance, boolean takeover, long now, String catalog, boolean streaming) {
    Long until = state.leaseUntil();
    boolean live = until != null && until > now;
    String holder = state.leaseHolder();
    String owner = state.owner();
    if (owner != null && !owner.equals(job)) {
      boolean running = live && holder != null;
      String writeAs = streaming ? "set the query's option consistent.job=" + owner
          : "SET spark.sql.consistent.job=" + owner;
      throw new ConsistentException(ErrorKind.OWNERSHIP, state.identifier, state.identifier + " is owned by job '" + owner
          + "' (" + (running ? "its instance " + holder + " holds a lease until " + Barriers.format(until)
              : "no instance running") + "); a table has one writer — " + writeAs + " to write it as that job, or hand "
          + "it over" + (running ? " once that instance stopped" : "") + ": CALL " + catalog + ".system.reassign(table => '"
          + state.identifier + "', job => '" + job + "')");
    }
    if (job.equals(state.job()) && live && holder != null && !holder.equals(instance) && !takeover) {
      throw new ConsistentException(ErrorKind.OWNERSHIP, state.identifier, state.identifier + " is being written by another "
          + "live instance (" + holder + ") of job '" + job + "' until " + Barriers.format(until) + "; stop it, wait for "
          + "the lease to lapse, or, if it is dead, take over: SET spark.sql.consistent.takeover=true");
    }
    if (state.isRoot() && state.head() != null) {
      Long untracked = state.untrackedAsDerived();
      if (untracked != null) {
        throw new ConsistentException(ErrorKind.INVALID_INPUT, state.identifier, state.identifier + " already holds data "
            + "written outside any job (snapshot " + untracked + "); a job's sink must start empty — create a new table "
            + "for the job (or RESET spark.sql.consistent.job to ingest into it as a root)");
      }
    }
  }
}
