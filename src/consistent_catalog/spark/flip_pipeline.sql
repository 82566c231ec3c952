-- FLIP-276's three-table pipeline (docs/protocol.md, section 7) as plain Spark SQL: one round of its two jobs.
--
--   consistent-catalog spark-conf --write spark-defaults.conf
--   spark-sql --properties-file spark-defaults.conf -f flip_pipeline.sql
--
-- demo.words(word) is the root: words land there as ingests (pyiceberg's cc.ingest, a streaming root, or
-- INSERT INTO lake_consistent.demo.words with no job set). Each INSERT OVERWRITE below, written through
-- lake_consistent while spark.sql.consistent.job names its job, is one epoch of that job (protocol 5.9):
-- the catalog plugin registers the job on its first write, plans the newest barrier at which every source is
-- complete, reads the sources at that barrier, stages the result and publishes it, and prints one line on
-- stderr saying what it did (published, done, watermark, ...). Run the file again for the next round: the
-- process before unregistered its jobs when it exited. After a killed run, pass
-- --conf spark.sql.consistent.takeover=true (or wait for its 5-minute lease to lapse).
-- consistent-catalog demo --sql runs this file once per round while it ingests words between rounds.

-- the definitions' declared version (protocol 6.10): the demo's Python jobs compute the same tables and declare it
-- too, so either language continues the other's epochs instead of revising the tables
SET spark.sql.consistent.version=flip-1;

-- job word-count: demo.words -> demo.word_counts(word, cnt)
SET spark.sql.consistent.job=word-count;
INSERT OVERWRITE lake_consistent.demo.word_counts
SELECT word, count(*) AS cnt FROM lake_consistent.demo.words GROUP BY word;

-- job count-histogram: demo.word_counts -> demo.count_histogram(cnt, words), how many words have each count
SET spark.sql.consistent.job=count-histogram;
INSERT OVERWRITE lake_consistent.demo.count_histogram
SELECT cnt, count(*) AS words FROM lake_consistent.demo.word_counts GROUP BY cnt;

-- a later statement of the same session writing a root is an ingest again
RESET spark.sql.consistent.job;
RESET spark.sql.consistent.version;
