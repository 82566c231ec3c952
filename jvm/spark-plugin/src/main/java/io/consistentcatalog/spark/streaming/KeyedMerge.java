package io.consistentcatalog.spark.streaming;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.OverwriteFiles;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.Schema;
import org.apache.iceberg.StructLike;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.data.parquet.GenericParquetReaders;
import org.apache.iceberg.data.parquet.GenericParquetWriter;
import org.apache.iceberg.deletes.PositionDelete;
import org.apache.iceberg.deletes.PositionDeleteWriter;
import org.apache.iceberg.expressions.Evaluator;
import org.apache.iceberg.expressions.Expression;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.types.TypeUtil;
import org.apache.iceberg.types.Types;
import org.apache.iceberg.util.StructLikeSet;
import org.apache.iceberg.util.StructProjection;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.datasources.SparkExpressionConverter;

/**
 * A micro-batch of a streaming query in update output mode as its epoch's one staged commit (protocol §5.7): the
 * rows Spark emitted are the new values of the keys that changed, and they replace, by the sink's identifier fields,
 * the rows of those keys in the previous output. As the sink's {@code write.merge.mode} says: copy-on-write, every
 * data file of the sink that holds one of the batch's keys is rewritten without those rows, and one {@code
 * overwrite} snapshot deletes the files rewritten and adds their rewrites and the batch's own files; merge-on-read
 * (format version 2), those rows are deleted by position and one row delta adds the batch's files and the position
 * delete files (equality deletes, which pyiceberg cannot read, are never written). The files whose key columns'
 * bounds admit one of the batch's keys are read (their key columns; whole only when copy-on-write rewrites them),
 * the others not: the epoch's cost follows the batch and the files its keys fall in, not the table. With the option
 * {@value StreamingSinkTable#DELETE_WHERE}, a batch row that satisfies its predicate (an aggregate back at its
 * neutral value, e.g. a signed count of 0) deletes its key's row and is not written: the batch's files holding such
 * rows are rewritten without them.
 */
final class KeyedMerge {
  /** Above this many distinct values of a key column, the files are not pruned by it. */
  private static final int MAX_IN_VALUES = 10_000;

  private KeyedMerge() {}

  /**
   * Refuses, with the way out, a sink that update mode cannot merge into: one without identifier fields, one whose
   * {@code write.merge.mode} is merge-on-read in a format version other than 2 (v3 wants deletion vectors, which
   * are not written yet), one whose data files are not Parquet.
   */
  static void check(StreamingSinkTable sink, Table table) {
    String qualified = sink.plainName(); // DDL goes through the plain catalog (lake_consistent refuses it)
    if (table.schema().identifierFieldIds().isEmpty()) {
      throw sink.refused("a streaming query in update output mode merges each batch's rows into the table by key, and "
          + "the table has no identifier fields: declare the query's grouping columns as its key (ALTER TABLE "
          + qualified + " SET IDENTIFIER FIELDS <columns>, or pyiceberg's update_schema().set_identifier_fields), or "
          + "write in complete output mode");
    }
    int version = formatVersion(table);
    if (mergeOnRead(table) && version != 2) {
      throw sink.refused("update output mode merges by key merge-on-read with position delete files, which Iceberg "
          + "allows in format version 2 only, and the table is version " + version + " (version 3 wants deletion "
          + "vectors, which update mode does not write yet): ALTER TABLE " + qualified + " SET TBLPROPERTIES ('"
          + TableProperties.MERGE_MODE + "'='copy-on-write'), or write in complete output mode");
    }
    String format = table.properties().getOrDefault(TableProperties.DEFAULT_FILE_FORMAT, "parquet");
    if (!"parquet".equalsIgnoreCase(format)) {
      throw sink.refused("update output mode rewrites the files holding a batch's keys, Parquet only, and the table's "
          + TableProperties.DEFAULT_FILE_FORMAT + " is " + format + ": set it to parquet, or write in complete output "
          + "mode");
    }
  }

  /** Whether the sink's {@code write.merge.mode} is merge-on-read (Iceberg's default is copy-on-write). */
  static boolean mergeOnRead(Table table) {
    return "merge-on-read".equalsIgnoreCase(table.properties().get(TableProperties.MERGE_MODE));
  }

