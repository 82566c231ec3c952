-- job count-histogram: demo.word_counts -> demo.count_histogram(cnt, words), how many words have each count
{{ config(consistent_job='count-histogram') }}
SELECT cnt, count(*) AS words FROM {{ ref('word_counts') }} GROUP BY cnt
