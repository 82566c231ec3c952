package io.consistentcatalog.spark;

import io.consistentcatalog.spark.read.CutRow;
import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.FencedCommit;
import io.consistentcatalog.spark.context.JobRegistration;
import io.consistentcatalog.spark.context.Names;
import io.consistentcatalog.spark.context.Settings;
import io.consistentcatalog.spark.context.StatementResults;
import java.util.List;
import java.util.Locale;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.iceberg.catalog.Procedure;
import org.apache.spark.sql.connector.iceberg.catalog.ProcedureParameter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The consistent catalog's procedures.
 *
 * <ul>
 *   <li>{@code CALL lake_consistent.system.refresh_cut()}: the next table load resolves a new cut (never
 *       older than the last one). With a table argument it resolves that table's cut at once and returns it.
 *   <li>{@code CALL lake_consistent.system.current_cut('demo.words')}: the cut the session serves for the
 *       table's lineage component now (with refresh=manual, the held cut), one row per table; without an
 *       argument, every table of the catalog. Columns: table, snapshot_id, barrier (the snapshot's),
 *       branch, cut_barrier, level, status ({@code ok} or the error class and message of a table left out).
 *   <li>{@code CALL lake_consistent.system.reassign(table => 'ns.t', job => 'J' [, takeover => true])}: hand a derived
 *       table to another job (protocol §6.9); one row: table, from_job, to_job, changed.
 *   <li>{@code CALL lake_consistent.system.recent_results()}: what the session's last write statements did (protocol
 *       §5.9), one row per statement and table, oldest first: the {@code [lake_consistent]} line a client of a
 *       Spark Connect or Thrift server never sees on the driver's standard error, as values.
 * </ul>
 *
 * <p>Every other procedure is refused, naming the way to Iceberg's own procedures on the plain catalog.
 */
final class CutProcedures {
  private CutProcedures() {}

  /** {@code catalog}'s procedure {@code ident}: {@code system.refresh_cut}, {@code current_cut} or {@code reassign}; any other is refused. */
  static Procedure load(ConsistentSparkCatalog catalog, Identifier ident) {
    String[] namespace = ident.namespace();
    if (namespace.length == 1 && namespace[0].equalsIgnoreCase("system")) {
      String procedure = ident.name().toLowerCase(Locale.ROOT);
      if (procedure.equals("refresh_cut")) {
        return new RefreshCut(catalog);
      }
      if (procedure.equals("current_cut")) {
        return new CurrentCut(catalog);
      }
      if (procedure.equals("reassign")) {
        return new Reassign(catalog);
      }
      if (procedure.equals("recent_results")) {
        return new RecentResults();
      }
      if (procedure.equals(ChangesView.NAME)) {
        return new ChangesView(catalog);
      }
    }
    String catalogName = catalog.catalogName();
    throw catalog.refused(
        "CALL " + catalogName + "." + String.join(".", namespace) + "." + ident.name()
            + " (this catalog has only system.refresh_cut(), system.current_cut([table]) and system.reassign(table, job[, "
            + "takeover]), system.recent_results() and system." + ChangesView.NAME + "(table, from_barrier, ...); run Iceberg's "
            + "procedures as CALL " + catalog.plainCatalogName() + ".system." + ident.name() + "(...))");
  }

  static final StructType OUTPUT =
      new StructType(
          new StructField[] {
            new StructField("table", DataTypes.StringType, false, Metadata.empty()),
            new StructField("snapshot_id", DataTypes.LongType, true, Metadata.empty()),
            new StructField("barrier", DataTypes.LongType, true, Metadata.empty()),
            new StructField("branch", DataTypes.StringType, true, Metadata.empty()),
            new StructField("cut_barrier", DataTypes.LongType, true, Metadata.empty()),
            new StructField("level", DataTypes.StringType, false, Metadata.empty()),
            new StructField("status", DataTypes.StringType, false, Metadata.empty()),
          });

  private static final ProcedureParameter[] TABLE_OPTIONAL = {ProcedureParameter.optional("table", DataTypes.StringType)};

