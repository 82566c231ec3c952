"""OpenLineage in tests: a collector on 127.0.0.1 that the standard client's HTTP transport (and the Spark
plugin's emitter) posts to, and the schemas its events must satisfy.

The openlineage-python wheel (1.54.0) ships no JSON schema files (its classes are generated from the spec and
only carry ``_schemaURL``s), and the suite cannot download one. ``OPENLINEAGE_SPEC`` below is the spec's
own structure (OpenLineage.json 2-0-2, ``$defs`` RunEvent, JobEvent, Run, Job, Dataset, BaseFacet, plus the
facets DatasetVersionDatasetFacet 1-0-1, ErrorMessageRunFacet 1-0-1, SchemaDatasetFacet 1-2-0, SQLJobFacet 1-1-0
and TagsRunFacet 1-0-0), transcribed field by field: what is required, the ``eventType`` enum, the formats. Our
own facets are checked against the schemas we publish, docs/openlineage/ConsistentCatalog*RunFacet.json.
"""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema

ROOT = Path(__file__).resolve().parents[2]
EPOCH_FACET_SCHEMA = json.loads((ROOT / "docs" / "openlineage" / "ConsistentCatalogEpochRunFacet.json").read_text())
INGEST_FACET_SCHEMA = json.loads((ROOT / "docs" / "openlineage" / "ConsistentCatalogIngestRunFacet.json").read_text())

_FACET = {"type": "object", "required": ["_producer", "_schemaURL"],
          "properties": {"_producer": {"type": "string", "format": "uri"}, "_schemaURL": {"type": "string", "format": "uri"}}}
_SCHEMA_FIELD = {"type": "object", "required": ["name"],
                 "properties": {"name": {"type": "string"}, "type": {"type": "string"},
                                "description": {"type": "string"},
                                "fields": {"type": "array", "items": {"$ref": "#/$defs/SchemaDatasetFacetFields"}}}}
_DATASET_FACETS = {
    "type": "object",
    "additionalProperties": {"$ref": "#/$defs/BaseFacet"},
    "properties": {
        "version": {"allOf": [{"$ref": "#/$defs/BaseFacet"}, {
            "type": "object", "required": ["datasetVersion"], "properties": {"datasetVersion": {"type": "string"}}}]},
        # SchemaDatasetFacet 1-2-0: fields, each a name with an optional type, description and nested fields
        "schema": {"allOf": [{"$ref": "#/$defs/BaseFacet"}, {
            "type": "object", "properties": {"fields": {"type": "array",
                                                        "items": {"$ref": "#/$defs/SchemaDatasetFacetFields"}}}}]},
    },
}
_JOB_FACETS = {
    "type": "object",
    "additionalProperties": {"$ref": "#/$defs/BaseFacet"},
    # SQLJobFacet 1-1-0: the query, an optional dialect
    "properties": {"sql": {"allOf": [{"$ref": "#/$defs/BaseFacet"}, {
        "type": "object", "required": ["query"],
        "properties": {"query": {"type": "string"}, "dialect": {"type": "string"}}}]}},
}
_TAGS_RUN_FACET = {"allOf": [{"$ref": "#/$defs/BaseFacet"}, {  # TagsRunFacet 1-0-0: key, value (required), source
    "type": "object", "properties": {"tags": {"type": "array", "items": {
        "type": "object", "required": ["key", "value"],
        "properties": {"key": {"type": "string"}, "value": {"type": "string"}, "source": {"type": "string"}}}}}}]}
