"""The catalog probe (protocol §6.5): does this catalog hold what the protocol relies on?

Every fence and every publish of the protocol is a compare-and-swap the *catalog* performs: pyiceberg's
SQL catalog swaps the metadata pointer inside a database transaction, a REST server validates the
requirements inside its own swap, a Hive Metastore serialises commits under its lock, Glue refuses an
``UpdateTable`` whose ``VersionId`` is stale. A catalog that accepts two commits from one base (moto's
Glue ignores ``VersionId``) loses writes without an error, and no fence could hold on it. So, on scratch
tables in the scratch namespace ``consistent_probe``, this module checks, the way Iceberg's REST
compatibility kit checks a server (one named case each, what was seen as evidence):

=================================  =============================================================================
``stale-base-refused``             a commit planned on a table as it was before another commit, asserting
                                   ``main`` as it was then, is refused and changes nothing
``one-of-two-concurrent-wins``     two commits from one base, both past the catalog's read of the current
                                   table before either writes: exactly one lands, the other is refused
``branch-survives-main-commit``    a branch ref is where it was after a commit to ``main``
``summary-round-trips``            a snapshot's summary properties read back as written
``multi-table-commit``             not used: the protocol makes no multi-table commit
=================================  =============================================================================

``probe_catalog`` runs the checks and records the result as a property of the namespace
(``consistent.catalog-probe``: the probe's version, whether all hold, the failed capabilities). Writers
call ``require_sound`` before their first commit: once per catalog and process it reads that property
(one catalog read), runs the probe when it is missing or from an older probe, and refuses with
``CatalogProbeError`` naming the failed capability and the way out — never silently weaker.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consistent_catalog import properties as P
from consistent_catalog.exceptions import CatalogLimitError, CatalogProbeError
from consistent_catalog.util.time import now_ms

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

PROBE_VERSION = 1
"""Bumped when a check is added or changed: a result recorded by an older probe is probed again."""
PROBE_NAMESPACE = "consistent_probe"
"""The scratch namespace (a Hive/Glue database name: lower case, digits, underscore) and the result's home."""
STALE_BASE, CONCURRENT, BRANCH, SUMMARY, MULTI_TABLE = (
    "stale-base-refused", "one-of-two-concurrent-wins", "branch-survives-main-commit", "summary-round-trips",
    "multi-table-commit")
CAPABILITIES = (STALE_BASE, CONCURRENT, BRANCH, SUMMARY, MULTI_TABLE)
PROBE_SETTING = "consistent.require-probe"
"""Catalog property (pyiceberg configuration): ``auto`` (the default: writers require the probe on Hive, Glue and
catalogs of kinds the suite does not run; SQL and REST catalogs are probed by ``check-catalog`` on demand) or
``always`` (writers require it on any catalog)."""
RACE_WAIT_S = 15.0
"""How long one of two racing commits waits for the other inside the catalog's commit: both get there within
milliseconds unless the machine stalls, and a wait that ends early would let a weak catalog pass."""
LOCKED_RACE_WAIT_S = 3.0
"""The same on a Hive Metastore, whose table lock never lets the second commit in while the first waits (it is
serialised, which is what holds): waiting longer only delays the probe."""

@dataclass(frozen=True)
class Check:
    """One capability: ``holds`` True/False, or None when the protocol does not use it; ``evidence``: what was seen."""

    capability: str
    holds: bool | None
    evidence: str


