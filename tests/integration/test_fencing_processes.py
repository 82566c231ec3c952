"""Fencing between job instances that are real, separate processes (protocol §5.3, §5.4 and §6 in docs/protocol.md).

Every instance runs in its own interpreter (``multiprocessing`` *spawn*, ``tests/harness/fencing_worker.py``)
against one SQLite catalog, so nothing is shared but the catalog: the only synchronisation is the
catalog's compare-and-swap of the metadata pointer, as in production.

- **Zombie after a lease lapse**: instance A stalls holding a planned and staged epoch; its lease
  lapses (``status`` shows it ``expired``), B registers *without* takeover and publishes newer
  epochs; A wakes up and publishes: the catalog refuses it inside ``commit_table`` (the
  ``AssertConsistentState`` requirement) and the sink's metadata pointer does not move.
- **Zombie paused inside the compare-and-swap**: A's publish passes requirement validation while A
  still owns the sink and is frozen just before the ``UPDATE ... WHERE metadata_location = ...``;
  B takes over and publishes; the swap refuses A (no read-then-write window).
- **Two instances started at the same instant** (a ``multiprocessing.Barrier``): with
  ``takeover=False`` (5 rounds) exactly one registers and publishes; the other gets a clear
  ``OwnershipError``. With ``takeover=True`` (10 rounds: 3 simultaneous starts, then the twin
  0.02-0.16 s later so its takeover lands at different points of the first one's epoch; each
  thinks the other dead) the later registration wins and the earlier one is fenced (a simultaneous
  pair: the catalog refuses the second registration commit); each barrier lands on ``main`` exactly
  once, with one staging attempt, and no row is doubled (an append-mode copy job).

Everything is checked from the parent with plain pyiceberg and the catalog's SQLite row, not with
the project's resolver alone. Refusals are counted by kind and printed at the end of the module.

The zombie-after-lapse and both race tests also run on an Iceberg REST catalog (``[rest]``: the session's
Java REST server, a catalog of its own per test; the workers open a ``RestCatalog`` from its properties,
and the catalog row is read from the server's SQLite file). There the requirements are validated by
the server inside its compare-and-swap (a lost swap is retried and re-validated there), so every
refusal inside a commit is a requirement refusal (HTTP 409); the pause between validation and swap
exists only in the embedded SQL catalog, so that test is SQLite only.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import queue
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pytest

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import epoch_words
from tests.harness.fencing_worker import COPY, COUNTS, WORDS, command_worker, race_worker
from tests.harness.lake import COUNTS_SCHEMA, WORDS_SCHEMA, open_catalog

pytestmark = pytest.mark.integration

SPAWN = mp.get_context("spawn")
REPLY_TIMEOUT = 60.0
ROUNDS = 5
SHORT_LEASE_MS = 2500
LOST_RACE = ("registration-lost-race:catalog-requirement", "registration-lost-race:catalog-swap")
"""Both read a free sink; the loser's registration commit was refused inside ``commit_table``: by the
requirement (the winner's commit had landed before the loser loaded the metadata) or by the swap."""
TAKEOVER_STAGGER = (0.0, 0.0, 0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.13, 0.16)
"""Seconds by which twin Y starts registering after X in each takeover round: the first rounds are a
simultaneous start, the later ones land Y's takeover at different points of X's epoch."""

REFUSALS: Counter[str] = Counter()
"""Every refusal seen in this module, by kind (``fencing_worker.refusal_kind``) and test."""


@pytest.fixture(scope="module", autouse=True)
def refusal_report(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    lines = ["", "fencing refusals in tests/integration/test_fencing_processes.py (test: kind = count):"]
    lines += [f"  {key} = {count}" for key, count in sorted(REFUSALS.items())]
    total = sum(REFUSALS.values())
    lines.append(f"  total = {total}")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print("\n".join(lines))
        return
    with capture.global_and_fixture_disabled():  # shown even without -s
        for line in lines:
            reporter.write_line(line)


def count(test: str, outcome: dict[str, Any]) -> None:
    REFUSALS[f"{test}: {outcome['error']} {outcome['kind']}"] += 1


# --- the lake and independent reads ------------------------------------------------------------
class Lake:
    """Where the test's catalog lives: ``spec`` is what a worker process opens (a SQLite lake directory, or
    REST catalog properties), ``db`` the SQLite file holding the catalog's ``iceberg_tables`` rows."""

    def __init__(self, directory: Path, rest_server: Any = None) -> None:
        self.directory = directory
        self.rest = rest_server is not None
        if rest_server is None:
            self.spec: str | dict[str, str] = str(directory)
            self.db = directory / "catalog.db"
        else:
            self.spec = rest_server.catalog_properties(f"file://{directory}/warehouse")
            self.db = rest_server.sqlite_path(self.spec["warehouse"])

    def catalog(self) -> Any:
        return open_catalog(self.spec)


@pytest.fixture(params=["sqlite", pytest.param("rest")])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Lake:
    directory = tmp_path / "lake"
    directory.mkdir()
    return Lake(directory, request.getfixturevalue("rest_server") if request.param == "rest" else None)


def make_lake(lake: Lake) -> ConsistentCatalog:
    catalog = lake.catalog()
    catalog.create_namespace("demo")
    catalog.create_table(WORDS, schema=WORDS_SCHEMA)
    catalog.create_table(COUNTS, schema=COUNTS_SCHEMA)
    catalog.create_table(COPY, schema=WORDS_SCHEMA)
    return ConsistentCatalog(catalog)


def ingest(cc: ConsistentCatalog, epoch: int) -> int:
    """Ingest epoch ``epoch``'s words with barrier ``epoch * 1000`` (explicit, so barriers are predictable)."""
    return cc.ingest(WORDS, epoch_words(epoch, 40 + 7 * epoch), barrier=epoch * 1000).barrier


def pointer(lake: Lake, table: str) -> str:
    """The catalog row's metadata location, read with sqlite3 (the value the catalog swaps atomically)."""
    namespace, name = table.split(".")
    with sqlite3.connect(lake.db) as db:
        rows = db.execute(
            'SELECT "metadata_location" FROM "iceberg_tables" WHERE "table_namespace" = ? AND "table_name" = ?',
            (namespace, name),
        ).fetchall()
    assert len(rows) == 1, rows
    return rows[0][0]


def holder_history(lake: Lake, table: str) -> list[str | None]:
    """``consistent.lease-holder`` in every metadata version of ``table``, oldest first (consecutive repeats merged)."""
    current = urlparse(pointer(lake, table)).path
    document = json.loads(Path(current).read_text())
    files = [urlparse(entry["metadata-file"]).path for entry in document.get("metadata-log", [])] + [current]
    history: list[str | None] = []
    for path in files:
        holder = json.loads(Path(path).read_text()).get("properties", {}).get(P.LEASE_HOLDER)
        if not history or history[-1] != holder:
            history.append(holder)
    return history


def main_ancestry(cc: ConsistentCatalog, table: str) -> list[dict[str, Any]]:
    """Snapshots on ``main``, oldest first, with their consistent.* summary keys (plain pyiceberg)."""
    metadata = cc.catalog.load_table(table).metadata
    snapshot = metadata.snapshot_by_name("main")
    chain = []
    while snapshot is not None:
        summary = snapshot.summary
        chain.append(
            {
                "id": snapshot.snapshot_id,
                "operation": summary.operation.value if summary is not None else None,
                "barrier": summary[P.BARRIER] if summary is not None else None,
                "attempt": summary[P.ATTEMPT] if summary is not None else None,
                "job": summary[P.JOB] if summary is not None else None,
                "sources": summary[P.SOURCES] if summary is not None else None,
            }
        )
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return chain[::-1]


def published_barriers(chain: list[dict[str, Any]]) -> list[int]:
    """The barriers on main, in order, after checking each one is one contiguous run of one staging attempt."""
    runs: list[tuple[str, set[str | None], list[dict[str, Any]]]] = []
    for snap in chain:
        if snap["barrier"] is None:
            assert snap["job"] is not None and snap is chain[0], f"untagged snapshot on main that is not the genesis: {snap}"
            continue
        if runs and runs[-1][0] == snap["barrier"]:
            runs[-1][1].add(snap["attempt"])
            runs[-1][2].append(snap)
        else:
            runs.append((snap["barrier"], {snap["attempt"]}, [snap]))
    barriers = [int(b) for b, _, _ in runs]
    assert len(barriers) == len(set(barriers)), f"a barrier appears in two separate runs on main: {barriers}"
    assert barriers == sorted(barriers), f"barriers on main go backwards: {barriers}"
    for barrier, attempts, snaps in runs:
        assert len(attempts) == 1 and None not in attempts, (
            f"barrier {barrier} on main was written by {len(attempts)} staging attempts {attempts}: {snaps}"
        )
        assert len({s["sources"] for s in snaps}) == 1, snaps
    return barriers


def last_of_each_barrier(chain: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {int(s["barrier"]): s for s in chain if s["barrier"] is not None}


def scan(cc: ConsistentCatalog, table: str, snapshot_id: int | None) -> pa.Table:
    loaded = cc.catalog.load_table(table)
    if snapshot_id is None:
        return loaded.schema().as_arrow().empty_table()
    return loaded.scan(snapshot_id=snapshot_id).to_arrow()


def words_at(cc: ConsistentCatalog, snapshot_id: int | None) -> Counter[str]:
    return Counter(scan(cc, WORDS, snapshot_id)["word"].to_pylist())


# --- process handles -----------------------------------------------------------------------------
class Instance:
    """A ``command_worker`` process: send a command, wait for its reply."""

    def __init__(self, lake: Lake, name: str, *, pausable: bool = False) -> None:
        self.name = name
        self.commands = SPAWN.Queue()
        self.results = SPAWN.Queue()
        self.resume = SPAWN.Event() if pausable else None
        self.process = SPAWN.Process(
            target=command_worker, args=(lake.spec, name, self.commands, self.results, self.resume), daemon=True
        )
        self.process.start()

    def reply(self, expected: str) -> dict[str, Any]:
        deadline = time.monotonic() + REPLY_TIMEOUT
        while True:
            try:
                command, outcome = self.results.get(timeout=1.0)
            except queue.Empty:
                assert self.process.is_alive(), f"instance {self.name} died (exit code {self.process.exitcode})"
                assert time.monotonic() < deadline, f"instance {self.name} did not answer {expected!r} in time"
                continue
            assert command == expected, f"instance {self.name}: expected {expected!r}, got {command!r}: {outcome}"
            return outcome

    def send(self, command: str, **args: Any) -> None:
        self.commands.put((command, args))

    def call(self, command: str, **args: Any) -> dict[str, Any]:
        self.send(command, **args)
        return self.reply(command)

    def ok(self, command: str, **args: Any) -> dict[str, Any]:
        outcome = self.call(command, **args)
        assert outcome["ok"], f"instance {self.name}: {command} failed: {outcome}"
        return outcome

    def close(self) -> None:
        if self.process.is_alive():
            self.send("exit")
            self.process.join(15)
        if self.process.is_alive():
            self.process.terminate()  # only this test's own child, by its handle
            self.process.join(5)


@pytest.fixture
def instances() -> Iterator[list[Instance]]:
    started: list[Instance] = []
    yield started
    for instance in started:
        instance.close()


def wait_for_lapse(cc: ConsistentCatalog, table: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        (row,) = cc.status([table])
        if row.lease == "expired":
            return row
        assert time.monotonic() < deadline, f"{table}'s lease never lapsed: {row}"
        time.sleep(0.1)


def check_counts_everywhere(cc: ConsistentCatalog, chain: list[dict[str, Any]]) -> int:
    """Protocol §7 at every published barrier (word_counts at the barrier == Counter(words at its recorded input))
    and at the repeatable-read cut. Returns the number of barriers checked."""
    for barrier, snap in last_of_each_barrier(chain).items():
        (source_snapshot,) = json.loads(snap["sources"]).values()
        counts = scan(cc, COUNTS, snap["id"])
        got = dict(zip(counts["word"].to_pylist(), counts["cnt"].to_pylist()))
        assert got == dict(words_at(cc, source_snapshot)), f"word_counts at barrier {barrier} != Counter(words)"
        assert sum(got.values()) == scan(cc, WORDS, source_snapshot).num_rows
    cut = cc.resolve([WORDS, COUNTS])
    counts = scan(cc, COUNTS, cut[COUNTS].snapshot_id)
    got = dict(zip(counts["word"].to_pylist(), counts["cnt"].to_pylist()))
    assert got == dict(words_at(cc, cut[WORDS].snapshot_id)), f"protocol §7 violated at the repeatable-read cut {cut.barrier}"
    return len(last_of_each_barrier(chain)) + 1


# --- 1. the zombie ----------------------------------------------------------------------------------
def test_zombie_after_lease_lapse_is_refused_inside_the_catalog_commit(lake: Lake, instances: list[Instance]) -> None:
    test = "zombie-after-lapse" + ("[rest]" if lake.rest else "")
    cc = make_lake(lake)
    a = Instance(lake, "A")
    b = Instance(lake, "B")
    instances += [a, b]
    a.reply("ready")
    b.reply("ready")
    ingest(cc, 1)

    instance_a = a.ok("register", job="word-count", lease_ms=SHORT_LEASE_MS)["instance"]
    first = a.ok("run_epoch")
    assert first["barrier"] == 1000 and first["actions"] == {COUNTS: "published"}

    # A plans barrier 2000, transforms and stages it, then stalls holding plan + staged output
    ingest(cc, 2)
    held = a.ok("hold_epoch")
    assert held["barrier"] == 2000
    zombie_head = held["staged"][COUNTS]["head"]
    assert cc.store.state(COUNTS).head(P.STAGED_BRANCH) == zombie_head

    # while A's lease is live, a second instance without takeover is refused, and told who holds it
    a.ok("renew", lease_ms=SHORT_LEASE_MS)
    assert cc.status([COUNTS])[0].lease == "live"
    early = b.call("register", job="word-count", lease_ms=60_000)
    assert not early["ok"] and early["error"] == "OwnershipError", early
    assert "another live instance" in early["message"] and instance_a in early["message"], early["message"]
    count(test, early)

    # A stays stalled; its lease lapses: status shows a zombie suspect (expired, still naming A)
    row = wait_for_lapse(cc, COUNTS)
    assert row.job == "word-count" and row.lease == "expired"
    assert cc.store.state(COUNTS).lease_holder == instance_a

    # B registers without takeover (allowed: the lease lapsed) and publishes newer epochs
    instance_b = b.ok("register", job="word-count", lease_ms=60_000)["instance"]
    assert instance_b != instance_a
    assert cc.status([COUNTS])[0].lease == "live" and cc.store.state(COUNTS).lease_holder == instance_b
    for epoch in (3, 4):
        ingest(cc, epoch)
        done = b.ok("run_epoch")
        assert done["barrier"] == epoch * 1000 and done["actions"] == {COUNTS: "published"}, done

    # A wakes up and publishes its stale barrier 2000: refused by the catalog, inside commit_table
    before = pointer(lake, COUNTS)
    metadata_before = cc.catalog.load_table(COUNTS).metadata
    refused = a.call("publish_held")
    after = pointer(lake, COUNTS)
    assert not refused["ok"] and refused["error"] == "FencedError", refused
    assert refused["kind"] == "catalog-requirement", refused
    assert "refused by the catalog" in refused["message"], refused["message"]
    assert P.LEASE_HOLDER in refused["message"] and instance_b in refused["message"], refused["message"]
    assert refused["inner_error"] == "CommitFailedException"
    if lake.rest:
        # the server refused the commit (HTTP 409, its requirement check inside its compare-and-swap)
        assert "commit_table" in refused["inner_frames"], refused["inner_frames"]
        assert "_handle_non_200_response" in refused["inner_frames"], refused["inner_frames"]
    else:
        # the refusal was raised by the requirement's validation, called by the catalog's commit_table
        assert "commit_table" in refused["inner_frames"] and "validate" in refused["inner_frames"], refused["inner_frames"]
        assert refused["inner_frames"].index("commit_table") < refused["inner_frames"].index("validate")
    assert before == after, "the zombie's refused publish moved the sink's metadata pointer"
    metadata_after = cc.catalog.load_table(COUNTS).metadata
    assert metadata_after.refs == metadata_before.refs and metadata_after.properties == metadata_before.properties
    count(test, refused)
    print(f"\nzombie publish refused: {refused['message']}")

    # the zombie cannot stage either (refused inside the catalog), and its next epoch stops at the ownership check
    restage = a.call("stage_held")
    # (a pyiceberg write validates the requirement against the metadata it just loaded before writing
    # any file, so this refusal comes from that pre-check; the same requirement rides into commit_table)
    assert not restage["ok"] and restage["kind"] in ("client-precheck", "catalog-requirement"), restage
    assert "refused by the catalog" in restage["message"]
    assert pointer(lake, COUNTS) == before
    count(test, restage)
    print(f"zombie re-stage refused after {restage['seconds']} s: {restage['message']}")
    again = a.call("run_epoch")
    assert not again["ok"] and again["error"] == "FencedError" and again["kind"] == "plan-ownership-check", again
    assert "taken over" in again["message"] and instance_b in again["message"]
    assert pointer(lake, COUNTS) == before
    count(test, again)

    # B is unaffected
    ingest(cc, 5)
    assert b.ok("run_epoch")["actions"] == {COUNTS: "published"}
    b.ok("unregister")

    chain = main_ancestry(cc, COUNTS)
    assert published_barriers(chain) == [1000, 3000, 4000, 5000]
    assert zombie_head not in {s["id"] for s in chain}
    zombie_attempt = cc.catalog.load_table(COUNTS).metadata.snapshot_by_id(zombie_head).summary[P.ATTEMPT]
    assert zombie_attempt not in {s["attempt"] for s in chain}
    assert check_counts_everywhere(cc, chain) == 5


def test_zombie_paused_inside_the_compare_and_swap_is_refused_by_the_swap(
    tmp_path: Path, instances: list[Instance]
) -> None:
    test = "zombie-inside-cas"
    (tmp_path / "lake").mkdir()
    lake = Lake(tmp_path / "lake")  # SQLite only: the pause sits between SqlCatalog's validation and its swap
    cc = make_lake(lake)
    a = Instance(lake, "A", pausable=True)
    b = Instance(lake, "B")
    instances += [a, b]
    a.reply("ready")
    b.reply("ready")
    ingest(cc, 1)
    instance_a = a.ok("register", job="word-count", lease_ms=60_000)["instance"]
    assert a.ok("run_epoch")["actions"] == {COUNTS: "published"}
    ingest(cc, 2)
    held = a.ok("hold_epoch")

    # A publishes while it still owns the sink: its requirement validates, then it freezes before the swap
    untouched = pointer(lake, COUNTS)
    a.send("publish_held", pause_inside_commit=True)
    a.reply("paused-in-commit")
    assert pointer(lake, COUNTS) == untouched

    # B believes A dead and takes over (A's lease is live, so takeover=True is needed), then publishes
    assert cc.status([COUNTS])[0].lease == "live"
    instance_b = b.ok("register", job="word-count", lease_ms=60_000, takeover=True)["instance"]
    ingest(cc, 3)
    assert b.ok("run_epoch")["actions"] == {COUNTS: "published"}

    before = pointer(lake, COUNTS)
    assert a.resume is not None
    a.resume.set()
    refused = a.reply("publish_held")
    assert not refused["ok"] and refused["error"] == "FencedError" and refused["kind"] == "catalog-swap", refused
    assert "refused by the catalog" in refused["message"] and "updated by another process" in refused["message"]
    assert "commit_table" in refused["inner_frames"] and "validate" not in refused["inner_frames"]
    assert pointer(lake, COUNTS) == before, "the frozen zombie's swap moved the metadata pointer"
    count(test, refused)

    again = a.call("run_epoch")
    assert not again["ok"] and again["kind"] == "plan-ownership-check", again
    assert instance_b in again["message"] and instance_a in again["message"]
    count(test, again)
    b.ok("unregister")

    chain = main_ancestry(cc, COUNTS)
    assert published_barriers(chain) == [1000, 3000]
    assert held["staged"][COUNTS]["head"] not in {s["id"] for s in chain}
    check_counts_everywhere(cc, chain)


# --- 2. two instances started at the same moment -------------------------------------------------
def run_races(
    lake: Lake, cc: ConsistentCatalog, *, takeover: bool, rounds: int, stagger: tuple[float, ...] = ()
) -> list[list[dict[str, Any]]]:
    start = SPAWN.Barrier(3)
    finished = SPAWN.Barrier(2)
    results = SPAWN.Queue()
    workers = [
        SPAWN.Process(
            target=race_worker,
            args=(lake.spec, name, "copy", takeover, rounds, start, finished, results, seed, stagger if seed else ()),
            daemon=True,
        )
        for seed, name in enumerate(("X", "Y"))
    ]
    for worker in workers:
        worker.start()
    per_round = []
    try:
        for round_no in range(rounds):
            ingest(cc, round_no + 1)
            start.wait(REPLY_TIMEOUT)  # both workers call register() the moment this releases
            outcomes = []
            deadline = time.monotonic() + REPLY_TIMEOUT
            while len(outcomes) < 2:
                try:
                    kind, outcome = results.get(timeout=1.0)
                    if kind == "error":
                        pytest.fail(f"race worker {outcome['name']} failed:\n{outcome['traceback']}")
                except queue.Empty:
                    assert all(w.is_alive() for w in workers), [w.exitcode for w in workers]
                    assert time.monotonic() < deadline, "a race worker did not report"
                    continue
                assert kind == "round" and outcome["round"] == round_no, outcome
                outcomes.append(outcome)
            per_round.append(sorted(outcomes, key=lambda o: o["name"]))
    finally:
        for worker in workers:
            worker.join(15)
            if worker.is_alive():
                worker.terminate()  # only this test's own children, by their handles
                worker.join(5)
    return per_round


def check_copy_exactly_once(cc: ConsistentCatalog, rounds: int) -> None:
    chain = main_ancestry(cc, COPY)
    assert published_barriers(chain) == [1000 * (r + 1) for r in range(rounds)]
    for barrier, snap in last_of_each_barrier(chain).items():
        (source_snapshot,) = json.loads(snap["sources"]).values()
        copied = Counter(scan(cc, COPY, snap["id"])["word"].to_pylist())
        assert copied == words_at(cc, source_snapshot), f"{COPY} at barrier {barrier}: rows lost or doubled"
    cut = cc.resolve([WORDS, COPY])
    assert cut.barrier == 1000 * rounds
    copied = Counter(scan(cc, COPY, cut[COPY].snapshot_id)["word"].to_pylist())
    assert copied == words_at(cc, cut[WORDS].snapshot_id), "rows lost or doubled at the repeatable-read cut"
    assert cc.status([COPY])[0].lease == "none"


def test_two_instances_started_at_once_without_takeover(lake: Lake) -> None:
    test = "race-no-takeover" + ("[rest]" if lake.rest else "")
    cc = make_lake(lake)
    per_round = run_races(lake, cc, takeover=False, rounds=ROUNDS)
    for round_no, outcomes in enumerate(per_round):
        winners = [o for o in outcomes if o["registered"]]
        losers = [o for o in outcomes if not o["registered"]]
        assert len(winners) == 1 and len(losers) == 1, f"round {round_no}: {outcomes}"
        (winner,), (loser,) = winners, losers
        assert not winner["fenced"], winner
        assert winner["epochs"][0] == {"barrier": 1000 * (round_no + 1), "actions": {COPY: "published"}}, winner
        assert loser["error"] == "OwnershipError", loser
        if loser["kind"] == "registration-live-instance":
            # it saw the winner's lease: the message names the live instance and says what to do
            assert "another live instance" in loser["message"] and winner["instance"] in loser["message"], loser
            assert "takeover" in loser["message"]
        else:
            # both saw a free sink; the loser's registration commit was refused by the catalog
            assert loser["kind"] in LOST_RACE, loser
            assert "refused by the catalog" in loser["message"] and "won the race" in loser["message"], loser
        count(test, loser)
    print(f"\nrace without takeover: {Counter(o['kind'] for r in per_round for o in r if not o['registered'])}")
    check_copy_exactly_once(cc, ROUNDS)


def test_two_instances_started_at_once_both_taking_over(lake: Lake) -> None:
    test = "race-takeover" + ("[rest]" if lake.rest else "")
    cc = make_lake(lake)
    per_round = run_races(lake, cc, takeover=True, rounds=len(TAKEOVER_STAGGER), stagger=TAKEOVER_STAGGER)
    holders = holder_history(lake, COPY)
    publishers: Counter[str] = Counter()
    for round_no, outcomes in enumerate(per_round):
        barrier = 1000 * (round_no + 1)
        registered = [o for o in outcomes if o["registered"]]
        assert registered, f"round {round_no}: nobody registered: {outcomes}"
        for o in outcomes:
            if not o["registered"]:
                # both read a free sink at the same instant: the catalog refused the second registration commit
                assert o["kind"] in LOST_RACE, o
                count(test, o)
        if len(registered) == 1:
            assert not registered[0]["fenced"], f"round {round_no}: the only registered instance was fenced: {outcomes}"
        if len(registered) == 2:
            order = sorted(registered, key=lambda o: holders.index(o["instance"]))
            earlier, later = order
            assert not later["fenced"], f"round {round_no}: the later registration was fenced: {later}"
            if earlier["fenced"]:
                assert earlier["error"] == "FencedError" and "taken over" in earlier["message"], earlier
                assert later["instance"] in earlier["message"], earlier
                count(test, earlier)
            else:
                # the earlier instance finished its epoch before the takeover: the later one had nothing to do
                assert all(e["actions"] == {COPY: "done"} for e in later["epochs"]), (earlier, later)
        for o in registered:
            assert not o["fenced"] or o["kind"] in (
                "plan-ownership-check", *(f"{k}|taken-over" for k in ("catalog-requirement", "catalog-swap", "client-precheck"))
            ), o
            publishers.update(
                o["name"] for e in o["epochs"] if e["barrier"] == barrier and e["actions"][COPY] in ("published", "republished")
            )
        published = sum(
            1 for o in registered for e in o["epochs"]
            if e["barrier"] == barrier and e["actions"][COPY] in ("published", "republished")
        )
        assert published <= 1, f"round {round_no}: barrier {barrier} reported published twice: {outcomes}"
    print(f"\nrace with takeover: registrations per round {[sum(o['registered'] for o in r) for r in per_round]}, "
          f"fenced {[o['kind'] for r in per_round for o in r if o.get('fenced')]}, publishers {dict(publishers)}")
    shapes = Counter(
        "one registered" if sum(o["registered"] for o in r) == 1
        else "earlier fenced" if any(o.get("fenced") for o in r) else "earlier finished first"
        for r in per_round
    )
    print(f"round outcomes: {dict(shapes)}; actions: "
          f"{Counter(e['actions'][COPY] for r in per_round for o in r for e in o.get('epochs') or [])}")
    assert shapes["earlier fenced"] >= 1, f"no round took over mid-epoch; the stagger needs tuning: {per_round}"
    check_copy_exactly_once(cc, len(TAKEOVER_STAGGER))
