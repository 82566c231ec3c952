package io.consistentcatalog.spark.streaming;

import io.consistentcatalog.spark.context.ChangesReads;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A table of the consistent catalog read as its changes by a streaming query
 * ({@code spark.readStream.option("consistent.read", "changes").table(...)}, protocol §5.7): the table's columns and
 * {@code _change_type}, {@code _barrier} (§5.10). Spark takes a streaming source's columns from the table the catalog
 * loads, before it looks at the read's options, so the analyser rule of the catalog's SQL extensions
 * ({@code ChangesRule}) puts this table in place of the loaded one when the option asks for changes; its stream is
 * the loaded table's, told by {@value #SHAPED} that the query's columns are the changes' ({@link ChangesStream}).
 */
public final class ChangesTable implements SupportsRead {
  /** The read option that asks for changes, and its value. */
  public static final String READ = ChangesReads.READ;

  public static final String CHANGES = ChangesReads.CHANGES;
  /** Comma-separated columns that pair a DELETE and an INSERT into an update (default: the identifier fields). */
  public static final String KEY = ChangesReads.KEY;
  /** Set by this table on the options of the loaded table's scan: the query was given the changes' columns. */
  static final String SHAPED = ChangesReads.SHAPED;

  private final Table loaded;
  private final StructType schema;

  private ChangesTable(Table loaded) {
    this.loaded = loaded;
    this.schema = loaded.schema()
        .add("_change_type", DataTypes.StringType, true)
        .add("_barrier", DataTypes.LongType, true);
  }

  /** Whether a streaming read with these options asks for changes. */
  public static boolean asked(Map<String, String> options) {
    return ChangesReads.asked(options);
  }

  /** {@code loaded} (a table of the catalog, already streamed by it) read as its changes. */
  public static ChangesTable of(Table loaded) {
    return loaded instanceof ChangesTable ? (ChangesTable) loaded : new ChangesTable(loaded);
  }

  @Override
  public String name() {
    return loaded.name();
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    Map<String, String> shaped = new HashMap<>(options.asCaseSensitiveMap());
    shaped.put(SHAPED, "true");
    CaseInsensitiveStringMap marked = new CaseInsensitiveStringMap(shaped);
    return () -> new Scan() {
      @Override
      public StructType readSchema() {
        return schema;
      }

      @Override
      public String description() {
        return "changes of " + loaded.name();
      }

      @Override
      public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return ((SupportsRead) loaded).newScanBuilder(marked).build().toMicroBatchStream(checkpointLocation);
      }
    };
  }

  @Override
  public String toString() {
    return "ChangesTable(" + loaded.name() + ")";
  }
}
