"""The REST tier against a server we did not write: Iceberg's REST fixture (docs/catalogs.md).

``tests/harness/third_party.py`` starts ``org.apache.iceberg.rest.RESTCatalogServer`` (Iceberg 1.11.0, the jars
copied from Maven Central by ``scripts/third_party_servers.sh``) once for this module; every test gets it
emptied (the fixture serves one catalog, not one per warehouse as our server does).

The representative subset runs the *same test functions* as on our server (``rest`` in their home modules),
re-hosted here with this module's ``backend``/``catalog`` fixtures: resolve and cuts, the epoch protocol with
fencing (a zombie refused inside the server's compare-and-swap), keyed ingests, retention, the ETag/304
loading, the fault pipeline through ``FaultProxy``, the conformance corpus cold and warm. Then what the
server answers differently from ours, checked on the wire (``test_what_the_fixture_answers``): the facts
docs/catalogs.md's table states.
"""

from __future__ import annotations

import json
import re
import types
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from consistent_catalog import ConsistentCatalog
from consistent_catalog.exceptions import ConsistentCatalogError
from consistent_catalog.resolver import DEFAULT_LEVEL
from tests.catalog import test_catalog_behaviour, test_fence, test_loading, test_retention
from tests.catalog.test_loading import own_cache, pipeline  # noqa: F401 - fixtures the re-hosted tests use
from tests.conformance.corpus import cut_json, load_cases, python_answer
from tests.harness.fault_proxy import FaultProxy
from tests.harness.pipeline import Pipeline, check, create_tables
from tests.harness.third_party import ICEBERG_FIXTURE_VERSION, IcebergRestFixture, iceberg_fixture

pytestmark = pytest.mark.integration

iceberg_fixture = iceberg_fixture()


