package io.consistentcatalog.bench;

import io.consistentcatalog.spark.ConsistentSparkCatalog;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
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
 * one JVM (bench/bench_plugin.py calls {@link #run} through py4j). Each repetition times:
 *
 * <ul>
 *   <li>plain_first: the plain catalog loads the first table; plain_all: it loads every table (what a
 *       query over all of them costs);
 *   <li>plugin_first_cold / plugin_all_cold: one statement (a query planning) through the consistent
 *       catalog with its caches dropped: the first load lists the catalog, loads every table, resolves
 *       the cut; the other loads are served from it;
 *   <li>plugin_first_warm / plugin_all_warm: the same in the next statement, nothing changed meanwhile
 *       (each table is refreshed: one catalog query, no metadata read).
 * </ul>
 *
 * Every served table's schema is read too (what analysis does). The first {@code warmup} repetitions
 * are dropped (JIT); returns medians in ms as JSON.
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

  public static String run(SparkSession spark, String plain, String consistent, String tables, int repeat, int warmup)
      throws Exception {
    TableCatalog plainCatalog = (TableCatalog) spark.sessionState().catalogManager().catalog(plain);
    ConsistentSparkCatalog consistentCatalog =
        (ConsistentSparkCatalog) spark.sessionState().catalogManager().catalog(consistent);
    List<Identifier> ids = new ArrayList<>();
    for (String name : tables.split(",")) {
      String[] parts = name.trim().split("\\.");
      ids.add(Identifier.of(Arrays.copyOf(parts, parts.length - 1), parts[parts.length - 1]));
    }
    Map<String, List<Double>> times = new LinkedHashMap<>();
    for (String key :
        new String[] {"plain_first", "plain_all", "plugin_first_cold", "plugin_all_cold", "plugin_first_warm", "plugin_all_warm",
          "cold_list", "cold_load", "cold_states", "cold_resolve"}) {
      times.put(key, new ArrayList<>());
    }
    for (int r = 0; r < repeat + warmup; r++) { // the first repetitions warm the JIT and are dropped
      boolean keep = r >= warmup;
      double plainAll = timed(() -> {
        for (Identifier id : ids) {
          load(plainCatalog, id);
        }
      });
      double plainFirst = timed(() -> load(plainCatalog, ids.get(0)));
      consistentCatalog.clearCaches();
      double[] cold = new double[2];
      inStatement(() -> {
        cold[0] = timed(() -> load(consistentCatalog, ids.get(0)));
        long[] split = consistentCatalog.lastResolutionTimings();
        if (keep) {
          times.get("cold_list").add(split[0] / 1e6);
          times.get("cold_load").add(split[1] / 1e6);
          times.get("cold_states").add(split[2] / 1e6);
          times.get("cold_resolve").add(split[3] / 1e6);
        }
        cold[1] = cold[0] + timed(() -> {
          for (Identifier id : ids.subList(1, ids.size())) {
            load(consistentCatalog, id);
          }
        });
      });
      double[] warm = new double[2];
      inStatement(() -> {
        warm[0] = timed(() -> load(consistentCatalog, ids.get(0)));
        warm[1] = warm[0] + timed(() -> {
          for (Identifier id : ids.subList(1, ids.size())) {
            load(consistentCatalog, id);
          }
        });
      });
      if (keep) {
        times.get("plain_first").add(plainFirst);
        times.get("plain_all").add(plainAll);
        times.get("plugin_first_cold").add(cold[0]);
        times.get("plugin_all_cold").add(cold[1]);
        times.get("plugin_first_warm").add(warm[0]);
        times.get("plugin_all_warm").add(warm[1]);
      }
    }
    StringBuilder json = new StringBuilder("{");
    for (Map.Entry<String, List<Double>> e : times.entrySet()) {
      List<Double> values = new ArrayList<>(e.getValue());
      Collections.sort(values);
      double median = values.isEmpty() ? 0 : values.get(values.size() / 2);
      if (json.length() > 1) {
        json.append(',');
      }
      json.append('"').append(e.getKey()).append("\":").append(String.format(java.util.Locale.ROOT, "%.3f", median));
    }
    json.append(",\"tables\":").append(ids.size()).append(",\"repeat\":").append(repeat).append('}');
    return json.toString();
  }
}
