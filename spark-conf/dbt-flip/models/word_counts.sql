-- job word-count: demo.words -> demo.word_counts(word, cnt), as in spark-conf/flip-pipeline.sql
{{ config(consistent_job='word-count') }}
SELECT word, count(*) AS cnt FROM {{ source('demo', 'words') }} GROUP BY word