  private static int formatVersion(Table table) {
    return table instanceof HasTableOperations ? ((HasTableOperations) table).operations().current().formatVersion() : 2;
  }

  /**
   * The predicate {@code where} (Spark SQL over the sink's columns) as Iceberg evaluates it, resolved against the sink
   * when the write is built, so a typo or a predicate Iceberg cannot evaluate is refused before anything is written.
   */
  static Expression deleteWhere(StreamingSinkTable sink, SparkSession session, String where) {
    String option = StreamingSinkTable.DELETE_WHERE + "=" + where;
    LogicalPlan plan;
    try {
      plan = session.table(sink.plainName()).where(where).queryExecution().analyzed();
    } catch (Exception e) { // Spark's AnalysisException (unresolved column) and ParseException are not runtime exceptions
      throw sink.refused("option " + option + " is not a predicate over the table's columns ("
          + firstLine(e.getMessage()) + "); write e.g. words = 0, naming the aggregate that is back at its neutral value");
    }
    Expression converted = null;
    if (plan instanceof Filter) {
      try {
        // literals cast to the column's type (balance = 0 on a bigint) folded first, as Spark's optimizer would
        Filter folded = (Filter) org.apache.spark.sql.catalyst.optimizer.ConstantFolding$.MODULE$.apply(plan);
        converted = SparkExpressionConverter.convertToIcebergExpression(folded.condition());
      } catch (RuntimeException e) {
        converted = null;
      }
    }
    if (converted == null) {
      throw sink.refused("option " + option + " is not a predicate Iceberg can evaluate on a row: use comparisons of "
          + "columns with literals, IN, IS NULL, AND, OR and NOT (e.g. words = 0)");
    }
    return converted;
  }

  private static String firstLine(String message) {
    String text = String.valueOf(message).trim();
    int end = text.indexOf('\n');
    return end < 0 ? text : text.substring(0, end);
  }

  /** The merge of one batch, prepared on {@code table} (the sink as the epoch's staged write sees it). */
  static final class Merge {
    private final Table table;
    /** The batch's files as they are committed (those holding deleted keys' rows replaced by their rewrites). */
    private final List<DataFile> added;
    private final Expression deleteWhere;
    /** The rewrites written so far (deleted when the commit is given up before it was sent). */
    final List<DataFile> rewritten = new ArrayList<>();
    private final List<DataFile> replaced = new ArrayList<>();
    /** Merge-on-read: the position delete files of the rows the batch's keys replace. */
    private final List<DeleteFile> deletes = new ArrayList<>();
    private final boolean mergeOnRead;
    /** A new generation (§6.10): the sink's rows are all replaced, none merged with (the sink is read as empty). */
    private final boolean fresh;

    Merge(Table table, List<DataFile> added, Expression deleteWhere, boolean fresh) {
      this.fresh = fresh;
      this.table = table;
      this.added = new ArrayList<>(added);
      this.deleteWhere = deleteWhere;
      this.mergeOnRead = mergeOnRead(table);
    }

