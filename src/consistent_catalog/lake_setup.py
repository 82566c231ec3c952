"""One configuration for Spark, the CLI and Python: set up a lake and write where each finds it.

``set_up_lake`` creates a catalog (a SQLite file by default; an existing one is kept), then writes the
two configurations that name it: the catalog's entry in the ``.pyiceberg.yaml`` pyiceberg reads (so
``consistent-catalog`` and ``ConsistentCatalog.load`` find it) and a rendered ``spark-defaults.conf`` (so
``spark-sql --properties-file``, a Thrift server or ``SPARK_CONF_DIR`` find the same catalog as ``lake`` and
``lake_consistent``). Both name one catalog: the same name, database and warehouse.

pyiceberg reads the first ``.pyiceberg.yaml`` it finds in ``$PYICEBERG_HOME``, ``~`` and the current
directory, in that order; the entry goes into that file (``~/.pyiceberg.yaml``, or
``$PYICEBERG_HOME/.pyiceberg.yaml`` when that is set, where there is none yet). The file is edited as text:
comments and other catalogs stay as they are, and the result is read back the way pyiceberg reads it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from consistent_catalog.exceptions import CatalogConfigError

DEFAULT_DIR = "lake"
"""Where ``consistent-catalog init`` puts a new lake: ``./lake/catalog.db``, ``./lake/warehouse``,
``./lake/spark-defaults.conf``."""
PYICEBERG_YML = ".pyiceberg.yaml"

EntryAction = Literal["added", "unchanged", "replaced", "printed"]


@dataclass(frozen=True)
class LakeSetup:
    """What ``set_up_lake`` did: the catalog and the two files that name it."""

    name: str
    uri: str  # pyiceberg's URI of the catalog (with no password)
    warehouse: str | None
    pyiceberg_yaml: Path
    pyiceberg_action: EntryAction
    pyiceberg_entry: str  # the exact lines of the entry, as written (or to be added by hand)
    spark_conf: Path | None
    consistent_catalog: bool  # the Spark file has <name>_consistent (the plugin jar was found)
    notes: tuple[str, ...] = ()


def pyiceberg_search_path() -> list[Path]:
    """The ``.pyiceberg.yaml`` files pyiceberg looks for, in its order (it reads the first that exists)."""
    directories = [os.environ.get("PYICEBERG_HOME"), os.path.expanduser("~"), os.getcwd()]
    return [Path(d) / PYICEBERG_YML for d in directories if d]


def pyiceberg_yaml_in_use() -> Path | None:
    """The ``.pyiceberg.yaml`` pyiceberg reads now, or None when there is none."""
    return next((path for path in pyiceberg_search_path() if path.is_file()), None)


def default_pyiceberg_yaml() -> Path:
    """Where the catalog's entry goes: the file pyiceberg reads, else a new one where it looks first."""
    return pyiceberg_yaml_in_use() or pyiceberg_search_path()[0]


def pyiceberg_entry(catalog_uri: str, warehouse: str | None) -> dict[str, str]:
    """The properties of a catalog's ``.pyiceberg.yaml`` entry that reach what Spark's file reaches."""
    from consistent_catalog.spark.session import (
        is_rest_uri,
        normalize_warehouse,
        parse_catalog_uri,
        rest_warehouse,
        service_catalog,
    )

    service = service_catalog(catalog_uri)
    if service is not None:  # a Hive Metastore or Glue: pyiceberg's HiveCatalog / GlueCatalog
        return {**service[1], "warehouse": normalize_warehouse(warehouse)} if warehouse else dict(service[1])
    if is_rest_uri(catalog_uri):
        entry = {"type": "rest", "uri": catalog_uri.strip()}
        location = rest_warehouse(warehouse)
        return {**entry, "warehouse": location} if location else entry
    entry = {"uri": parse_catalog_uri(catalog_uri).pyiceberg_uri}
    return {**entry, "warehouse": normalize_warehouse(warehouse)} if warehouse else entry


def entry_text(name: str, entry: dict[str, str], *, indent: str = "  ") -> list[str]:
    """``name:`` and its properties, indented as one entry under ``catalog:``."""
    return [f"{indent}{name}:", *(f"{indent * 2}{key}: {_scalar(value)}" for key, value in entry.items())]


