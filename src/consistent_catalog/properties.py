"""Every metadata key consistent-catalog reads or writes (docs/protocol.md §2).

These names are a public contract: other engines and scripts read them, so they never change.
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "consistent."

# Snapshot summary properties, on every snapshot an epoch commits.
BARRIER: Final = "consistent.barrier"
"""Barrier of the snapshot: integer milliseconds since the Unix epoch (UTC), as a decimal string."""
JOB: Final = "consistent.job"
"""Id of the job that produced the snapshot (summary) / that owns the table (table property)."""
ATTEMPT: Final = "consistent.attempt"
"""Summary: random id of one staging attempt. Added to the protocol (§2, §11): lets a replay tell one finished staged
epoch from two writers' interleaved copies of it (see docs/protocol.md)."""
SOURCES: Final = "consistent.sources"
"""Summary: compact JSON object ``{"ns.src": snapshot_id}``. Table property: JSON array of source tables."""
INGEST_KEY: Final = "consistent.ingest-key"
"""Summary of a root snapshot: the idempotency key of the ingest that wrote it (one key lands once)."""
DEFINITION: Final = "consistent.definition"
"""Summary of a staged snapshot: ``<kind>:<16 hex>``, the fingerprint of the job definition that computed the epoch
(protocol §6.10); a changed one makes the job's next epoch start a new generation."""
REGENERATE: Final = "consistent.regenerate"
"""Summary of every snapshot of an epoch that starts a new generation of its sink (protocol §6.10): why the whole output
was recomputed (one of ``REGENERATE_REASONS``)."""
REGENERATE_REASONS: Final = ("definition", "schema", "rebuild", "upstream")

# Table properties.
LEASE_UNTIL: Final = "consistent.lease-until"
"""Owner lease expiry, ms since the epoch; an owner that stops renewing is a zombie suspect."""
LEASE_HOLDER: Final = "consistent.lease-holder"
"""Id of the job *instance* holding the lease. Added to the protocol (§2, §11): added so that a restarted instance of
the same job fences out its predecessor (see docs/protocol.md)."""
WATERMARK: Final = "consistent.watermark"
"""Barrier up to which the table is complete although no newer snapshot carries it."""
WATERMARK_SNAPSHOT: Final = "consistent.watermark-snapshot"
"""Id of main's head when the watermark was set (``-1``: the table was empty). Added to the protocol (§2, §11): every
later snapshot lands above the watermark, so a completed barrier never changes (docs/protocol.md)."""
BARRIER_OVERRIDES: Final = "consistent.barrier-overrides"
"""JSON object ``{"<snapshot id>": barrier}``: effective barriers that an earlier watermark raised,
kept when the watermark moves on so that they never drop back (see docs/protocol.md)."""
LEASE_HOLDER_INFO: Final = "consistent.lease-holder-info"
"""Where the lease holder runs: compact JSON ``{"app": <Spark application id>, "host": ..., "pid": ..., "since": ms}``
(``app`` only for Spark writers), written with the lease, removed with it, so that an operator can tell whether a
holder is really dead before a takeover (protocol §6.2)."""
REVISION: Final = "consistent.revision"
"""Integer bumped each time a revision rolls the table back, and by every generation switch and abandon (§6.10)."""
PREVIOUS: Final = "consistent.previous"
"""Compact JSON ``{"snapshot": id, "watermark": barrier|null, "watermark-snapshot": id|-1|null}``: the previous
generation of a table (protocol §6.10), beside the ``consistent-previous`` branch at that snapshot."""

CLOCK_SKEW: Final = "consistent.clock-skew-ms"
"""Table property: how far ahead of the writer's clock a barrier may lie (default ``DEFAULT_CLOCK_SKEW_MS``)."""
IDLE_AFTER: Final = "consistent.idle-after-ms"
"""Root table property: the root is an idle source; its watermark may be advanced to now minus this."""
DEFAULT_CLOCK_SKEW_MS: Final = 5 * 60 * 1000

# Refs.
MAIN_BRANCH: Final = "main"
STAGED_BRANCH: Final = "consistent-staged"
PREVIOUS_BRANCH: Final = "consistent-previous"
"""Branch at main's head before a generation switch (protocol §6.10): read while tables downstream have not switched."""
FENCE_BRANCH: Final = "consistent-fence"
"""The fence ref (docs/protocol.md §6): moved to a new, empty snapshot by every commit that changes ownership,
revises the table, advances an idle root, adds or removes tags or expires snapshots. Every other commit
asserts it (``assert-ref-snapshot-id``) at the value its writer planned with, so the catalog's own
compare-and-swap refuses it after any such change."""
TAG_PREFIX: Final = "consistent-"

TABLE_PROPERTIES: Final = (
    JOB, SOURCES, LEASE_UNTIL, LEASE_HOLDER, LEASE_HOLDER_INFO, WATERMARK, WATERMARK_SNAPSHOT, BARRIER_OVERRIDES, REVISION, CLOCK_SKEW,
    IDLE_AFTER, PREVIOUS,
)
NO_SNAPSHOT: Final = "-1"
SUMMARY_PROPERTIES: Final = (BARRIER, JOB, SOURCES, ATTEMPT, INGEST_KEY, DEFINITION, REGENERATE)

# The catalog probe (protocol §6.5).
CATALOG_PROBE: Final = "consistent.catalog-probe"
"""Property of the namespace ``consistent_probe``: the probe's recorded result, compact JSON
``{"version": n, "holds": bool, "failed": [capability...], "at": ms, "evidence": {capability: text}}``."""
PROBE_TOKEN: Final = "consistent.probe-token"
"""Summary of a probe's scratch snapshot: a random token read back (summary properties round-trip)."""
PROBE_BRANCH: Final = "consistent-probe"
"""Branch of a probe's scratch table: it must survive a commit to main."""

# Summary properties of the fence ref's snapshots (they hold no data and belong to no branch's history).
FENCE_REASON: Final = "consistent.fence-reason"
"""Why the fence moved: ``register``, ``unregister``, ``reassign``, ``revise``, ``advance``, ``tag``, ``expire``."""
FENCE_HOLDER: Final = "consistent.fence-holder"
"""The lease holder (job instance) after the move, when the table has one."""
FENCE_JOB: Final = "consistent.fence-job"
"""The owning job after the move, when the table has one."""
