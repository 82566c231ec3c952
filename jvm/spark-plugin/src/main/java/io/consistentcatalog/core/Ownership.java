package io.consistentcatalog.core;

/**
 * Who may register a job's sink (protocol §6.2), pure: {@code consistent_catalog.ownership.check_can_own}. The
 * conformance corpus compares its answers with Python's ({@code "can-own"} queries).
 */
public final class Ownership {
  private Ownership() {}

  /**
   * {@code describe_holder}: the lease holder as an operator needs it before a takeover, {@code instance
   * 6a3b6f0460c5 (host h, pid 1234, Spark application local-17..., since <time>)}; just the id where no
   * {@code consistent.lease-holder-info} was written (earlier versions).
   */
  public static String describeHolder(TableState state) {
    String text = "instance " + state.leaseHolder();
    String raw = state.properties.get(Keys.LEASE_HOLDER_INFO);
    if (raw == null || raw.isEmpty()) {
      return text;
    }
    java.util.List<String> parts = new java.util.ArrayList<>();
    String host = jsonField(raw, "host");
    String pid = jsonField(raw, "pid");
    String app = jsonField(raw, "app");
    String since = jsonField(raw, "since");
    if (host != null) {
      parts.add("host " + host);
    }
    if (pid != null) {
      parts.add("pid " + pid);
    }
    if (app != null) {
      parts.add("Spark application " + app);
    }
    if (since != null && since.matches("\\d{1,18}")) {
      parts.add("since " + Barriers.format(Long.parseLong(since)));
    }
    return parts.isEmpty() ? text : text + " (" + String.join(", ", parts) + ")";
  }

  /**
   * Refuse registering {@code job} (instance {@code instance}) on {@code state} at {@code now}: a table owned by
   * another job, whatever that job's lease ({@link ErrorKind#OWNERSHIP}, one line naming the owner and the ways out);
   * another live instance of the same job unless {@code takeover}; a sink holding data written outside any job
   * ({@link ErrorKind#INVALID_INPUT}). {@code catalog}: the catalog the way out names; {@code streaming}: the job is a
   * streaming query's option, not a session setting. {@code holderGone}: the caller found that the lease holder's
   * process ({@code consistent.lease-holder-info}) ran on this host and exists no more ({@code HolderInfo.processGone});
   * the refusal then says so and names the takeover, instead of calling the holder live.
   */
  public static void checkCanOwn(
      TableState state, String job, String instance, boolean takeover, long now, String catalog, boolean streaming,
      boolean holderGone) {
    Long until = state.leaseUntil();
    boolean live = until != null && until > now;
    String holder = state.leaseHolder();
    String owner = state.owner();
    if (owner != null && !owner.equals(job)) {
      boolean running = live && holder != null;
      String writeAs = streaming ? "set the query's option consistent.job=" + owner
          : "SET spark.sql.consistent.job=" + owner;
      throw new ConsistentException(ErrorKind.OWNERSHIP, state.identifier, state.identifier + " is owned by job '" + owner
          + "' (" + (running ? "its " + describeHolder(state) + " holds a lease until " + Barriers.format(until)
              : "no instance running") + "); a table has one writer — " + writeAs + " to write it as that job, or hand "
          + "it over" + (running ? " once that instance stopped" : "") + ": CALL " + catalog + ".system.reassign(table => '"
          + state.identifier + "', job => '" + job + "')");
    }
    if (job.equals(state.job()) && live && holder != null && !holder.equals(instance) && !takeover) {
      if (holderGone) {
        throw new ConsistentException(ErrorKind.OWNERSHIP, state.identifier, state.identifier + " is leased to "
            + describeHolder(state) + " of job '" + job + "' until " + Barriers.format(until) + ", but its process pid "
            + holderPid(state) + " on this host is gone (killed or "
            + "crashed); take over: SET spark.sql.consistent.takeover=true (or wait for the lease to lapse)");
      }
      throw new ConsistentException(ErrorKind.OWNERSHIP, state.identifier, state.identifier + " is being written by another "
          + "live " + describeHolder(state) + " of job '" + job + "' until " + Barriers.format(until) + "; stop it, wait for "
          + "the lease to lapse, or, if it is dead, take over: SET spark.sql.consistent.takeover=true");
    }
    String refusal = rootRefusal(state, job, streaming);
    if (refusal != null) {
      throw new ConsistentException(ErrorKind.INVALID_INPUT, state.identifier, refusal);
    }
  }

  /**
   * {@code root_refusal}: why {@code job} may not register on {@code state} because it is a root with a history
   * (protocol §6.1) — rows written outside any job, or ingested, or a declared watermark; null when the table is
   * derived, or an empty root without a watermark. {@code streaming}: the way out names the query's option.
   */
  public static String rootRefusal(TableState state, String job, boolean streaming) {
    if (!state.isRoot()) {
      return null;
    }
    String keepRoot = streaming ? "drop the query's option consistent.job to ingest into it" : "RESET spark.sql.consistent.job to "
        + "ingest into it";
    String wayOut = "a job's sink must start empty — write job '" + job + "' into a new table, or keep " + state.identifier
        + " a root (" + keepRoot + ")";
    if (state.head() != null) {
      Long untracked = state.untrackedAsDerived();
      if (untracked != null) {
        return state.identifier + " already holds data written outside any job (snapshot " + untracked + "); " + wayOut;
      }
      BranchBarriers branch = state.branch(Keys.MAIN_BRANCH);
      for (int i = 0; i < branch.size(); i++) {
        long id = branch.snapshotId(i);
        if (!branch.sameData(null, id)) {
          return state.identifier + " is a root: it holds rows ingested outside any job (snapshot " + id + ", barrier "
              + Barriers.format(branch.barrierAt(i)) + "); " + wayOut;
        }
      }
    }
    Long mark = state.watermarkProperty();
    if (mark != null) {
      return state.identifier + " is a root with a declared watermark (" + Barriers.format(mark) + "): as a job's sink "
          + "it would claim its sources' data up to there before any epoch ran; " + wayOut;
    }
    return null;
  }

  /**
   * The host and process id the lease holder's {@code consistent.lease-holder-info} names (null where absent or not
   * written, as by earlier versions): what a caller needs to tell whether that process still runs on this host.
   */
  public static String holderHost(TableState state) {
    return jsonField(state.properties.get(Keys.LEASE_HOLDER_INFO), "host");
  }

  /** {@link #holderHost}'s process id; null when absent or not a number. */
  public static Long holderPid(TableState state) {
    String pid = jsonField(state.properties.get(Keys.LEASE_HOLDER_INFO), "pid");
    return pid == null || !pid.matches("\\d{1,18}") ? null : Long.valueOf(pid);
  }

  /** A string or number field of the flat JSON object {@code consistent.lease-holder-info} (null: absent). */
  private static String jsonField(String json, String key) {
    if (json == null || json.isEmpty()) {
      return null;
    }
    java.util.regex.Matcher m = java.util.regex.Pattern.compile(
        "\"" + key + "\"\\s*:\\s*(?:\"((?:[^\"\\\\]|\\\\.)*)\"|(-?\\d+))").matcher(json);
    if (!m.find()) {
      return null;
    }
    return m.group(1) != null ? m.group(1) : m.group(2);
  }
}
