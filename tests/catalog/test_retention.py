"""Cut-aware expiry, reader pins and tiered retention (protocol §9) on real SQLite catalogs.

Every check reads the real artefact independently: tagged or cut snapshots are scanned with plain
pyiceberg and compared with what the test itself ingested (a multiset of words per barrier), the
word counts are recounted from the words and the histogram from the counts. The pure planner (no
catalog) is tested in ``tests/unit/test_expiry_plan.py``.
"""

from __future__ import annotations

import importlib
import itertools
import json
import random
import uuid
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from consistent_catalog.demo import count_words, histogram
from consistent_catalog.exceptions import FencedError, HistoryExpiredError, InvalidInputError
from consistent_catalog.retention.expire import commit_expiry
from consistent_catalog.retention.policy import RetentionPolicy
from consistent_catalog.retention.refs import PIN_PREFIX
from consistent_catalog.state import encode_summary_sources
from consistent_catalog.util.time import now_ms
from tests.harness.builders import EVERYTHING
from tests.harness.lake import words

WORDS, COUNTS, HIST = "demo.words", "demo.word_counts", "demo.count_histogram"
FLIP = (WORDS, COUNTS, HIST)
HOUR = 3600_000
DAY = 24 * HOUR


# --- helpers -----------------------------------------------------------------------------------------
class Pipeline:
    """The FLIP pipeline with a log of what was ingested at which barrier (the independent truth)."""

    def __init__(self, cc, **job_options):
        self.cc = cc
        self.counter = cc.job("word-count", sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite",
                              **job_options)
        self.hist = cc.job("count-histogram", sources=[COUNTS], sinks=[HIST], transform=histogram, mode="overwrite")
        self.counter.register()
        self.hist.register()
        self.ingested: list[tuple[int, list[str]]] = []

    def ingest(self, barrier: int, epoch: int) -> None:
        batch = [f"w{(epoch * 7 + i) % 11}" for i in range(1 + epoch % 3)]
        # simulated time runs ahead of the clock (hours of epochs in seconds): insist on it
        self.cc.ingest(WORDS, words(*batch), barrier=barrier, allow_future=True)
        self.ingested.append((barrier, batch))

    def epoch(self, barrier: int, epoch: int, *, histogram: bool = True) -> None:
        self.ingest(barrier, epoch)
        self.counter.run_epoch()
        if histogram:
            self.hist.run_epoch()

    def words_at(self, barrier: int) -> Counter:
        return Counter(w for b, batch in self.ingested if b <= barrier for w in batch)


def scan(catalog, table: str, snapshot_id: int | None) -> list[dict]:
    if snapshot_id is None:
        return []
    return catalog.load_table(table).scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


def check_flip_at(catalog, ids: dict[str, int | None], expected_words: Counter) -> None:
    """Scan the three snapshots with plain pyiceberg; words must be what was ingested, the rest recounted."""
    found_words = Counter(r["word"] for r in scan(catalog, WORDS, ids[WORDS]))
    assert found_words == expected_words
    counts = {r["word"]: r["cnt"] for r in scan(catalog, COUNTS, ids[COUNTS])}
    assert counts == dict(found_words)
    hist = {r["cnt"]: r["words"] for r in scan(catalog, HIST, ids[HIST])}
    assert hist == dict(Counter(counts.values()))


def tag_ids(catalog, tag: str, tables=FLIP) -> dict[str, int | None]:
    out = {}
    for name in tables:
        ref = catalog.load_table(name).metadata.refs.get(tag)
        out[name] = None if ref is None else ref.snapshot_id
    return out


def snapshot_ids(catalog, table: str) -> set[int]:
    """The table's data snapshots (not the fence ref's: every pin, tag and expiry replaces that one)."""
    return {s.snapshot_id for s in catalog.load_table(table).metadata.snapshots
            if P.FENCE_REASON not in s.summary.additional_properties}


def all_subsets(tables=FLIP):
    return [list(c) for n in range(1, len(tables) + 1) for c in itertools.combinations(tables, n)]


