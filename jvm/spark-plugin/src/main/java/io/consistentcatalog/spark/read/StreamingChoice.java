package io.consistentcatalog.spark.read;

import io.consistentcatalog.spark.context.Errors;
import io.consistentcatalog.spark.context.StreamingSide;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.Proxy;
import java.util.LinkedHashSet;
import java.util.Set;
import java.util.function.Supplier;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * How a table served by the catalog chooses between a batch and a streaming use (issue 35), the way Iceberg's scans
 * and writes do: the scan's {@code toBatch} is the read at the cut, its {@code toMicroBatchStream} the barrier stream;
 * the write's {@code toBatch} is refused (a table served at a cut is read-only), its {@code toStreaming} the sink's
 * ingest or epoch. Nothing looks at who called.
 */
final class StreamingChoice {
  private StreamingChoice() {}

  /**
   * Iceberg's scan builder of the table at its cut, unchanged for a batch read (every push-down interface it has,
   * the scan it builds with all of its interfaces), except that the scan's {@code toMicroBatchStream} is the
   * catalog's stream ({@link StreamingSide#microBatchStream}) instead of Iceberg's.
   */
  static ScanBuilder scanBuilder(ScanBuilder batch, StreamingSide side, CaseInsensitiveStringMap options) {
    return proxy(batch, ScanBuilder.class, (method, args) -> {
      if (method.getName().equals("build") && method.getParameterCount() == 0) {
        Scan scan = (Scan) invoke(batch, method, args);
        return proxy(scan, Scan.class, (scanMethod, scanArgs) -> {
          if (scanMethod.getName().equals("toMicroBatchStream") && scanMethod.getParameterCount() == 1) {
            try {
              return side.microBatchStream((String) scanArgs[0], options);
            } catch (RuntimeException | Error e) {
              throw e;
            } catch (Exception e) { // a refusal (Spark's checked AnalysisException): a proxy would hide it
              return new Refused(e);
            }
          }
          return invoke(scan, scanMethod, scanArgs);
        });
      }
      return invoke(batch, method, args);
    });
  }

