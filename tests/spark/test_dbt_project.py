"""A dbt project of a user's shape on the consistent catalog (issue 33): ``tests/spark/dbt_shop``.

The project is not ours in shape: a seed (``payment_methods``), sources that are root tables of the catalog
(``raw.customers``, ``raw.orders``, ``raw.payments``, ingested with pyiceberg), staging models (two views, one
ephemeral: each compiled into the epochs that read it, the views' SQL recorded by their dbt run), two marts
(``orders``, and ``customers`` which reads it) with ``+materialized: epoch`` set in ``dbt_project.yml``, schema
tests, and two incremental marts (``order_status`` merged by its ``unique_key``, ``payment_log`` appended). It runs
as README's dbt section installs it: the wheel ``make dist`` builds, pip-installed with its ``[spark,dbt]`` extras
into a fresh venv outside the checkout (``dbt_venv``, built once per session with ``tests/integration/test_wheel.py``:
``tests/harness/wheel.py``), and only that venv's ``dbt`` and ``consistent-catalog`` (the recounts read with this
process's pyiceberg and DuckDB). It installs the dbt package the installed product ships (``packages.yml`` names
``consistent-catalog dbt-path``; ``dbt deps``; ``dispatch`` routes dbt's seed and freshness macros to it) and runs
with the profile README's ``consistent-catalog spark-conf --dbt-profile`` command renders. No DDL is written by hand
anywhere.

One test, invocation after invocation (each dbt invocation starts Spark: 15-60 s on a busy 2-core machine):
dbt seed (a keyed root ingest into a table made from the CSV), the sources' first load, dbt build (the seed lands
nothing; the views' SQL recorded; the tables created from the models' output schemas, the jobs registered; the
schema tests pass, those on a view too), new source data and dbt build again (the incremental marts read only the new rows: the
ranges their epochs name are those their recorded inputs give, and the appended mart holds every payment once), dbt
docs generate, dbt source
freshness (the sources' watermarks), ``orders`` edited with an error (dbt run reports it, every mart keeps serving its
rows), both epoch models edited (a column added, a type widened: schema evolution, then a new generation each, issue
43) and the incremental ``order_status`` edited (a filter: a new generation, its source read whole), dbt run
--full-refresh -s customers order_status (new generations, the incremental mart recomputed whole), and a change Iceberg cannot evolve, refused with the way out, in the same invocation as the
incremental model without the project's opt-in file and a ``table`` model (both refused up front, naming the way out). After every run that published, the cut ``consistent-
catalog resolve`` gives over the eight tables is read with pyiceberg and each mart is compared with its SQL
recomputed by DuckDB over the roots (seed included) at that cut (never the plugin's own output).

A second test kills a dbt run once two of its models published and reruns it (taking the dead instance's leases
over): nothing is computed twice (the appended incremental mart included), and the marts still equal their recounts.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import DateType, LongType, NestedField, StringType

from consistent_catalog import ConsistentCatalog
from consistent_catalog import properties as P
from tests.harness.main_epochs import main_epochs
from tests.harness.wheel import DBT_EXTRAS, Venv
from tests.spark import dbt_harness
from tests.spark.dbt_harness import DBT_TIMEOUT, DbtRun, sorted_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

PROJECT = Path(__file__).resolve().parent / "dbt_shop"
ROOTS = ("raw.customers", "raw.orders", "raw.payments", "shop.payment_methods")  # the last one: a seed
SEED_ROWS = 3
MARTS = ("shop.orders", "shop.customers", "shop.order_status", "shop.payment_log")
INCREMENTAL = ("order_status", "payment_log")  # materialized: incremental (merged by order_id; appended)
MODELS = ("orders", "customers", *INCREMENTAL)
VIEWS = ("stg_customers", "stg_orders")  # materialized: view (stg_payments is ephemeral)
NODES = ("payment_methods", *VIEWS, *MODELS)
TESTS = 8  # the schema tests: 6 on the marts, 2 on the view stg_orders

SCHEMAS = {
    "raw.customers": Schema(NestedField(1, "id", LongType()), NestedField(2, "first_name", StringType()),
                            NestedField(3, "last_name", StringType())),
    "raw.orders": Schema(NestedField(1, "id", LongType()), NestedField(2, "user_id", LongType()),
                         NestedField(3, "order_date", DateType()), NestedField(4, "status", StringType())),
    "raw.payments": Schema(NestedField(1, "id", LongType()), NestedField(2, "order_id", LongType()),
                           NestedField(3, "payment_method", StringType()), NestedField(4, "amount", LongType())),
}

# The marts' SQL over the roots, as DuckDB runs it (the staging models inlined), by version of the models.
EXPECTED_ORDERS = {
    1: """WITH paid AS (SELECT order_id, sum(amount / 100.0) AS amount
                        FROM payments JOIN payment_methods USING (payment_method) GROUP BY order_id)
          SELECT o.id AS order_id, o.user_id AS customer_id, o.order_date, o.status,
                 coalesce(p.amount, 0) AS amount
          FROM orders o LEFT JOIN paid p ON o.id = p.order_id""",
    2: """WITH paid AS (SELECT order_id, sum(amount / 100.0) AS amount, count(*) AS payments
                        FROM payments JOIN payment_methods USING (payment_method) GROUP BY order_id)
          SELECT o.id AS order_id, o.user_id AS customer_id, o.order_date, o.status,
                 coalesce(p.amount, 0) AS amount, coalesce(p.payments, 0) AS payments
          FROM orders o LEFT JOIN paid p ON o.id = p.order_id""",
}
EXPECTED_CUSTOMERS = """
    SELECT c.id AS customer_id, c.first_name, c.last_name, count(o.order_id) AS number_of_orders,
           min(o.order_date) AS first_order
    FROM customers c LEFT JOIN ({orders}) o ON c.id = o.customer_id
    GROUP BY c.id, c.first_name, c.last_name"""
EXPECTED_INCREMENTAL = {
    1: {"shop.order_status": "SELECT id AS order_id, user_id AS customer_id, order_date, status FROM orders",
        "shop.payment_log": "SELECT id AS payment_id, order_id, payment_method, amount FROM payments"},
    2: {"shop.order_status": "SELECT id AS order_id, user_id AS customer_id, order_date, status FROM orders "
                             "WHERE status <> 'returned'",
        "shop.payment_log": "SELECT id AS payment_id, order_id, payment_method, amount FROM payments"},
}

# the edited models (version 2): orders gains a column, customers' number_of_orders widens from int to bigint
ORDERS_V2 = """\
WITH paid AS (
    SELECT order_id, sum(amount) AS amount, count(*) AS payments FROM {{ ref('stg_payments') }} GROUP BY order_id
)
SELECT o.order_id, o.customer_id, o.order_date, o.status, coalesce(p.amount, 0) AS amount,
       coalesce(p.payments, 0) AS payments
