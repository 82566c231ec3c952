"""The crash-injection worker: a process that runs epoch jobs of the lake and dies where it is told.

::

    python -m tests.harness.crash.worker --dir D --job word-count|count-histogram|copy|all [--epochs N]
                                         [--crash-at POINT | --pause-at POINT] [--crash-after-epochs K]
                                         [--crash-at-commit N [--commit-side before|after]]

(run from the repository root). It opens the lake's catalog (the SQLite catalog at ``D``, or the catalog
``D/catalog.json`` names, e.g. a REST server's), registers its job(s) with
``takeover=True`` (a restarted instance takes over from the killed one) and runs epochs until caught up.
``all`` runs the three jobs in one process, in DAG order. Crash points are installed by monkeypatching
inside this process only (never in ``src/``):

- ``before-stage``: entry of ``EpochJob.stage``;
- ``during-stage``: inside a catalog commit of ``stage``, after the new metadata file is written
  and before the catalog row is swapped (the commit never happens);
- ``after-stage``: ``stage`` returned, ``publish`` not called yet;
- ``during-publish``: inside the publish commit, metadata file written, catalog row not swapped;
- ``after-publish``: ``publish`` returned, before the next epoch / unregistration.

``--crash-at`` kills the process there with a real ``kill -9`` of itself. ``--crash-at-commit N``
kills it at its N-th catalog commit, after the new metadata file is written (``before`` the swap)
or right after the swap (``after``). ``--pause-at`` stops it at a point with SIGSTOP instead, so
the driver (``tests.harness.crash.driver``) can let a second instance take over and then wake the
first one up as a zombie. The worker prints one marker line per step (``STARTED``, ``PHASE``,
``COMMIT``, ``EPOCH``, ``CRASH``, ``PAUSED``, ``FENCED``, ``DONE``) and exits 0 when caught up,
``EXIT_FENCED`` when the catalog refused it as a zombie (FencedError).

Module-level imports are standard library only, so start-up is quick and every instant after
``STARTED`` is worth a kill.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from tests.harness.crash.common import CRASH_POINTS, EXIT_FENCED, JOB_CHOICES, JOBS, REST_NOT_SENT, open_catalog
from tests.harness.transforms import copy_increment, count_upper_words


def _emit(*parts: object) -> None:
    print(" ".join(str(p) for p in parts), flush=True)


class _Injector:
    """Kills (or stops) this process at one named point of the epoch, once armed."""

    def __init__(self, point: str | None, *, pause: bool, after_epochs: int, commit: int | None = None,
                 commit_side: str = "before") -> None:
        self.point = point
        self.pause = pause
        self.after_epochs = after_epochs
        self.epochs = 0
        self.fired = False
        self.inside: str | None = None  # "stage" / "publish" while inside those calls
        self.commit_target = commit
        self.commit_side = commit_side
        self.commits = 0  # catalog commits begun by this process

    def hit_commit(self, side: str, detail: object) -> None:
        """Kill at the target commit: after its metadata file is written (before) or once it is swapped in (after)."""
        if self.commit_target == self.commits and side == self.commit_side and not self.fired:
            self.fired = True
            _emit("CRASH", f"commit-{side}", self.commits, detail)
            os.kill(os.getpid(), signal.SIGKILL)

    def hit(self, point: str, job: str, detail: object = "") -> None:
        if point != self.point or self.fired or self.epochs <= self.after_epochs:
            return
        self.fired = True
        if self.pause:
            _emit("PAUSED", point, job, detail)
            os.kill(os.getpid(), signal.SIGSTOP)
            _emit("RESUMED", point, job)
        else:
            _emit("CRASH", point, job, detail)
            os.kill(os.getpid(), signal.SIGKILL)

    def install(self, epoch_job_class: Any, catalog: Any) -> None:
        injector = self
        run_epoch, stage, publish = epoch_job_class.run_epoch, epoch_job_class.stage, epoch_job_class.publish

        def patched_run_epoch(job: Any, *args: Any, **kwargs: Any) -> Any:
            injector.epochs += 1
            _emit("PHASE", "plan", job.job)
            return run_epoch(job, *args, **kwargs)

        def patched_stage(job: Any, sink: str, plan: Any, data: Any) -> Any:
            _emit("PHASE", "stage", job.job, plan.barrier)
            injector.hit("before-stage", job.job)
            injector.inside = "stage"
            try:
                staged = stage(job, sink, plan, data)
            finally:
                injector.inside = None
            _emit("PHASE", "staged", job.job, plan.barrier, staged.head)
            injector.hit("after-stage", job.job, staged.head)
            return staged

        def patched_publish(job: Any, sink: str, plan: Any, main_head: Any, staged_head: Any, **options: Any) -> Any:
            _emit("PHASE", "publish", job.job, plan.barrier)
            injector.inside = "publish"
            try:
                head = publish(job, sink, plan, main_head, staged_head, **options)
            finally:
                injector.inside = None
            _emit("PHASE", "published", job.job, plan.barrier, head)
            injector.hit("after-publish", job.job, head)
            return head

        # SqlCatalog writes the new metadata file itself, then swaps the row: "during" is between the two.
        # A REST catalog does both on the server, inside one request: "during" is then the commit begun and
        # its request not sent (the commit never happens, as in the SQL case, and no file is left behind).
        write_metadata = getattr(catalog, "_write_metadata", None)  # a staticmethod; the instance attribute shadows it
        rest = write_metadata is None or type(catalog).__name__ == "RestCatalog"

        def patched_write_metadata(metadata: Any, io: Any, metadata_path: str) -> None:
            write_metadata(metadata, io, metadata_path)
            # the new metadata file exists; the catalog row still points at the old one
            injector.hit_commit("before", metadata_path)
            if injector.inside is not None:
                injector.hit(f"during-{injector.inside}", "-", metadata_path)

        commit_table = catalog.commit_table

        def patched_commit_table(table: Any, requirements: Any, updates: Any) -> Any:
            injector.commits += 1
            if rest:
                injector.hit_commit("before", REST_NOT_SENT)
                if injector.inside is not None:
                    injector.hit(f"during-{injector.inside}", "-", REST_NOT_SENT)
            response = commit_table(table, requirements, updates)
            _emit("COMMIT", injector.commits, ".".join(table.name()))
            injector.hit_commit("after", response.metadata_location)
            return response

        epoch_job_class.run_epoch = patched_run_epoch
        epoch_job_class.stage = patched_stage
        epoch_job_class.publish = patched_publish
        if not rest:
            catalog._write_metadata = patched_write_metadata
        catalog.commit_table = patched_commit_table


def worker_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run epoch jobs of the crash-injection lake (see module docstring).")
    parser.add_argument("--dir", required=True, help="lake directory: catalog.db and warehouse/")
    parser.add_argument("--job", required=True, choices=JOB_CHOICES)
    parser.add_argument("--epochs", type=int, default=100, help="at most this many epochs per job")
    point = parser.add_mutually_exclusive_group()
    point.add_argument("--crash-at", choices=CRASH_POINTS, help="SIGKILL this process there")
    point.add_argument("--pause-at", choices=CRASH_POINTS, help="SIGSTOP this process there (zombie tests)")
    parser.add_argument("--crash-after-epochs", type=int, default=0, help="arm the point only after K epochs began")
    parser.add_argument("--crash-at-commit", type=int, metavar="N",
                        help="SIGKILL this process at its N-th catalog commit (see --commit-side)")
    parser.add_argument("--commit-side", choices=("before", "after"), default="before",
                        help="before: metadata file written, catalog row not swapped; after: commit done")
    parser.add_argument("--upper", action="store_true",
                        help="word-count's edited definition: words counted case-insensitively (a new generation)")
    args = parser.parse_args(argv)

    from consistent_catalog import ConsistentCatalog
    from consistent_catalog.demo import count_words, histogram
    from consistent_catalog.epoch import EpochJob
    from consistent_catalog.exceptions import FencedError

    _emit("STARTED", os.getpid())  # imports done: from here on every instant is worth a kill

    transforms = {"word-count": count_upper_words if args.upper else count_words, "count-histogram": histogram,
                  "copy": copy_increment}
    cc = ConsistentCatalog(open_catalog(args.dir))
    _Injector(args.crash_at or args.pause_at, pause=args.pause_at is not None, after_epochs=args.crash_after_epochs,
              commit=args.crash_at_commit, commit_side=args.commit_side).install(EpochJob, cc.catalog)
    names = list(JOBS) if args.job == "all" else [args.job]
    jobs = []
    for name in names:
        source, sink, mode = JOBS[name]
        jobs.append(cc.job(name, sources=[source], sinks=[sink], transform=transforms[name], mode=mode, takeover=True))
    try:
        for job in jobs:
            _emit("PHASE", "register", job.job)
            job.register()
        for job in jobs:
            for result in job.run_until_caught_up(max_epochs=args.epochs):
                for sink, action in result.actions.items():
                    _emit("EPOCH", job.job, result.barrier, sink, action, result.snapshots.get(sink))
        _emit("PHASE", "unregister", "-")
        for job in jobs:
            job.unregister()
    except FencedError as exc:
        _emit("FENCED", " ".join(str(exc).split()))
        return EXIT_FENCED
    _emit("DONE")
    return 0



if __name__ == "__main__":
    sys.exit(worker_main())