@pytest.fixture(params=["iceberg-fixture"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def catalog(iceberg_fixture: IcebergRestFixture):  # -> pyiceberg RestCatalog
    """The fixture's one catalog, emptied, with the namespace ``demo`` (as the ``catalog`` fixture of tests/conftest.py)."""
    iceberg_fixture.reset()
    cat = iceberg_fixture.catalog()
    cat.create_namespace("demo")
    return cat


def rehost(test: Callable[..., Any], *marks: pytest.MarkDecorator, keep_parametrize: bool = True) -> Callable[..., Any]:
    """A copy of ``test`` (same code, same module globals and helpers) without its ``backend`` parametrization,
    so it is collected here and runs with this module's fixtures; its other marks are kept."""
    copy = types.FunctionType(test.__code__, test.__globals__, test.__name__, test.__defaults__, test.__closure__)
    copy.__dict__.update({k: v for k, v in test.__dict__.items() if k != "pytestmark"})
    kept = [m for m in getattr(test, "pytestmark", [])
            if not (m.name == "parametrize" and (not keep_parametrize or "backend" in str(m.args[0])))]
    copy.pytestmark = [*kept, *(m.mark for m in marks)]  # type: ignore[attr-defined]
    return copy


def server_tier() -> dict[str, Callable[..., Any]]:
    """The protocol's cases every catalog server we did not write runs (this module's REST fixture, and the Hive
    Metastore and Glue of test_hive_glue_catalogs.py), re-hosted by name: resolve and cuts, the epoch protocol and
    the fence, retention. A module collects them with ``globals().update(server_tier())``."""
    tests = [
        # resolve and cuts
        test_catalog_behaviour.test_consistent_read_returns_the_cut_rows,
        test_catalog_behaviour.test_as_of_reads_a_historical_cut,
        test_catalog_behaviour.test_the_component_cut_waits_for_a_lagging_table_downstream,
        # the epoch protocol and the fence
        test_fence.test_every_commit_of_an_epoch_sends_only_standard_requirements_with_the_planned_fence,
        test_fence.test_a_takeover_fences_out_the_zombie_inside_the_catalog,
        test_catalog_behaviour.test_zombie_cannot_stage_or_publish_after_takeover,
        test_catalog_behaviour.test_killed_writer_staged_epoch_is_invisible_at_repeatable_read,
        test_fence.test_a_revision_moves_the_fence_and_the_owner_replans_with_it,
        # retention
        test_retention.test_needed_snapshot_older_than_threshold_survives_and_unneeded_old_ones_go,
    ]
    tier = {test.__name__: rehost(test) for test in tests}
    flip = test_catalog_behaviour.test_flip_invariants_hold_at_every_cut_of_a_pipeline
    tier[flip.__name__] = pytest.mark.parametrize("seed", [1])(rehost(flip, keep_parametrize=False))
    return tier


globals().update(server_tier())

# --- loading: ETag / If-None-Match answered with 304 (Iceberg 1.11+) -----------------------------------
def test_warm_loads_are_304s_although_jetty_suffixes_the_etags_of_gzipped_answers(pipeline, catalog) -> None:  # noqa: F811
    """test_loading's 304 test, with what differs here: the fixture's Jetty gzips its answers (pyiceberg asks for
    gzip) and appends ``--gzip`` to their unquoted ETags, which it never strips from ``If-None-Match``; sent back
    as received, every warm load would be a whole 200. The loader sends the tag of the unencoded answer
    (``_pyiceberg.answer_etag``) and gets its 304s."""
    cc = pipeline
    names = [*test_loading.extra_tables(cc, catalog, count=6), *test_loading.FLIP]
    test_loading.own_cache(cc)
    with test_loading.wire(catalog) as cold:
        states = cc.store.states(names)
    first = test_loading.by_table(cold)
    assert sorted(first) == sorted(names)
    assert all(e["status"] == 200 and e["etag"].endswith("--gzip") for e in cold), cold  # the difference
    with test_loading.wire(catalog) as warm:
        again = cc.store.states(names)
    for name, exchange in test_loading.by_table(warm).items():
        assert exchange["if_none_match"] == first[name]["etag"].removesuffix("--gzip")
        assert (exchange["status"], exchange["bytes"]) == (304, 0), exchange
    assert [a is b for a, b in zip(again, states)] == [True] * len(names)
    # sent back as received, the suffixed tag is never matched (what the loader works around)
    import requests

    url = f"{catalog.uri}/v1/namespaces/demo/tables/words"
    suffixed = requests.get(url, headers={"Accept-Encoding": "gzip"}, timeout=30).headers["ETag"]
    assert requests.get(url, headers={"Accept-Encoding": "gzip", "If-None-Match": suffixed}, timeout=30).status_code == 200
test_loader_states_equal_pyiceberg_states_on_real_histories = rehost(
    test_loading.test_loader_states_equal_pyiceberg_states_on_real_histories)


# --- keyed ingests, epochs, a pin, a revision, an expiry through lost and refused commits -------------
FAULT_RULES = {
    "commit": {"lost": 0.12, "refuse": 0.04, "throttle": 0.02, "slow": 0.02, "reset_before": 0.02, "reset_after": 0.03},
    "load": {"lost": 0.03, "refuse": 0.04, "reset_after": 0.02},
}


def test_a_keyed_pipeline_through_lost_and_refused_commits_lands_everything_exactly_once(
        iceberg_fixture: IcebergRestFixture) -> None:
    """tests/integration/test_faults.py's pipeline (keyed root ingests, two chained epoch jobs, a pin, a revision,
    an expiry) with ``FaultProxy`` in front of the fixture; what landed is checked through a direct client."""
    iceberg_fixture.reset()
    direct = iceberg_fixture.catalog()
    create_tables(direct)
    with FaultProxy(iceberg_fixture.port, seed=1, rules=FAULT_RULES, slow_seconds=2.0) as proxy:
        cc = ConsistentCatalog(load_catalog("lake", **{**direct.properties, "uri": proxy.uri,
                                                      "consistent.request-timeout": "1s"}))
        pipeline = Pipeline(cc, seed=1)
        with pipeline:
            for r in range(8):
                pipeline.run_round()
                if r == 2:
                    pipeline.pin()
                if r == 5:
                    pipeline.revise_to(4)
                if r == 6:
                    pipeline.expire()
        commits = sum(n for (route, _), n in proxy.counts.items() if route == "commit")
        faulted = sum(n for (route, kind), n in proxy.counts.items() if route == "commit" and kind != "pass")
    assert commits >= 40 and faulted / commits >= 0.15, proxy.counts
    assert proxy.counts["commit", "lost"] >= 3
    # it advertises no idempotency-key-lifetime: no commit carries a key, the read-backs settled every lost answer
    assert all(key is None for _, key in proxy.keys)
    assert check(direct, pipeline.expected) == []


# --- the conformance corpus, cold and warm -------------------------------------------------------------
def test_the_corpus_resolves_to_its_answers_cold_and_warm(iceberg_fixture: IcebergRestFixture, tmp_path: Path) -> None:
    """Every case of tests/conformance/cases registered in the fixture (one case at a time, the catalog emptied in
    between), resolved through ``ConsistentCatalog`` cold then warm (304s), against the corpus's reference path
    (pyiceberg's full parse of each table)."""
    wrong: list[str] = []
    corpus = load_cases()
    for case, body in sorted(corpus.items()):
        iceberg_fixture.reset()
        catalog = iceberg_fixture.catalog()
        for name, document in body["tables"].items():
            namespace = name.rpartition(".")[0]
            if (namespace,) not in catalog.list_namespaces():
                catalog.create_namespace(namespace)
            path = tmp_path / case / f"{name}.metadata.json"
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps(document), encoding="utf-8")
            catalog.register_table(name, f"file://{path}")
        cc = ConsistentCatalog(catalog)
        own_cache(cc)
        for repeat in ("cold", "warm"):
            for index, query in enumerate(body["queries"]):
                if query.get("kind") is not None:  # a component cut or a write plan: not a resolve
                    continue
                try:
                    answer = cut_json(cc.resolve(query["tables"], query.get("level", DEFAULT_LEVEL), query.get("as_of")))
                except ConsistentCatalogError as exc:
                    answer = {"error": type(exc).__name__}
                expected = python_answer(body["tables"], query)
                if answer != expected:
                    wrong.append(f"{case} {repeat} query {index}: expected {expected}, got {answer}")
    assert len(corpus) >= 20
    assert not wrong, "\n".join(wrong[:5])


# --- what the fixture answers differently (docs/catalogs.md) -------------------------------------------
def http(uri: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
         ) -> tuple[int, dict[str, str], Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{uri}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, head, payload = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        status, head, payload = err.code, dict(err.headers), err.read()
    try:
        decoded = json.loads(payload) if payload else None
    except ValueError:
        decoded = payload.decode(errors="replace")
    return status, head, decoded


@pytest.fixture
def two_tables(iceberg_fixture: IcebergRestFixture) -> Iterator[tuple[Any, Any]]:
    iceberg_fixture.reset()
    cat = iceberg_fixture.catalog()
    cat.create_namespace("probe")
    schema = pa.schema([pa.field("id", pa.int64())])
    cat.create_table("probe.a", schema=schema)
    b = cat.create_table("probe.b", schema=schema)
    b.append(pa.table({"id": pa.array([1], pa.int64())}))
    yield cat, cat.load_table("probe.b")


def change(table: Any, requirements: list[dict[str, Any]], epoch: str) -> dict[str, Any]:
    return {"identifier": {"namespace": list(table.name()[:-1]), "name": table.name()[-1]},
            "requirements": [{"type": "assert-table-uuid", "uuid": str(table.metadata.table_uuid)}, *requirements],
            "updates": [{"action": "set-properties", "updates": {"epoch": epoch}}]}


def test_what_the_fixture_answers(iceberg_fixture: IcebergRestFixture, two_tables: tuple[Any, Any]) -> None:
    """The facts of docs/catalogs.md's row for the fixture, read on the wire (each could be otherwise)."""
    cat, b = two_tables
    a = cat.load_table("probe.a")
    uri = iceberg_fixture.uri
    # config: no prefix, no warehouse catalogs; the endpoints it lists
    status, _, config = http(uri, "GET", "/v1/config")
    assert status == 200 and "prefix" not in config.get("overrides", {})
    assert "POST /v1/{prefix}/transactions/commit" in config["endpoints"]
    # ETag on loadTable; If-None-Match with it: 304, no body (Iceberg 1.11+)
    status, head, _ = http(uri, "GET", "/v1/namespaces/probe/tables/b")
    etag = head.get("ETag") or head.get("etag")
    assert status == 200 and etag
    status, _, body = http(uri, "GET", "/v1/namespaces/probe/tables/b", headers={"If-None-Match": etag})
    assert status == 304 and body is None
    # a stale requirement: 409, checked by the server (Iceberg's CatalogHandlers, inside the JDBC swap)
    stale = [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None}]
    status, _, body = http(uri, "POST", "/v1/namespaces/probe/tables/b", {**change(b, stale, "x")})
    assert status == 409, body
    # a multi-table commit with one stale requirement: nothing of it lands (all or nothing on this server)
    before = {t: cat.load_table(f"probe.{t}").metadata_location for t in ("a", "b")}
    status, _, body = http(uri, "POST", "/v1/transactions/commit",
                           {"table-changes": [change(a, [], "2"), change(b, stale, "2")]})
    assert status == 409, body
    assert {t: cat.load_table(f"probe.{t}").metadata_location for t in ("a", "b")} == before
    # an unknown requirement type: refused before anything is applied (the status code differs from ours: see below)
    status, _, body = http(uri, "POST", "/v1/namespaces/probe/tables/a",
                           {**change(a, [], "3"), "requirements": [{"type": "consistent-assert-state"}]})
    assert status == 500, body  # ours: 400 (a body that does not parse is the client's error)
    assert cat.load_table("probe.a").metadata_location == before["a"]
    # Idempotency-Key: not advertised, yet a keyed repeat is answered as the first request was (not a 409)
    assert "idempotency-key-lifetime" not in config
    key = {"Idempotency-Key": "0190b1c2-0000-7000-8000-00000000f1f1"}
    answers = [http(uri, "POST", "/v1/namespaces", {"namespace": ["keyed"]}, headers=key)[0] for _ in range(2)]
    assert answers == [200, 200] and http(uri, "POST", "/v1/namespaces", {"namespace": ["keyed"]})[0] == 409



def test_the_fetched_version_is_the_one_documented() -> None:
    pom = (Path(__file__).resolve().parents[2] / "scripts" / "third-party" / "pom.xml").read_text(encoding="utf-8")
    assert re.search(r"<iceberg.version>([^<]+)</iceberg.version>", pom).group(1) == ICEBERG_FIXTURE_VERSION
    docs = (Path(__file__).resolve().parents[2] / "docs" / "catalogs.md").read_text(encoding="utf-8")
    assert f"Iceberg REST fixture {ICEBERG_FIXTURE_VERSION}" in docs