FROM {{ ref('stg_orders') }} AS o LEFT JOIN paid AS p ON o.order_id = p.order_id
"""
# the incremental model order_status edited (version 2): returned orders left out, a new definition (a new generation)
ORDER_STATUS_V2 = """\
{{ config(materialized='incremental', unique_key='order_id') }}
-- each order's latest row, merged by order_id; returned orders left out
SELECT order_id, customer_id, order_date, status
FROM {{ ref('stg_orders') }}
WHERE status <> 'returned'
"""
# a model of dbt-spark's own table materialization: CREATE TABLE AS SELECT, refused up front with the way out
ORDER_TABLE = """\
{{ config(materialized='table') }}
SELECT order_id, status FROM {{ ref('orders') }}
"""
# an incremental model over a table whose epochs overwrite it: its increment is refused with the way out
ORDER_COPY = """\
{{ config(materialized='incremental', unique_key='order_id') }}
SELECT order_id, status FROM {{ ref('orders') }}
"""
CUSTOMERS_INT = "CAST(count(o.order_id) AS int) AS number_of_orders"
CUSTOMERS_BIGINT = "count(o.order_id) AS number_of_orders"


def _rows(table: str, start: int, n: int) -> pa.Table:
    """Rows ``start`` .. ``start + n - 1`` of a root: deterministic, a few orders per customer, payments per order."""
    ids = list(range(start, start + n))
    arrow_schema = SCHEMAS[table].as_arrow()
    if table == "raw.customers":
        data = {"id": ids, "first_name": [f"first{i}" for i in ids], "last_name": [f"last{i % 7}" for i in ids]}
    elif table == "raw.orders":
        data = {"id": ids, "user_id": [1 + i % 5 for i in ids],
                "order_date": [dt.date(2026, 1, 1) + dt.timedelta(days=i % 40) for i in ids],
                "status": [("placed", "shipped", "completed", "returned")[i % 4] for i in ids]}
    else:
        data = {"id": ids, "order_id": [1 + i % (n + start) // 2 for i in ids],
                "payment_method": [("card", "coupon", "bank")[i % 3] for i in ids], "amount": [100 + 37 * i for i in ids]}
    return pa.Table.from_pydict(data, schema=arrow_schema)


@dataclass
class Shop:
    root: Path
    project: Path
    profiles: Path
    catalog: SqlCatalog
    cc: ConsistentCatalog
    env: dict[str, str]
    bin: Path  # the fresh venv's bin: its dbt and consistent-catalog, nothing of this checkout


@pytest.fixture(scope="module")
def shop(dbt_venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    root = tmp_path_factory.mktemp("dbt-shop")
    (root / "warehouse").mkdir()
    uri = f"sqlite:///{root}/catalog.db"
    env = dbt_harness.environment(uri, f"file://{root}/warehouse", dbt_venv.bin)
    # README's install block, as this venv ran its pip install (the wheel in the name's place); its spark-conf
    # command renders the profile with the installed product (it creates the catalog database too)
    pip, spark_conf, dbt_path = readme_install_commands()
    assert pip == ["pip", "install", f"consistent-catalog{DBT_EXTRAS}"] and dbt_path == ["consistent-catalog", "dbt-path"]
    ours = {"sqlite:////abs/lake/catalog.db": uri, "/abs/lake/warehouse": str(root / "warehouse"),
            "jaffle_shop": "shop", "analytics": "shop", "~/.dbt/profiles.yml": str(root / "profiles" / "profiles.yml")}
    assert spark_conf[0] == "consistent-catalog" and sorted(set(spark_conf) & set(ours)) == sorted(ours), spark_conf
    subprocess.run([str(dbt_venv.bin / "consistent-catalog"), *(ours.get(arg, arg) for arg in spark_conf[1:])],
                   check=True, capture_output=True, timeout=120, env=env, cwd=root)

    catalog = SqlCatalog("lake", uri=uri, warehouse=f"file://{root}/warehouse")
    catalog.create_namespace("raw")
    for table, schema in SCHEMAS.items():
        catalog.create_table(table, schema=schema)
    cc = ConsistentCatalog(catalog)

    # the project, its packages.yml naming `consistent-catalog dbt-path`, installed with dbt deps
    project = dbt_harness.copy_project(PROJECT, root / "shop", env=env, bin_dir=dbt_venv.bin)
    yield Shop(root, project, root / "profiles", catalog, cc, env, dbt_venv.bin)


def readme_install_commands() -> list[list[str]]:
    """README's dbt install block as commands (its continuation lines joined, comments dropped)."""
    from tests.docs.test_snippets import parse_blocks

    (block,) = [b.code for b in parse_blocks(PROJECT.parents[2] / "README.md")
                if "pip install 'consistent-catalog" in b.code and "consistent-catalog dbt-path" in b.code]
    lines = [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line]


