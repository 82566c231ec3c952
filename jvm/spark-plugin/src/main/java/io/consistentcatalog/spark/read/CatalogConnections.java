package io.consistentcatalog.spark.read;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.HashMap;
import java.util.Map;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.io.CloseableGroup;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.jdbc.JdbcClientPool;

/**
 * The connections of a JDBC catalog (Iceberg's {@link JdbcClientPool}), never handing out one a restart of the
 * database broke (protocol §6.8).
 *
 * <p>Iceberg's pool (1.10) reconnects and runs a call once more when it fails with a connection error (SQLState
 * {@code 08000}, {@code 08003}, {@code 08006}, {@code 08007}, {@code 40001}, a {@code SQLTransientException};
 * {@code jdbc.retryable_status_codes} adds states); when the reconnection or that second run fails, the first
 * error is raised, and a connection that could not be replaced goes back to the pool, to fail the next call
 * that takes it. A connection whose server restarted while it sat in the pool is not known to be broken until a
 * statement is sent on it: that statement fails with an EOF, and a commit failing so has an unknown outcome.
 *
 * <p>Here each pooled connection is a handle whose connection is replaced before a call runs on it when it is
 * closed (the driver closes a connection after an I/O error) or, after a second unused, does not answer
 * {@link Connection#isValid}. Opening the replacement fails while the database is down: an error of SQLState
 * {@code 08001} (unavailable: nothing was sent), which the caller's retry policy waits out ({@link Faults},
 * {@link FencedCommit}); the next call tries again. Iceberg's own resend of a call after reconnecting is kept:
 * {@link FencedCommit} reads the table back before it believes a refusal, so a commit it resent that had landed
 * is found, not reported refused.
 *
 * <p>The consistent catalog puts one in its {@code JdbcCatalog} after Iceberg built it ({@link #install}). Not as
 * {@code catalog-impl} of a subclass built with a pool builder: Iceberg then loads that class through another
 * path, and a streaming query's first {@code toTable} found no JDBC driver ({@code DriverManager}'s "No suitable
 * driver").
 */
public class CatalogConnections extends JdbcClientPool {
  /** A connection unused this long is checked with {@link Connection#isValid} before a call runs on it. */
  static final long VALIDATE_AFTER_IDLE_MS = 1_000L;

  private static final int VALIDATE_TIMEOUT_S = 5;

  /**
   * Put a pool of these in place of the pool of {@code catalog} when it is Iceberg's {@code JdbcCatalog} (its field
   * {@code connections}; the JDBC catalog offers no other way for a catalog built from Spark options), closing the
   * pool it replaces. Any other catalog is left as it is; so is a JDBC catalog whose field is not found (another
   * Iceberg version): it keeps Iceberg's pool.
   */
  public static void install(Catalog catalog, Map<String, String> options) {
    if (catalog == null || catalog.getClass() != JdbcCatalog.class || options.get(CatalogProperties.URI) == null) {
      return;
    }
    try {
      Field field = JdbcCatalog.class.getDeclaredField("connections");
      field.setAccessible(true);
      Object old = field.get(catalog);
      if (!(old instanceof JdbcClientPool) || old instanceof CatalogConnections) {
        return;
      }
      Field groupField = JdbcCatalog.class.getDeclaredField("closeableGroup");
      groupField.setAccessible(true);
      CloseableGroup group = (CloseableGroup) groupField.get(catalog);
      CatalogConnections pool = new CatalogConnections(options.get(CatalogProperties.URI), new HashMap<>(options));
      field.set(catalog, pool);
      if (group != null) {
        group.addCloseable(pool); // closed with the catalog
      }
      ((JdbcClientPool) old).close();
    } catch (ReflectiveOperationException | RuntimeException e) {
      // another Iceberg: Iceberg's pool stays (connections a restart broke are then reconnected on their next use)
    }
  }

  public CatalogConnections(String dbUrl, Map<String, String> properties) {
    this(Integer.parseInt(properties.getOrDefault(CatalogProperties.CLIENT_POOL_SIZE,
        String.valueOf(CatalogProperties.CLIENT_POOL_SIZE_DEFAULT))), dbUrl, properties);
  }

  public CatalogConnections(int poolSize, String dbUrl, Map<String, String> properties) {
    super(poolSize, dbUrl, properties);
  }

  @Override
  protected Connection newClient() {
    Handle handle = new Handle(this, super.newClient());
    return (Connection) Proxy.newProxyInstance(
        CatalogConnections.class.getClassLoader(), new Class<?>[] {Connection.class}, handle);
  }

  /** A new connection to the database (an UncheckedSQLException when it cannot be opened). */
  private Connection open() {
    return super.newClient();
  }

  @Override
  public <R> R run(Action<R, Connection, SQLException> action, boolean retry) throws SQLException, InterruptedException {
    return super.run(connection -> {
      Handle handle = Proxy.isProxyClass(connection.getClass()) && Proxy.getInvocationHandler(connection) instanceof Handle
          ? (Handle) Proxy.getInvocationHandler(connection) : null;
      if (handle != null) {
        handle.ensureUsable();
      }
      try {
        return action.run(connection);
      } finally {
        if (handle != null) {
          handle.lastUsed = System.nanoTime();
        }
      }
    }, retry);
  }

  /** One pooled connection: the JDBC connection it stands for now, replaced when it broke. */
  private static final class Handle implements InvocationHandler {
    private final CatalogConnections pool;
    private Connection target;
    private volatile long lastUsed = System.nanoTime();

    Handle(CatalogConnections pool, Connection target) {
      this.pool = pool;
      this.target = target;
    }

    /** Replace the connection when it is closed, or idle and not answering; raises when the database is down. */
    synchronized void ensureUsable() {
      boolean broken;
      try {
        broken = target == null || target.isClosed();
        if (!broken && System.nanoTime() - lastUsed > VALIDATE_AFTER_IDLE_MS * 1_000_000L) {
          broken = !target.isValid(VALIDATE_TIMEOUT_S);
        }
      } catch (SQLException e) {
        broken = true;
      }
      if (!broken) {
        return;
      }
      Connection old = target;
      target = null;
      if (old != null) {
        try {
          old.close();
        } catch (SQLException | RuntimeException e) {
          // it is broken anyway
        }
      }
      target = pool.open(); // throws while the database is down: the caller's retry policy waits it out
    }

    @Override
    public synchronized Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
      String name = method.getName();
      if (name.equals("equals") && args != null && args.length == 1) {
        return proxy == args[0];
      }
      if (name.equals("hashCode") && (args == null || args.length == 0)) {
        return System.identityHashCode(proxy);
      }
      if (target == null) {
        if (name.equals("close")) {
          return null;
        }
        if (name.equals("isClosed")) {
          return Boolean.TRUE;
        }
        throw new SQLException("This connection has been closed.", "08003");
      }
      try {
        return method.invoke(target, args);
      } catch (InvocationTargetException e) {
        throw e.getCause();
      }
    }
  }
}