  /**
   * The scan of a table whose batch read has no cut (no watermark yet, ...): its batch ({@code toBatch}) raises that
   * error, as the read it stands for would have; a streaming query reads it as any other.
   */
  static ScanBuilder deferred(StructType schema, Exception error, StreamingSide side, CaseInsensitiveStringMap options) {
    return () -> new Scan() {
      @Override
      public StructType readSchema() {
        return schema;
      }

      @Override
      public String description() {
        return "deferred read (no consistent cut)";
      }

      @Override
      public Batch toBatch() {
        throw Errors.rethrow(error);
      }

      @Override
      public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return side.microBatchStream(checkpointLocation, options);
      }
    };
  }

  /**
   * The write of a table served at a cut: its batch is refused with {@code refusal} (read-only, as before issue 35),
   * its streaming write is the sink's ({@link StreamingSide#streamingWriteBuilder}), built when Spark asks for it
   * (complete output mode's truncate passed on; update output mode, which Spark builds like append mode, the sink
   * tells apart by the query's output mode).
   */
  static WriteBuilder writeBuilder(LogicalWriteInfo info, StreamingSide side, Supplier<RuntimeException> refusal) {
    return new ChoiceBuilder(info, side, refusal);
  }

  /** {@link #writeBuilder}'s builder: truncates for complete mode, is Spark's update-as-append for update mode. */
  private static final class ChoiceBuilder
      implements SupportsTruncate, org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend {
    private final LogicalWriteInfo info;
    private final StreamingSide side;
    private final Supplier<RuntimeException> refusal;
    private boolean truncate;

    ChoiceBuilder(LogicalWriteInfo info, StreamingSide side, Supplier<RuntimeException> refusal) {
      this.info = info;
      this.side = side;
      this.refusal = refusal;
    }

    @Override
    public WriteBuilder truncate() {
      truncate = true;
      return this;
    }

    @Override
    public Write build() {
      boolean truncating = truncate;
      return new Write() {
        private volatile Write streaming;

        @Override
        public String description() {
          return streaming == null ? "consistent write" : streaming.description();
        }

        @Override
        public BatchWrite toBatch() {
          throw refusal.get();
        }

        @Override
        public StreamingWrite toStreaming() {
          WriteBuilder builder = side.streamingWriteBuilder(info);
          if (truncating) {
            builder = ((SupportsTruncate) builder).truncate();
          }
          Write write = builder.build();
          streaming = write;
          return write.toStreaming();
        }

        @Override
        public CustomMetric[] supportedCustomMetrics() {
          Write write = streaming;
          return write == null ? new CustomMetric[0] : write.supportedCustomMetrics();
        }
      };
    }
  }

  /**
   * The stream of a source refused when the query starts (a checked {@code AnalysisException} cannot leave a proxy's
   * method as it is: Java would wrap it in an exception without a message): it raises the refusal as it is when
   * Spark first asks it for an offset, before the first micro-batch.
   */
  private static final class Refused implements MicroBatchStream {
    private final Exception refusal;

    Refused(Exception refusal) {
      this.refusal = refusal;
    }

    @Override
    public org.apache.spark.sql.connector.read.streaming.Offset latestOffset() {
      throw Errors.rethrow(refusal);
    }

    @Override
    public org.apache.spark.sql.connector.read.InputPartition[] planInputPartitions(
        org.apache.spark.sql.connector.read.streaming.Offset start,
        org.apache.spark.sql.connector.read.streaming.Offset end) {
      throw Errors.rethrow(refusal);
    }

    @Override
    public org.apache.spark.sql.connector.read.PartitionReaderFactory createReaderFactory() {
      throw Errors.rethrow(refusal);
    }

    @Override
    public org.apache.spark.sql.connector.read.streaming.Offset initialOffset() {
      throw Errors.rethrow(refusal);
    }

    @Override
    public org.apache.spark.sql.connector.read.streaming.Offset deserializeOffset(String json) {
      throw Errors.rethrow(refusal);
    }

    @Override
    public void commit(org.apache.spark.sql.connector.read.streaming.Offset end) {}

    @Override
    public void stop() {}
  }

  // --- the proxies ---------------------------------------------------------------------------------------

  private interface Handler {
    Object handle(Method method, Object[] args) throws Throwable;
  }

  /** Marks a proxy of this class, to unwrap it in {@code equals}. */
  private static final class Delegating implements InvocationHandler {
    private final Object delegate;
    private final Handler handler;

    Delegating(Object delegate, Handler handler) {
      this.delegate = delegate;
      this.handler = handler;
    }

    @Override
    public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
      if (method.getDeclaringClass() == Object.class) {
        switch (method.getName()) {
          case "equals":
            return delegate.equals(unwrap(args[0]));
          case "hashCode":
            return delegate.hashCode();
          case "toString":
            return delegate.toString();
          default:
            return invoke(delegate, method, args);
        }
      }
      return handler.handle(method, args);
    }
  }

  private static Object unwrap(Object other) {
    if (other != null && Proxy.isProxyClass(other.getClass())
        && Proxy.getInvocationHandler(other) instanceof Delegating) {
      return ((Delegating) Proxy.getInvocationHandler(other)).delegate;
    }
    return other;
  }

  /** A proxy of {@code delegate} with every public interface it implements (Spark matches on them). */
  @SuppressWarnings("unchecked")
  private static <T> T proxy(T delegate, Class<T> base, Handler handler) {
    Set<Class<?>> interfaces = new LinkedHashSet<>();
    interfaces.add(base);
    for (Class<?> c = delegate.getClass(); c != null; c = c.getSuperclass()) {
      collect(c.getInterfaces(), interfaces);
    }
    return (T) Proxy.newProxyInstance(delegate.getClass().getClassLoader(), interfaces.toArray(new Class<?>[0]),
        new Delegating(delegate, handler));
  }

  private static void collect(Class<?>[] found, Set<Class<?>> into) {
    for (Class<?> i : found) {
      if (Modifier.isPublic(i.getModifiers()) && into.add(i)) {
        collect(i.getInterfaces(), into);
      }
    }
  }

  private static Object invoke(Object target, Method method, Object[] args) throws Throwable {
    try {
      return method.invoke(target, args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }
}