def dbt(shop: Shop, *args: str, profiles: Path | None = None) -> DbtRun:
    return dbt_harness.dbt(shop.project, *args, profiles=profiles or shop.profiles, cwd=shop.root, env=shop.env,
                           bin_dir=shop.bin)


# --- recounts --------------------------------------------------------------------------------------------------
def resolve(shop: Shop) -> dict:
    return dbt_harness.resolve(shop.env, (*ROOTS, *MARTS), shop.bin)


def check_cut(shop: Shop, version: int) -> dict:
    """At the resolved cut, each mart equals its SQL recomputed by DuckDB over the roots at that cut."""
    import duckdb

    cut = resolve(shop)
    ids = {table: part["snapshot_id"] for table, part in cut["tables"].items()}
    assert {cut["tables"][mart]["barrier"] for mart in MARTS} == {cut["barrier"]}, cut
    scans = {table: shop.catalog.load_table(table).scan(snapshot_id=ids[table]).to_arrow() for table in (*ROOTS, *MARTS)}
    connection = duckdb.connect()
    for table in ROOTS:
        connection.register(table.split(".")[1], scans[table])
    orders_sql = EXPECTED_ORDERS[version]
    expected = {
        "shop.orders": connection.sql(orders_sql).fetch_arrow_table(),
        "shop.customers": connection.sql(EXPECTED_CUSTOMERS.format(orders=orders_sql)).fetch_arrow_table(),
        **{mart: connection.sql(sql).fetch_arrow_table() for mart, sql in EXPECTED_INCREMENTAL[version].items()},
    }
    for mart in MARTS:
        columns = expected[mart].column_names
        assert sorted(scans[mart].column_names) == sorted(columns), (mart, scans[mart].schema, columns)
        assert sorted_rows(scans[mart], columns) == sorted_rows(expected[mart], columns), mart
    assert scans["shop.orders"].num_rows == scans["raw.orders"].num_rows > 0
    assert scans["shop.payment_log"].num_rows == scans["raw.payments"].num_rows  # every payment once
    return cut


