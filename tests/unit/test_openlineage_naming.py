"""OpenLineage names and the "is it configured" check (protocol §5.8): plain functions, no client needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from consistent_catalog.openlineage_events import configured, dataset_name, dataset_namespace, job_namespace


@pytest.mark.parametrize("properties, namespace", [
    ({"uri": "sqlite:////abs/lake/catalog.db", "warehouse": "file:///abs/lake/warehouse"}, "sqlite:////abs/lake/catalog.db"),
    ({"uri": "postgresql+psycopg2://etl:secret@db-host:5432/iceberg?sslmode=require"}, "postgresql+psycopg2://db-host:5432/iceberg"),
    ({"uri": "http://rest-host:8181", "warehouse": "analytics", "credential": "id:secret"}, "http://rest-host:8181"),
    ({"uri": "http://[::1]:8181/"}, "http://[::1]:8181/"),
    ({"warehouse": "s3://bucket/warehouse"}, "s3://bucket"),
    ({}, "iceberg://lake"),
    ({"type": "hive", "uri": "thrift://metastore:9083", "warehouse": "s3://bucket/wh"}, "hive://metastore:9083"),
    ({"uri": "thrift://hms-1:9083,thrift://hms-2:9083"}, "hive://hms-1:9083"),
    ({"type": "glue", "glue.id": "111122223333", "glue.region": "eu-west-1", "warehouse": "s3://b/wh"},
     "arn:aws:glue:eu-west-1:111122223333"),
])
def test_the_dataset_namespace_is_the_catalog_without_credentials(properties, namespace):
    assert dataset_namespace("lake", properties) == namespace


def test_a_glue_region_nothing_names_is_unknown_not_a_guess(monkeypatch: pytest.MonkeyPatch):
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(variable, raising=False)
    assert dataset_namespace("lake", {"type": "glue", "glue.id": "111122223333"}) == "arn:aws:glue:unknown:111122223333"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert dataset_namespace("lake", {"type": "glue", "glue.id": "1"}) == "arn:aws:glue:ap-south-1:1"
    monkeypatch.setenv("AWS_REGION", "eu-north-1")  # the SDKs' order: AWS_REGION first
    assert dataset_namespace("lake", {"type": "glue", "glue.id": "1"}) == "arn:aws:glue:eu-north-1:1"
    assert dataset_namespace("lake", {"type": "glue", "glue.id": "1", "client.region": "us-west-2"}) == \
        "arn:aws:glue:us-west-2:1"


def test_glue_tables_are_named_as_the_spec_names_them_others_by_identifier():
    assert dataset_name({"type": "glue", "glue.id": "1"}, "sales.orders") == "table/sales/orders"
    assert dataset_name({"type": "hive", "uri": "thrift://h:9083"}, "sales.orders") == "sales.orders"
    assert dataset_name({"uri": "http://rest:8181"}, "sales.orders") == "sales.orders"


def test_configured_only_where_the_client_would_find_a_transport(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert not configured({}, tmp_path)
    assert configured({"OPENLINEAGE_URL": "http://marquez:5000"}, tmp_path)
    assert not configured({"OPENLINEAGE_URL": "http://marquez:5000", "OPENLINEAGE_DISABLED": "True"}, tmp_path)
    assert configured({"OPENLINEAGE__TRANSPORT__TYPE": "console"}, tmp_path)
    assert not configured({"OPENLINEAGE_CONFIG": str(tmp_path / "missing.yml")}, tmp_path)
    (tmp_path / "openlineage.yml").write_text("transport:\n  type: console\n")
    assert configured({}, tmp_path)
    assert configured({"OPENLINEAGE_CONFIG": str(tmp_path / "openlineage.yml")}, tmp_path / "home")
    assert job_namespace({}) == "consistent-catalog" and job_namespace({"OPENLINEAGE_NAMESPACE": "etl"}) == "etl"


@pytest.mark.parametrize("properties, kind", [
    ({"type": "glue", "glue.region": "eu-west-1"}, "glue"),
    ({"type": "GLUE"}, "glue"),
    ({"glue.region": "eu-west-1", "glue.id": "1"}, "glue"),  # a GlueCatalog made directly: no type
    ({"py-catalog-impl": "pyiceberg.catalog.glue.GlueCatalog"}, "glue"),
    ({"py-catalog-impl": "mine.catalogs.Special", "type": "glue"}, "Special"),  # the class is what pyiceberg builds
    ({"type": "hive", "glue.skip-archive": "true"}, "hive"),  # the type wins over stray glue.* keys
    ({"uri": "thrift://metastore:9083"}, "hive"),
    ({"uri": "https://rest-host/catalog"}, "rest"),
    ({"uri": "sqlite:////abs/catalog.db"}, "sql"),
    ({"uri": "postgresql+psycopg2://u@h/db"}, "sql"),
    ({"warehouse": "s3://bucket/wh"}, "unknown"),
])
def test_the_probe_and_openlineage_tell_catalogs_apart_with_one_function(properties, kind):
    """``probe.catalog_kind`` of a catalog's configuration; OpenLineage names a catalog as Glue exactly when it says
    ``glue`` (one answer for both, as ``CatalogKind`` on the JVM)."""
    from consistent_catalog.probe import catalog_kind

    assert catalog_kind(properties) == kind
    glue_named = dataset_name({**properties, "glue.id": "1"} if kind == "glue" else properties, "sales.orders")
    assert (glue_named == "table/sales/orders") is (kind == "glue")


def test_a_catalog_and_its_properties_are_the_same_kind(tmp_path: Path):
    """pyiceberg's catalog objects (told apart by their class) and the properties they carry (told apart as
    configured) give one kind: a SQL catalog, and a Glue catalog made directly with ``glue.*`` keys (no ``type``)."""
    from pyiceberg.catalog.glue import GlueCatalog
    from pyiceberg.catalog.sql import SqlCatalog

    from consistent_catalog.probe import catalog_kind

    sql = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    glue = GlueCatalog("lake", **{"glue.region": "eu-west-1", "glue.access-key-id": "k", "glue.secret-access-key": "s"})
    assert [catalog_kind(c) for c in (sql, glue)] == ["sql", "glue"]
    assert [catalog_kind(c.properties) for c in (sql, glue)] == ["sql", "glue"]
    sql.engine.dispose()
