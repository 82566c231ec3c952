{#-
  CREATE TABLE AS SELECT on the consistent catalog: refused up front, naming the way out (README.md, "dbt").

  dbt's own table-making materializations (dbt-spark's `table`, and its `incremental` when the project has not opted
  in to the package's) make their table with create_table_as, which a project routes here with the package's
  dispatch (the one dbt seed and views need). lake_consistent refuses DDL and a CREATE TABLE AS SELECT would be no
  epoch (its views not inlined either), so the plugin would fail the statement with an error about its parts; this
  says what the model needs instead, before any SQL runs.
-#}
{% macro spark__create_table_as(temporary, relation, compiled_code, language='sql') -%}
  {%- set materialized = model['config']['materialized'] if model is mapping and 'config' in model else none -%}
  {%- set open, close, lb, rb = '{' ~ '%', '%' ~ '}', '{' ~ '{', '}' ~ '}' -%}
  {%- if materialized == 'incremental' -%}
    {{ exceptions.raise_compiler_error(
        "model " ~ model['name'] ~ ": materialized='incremental' is dbt-spark's own materialization in this project, "
        ~ "which would CREATE TABLE AS SELECT (DDL the consistent catalog refuses; no epoch). dbt takes the "
        ~ "consistent_catalog package's incremental materialization only when the project names it: add the file "
        ~ "macros/consistent_incremental.sql holding\n  " ~ open ~ " materialization incremental, adapter='spark' "
        ~ close ~ " " ~ lb ~ " return(consistent_catalog.materialization_incremental_spark()) " ~ rb ~ " " ~ open
        ~ " endmaterialization " ~ close ~ "\n(README.md, dbt: Incremental models)") }}
  {%- else -%}
    {{ exceptions.raise_compiler_error(
        "model " ~ (model['name'] if model is mapping and 'name' in model else relation) ~ ": materialized='"
        ~ materialized ~ "' would CREATE TABLE AS SELECT " ~ relation ~ ", DDL the consistent catalog refuses: "
        ~ "write the model as materialized='epoch' (each run one epoch of its job, the table made from the "
        ~ "model's output schema) or materialized='incremental' (README.md, dbt)") }}
  {%- endif -%}
{%- endmacro %}
