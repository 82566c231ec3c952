"""Child-process side of ``tests/integration/test_fencing_processes.py``: job instances as real separate processes.

Started with ``multiprocessing``'s *spawn* context, so each instance is a fresh interpreter with its
own pyiceberg catalog connection and its own in-memory state (plan, staged ids, lease). Nothing here
patches ``src/``; the only instrumentation is :func:`_pause_inside_commit`, which blocks this
process inside pyiceberg's ``SqlCatalog.commit_table`` (after the requirements were validated and
the new metadata file written, before the ``UPDATE ... WHERE metadata_location = ...`` swap).

Two entry points:

- :func:`command_worker` executes commands sent by the test one at a time (``register``,
  ``run_epoch``, ``hold_epoch`` = plan + transform + stage and keep them, ``publish_held``,
  ``stage_held``, ...), so the test decides exactly when a stalled instance wakes up.
- :func:`race_worker` takes part in ``rounds`` registration races against a twin started at the
  same moment (a ``multiprocessing.Barrier``), and reports how each round went.

Every outcome is a plain dict (picklable); a refusal is described by :func:`describe_error`, which
also tells where the refusal came from (see ``refusal_kind``).
"""

from __future__ import annotations

import random
import time
import traceback
from pathlib import Path
from typing import Any

from tests.harness.transforms import copy_increment

WORDS, COUNTS, COPY = "demo.words", "demo.word_counts", "demo.words_copy"


def open_cc(lake: str | Path | dict[str, str]) -> Any:
    """The worker's own catalog: ``lake`` is a lake directory (SQLite ``catalog.db`` + ``warehouse/``) or
    pyiceberg catalog properties (``{"type": "rest", "uri": ..., "warehouse": ...}``) for ``load_catalog``."""
    from consistent_catalog import ConsistentCatalog
    from tests.harness.lake import open_catalog

    return ConsistentCatalog(open_catalog(lake))


def make_job(cc: Any, job: str, *, lease_ms: int, takeover: bool) -> Any:
    from consistent_catalog.demo import count_words

    if job == "word-count":
        return cc.job(job, sources=[WORDS], sinks=[COUNTS], transform=count_words, mode="overwrite",
                      lease_ms=lease_ms, takeover=takeover)
    if job == "copy":
        return cc.job(job, sources=[WORDS], sinks=[COPY], transform=copy_increment, mode="append",
                      lease_ms=lease_ms, takeover=takeover)
    raise ValueError(f"unknown job {job!r}")


def _frames(exc: BaseException | None) -> list[str]:
    return [f.name for f in traceback.extract_tb(exc.__traceback__)] if exc is not None else []


def _commit_error_kind(exc: BaseException) -> str:
    """Where the ``CommitFailedException`` behind a FencedError / OwnershipError was raised (by its stack)."""
    frames = _frames(exc)
    if "commit_table" in frames and "_handle_non_200_response" in frames:
        # a REST catalog answered 409: the server validated the requirements against the metadata its
        # compare-and-swap replaces (a lost swap is retried there and re-validated), so from the client
        # every refusal inside the commit is a requirement refusal; there is no separate swap refusal
        return "catalog-requirement"
    if "commit_table" in frames:
        # inside the catalog's commit: the requirement failed validation there, or the CAS UPDATE matched no row
        return "catalog-requirement" if "validate" in frames else "catalog-swap"
    if "validate" in frames:
        return "client-precheck"  # Transaction._stage validated the requirement against the loaded metadata
    return "unknown-commit-error"