@dataclass(frozen=True)
class ProbeReport:
    """The probe's result for one catalog."""

    catalog: str
    kind: str
    version: int
    checks: tuple[Check, ...]
    at: int

    @property
    def failed(self) -> list[str]:
        return [c.capability for c in self.checks if c.holds is False]

    @property
    def holds(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        """The stable JSON of ``consistent-catalog check-catalog -o json`` (protocol §10)."""
        return {"catalog": self.catalog, "kind": self.kind, "probe-version": self.version, "holds": self.holds,
                "checked-at": self.at,
                "checks": [{"capability": c.capability, "holds": c.holds, "evidence": c.evidence} for c in self.checks]}

    def recorded(self) -> str:
        """The namespace property's value (compact JSON): enough for writers to refuse with the reason."""
        evidence = {c.capability: c.evidence for c in self.checks if c.holds is False}
        return json.dumps({"version": self.version, "holds": self.holds, "failed": self.failed, "at": self.at,
                           "evidence": evidence}, separators=(",", ":"))


CATALOG_CLASSES = {"SqlCatalog": "sql", "RestCatalog": "rest", "HiveCatalog": "hive", "GlueCatalog": "glue"}
"""pyiceberg's catalog classes by the kind they are."""
_URI_KINDS = (("http://", "rest"), ("https://", "rest"), ("thrift://", "hive"), ("sqlite", "sql"), ("postgresql", "sql"))
"""What pyiceberg builds for a catalog configured without ``type`` (``infer_catalog_type``), by its ``uri``."""


def catalog_kind(catalog: Catalog | Mapping[str, Any]) -> str:
    """``sql``, ``rest``, ``hive``, ``glue`` or another kind's name, of a pyiceberg catalog (by its class) or of a
    catalog's configuration (its properties): ``py-catalog-impl``'s class, else ``type``, else ``glue.*`` keys (a
    ``GlueCatalog`` made directly), else the ``uri`` as pyiceberg infers a type from it (``unknown`` without one).

    The one answer the probe (which catalogs writers probe, which property limit) and the OpenLineage names (Glue's
    ARN) both follow, as ``io.consistentcatalog.core.CatalogKind`` on the JVM."""
    if not isinstance(catalog, Mapping):
        for cls in type(catalog).__mro__:
            if cls.__name__ in CATALOG_CLASSES:
                return CATALOG_CLASSES[cls.__name__]
        return type(catalog).__name__
    impl = str(catalog.get("py-catalog-impl") or "").strip()
    if impl:
        name = impl.rpartition(".")[2]
        return CATALOG_CLASSES.get(name, name)
    kind = str(catalog.get("type") or "").strip().lower()
    if kind:
        return kind
    if any(str(key).startswith("glue.") for key in catalog):
        return "glue"
    uri = str(catalog.get("uri") or "").strip().lower()
    return next((inferred for prefix, inferred in _URI_KINDS if uri.startswith(prefix)), "unknown")


# --- the probe -------------------------------------------------------------------------------------------
def probe_catalog(catalog: Catalog, *, record: bool = True) -> ProbeReport:
    """Run every check on scratch tables of ``catalog`` (dropped afterwards); ``record``: keep the result as the
    scratch namespace's property, which ``require_sound`` reads."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    try:
        catalog.create_namespace(PROBE_NAMESPACE)
    except NamespaceAlreadyExistsError:
        pass
    name = f"{PROBE_NAMESPACE}.scratch_{uuid.uuid4().hex[:12]}"
    try:
        checks = _run_checks(catalog, name)
    finally:
        _drop_quietly(catalog, name)
    checks.sort(key=lambda c: CAPABILITIES.index(c.capability))
    report = ProbeReport(catalog.name, catalog_kind(catalog), PROBE_VERSION, tuple(checks), now_ms())
    if record:
        catalog.update_namespace_properties(PROBE_NAMESPACE, updates={P.CATALOG_PROBE: report.recorded()})
        _remember(catalog, report.recorded())
    return report


def _run_checks(catalog: Catalog, name: str) -> list[Check]:
    import pyarrow as pa
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.update import SetSnapshotRefUpdate

    table = catalog.create_table(name, schema=pa.schema([pa.field("id", pa.int64())]))
    token = uuid.uuid4().hex
    first = _commit_snapshot(catalog, table, {P.PROBE_TOKEN: token})
    s1 = first.metadata.current_snapshot_id
    summary = catalog.load_table(name).metadata.snapshot_by_id(s1).summary  # type: ignore[union-attr]
    got = None if summary is None else summary.additional_properties.get(P.PROBE_TOKEN)
    checks = [Check(SUMMARY, got == token, f"{P.PROBE_TOKEN} written {token[:8]}…, read back "
                                           f"{(got[:8] + '…') if got else 'nothing'}")]
    branched = _commit(catalog, first, [], [SetSnapshotRefUpdate(ref_name=P.PROBE_BRANCH, type=SnapshotRefType.BRANCH,
                                                                 snapshot_id=s1)])
    second = _commit_snapshot(catalog, branched, {}, main=s1)
    after = catalog.load_table(name).metadata.refs.get(P.PROBE_BRANCH)
    checks.append(Check(BRANCH, after is not None and after.snapshot_id == s1,
                        f"branch {P.PROBE_BRANCH} at {s1}; after a commit to main: "
                        f"{'gone' if after is None else after.snapshot_id}"))
    checks.append(_stale_base(catalog, name, stale=branched, main=s1))
    checks.append(_concurrent(catalog, name, base=second.metadata.current_snapshot_id))
    checks.append(Check(MULTI_TABLE, None, "not used: the protocol makes no multi-table commit"))
    return checks


def _stale_base(catalog: Catalog, name: str, *, stale: Table, main: int | None) -> Check:
    """Commit on ``stale`` (main was ``main`` then; it moved since), asserting main at ``main``."""
    from pyiceberg.exceptions import CommitFailedException

    before = catalog.load_table(name).metadata.current_snapshot_id
    try:
        _commit_snapshot(catalog, stale, {}, main=main)
    except CommitFailedException as exc:
        now = catalog.load_table(name).metadata.current_snapshot_id
        where = "by the server" if catalog_kind(catalog) == "rest" else "before the swap"
        return Check(STALE_BASE, now == before, f"refused {where}: {_first_line(exc)}"
                     + ("" if now == before else f"; yet main moved to {now}"))
    now = catalog.load_table(name).metadata.current_snapshot_id
    return Check(STALE_BASE, False, f"accepted: main asserted at {main} while it was {before}; main is now {now}")


def _concurrent(catalog: Catalog, name: str, *, base: int | None) -> Check:
    """Two catalog clients load the table at ``base`` and commit a snapshot each, asserting main at ``base``; each
    commit waits inside the catalog's commit, after its read of the current table, for the other (up to
    ``RACE_WAIT_S``; ``LOCKED_RACE_WAIT_S`` on a Hive Metastore), so that neither write lands before both have read: a swap that holds lets exactly one in."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import CommitFailedException

    clients = [load_catalog(catalog.name, **catalog.properties) for _ in range(2)]
    tables = [c.load_table(name) for c in clients]
    barrier = threading.Barrier(2)
    wait = LOCKED_RACE_WAIT_S if catalog_kind(catalog) == "hive" else RACE_WAIT_S
    met = _hook_after_read(clients, barrier, wait)
    outcomes: list[tuple[int, str]] = []  # (snapshot id or 0, refusal)
    lock = threading.Lock()

    def commit(index: int) -> None:
        if not met:  # no hook in this client (REST): the race is the server's; start both at once
            _wait(barrier, wait)
        try:
            done = _commit_snapshot(clients[index], tables[index], {}, main=base)
            with lock:
                outcomes.append((done.metadata.current_snapshot_id or 0, ""))
        except CommitFailedException as exc:
            with lock:
                outcomes.append((0, _first_line(exc)))

    threads = [threading.Thread(target=commit, args=(i,), daemon=True) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    final = catalog.load_table(name).metadata
    accepted = [snapshot for snapshot, _ in outcomes if snapshot]
    refusals = [why for snapshot, why in outcomes if not snapshot]
    landed = [s for s in accepted if final.snapshot_by_id(s) is not None]
    serialised = " (serialised: the second waited for the first's lock)" if met and met[0].broken else ""
    if len(outcomes) < 2:
        return Check(CONCURRENT, False, f"a commit did not finish within 120 s ({len(outcomes)} of 2 answered)")
    if len(accepted) == 1 and landed == accepted and final.current_snapshot_id == accepted[0]:
        return Check(CONCURRENT, True, f"2 commits from one base: 1 landed, 1 refused{serialised} ({refusals[0]})")
    if len(accepted) == 2:
        lost = [s for s in accepted if s != final.current_snapshot_id]
        return Check(CONCURRENT, False, f"2 commits from one base both reported success; main is at "
                                        f"{final.current_snapshot_id}, snapshot {lost[0]} was lost without an error")
    return Check(CONCURRENT, False, f"2 commits from one base: {len(accepted)} accepted, {len(landed)} landed "
                                    f"({'; '.join(refusals)})")


def _hook_after_read(clients: list[Catalog], barrier: threading.Barrier, wait: float) -> list[threading.Barrier]:
    """Make each client's commit wait at ``barrier`` after it read the current table (pyiceberg's
    ``_update_and_stage_table``, which the SQL, Hive and Glue catalogs call between their read and their swap);
    [] when the clients commit without it (REST: the server reads and swaps)."""
    hooked = []
    for client in clients:
        stage = getattr(client, "_update_and_stage_table", None)
        if stage is None or catalog_kind(client) == "rest":
            return []

        def waiting(*args: Any, _stage: Callable[..., Any] = stage, **kwargs: Any) -> Any:
            _wait(barrier, wait)
            return _stage(*args, **kwargs)

        hooked.append((client, waiting))
    for client, waiting in hooked:
        client._update_and_stage_table = waiting  # type: ignore[attr-defined]  # these clients are the probe's own
    return [barrier]


def _wait(barrier: threading.Barrier, seconds: float) -> None:
    try:
        barrier.wait(seconds)
    except threading.BrokenBarrierError:
        pass  # the other commit is held by the catalog (a lock): they are serialised


def _commit_snapshot(catalog: Catalog, table: Table, summary: dict[str, str], *, main: int | None = None) -> Table:
    """Commit a new empty snapshot as ``main``'s head, asserting ``main`` at ``main`` (None: absent)."""
    from pyiceberg.table.refs import SnapshotRefType
    from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate

    from consistent_catalog._pyiceberg import empty_snapshot

    snapshot = empty_snapshot(table, summary)
    return _commit(catalog, table, [AssertRefSnapshotId(ref=P.MAIN_BRANCH, snapshot_id=main)],
                   [AddSnapshotUpdate(snapshot=snapshot),
                    SetSnapshotRefUpdate(ref_name=P.MAIN_BRANCH, type=SnapshotRefType.BRANCH,
                                         snapshot_id=snapshot.snapshot_id)])


def _commit(catalog: Catalog, table: Table, requirements: list[Any], updates: list[Any]) -> Table:
    from pyiceberg.table.update import AssertTableUUID

    response = catalog.commit_table(table, (AssertTableUUID(uuid=table.metadata.table_uuid), *requirements),
                                    tuple(updates))
    return type(table)(table.name(), response.metadata, response.metadata_location, table.io, catalog)


def _drop_quietly(catalog: Catalog, name: str) -> None:
    try:
        catalog.purge_table(name)
    except Exception:  # noqa: BLE001 - a scratch table left behind is harmless; the probe's answer is what matters
        try:
            catalog.drop_table(name)
        except Exception:  # noqa: BLE001
            pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


# --- what a catalog stores ------------------------------------------------------------------------------
PROPERTY_LIMIT_SETTING = "consistent.max-property-chars"
"""Catalog property: the longest table property value the catalog stores (overrides ``PROPERTY_LIMITS``)."""
PROPERTY_LIMITS = {"hive": 32_672, "glue": 512_000}
"""Hive Metastore and Glue copy every Iceberg table property into their own table parameters: HMS 2.3's schema
holds a parameter value of up to 32,672 characters (Derby and Oracle; MySQL's and PostgreSQL's hold more: raise it
with ``consistent.max-property-chars``), Glue's API up to 512,000 bytes. Longer ones fail the commit inside the
catalog (HMS: a ``MetaException`` after the metadata file was written)."""


def property_limit(catalog: Catalog) -> int | None:
    """The longest table property value ``catalog`` stores (UTF-8 bytes), or None when it has no limit we know."""
    setting = (getattr(catalog, "properties", {}) or {}).get(PROPERTY_LIMIT_SETTING)
    return int(setting) if setting else PROPERTY_LIMITS.get(catalog_kind(catalog))


def check_property_sizes(catalog: Catalog, table: str, properties: dict[str, str]) -> None:
    """``CatalogLimitError`` when a property of a commit to ``table`` is longer than the catalog stores."""
    limit = property_limit(catalog)
    if limit is None:
        return
    for key, value in properties.items():
        size = len(str(value).encode())
        if size > limit:
            hint = ("expire old snapshots (consistent-catalog expire) to drop the overrides of expired ones"
                    if key == P.BARRIER_OVERRIDES else "keep it shorter")
            raise CatalogLimitError(
                f"{table}: table property {key} would be {size:,} bytes; catalog {catalog.name!r} "
                f"({catalog_kind(catalog)}) stores at most {limit:,} per table property ({PROPERTY_LIMIT_SETTING} "
                f"sets another limit): {hint}")


# --- the writers' gate ---------------------------------------------------------------------------------------
_known: dict[tuple[str, ...], str] = {}
"""Per process: a catalog's recorded probe result (the namespace property's value), by ``_key``."""
_known_lock = threading.Lock()


def _key(catalog: Catalog) -> tuple[str, ...]:
    props = getattr(catalog, "properties", {}) or {}
    where = [str(props.get(k, "")) for k in ("uri", "glue.endpoint", "glue.id", "client.region", "glue.region",
                                             "warehouse")]
    return (catalog_kind(catalog), catalog.name, *where)


def _remember(catalog: Catalog, recorded: str) -> None:
    with _known_lock:
        _known[_key(catalog)] = recorded


def probed_by_default(catalog: Catalog) -> bool:
    """Whether writers require the probe on ``catalog``: Hive, Glue and catalogs of other kinds always; SQL and REST
    catalogs when their property ``consistent.catalog-probe`` is ``always``."""
    setting = str((getattr(catalog, "properties", {}) or {}).get(PROBE_SETTING, "auto")).lower()
    return setting == "always" or catalog_kind(catalog) not in ("sql", "rest")


def require_sound(catalog: Catalog) -> None:
    """Refuse to write to a catalog that failed the probe (``CatalogProbeError``, one line: the failed capability
    and the way out). Once per catalog and process: one read of the recorded result, the probe when none is."""
    if not probed_by_default(catalog):
        return
    key = _key(catalog)
    with _known_lock:
        recorded = _known.get(key)
    if recorded is None:
        recorded = _read_recorded(catalog)
        if recorded is None:
            recorded = probe_catalog(catalog).recorded()
        _remember(catalog, recorded)
    result = json.loads(recorded)
    if not result.get("holds"):
        failed = result.get("failed") or ["?"]
        why = (result.get("evidence") or {}).get(failed[0], "")
        raise CatalogProbeError(
            f"catalog {catalog.name!r} failed the catalog probe: {failed[0]} does not hold ({why}); writers would "
            "lose commits without an error there. Use a catalog whose commits are compare-and-swap (docs/catalogs.md), "
            f"then run `consistent-catalog --catalog {catalog.name} check-catalog` to probe it again")


def _read_recorded(catalog: Catalog) -> str | None:
    """The result recorded by the current probe version, or None (none recorded, an older probe)."""
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:
        value = catalog.load_namespace_properties(PROBE_NAMESPACE).get(P.CATALOG_PROBE)
    except NoSuchNamespaceError:
        return None
    try:
        if value is not None and json.loads(value).get("version") == PROBE_VERSION:
            return value
    except (ValueError, AttributeError):
        pass
    return None


def forget() -> None:
    """Drop this process's cached results (tests; a catalog fixed and probed again by another process)."""
    with _known_lock:
        _known.clear()
