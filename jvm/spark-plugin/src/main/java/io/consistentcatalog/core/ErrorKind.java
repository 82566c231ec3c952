package io.consistentcatalog.core;

/** The Python exception classes a resolution can end in ({@code consistent_catalog.exceptions}). */
public enum ErrorKind {
  NO_WATERMARK("NoWatermarkError"),
  HISTORY_EXPIRED("HistoryExpiredError"),
  UNTRACKED_WRITE("UntrackedWriteError"),
  STRANDED_DATA("StrandedDataError"),
  MALFORMED_METADATA("MalformedMetadataError"),
  INVALID_INPUT("InvalidInputError"),
  INVALID_BARRIER("InvalidBarrierError"),
  RESOLUTION("ResolutionError"),
  TABLE_NOT_FOUND("TableNotFoundError"),
  // writers (protocol §5, §6)
  CYCLE("CycleError"),
  OWNERSHIP("OwnershipError"),
  FENCED("FencedError"),
  CATALOG_UNAVAILABLE("CatalogUnavailableError"),
  // the catalog (protocol §6.5): it failed the catalog probe, or a commit would exceed what it stores
  CATALOG_PROBE("CatalogProbeError"),
  CATALOG_LIMIT("CatalogLimitError");

  private final String pythonName;

  ErrorKind(String pythonName) {
    this.pythonName = pythonName;
  }

  /** The name of the Python exception class that {@code ConsistentCatalog.resolve} raises. */
  public String pythonName() {
    return pythonName;
  }
}