def recorded_inputs(shop: Shop, table: str) -> list[dict[str, int | None]]:
    """The inputs (``consistent.sources``) each epoch on ``table``'s main recorded, oldest first."""
    metadata = shop.catalog.load_table(table).metadata
    return [json.loads(metadata.snapshot_by_id(e.head).summary.additional_properties[P.SOURCES])
            for e in main_epochs(metadata)[0]]


def epochs(shop: Shop, table: str) -> int:
    return len(main_epochs(shop.catalog.load_table(table).metadata)[0])


def heads(shop: Shop) -> dict[str, int | None]:
    found = {}
    for mart in MARTS:
        main = shop.catalog.load_table(mart).metadata.snapshot_by_name("main")
        found[mart] = None if main is None else main.snapshot_id
    return found


def seed_loads(shop: Shop) -> int:
    """The seed table's snapshots on main that landed rows (its keyed ingests), after checking its rows."""
    table = shop.catalog.load_table("shop.payment_methods")
    rows = table.scan().to_arrow()
    assert rows.num_rows == SEED_ROWS and sorted(rows.column("payment_method").to_pylist()) == ["bank", "card", "coupon"]
    keys = [s.summary.additional_properties.get("consistent.ingest-key") for s in table.snapshots()]
    return len([k for k in keys if k and k.startswith("dbt-seed:payment_methods:")])


def seed_snapshot(shop: Shop) -> int:
    return shop.catalog.load_table("shop.payment_methods").metadata.snapshot_by_name("main").snapshot_id


def seed_key(shop: Shop) -> str:
    """The first 16 hex digits of dbt's checksum of the seed file (SHA-256 of its text, stripped)."""
    import hashlib

    text = (shop.project / "seeds" / "payment_methods.csv").read_text(encoding="utf-8").strip()
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def model_reports(run: DbtRun) -> list[str]:
    return [line for line in run.reports if not line.startswith("[lake_consistent] ingest: ")]


def write_model(shop: Shop, name: str, text: str) -> None:
    (shop.project / "models" / "marts" / f"{name}.sql").write_text(text, encoding="utf-8")


def customers_model(number_of_orders: str, first_order: str = "min(o.order_date) AS first_order") -> str:
    return (f"SELECT c.customer_id, c.first_name, c.last_name,\n       {number_of_orders},\n       {first_order}\n"
            "FROM {{ ref('stg_customers') }} AS c LEFT JOIN {{ ref('orders') }} AS o ON c.customer_id = o.customer_id\n"
            "GROUP BY c.customer_id, c.first_name, c.last_name\n")


def ingest_round(shop: Shop, round_: int) -> int:
    """One load of the three roots at one barrier (as a loader that lands them together would); that barrier."""
    start, barrier = 1 + (round_ - 1) * 10, int(time.time() * 1000)
    shop.cc.ingest("raw.customers", _rows("raw.customers", start, 5), key=f"customers-{round_}", barrier=barrier)
    shop.cc.ingest("raw.orders", _rows("raw.orders", start, 10), key=f"orders-{round_}", barrier=barrier)
    shop.cc.ingest("raw.payments", _rows("raw.payments", start, 10), key=f"payments-{round_}", barrier=barrier)
    return barrier


