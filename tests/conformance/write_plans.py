"""Write plans in the conformance corpus: the epoch a job plans over a case's tables, and the commits it sends.

Two query kinds (``"kind"`` of a query in ``cases/w*.json``), answered here by the Python writer and by the
JVM's (``conformance.Main``: ``EpochPlanner`` and ``EpochCommits``):

- ``"write-plan"``: ``{"job", "sources", "sinks", "attempt", "lease_until", "written"}``. The answer is
  ``{"plan": {"barrier", "inputs", "sinks": {sink: {"action", "main_head", "staged_head", "previous_inputs",
  "fence"}}}, "commits": {sink: [commit, ...]}}``: the plan of protocol §5.1 (``plan_epoch`` over the
  sources' upstream closure), and per sink the commits of §5.2-§5.3 its action sends, in order. ``stage``:
  the genesis when the sink has no ``main``, the reset when ``consistent-staged`` differs from main's
  head, the staged write (its requirements, and the summary keys of attempt ``attempt``), the publish of
  the staged head the write made (``written``, a given id); ``publish-staged``: the publish of the staged
  head; ``watermark``: the watermark-only publish; ``done``: nothing. Every publish renews the lease to
  ``lease_until``. A commit is ``{"commit", "what", "requirements", "updates"}`` with requirements and
  updates in Iceberg's REST JSON (pyiceberg's models as its REST client sends them; Java's
  ``UpdateRequirementParser``/``MetadataUpdateParser``), the table uuid left out (the sender adds it).
- ``"new-edges"``: ``{"job", "sources", "sinks"}``: registration's cycle check (protocol §6.1) over the
  case's tables without the sinks' own edges, the job-level check included (a job may not read a table it
  owns, nor anything downstream of one): ``{"ok": true}``.
- ``"can-own"``: ``{"job", "sink", "instance", "takeover", "now"}``: registration's ownership check (§6.1-§6.2:
  another job's table is refused whatever its lease; another live instance of the same job without takeover):
  ``{"ok": true}``. An optional ``"holder_gone"`` (also on ``"register"``) is the caller's finding that the holder's
  process is gone from this host (it changes the refusal's words only; the check stays pure).
- ``"definition"``: ``{"job", "sink", "definition", "rebuild"}``: the rule of §6.10 (``definition_change``):
  ``{"revise": bool, "reason": "rebuild" | "definition" | "schema" | null, "recorded": <the last epoch's
  fingerprint, or its schema id for "schema"> | null}``.
- ``"fingerprint-sql"``: ``{"text"}``: ``{"fingerprint": "sql:<16 hex>"}`` of the statement (§6.10).
- ``"write-commit"``: ``{"commit", "table", "now", ...}``: one of the protocol's other commits as ``write_plans`` (Java:
  ``core.WritePlanner``) plans it over the case's table ``table`` at the clock ``now``. ``"commit"`` is ``"ingest"``
  (``"barrier"``: a number, ``"late"`` or null for the clock; ``"key"``, ``"allow_future"``), ``"advance"``
  (``"barrier"``, ``"allow_future"``), ``"idle-advance"`` (``"target"``, null: now minus the idle allowance),
  ``"register"`` (``"job"``, ``"sources"``, ``"instance"``, ``"takeover"``, ``"lease_ms"``, ``"holder_info"``),
  ``"unregister"`` and ``"renew"`` (``"job"``, ``"instance"``, ``"until"`` for renew) or ``"reassign"`` (``"job"``,
  ``"takeover"``). The answer is ``{"commit": null}`` (nothing to commit), ``{"skipped_by", "barrier"}`` (an ingest
  whose key landed), or ``{"commit": {"what", "requirements", "updates", "take_fence": {"expected", "reason",
  "holder", "job"} | null, "summary", "genesis"}}`` (plus ``"barrier"`` for an ingest), in Iceberg's REST JSON.
- a ``"write-plan"`` may carry ``"definition"`` and ``"rebuild"``: then a sink's action may be ``regenerate`` (protocol
  §6.10; also when a source switched generations), its plan with ``"reason"`` and ``"replay"``, its commits those of
  ``stage`` with ``consistent.regenerate`` in the summary and the switch in the publish (``replay``: the publish of the
  staged head only).

Either kind answers ``{"error": <Python exception class name>}`` when refused. The snapshots a commit
creates get a fresh id and timestamp on every run (the genesis): ``normalised`` names them ``created-1``...
wherever they appear and blanks their timestamp and manifest list, on both sides' answers.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadataUtil

from consistent_catalog import epoch_commits, write_plans
from consistent_catalog import properties as P
from consistent_catalog.definition import definition_change, sql_definition
from consistent_catalog.epoch_plan import EpochPlan, plan_epoch
from consistent_catalog.exceptions import ConsistentCatalogError, TableNotFoundError
from consistent_catalog.lineage import LineageGraph
from consistent_catalog.ownership import genesis_snapshot
from consistent_catalog.state import TableState

KINDS = ("write-plan", "new-edges", "can-own", "definition", "fingerprint-sql", "write-commit")
#: the fixed parts of a write plan's commits: the staging attempt's id, the lease a publish renews to, the
#: snapshot id the staged data write made (the writer's, not one of the epoch's own commits)
FIXED = {"attempt": "0123456789ab", "lease_until": 1_701_000_000_000, "written": 7_000_000_000_000_000_001}


def write_plan_query(
    job: str, sources: Iterable[str], sinks: Iterable[str], *, definition: str | None = None, rebuild: bool = False
) -> dict[str, Any]:
    query = {"kind": "write-plan", "job": job, "sources": list(sources), "sinks": list(sinks), **FIXED}
    if definition is not None or rebuild:
        query.update({"definition": definition, "rebuild": rebuild})
    return query


def can_own_query(job: str, sink: str, instance: str, *, takeover: bool = False, now: int) -> dict[str, Any]:
    return {"kind": "can-own", "job": job, "sink": sink, "instance": instance, "takeover": takeover, "now": now}


def definition_query(job: str, sink: str, definition: str | None, *, rebuild: bool = False) -> dict[str, Any]:
    return {"kind": "definition", "job": job, "sink": sink, "definition": definition, "rebuild": rebuild}


def fingerprint_sql_query(text: str) -> dict[str, Any]:
    return {"kind": "fingerprint-sql", "text": text}


def write_commit_query(commit: str, table: str, now: int, **args: Any) -> dict[str, Any]:
    return {"kind": "write-commit", "commit": commit, "table": table, "now": now, **args}


def write_commit_answer(state: TableState, query: Mapping[str, Any]) -> dict[str, Any]:
    """What ``write_plans`` plans for a ``"write-commit"`` query over ``state`` (raises the protocol's refusal)."""
    kind, now = query["commit"], query["now"]
    if kind == "ingest":
        plan = write_plans.ingest(state, now=now, barrier=query.get("barrier"), key=query.get("key"),
                                  allow_future=query.get("allow_future", False))
        if plan.skipped_by is not None:
            return {"skipped_by": plan.skipped_by, "barrier": plan.barrier}
        return {"barrier": plan.barrier, "commit": write_commit_json(plan.commit)}
    if kind == "advance":
        commit = write_plans.advance_watermark(state, query["barrier"], now=now, allow_future=query.get("allow_future", False))
    elif kind == "idle-advance":
        commit = write_plans.idle_advance(state, now=now, target=query.get("target"))
    elif kind == "register":
        commit = write_plans.register(state, job=query["job"], sources=query["sources"], instance=query["instance"],
                                      takeover=query.get("takeover", False), now=now, lease_ms=query["lease_ms"],
                                      holder_info=query["holder_info"], holder_gone=query.get("holder_gone", False))
    elif kind == "unregister":
        commit = write_plans.unregister(state, job=query["job"], instance=query["instance"])
    elif kind == "renew":
        commit = write_plans.renew(state, job=query["job"], instance=query["instance"], until=query["until"])
    elif kind == "reassign":
        commit = write_plans.reassign(state, to_job=query["job"], takeover=query.get("takeover", False), now=now)
    else:
        raise ValueError(f"no write commit {kind!r}")
    return {"commit": write_commit_json(commit)}


def write_commit_json(commit: write_plans.WriteCommit | None) -> dict[str, Any] | None:
    if commit is None:
        return None
    fence = commit.take_fence
    return {
        "what": commit.what,
        "requirements": [_rest_json(r) for r in commit.requirements],
        "updates": [_rest_json(u) for u in commit.updates],
        "take_fence": None if fence is None else {"expected": fence.expected, "reason": fence.reason,
                                                  "holder": fence.holder, "job": fence.job},
        "summary": dict(commit.summary),
        "genesis": commit.genesis,
    }


def new_edges_query(job: str, sources: Iterable[str], sinks: Iterable[str]) -> dict[str, Any]:
    return {"kind": "new-edges", "job": job, "sources": list(sources), "sinks": list(sinks)}


def upstream_closure(tables: list[str], states: Mapping[str, TableState]) -> dict[str, TableState]:
    """``tables`` and every table they derive from among ``states`` (what ``EpochJob.plan`` loads); a missing
    table of ``tables`` is TableNotFoundError, a missing source further up is left out."""
    found: dict[str, TableState] = {}
    pending = list(tables)
    while pending:
        name = pending.pop()
        if name in found:
            continue
        state = states.get(name)
        if state is None:
            if name in tables:
                raise TableNotFoundError(f"table {name} does not exist in the catalog; check the name")
            continue
        found[name] = state
        pending.extend(s for s in state.sources if s not in found)
    return found


def answer(tables: Mapping[str, Any], query: Mapping[str, Any], states: Mapping[str, TableState]) -> dict[str, Any]:
    """What the Python writer answers to a query of one of ``KINDS`` (normalised)."""
    kind = query["kind"]
    try:
        if kind == "write-commit":
            state = states.get(query["table"])
            if state is None:
                raise TableNotFoundError(f"table {query['table']} does not exist in the catalog; check the name")
            return write_commit_answer(state, query)
        if kind == "fingerprint-sql":
            return {"fingerprint": sql_definition(query["text"])}
        if kind in ("can-own", "definition"):
            state = states.get(query["sink"])
            if state is None:
                raise TableNotFoundError(f"table {query['sink']} does not exist in the catalog; check the name")
            if kind == "can-own":
                write_plans.check_can_own(state, query["job"], query["instance"], query["takeover"], now=query["now"],
                                          holder_gone=query.get("holder_gone", False))
                return {"ok": True}
            change = definition_change(state, query["job"], query["definition"], rebuild=query["rebuild"])
            return {"revise": change is not None, "reason": None if change is None else change.reason,
                    "recorded": None if change is None else change.recorded}
    except ConsistentCatalogError as exc:
        return {"error": type(exc).__name__}
    job, sources, sinks = query["job"], list(query["sources"]), list(query["sinks"])
    try:
        if kind == "new-edges":
            graph = LineageGraph.from_states(s for name, s in states.items() if name not in sinks)
            graph.check_new_edges(job, sources, sinks)
            return {"ok": True}
        for sink in sinks:
            if sink not in states:
                raise TableNotFoundError(f"table {sink} does not exist in the catalog; check the name")
        closure = upstream_closure(sources, states)
        plan = plan_epoch(job, {s: closure[s] for s in sources}, {s: states[s] for s in sinks}, upstream=closure,
                          definition=query.get("definition"), rebuild=query.get("rebuild", False))
        commits = {sink: epoch_commit_list(plan, sink, states[sink], tables[sink], query) for sink in sinks}
    except ConsistentCatalogError as exc:
        return {"error": type(exc).__name__}
    return normalised({"plan": plan_json(plan), "commits": commits})


def plan_json(plan: EpochPlan) -> dict[str, Any]:
    sinks = {}
    for name, p in plan.sinks.items():
        sinks[name] = {"action": p.action, "main_head": p.main_head, "staged_head": p.staged_head,
                       "previous_inputs": dict(p.previous_inputs), "fence": p.fence}
        if p.action == "regenerate":
            sinks[name].update({"reason": p.change.reason if p.change else None, "replay": p.replay})
    return {"barrier": plan.barrier, "inputs": dict(plan.inputs), "sinks": sinks}


def epoch_commit_list(
    plan: EpochPlan, sink: str, state: TableState, metadata: Mapping[str, Any], query: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The commits ``EpochJob`` sends for ``sink``'s action, in order, as it builds them (``epoch_commits``)."""
    sink_plan = plan.sinks[sink]
    lease_until = query["lease_until"]
    if plan.barrier is None or sink_plan.action == "done":
        return []
    if sink_plan.action == "publish-staged" or sink_plan.replay:
        return [commit_json("publish", epoch_commits.publish(
            plan, sink, state, sink_plan.main_head, sink_plan.staged_head, lease_until=lease_until))]
    if sink_plan.action == "watermark":
        return [commit_json("publish", epoch_commits.publish(plan, sink, state, sink_plan.main_head, None,
                                                             lease_until=lease_until))]
    out = []
    base = sink_plan.main_head
    if base is None:
        with tempfile.TemporaryDirectory(prefix="corpus-genesis-") as directory:
            genesis = genesis_snapshot(scratch_table(sink, metadata, directory), plan.job)
        out.append(commit_json("genesis", epoch_commits.genesis(sink_plan, genesis)))
        base = genesis.snapshot_id
    staged = state.head(P.STAGED_BRANCH)  # the genesis commit leaves consistent-staged as it was
    if staged != base:
        out.append(commit_json("reset", epoch_commits.reset(sink_plan, base, staged)))
    out.append({
        "commit": "staged-write",
        "requirements": [_rest_json(r) for r in epoch_commits.staged_write(sink_plan, base)],
        "summary": epoch_commits.summary(plan, plan.job, query["attempt"], sink_plan.change.reason
                                         if sink_plan.action == "regenerate" and sink_plan.change else None),
    })
    out.append(commit_json("publish", epoch_commits.publish(plan, sink, state, base, query["written"],
                                                            lease_until=lease_until)))
    return out


def commit_json(name: str, commit: epoch_commits.Commit) -> dict[str, Any]:
    return {
        "commit": name,
        "what": commit.what,
        "requirements": [_rest_json(r) for r in commit.requirements],
        "updates": [_rest_json(u) for u in commit.updates],
    }


def _rest_json(model: Any) -> Any:
    """A requirement or update as pyiceberg's REST client sends it (``CommitTableRequest.model_dump_json``)."""
    return json.loads(model.model_dump_json())


def scratch_table(name: str, metadata: Mapping[str, Any], directory: str) -> Table:
    """The sink as a pyiceberg ``Table`` located in ``directory``, where the genesis writes its empty manifest
    list (the case's own location, ``/corpus/...``, is not writable)."""
    parsed = TableMetadataUtil.parse_raw(json.dumps({**metadata, "location": f"file://{directory}"}))
    return Table(tuple(name.split(".")), parsed, f"file://{directory}/metadata/v1.metadata.json", PyArrowFileIO(),
                 None)  # type: ignore[arg-type]  # no catalog: nothing is committed


def normalised(answer: Mapping[str, Any]) -> dict[str, Any]:
    """``answer`` with the snapshots its commits create (``add-snapshot``) named ``created-1``, ``created-2``...
    per sink wherever their ids appear, and their timestamp and manifest list blanked."""
    if "commits" not in answer:
        return dict(answer)
    commits = {}
    for sink, found in answer["commits"].items():
        created: dict[int, str] = {}
        for commit in found:
            for update in commit.get("updates", []):
                if update.get("action") == "add-snapshot":
                    created.setdefault(update["snapshot"]["snapshot-id"], f"created-{len(created) + 1}")

        def rename(value: Any, created: dict[int, str] = created) -> Any:
            if isinstance(value, dict):
                out = {k: rename(v) for k, v in value.items()}
                if "manifest-list" in out and "timestamp-ms" in out:  # a snapshot the commit created
                    out.update({"timestamp-ms": "<now>", "manifest-list": "<written>"})
                return out
            if isinstance(value, list):
                return [rename(v) for v in value]
            if isinstance(value, int) and not isinstance(value, bool) and value in created:
                return created[value]
            return value

        commits[sink] = rename(found)
    return {**answer, "commits": commits}
