"""What the tests (and ``bench/``) run on, but that is not itself a test.

``lake`` (schemas, a SQLite catalog), ``builders`` (hand-built snapshots and TableStates), ``flip`` (the
FLIP-276 invariants recomputed from raw rows), ``transforms`` (epoch transforms the workers share),
``servers`` (PostgreSQL and moto's S3 on 127.0.0.1), ``concurrent`` (jobs, ingesters and readers as
processes), ``cluster`` (the demo on a multi-process Spark cluster), ``fencing_worker`` (job instances
as processes) and ``crash`` (the crash-injection worker, independent oracle, driver and scenarios).
Benchmarks import these as ``tests.harness...`` when run from the repository root.
"""
