{#-
  materialized='epoch': the model is one epoch of its job in the consistent catalog (docs/protocol.md §5.9).

      {{ config(materialized='epoch', consistent_job='word-count') }}   -- job: default the model's name
      SELECT word, count(*) AS cnt FROM {{ source('demo', 'words') }} GROUP BY word

  runs, in the Spark session whose default catalog is lake_consistent (profiles.yml):

      SET spark.sql.consistent.job=word-count;
      SET spark.sql.sources.partitionOverwriteMode=STATIC;   -- dynamic: an empty result would keep the old rows
      SET spark.sql.consistent.rebuild=true;                  -- only with --full-refresh (protocol §6.10)
      INSERT OVERWRITE demo.word_counts BY NAME <the model's SQL>;
      RESET spark.sql.consistent.rebuild;                     -- only with --full-refresh
      RESET spark.sql.consistent.job;

  The statement's text is the epoch's definition (consistent.definition): an edited model's next run revises
  the table (and the tables downstream of it) and recomputes it at the current barrier; --full-refresh
  asks for that revision whatever the model's SQL.

  and refuses, before any statement, a table that does not exist (creating it is DDL, which lake_consistent
  refuses) and more than one dbt thread (the job setting belongs to the one Spark session all threads share).
  Why this rather than dbt-spark's table or incremental materializations: README.md beside dbt_project.yml.
-#}
{% materialization epoch, adapter='spark' -%}
  {%- set job = config.get('consistent_job') or model['name'] -%}
  {%- set target_relation = this -%}

  {%- if target.threads > 1 -%}
    {{ exceptions.raise_compiler_error(
        "materialized='epoch' needs one thread (threads: 1 in the profile, no --threads above 1; this run has "
        ~ target.threads ~ "): a model's job is "
        ~ "the Spark session's setting spark.sql.consistent.job, and dbt's threads share that one session") }}
  {%- endif -%}
  {%- if job is not string or not job or '\n' in job or ';' in job -%}
    {{ exceptions.raise_compiler_error(
        "consistent_job of model " ~ model['name'] ~ " must be a job id on one line without ';', not " ~ job) }}
  {%- endif -%}

  {%- set existing_relation = load_relation(this) -%}
  {%- if existing_relation is none -%}
    {{ exceptions.raise_compiler_error(
        target_relation ~ " does not exist: materialized='epoch' writes into a table created beforehand (CREATE "
        ~ "TABLE through lake_consistent is refused). Create it through the plain catalog, e.g. CREATE TABLE "
        ~ "lake." ~ target_relation ~ " (...) USING iceberg, or with pyiceberg, then run dbt again") }}
  {%- elif existing_relation.is_view -%}
    {{ exceptions.raise_compiler_error(
        target_relation ~ " is a view: materialized='epoch' writes Iceberg tables of lake_consistent") }}
  {%- endif -%}

  {{ run_hooks(pre_hooks) }}

  {%- call statement('consistent_job') -%}
    SET spark.sql.consistent.job={{ job }}
  {%- endcall -%}
  {%- call statement('overwrite_mode') -%}
    SET spark.sql.sources.partitionOverwriteMode=STATIC
  {%- endcall -%}
  {%- set rebuild = should_full_refresh() -%}
  {%- if rebuild -%}
    {%- call statement('consistent_rebuild') -%}
      SET spark.sql.consistent.rebuild=true
    {%- endcall -%}
  {%- endif -%}
  {%- call statement('main') -%}
    INSERT OVERWRITE {{ target_relation }} BY NAME
    {{ compiled_code }}
  {%- endcall -%}
  {%- if rebuild -%}
    {%- call statement('reset_consistent_rebuild') -%}
      RESET spark.sql.consistent.rebuild
    {%- endcall -%}
  {%- endif -%}
  {%- call statement('reset_consistent_job') -%}
    RESET spark.sql.consistent.job
  {%- endcall -%}

  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}
