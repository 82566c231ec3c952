"""Finding and opening a catalog the pyiceberg way, with the configuration checks a reader needs.

``load_catalog`` reads ``.pyiceberg.yaml`` and ``PYICEBERG_CATALOG__<NAME>__<KEY>`` variables as
pyiceberg does, but never creates a catalog by accident: a SQLite URI must name an existing catalog
database (pyiceberg would create a new, empty one), and a SQL catalog with nothing under its name,
in a database that holds other catalog names, is refused naming those. ``refuse_unsupported``
refuses a catalog that cannot host the protocol before anything is written (docs/protocol.md §6.5).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from consistent_catalog import _pyiceberg
from consistent_catalog.exceptions import CatalogConfigError
from consistent_catalog.faults import RetryPolicy, retrying

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog


def load_catalog(name: str | None = None, *, create: bool = False, **properties: str) -> Catalog:
    """The pyiceberg catalog ``name``, configured as pyiceberg finds it, ``properties`` overriding;
    ``create=True`` lets pyiceberg create a new SQL catalog.

    Without a name: pyiceberg's default (``default-catalog`` in ``.pyiceberg.yaml``, else ``default``),
    or, when that is not configured and exactly one catalog is, that one.
    """
    from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog
    from pyiceberg.utils.config import Config
    from sqlalchemy.exc import SQLAlchemyError

    try:
        config = Config()
        label = name if name is not None else config.get_default_catalog_name()
        given = {k: v for k, v in properties.items() if v is not None}
        if name is None and not given and config.get_catalog_config(label) is None:
            known = config.get_known_catalogs()
            if len(known) == 1:  # one catalog configured, and no default named: that one is meant
                label = known[0]
        conf = {**(config.get_catalog_config(label) or {}), **given}
    except ValueError as exc:
        raise CatalogConfigError(f"cannot read the pyiceberg configuration: {exc}") from None
    env = f"PYICEBERG_CATALOG__{label.upper().replace('-', '_')}__"
    if not conf.get("uri") and not conf.get("type") and "py-catalog-impl" not in conf:
        known = [c for c in config.get_known_catalogs() if c != label.lower()]
        hint = f" (configured: {', '.join(known)} — pass --catalog {known[0]})" if known else ""
        raise CatalogConfigError(
            f"cannot load catalog {label!r}: it is not configured{hint}; set {env}URI (e.g. "
            f"sqlite:////path/catalog.db) and {env}WAREHOUSE, or add it under `catalog:` in .pyiceberg.yaml "
            "(in ~, the current directory or $PYICEBERG_HOME); `consistent-catalog demo` builds a demo catalog"
        )
    uri = conf.get("uri")
    if "uri" in given:
        source = "the uri passed to ConsistentCatalog.load"
    else:
        source = next((k for k in os.environ if k.upper() == f"{env}URI"), f"catalog {label!r} in .pyiceberg.yaml")
    if isinstance(uri, str) and uri.startswith("sqlite") and not create:
        check_sqlite_catalog(label, uri, source)
    policy = RetryPolicy.from_properties(conf)  # a REST catalog asks its server for its config here: faults count
    try:
        # the configuration as read now (pyiceberg's is read at import)
        catalog = retrying(policy, lambda: pyiceberg_load_catalog(label, **conf), catalog=label, what="its configuration")
    except (ValueError, NotImplementedError) as exc:
        detail = re.sub(r"using -+uri, ", "using ", str(exc))  # pyiceberg's CLI option; ours has none
        raise CatalogConfigError(f"cannot load catalog {label!r}: {detail}") from None
    except SQLAlchemyError as exc:
        first = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise CatalogConfigError(f"cannot open the database of catalog {label!r} ({source}): {first}") from None
    if not create:
        check_catalog_name(catalog)
    return catalog


def check_sqlite_catalog(label: str, uri: str, source: str) -> None:
    """Refuse a SQLite URI that names no catalog database (before pyiceberg creates one there)."""
    import sqlite3

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(uri)
    except ArgumentError as exc:
        raise CatalogConfigError(f"catalog {label!r}: {uri!r} ({source}) is not a database URL: {exc}") from None
    database = url.database or ""
    if database.startswith("file:"):  # sqlite:///file:PATH?mode=...&uri=true
        if "memory" in str(url.query.get("mode", "")):
            return
        database = database[len("file:"):]
    if database in ("", ":memory:"):
        return  # in memory: nothing is created on disk
    path = os.path.abspath(database)
    way_out = (
        f"check {source}; a read never creates a catalog — create one with `consistent-catalog demo --dir DIR` "
        "(DIR/catalog.db), `consistent-catalog spark-conf --catalog-uri URI`, pyiceberg's SqlCatalog or "
        "ConsistentCatalog.load(..., create=True)"
    )
    if not os.path.exists(path):
        missing = os.path.dirname(path)
        why = f" (directory {missing} does not exist either)" if not os.path.isdir(missing) else ""
        raise CatalogConfigError(f"no catalog database at {path}{why}; {way_out}")
    if os.path.isdir(path):
        raise CatalogConfigError(f"{path} is a directory, not a catalog database; {way_out}")
    try:
        found = _pyiceberg.sqlite_has_catalog_tables(path)
    except sqlite3.Error as exc:
        raise CatalogConfigError(f"{path} is not a SQLite catalog database ({exc}); {way_out}") from None
    if not found:
        raise CatalogConfigError(f"{path} is a SQLite database without an Iceberg catalog (no iceberg_tables); {way_out}")


def check_catalog_name(catalog: Catalog) -> None:
    """A SQL catalog with nothing under its name, in a database that holds other catalog names: refuse it."""
    from sqlalchemy.exc import SQLAlchemyError

    if not _pyiceberg.is_sql_catalog(catalog):
        return
    try:
        if catalog.list_namespaces():
            return  # cheap: the names are read only when this catalog shows nothing
    except SQLAlchemyError:
        return  # a database without the catalog's tables: nothing to compare
    names = _pyiceberg.sql_catalog_names(catalog) or set()
    names.discard(catalog.name)
    if not names:
        return  # an empty catalog, not a wrong name
    url = catalog.engine.url  # type: ignore[attr-defined]  # a SqlCatalog: sql_catalog_names answered
    where = os.path.abspath(url.database or "") if url.get_backend_name() == "sqlite" else url.render_as_string(hide_password=True)
    first = sorted(names)[0]
    env = f"PYICEBERG_CATALOG__{first.upper().replace('-', '_')}__URI"
    raise CatalogConfigError(
        f"catalog {catalog.name!r} has no tables in {where}; the database holds catalogs named "
        f"{', '.join(sorted(names))} — use --catalog {first} (configured with {env} or under `catalog:` in "
        f".pyiceberg.yaml), or ConsistentCatalog.load({first!r})"
    )


def refuse_unsupported(catalog: Catalog) -> None:
    """Refuse a catalog that cannot host the protocol before anything is written (docs/protocol.md §6.5).

    Nessie (behind its Iceberg REST API, which says so in its config: ``nessie.is-nessie-catalog``)
    versions the whole catalog on its own ``main`` and accepts no other Iceberg ref of a table: no
    ``consistent-staged`` branch, no ``consistent-fence``, no tags, so neither staged epochs nor fencing nor
    pins could work; commits would fail halfway through the first epoch.
    """
    if str(getattr(catalog, "properties", {}).get("nessie.is-nessie-catalog", "")).lower() == "true":
        raise CatalogConfigError(
            f"catalog {catalog.name!r} is a Nessie catalog, which accepts only a table's main ref (no branches or "
            "tags): consistent-catalog needs the branches consistent-staged and consistent-fence and tags for pins. "
            "Use Nessie's own commits for cross-table consistency, or put the tables in a catalog that keeps Iceberg "
            "refs (a SQL catalog, Polaris, Lakekeeper, Gravitino, Glue, Hive)"
        )
