"""A root and a derived table in one streaming query (issue 32; protocol §5.7, §5.10): the root ``orders`` read as
appends and the derived ``tiers`` read as its changes end every micro-batch at one barrier ``T``; a changes stream
feeding a streaming epoch job in complete output mode publishes, per micro-batch, the epoch of ``T``.

One local[2] session serves the module. ``orders`` is fed by ``cc.ingest`` and ``tiers`` is rewritten by every epoch
of a pyiceberg overwrite job (each customer's tier from its total), both driven from a thread while the query runs,
so the micro-batches interleave with ingests and epochs (two ingests before one epoch on purpose). The two sources
are one query as a union tagged with its source, not a stream-stream join: Spark's join has no retraction, so it
would join ``UPDATE_BEFORE`` and ``DELETE`` rows as facts, and what a micro-batch holds per source would no longer
be visible (the join of two append streams is tested in test_streaming.py). Every expectation comes from pyiceberg:
``snap(t, T)`` recounted from the barrier tags along ``main`` and scanned whole, the rows' barriers from the rounds
the test ingested; the micro-batches' barriers are Spark's own record of the query's offsets.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any, Callable

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from tests.harness.lake import spark_on_sqlite
from tests.spark.test_streaming_changes import applied, committed, content, offsets, snap_id
from tests.spark.test_streaming_update import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ORDERS = pa.schema([pa.field("order_id", pa.int64(), nullable=False), pa.field("customer", pa.string(), nullable=False),
                    pa.field("amount", pa.int64(), nullable=False)])
TIERS = Schema(NestedField(1, "customer", StringType(), required=True), NestedField(2, "tier", StringType(), required=False),
               identifier_field_ids=[1])
TIER_ROWS = pa.schema([pa.field("customer", pa.string(), nullable=False), pa.field("tier", pa.string())])
SIZES = Schema(NestedField(1, "tier", StringType(), required=False), NestedField(2, "n", LongType(), required=False))

# (customer, amount) per round; order_id = 100 * round + position, so every order names the ingest that carried it.
# Tiers move up as totals grow (bronze < 10 <= silver < 50 <= gold); round 4 moves the last bronze customer up.
ROUNDS = [
    [("a", 5), ("b", 5), ("c", 30)],
    [("a", 10), ("d", 3)],
    [("b", 60), ("e", 1)],
    [("c", 40), ("d", 10)],
    [("e", 20), ("a", 40)],
]
EPOCH_AFTER = {0, 1, 3, 4}  # no epoch after round 2: round 3's epoch covers two ingests
CAUGHT_UP_AFTER = {0, 3}  # the driver waits for the query to reach these epochs' barriers, races it after the others


def tier(total: int) -> str:
    return "bronze" if total < 10 else "silver" if total < 50 else "gold"


def tiers_of(orders: pa.Table) -> pa.Table:
    """The tiers job's transform: each customer's tier from the total of its orders."""
    totals: Counter = Counter()
    for row in orders.to_pylist():
        totals[row["customer"]] += row["amount"]
    return pa.Table.from_pylist([{"customer": c, "tier": tier(t)} for c, t in sorted(totals.items())], schema=TIER_ROWS)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-streaming-join")
    for catalog, spark in spark_on_sqlite(root, "test-streaming-join"):
        yield root, catalog, spark


@pytest.fixture(scope="module")
def run(env) -> SimpleNamespace:
    """Both queries over one lake, while a thread ingests the rounds and runs the tiers epochs (one drive serves the
    two tests): the union of ``orders`` and ``tiers``' changes into ``foreachBatch``, and ``tiers``' changes counted
    per tier into ``tier_sizes`` in complete output mode with ``consistent.job``."""
    from pyspark.sql import functions as F

    root, catalog, spark = env
    cc = ConsistentCatalog(catalog)
    orders, tiers, sizes = "join.orders", "join.tiers", "join.tier_sizes"
    catalog.create_namespace("join")
    catalog.create_table(orders, schema=ORDERS)
    catalog.create_table(tiers, schema=TIERS)
    catalog.create_table(sizes, schema=SIZES)
    job = cc.job("join-tiers", sources=[orders], sinks=[tiers], mode="overwrite",
                 transform=lambda ctx: tiers_of(ctx.read(orders)))

    def stream(table: str, changes: bool = False) -> Any:
        reader = spark.readStream.option("consistent.waitFor", "200ms")
        return (reader.option("consistent.read", "changes") if changes else reader).table(f"lake_consistent.{table}")

    order_rows = stream(orders).select(
        F.lit("orders").alias("source"), F.to_json(F.struct("order_id", "customer", "amount")).alias("row"),
        F.lit("INSERT").alias("_change_type"), F.lit(None).cast("long").alias("_barrier"))
    tier_changes = stream(tiers, changes=True).select(
        F.lit("tiers").alias("source"), F.to_json(F.struct("customer", "tier")).alias("row"), "_change_type", "_barrier")
    signed = F.when(F.col("_change_type").isin("INSERT", "UPDATE_AFTER"), 1).otherwise(-1)
    sizes_frame = stream(tiers, changes=True).groupBy("tier").agg(F.sum(signed).cast("long").alias("n"))
    seen: dict[int, list[dict]] = {}

    def collect(batch, batch_id):
        assert batch_id not in seen, f"micro-batch {batch_id} delivered twice"
        seen[batch_id] = [r.asDict() for r in batch.collect()]

    checkpoint = root / "chk-union"

    def reached(barrier: int) -> bool:
        """Both queries committed their micro-batch at ``barrier``: Spark's commit log, the sink's watermark."""
        done = offsets(checkpoint) if (checkpoint / "offsets").exists() else {}
        newest = max(committed(checkpoint), default=None)
        return (newest in done and all(o["barrier"] == barrier for o in done[newest])
                and cc.store.state(sizes).watermark() == barrier)

    with job:
        union = (order_rows.unionByName(tier_changes).writeStream.foreachBatch(collect)
                 .option("checkpointLocation", str(checkpoint)).trigger(processingTime="0.3 seconds").start())
        counting = (sizes_frame.writeStream.outputMode("complete").option("checkpointLocation", str(root / "chk-sizes"))
                    .option("consistent.job", "join-sizes").trigger(processingTime="0.3 seconds")
                    .toTable(f"lake_consistent.{sizes}"))
        try:
            driver = Driver(cc, orders, tiers, job, reached)
            driver.start()
            driver.finish()
            wait_for(lambda: reached(driver.epochs[-1]), what="both queries at the last epoch's barrier")
        finally:
            union.stop()
            counting.stop()
    assert union.exception() is None and counting.exception() is None
    return SimpleNamespace(cc=cc, orders=orders, tiers=tiers, sizes=sizes, driver=driver, seen=seen,
                           checkpoint=checkpoint)


class Driver(threading.Thread):
    """Ingests the rounds into ``orders`` and runs the tiers epochs while the queries run; records the barriers."""

    def __init__(self, cc: ConsistentCatalog, orders: str, tiers: str, job: Any, reached: Callable[[int], bool],
                 pause: float = 0.3):
        super().__init__(daemon=True)
        self.cc, self.orders, self.tiers, self.job, self.reached, self.pause = cc, orders, tiers, job, reached, pause
        self.ingested: list[int] = []  # the barrier of each round's ingest
        self.epochs: list[int] = []  # the barrier of each tiers epoch
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for number, batch in enumerate(ROUNDS):
                data = pa.Table.from_pylist([{"order_id": 100 * number + i, "customer": c, "amount": a}
                                             for i, (c, a) in enumerate(batch)], schema=ORDERS)
                self.ingested.append(self.cc.ingest(self.orders, data, key=f"round-{number}").barrier)
                time.sleep(self.pause)
                if number in EPOCH_AFTER:
                    self.job.run_epoch()
                    self.epochs.append(self.cc.store.state(self.tiers).watermark())
                    if number in CAUGHT_UP_AFTER:  # a first micro-batch takes seconds: pace the rounds on the queries
                        wait_for(lambda: self.reached(self.epochs[-1]), what=f"the queries at round {number}'s epoch")
                    else:
                        time.sleep(self.pause)
        except BaseException as error:  # noqa: BLE001 - re-raised by finish() in the test's thread
            self.error = error

    def finish(self) -> None:
        self.join(180)
        assert not self.is_alive(), "the driver did not finish"
        if self.error is not None:
            raise self.error


def main_chain(table: Any) -> list[Any]:
    out, snapshot = [], table.metadata.snapshot_by_name("main")
    while snapshot is not None:
        out.append(snapshot)
        snapshot = table.metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return out[::-1]


def test_a_query_over_a_root_and_a_derived_tables_changes_never_mixes_barriers(run):
    cc, orders, tiers, driver, seen, checkpoint = run.cc, run.orders, run.tiers, run.driver, run.seen, run.checkpoint
    recorded = offsets(checkpoint)
    assert sorted(seen) == sorted(recorded) == list(range(len(recorded)))
    tables = {name: cc.catalog.load_table(name) for name in (orders, tiers)}
    round_barrier = dict(enumerate(driver.ingested))
    previous: int | None = None
    state: Counter = Counter()
    orders_so_far: Counter = Counter()
    ends_with_data = []
    kinds: Counter = Counter()
    for batch_id in sorted(recorded):
        ends = recorded[batch_id]  # Spark's order of the sources: orders, then tiers
        barriers = {o["barrier"] for o in ends}
        assert len(barriers) == 1, f"micro-batch {batch_id} mixes barriers: {ends}"
        (barrier,) = barriers
        if barrier is None:  # a micro-batch before any barrier (the query started before tiers' first epoch): empty
            assert previous is None and seen[batch_id] == [] and {o["snapshot"] for o in ends} == {None}, batch_id
            continue
        # the query's barrier is one the derived table is complete at: one of its epochs, never a root's ingest alone
        assert barrier in driver.epochs, (batch_id, barrier, driver.epochs)
        assert [o["snapshot"] for o in ends] == [snap_id(tables[orders], barrier), snap_id(tables[tiers], barrier)]
        batch = seen[batch_id]
        new_orders = [json.loads(r["row"]) for r in batch if r["source"] == "orders"]
        changes = [json.loads(r["row"]) | {"_change_type": r["_change_type"], "_barrier": r["_barrier"]}
                   for r in batch if r["source"] == "tiers"]
        for row in new_orders:  # each order's barrier is its round's ingest: after the previous T, at most this T
            ingested = round_barrier[row["order_id"] // 100]
            assert (previous is None or ingested > previous) and ingested <= barrier, (batch_id, row, previous, barrier)
        for change in changes:
            assert change["_barrier"] <= barrier and (previous is None or change["_barrier"] > previous), (batch_id, change)
        orders_so_far.update((r["order_id"], r["customer"], r["amount"]) for r in new_orders)
        assert orders_so_far == content(tables[orders], barrier, ["order_id", "customer", "amount"]), batch_id
        state = applied(state, changes, ["customer", "tier"])
        assert state == content(tables[tiers], barrier, ["customer", "tier"]), batch_id
        if new_orders or changes:
            ends_with_data.append(barrier)
        kinds.update(c["_change_type"] for c in changes)
        previous = barrier
    assert previous == driver.epochs[-1]
    assert set(kinds) == {"INSERT", "UPDATE_BEFORE", "UPDATE_AFTER"}, kinds  # paired by tiers' identifier field
    assert len(ends_with_data) >= 3, f"the micro-batches did not interleave with the epochs: {ends_with_data}"
    # rounds 2 and 3 were ingested before one epoch: no micro-batch ends at round 2's barrier, one holds both rounds
    assert driver.ingested[2] not in {o["barrier"] for ends in recorded.values() for o in ends}
    both = [b for b in seen.values() if {json.loads(r["row"])["order_id"] // 100 for r in b if r["source"] == "orders"}
            >= {2, 3}]
    assert len(both) == 1


def test_a_changes_stream_feeds_a_complete_mode_epoch_job(run):
    cc, tiers, sizes, driver = run.cc, run.tiers, run.sizes, run.driver
    tiers_table, sizes_table = cc.catalog.load_table(tiers), cc.catalog.load_table(sizes)
    epochs = []
    for snapshot in main_chain(sizes_table):
        summary = snapshot.summary.additional_properties
        if P.BARRIER in summary and P.SOURCES in summary:
            epochs.append((int(summary[P.BARRIER]), json.loads(summary[P.SOURCES]), snapshot.snapshot_id))
    assert len({b for b, _, _ in epochs}) == len(epochs) >= 3, epochs  # one epoch per barrier, several of them
    assert [b for b, _, _ in epochs] == sorted(b for b, _, _ in epochs) and epochs[-1][0] == driver.epochs[-1]
    groups_so_far: set[str] = set()
    for barrier, sources, snapshot_id in epochs:
        assert barrier in driver.epochs
        assert sources[tiers] == snap_id(tiers_table, barrier)  # the epoch read snap(tiers, T)
        expected = Counter(t for _, t in content(tiers_table, barrier, ["customer", "tier"]).elements())
        output = {r["tier"]: r["n"] for r in sizes_table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()}
        assert {t: n for t, n in output.items() if n != 0} == dict(expected), barrier
        # a group at 0 is one whose members all moved away: it held rows at an earlier barrier
        assert {t for t, n in output.items() if n == 0} <= groups_so_far, barrier
        groups_so_far |= set(output)
    assert output.get("bronze") == 0  # round 4 emptied bronze: complete mode keeps the group, at 0