  private static UTF8String str(Object value) {
    return value == null ? null : UTF8String.fromString(value.toString());
  }

  static InternalRow[] rows(List<CutRow> found) {
    InternalRow[] rows = new InternalRow[found.size()];
    for (int i = 0; i < rows.length; i++) {
      CutRow r = found.get(i);
      rows[i] = new GenericInternalRow(new Object[] {
        str(r.table), r.snapshotId, r.barrier, str(r.branch), r.cutBarrier, str(r.level), str(r.status)
      });
    }
    return rows;
  }

  private static String table(InternalRow args) {
    return args.numFields() == 0 || args.isNullAt(0) ? null : args.getUTF8String(0).toString();
  }

  private static InternalRow[] describe(ConsistentSparkCatalog catalog, String table, boolean fresh) {
    try {
      Settings settings = catalog.settings();
      return rows(catalog.cutSession().describe(table, fresh, settings));
    } catch (NoSuchTableException e) {
      throw Errors.raise(Errors.analysis("CONSISTENT_CUT.TABLE_NOT_FOUND", "table " + table + " does not exist in "
          + catalog.name() + "; list the tables with SHOW TABLES IN " + catalog.name() + ".<namespace>"));
    }
  }

  static final class RefreshCut implements Procedure {
    private final ConsistentSparkCatalog catalog;

    RefreshCut(ConsistentSparkCatalog catalog) {
      this.catalog = catalog;
    }

    @Override
    public ProcedureParameter[] parameters() {
      return TABLE_OPTIONAL;
    }

    @Override
    public StructType outputType() {
      return OUTPUT;
    }

    @Override
    public InternalRow[] call(InternalRow args) {
      String table = table(args);
      if (table == null) {
        catalog.cutSession().refresh();
        return new InternalRow[0];
      }
      return describe(catalog, table, true);
    }

    @Override
    public String description() {
      return "refresh_cut: the next table load takes a new consistent cut (never older than the last)";
    }
  }

  static final class CurrentCut implements Procedure {
    private final ConsistentSparkCatalog catalog;

    CurrentCut(ConsistentSparkCatalog catalog) {
      this.catalog = catalog;
    }

    @Override
    public ProcedureParameter[] parameters() {
      return TABLE_OPTIONAL;
    }

    @Override
    public StructType outputType() {
      return OUTPUT;
    }

    @Override
    public InternalRow[] call(InternalRow args) {
      return describe(catalog, table(args), false);
    }

    @Override
    public String description() {
      return "current_cut([table]): the consistent cut the session serves for the table's lineage component (every "
          + "table without an argument)";
    }
  }

  static final StructType REASSIGNED =
      new StructType(
          new StructField[] {
            new StructField("table", DataTypes.StringType, false, Metadata.empty()),
            new StructField("from_job", DataTypes.StringType, true, Metadata.empty()),
            new StructField("to_job", DataTypes.StringType, false, Metadata.empty()),
            new StructField("changed", DataTypes.BooleanType, false, Metadata.empty()),
          });

  /** {@code reassign(table, job[, takeover])} (protocol §6.9): the only way a derived table changes owner. */
  static final class Reassign implements Procedure {
    private final ConsistentSparkCatalog catalog;

    Reassign(ConsistentSparkCatalog catalog) {
      this.catalog = catalog;
    }

    @Override
    public ProcedureParameter[] parameters() {
      return new ProcedureParameter[] {
        ProcedureParameter.required("table", DataTypes.StringType),
        ProcedureParameter.required("job", DataTypes.StringType),
        ProcedureParameter.optional("takeover", DataTypes.BooleanType),
      };
    }

    @Override
    public StructType outputType() {
      return REASSIGNED;
    }