_DATASET = {"type": "object", "required": ["namespace", "name"],
            "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}, "facets": _DATASET_FACETS}}
OPENLINEAGE_SPEC: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {
        "BaseFacet": _FACET,
        "Dataset": _DATASET,
        "SchemaDatasetFacetFields": _SCHEMA_FIELD,
        "Job": {"type": "object", "required": ["namespace", "name"],
                "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}, "facets": _JOB_FACETS}},
        "Run": {"type": "object", "required": ["runId"],
                "properties": {"runId": {"type": "string", "format": "uuid"},
                               "facets": {"type": "object", "additionalProperties": {"$ref": "#/$defs/BaseFacet"},
                                          "properties": {"tags": _TAGS_RUN_FACET,
                                                         "errorMessage": {"allOf": [{"$ref": "#/$defs/BaseFacet"}, {
                                              "type": "object", "required": ["message", "programmingLanguage"],
                                              "properties": {"message": {"type": "string"},
                                                             "programmingLanguage": {"type": "string"},
                                                             "stackTrace": {"type": "string"}}}]}}}}},
        "BaseEvent": {"type": "object", "required": ["eventTime", "producer", "schemaURL"],
                      "properties": {"eventTime": {"type": "string", "format": "date-time"},
                                     "producer": {"type": "string", "format": "uri"},
                                     "schemaURL": {"type": "string", "format": "uri"}}},
        "RunEvent": {"allOf": [{"$ref": "#/$defs/BaseEvent"}, {
            "type": "object", "required": ["run", "job"],
            "properties": {"eventType": {"enum": ["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"]},
                           "run": {"$ref": "#/$defs/Run"}, "job": {"$ref": "#/$defs/Job"},
                           "inputs": {"type": "array", "items": {"$ref": "#/$defs/Dataset"}},
                           "outputs": {"type": "array", "items": {"$ref": "#/$defs/Dataset"}}}}]},
        "JobEvent": {"allOf": [{"$ref": "#/$defs/BaseEvent"}, {
            "type": "object", "required": ["job"],
            "properties": {"job": {"$ref": "#/$defs/Job"},
                           "inputs": {"type": "array", "items": {"$ref": "#/$defs/Dataset"}},
                           "outputs": {"type": "array", "items": {"$ref": "#/$defs/Dataset"}}}}]},
    },
}


def validate(event: dict[str, Any], kind: str = "RunEvent") -> None:
    """Raise jsonschema.ValidationError unless ``event`` is a valid OpenLineage ``kind`` (and our facet, if any,
    is valid against the schema we publish)."""
    schema = {**OPENLINEAGE_SPEC, "$ref": f"#/$defs/{kind}"}
    jsonschema.validate(event, schema, format_checker=jsonschema.FormatChecker())
    assert event["schemaURL"].endswith(f"/OpenLineage.json#/$defs/{kind}"), event["schemaURL"]
    for key, schema in (("consistentCatalog_epoch", EPOCH_FACET_SCHEMA), ("consistentCatalog_ingest", INGEST_FACET_SCHEMA)):
        facet = event.get("run", {}).get("facets", {}).get(key)
        if facet is not None:
            jsonschema.validate(facet, schema, format_checker=jsonschema.FormatChecker())


class Collector:
    """An HTTP endpoint on 127.0.0.1 (a free port) that keeps every JSON body posted to it, with its path and headers.

    ``hold=True``: every request is recorded at once but answered only after ``release()`` (an endpoint that
    accepts and does not answer, until the test lets it). ``wait_for(n)`` waits until ``n`` events arrived: a JVM
    writer's events arrive after its statement returned (they go out from a background thread).
    """

    def __init__(self, *, hold: bool = False) -> None:
        self.events: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.released = threading.Event()
        if not hold:
            self.released.set()
        self._arrived = threading.Condition()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with collector._arrived:
                    collector.paths.append(self.path)
                    collector.headers.append(dict(self.headers.items()))
                    collector.events.append(json.loads(body))
                    collector._arrived.notify_all()
                collector.released.wait(120)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The events once at least ``count`` arrived; AssertionError naming what did arrive after ``timeout`` s."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.events) >= count, timeout):
                raise AssertionError(f"{count} OpenLineage events expected within {timeout:.0f} s, got "
                                     f"{[(e.get('eventType'), e.get('job', {}).get('name')) for e in self.events]}")
            return list(self.events)

    def release(self) -> None:
        """Answer the requests held so far and every later one at once."""
        self.released.set()

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
