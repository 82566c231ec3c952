package io.consistentcatalog.layering;

import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static com.tngtech.archunit.library.Architectures.layeredArchitecture;
import static com.tngtech.archunit.library.dependencies.SlicesRuleDefinition.slices;

import com.tngtech.archunit.core.importer.ImportOption;
import com.tngtech.archunit.junit.AnalyzeClasses;
import com.tngtech.archunit.junit.ArchTest;
import com.tngtech.archunit.lang.ArchRule;

/**
 * The plugin's package layering, pinned as import-linter pins the Python layers ({@code [tool.importlinter]} in
 * pyproject.toml), and laid out as Iceberg's Spark module: the adapter ({@code io.consistentcatalog.spark}: the
 * catalog, its DDL refusals, the SQL extension, the write rule, the procedures) on top; {@code read},
 * {@code write} and {@code streaming} below it, each built from the context the adapter hands down and never from
 * one another or the adapter; {@code context} (the context, options, settings, errors, the fenced committer, the
 * writer instance, the commit of an epoch or an ingest) below them; {@code core} (the pure protocol) and
 * {@code openlineage} at the bottom, with no Spark in {@code core}. Runs in every Spark line's Maven build over
 * that line's compiled plugin classes (its shims included).
 */
@AnalyzeClasses(packages = "io.consistentcatalog", importOptions = PackageLayeringTest.PluginClassesOnly.class)
class PackageLayeringTest {
  private static final String ADAPTER = "io.consistentcatalog.spark";
  private static final String READ = "io.consistentcatalog.spark.read..";
  private static final String WRITE = "io.consistentcatalog.spark.write..";
  private static final String STREAMING = "io.consistentcatalog.spark.streaming..";
  private static final String CONTEXT = "io.consistentcatalog.spark.context..";
  private static final String CORE = "io.consistentcatalog.core..";
  private static final String OPENLINEAGE = "io.consistentcatalog.openlineage..";

  /** The protocol is pure: no Spark, nothing of the plugin or of its OpenLineage emitter. */
  @ArchTest
  static final ArchRule coreHasNoSpark = noClasses().that().resideInAPackage(CORE)
      .should().dependOnClassesThat().resideInAnyPackage("org.apache.spark..", "scala..", "io.consistentcatalog.spark..",
          OPENLINEAGE)
      .because("core is the JVM port of the Python protocol modules, pure over table states");

  @ArchTest
  static final ArchRule layers = layeredArchitecture().consideringOnlyDependenciesInAnyPackage("io.consistentcatalog..")
      .layer("adapter").definedBy(ADAPTER)
      .layer("read").definedBy(READ)
      .layer("write").definedBy(WRITE)
      .layer("streaming").definedBy(STREAMING)
      .layer("context").definedBy(CONTEXT)
      .layer("openlineage").definedBy(OPENLINEAGE)
      .layer("core").definedBy(CORE)
      .whereLayer("adapter").mayNotBeAccessedByAnyLayer()
      .whereLayer("read").mayOnlyBeAccessedByLayers("adapter")
      .whereLayer("write").mayOnlyBeAccessedByLayers("adapter")
      .whereLayer("streaming").mayOnlyBeAccessedByLayers("adapter")
      .whereLayer("context").mayOnlyBeAccessedByLayers("adapter", "read", "write", "streaming")
      .whereLayer("openlineage").mayOnlyBeAccessedByLayers("adapter", "read", "write", "streaming", "context")
      .because("read, write and streaming are built from the context the catalog hands down, as Iceberg's SparkWrite "
          + "and SparkMicroBatchStream are built from a table and a conf object and never see SparkCatalog");

  /**
   * The plugin's own classes as this build compiled them (its classes directory): not the test and benchmark mains
   * (test-classes), not a jar (an installed plugin jar on the classpath; skipping jars also keeps the scan fast).
   */
  static final class PluginClassesOnly implements ImportOption {
    @Override
    public boolean includes(com.tngtech.archunit.core.importer.Location location) {
      return !location.isJar() && !location.contains("/test-classes/");
    }
  }

  /** No package cycle anywhere (each package one slice). */
  @ArchTest
  static final ArchRule noCycles = slices().matching("io.consistentcatalog.(**)").should().beFreeOfCycles();
}
