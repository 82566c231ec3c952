"""The FLIP demo with Spark jobs on a multi-process local cluster, catalog on PostgreSQL, data on S3.

Run as its own process (``python -m tests.harness.cluster '<json args>'`` from the repository root) so
that its JVM starts with the S3A jars: a JVM that another test module started cannot add driver jars
later. Prints a JSON report on stdout's last line.
"""

from __future__ import annotations

import json
import os
import sys
import time

from consistent_catalog import ConsistentCatalog
from tests.harness.servers import find_s3a_jars, s3a_conf

CLUSTER_MASTER = "local-cluster[2,1,1024]"  # a standalone master and 2 workers; each executor its own JVM


def cluster_conf(s3_endpoint: str, access_key: str, secret_key: str) -> dict[str, str]:
    """Spark settings for the cluster run: S3A on driver and executors, small executors."""
    jars = find_s3a_jars()
    assert jars is not None
    classpath = ":".join(jars)  # same machine: a classpath entry, not a 200 MB copy to every executor
    return {
        **s3a_conf(s3_endpoint, access_key, secret_key),
        "spark.driver.extraClassPath": classpath,
        "spark.executor.extraClassPath": classpath,
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
    }


def executor_jvms(spark) -> dict:
    """PIDs of the JVMs that ran tasks: a Python worker's daemon is a child of its executor's JVM."""

    def jvm_of_task(_):
        daemon = os.getppid()
        with open(f"/proc/{daemon}/stat") as f:
            jvm = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{jvm}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode()
        yield jvm, "CoarseGrainedExecutorBackend" in cmdline

    found = spark.sparkContext.parallelize(range(8), 8).mapPartitions(jvm_of_task).distinct().collect()
    return {"driver": spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(),
            "executors": sorted({pid for pid, is_executor in found if is_executor}),
            "others": sorted({pid for pid, is_executor in found if not is_executor})}


def cluster_pipeline_main(argv: list[str]) -> None:
    """The demo's pipeline (``run_demo`` with this cluster's session), reporting every cut it checked."""
    from pyiceberg.catalog.sql import SqlCatalog

    from consistent_catalog.demo import run_demo
    from consistent_catalog.spark.session import build_session

    args = json.loads(argv[0])
    started = time.monotonic()
    catalog = SqlCatalog("lake", uri=args["uri"], warehouse=args["warehouse"], **args["s3"])
    cc = ConsistentCatalog(catalog)
    spark = build_session(args["uri"], args["warehouse"], app_name="flip-on-a-cluster", master=CLUSTER_MASTER,
                          extra_conf=cluster_conf(args["s3"]["s3.endpoint"], args["s3"]["s3.access-key-id"],
                                                  args["s3"]["s3.secret-access-key"]))
    try:
        session_seconds = time.monotonic() - started
        jvms = executor_jvms(spark)
        cuts = []

        def record(read, epoch):
            if epoch < args["epochs"]:  # the cuts read after each epoch, not the final one
                cuts.append(read.cut.to_json())

        run_demo(cc=cc, spark=spark, engine="spark", epochs=args["epochs"], rows_per_epoch=args["rows"],
                 on_cut=record, echo=lambda line: print(line, file=sys.stderr))
        checked = len(cuts)
        master = spark.sparkContext.master
    finally:
        spark.stop()
    print(json.dumps({"master": master, "jvms": jvms, "cuts": cuts, "checked": checked,
                      "session_seconds": session_seconds, "seconds": time.monotonic() - started}))


if __name__ == "__main__":
    cluster_pipeline_main(sys.argv[1:])