    @Override
    public InternalRow[] call(InternalRow args) {
      String table = args.isNullAt(0) ? null : args.getUTF8String(0).toString().trim();
      String job = args.isNullAt(1) ? null : args.getUTF8String(1).toString().trim();
      boolean takeover = args.numFields() > 2 && !args.isNullAt(2) && args.getBoolean(2);
      if (table == null || table.isEmpty() || job == null || job.isEmpty()) {
        throw Errors.raise(Errors.analysis("CONSISTENT_WRITE.INVALID_INPUT", "reassign needs a table and a job: CALL "
            + catalog.catalogName() + ".system.reassign(table => 'ns.t', job => '<job>')"));
      }
      String prefix = catalog.catalogName() + ".";
      String name = table.startsWith(prefix) ? table.substring(prefix.length()) : table;
      FencedCommit committer = catalog.context().committer();
      org.apache.iceberg.catalog.TableIdentifier ident = Names.icebergIdentifier(name);
      org.apache.iceberg.Table loaded;
      try {
        loaded = committer.load(ident);
      } catch (org.apache.iceberg.exceptions.NoSuchTableException e) {
        throw Errors.raise(Errors.analysis("CONSISTENT_CUT.TABLE_NOT_FOUND", "table " + name + " does not exist in "
            + catalog.catalogName() + "; list the tables with SHOW TABLES IN " + catalog.catalogName() + ".<namespace>"));
      }
      try {
        java.util.Map<String, io.consistentcatalog.core.TableState> all = catalog.cutSession().catalogStates(name);
        JobRegistration.Reassigned done = JobRegistration.reassign(committer, ident, name, loaded, job, takeover,
            all == null ? java.util.Collections.emptyMap() : all, catalog.catalogName());
        String line = "[" + catalog.catalogName() + "] " + name + ": " + (done.changed
            ? "reassigned from job " + (done.fromJob == null ? "(none)" : "'" + done.fromJob + "'") + " to job '" + job + "'"
            : "already owned by job '" + job + "' (no live lease), nothing changed");
        System.err.println(line);
        return new InternalRow[] {
          new GenericInternalRow(new Object[] {str(name), str(done.fromJob), str(job), done.changed})
        };
      } catch (io.consistentcatalog.core.ConsistentException e) {
        throw Errors.raise(Errors.analysis(Errors.errorClass(e.kind()), e.getMessage()));
      }
    }

    @Override
    public String description() {
      return "reassign(table, job[, takeover]): hand a derived table to another job (its owner changes, its lease ends)";
    }
  }

  static final StructType RESULTS =
      new StructType(
          new StructField[] {
            new StructField("statement", DataTypes.LongType, false, Metadata.empty()),
            new StructField("committed_at", DataTypes.LongType, false, Metadata.empty()),
            new StructField("table", DataTypes.StringType, false, Metadata.empty()),
            new StructField("job", DataTypes.StringType, true, Metadata.empty()),
            new StructField("action", DataTypes.StringType, false, Metadata.empty()),
            new StructField("barrier", DataTypes.LongType, true, Metadata.empty()),
            new StructField("snapshot_id", DataTypes.LongType, true, Metadata.empty()),
            new StructField("rows", DataTypes.LongType, true, Metadata.empty()),
            new StructField("attempt", DataTypes.StringType, true, Metadata.empty()),
            new StructField("line", DataTypes.StringType, false, Metadata.empty()),
          });

  /** {@code recent_results()} (protocol §5.9): the session's kept statement results ({@link StatementResults}). */
  static final class RecentResults implements Procedure {
    @Override
    public ProcedureParameter[] parameters() {
      return new ProcedureParameter[0];
    }

    @Override
    public StructType outputType() {
      return RESULTS;
    }

    @Override
    public InternalRow[] call(InternalRow args) {
      List<StatementResults.Result> kept = StatementResults.recent();
      InternalRow[] rows = new InternalRow[kept.size()];
      for (int i = 0; i < rows.length; i++) {
        StatementResults.Result r = kept.get(i);
        rows[i] = new GenericInternalRow(new Object[] {
          r.statement, r.at, str(r.table), str(r.job), str(r.action), r.barrier, r.snapshotId, r.rows, str(r.attempt),
          str(r.line)
        });
      }
      return rows;
    }

    @Override
    public String description() {
      return "recent_results(): what the session's last write statements did, one row per statement and table";
    }
  }
}