    /** Reads the batch's keys and rewrites the sink's files that hold any of them (nothing is committed yet). */
    Merge prepare() {
      Schema schema = table.schema();
      Set<Integer> ids = schema.identifierFieldIds();
      Schema keySchema = TypeUtil.select(schema, ids);
      StructLikeSet keys = StructLikeSet.create(keySchema.asStruct());
      try {
        if (deleteWhere == null) {
          for (DataFile file : added) {
            try (CloseableIterable<Record> records = read(file, keySchema)) {
              for (Record record : records) {
                keys.add(record);
              }
            }
          }
        } else {
          dropDeleted(schema, keySchema, keys);
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      if (fresh || keys.isEmpty() || table.currentSnapshot() == null) {
        return this;
      }
      StructProjection key = StructProjection.create(schema, keySchema);
      try (CloseableIterable<FileScanTask> tasks = table.newScan().filter(candidates(keySchema, keys)).planFiles()) {
        for (FileScanTask task : tasks) {
          DataFile file = task.file();
          if (mergeOnRead) {
            deletePositions(file, keySchema, keys);
            continue;
          }
          if (!task.deletes().isEmpty()) {
            throw new IllegalStateException(table.name() + ": data file " + file.location() + " has delete files, "
                + "which a copy-on-write merge would lose; compact the table first (CALL <catalog>.system."
                + "rewrite_data_files(table => '" + table.name() + "', options => map('delete-file-threshold', '1')))");
          }
          rewrite(file, schema, keys, key);
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return this;
    }

    /**
     * The files that may hold one of {@code keys}: for each key column of a type Iceberg's literals take (strings,
     * numbers, booleans, ...), its values among the batch's (up to {@value #MAX_IN_VALUES} of them: partitions and
     * small batches prune by them) and their range, minimum to maximum (Iceberg checks an {@code in} of more than
     * 200 values against no file's column bounds, a range against every file's: a batch of keys that lie close
     * together reads only the files whose bounds meet theirs).
     */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private static Expression candidates(Schema keySchema, StructLikeSet keys) {
      Expression filter = Expressions.alwaysTrue();
      List<Types.NestedField> fields = keySchema.columns();
      for (int i = 0; i < fields.size(); i++) {
        Set<Object> values = new HashSet<>();
        for (StructLike key : keys) {
          values.add(key.get(i, Object.class));
        }
        if (values.contains(null)) {
          continue;
        }
        String name = fields.get(i).name();
        try {
          if (values.size() <= MAX_IN_VALUES) {
            filter = Expressions.and(filter, Expressions.in(name, values));
          }
          if (values.size() > 1 && fields.get(i).type().isPrimitiveType()) {
            java.util.Comparator order = org.apache.iceberg.types.Comparators.forType(fields.get(i).type().asPrimitiveType());
            Object min = java.util.Collections.min(values, order);
            Object max = java.util.Collections.max(values, order);
            filter = Expressions.and(filter,
                Expressions.and(Expressions.greaterThanOrEqual(name, min), Expressions.lessThanOrEqual(name, max)));
          }
        } catch (IllegalArgumentException | ClassCastException e) {
          // a type Iceberg's literals or comparators do not take from the generic reader's values: no pruning by it
        }
      }
      return filter;
    }

    /**
     * Collects the batch's keys into {@code keys} and replaces each batch file holding rows that satisfy
     * {@link #deleteWhere} by a rewrite without them (none when all its rows do): those keys' rows are deleted, not
     * written. The replaced batch files were never committed and are deleted at once.
     */
    private void dropDeleted(Schema schema, Schema keySchema, StructLikeSet keys) throws IOException {
      Evaluator deleted = new Evaluator(schema.asStruct(), deleteWhere, false);
      StructProjection key = StructProjection.create(schema, keySchema);
      List<DataFile> files = new ArrayList<>(added);
      added.clear();
      for (DataFile file : files) {
        List<Record> kept = new ArrayList<>();
        boolean dropped = false;
        try (CloseableIterable<Record> records = read(file, schema)) {
          for (Record record : records) {
            keys.add(key.copyFor(record));
            if (deleted.eval(record)) {
              dropped = true;
            } else {
              kept.add(record);
            }
          }
        }
        if (!dropped) {
          added.add(file);
          continue;
        }
        if (!kept.isEmpty()) {
          DataFile rewrite = write(file, kept);
          rewritten.add(rewrite);
          added.add(rewrite);
        }
        try {
          table.io().deleteFile(file.location());
        } catch (RuntimeException e) {
          // a file no snapshot references; orphan-file cleanup removes it
        }
      }
    }

    /** Rewrites {@code file} without the rows of {@code keys}, when it holds any (its key columns read first). */
    private void rewrite(DataFile file, Schema schema, StructLikeSet keys, StructProjection key) throws IOException {
      Schema keySchema = TypeUtil.select(schema, schema.identifierFieldIds());
      boolean holds = false;
      try (CloseableIterable<Record> records = read(file, keySchema)) {
        for (Record record : records) {
          if (keys.contains(record)) {
            holds = true;
            break;
          }
        }
      }
      if (!holds) {
        return;
      }
      List<Record> kept = new ArrayList<>();
      boolean hit = false;
      try (CloseableIterable<Record> records = read(file, schema)) {
        for (Record record : records) {
          if (keys.contains(key.wrap(record))) {
            hit = true;
          } else {
            kept.add(record);
          }
        }
      }
      if (!hit) {
        return;
      }
      replaced.add(file);
      if (!kept.isEmpty()) {
        rewritten.add(write(file, kept));
      }
    }

    /**
     * Merge-on-read: a position delete file for the rows of {@code file} that hold one of {@code keys}, when it holds
     * any (only its key columns are read; a row's position is its place in the file). A position an earlier batch
     * deleted already is deleted again, which readers take as one delete.
     */
    private void deletePositions(DataFile file, Schema keySchema, StructLikeSet keys) throws IOException {
      List<Long> positions = new ArrayList<>();
      long position = 0;
      try (CloseableIterable<Record> records = read(file, keySchema)) {
        for (Record record : records) {
          if (keys.contains(record)) {
            positions.add(position);
          }
          position++;
        }
      }
      if (positions.isEmpty()) {
        return;
      }
      PartitionSpec spec = table.specs().get(file.specId());
      String name = "merge-deletes-" + UUID.randomUUID() + ".parquet";
      OutputFile out = table.io().newOutputFile(table.locationProvider().newDataLocation(spec, file.partition(), name));
      PositionDeleteWriter<Record> writer = Parquet.writeDeletes(out).forTable(table).withSpec(spec)
          .withPartition(file.partition()).rowSchema(null).overwrite().buildPositionWriter(); // positions only
      PositionDelete<Record> delete = PositionDelete.create();
      try {
        for (long at : positions) {
          writer.write(delete.set(file.location(), at));
        }
      } finally {
        writer.close();
      }
      deletes.add(writer.toDeleteFile());
    }

    /** A new data file of {@code records}, in {@code file}'s spec and partition (not committed). */
    private DataFile write(DataFile file, List<Record> records) throws IOException {
      PartitionSpec spec = table.specs().get(file.specId());
      String name = "merge-" + UUID.randomUUID() + ".parquet";
      OutputFile out = table.io().newOutputFile(table.locationProvider().newDataLocation(spec, file.partition(), name));
      DataWriter<Record> writer = Parquet.writeData(out).forTable(table).withSpec(spec).withPartition(file.partition())
          .createWriterFunc(GenericParquetWriter::create).overwrite().build();
      try {
        for (Record record : records) {
          writer.write(record);
        }
      } finally {
        writer.close();
      }
      return writer.toDataFile();
    }

    private CloseableIterable<Record> read(DataFile file, Schema projection) {
      if (file.format() != FileFormat.PARQUET) {
        throw new IllegalStateException(table.name() + ": data file " + file.location() + " is " + file.format()
            + "; update output mode rewrites Parquet files only");
      }
      return Parquet.read(table.io().newInputFile(file.location())).project(projection)
          .createReaderFunc(type -> GenericParquetReaders.buildReader(projection, type)).build();
    }

    /**
     * The one commit: the files holding the batch's keys replaced by their rewrites, plus the batch's files
     * (copy-on-write, an {@code overwrite}); merge-on-read, the batch's files and the position deletes of the rows
     * they replace (a {@code delete}-and-append {@code overwrite} row delta).
     */
    void commit(Map<String, String> properties) {
      if (fresh) { // §5.2 step 5: one overwrite deletes every row and adds the batch's rows
        OverwriteFiles overwrite = table.newOverwrite().overwriteByRowFilter(Expressions.alwaysTrue());
        added.forEach(overwrite::addFile);
        properties.forEach(overwrite::set);
        overwrite.commit();
        return;
      }
      if (mergeOnRead) {
        RowDelta delta = table.newRowDelta();
        added.forEach(delta::addRows);
        deletes.forEach(delta::addDeletes);
        properties.forEach(delta::set);
        delta.commit();
        return;
      }
      OverwriteFiles overwrite = table.newOverwrite();
      replaced.forEach(overwrite::deleteFile);
      rewritten.forEach(overwrite::addFile);
      added.forEach(overwrite::addFile);
      properties.forEach(overwrite::set);
      overwrite.commit();
    }

    /** Deletes the rewrites (a merge whose commit was never sent). */
    void discard() {
      List<String> locations = new ArrayList<>();
      rewritten.forEach(file -> locations.add(file.location()));
      deletes.forEach(file -> locations.add(file.location()));
      for (String location : locations) {
        try {
          table.io().deleteFile(location);
        } catch (RuntimeException e) {
          // an unreferenced file; orphan-file cleanup removes it
        }
      }
    }
  }
}
