package org.apache.spark.sql.connector.iceberg.catalog;

import org.apache.spark.sql.types.DataType;

/**
 * Spark 4 shim (jvm/spark-4-common, shared by the 4.0 and 4.1 lines): Iceberg's Spark 3.5 procedure parameter, as the shared procedures
 * declare theirs, turned into Spark 4's {@code ProcedureParameter} when a procedure is bound (an optional
 * parameter defaults to NULL).
 */
public final class ProcedureParameter {
  private final String name;
  private final DataType type;
  private final boolean required;

  private ProcedureParameter(String name, DataType type, boolean required) {
    this.name = name;
    this.type = type;
    this.required = required;
  }

  public static ProcedureParameter required(String name, DataType type) {
    return new ProcedureParameter(name, type, true);
  }

  public static ProcedureParameter optional(String name, DataType type) {
    return new ProcedureParameter(name, type, false);
  }

  public String name() {
    return name;
  }

  public DataType dataType() {
    return type;
  }

  public boolean required() {
    return required;
  }

  org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter toSpark() {
    org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter.Builder builder =
        org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter.in(name, type);
    return (required ? builder : builder.defaultValue("NULL")).build();
  }
}
