package org.apache.spark.sql.connector.iceberg.catalog;

import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.procedures.BoundProcedure;
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;

/**
 * Spark 4 shim (jvm/spark-4-common, a source folder of the 4.0 and 4.1 lines, never on Spark 3.5): Iceberg's Spark 3.5 procedure interface, which
 * the shared procedures ({@code io.consistentcatalog.spark.CutProcedures}) implement, as a Spark 4
 * {@link UnboundProcedure}. Spark 4 parses and resolves {@code CALL} itself against the catalog's
 * {@code loadProcedure}; binding gives a {@link BoundProcedure} whose call returns the rows as one local scan.
 * Iceberg's Spark 4 runtime no longer ships this package, so the shim cannot clash with it.
 */
public interface Procedure extends UnboundProcedure {
  ProcedureParameter[] parameters();

  StructType outputType();

  InternalRow[] call(InternalRow args);

  @Override
  default String description() {
    return getClass().getSimpleName();
  }

  @Override
  default String name() {
    return getClass().getSimpleName();
  }

  @Override
  default BoundProcedure bind(StructType inputType) {
    Procedure procedure = this;
    org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter[] parameters =
        Arrays.stream(parameters()).map(ProcedureParameter::toSpark)
            .toArray(org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter[]::new);
    return new BoundProcedure() {
      @Override
      public String name() {
        return procedure.name();
      }

      @Override
      public String description() {
        return procedure.description();
      }

      @Override
      public org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter[] parameters() {
        return parameters;
      }

      @Override
      public boolean isDeterministic() {
        return false; // a cut moves with the catalog
      }

      @Override
      public Iterator<Scan> call(InternalRow input) {
        InternalRow[] rows = procedure.call(input);
        StructType schema = procedure.outputType();
        Scan scan = new LocalScan() {
          @Override
          public InternalRow[] rows() {
            return rows;
          }

          @Override
          public StructType readSchema() {
            return schema;
          }
        };
        return Collections.singletonList(scan).iterator();
      }
    };
  }
}