def refusal_kind(exc: BaseException) -> str:
    """Where a refusal came from, from the exception chain (not from message wording).

    - ``catalog-requirement``: ``SqlCatalog.commit_table`` validated ``AssertConsistentState`` against
      the current metadata and refused (inside the compare-and-swap);
    - ``catalog-swap``: inside ``commit_table``, the requirement held when validated but the metadata
      pointer moved before the swap: ``UPDATE ... WHERE metadata_location = <validated>`` matched no row;
    - ``client-precheck``: a pyiceberg data write validated the requirement against the metadata it had
      just loaded (``Transaction._stage``) and gave up before writing anything; the same requirement
      also travels into ``commit_table``;
    - ``plan-ownership-check``: ``EpochJob.plan`` saw the lease held by another instance (a read, no
      commit). When that check ran *because* a write was refused, the kind is the write's kind +
      ``|taken-over``;
    - ``registration-live-instance`` / ``registration-other-job``: ``register_job`` saw a live lease;
    - ``registration-lost-race``: the registration commit was refused (both read "no live lease").
    """
    from consistent_catalog.exceptions import FencedError, OwnershipError

    message = str(exc)
    inner = exc.__context__
    if isinstance(exc, OwnershipError):
        if "won the race" in message:
            cause = inner.__context__ if isinstance(inner, FencedError) else inner
            return "registration-lost-race:" + (_commit_error_kind(cause) if cause is not None else "unknown")
        if "another live instance" in message:
            return "registration-live-instance"
        return "registration-other-job"
    if isinstance(exc, FencedError):
        if "taken over" in message:
            if isinstance(inner, FencedError):
                return refusal_kind(inner) + "|taken-over"
            return "plan-ownership-check"
        if inner is not None and type(inner).__name__ == "CommitFailedException":
            return _commit_error_kind(inner)
    return "other"


def describe_error(exc: BaseException) -> dict[str, Any]:
    """A picklable description of an error, including the stack of the catalog error it wraps."""
    inner = exc.__context__
    return {
        "error": type(exc).__name__,
        "message": str(exc),
        "kind": refusal_kind(exc),
        "frames": _frames(exc),
        "inner_error": type(inner).__name__ if inner is not None else None,
        "inner_message": str(inner) if inner is not None else None,
        # for FencedError wrapping CommitFailedException: the frames where the catalog refused
        "inner_frames": _frames(inner),
    }


class _PauseInsideCommit:
    """Block this process in ``SqlCatalog.commit_table`` right before the compare-and-swap ``UPDATE``.

    ``_write_metadata`` is called after the requirements were validated against the loaded metadata
    and before the catalog row is swapped, so pausing there makes the zombie's commit *valid when
    checked* and only then lets another instance move the table.
    """

    def __init__(self, results: Any, resume: Any) -> None:
        from pyiceberg.catalog.sql import SqlCatalog  # SQLite lakes only: a REST server swaps inside its request

        self.results, self.resume = results, resume
        self.original = SqlCatalog._write_metadata
        self.armed = False
        pauser = self

        def write_metadata(*args: Any, **kwargs: Any) -> Any:  # a staticmethod in pyiceberg
            out = pauser.original(*args, **kwargs)
            if pauser.armed:
                pauser.armed = False
                pauser.results.put(("paused-in-commit", {"pid": __import__("os").getpid()}))
                if not pauser.resume.wait(60):
                    raise RuntimeError("never resumed")
            return out

        SqlCatalog._write_metadata = staticmethod(write_metadata)  # type: ignore[method-assign]