def _scalar(value: str) -> str:
    # strictyaml reads plain scalars; quote only what YAML would misread (a ': ' or ' #', a leading special char)
    if re.search(r":\s|\s#|^[\s!&*?|>'\"%@`{}\[\],#-]|\s$", value) or not value:
        return "'" + value.replace("'", "''") + "'"
    return value


def write_pyiceberg_entry(path: Path, name: str, entry: dict[str, str], *, force: bool = False) -> EntryAction:
    """Put ``entry`` under ``catalog: name:`` in the YAML file ``path`` (created when missing).

    An entry of that name with the same properties is left alone; one with other values is refused unless
    ``force`` (then replaced). Everything else in the file stays as written.
    """
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    current = _read_yaml(path, text)
    catalogs = current.get("catalog") or {}
    if not isinstance(catalogs, dict):
        raise CatalogConfigError(f"{path}: `catalog:` is not a mapping; fix the file, then run this again")
    existing_key = next((key for key in catalogs if key.lower() == name.lower()), None)
    if existing_key is not None:
        existing = {k.lower(): v for k, v in (catalogs[existing_key] or {}).items()}
        if all(existing.get(key) == value for key, value in entry.items()):
            return "unchanged"
        if not force:
            shown = existing.get("uri", "(no uri)")
            raise CatalogConfigError(
                f"catalog {name!r} in {path} already names another catalog ({shown}); pick another --name, or "
                f"pass --force to point {name!r} at the new one"
            )
    lines = text.splitlines()
    if existing_key is not None:
        lines = _without_entry(path, lines, existing_key)
    lines = _with_entry(path, lines, name, entry)
    new_text = "\n".join(lines) + "\n"
    written = _read_yaml(path, new_text).get("catalog") or {}
    if {k.lower(): v for k, v in (written.get(name) or {}).items()} != entry:
        raise CatalogConfigError(
            f"could not add catalog {name!r} to {path} as text (an unusual layout); add these lines under "
            f"`catalog:` by hand: {' / '.join(line.strip() for line in entry_text(name, entry))}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new_text, encoding="utf-8")
    if "@" in entry.get("uri", "") and ":" in entry["uri"].split("@", 1)[0].split("//", 1)[-1]:
        path.chmod(0o600)  # it holds the catalog database's password
    return "added" if existing_key is None else "replaced"


def _read_yaml(path: Path, text: str) -> dict:
    import strictyaml  # what pyiceberg reads .pyiceberg.yaml with

    if not text.strip():
        return {}
    try:
        data = strictyaml.load(text).data
    except strictyaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CatalogConfigError(f"{path} is not YAML pyiceberg can read ({first}); fix it, then run this again") from None
    if not isinstance(data, dict):
        raise CatalogConfigError(f"{path} is not a YAML mapping; fix it, then run this again")
    return data


_TOP = re.compile(r"^catalog\s*:\s*(#.*)?$")


def _catalog_block(lines: list[str]) -> tuple[int, str] | None:
    """The line of the top-level ``catalog:`` and the indentation of its entries."""
    for number, line in enumerate(lines):
        if _TOP.match(line):
            for child in lines[number + 1 :]:
                if child.strip() and not child.lstrip().startswith("#"):
                    indent = child[: len(child) - len(child.lstrip())]
                    return number, indent or "  "
            return number, "  "
    return None


def _without_entry(path: Path, lines: list[str], key: str) -> list[str]:
    block = _catalog_block(lines)
    if block is None:
        raise CatalogConfigError(f"{path}: cannot find `catalog:` as a block to edit; edit the file by hand")
    start, indent = block
    head = re.compile(rf"^{re.escape(indent)}{re.escape(key)}\s*:\s*(#.*)?$")
    for number in range(start + 1, len(lines)):
        if head.match(lines[number]):
            end = number + 1
            while end < len(lines) and (not lines[end].strip() or lines[end].startswith(indent + " ")
                                        or lines[end].startswith(indent + "\t")):
                end += 1
            return lines[:number] + lines[end:]
    raise CatalogConfigError(f"{path}: cannot find the entry {key!r} as a block to replace; edit the file by hand")


def _with_entry(path: Path, lines: list[str], name: str, entry: dict[str, str]) -> list[str]:
    block = _catalog_block(lines)
    if block is None:
        if any(re.match(r"^catalog\s*:", line) for line in lines):
            raise CatalogConfigError(f"{path}: `catalog:` is written inline; add the entry by hand")
        spacer = [""] if lines and lines[-1].strip() else []
        return [*lines, *spacer, "catalog:", *entry_text(name, entry)]
    start, indent = block
    return [*lines[: start + 1], *entry_text(name, entry, indent=indent), *lines[start + 1 :]]


def set_up_lake(
    directory: str | os.PathLike[str] = DEFAULT_DIR,
    *,
    name: str = "lake",
    catalog_uri: str | None = None,
    warehouse: str | None = None,
    spark_conf: str | os.PathLike[str] | None = None,
    pyiceberg_yaml: str | os.PathLike[str] | None = None,
    write_pyiceberg: bool = True,
    force: bool = False,
) -> LakeSetup:
    """Create (or adopt) the catalog ``name`` and write its ``.pyiceberg.yaml`` entry and Spark properties file.

    Defaults: a SQLite catalog ``DIRECTORY/catalog.db``, the warehouse ``DIRECTORY/warehouse``, Spark's file
    ``DIRECTORY/spark-defaults.conf``, and the entry in the ``.pyiceberg.yaml`` pyiceberg reads
    (``default_pyiceberg_yaml``). ``write_pyiceberg=False`` only returns the entry's lines.
    """
    from consistent_catalog.connect import load_catalog
    from consistent_catalog.spark.session import parse_spark_defaults, write_spark_defaults

    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        raise CatalogConfigError(f"catalog name {name!r}: use letters, digits and _ (Spark and pyiceberg both "
                                 "take it as an identifier), e.g. --name lake")
    from consistent_catalog.spark.session import is_rest_uri, service_catalog

    root = Path(directory).expanduser().absolute()
    if catalog_uri is None:
        catalog_uri = f"sqlite:///{root / 'catalog.db'}"
    if not warehouse:
        if is_rest_uri(catalog_uri):
            raise CatalogConfigError(f"a REST catalog ({catalog_uri}) needs --warehouse: the catalog name or location "
                                     "its server expects")
        if service_catalog(catalog_uri) is not None:
            raise CatalogConfigError(f"a Hive or Glue catalog ({catalog_uri}) needs --warehouse: where its new tables "
                                     "go (s3://bucket/warehouse, or a path shared by every engine)")
        warehouse = str(root / "warehouse")  # never spark-conf's .demo default
    conf_path = Path(spark_conf).expanduser().absolute() if spark_conf is not None else root / "spark-defaults.conf"
    written = write_spark_defaults(conf_path, catalog_uri, warehouse, name=name)  # creates a SQLite catalog too
    rendered = parse_spark_defaults(written.read_text(encoding="utf-8"))

    entry = pyiceberg_entry(catalog_uri, warehouse)
    # the catalog opens the way the CLI will open it (a database holding only other catalog names is refused)
    catalog = load_catalog(name, **entry)
    if hasattr(catalog, "engine"):
        catalog.engine.dispose()
    yaml_path = Path(pyiceberg_yaml).expanduser().absolute() if pyiceberg_yaml is not None else default_pyiceberg_yaml()
    notes: list[str] = []
    if write_pyiceberg:
        action: EntryAction = write_pyiceberg_entry(yaml_path, name, entry, force=force)
        in_use = pyiceberg_yaml_in_use()
        if in_use is not None and in_use.absolute() != yaml_path:
            notes.append(f"pyiceberg reads {in_use} first, not {yaml_path}: set PYICEBERG_HOME={yaml_path.parent} "
                         f"or leave out --pyiceberg-yaml")
    else:
        action = "printed"
    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    for key, value in entry.items():
        variable = prefix + key.upper().replace(".", "__").replace("-", "_")  # pyiceberg's spelling of the key
        if os.environ.get(variable, value) != value:
            notes.append(f"${variable}={os.environ[variable]} overrides the file: unset it to use this catalog")
    shown_uri = re.sub(r"(//[^:/@]+):[^@/]*@", r"\1:***@", entry.get("uri") or catalog_uri.strip())
    return LakeSetup(
        name=name,
        uri=shown_uri,
        warehouse=entry.get("warehouse"),
        pyiceberg_yaml=yaml_path,
        pyiceberg_action=action,
        pyiceberg_entry="\n".join(["catalog:", *entry_text(name, entry)]),
        spark_conf=written,
        consistent_catalog=f"spark.sql.catalog.{name}_consistent" in rendered,
        notes=tuple(notes),
    )