# --- the project, invocation after invocation ------------------------------------------------------------------
def test_a_user_shaped_project_runs_with_no_ddl_by_hand_and_every_cut_recounts(shop: Shop) -> None:
    write_model(shop, "customers", customers_model(CUSTOMERS_INT))
    # dbt seed: the seed's table created from the CSV, its rows one keyed root ingest. Before the sources' first
    # load, so that their barrier is the newer one: an epoch computes at the newest barrier at which every source is
    # complete, and a seed loaded after the sources would be read empty (the plugin warns so)
    seeded = dbt(shop, "seed")
    assert seeded.returncode == 0 and seeded.statuses == {"payment_methods": "success"}, seeded.describe()
    assert [line.split(" landed in ")[0].split(" at barrier ")[0] for line in seeded.reports] == [
        "[lake_consistent] ingest: shop.payment_methods ingest"], seeded.describe()
    assert seed_loads(shop) == 1
    ingest_round(shop, 1)

    # 1. dbt build: the seed again (the same file: its key is in the table's history, nothing lands); the models'
    # namespace and tables created from their output schemas, jobs registered, one epoch each; the schema tests pass
    first = dbt(shop, "build")
    assert first.returncode == 0, first.describe()
    assert {k: v for k, v in first.statuses.items() if k in NODES} == dict.fromkeys(NODES, "success"), (
        first.describe())
    assert sorted(v for k, v in first.statuses.items() if k not in NODES) == ["pass"] * TESTS, first.describe()
    # the staging views: no view anywhere (their SQL recorded on the namespace), no table either
    assert [f"view {v} recorded" for v in VIEWS if f"view shop.{v} recorded in the namespace lake.shop" in first.stdout
            ] == [f"view {v} recorded" for v in VIEWS], first.describe()
    assert sorted(t for _, t in shop.catalog.list_tables("shop")) == [
        "customers", "order_status", "orders", "payment_log", "payment_methods"]
    assert seed_loads(shop) == 1
    assert "CREATE TABLE `lake`.`shop`.`orders` (`order_id` bigint, `customer_id` bigint, `order_date` date, " \
           "`status` string, `amount` decimal(" in first.stdout, first.describe()
    assert [line for line in first.reports if line.startswith("[lake_consistent] ingest: ")] == [
        "[lake_consistent] ingest: shop.payment_methods ingest key 'dbt-seed:payment_methods:"
        f"{seed_key(shop)}' already landed in snapshot {seed_snapshot(shop)}; nothing written"], first.describe()
    assert sorted(line.split(":")[0] for line in model_reports(first)) == sorted(
        f"[lake_consistent] {m}" for m in MODELS), first.describe()
    assert all(" published (" in line for line in model_reports(first)), first.describe()
    # the incremental marts' first run: is_incremental() is false (no table yet), the whole model
    assert not [m for m in INCREMENTAL if "incremental:" in first.report(m)], first.describe()
    assert {m: epochs(shop, m) for m in MARTS} == dict.fromkeys(MARTS, 1)
    assert shop.catalog.load_table("shop.customers").schema().find_field("number_of_orders").field_type.__str__() == "int"
    check_cut(shop, 1)

    # 2./3. new root data, dbt build again: the seed (unchanged file) lands nothing, one epoch more per model,
    # dbt's schema tests read the tables through the consistent catalog
    loaded = ingest_round(shop, 2)
    second = dbt(shop, "build")
    assert second.returncode == 0, second.describe()
    assert all(" published (" in line for line in model_reports(second)) and len(model_reports(second)) == 4, (
        second.describe())
    assert len(second.reports) == 5 and [line for line in second.reports if " nothing written" in line] == [
        line for line in second.reports if line.startswith("[lake_consistent] ingest: ")], second.describe()
    # the incremental marts read only what changed: each epoch names the range it read, from the sink's previous
    # recorded input to this epoch's (pyiceberg), and the appended one wrote just the round's 10 payments
    for model, source in (("order_status", "raw.orders"), ("payment_log", "raw.payments")):
        first_input, this_input = recorded_inputs(shop, f"shop.{model}")[-2:]
        assert first_input[source] != this_input[source]
        assert second.report(model).endswith(
            f"; incremental: {source} snapshots ({first_input[source]}, {this_input[source]}])"), second.describe()
    assert " published (10 rows, " in second.report("payment_log"), second.describe()
    assert seed_loads(shop) == 1, second.describe()
    assert sorted(second.statuses.values()).count("pass") == TESTS, second.describe()

    # dbt docs generate: the marts and the seed in dbt's catalog (read through lake_consistent); the views, which are
    # no relation, documented from the project
    docs = dbt(shop, "docs", "generate")
    assert docs.returncode == 0, docs.describe()
    documented = json.loads((shop.project / "target" / "catalog.json").read_text())["nodes"]
    assert {key.split(".")[-1] for key in documented} == {"payment_methods", *MODELS}, documented.keys()
    assert "payments" not in documented["model.shop.orders"]["columns"]
    assert set(VIEWS) <= {key.split(".")[-1] for key in json.loads(
        (shop.project / "target" / "manifest.json").read_text())["nodes"]}

    # dbt source freshness: each source's watermark (the barrier of its last load), not max(loaded_at) of its rows
    fresh = dbt(shop, "source", "freshness")
    assert fresh.returncode == 0, fresh.describe()
    sources = json.loads((shop.project / "target" / "sources.json").read_text())["results"]
    assert len(sources) == 3 and {r["status"] for r in sources} == {"pass"}, sources
    for result in sources:
        at = dt.datetime.fromisoformat(result["max_loaded_at"].replace("Z", "+00:00"))
        at = at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)
        table = shop.catalog.load_table(result["unique_id"].split(".", 2)[2])  # source.shop.raw.orders -> raw.orders
        head = table.metadata.snapshot_by_name("main")
        marks = [int(head.summary.additional_properties["consistent.barrier"])]
        if "consistent.watermark" in table.properties:  # an idle root's watermark, advanced by the epochs' plans
            marks.append(int(table.properties["consistent.watermark"]))
        assert max(marks) >= loaded and abs(at.timestamp() * 1000 - max(marks)) < 1000, (result, marks, loaded)
    assert {m: epochs(shop, m) for m in MARTS} == dict.fromkeys(MARTS, 2)
    check_cut(shop, 1)

    # 4a. orders edited with an error that shows at run time (issue 43): dbt run reports it and skips customers;
    # its new generation never replaced the old one, so every mart keeps serving its rows at the same cut
    before, revisions = heads(shop), {m: shop.catalog.load_table(m).metadata.properties.get(P.REVISION) for m in MARTS}
    original = (shop.project / "models" / "marts" / "orders.sql").read_text(encoding="utf-8")
    write_model(shop, "orders", original + "\nWHERE assert_true(o.order_id IS NULL, 'orders edited with an error') IS NULL\n")
    broken = dbt(shop, "run", "-s", "orders", "customers")
    assert broken.returncode == 1 and broken.statuses == {"orders": "error", "customers": "skipped"}, broken.describe()
    assert "orders edited with an error" in broken.stdout, broken.describe()
    assert heads(shop) == before, (before, heads(shop))
    for mart in MARTS:
        loaded = shop.catalog.load_table(mart).metadata
        assert loaded.properties.get(P.REVISION) == revisions[mart] and "consistent-previous" not in loaded.refs
    check_cut(shop, 1)

    # 4. both epoch models edited: a column added, a type widened (Iceberg schema evolution), then new generations;
    # and the incremental model order_status edited (a filter added): its definition changed, so a new generation too
    # (§6.10), each switched in by its epoch's publish, the old one kept on consistent-previous
    write_model(shop, "orders", ORDERS_V2)
    write_model(shop, "customers", customers_model(CUSTOMERS_BIGINT))
    write_model(shop, "order_status", ORDER_STATUS_V2)
    edited = dbt(shop, "run")
    assert edited.returncode == 0, edited.describe()
    assert "ALTER TABLE `lake`.`shop`.`orders` ADD COLUMNS (`payments` bigint)" in edited.stdout, edited.describe()
    assert "ALTER TABLE `lake`.`shop`.`customers` ALTER COLUMN `number_of_orders` TYPE bigint" in edited.stdout, (
        edited.describe())
    # orders' and customers' definitions changed: each a new generation, computed whole at the barrier and switched in
    for model in ("orders", "customers", "order_status"):
        assert f"shop.{model} definition changed" in edited.report(model), edited.describe()
        assert ": new generation at barrier " in edited.report(model), edited.describe()
        assert " published (" in edited.report(model), edited.describe()
        loaded = shop.catalog.load_table(f"shop.{model}").metadata
        assert loaded.refs["consistent-previous"].snapshot_id == before[f"shop.{model}"], model
        assert loaded.properties[P.REVISION] == "1"
    # the edited incremental mart: a new generation, whose epoch read its source whole and merged it into an empty
    # sink: the recount below runs the edited SQL over every order of the cut
    # the other incremental mart, unedited and with no new row: done (its full and incremental statements are one
    # definition, the version the materialization declares, so no new generation)
    assert " done: the sink already holds it" in edited.report("payment_log"), edited.describe()
    assert str(shop.catalog.load_table("shop.customers").schema().find_field("number_of_orders").field_type) == "long"
    check_cut(shop, 2)

    # 5. --full-refresh of an epoch model and of an incremental one: new generations, each recomputed whole at the current
    # barrier (the incremental one by its whole SQL, not its increment)
    # (and a new incremental model over the epoch mart orders, created whole: the kill test's run refuses its
    # increment, since orders' epochs overwrite it)
    write_model(shop, "order_copy", ORDER_COPY)
    refreshed = dbt(shop, "run", "--full-refresh", "-s", "customers", "order_status", "order_copy")
    assert refreshed.returncode == 0 and refreshed.statuses == dict.fromkeys(
        ("customers", "order_status", "order_copy"), "success"), refreshed.describe()
    for model in ("customers", "order_status"):
        assert f"shop.{model} rebuild requested: new generation at barrier " in refreshed.report(model), (
            refreshed.describe())
    assert "incremental:" not in refreshed.report("order_status"), refreshed.describe()
    assert shop.catalog.load_table("shop.order_status").metadata.properties[P.REVISION] == "2"
    check_cut(shop, 2)

    # 6. a change Iceberg cannot evolve (date -> string): refused with the way out, nothing written. In the same
    # invocation, what a project gets without its incremental opt-in file (dbt-spark's own incremental) and from
    # dbt-spark's table materialization: both would CREATE TABLE AS SELECT, refused up front naming the way out
    before = heads(shop)
    opt_in = shop.project / "macros" / "consistent_incremental.sql"
    opt_in_text = opt_in.read_text(encoding="utf-8")
    opt_in.unlink()
    write_model(shop, "customers", customers_model(CUSTOMERS_BIGINT, "CAST(min(o.order_date) AS string) AS first_order"))
    write_model(shop, "order_table", ORDER_TABLE)
    try:
        refused = dbt(shop, "run", "-s", "customers", "order_status", "order_table")
    finally:
        opt_in.write_text(opt_in_text, encoding="utf-8")
        (shop.project / "models" / "marts" / "order_table.sql").unlink()
    assert refused.returncode == 1 and refused.statuses == dict.fromkeys(
        ("customers", "order_status", "order_table"), "error"), refused.describe()
    assert ("column first_order changes type from date to string, which Iceberg cannot evolve in place"
            in refused.stdout), refused.describe()
    assert "DROP TABLE `lake`.`shop`.`customers`" in refused.stdout, refused.describe()
    said = " ".join(refused.stdout.split())  # dbt wraps and indents the messages
    assert ("model order_status: materialized='incremental' is dbt-spark's own materialization in this project"
            in said and "add the file macros/consistent_incremental.sql holding {% materialization incremental, "
            "adapter='spark' %} {{ return(consistent_catalog.materialization_incremental_spark()) }} "
            "{% endmaterialization %}" in said), refused.describe()
    assert "model order_table: materialized='table' would CREATE TABLE AS SELECT" in said and (
        "write the model as materialized='epoch'" in said), refused.describe()
    assert heads(shop) == before and "order_table" not in [t for _, t in shop.catalog.list_tables("shop")]
    check_cut(shop, 2)


