"""Spark integration: a SparkSession whose Iceberg catalog is the one pyiceberg (and consistent-catalog) uses.

Importing this package imports neither pyspark nor the session module; ``build_session`` and
``configure_spark`` (your own ``SparkSession.builder`` with the catalogs and jars added) import pyspark
lazily. Install the extra with ``pip install 'consistent-catalog[spark]'`` (pyspark; the Iceberg Spark
runtime of its line comes by Maven coordinates, ``spark.jars.packages``); the consistent catalog's plugin jar
of each supported Spark line ships inside the package (``consistent_catalog.spark.lines``). The
names below live in ``consistent_catalog.spark.session`` (loaded on first use).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ICEBERG_RUNTIME_PACKAGE",
    "build_session",
    "configure_spark",
    "ensure_sql_catalog",
    "find_iceberg_runtime_jar",
    "find_jdbc_jars",
    "find_plugin_jar",
    "parse_catalog_uri",
    "parse_spark_defaults",
    "render_spark_defaults",
    "spark_conf",
    "write_spark_defaults",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("consistent_catalog.spark.session"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
