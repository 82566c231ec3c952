package io.consistentcatalog.spark;

import static org.apache.spark.sql.functions.abs;
import static org.apache.spark.sql.functions.col;
import static org.apache.spark.sql.functions.explode;
import static org.apache.spark.sql.functions.lit;
import static org.apache.spark.sql.functions.sequence;
import static org.apache.spark.sql.functions.sum;
import static org.apache.spark.sql.functions.when;

import io.consistentcatalog.core.ChangeRange;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.Window;
import org.apache.spark.sql.expressions.WindowSpec;
import org.apache.spark.sql.types.DataTypes;

/**
 * The rows of {@code changes(t, T1, T2)} (protocol §5.10) as a DataFrame over the plain catalog's Iceberg reads.
 *
 * <p>The range ({@link ChangeRange}) says how little to read: Iceberg's incremental append read for an
 * append-only range; Iceberg's changelog table ({@code t.changes}: the rows of the data files each snapshot added
 * and removed) when no snapshot of the range has delete files; else both snapshots whole. Whatever the read, the
 * rows carry a sign (+1 inserted, -1 deleted), the signs are summed per whole row (Spark's grouping treats nulls
 * as equal), and a row with a net count {@code n != 0} becomes {@code |n|} INSERTs or DELETEs: rows that an
 * overwrite deleted and wrote again unchanged cancel. With a key, a key value with exactly one DELETE and one
 * INSERT becomes an UPDATE_BEFORE / UPDATE_AFTER pair (step 2).
 */
final class TableChanges {
  static final String CHANGE_TYPE = "_change_type";
  static final String BARRIER = "_barrier";
  private static final String SIGN = "_cc_sign";
  private static final String NET = "_cc_net";

  private TableChanges() {}

  /**
   * The changes of {@code table} (dotted name) read through the plain catalog {@code plain}, in the table's
   * current columns {@code columns}, updates paired by {@code key} (empty: whole rows).
   */
  static Dataset<Row> rows(SparkSession spark, String plain, String table, List<String> columns, ChangeRange range,
      List<String> key) {
    String quoted = quote(plain) + "." + quoteParts(table);
    Column[] data = columns.stream().map(c -> col(quote(c))).toArray(Column[]::new);
    Column barrier = lit(range.barrier).cast(DataTypes.LongType).as(BARRIER);
    if (range.read == ChangeRange.Read.NONE || range.toSnapshotId == null) {
      return spark.read().table(quoted).select(data).limit(0)
          .select(withChanges(data, lit("INSERT").as(CHANGE_TYPE), barrier));
    }
    if (range.read == ChangeRange.Read.APPENDS) {
      Dataset<Row> added = range.fromSnapshotId == null
          ? snapshot(spark, quoted, range.toSnapshotId)
          : spark.read().option("start-snapshot-id", String.valueOf(range.fromSnapshotId))
              .option("end-snapshot-id", String.valueOf(range.toSnapshotId)).table(quoted);
      return added.select(withChanges(data, lit("INSERT").as(CHANGE_TYPE), barrier));
    }
    Dataset<Row> signed;
    if (range.fromSnapshotId == null) {
      signed = snapshot(spark, quoted, range.toSnapshotId).select(withSign(data, lit(1)));
    } else if (range.read == ChangeRange.Read.CHANGELOG) {
      signed = spark.read().option("start-snapshot-id", String.valueOf(range.fromSnapshotId))
          .option("end-snapshot-id", String.valueOf(range.toSnapshotId)).table(quoted + ".`changes`")
          .select(withSign(data, when(col("_change_type").equalTo("DELETE"), lit(-1)).otherwise(lit(1))));
    } else {
      signed = snapshot(spark, quoted, range.fromSnapshotId).select(withSign(data, lit(-1)))
          .unionAll(snapshot(spark, quoted, range.toSnapshotId).select(withSign(data, lit(1))));
    }
    Dataset<Row> net = signed.groupBy(data).agg(sum(col(SIGN)).as(NET)).filter(col(NET).notEqual(0))
        .withColumn(CHANGE_TYPE, when(col(NET).gt(0), lit("INSERT")).otherwise(lit("DELETE")))
        .withColumn(NET, explode(sequence(lit(1L), abs(col(NET)))));
    Column kind = col(CHANGE_TYPE);
    if (!key.isEmpty()) {
      WindowSpec byKey = Window.partitionBy(key.stream().map(c -> col(quote(c))).toArray(Column[]::new));
      Column deletes = sum(when(kind.equalTo("DELETE"), lit(1)).otherwise(lit(0))).over(byKey);
      Column inserts = sum(when(kind.equalTo("INSERT"), lit(1)).otherwise(lit(0))).over(byKey);
      kind = when(deletes.equalTo(1).and(inserts.equalTo(1)),
          when(kind.equalTo("DELETE"), lit("UPDATE_BEFORE")).otherwise(lit("UPDATE_AFTER"))).otherwise(kind);
    }
    return net.select(withChanges(data, kind.as(CHANGE_TYPE), barrier));
  }

  /**
   * {@code snap(t, T)} whole as INSERTs with {@code _barrier} {@code barrier}: a changes stream's first micro-batch
   * (its changes from the start).
   */
  static Dataset<Row> whole(SparkSession spark, String plain, String table, List<String> columns,
      long snapshotId, Long barrier) {
    Column[] data = columns.stream().map(c -> col(quote(c))).toArray(Column[]::new);
    return snapshot(spark, quote(plain) + "." + quoteParts(table), snapshotId)
        .select(withChanges(data, lit("INSERT").as(CHANGE_TYPE), lit(barrier).cast(DataTypes.LongType).as(BARRIER)));
  }

  /**
   * The table at one snapshot, by SQL's {@code VERSION AS OF} (Spark's own time travel): Iceberg's {@code snapshot-id}
   * read option is gone from its Spark 4.1 runtime (Iceberg 1.12), and the SQL form reads alike on every line.
   */
  private static Dataset<Row> snapshot(SparkSession spark, String quoted, long snapshotId) {
    return spark.sql("SELECT * FROM " + quoted + " VERSION AS OF " + snapshotId);
  }

  private static Column[] withSign(Column[] data, Column sign) {
    Column[] all = java.util.Arrays.copyOf(data, data.length + 1);
    all[data.length] = sign.as(SIGN);
    return all;
  }

  private static Column[] withChanges(Column[] data, Column kind, Column barrier) {
    List<Column> all = new ArrayList<>(java.util.Arrays.asList(data));
    all.add(kind);
    all.add(barrier);
    return all.toArray(new Column[0]);
  }

  static String quote(String part) {
    return "`" + part.replace("`", "``") + "`";
  }

  /** {@code ns.t} as {@code `ns`.`t`} (a dotted name: every part an identifier). */
  static String quoteParts(String dotted) {
    List<String> parts = new ArrayList<>();
    for (String part : dotted.split("\\.")) {
      parts.add(quote(part));
    }
    return String.join(".", parts);
  }
}
