"""Crash-injection scenarios: chosen points, idle roots, zombies, a commit sweep and random kills.

Each returns the :class:`~tests.harness.crash.driver.Report` of its run; the tests assert on it,
``bench/bench_reliability.py`` tabulates it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

from tests.harness.crash.common import JOBS, REST_NOT_SENT
from tests.harness.crash.driver import Harness, HarnessError, Report, WorkerRun
from tests.harness.crash.oracle import local_path, read_lake


def upstream_of(job: str) -> list[str]:
    return ["word-count"] if job == "count-histogram" else []


# What the resumed instance must do after a crash at each point, with no new input (protocol §5.4).
RESUME_ACTION = {
    "before-stage": "published",
    "during-stage": "published",
    "after-stage": "republished",
    "during-publish": "republished",
    "after-publish": None,  # the epoch was published: nothing left to do
}


def chosen_point_scenario(directory: str | Path, job: str, point: str, *, reader: bool = True) -> Report:
    """Kill ``job`` at ``point``, resume it (same inputs: the staged epoch must be published as it is).

    Where the crash leaves a staged epoch behind (after-stage, during-publish) a second round kills
    it there again, ingests new root data and resumes: the stale staged epoch must be discarded and
    the epoch recomputed at the new barrier, with nothing lost and nothing doubled.
    """
    with Harness(directory, reader=reader) as h:
        h.ingest()
        for upstream in upstream_of(job):
            h.run_clean(upstream)
        crashed = h.run(job, crash_at=point)
        h.check()
        if point in ("during-stage", "during-publish"):
            _check_orphaned_metadata(h, crashed, point)
        resumed = h.run_clean(job)
        actions = [action for name, _, action in resumed.epochs() if name == job]
        expected = RESUME_ACTION[point]
        if (actions[:1] or [None])[0] != expected:
            h.violation(f"{job} killed {point}: the resumed instance did {actions or 'nothing'}, expected "
                        f"{expected or 'nothing'} (protocol §5.4)")
        h.check(caught_up=[job, *upstream_of(job)])
        if point in ("after-stage", "during-publish"):
            h.ingest()
            for upstream in upstream_of(job):
                h.run_clean(upstream)
            h.run(job, crash_at=point)
            barrier = h.ingest()
            for upstream in upstream_of(job):
                h.run_clean(upstream)
            resumed = h.run_clean(job)
            actions = [(b, action) for name, b, action in resumed.epochs() if name == job]
            if actions != [(barrier, "published")]:
                h.violation(f"{job} killed {point}, then new input: the resumed instance did {actions}, expected "
                            f"one epoch published at {barrier} (the stale staged epoch discarded)")
            h.check(caught_up=[job, *upstream_of(job)])
    return h.report


def idle_root_scenario(directory: str | Path, job: str, point: str = "during-publish", *,
                       reader: bool = True) -> Report:
    """The root stays idle (its watermark advances, no rows): ``job`` publishes a watermark-only epoch.

    Killed at ``point`` of that publish, the resumed instance must publish the watermark (once),
    and the table must be complete at the new barrier without a new snapshot.
    """
    with Harness(directory, reader=reader) as h:
        h.ingest()
        for upstream in upstream_of(job):
            h.run_clean(upstream)
        h.run_clean(job)
        barrier = h.advance_root_watermark()
        for upstream in upstream_of(job):
            h.run_clean(upstream)
        crashed = h.run(job, crash_at=point)
        h.check()
        if point == "during-publish":
            _check_orphaned_metadata(h, crashed, point)
        resumed = h.run_clean(job)
        actions = [(b, action) for name, b, action in resumed.epochs() if name == job]
        expected = [(barrier, "watermark")] if point == "during-publish" else []
        if actions != expected:
            h.violation(f"{job} killed {point} of a watermark-only epoch: the resumed instance did {actions}, "
                        f"expected {expected}")
        source, sink, _ = JOBS[job]
        tables = read_lake(h.directory)
        if tables[sink].watermark() != barrier:
            h.violation(f"{sink}: W={tables[sink].watermark()} after the idle epoch, expected {barrier}")
        h.check(caught_up=[job, *upstream_of(job)])
    return h.report


def _check_orphaned_metadata(h: Harness, run: WorkerRun, point: str) -> None:
    """A crash inside a commit: the new metadata file exists, the catalog never pointed at it."""
    crash = run.marker("CRASH")
    assert crash is not None
    if crash[3] == REST_NOT_SENT:
        return  # a REST lake: the worker died before its request, the server wrote nothing
    written = local_path(crash[3])
    current = {local_path(t.location) for t in read_lake(h.directory).values()}
    if not Path(written).exists():
        h.violation(f"{point}: the crash was meant to follow the metadata write, but {written} does not exist")
    if written in current:
        h.violation(f"{point}: the catalog points at {written}, written by an instance killed before its commit")


def zombie_scenario(directory: str | Path, job: str, point: str, *, reader: bool = True) -> Report:
    """Stop ``job`` at ``point``; a second instance takes over and finishes; the first one wakes up.

    The woken instance (a zombie) must be refused by the catalog (FencedError) and change nothing.
    """
    with Harness(directory, reader=reader) as h:
        h.ingest()
        for upstream in upstream_of(job):
            h.run_clean(upstream)

        def take_over() -> None:
            h.report.pauses += 1
            h.ingest()  # the successor sees new input, so it must not publish the zombie's staged epoch blindly
            for upstream in upstream_of(job):
                h.run_clean(upstream)
            h.pending.add(job)
            h.run_clean(job)

        zombie = h.run(job, pause_at=point, on_paused=take_over)
        if not zombie.fenced:
            h.violation(f"{job} paused {point} and woken after a takeover was not fenced: {zombie.describe()}")
        h.check(caught_up=[job, *upstream_of(job)])
    return h.report


def commit_sweep_scenario(directory: str | Path, *, job: str = "all", sides: Iterable[str] = ("before", "after"),
                          reader: bool = True) -> Report:
    """Kill ``job`` at every catalog commit of a run in turn, inside it and right after it.

    Each round ingests one root epoch, kills the worker at its k-th commit (registration, staging,
    publishing, unregistration of each job), checks, resumes it with the same input and checks
    again; a staged epoch left behind must be published as it is. The sweep of a side ends when
    the worker makes fewer than k commits (that run counts as a missed kill).
    """
    with Harness(directory, reader=reader) as h:
        h.ingest()
        h.run_clean(job)  # genesis snapshots and staged branches exist: sweep the steady state
        for side in sides:
            commit = 1
            while True:
                h.ingest()
                if not h.run(job, crash_at_commit=(commit, side)).killed:
                    break
                h.check()
                h.run_clean(job)
                h.check(caught_up=JOBS if job == "all" else [job])
                commit += 1
    return h.report


def random_kill_scenario(directory: str | Path, kills: int, *, seed: int, reader: bool = True,
                         max_runs: int | None = None) -> Report:
    """SIGKILL workers after random delays until ``kills`` kills landed; ingest between and during runs.

    Jobs are picked at random (often all three in one process), so the tables lag each other by
    different amounts; a killed job is sometimes resumed at once, sometimes only after more input
    arrived. After every resume the whole lake is checked; at the end everything is run to
    completion and checked as caught up.
    """
    rng = random.Random(seed)
    choices = ("all", "all", "word-count", "count-histogram", "copy")
    with Harness(directory, reader=reader) as h:
        h.ingest()
        for job in choices[1:]:  # calibrate: how long a run of each job takes here and now
            h.run_clean(job)
        limit = max_runs if max_runs is not None else 6 * kills + 10
        while h.report.total_kills < kills:
            if h.report.runs >= limit:
                raise HarnessError(f"only {h.report.total_kills} of {kills} kills landed in {limit} runs")
            roll = rng.random()
            if roll < 0.6:
                h.ingest()
            elif roll < 0.7:
                h.advance_root_watermark()
            job = rng.choice(choices)
            pending = set(h.pending)
            if rng.random() < 0.5:
                # a timer: anywhere from registration to unregistration, uniform over a typical run
                delay = rng.uniform(0.0, 1.1 * h.durations.get(job, 1.0))
                during = (rng.uniform(0.0, delay), h.ingest) if rng.random() < 0.25 else None
                run = h.run(job, kill_after=delay, during=during)
            else:
                # a commit boundary: inside a random catalog commit (file written, not swapped) or right after it
                commit = (rng.randint(1, max(1, h.commits.get(job, 1) + 1)), rng.choice(("before", "after")))
                run = h.run(job, crash_at_commit=commit)
            if run.done and pending & (set(JOBS) if job == "all" else {job}):
                h.check()
        h.run_clean("all")
        h.check(caught_up=JOBS)
    return h.report

