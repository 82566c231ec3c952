{#-
  dbt seed on the consistent catalog: a seed is a root table, loaded by one keyed ingest (docs/protocol.md §5.6,
  §5.9). dbt's seed materialization calls these through adapter.dispatch('...', 'dbt'), so a project routes them
  here with (dbt_project.yml; README.md, "dbt"):

      dispatch:
        - macro_namespace: dbt
          search_order: ['<your project>', 'consistent_catalog', 'dbt']

  - the table: created through the plain catalog from the CSV's column types (CREATE TABLE through the consistent
    catalog is refused), declared an idle source with no allowance (consistent.idle-after-ms = 0, protocol §5.6):
    a seed changes only when dbt seed loads it, so every epoch reading it advances its watermark to now instead of
    waiting for a newer load; an existing table is kept (never dropped: downstream jobs read it);
  - the rows: one INSERT INTO through the consistent catalog with SET spark.sql.consistent.ingestKey=dbt-seed:
    <seed>:<the first 16 hex digits of dbt's checksum of the file (SHA-256)>: one ingest, and a re-run of the same file lands nothing;
  - a seed file that changed after it was loaded is refused with the way out (a root is append-only: loading the
    new file would append all of its rows again).
-#}

{% macro consistent_seed_key(model) -%}
  {{ return("dbt-seed:" ~ model['name'] ~ ":" ~ (model['checksum']['checksum'] | string)[:16]) }}
{%- endmacro %}

{% macro consistent_seed_table(model) -%}
  {%- set catalogs = consistent_catalog.consistent_plain_catalog() -%}
  {%- set q = consistent_catalog.consistent_quote -%}
  {{ return(q(catalogs['plain']) ~ '.' ~ q(this.schema) ~ '.' ~ q(this.identifier)) }}
{%- endmacro %}

{% macro spark__create_csv_table(model, agate_table) -%}
  {{ consistent_catalog.consistent_check_threads("dbt seed") }}
  {%- set column_override = model['config'].get('column_types', {}) -%}
  {%- set catalogs = consistent_catalog.consistent_plain_catalog() -%}
  {%- set q = consistent_catalog.consistent_quote -%}
  {%- set defs = [] -%}
  {%- for col_name in agate_table.column_names -%}
    {%- set inferred_type = adapter.convert_type(agate_table, loop.index0) -%}
    {%- do defs.append(q(col_name | string) ~ " " ~ column_override.get(col_name, inferred_type)) -%}
  {%- endfor -%}
  {%- set sql -%}
    CREATE TABLE {{ consistent_catalog.consistent_seed_table(model) }} ({{ defs | join(", ") }}) USING iceberg
    TBLPROPERTIES ('consistent.idle-after-ms' = '0')
  {%- endset -%}
  {%- call statement('create_namespace') -%}
    CREATE NAMESPACE IF NOT EXISTS {{ q(catalogs['plain']) }}.{{ q(this.schema) }}
  {%- endcall -%}
  {%- call statement('create_seed_table') -%}{{ sql }}{%- endcall -%}
  {{ return(sql) }}
{%- endmacro %}

{% macro spark__reset_csv_table(model, full_refresh, old_relation, agate_table) -%}
  {#- the table stays (a root of the catalog, read by jobs downstream); a changed file is refused at the load -#}
  {{ return("") }}
{%- endmacro %}

{% macro spark__load_csv_rows(model, agate_table) -%}
  {{ consistent_catalog.consistent_check_threads("dbt seed") }}
  {%- set key = consistent_catalog.consistent_seed_key(model) -%}
  {%- set table = consistent_catalog.consistent_seed_table(model) -%}
  {%- set loaded = run_query("SELECT DISTINCT summary['consistent.ingest-key'] FROM " ~ table ~ ".snapshots WHERE "
                             ~ "summary['consistent.ingest-key'] LIKE 'dbt-seed:" ~ model['name'] ~ ":%'").columns[0].values() -%}
  {%- if loaded and key not in loaded -%}
    {{ exceptions.raise_compiler_error(
        "seed " ~ model['name'] ~ " changed since it was loaded (" ~ loaded | join(", ") ~ ", now " ~ key ~ "): "
        ~ this ~ " is a root table, append-only, and loading the new file would append all of its rows again; put "
        ~ "the new rows in a seed file of their own, or drop the table through the plain catalog (DROP TABLE "
        ~ table ~ ") and run dbt seed again") }}
  {%- endif -%}
  {%- set column_override = model['config'].get('column_types', {}) -%}
  {%- set bindings = [] -%}
  {%- for row in agate_table.rows -%}{%- do bindings.extend(row) -%}{%- endfor -%}
  {%- set sql -%}
    INSERT INTO {{ this.render() }} VALUES
    {% for row in agate_table.rows -%}
      ({%- for col_name in agate_table.column_names -%}
        {%- set type = column_override.get(col_name, adapter.convert_type(agate_table, loop.index0)) -%}
        CAST({{ get_binding_char() }} AS {{ type }}){%- if not loop.last %}, {% endif -%}
      {%- endfor -%}){%- if not loop.last %},{% endif %}
    {% endfor %}
  {%- endset -%}
  {#- one statement, so one ingest: the key makes a re-run of the same file land nothing -#}
  {%- do adapter.add_query("SET spark.sql.consistent.ingestKey=" ~ key, auto_begin=False) -%}
  {%- do adapter.add_query(sql, bindings=bindings, abridge_sql_log=True) -%}
  {%- do adapter.add_query("RESET spark.sql.consistent.ingestKey", auto_begin=False) -%}
  {{ return(sql) }}
{%- endmacro %}
