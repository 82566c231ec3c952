package io.consistentcatalog.spark.context;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.io.FileIO;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** The data files Spark's tasks wrote for one write (Iceberg's commit messages), as an epoch or ingest sees them. */
public final class BatchFiles {
  private static final Logger LOG = LoggerFactory.getLogger(BatchFiles.class);

  private BatchFiles() {}

  /** Every data file the messages hold. */
  public static List<DataFile> of(WriterCommitMessage[] messages) {
    List<DataFile> out = new ArrayList<>();
    for (WriterCommitMessage message : messages) {
      if (message != null) {
        out.addAll(Arrays.asList(files(message)));
      }
    }
    return out;
  }

  /** The rows in the files the messages hold. */
  public static long rows(WriterCommitMessage[] messages) {
    long rows = 0;
    for (DataFile file : of(messages)) {
      rows += file.recordCount();
    }
    return rows;
  }

  /**
   * Deletes the files of a write that will never be committed (an epoch that is {@code done}, a watermark, a batch
   * whose key already landed): Iceberg's own abort deletes them only after a refused commit.
   */
  public static void delete(FileIO io, WriterCommitMessage[] messages) {
    for (DataFile file : of(messages)) {
      try {
        io.deleteFile(file.location());
      } catch (RuntimeException e) {
        LOG.warn("could not delete {} (a file no snapshot references; orphan-file cleanup removes it): {}",
            file.location(), e.toString());
      }
    }
  }

  /**
   * Gives up a write whose files Spark's tasks wrote. Before a commit of them was {@code sent} no snapshot references
   * them: they are deleted here, and Iceberg's own abort is not called (its {@code SparkWrite.abort} deletes them only
   * after a commit refused with a {@code CleanableFailure}; otherwise it keeps them and logs "Skipping cleanup of
   * written files", meant for a commit whose outcome is unknown, which it was not). Once sent, Iceberg's abort decides
   * (a refused commit: deleted; an unknown outcome: kept, and logged).
   */
  public static void abandon(FileIO io, WriterCommitMessage[] messages, boolean sent, Runnable icebergAbort) {
    if (sent) {
      icebergAbort.run();
    } else {
      delete(io, messages);
    }
  }

  /**
   * The data files of one task's commit message: Iceberg's {@code SparkWrite.TaskCommit#files()}, which is not
   * public, read reflectively.
   */
  private static DataFile[] files(WriterCommitMessage message) {
    try {
      Method files = message.getClass().getDeclaredMethod("files");
      files.setAccessible(true);
      return (DataFile[]) files.invoke(message);
    } catch (ReflectiveOperationException | ClassCastException e) {
      throw new IllegalStateException("cannot read the data files of " + message.getClass().getName()
          + " (an Iceberg version this plugin does not know?)", e);
    }
  }
}