def cheap_epochs(catalog, name: str, barriers: list[int], *, job: str | None = None,
                 sources: dict[int, dict[str, int | None]] | None = None) -> dict[int, int]:
    """Commit one snapshot per barrier in ONE catalog commit: no data change, same manifest list as main's head.

    The snapshots are scannable (they share the head's manifest list, so they hold its rows) and carry
    the summary keys an epoch writes; on derived tables they are empty epochs with recorded inputs.
    Returns barrier -> snapshot id.
    """
    table = catalog.load_table(name)
    metadata = table.metadata
    head = metadata.snapshot_by_name(P.MAIN_BRANCH)
    totals = {k: v for k, v in head.summary.additional_properties.items() if k.startswith("total-")}
    totals.setdefault("total-records", "0")
    parent = head.snapshot_id
    stamp = max(now_ms(), head.timestamp_ms + 1)
    updates: list = []
    made: dict[int, int] = {}
    for k, barrier in enumerate(barriers):
        sid = random.getrandbits(62) + 1
        props = {**totals, "added-records": "0", P.BARRIER: str(barrier)}
        if job is not None:
            props.update({P.JOB: job, P.SOURCES: encode_summary_sources(sources[barrier]), P.ATTEMPT: uuid.uuid4().hex[:12]})
        updates.append(AddSnapshotUpdate(snapshot=Snapshot(
            snapshot_id=sid, parent_snapshot_id=parent, sequence_number=metadata.last_sequence_number + k + 1,
            timestamp_ms=stamp + k, manifest_list=head.manifest_list, summary=Summary(Operation.APPEND, **props),
            schema_id=head.schema_id,
        )))
        made[barrier] = sid
        parent = sid
    branches = [P.MAIN_BRANCH] + ([P.STAGED_BRANCH] if job is not None else [])
    for branch in branches:
        updates.append(SetSnapshotRefUpdate(ref_name=branch, type=SnapshotRefType.BRANCH, snapshot_id=parent))
    catalog.commit_table(table, (AssertRefSnapshotId(ref=P.MAIN_BRANCH, snapshot_id=head.snapshot_id),), tuple(updates))
    return made


# --- on a real catalog -------------------------------------------------------------------------------
def test_needed_snapshot_older_than_threshold_survives_and_unneeded_old_ones_go(cc, catalog, flip_tables):
    pipe = Pipeline(cc)
    for e in range(8):  # the histogram job runs at epochs 0 and 3 only: it lags
        pipe.epoch((e + 1) * 1000, e, histogram=e in (0, 3))
    cut = cc.resolve(FLIP)
    assert cut.barrier == 4000
    subsets = {tuple(s): cc.resolve(s) for s in all_subsets()}
    before = {t: snapshot_ids(catalog, t) for t in FLIP}
    old_counts = [s for s in before[COUNTS] if s != cut[COUNTS].snapshot_id]

    young = cc.retention.expire(None, RetentionPolicy(older_than=HOUR))  # everything is younger than an hour
    assert young.expired == {} and {t: snapshot_ids(catalog, t) for t in FLIP} == before

    result = cc.retention.expire(None, RetentionPolicy(older_than=HOUR), now=now_ms() + 2 * HOUR)  # everything is old
    after = {t: snapshot_ids(catalog, t) for t in FLIP}
    for name in FLIP:  # the cut's snapshots are hours past the threshold and survive
        assert cut[name].snapshot_id in after[name]
    assert result.expired[COUNTS] > 0 and set(old_counts) - after[COUNTS]
    counts_plan = result.plan.tables[COUNTS]
    assert counts_plan.history_start == cut[COUNTS].snapshot_id
    assert any(r.startswith(f"inputs of {HIST}") for r in counts_plan.held_by)
    for subset, resolved in subsets.items():  # every subset still resolves to the very same cut
        assert cc.resolve(list(subset)) == resolved
    check_flip_at(catalog, cc.resolve(FLIP).snapshot_ids, pipe.words_at(4000))
    with pytest.raises(HistoryExpiredError, match="expired"):  # not "empty": the parent id still dangles
        cc.resolve([WORDS, COUNTS], as_of=2000)
    # the jobs carry on from the retained inputs (incremental reads start at the sink head's inputs)
    for e in range(8, 10):
        pipe.epoch((e + 1) * 1000, e)
    check_flip_at(catalog, cc.resolve(FLIP).snapshot_ids, pipe.words_at(10_000))


