package io.consistentcatalog.bench;

import io.consistentcatalog.spark.ConsistentSparkCatalog;
import io.consistentcatalog.spark.read.ResolutionTimings;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.QueryPlanningTracker;
import org.apache.spark.sql.catalyst.QueryPlanningTracker$;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import scala.Option;
import scala.runtime.AbstractFunction0;

/**
 * The cost of a query's table loads through the consistent catalog against the plain catalog, inside
 * one JVM (bench/bench_plugin.py calls {@link #run} through py4j, with build/jvm/spark-plugin-tests.jar
 * in spark.jars: a benchmark main, not part of the plugin jar). Each repetition times:
 *
 * <ul>
 *   <li>plain_first: the plain catalog loads the first table; plain_all: it loads every table (what a
 *       query over all of them costs);
 *   <li>plugin_first_cold / plugin_all_cold: one statement (a query planning) through the consistent
 *       catalog with its caches dropped: the first load lists the catalog, loads every table, resolves
 *       the cut; the other loads are served from it;
 *   <li>plugin_first_warm / plugin_all_warm: the same in the next statement, nothing changed meanwhile
 *       (the listing again; a table not at the listed metadata file any more is refreshed).
 * </ul>
 *
 * Every served table's schema is read too (what analysis does). The first {@code warmup} repetitions
 * are dropped (JIT); returns medians in ms as JSON. Several consistent catalogs (e.g. the same one with
 * different {@code load-threads}) are timed in the same repetitions, interleaved, so each sees the same
 * machine and the same JIT state.
 *
 * <p>The consistent catalog loads a component's tables on several threads (catalog option
 * {@code load-threads}), so besides wall time the CPU time is measured: plain_all_cpu is the querying
 * thread's, plugin_first_cold_cpu the querying thread's plus the loading threads' (cold_workers_cpu).
 */
public final class FirstLoad {
  private FirstLoad() {}

  private interface Body {
    void run() throws Exception;
  }

  private static double timed(Body body) throws Exception {
    long start = System.nanoTime();
    body.run();
    return (System.nanoTime() - start) / 1e6;
  }

  private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

  /** This thread's CPU time in ms. */
  private static double cpu() {
    return THREADS.getCurrentThreadCpuTime() / 1e6;
  }

  private static void inStatement(Body body) throws Exception {
    QueryPlanningTracker tracker = new QueryPlanningTracker(Option.empty());
    Exception[] failed = new Exception[1];
    QueryPlanningTracker$.MODULE$.withTracker(
        tracker,
        new AbstractFunction0<Object>() {
          @Override
          public Object apply() {
            try {
              body.run();
            } catch (Exception e) {
              failed[0] = e;
            }
            return null;
          }
        });
    if (failed[0] != null) {
      throw failed[0];
    }
  }

  private static void load(TableCatalog catalog, Identifier id) throws Exception {
    Table table = catalog.loadTable(id);
    table.schema();
  }

  /** The median of each series, in ms, as JSON members. */
  private static void medians(StringBuilder json, Map<String, List<Double>> times) {
    for (Map.Entry<String, List<Double>> e : times.entrySet()) {
      List<Double> values = new ArrayList<>(e.getValue());
      Collections.sort(values);
      double median = values.isEmpty() ? 0 : values.get(values.size() / 2);
      if (json.charAt(json.length() - 1) != '{') {
        json.append(',');
      }
      json.append('"').append(e.getKey()).append("\":").append(String.format(java.util.Locale.ROOT, "%.4f", median));
    }
  }

  private static Map<String, List<Double>> series(String... keys) {
    Map<String, List<Double>> times = new LinkedHashMap<>();
    for (String key : keys) {
      times.put(key, new ArrayList<>());
    }
    return times;
  }