# --- killed mid-run ----------------------------------------------------------------------------------------------
def test_a_run_killed_mid_way_reruns_without_duplicates(shop: Shop) -> None:
    """Killed once two models published, before the others did: the rerun (taking over the dead instance's leases,
    as the README's dbt-flip section says) computes what is missing once, the incremental marts from where their
    last epoch stopped; every mart still equals its recount (the appended one holds every payment once)."""
    import yaml

    write_model(shop, "customers", customers_model(CUSTOMERS_BIGINT))  # the first test left a refused edit behind
    before = {mart: epochs(shop, mart) for mart in MARTS}
    ingest_round(shop, 3)
    command = [str(shop.bin / "dbt"), "run", "--project-dir", str(shop.project), "--profiles-dir", str(shop.profiles)]
    process = subprocess.Popen(command, cwd=shop.root, env=shop.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    published = []
    try:
        deadline = time.monotonic() + DBT_TIMEOUT
        for line in process.stderr:  # the plugin's lines, as they come
            if line.startswith("[lake_consistent] ") and " published (" in line:
                published.append(line.split(":")[0].removeprefix("[lake_consistent] "))
                if len(published) == 2:
                    os.killpg(process.pid, signal.SIGKILL)
                    break
            assert time.monotonic() < deadline, "dbt run did not publish two models in time"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    assert len(published) == 2, published
    assert {f"shop.{m}": epochs(shop, f"shop.{m}") for m in published} == {
        f"shop.{m}": before[f"shop.{m}"] + 1 for m in published}

    # the rerun takes the jobs over from the killed instance (its leases would otherwise hold for 5 minutes)
    takeover = shop.root / "profiles-takeover"
    takeover.mkdir(exist_ok=True)
    profile = yaml.safe_load((shop.profiles / "profiles.yml").read_text(encoding="utf-8"))
    profile["shop"]["outputs"]["lake_consistent"]["server_side_parameters"]["spark.sql.consistent.takeover"] = "true"
    (takeover / "profiles.yml").write_text(yaml.safe_dump(profile), encoding="utf-8")
    rerun = dbt(shop, "run", profiles=takeover)
    # order_copy reads orders, which its round-3 epoch overwrote: not all inserts, refused with the way out (and
    # nothing else is held up by it)
    assert rerun.returncode == 1 and rerun.statuses["order_copy"] == "error", rerun.describe()
    assert {m: rerun.statuses[m] for m in MODELS} == dict.fromkeys(MODELS, "success"), rerun.describe()
    assert "[CONSISTENT_READ.NOT_INCREMENTAL]" in rerun.stdout and "shop.orders changed otherwise" in rerun.stdout, (
        rerun.describe())
    assert "dbt run --full-refresh -s <the model>" in rerun.stdout, rerun.describe()
    for model in MODELS:
        line = rerun.report(model)
        if model in published:
            assert " done: the sink already holds it" in line, (model, rerun.describe())
        else:
            assert " published (" in line or " republished " in line, (model, rerun.describe())
    if "payment_log" not in published and " published (" in rerun.report("payment_log"):
        assert " published (10 rows, " in rerun.report("payment_log"), rerun.describe()  # only round 3's payments
    assert {mart: epochs(shop, mart) for mart in MARTS} == {mart: n + 1 for mart, n in before.items()}
    check_cut(shop, 2)


def test_the_readme_shows_the_projects_incremental_files() -> None:
    """The README's dbt section shows the incremental model and the project's one-file opt-in as this project has
    them (its block is text: this test runs them)."""
    from tests.docs.test_snippets import parse_blocks

    blocks = [b.code for b in parse_blocks(PROJECT.parents[2] / "README.md") if "-- macros/consistent_incremental.sql" in b.code]
    assert len(blocks) == 1, "README.md should show the incremental opt-in in one block"
    macro = (PROJECT / "macros" / "consistent_incremental.sql").read_text(encoding="utf-8")
    shown_macro = macro[macro.index("{% materialization"):]
    assert shown_macro in blocks[0]
    assert (PROJECT / "models" / "marts" / "order_status.sql").read_text(encoding="utf-8") in blocks[0]
