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
