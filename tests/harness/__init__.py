"""What the tests (and ``bench/``) run on, but that is not itself a test.

``lake`` (schemas, a SQLite catalog), ``builders`` (hand-built snapshots and TableStates), ``metadata_docs``
(hand-made metadata JSON, the lean decoder's comparison with pyiceberg's parse), ``simulation`` (the pipeline
simulation, its model) and ``oracle`` (the simulation's independent expectations and checks),
``random_histories`` (its runs as conformance cases), ``flip`` (the FLIP-276 invariants recomputed from raw
rows), ``transforms`` (epoch transforms the workers share),
``servers`` (PostgreSQL and moto's S3 on 127.0.0.1), ``concurrent`` (jobs, ingesters and readers as
processes), ``cluster`` (the demo on a multi-process Spark cluster), ``fencing_worker`` (job instances
as processes), ``source`` (the package's own lines, for boundary tests) and ``crash`` (the crash-injection
worker, independent oracle, driver and scenarios).
Test modules import what they share from here, never from one another; benchmarks import these as
``tests.harness...`` when run from the repository root.
"""