def test_dry_run_changes_nothing_and_explains(cc, catalog, flip_tables):
    pipe = Pipeline(cc)
    for e in range(4):
        pipe.epoch((e + 1) * 1000, e, histogram=e == 1)
    before = {t: catalog.load_table(t).metadata_location for t in FLIP}
    result = cc.retention.expire([COUNTS], EVERYTHING, dry_run=True)
    assert result.dry_run and result.expired == {}
    assert {t: catalog.load_table(t).metadata_location for t in FLIP} == before
    table = result.plan.tables[COUNTS]
    assert list(result.plan.tables) == [COUNTS] and table.expire
    assert any("latest repeatable-read cut (barrier 2000)" in r for r in table.held_by)
    payload = result.to_json(details=True)
    json.dumps(payload)
    assert payload["tables"][COUNTS]["history_start"]["barrier"] == 2000


def test_pins_keep_their_cut_and_expire_by_themselves(cc, catalog, flip_tables):
    pipe = Pipeline(cc)
    for e in range(3):
        pipe.epoch((e + 1) * 1000, e)
    pinned = cc.pins.pin(FLIP, ttl="1h")
    assert pinned.tag.startswith(PIN_PREFIX) and pinned.cut.barrier == 3000
    for name, sid in pinned.tables.items():  # Iceberg ref age: now - snapshot timestamp <= max-ref-age
        table = catalog.load_table(name)
        ref = table.metadata.refs[pinned.tag]
        assert ref.snapshot_ref_type == SnapshotRefType.TAG and ref.snapshot_id == sid
        assert ref.max_ref_age_ms == pinned.expires_at - table.metadata.snapshot_by_id(sid).timestamp_ms
    for e in range(3, 7):
        pipe.epoch((e + 1) * 1000, e)
    cc.retention.expire(None, EVERYTHING, now=now_ms() + 10 * 60_000)
    assert tag_ids(catalog, pinned.tag) == dict(pinned.tables)  # the pin outlived expiry
    check_flip_at(catalog, tag_ids(catalog, pinned.tag), pipe.words_at(3000))
    assert Counter(pinned.to_arrow(WORDS)["word"].to_pylist()) == pipe.words_at(3000)
    latest = cc.resolve(FLIP)
    assert latest.barrier == 7000
    # snapshots between the pin and the latest cut are gone: the pin holds only its own snapshot
    assert len(snapshot_ids(catalog, WORDS)) == 2
    assert [p.tag for p in cc.pins.list()] == [pinned.tag]

    result = cc.retention.expire(None, EVERYTHING, now=pinned.expires_at + 1)  # the ttl passed: the pin goes by itself
    assert all(pinned.tag in tags for tags in result.dropped_tags.values()) and len(result.dropped_tags) == 3
    assert tag_ids(catalog, pinned.tag) == {t: None for t in FLIP}
    for name, sid in pinned.tables.items():
        assert sid not in snapshot_ids(catalog, name)
    check_flip_at(catalog, cc.resolve(FLIP).snapshot_ids, pipe.words_at(7000))
    pinned.release()  # releasing a pin that expiry dropped is fine


def test_pin_context_manager_releases_and_pins_history(cc, catalog, flip_tables):
    pipe = Pipeline(cc)
    for e in range(4):
        pipe.epoch((e + 1) * 1000, e)
    with cc.pins.pin([WORDS, COUNTS], as_of=2000, ttl="10m") as pinned:
        assert pinned.cut.barrier == 2000 and set(pinned.tables) == {WORDS, COUNTS}
        cc.retention.expire(None, EVERYTHING)
        assert Counter(pinned.read.to_arrow(WORDS)["word"].to_pylist()) == pipe.words_at(2000)
        assert {r["word"]: r["cnt"] for r in scan(catalog, COUNTS, pinned.tables[COUNTS])} == dict(pipe.words_at(2000))
    assert tag_ids(catalog, pinned.tag, [WORDS, COUNTS]) == {WORDS: None, COUNTS: None}
    cc.retention.expire(None, EVERYTHING)
    assert pinned.tables[WORDS] not in snapshot_ids(catalog, WORDS)
    with pytest.raises(HistoryExpiredError):
        cc.pins.pin([WORDS, COUNTS], as_of=2000)