def command_worker(directory: str | dict[str, str], name: str, commands: Any, results: Any, resume: Any = None) -> None:
    """Run commands sent by the test; reply ``(command, outcome)`` for each. Stops on ``exit``."""
    from consistent_catalog.exceptions import ConsistentCatalogError

    cc = open_cc(directory)
    pauser = _PauseInsideCommit(results, resume) if resume is not None else None
    job: Any = None
    held: dict[str, Any] = {}
    results.put(("ready", {"name": name}))
    while True:
        command, args = commands.get()
        if command == "exit":
            results.put(("exit", {}))
            return
        started = time.monotonic()
        try:
            if command == "register":
                job = make_job(cc, args["job"], lease_ms=args["lease_ms"], takeover=args.get("takeover", False))
                lease = job.register()
                outcome: dict[str, Any] = {"instance": lease.instance, "until": lease.until_ms}
            elif command == "renew":
                job.lease = cc.renew_lease(job.lease, args["lease_ms"])
                outcome = {"until": job.lease.until_ms}
            elif command == "run_epoch":
                result = job.run_epoch()
                outcome = {"barrier": result.barrier, "actions": dict(result.actions), "snapshots": dict(result.snapshots)}
            elif command == "hold_epoch":
                # plan + transform + stage, then keep everything and stall (the caller decides when we wake up)
                plan = job.plan()
                data = job.run_transform(plan) if plan.needs_transform else {}
                staged = {sink: job.stage(sink, plan, data.get(sink)) for sink in plan.pending}
                held = {"plan": plan, "staged": staged, "data": data}
                outcome = {
                    "barrier": plan.barrier,
                    "staged": {s: {"base": st.base, "head": st.head, "rows": st.rows} for s, st in staged.items()},
                }
            elif command == "publish_held":
                if args.get("pause_inside_commit"):
                    assert pauser is not None
                    pauser.armed = True
                outcome = {"published": {s: job.publish(s, held["plan"], st.base, st.head) for s, st in held["staged"].items()}}
            elif command == "stage_held":
                plan = held["plan"]
                outcome = {"staged": {s: tuple(job.stage(s, plan, held["data"].get(s))) for s in held["staged"]}}
            elif command == "unregister":
                job.unregister()
                outcome = {}
            else:
                raise ValueError(f"unknown command {command!r}")
            outcome["ok"] = True
        except ConsistentCatalogError as exc:
            outcome = {"ok": False, **describe_error(exc)}
        except Exception as exc:  # not a refusal: reported to the test (which fails on it), not a silent exit
            outcome = {"ok": False, "error": type(exc).__name__, "kind": "unexpected",
                       "message": " ".join(str(exc).split())[:1500], "traceback": traceback.format_exc()[-3000:]}
        outcome["seconds"] = round(time.monotonic() - started, 3)
        results.put((command, outcome))


def race_worker(
    directory: str | dict[str, str],
    name: str,
    job_id: str,
    takeover: bool,
    rounds: int,
    start: Any,
    finished: Any,
    results: Any,
    seed: int,
    stagger: tuple[float, ...] = (),
) -> None:
    """Race a twin for ``rounds`` rounds: both call ``register()`` the moment ``start`` releases them
    (this one ``stagger[round]`` seconds later, when given, so a takeover can land mid-epoch).

    A winner runs epochs until caught up; every instance that still holds the lease when both have
    finished the round (``finished``) unregisters, so the next round starts from a free sink.
    """
    try:
        _race(directory, name, job_id, takeover, rounds, start, finished, results, seed, stagger)
    except Exception:  # not a refusal: tell the test (it fails with this) instead of dying silently
        results.put(("error", {"name": name, "traceback": traceback.format_exc()[-3000:]}))
        start.abort()
        finished.abort()


def _race(directory: Any, name: str, job_id: str, takeover: bool, rounds: int, start: Any, finished: Any,
          results: Any, seed: int, stagger: tuple[float, ...]) -> None:
    from consistent_catalog.exceptions import FencedError, OwnershipError

    cc = open_cc(directory)
    rng = random.Random(seed)
    for round_no in range(rounds):
        job = make_job(cc, job_id, lease_ms=60_000, takeover=takeover)
        outcome: dict[str, Any] = {"name": name, "round": round_no}
        start.wait(60)
        if round_no < len(stagger) and stagger[round_no] > 0:
            time.sleep(stagger[round_no])
        t0 = time.time()
        try:
            lease = job.register()
        except OwnershipError as exc:
            outcome.update(registered=False, **describe_error(exc))
        else:
            outcome.update(registered=True, instance=lease.instance, registered_at=t0)
            if takeover:
                time.sleep(rng.uniform(0.0, 0.15))  # vary how the two instances' epochs interleave
            epochs: list[dict[str, Any]] = []
            try:
                for _ in range(10):
                    result = job.run_epoch()
                    epochs.append({"barrier": result.barrier, "actions": dict(result.actions)})
                    if not result.did_work:
                        break
            except FencedError as exc:
                outcome.update(fenced=True, **describe_error(exc))
            else:
                outcome["fenced"] = False
            outcome["epochs"] = epochs
            outcome["seconds"] = round(time.time() - t0, 3)
        finished.wait(60)
        if job.lease is not None:
            job.unregister()  # a no-op when the lease was taken over meanwhile
        results.put(("round", outcome))
