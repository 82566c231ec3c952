"""Example DAGs: gate a report on a fresh consistent cut, and run a DAG once per new cut (issue 48).

Put this file in Airflow's dags folder; the catalog comes from the Airflow connection ``lake`` (type
``consistent_catalog``, its extra the pyiceberg properties: ``{"uri": "sqlite:////data/lake/catalog.db",
"warehouse": "file:///data/lake/warehouse"}``). The docs suite parses it with Airflow's DagBag.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Asset, AssetWatcher, task

from consistent_catalog.airflow import ConsistentCutAssetTrigger, ConsistentCutSensor, PinnedCut

TABLES = ["demo.words", "demo.word_counts"]

# 1. A daily report that runs on a cut at most 10 minutes old, and reads exactly that cut.
with DAG("word_report", schedule="@daily", catchup=False):
    gate = ConsistentCutSensor(
        task_id="wait_for_cut", tables=TABLES, catalog_conn_id="lake", fresh_within="10m",
        poke_interval=30, timeout=timedelta(hours=2).total_seconds(),  # deferred: no worker slot while it polls
    )

    @task
    def report(cut: dict) -> int:
        from consistent_catalog.airflow import ConsistentCatalogHook

        pinned = PinnedCut.of(cut)  # the cut that woke this run, even if a later epoch landed since
        counts = pinned.scan(ConsistentCatalogHook("lake").get_catalog(), "demo.word_counts").to_arrow()
        return counts.num_rows

    report(gate.output)

# 2. A DAG run per new consistent cut: the watcher's trigger polls the cut, the cut is the asset event's extra.
word_counts_cut = Asset(
    "word_counts_cut",
    uri="consistent-catalog://lake/demo.word_counts",
    watchers=[AssetWatcher(name="new_cut", trigger=ConsistentCutAssetTrigger(
        TABLES, catalog_conn_id="lake", interval_ms=60_000))],
)

with DAG("on_each_cut", schedule=[word_counts_cut]):

    @task
    def spark_sql(triggering_asset_events=None) -> list[str]:
        (event,) = triggering_asset_events[word_counts_cut][-1:]
        return PinnedCut.of(event).spark_sql("lake")  # CREATE ... VIEW ... VERSION AS OF <snapshot id>

    spark_sql()