  /**
   * Time {@code tables} through the plain catalog and through each of the consistent catalogs
   * {@code consistents} (comma-separated) in every repetition, in an order rotated by one each
   * repetition. Returns {catalog: medians}; the ratios (cold_over_plain_all, cold_cpu_over_plain_cpu)
   * are medians of the ratios within each repetition.
   */
  public static String run(SparkSession spark, String plain, String consistents, String tables, int repeat, int warmup)
      throws Exception {
    TableCatalog plainCatalog = (TableCatalog) spark.sessionState().catalogManager().catalog(plain);
    List<String> names = new ArrayList<>();
    List<ConsistentSparkCatalog> catalogs = new ArrayList<>();
    for (String name : consistents.split(",")) {
      names.add(name.trim());
      catalogs.add((ConsistentSparkCatalog) spark.sessionState().catalogManager().catalog(name.trim()));
    }
    List<Identifier> ids = new ArrayList<>();
    for (String name : tables.split(",")) {
      String[] parts = name.trim().split("\\.");
      ids.add(Identifier.of(Arrays.copyOf(parts, parts.length - 1), parts[parts.length - 1]));
    }
    Map<String, List<Double>> plainTimes = series("plain_first", "plain_all", "plain_all_cpu");
    List<Map<String, List<Double>>> times = new ArrayList<>();
    for (int c = 0; c < catalogs.size(); c++) {
      times.add(
          series(
              "plugin_first_cold", "plugin_all_cold", "plugin_first_warm", "plugin_all_warm", "cold_list", "cold_load",
              "cold_states", "cold_resolve", "plugin_first_cold_cpu", "cold_workers_cpu", "cold_over_plain_all",
              "cold_cpu_over_plain_cpu"));
    }
    for (int r = 0; r < repeat + warmup; r++) { // the first repetitions warm the JIT and are dropped
      boolean keep = r >= warmup;
      double[] plainAll = new double[2]; // wall, cpu
      Map<Integer, double[]> plugin = new HashMap<>(); // catalog -> cold, all cold, warm, all warm, cold cpu, split...
      for (int step = 0; step <= catalogs.size(); step++) {
        int which = (step + r) % (catalogs.size() + 1); // 0: the plain catalog
        if (which == 0) {
          double cpu = cpu();
          plainAll[0] = timed(() -> {
            for (Identifier id : ids) {
              load(plainCatalog, id);
            }
          });
          plainAll[1] = cpu() - cpu;
          double plainFirst = timed(() -> load(plainCatalog, ids.get(0)));
          if (keep) {
            plainTimes.get("plain_first").add(plainFirst);
            plainTimes.get("plain_all").add(plainAll[0]);
            plainTimes.get("plain_all_cpu").add(plainAll[1]);
          }
          continue;
        }
        ConsistentSparkCatalog consistentCatalog = catalogs.get(which - 1);
        double[] measured = new double[10];
        consistentCatalog.clearCaches();
        inStatement(() -> {
          double coldCpu = cpu();
          measured[0] = timed(() -> load(consistentCatalog, ids.get(0)));
          coldCpu = cpu() - coldCpu;
          ResolutionTimings split = consistentCatalog.lastResolutionTimings();
          measured[5] = split.listNanos() / 1e6;
          measured[6] = split.loadNanos() / 1e6;
          measured[7] = split.stateNanos() / 1e6;
          measured[8] = split.resolveNanos() / 1e6;
          measured[9] = split.workerCpuNanos() / 1e6;
          measured[4] = coldCpu + split.workerCpuNanos() / 1e6;
          measured[1] = measured[0] + timed(() -> {
            for (Identifier id : ids.subList(1, ids.size())) {
              load(consistentCatalog, id);
            }
          });
        });
        inStatement(() -> {
          measured[2] = timed(() -> load(consistentCatalog, ids.get(0)));
          measured[3] = measured[2] + timed(() -> {
            for (Identifier id : ids.subList(1, ids.size())) {
              load(consistentCatalog, id);
            }
          });
        });
        plugin.put(which - 1, measured);
      }
      if (!keep) {
        continue;
      }
      for (Map.Entry<Integer, double[]> e : plugin.entrySet()) {
        Map<String, List<Double>> t = times.get(e.getKey());
        double[] m = e.getValue();
        t.get("plugin_first_cold").add(m[0]);
        t.get("plugin_all_cold").add(m[1]);
        t.get("plugin_first_warm").add(m[2]);
        t.get("plugin_all_warm").add(m[3]);
        t.get("plugin_first_cold_cpu").add(m[4]);
        t.get("cold_list").add(m[5]);
        t.get("cold_load").add(m[6]);
        t.get("cold_states").add(m[7]);
        t.get("cold_resolve").add(m[8]);
        t.get("cold_workers_cpu").add(m[9]);
        t.get("cold_over_plain_all").add(m[0] / plainAll[0]);
        t.get("cold_cpu_over_plain_cpu").add(m[4] / plainAll[1]);
      }
    }
    StringBuilder json = new StringBuilder("{");
    for (int c = 0; c < catalogs.size(); c++) {
      if (c > 0) {
        json.append(',');
      }
      json.append('"').append(names.get(c)).append("\":{");
      medians(json, plainTimes);
      medians(json, times.get(c));
      json.append(",\"tables\":").append(ids.size()).append(",\"repeat\":").append(repeat).append('}');
    }
    return json.append('}').toString();
  }
}
