package io.consistentcatalog.spark.context;

import java.nio.ByteBuffer;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.Table;
import org.apache.iceberg.types.Conversions;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * An ingest's event-time barrier (protocol §5.6, §5.9: {@code spark.sql.consistent.eventTimeColumn}): the
 * maximum of a timestamp, date or epoch-milliseconds column over the rows written, read from the upper bounds
 * Iceberg records for each data file (no second pass over the data).
 */
public final class EventTime {
  final String column;
  private final int fieldId;
  private final Type type;
  /** How to stop using an event time (named in errors): the SQL setting's RESET, or the streaming option's removal. */
  final String unset;

  private EventTime(String column, int fieldId, Type type, String unset) {
    this.column = column;
    this.fieldId = fieldId;
    this.type = type;
    this.unset = unset;
  }

  /** The column of {@code table} named by the SQL setting; refused when missing or not a time. */
  public static EventTime of(Table table, String sink, String column) {
    String setting = Settings.PREFIX + Settings.EVENT_TIME_COLUMN;
    return of(table, sink, column, setting + "=" + column, "RESET " + setting);
  }

  /**
   * The column of {@code table} named by {@code setting} (e.g. {@code spark.sql.consistent.eventTimeColumn=ts});
   * refused when missing or not a time; {@code unset} says how to do without it.
   */
  public static EventTime of(Table table, String sink, String column, String setting, String unset) {
    Types.NestedField field = table.schema().caseInsensitiveFindField(column);
    if (field == null) {
      throw Errors.raise(Errors.setting(setting + ": " + sink + " has no such column; its columns are "
          + table.schema().columns().stream().map(Types.NestedField::name).collect(java.util.stream.Collectors.toList())));
    }
    Type.TypeID id = field.type().typeId();
    if (id != Type.TypeID.TIMESTAMP && id != Type.TypeID.DATE && id != Type.TypeID.LONG && id != Type.TypeID.INTEGER
        && id != Type.TypeID.TIMESTAMP_NANO) {
      throw Errors.raise(Errors.setting(setting + ": " + column + " is " + field.type()
          + "; the event time must be a timestamp, a date or epoch milliseconds"));
    }
    return new EventTime(field.name(), field.fieldId(), field.type(), unset);
  }

  /**
   * The latest event time (ms) in the files {@code messages} hold; null when they hold no rows or only rows without
   * an event time (null in the column).
   */
  public Long latest(WriterCommitMessage[] messages) {
    Long latest = null;
    for (DataFile file : BatchFiles.of(messages)) {
      if (file.recordCount() == 0) {
        continue;
      }
      Long nulls = file.nullValueCounts() == null ? null : file.nullValueCounts().get(fieldId);
      if (nulls != null && nulls == file.recordCount()) {
        continue; // no event time in this file at all
      }
      ByteBuffer bound = file.upperBounds() == null ? null : file.upperBounds().get(fieldId);
      if (bound == null) {
        throw new IllegalStateException("data file " + file.location() + " records no upper bound for " + column
            + " (its metrics mode); set the table property write.metadata.metrics.column." + column
            + "=full through the plain catalog, or " + unset);
      }
      long ms = toMillis(Conversions.fromByteBuffer(type, bound));
      latest = latest == null ? ms : Math.max(latest, ms);
    }
    return latest;
  }

  private long toMillis(Object value) {
    long v = ((Number) value).longValue();
    switch (type.typeId()) {
      case TIMESTAMP:
        return Math.floorDiv(v, 1_000L);
      case TIMESTAMP_NANO:
        return Math.floorDiv(v, 1_000_000L);
      case DATE:
        return v * 86_400_000L;
      default:
        return v;
    }
  }

}
