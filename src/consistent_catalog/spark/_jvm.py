"""Every private PySpark attribute the package touches, in one place (PySpark has no public JVM access).

PySpark 3.5's ``SparkSession._jvm``, ``SparkSession._jsparkSession``, ``SparkContext._gateway`` and
``SparkContext._jsc`` are what its own modules use to reach the JVM (and ``SparkSession.Builder._options``
what its builder holds); they are pinned by the
``pyspark==3.5.*`` requirement and checked by ``tests/spark/test_spark_internals.py``. No other
module of the package uses them (that test also greps for it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def jvm(spark: SparkSession) -> Any:
    """The py4j view of the driver's JVM (``jvm.org.apache....``)."""
    return spark._jvm


def java_session(spark: SparkSession) -> Any:
    """The JVM ``SparkSession`` behind ``spark`` (one per PySpark session object)."""
    return spark._jsparkSession


def hadoop_configuration(spark: SparkSession) -> Any:
    """The session's Hadoop ``Configuration`` (file systems of checkpoint locations)."""
    return spark.sparkContext._jsc.hadoopConfiguration()


def start_callback_server(spark: SparkSession) -> Any:
    """Start py4j's callback server (so the JVM can call Python objects); returns the gateway."""
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)
    return gateway


def catalog_plugin(spark: SparkSession, name: str) -> Any:
    """Spark's catalog plugin ``name`` in this session, instantiated now if it was not yet (with the conf as it is)."""
    return java_session(spark).sessionState().catalogManager().catalog(name)


def builder_options(builder: SparkSession.Builder) -> dict[str, str]:
    """The settings a ``SparkSession.Builder`` holds so far (PySpark has no getter; ``getOrCreate`` reads them)."""
    return {str(key): str(value) for key, value in builder._options.items()}
