package io.consistentcatalog.spark;

import io.consistentcatalog.core.Barriers;
import io.consistentcatalog.core.ChangeRange;
import io.consistentcatalog.core.ConsistentException;
import io.consistentcatalog.core.TableState;
import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.Names;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.types.Types;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.iceberg.catalog.Procedure;
import org.apache.spark.sql.connector.iceberg.catalog.ProcedureParameter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * {@code CALL lake_consistent.system.create_changes_view(table => 'ns.t', from_barrier => T1 [, to_barrier => T2]
 * [, key => array('id')] [, changes_view => 'v'])} (protocol §5.10): registers the temporary view {@code v} (default
 * {@code <table>_changes}, dots as underscores) of the rows that turn {@code snap(t, T1)} into {@code snap(t, T2)},
 * with {@code _change_type} and {@code _barrier}; one row back: the view, the range and the read it took.
 *
 * <p>Modelled on Iceberg's {@code create_changelog_view}: the changes have columns the table does not have, and
 * neither a read option on the table's name (Spark asks the catalog for a table's columns before it sees the
 * options) nor a table-valued function (not a catalog API in Spark 3.5) can carry them on every Spark line.
 */
final class ChangesView implements Procedure {
  static final String NAME = "create_changes_view";

  static final StructType OUTPUT =
      new StructType(
          new StructField[] {
            new StructField("changes_view", DataTypes.StringType, false, Metadata.empty()),
            new StructField("from_barrier", DataTypes.LongType, false, Metadata.empty()),
            new StructField("to_barrier", DataTypes.LongType, false, Metadata.empty()),
            new StructField("from_snapshot_id", DataTypes.LongType, true, Metadata.empty()),
            new StructField("to_snapshot_id", DataTypes.LongType, true, Metadata.empty()),
            new StructField("barrier", DataTypes.LongType, true, Metadata.empty()),
            new StructField("read", DataTypes.StringType, false, Metadata.empty()),
          });

  private final ConsistentSparkCatalog catalog;

  ChangesView(ConsistentSparkCatalog catalog) {
    this.catalog = catalog;
  }

  @Override
  public ProcedureParameter[] parameters() {
    return new ProcedureParameter[] {
      ProcedureParameter.required("table", DataTypes.StringType),
      // strings: a barrier of the grammar (protocol §3.8); a long given is cast to its digits
      ProcedureParameter.required("from_barrier", DataTypes.StringType),
      ProcedureParameter.optional("to_barrier", DataTypes.StringType),
      ProcedureParameter.optional("key", DataTypes.createArrayType(DataTypes.StringType)),
      ProcedureParameter.optional("changes_view", DataTypes.StringType),
    };
  }

  @Override
  public StructType outputType() {
    return OUTPUT;
  }

