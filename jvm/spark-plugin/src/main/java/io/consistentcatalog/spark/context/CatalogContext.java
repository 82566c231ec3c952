package io.consistentcatalog.spark.context;

import java.util.Collections;
import java.util.Map;
import java.util.function.Supplier;
import org.apache.iceberg.catalog.Catalog;

/**
 * What the consistent catalog hands down to its tables, scans, writes and streams, as Iceberg builds
 * {@code SparkWrite} and {@code SparkMicroBatchStream} from a table and a conf object and never hands them
 * {@code SparkCatalog}: the names, the catalog options, the Iceberg catalog underneath, every table's state
 * ({@link CatalogStates}, the cut session's loads), the tables served at a cut ({@link ServedTables}) and the
 * writer ({@link WriterInstance}: the fenced committer, the instance id, its leases).
 *
 * <p>One per catalog instance, built by the catalog when Spark initialises it; nothing below the adapter holds
 * the catalog class itself.
 */
public final class CatalogContext {
  private final CatalogOptions options;
  private final Supplier<Catalog> iceberg;
  private final CatalogStates states;
  private final ServedTables served;
  private volatile WriterInstance writer;

  public CatalogContext(CatalogOptions options, Supplier<Catalog> iceberg, CatalogStates states, ServedTables served) {
    this.options = options;
    this.iceberg = iceberg;
    this.states = states;
    this.served = served;
  }

  /** This catalog's name as Spark configured it ({@code lake_consistent}). */
  public String catalogName() {
    return options.catalogName;
  }

  /** The plain catalog's name: the Iceberg catalog underneath, and where errors point writers and readers. */
  public String plainCatalogName() {
    return options.plainName;
  }

  /** The Iceberg catalog's options as configured ({@code type}, {@code uri}, {@code warehouse}, ...). */
  public Map<String, String> icebergOptions() {
    return Collections.unmodifiableMap(options.icebergOptions);
  }

  public CatalogOptions options() {
    return options;
  }

  /** The Iceberg catalog underneath (built when Spark initialised the catalog). */
  public Catalog icebergCatalog() {
    return iceberg.get();
  }

  /** Every table's state, as the cut session loads them. */
  public CatalogStates states() {
    return states;
  }

  /** The tables served at a cut, as writes see them. */
  public ServedTables served() {
    return served;
  }

  /** The writer: this JVM's instance id, its registrations, the fenced committer (built at the first write). */
  public WriterInstance writer() {
    WriterInstance found = writer;
    if (found == null) {
      synchronized (this) {
        if (writer == null) {
          writer = new WriterInstance(this,
              new FencedCommit(icebergCatalog(), catalogName(), options.retryDeadlineMs,
                  CatalogGuard.of(options.plainName, options.icebergOptions)));
        }
        found = writer;
      }
    }
    return found;
  }

  /** The fenced committer every write commits through (protocol §5.9). */
  public FencedCommit committer() {
    return writer().committer();
  }
}
