package io.consistentcatalog.spark.context;

import org.apache.iceberg.LocationProviders;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.inmemory.InMemoryFileIO;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.LocationProvider;

/**
 * The genesis snapshot the plugin gives a sink without {@code main} ({@code EpochCommit.prepareStagedBranch}, protocol
 * §5.2 step 1), made the way it makes it, for the conformance runner (a test class: it reaches the package-private
 * {@link EmptySnapshot}). The empty manifest list goes to an in-memory file system.
 */
public final class GenesisSnapshots {
  private GenesisSnapshots() {}

  /** The genesis of the sink {@code base} for {@code job}: as {@code EpochCommit} creates it (sequence number, summary). */
  public static Snapshot create(TableMetadata base, String job) {
    return EmptySnapshot.genesis(new ScratchOperations(base), base, job);
  }

  /** Operations over {@code base} that write into memory and commit nothing. */
  private static final class ScratchOperations implements TableOperations {
    private final TableMetadata base;
    private final FileIO io = new InMemoryFileIO();

    ScratchOperations(TableMetadata base) {
      this.base = base;
    }

    @Override
    public TableMetadata current() {
      return base;
    }

    @Override
    public TableMetadata refresh() {
      return base;
    }

    @Override
    public void commit(TableMetadata from, TableMetadata to) {
      throw new UnsupportedOperationException("the conformance runner commits nothing");
    }

    @Override
    public FileIO io() {
      return io;
    }

    @Override
    public String metadataFileLocation(String fileName) {
      return base.location() + "/metadata/" + fileName;
    }

    @Override
    public LocationProvider locationProvider() {
      return LocationProviders.locationsFor(base.location(), base.properties());
    }
  }
}