def test_renew_and_unpin(cc, catalog, flip_tables):
    pipe = Pipeline(cc)
    pipe.epoch(1000, 0)
    pinned = cc.pins.pin([WORDS], ttl="1m")
    renewed = pinned.renew("2h")
    ref = catalog.load_table(WORDS).metadata.refs[pinned.tag]
    snapshot = catalog.load_table(WORDS).metadata.snapshot_by_id(ref.snapshot_id)
    assert snapshot.timestamp_ms + ref.max_ref_age_ms == renewed
    assert cc.pins.unpin(pinned.tag) == [WORDS]
    assert cc.pins.list() == []
    with pytest.raises(InvalidInputError, match="consistent-"):
        cc.pins.unpin("release-1.0")


def test_tiered_retention_tags_readable_cuts_and_drops_old_tiers(cc, catalog, flip_tables):
    pipe = Pipeline(cc)
    policy = RetentionPolicy(older_than=0, hourly=2, daily=1)
    t0 = (now_ms() // HOUR) * HOUR + 60_000  # one minute into the current hour
    tiers = {}
    for e in range(6):  # one epoch per hour of simulated time
        pipe.epoch((e + 1) * 1000, e, histogram=e % 2 == 0)
        for retained in cc.retention.retain(None, policy, now=t0 + e * HOUR):
            tiers.setdefault(retained.tag, retained)
        cc.retention.expire(None, policy, now=t0 + e * HOUR + 1)
    again = cc.retention.retain(None, policy, now=t0 + 5 * HOUR + 5)
    assert {r.action for r in again} == {"exists"}
    hourly = sorted(t for t in tiers if t.startswith("consistent-hourly-"))
    daily = [t for t in tiers if t.startswith("consistent-daily-")]
    assert len(hourly) == 6 and 1 <= len(daily) <= 2
    present = {t for t in tiers if all(tag_ids(catalog, t).values())}
    # hourly tags live 2 hours from the start of their hour: the last two (and the daily) are left
    assert present == set(hourly[-2:]) | {d for d in daily if tiers[d].expires_at > t0 + 5 * HOUR + 1}
    for tag in present:  # each retained tier is one consistent cut, readable with plain pyiceberg by tag
        ids = tag_ids(catalog, tag)
        barrier = tiers[tag].barrier
        check_flip_at(catalog, ids, pipe.words_at(barrier))
        table = catalog.load_table(COUNTS)
        by_name = table.scan(snapshot_id=table.snapshot_by_name(tag).snapshot_id).to_arrow()
        assert by_name.num_rows == len(pipe.words_at(barrier))
    check_flip_at(catalog, cc.resolve(FLIP).snapshot_ids, pipe.words_at(cc.resolve(FLIP).barrier))


def test_epoch_job_expires_its_sinks_every_n_epochs(cc, catalog, flip_tables):
    pipe = Pipeline(cc, expire_every=3, retention=RetentionPolicy(older_than=0, delete_files=True))
    for e in range(12):
        pipe.epoch((e + 1) * 1000, e, histogram=e % 4 == 3)
    counts = catalog.load_table(COUNTS).metadata.snapshots
    assert len(counts) <= 2 * 4 + 3  # an overwrite epoch is 2 snapshots; the histogram lags up to 4 epochs
    assert len(catalog.load_table(WORDS).metadata.snapshots) == 12  # not the job's table: untouched
    check_flip_at(catalog, cc.resolve(FLIP).snapshot_ids, pipe.words_at(12_000))
    for snapshot in counts:  # every retained snapshot still scans, files included
        table = catalog.load_table(COUNTS)
        assert table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().num_rows == int(snapshot.summary["total-records"])
    with pytest.raises(InvalidInputError):
        cc.job("x", sources=[WORDS], sinks=[COUNTS], expire_every=0)


def data_files_on_disk(directory: Path, table: str) -> set[str]:
    ns, name = table.split(".")
    return {f"file://{p}" for p in (directory / "warehouse" / ns / name / "data").rglob("*.parquet")}


def referenced_files(catalog, table: str) -> tuple[set[str], set[str]]:
    """(live data files of retained snapshots, every data file any retained manifest mentions)."""
    loaded = catalog.load_table(table)
    live, mentioned = set(), set()
    for snapshot in loaded.metadata.snapshots:
        for manifest in snapshot.manifests(loaded.io):
            for entry in manifest.fetch_manifest_entry(loaded.io, discard_deleted=False):
                mentioned.add(entry.data_file.file_path)
                if entry.status.value != 2:
                    live.add(entry.data_file.file_path)
    return live, mentioned


def test_delete_files_removes_only_unreferenced_files(cc, catalog, flip_tables, tmp_path):
    pipe = Pipeline(cc)
    for e in range(6):
        pipe.epoch((e + 1) * 1000, e, histogram=e in (1, 4))
    before = {t: data_files_on_disk(tmp_path, t) for t in FLIP}
    result = cc.retention.expire(None, RetentionPolicy(older_than=0, delete_files=True))
    assert result.deleted[COUNTS].data_files > 0 and result.deleted[COUNTS].manifest_lists > 0
    for name in FLIP:
        on_disk = data_files_on_disk(tmp_path, name)
        live, mentioned = referenced_files(catalog, name)
        assert live <= on_disk <= mentioned
        assert len(before[name] - on_disk) == result.deleted.get(name, type(result.deleted[COUNTS])()).data_files
        table = catalog.load_table(name)
        for snapshot in table.metadata.snapshots:
            assert table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().num_rows == int(snapshot.summary["total-records"])
    check_flip_at(catalog, cc.resolve(FLIP).snapshot_ids, pipe.words_at(5000))


def test_a_concurrent_publish_is_never_lost(cc, catalog, flip_tables, monkeypatch):
    pipe = Pipeline(cc)
    for e in range(4):
        pipe.epoch((e + 1) * 1000, e)
    stale, loaded = cc.retention.plan(None, EVERYTHING)
    pipe.epoch(5000, 4)  # publishes while the stale plan waits
    head = catalog.load_table(COUNTS).metadata.snapshot_by_name(P.MAIN_BRANCH).snapshot_id
    with pytest.raises(FencedError, match="branch main has changed"):
        commit_expiry(cc.store, loaded[COUNTS], stale.tables[COUNTS])
    assert catalog.load_table(COUNTS).metadata.snapshot_by_name(P.MAIN_BRANCH).snapshot_id == head

    # the module (``consistent_catalog.retention.expire`` is also the name of the function it defines)
    expiry = importlib.import_module("consistent_catalog.retention.expire")
    real_plan, calls = expiry.plan_from_catalog, []

    def plan_then_publish(*args, **kwargs):  # the first plan is overtaken by a publish and a new pin
        planned = real_plan(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            pipe.epoch(6000, 5)
            cc.pins.pin([WORDS], ttl="1h")
        return planned

    monkeypatch.setattr(expiry, "plan_from_catalog", plan_then_publish)
    result = cc.retention.expire(None, EVERYTHING)
    assert result.attempts == 2
    check_flip_at(catalog, cc.resolve(FLIP).snapshot_ids, pipe.words_at(6000))
    assert len(cc.pins.list()) == 1 and all(cc.pins.list()[0].tables.values())


def test_components_with_blocked_or_untracked_tables(cc, catalog, flip_tables):
    pipe = Pipeline(cc)
    for e in range(4):  # the histogram job never ran: it is empty without a watermark
        pipe.epoch((e + 1) * 1000, e, histogram=False)
    before = cc.resolve([WORDS, COUNTS])
    result = cc.retention.expire(None, EVERYTHING)
    assert HIST in result.plan.skipped and "watermark" in result.plan.skipped[HIST]
    assert result.expired[WORDS] > 0 and cc.resolve([WORDS, COUNTS]) == before
    # a write outside the job makes word_counts untracked: it and the histogram are left alone
    catalog.load_table(COUNTS).append(catalog.load_table(COUNTS).scan().to_arrow())
    kept = snapshot_ids(catalog, COUNTS)
    result = cc.retention.expire(None, EVERYTHING)
    assert "untracked" in result.plan.skipped[COUNTS] and snapshot_ids(catalog, COUNTS) == kept


def test_read_committed_cut_and_staged_epoch_survive(cc, catalog, flip_tables):
    pipe = Pipeline(cc)
    for e in range(3):
        pipe.epoch((e + 1) * 1000, e)
    pipe.ingest(4000, 3)
    plan_ = pipe.counter.plan()
    staged = pipe.counter.stage(COUNTS, plan_, count_words(_context(pipe, plan_)))  # processed, not published
    committed = cc.resolve([WORDS, COUNTS], level="read-committed")
    assert committed[COUNTS].snapshot_id == staged.head and committed.barrier == 4000
    cc.retention.expire(None, EVERYTHING)
    assert cc.resolve([WORDS, COUNTS], level="read-committed") == committed
    assert pipe.counter.run_epoch().actions[COUNTS] == "republished"  # the staged epoch is still whole
    pipe.hist.run_epoch()
    check_flip_at(catalog, cc.resolve(FLIP).snapshot_ids, pipe.words_at(4000))


def _context(pipe, plan_):
    from consistent_catalog.epoch import EpochContext

    return EpochContext(pipe.counter.job, plan_.barrier, plan_.inputs, {}, pipe.cc.store)


# --- CLI -------------------------------------------------------------------------------------------
@pytest.fixture
def cli_group():
    """The real ``consistent-catalog`` group (the retention commands are part of it)."""
    from consistent_catalog.cli.main import cli

    return cli


def test_cli_expire_pin_pins_unpin_retain(cc, catalog, flip_tables, cli_group, monkeypatch):
    pipe = Pipeline(cc)
    for e in range(4):
        pipe.epoch((e + 1) * 1000, e, histogram=e == 1)
    # pyiceberg reads its configuration once per process: hand the commands this test's catalog
    monkeypatch.setattr(ConsistentCatalog, "load", classmethod(lambda cls, name=None, **properties: cc))
    runner = CliRunner()

    def run(*args, code=0):
        result = runner.invoke(cli_group, ["--catalog", "lake", *args], catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result.output

    dry = json.loads(run("expire", "--older-than", "0s", "--dry-run", "-o", "json"))
    assert dry["dry_run"] and dry["tables"][COUNTS]["expire"] and not dry["expired"]
    assert "held by" in run("expire", "--older-than", "0", "--dry-run", "--details")
    pinned = json.loads(run("pin", WORDS, COUNTS, "--ttl", "2h", "-o", "json"))
    assert pinned["tag"].startswith(PIN_PREFIX) and set(pinned["tables"]) == {WORDS, COUNTS}
    assert [p["tag"] for p in json.loads(run("pins", "-o", "json"))] == [pinned["tag"]]
    done = json.loads(run("expire", "--older-than", "0", "--delete-files", "-o", "json"))
    assert done["expired"][COUNTS] > 0 and tag_ids(catalog, pinned["tag"], [WORDS, COUNTS])[WORDS] is not None
    retained = json.loads(run("retain", "--daily", "3", "-o", "json"))
    assert retained[0]["tag"].startswith("consistent-daily-") and set(retained[0]["tables"]) == set(FLIP)
    assert json.loads(run("retain", "--list", "-o", "json"))[0]["tag"] == retained[0]["tag"]
    assert "removed" in run("unpin", pinned["tag"])
    assert run("pins", "-o", "json").strip() == "[]"
    out = runner.invoke(cli_group, ["--catalog", "lake", "expire", "--older-than", "soon"])
    assert out.exit_code == 1 and out.output.count("\n") == 1 and "500ms, 90s" in out.output
    out = runner.invoke(cli_group, ["--catalog", "lake", "unpin", "consistent-pin-nope"])
    assert out.exit_code == 1 and "pins" in out.output
    for name in ("expire", "retain", "pin", "unpin", "pins"):
        assert "Example" in run(name, "--help")


# --- a thousand epochs ---------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.backends("sqlite", "rest-faults")  # the history is the subject; 40 s a backend
def test_a_thousand_epochs_with_expiry_every_cut_that_should_be_readable_is(cc, catalog, flip_tables, tmp_path):
    """1,200 epochs over 20 simulated hours across a UTC midnight, with tiered retention, pins and expiry (files
    deleted) running along.

    Every 60th epoch is a real pyiceberg epoch (ingest + both jobs); the 59 between them are empty
    epochs committed cheaply (one catalog commit per table for all 59; the histogram job skips every
    other hour, so its inputs lag). Simulated time runs one minute per epoch; retention runs every
    simulated hour. At the end: the latest cut, every retained tier and the long pin resolve and
    scan to exactly what was ingested; the short pin went by itself; metadata stayed bounded (by the
    histogram's lag: at most 190 snapshots a table, a sixth of the run's). Its cost is per epoch (expiry
    reads every retained snapshot each hour), so it runs 20 hours, not 34: midnight (hour 18) still
    falls inside, and bench_retention runs 2,000 epochs for the latency and size figures.
    """
    pipe = Pipeline(cc)
    policy = RetentionPolicy(older_than=0, hourly=3, daily=2, delete_files=True)
    minute = 60_000
    # Tomorrow 06:00 UTC, whatever the hour the test runs: simulated time stays ahead of the snapshots' real commit
    # times (expiry compares with them), and the pins (hours 3 and 5) never fall in a UTC day's first hour, whose
    # first cut the daily tier keeps (a pin there stays held by that tier, not by itself).
    start = (now_ms() // DAY + 1) * DAY + 6 * HOUR
    hours = 20  # midnight falls at hour 18: two daily tiers, three hourly ones, the short pin expired
    tiers: dict[str, int] = {}
    long_pin = short_pin = None
    long_words = short_ids = None
    most_snapshots = 0
    epoch = 0
    for hour in range(hours):
        clock = start + hour * HOUR
        pipe.epoch(clock, epoch, histogram=hour % 2 == 0)
        epoch += 1
        barriers = [clock + k * minute for k in range(1, 60)]
        roots = cheap_epochs(catalog, WORDS, barriers)
        counts = cheap_epochs(catalog, COUNTS, barriers, job="word-count",
                              sources={b: {WORDS: roots[b]} for b in barriers})
        if hour % 2 == 0:
            cheap_epochs(catalog, HIST, barriers, job="count-histogram",
                         sources={b: {COUNTS: counts[b]} for b in barriers})
        epoch += len(barriers)
        now = clock + 59 * minute + 1
        for retained in cc.retention.retain(None, policy, now=now):
            if retained.action != "exists":
                tiers[retained.tag] = retained.barrier
        if hour == 3:
            long_pin = cc.pins.pin(FLIP, ttl="1000h", now=now)
            long_words = pipe.words_at(long_pin.cut.barrier)
        if hour == 5:
            short_pin = cc.pins.pin(FLIP, ttl="2h", now=now)
            short_ids = dict(short_pin.tables)
        cc.retention.expire(None, policy, now=now)
        most_snapshots = max(most_snapshots, *(len(catalog.load_table(t).metadata.snapshots) for t in FLIP))
    assert epoch >= 1200

    latest = cc.resolve(FLIP)
    check_flip_at(catalog, latest.snapshot_ids, pipe.words_at(latest.barrier))
    assert latest.barrier >= start + (hours - 2) * HOUR
    assert most_snapshots < 3 * 60 + 10  # bounded: the histogram's lag, not the run's length

    present = {t for t in tiers if any(tag_ids(catalog, t).values())}
    assert present == {t for t in tiers if tier_expiry_of(t, policy, now)}
    assert sum(t.startswith("consistent-hourly-") for t in present) == 3
    assert sum(t.startswith("consistent-daily-") for t in present) >= 1
    for tag in present:
        ids = tag_ids(catalog, tag)
        assert all(ids.values())
        check_flip_at(catalog, ids, pipe.words_at(tiers[tag]))

    assert tag_ids(catalog, long_pin.tag) == dict(long_pin.tables)
    check_flip_at(catalog, tag_ids(catalog, long_pin.tag), long_words)
    assert tag_ids(catalog, short_pin.tag) == {t: None for t in FLIP}
    assert not any(short_ids[t] in snapshot_ids(catalog, t) for t in FLIP)

    for name in FLIP:  # every retained snapshot scans, and no deleted file was still needed
        table = catalog.load_table(name)
        for snapshot in table.metadata.snapshots:
            rows = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().num_rows
            assert rows == int(snapshot.summary["total-records"])
        live, mentioned = referenced_files(catalog, name)
        assert live <= data_files_on_disk(tmp_path, name) <= mentioned


def tier_expiry_of(tag: str, policy: RetentionPolicy, now: int) -> bool:
    """Whether a tier tag should still be alive at ``now`` (recomputed from its name alone)."""
    from datetime import datetime, timezone

    kind, stamp = tag.removeprefix("consistent-").split("-", 1)
    if kind == "hourly":
        begins = datetime.strptime(stamp, "%Y%m%dT%H").replace(tzinfo=timezone.utc)
        length = HOUR * policy.hourly
    else:
        begins = datetime.strptime(stamp, "%Y%m%d").replace(tzinfo=timezone.utc)
        length = 24 * HOUR * policy.daily
    return begins.timestamp() * 1000 + length >= now


# --- other engines: Spark reads the tags and its own expiry honours the pins' ref ages -------------------
@pytest.fixture(scope="module")
def spark_lake(tmp_path_factory):
    from consistent_catalog.spark.session import build_session
    from tests.harness.lake import COUNTS_SCHEMA, HIST_SCHEMA, WORDS_SCHEMA, sqlite_catalog

    root = tmp_path_factory.mktemp("retention-spark")
    catalog = sqlite_catalog(root)
    catalog.create_namespace("demo")
    for name, schema in ((WORDS, WORDS_SCHEMA), (COUNTS, COUNTS_SCHEMA), (HIST, HIST_SCHEMA)):
        catalog.create_table(name, schema=schema)
    spark = build_session(f"sqlite:///{root}/catalog.db", root / "warehouse", app_name="test-retention")
    try:
        yield catalog, spark
    finally:
        spark.stop()


@pytest.mark.spark
def test_spark_reads_retained_cuts_by_tag_and_its_expiry_honours_pin_ages(spark_lake):
    import time

    catalog, spark = spark_lake
    cc = ConsistentCatalog(catalog)
    pipe = Pipeline(cc)
    for e in range(2):
        pipe.epoch((e + 1) * 1000, e, histogram=e % 2 == 1)
    short_pin = cc.pins.pin([WORDS], ttl="4s")
    for e in range(2, 4):
        pipe.epoch((e + 1) * 1000, e, histogram=e % 2 == 1)
    daily = cc.retention.retain(None, RetentionPolicy(daily=7))[0]
    long_pin = cc.pins.pin(FLIP, ttl="1h")
    for e in range(4, 7):
        pipe.epoch((e + 1) * 1000, e)
    cc.retention.expire(None, EVERYTHING)  # our expiry: parent ids of the oldest retained snapshots now dangle

    def spark_rows(table: str, tag: str) -> list:
        return [r.asDict() for r in spark.sql(f"SELECT * FROM lake.{table} VERSION AS OF '{tag}'").collect()]

    for tag, barrier in ((daily.tag, daily.barrier), (long_pin.tag, long_pin.cut.barrier)):
        found = Counter(r["word"] for r in spark_rows(WORDS, tag))
        assert found == pipe.words_at(barrier)
        counts = {r["word"]: r["cnt"] for r in spark_rows(COUNTS, tag)}
        assert counts == dict(found)
        assert {r["cnt"]: r["words"] for r in spark_rows(HIST, tag)} == dict(Counter(counts.values()))
    latest = cc.resolve(FLIP)
    assert spark.sql(f"SELECT count(*) AS n FROM lake.{WORDS}").collect()[0]["n"] == sum(pipe.words_at(latest.barrier).values())

    assert short_pin.tag in catalog.load_table(WORDS).metadata.refs  # alive when our expiry ran
    time.sleep(max(0.0, (short_pin.expires_at - now_ms()) / 1000) + 0.5)  # its ttl passed; the others live on
    future = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() + 60))
    spark.sql(f"CALL lake.system.expire_snapshots(table => '{WORDS}', older_than => TIMESTAMP '{future}', retain_last => 1)")
    refs = catalog.load_table(WORDS).metadata.refs
    assert long_pin.tag in refs and daily.tag in refs and short_pin.tag not in refs
    assert short_pin.tables[WORDS] not in snapshot_ids(catalog, WORDS)
    kept = catalog.load_table(WORDS)
    assert Counter(kept.scan(snapshot_id=refs[long_pin.tag].snapshot_id).to_arrow()["word"].to_pylist()) == \
        pipe.words_at(long_pin.cut.barrier)