  @Override
  public InternalRow[] call(InternalRow args) {
    String usage = "CALL " + catalog.catalogName() + ".system." + NAME + "(table => 'ns.t', from_barrier => <barrier>"
        + " [, to_barrier => <barrier>] [, key => array('col', ...)] [, changes_view => 'name'])";
    String table = args.isNullAt(0) ? "" : args.getUTF8String(0).toString().trim();
    if (table.isEmpty() || args.isNullAt(1)) {
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.INVALID_RANGE", NAME + " needs a table and a from_barrier: "
          + usage));
    }
    String prefix = catalog.catalogName() + ".";
    String name = table.startsWith(prefix) ? table.substring(prefix.length()) : table;
    long from = barrier("from_barrier", args.getUTF8String(1).toString(), usage);
    Long to = args.numFields() > 2 && !args.isNullAt(2) ? barrier("to_barrier", args.getUTF8String(2).toString(), usage)
        : null;
    List<String> declared = null;
    if (args.numFields() > 3 && !args.isNullAt(3)) {
      declared = new ArrayList<>();
      ArrayData values = args.getArray(3);
      for (int i = 0; i < values.numElements(); i++) {
        declared.add(values.isNullAt(i) ? "" : values.getUTF8String(i).toString());
      }
    }
    String view = args.numFields() > 4 && !args.isNullAt(4)
        ? args.getUTF8String(4).toString() : name.replace('.', '_') + "_changes";

    Read read = read(catalog, name, from, to, declared);
    read.rows.createOrReplaceTempView(view);
    ChangeRange range = read.range;
    return new InternalRow[] {
      new GenericInternalRow(new Object[] {
        UTF8String.fromString(view), range.fromBarrier, range.toBarrier, range.fromSnapshotId, range.toSnapshotId,
        range.barrier, UTF8String.fromString(range.read.label())
      })
    };
  }

  /** A barrier argument through the barrier grammar (protocol §3.8), refused with the argument's name. */
  private static long barrier(String argument, String value, String usage) {
    try {
      return Barriers.parse(value, System.currentTimeMillis());
    } catch (ConsistentException e) {
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.INVALID_RANGE", NAME + ": " + argument + " '" + value
          + "' is not a barrier: " + e.getMessage() + " (protocol §3.8): " + usage));
    }
  }

  /** A read of changes: its range and its rows. */
  static final class Read {
    final ChangeRange range;
    final Dataset<Row> rows;

    Read(ChangeRange range, Dataset<Row> rows) {
      this.range = range;
      this.rows = rows;
    }
  }

  /**
   * {@code changes(t, from, to)} of the table {@code name} of {@code catalog} (protocol §5.10), updates paired by
   * {@code declared} (null: the table's identifier fields): what the procedure's view and the batch read option
   * ({@link ChangesRule}) both show. Refusals: the plain catalog missing, the table missing, a key naming no column,
   * the range's errors (INVALID_RANGE, NO_WATERMARK, HISTORY_EXPIRED).
   */
  static Read read(ConsistentSparkCatalog catalog, String name, long from, Long to, List<String> declared) {
    SparkSession spark = SparkSession.active();
    String plain = catalog.plainCatalogName();
    if (!spark.conf().contains("spark.sql.catalog." + plain)) {
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.NO_PLAIN_CATALOG", catalog.catalogName() + "." + name
          + ": the changes are read through the plain catalog " + plain + ", which this session does not configure — "
          + "set spark.sql.catalog." + plain + " as " + catalog.catalogName() + " is set (or name another with "
          + "spark.sql.catalog." + catalog.catalogName() + ".plain-catalog)"));
    }
    org.apache.iceberg.Table loaded;
    try {
      loaded = catalog.icebergCatalog().loadTable(Names.icebergIdentifier(name));
    } catch (org.apache.iceberg.exceptions.NoSuchTableException e) {
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.TABLE_NOT_FOUND", catalog.catalogName() + "." + name
          + " does not exist; list the tables with SHOW TABLES IN " + catalog.catalogName() + ".<namespace>"));
    }
    List<String> columns = new ArrayList<>();
    for (Types.NestedField field : loaded.schema().columns()) {
      columns.add(field.name());
    }
    List<String> key = new ArrayList<>(declared == null ? loaded.schema().identifierFieldNames() : declared);
    if (declared != null && (declared.isEmpty() || !columns.containsAll(declared))) {
      List<String> missing = new ArrayList<>(declared);
      missing.removeAll(columns);
      throw Errors.raise(Errors.analysis("CONSISTENT_READ.INVALID_KEY", catalog.catalogName() + "." + name + ": key "
          + declared + " names no column " + missing + " of the table; its columns are " + String.join(", ", columns)
          + " — declare a key of those columns, or none for the difference of whole rows"));
    }
    key = new ArrayList<>(new LinkedHashSet<>(key));

    ChangeRange range;
    try {
      TableState state = TableState.fromMetadata(name, ((HasTableOperations) loaded).operations().current());
      range = ChangeRange.plan(state, from, to);
    } catch (ConsistentException e) {
      throw Errors.raise(Errors.analysis(errorClass(e), catalog.catalogName() + "." + e.getMessage()));
    }
    return new Read(range, TableChanges.rows(spark, plain, name, columns, range, key));
  }

  private static String errorClass(ConsistentException e) {
    switch (e.kind()) {
      case HISTORY_EXPIRED:
        return "CONSISTENT_READ.HISTORY_EXPIRED";
      case NO_WATERMARK:
        return "CONSISTENT_READ.NO_WATERMARK";
      case INVALID_BARRIER:
        return "CONSISTENT_READ.INVALID_RANGE";
      default:
        return Errors.errorClass(e.kind());
    }
  }

  @Override
  public String description() {
    return NAME + "(table, from_barrier[, to_barrier][, key][, changes_view]): a temporary view of the table's changes "
        + "between two barriers (protocol §5.10)";
  }
}
