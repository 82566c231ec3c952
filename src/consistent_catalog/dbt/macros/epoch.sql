{#-
  The consistent catalog's dbt package (README.md, "dbt"; docs/protocol.md §5.9, §6.10).

  materialized='epoch': the model is one epoch of its job in the consistent catalog.

      {{ config(materialized='epoch', consistent_job='orders') }}   -- job: default the model's name
      SELECT ... FROM {{ ref('stg_orders') }} ...

  runs, in the Spark session whose default catalog is the consistent one (`consistent-catalog spark-conf
  --dbt-profile` renders that profile):

      -- the first run: the table from the model's own output schema, through the plain catalog (DDL through the
      -- consistent catalog is refused)
      CREATE NAMESPACE IF NOT EXISTS `lake`.`ns`;
      CREATE TABLE `lake`.`ns`.`model` (`c1` <type>, ...) USING iceberg;
      -- a later run whose output schema changed: Iceberg schema evolution (added and dropped columns, widened
      -- types); anything else is refused with the way out
      ALTER TABLE `lake`.`ns`.`model` ADD COLUMNS (...) | ALTER COLUMN `c` TYPE bigint | DROP COLUMN `c`;
      SET spark.sql.consistent.job=<job>;
      SET spark.sql.sources.partitionOverwriteMode=STATIC;   -- dynamic: an empty result would keep the old rows
      SET spark.sql.consistent.rebuild=true;                  -- only with --full-refresh (protocol §6.10)
      INSERT OVERWRITE ns.model BY NAME <the model's SQL>;
      RESET spark.sql.consistent.rebuild;                     -- only with --full-refresh
      RESET spark.sql.consistent.job;

  The plugin registers the job on the first write into the new, empty table. The statement's text is the
  epoch's definition (consistent.definition) and the schema id is recorded with it: an edited model, a changed
  schema or --full-refresh computes a new generation of the table at the current barrier, beside the one that serves
  readers, and switches to it when it is published (protocol §6.10; the models downstream follow when they run). An
  edited model that fails leaves the table serving its rows.

  A view model it reads (materialized='view', view.sql) is the statement's own subquery: its recorded SQL in the
  place of its name, so the statement's text holds it.

  Refused before any statement: more than one dbt thread (the job setting belongs to the one Spark session all
  threads share), a default catalog that is not a consistent one, a view in the table's place.
-#}

{% macro consistent_quote(name) -%}
  `{{ name | replace('`', '``') }}`
{%- endmacro %}

{# The value of a Spark SQL setting of the session, or none when it is not set. #}
{% macro consistent_setting(key) -%}
  {%- set rows = run_query("SET `" ~ key ~ "`").rows -%}
  {%- set value = rows[0][1] if rows | length > 0 else none -%}
  {{ return(none if value is none or value == '<undefined>' else value) }}
{%- endmacro %}

{# The plain catalog behind the session's default (consistent) catalog: where the DDL goes. #}
{% macro consistent_plain_catalog() -%}
  {%- set default = consistent_catalog.consistent_setting('spark.sql.defaultCatalog') -%}
  {%- set plain = consistent_catalog.consistent_setting('spark.sql.catalog.' ~ default ~ '.plain-catalog') -%}
  {%- if plain is none -%}
    {{ exceptions.raise_compiler_error(
        "the session's default catalog " ~ default ~ " is not a consistent catalog (no spark.sql.catalog." ~ default
        ~ ".plain-catalog): render the profile with consistent-catalog spark-conf --dbt-profile, whose "
        ~ "server_side_parameters set spark.sql.defaultCatalog to it") }}
  {%- endif -%}
  {{ return({'default': default, 'plain': plain}) }}
{%- endmacro %}

{# [(name, spark type)] of a query, analysed as the INSERT will be (its reads at the session's consistent cut). #}
{% macro consistent_query_columns(sql) -%}
  {%- set columns = [] -%}
  {%- for row in run_query("DESCRIBE QUERY " ~ sql).rows -%}
    {%- do columns.append((row[0], row[1])) -%}
  {%- endfor -%}
  {{ return(columns) }}
{%- endmacro %}

{# [(name, spark type)] of a table of the plain catalog. #}
{% macro consistent_table_columns(qualified) -%}
  {%- set columns = [] -%}
  {%- for row in run_query("DESCRIBE TABLE " ~ qualified).rows -%}
    {%- if not row[0] or row[0].startswith('#') -%}{%- break -%}{%- endif -%}
    {%- do columns.append((row[0], row[1])) -%}
  {%- endfor -%}
  {{ return(columns) }}
{%- endmacro %}

{# Whether Iceberg widens the type `old` to `new` in place (int -> bigint, float -> double, decimal precision). #}
{% macro consistent_widens(old, new) -%}
  {%- set old = old | lower -%}
  {%- set new = new | lower -%}
  {%- if (old, new) in [('int', 'bigint'), ('float', 'double')] -%}{{ return(true) }}{%- endif -%}
  {%- if old.startswith('decimal(') and new.startswith('decimal(') -%}
    {%- set o = old[8:-1].split(',') -%}
    {%- set n = new[8:-1].split(',') -%}
    {{ return(o[1] | trim == n[1] | trim and (n[0] | trim | int) > (o[0] | trim | int)) }}
  {%- endif -%}
  {{ return(false) }}
{%- endmacro %}

{#
  Make the model's table exist with the model's output schema, through the plain catalog: created on the first
  run, evolved (columns added or dropped, types widened) when the model's columns changed, a change Iceberg cannot
  make refused with the way out. Returns the DDL statements it ran.
#}
{% macro consistent_ensure_table(relation, sql) -%}
  {%- set catalogs = consistent_catalog.consistent_plain_catalog() -%}
  {%- set q = consistent_catalog.consistent_quote -%}
  {%- set qualified = q(catalogs['plain']) ~ '.' ~ q(relation.schema) ~ '.' ~ q(relation.identifier) -%}
  {%- set wanted = consistent_catalog.consistent_query_columns(sql) -%}
  {%- for name, type in wanted -%}
    {%- if type | lower in ('void', 'null') -%}
      {{ exceptions.raise_compiler_error(
          "column " ~ name ~ " of model " ~ relation.identifier ~ " has no type (a bare NULL): CAST it, e.g. "
          ~ "CAST(NULL AS string) AS " ~ name) }}
    {%- endif -%}
  {%- endfor -%}
  {%- set ddl = [] -%}
  {%- set existing = load_relation(relation) -%}
  {%- if existing is none -%}
    {%- do ddl.append("CREATE NAMESPACE IF NOT EXISTS " ~ q(catalogs['plain']) ~ "." ~ q(relation.schema)) -%}
    {%- set defs = [] -%}
    {%- for name, type in wanted -%}{%- do defs.append(q(name) ~ " " ~ type) -%}{%- endfor -%}
    {%- do ddl.append("CREATE TABLE " ~ qualified ~ " (" ~ defs | join(", ") ~ ") USING iceberg") -%}
  {%- elif existing.is_view -%}
    {{ exceptions.raise_compiler_error(
        relation ~ " is a view: materialized='epoch' writes Iceberg tables; drop the view (DROP VIEW " ~ relation
        ~ ") and run dbt again") }}
  {%- else -%}
    {%- set have = {} -%}
    {%- for name, type in consistent_catalog.consistent_table_columns(qualified) -%}
      {%- do have.update({name | lower: (name, type)}) -%}
    {%- endfor -%}
    {%- set seen = [] -%}
    {%- set added = [] -%}
    {%- for name, type in wanted -%}
      {%- do seen.append(name | lower) -%}
      {%- if name | lower not in have -%}
        {%- do added.append(q(name) ~ " " ~ type) -%}
      {%- elif have[name | lower][1] | lower != type | lower -%}
        {%- set old = have[name | lower][1] -%}
        {%- if consistent_catalog.consistent_widens(old, type) -%}
          {%- do ddl.append("ALTER TABLE " ~ qualified ~ " ALTER COLUMN " ~ q(have[name | lower][0]) ~ " TYPE " ~ type) -%}
        {%- else -%}
          {{ exceptions.raise_compiler_error(
              relation ~ ": column " ~ name ~ " changes type from " ~ old ~ " to " ~ type ~ ", which Iceberg cannot "
              ~ "evolve in place (it widens int to bigint, float to double, a decimal's precision): keep the type "
              ~ "(CAST it in the model), give the column a new name, or drop the table through the plain catalog "
              ~ "(DROP TABLE " ~ qualified ~ ") and run dbt again") }}
        {%- endif -%}
      {%- endif -%}
    {%- endfor -%}
    {%- if added -%}
      {%- do ddl.append("ALTER TABLE " ~ qualified ~ " ADD COLUMNS (" ~ added | join(", ") ~ ")") -%}
    {%- endif -%}
    {%- for key, pair in have.items() -%}
      {%- if key not in seen -%}
        {%- do ddl.append("ALTER TABLE " ~ qualified ~ " DROP COLUMN " ~ q(pair[0])) -%}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {%- for statement in ddl -%}
    {%- do run_query(statement) -%}
  {%- endfor -%}
  {{ return(ddl) }}
{%- endmacro %}

{#
  dbt run, seed and build create the schemas of the selected nodes first (adapter.create_schema). DDL through the
  consistent catalog is refused, so the namespace is created through the plain catalog. dbt takes a macro of this
  name from an installed package over its own (the root project's, if it has one, over both).
#}
{% macro create_schema(relation) -%}
  {%- set catalogs = consistent_catalog.consistent_plain_catalog() -%}
  {%- call statement('create_schema') -%}
    CREATE NAMESPACE IF NOT EXISTS {{ consistent_catalog.consistent_quote(catalogs['plain']) }}.{{
      consistent_catalog.consistent_quote(relation.without_identifier().schema) }}
  {%- endcall -%}
{%- endmacro %}

{% macro consistent_check_threads(what) -%}
  {%- if target.threads > 1 -%}
    {{ exceptions.raise_compiler_error(
        what ~ " needs one thread (threads: 1 in the profile, no --threads above 1; this run has "
        ~ target.threads ~ "): a model's job is the Spark session's setting spark.sql.consistent.job, and dbt's "
        ~ "threads share that one session") }}
  {%- endif -%}
{%- endmacro %}

{# The model's job (config consistent_job, default its name), checked to be one line without ';'. #}
{% macro consistent_job_of(model) -%}
  {%- set job = config.get('consistent_job') or model['name'] -%}
  {%- if job is not string or not job or '\n' in job or ';' in job -%}
    {{ exceptions.raise_compiler_error(
        "consistent_job of model " ~ model['name'] ~ " must be a job id on one line without ';', not " ~ job) }}
  {%- endif -%}
  {{ return(job) }}
{%- endmacro %}

{# The model's query (its views as their subqueries, view.sql), its table made or evolved first (the DDL logged). #}
{% macro consistent_model_query(relation, model, compiled) -%}
  {%- set query = consistent_catalog.consistent_inline_views(compiled, model) -%}
  {%- for statement in consistent_catalog.consistent_ensure_table(relation, query) -%}
    {{ log("consistent_catalog: " ~ statement, info=true) }}
  {%- endfor -%}
  {{ return(query) }}
{%- endmacro %}

{#
  The whole model as one overwrite epoch (the job set by the caller): the incremental setting reset (an incremental
  model that failed before its RESET must not make this epoch read increments), static overwrite (dynamic: an empty
  result would keep the old rows), a new generation when `rebuild` (--full-refresh).
#}
{% macro consistent_overwrite_epoch(relation, query, rebuild) -%}
  {%- call statement('reset_consistent_incremental') -%}
    RESET spark.sql.consistent.incremental
  {%- endcall -%}
  {%- call statement('overwrite_mode') -%}
    SET spark.sql.sources.partitionOverwriteMode=STATIC
  {%- endcall -%}
  {%- if rebuild -%}
    {%- call statement('consistent_rebuild') -%}
      SET spark.sql.consistent.rebuild=true
    {%- endcall -%}
  {%- endif -%}
  {%- call statement('main') -%}
    INSERT OVERWRITE {{ relation }} BY NAME
    {{ query }}
  {%- endcall -%}
  {%- if rebuild -%}
    {%- call statement('reset_consistent_rebuild') -%}
      RESET spark.sql.consistent.rebuild
    {%- endcall -%}
  {%- endif -%}
{%- endmacro %}

{% materialization epoch, adapter='spark' -%}
  {%- set target_relation = this -%}

  {{ consistent_catalog.consistent_check_threads("materialized='epoch'") }}
  {%- set job = consistent_catalog.consistent_job_of(model) -%}

  {{ run_hooks(pre_hooks) }}

  {%- set query = consistent_catalog.consistent_model_query(target_relation, model, compiled_code) -%}

  {%- call statement('consistent_job') -%}
    SET spark.sql.consistent.job={{ job }}
  {%- endcall -%}
  {{ consistent_catalog.consistent_overwrite_epoch(target_relation, query, should_full_refresh()) }}
  {%- call statement('reset_consistent_job') -%}
    RESET spark.sql.consistent.job
  {%- endcall -%}

  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}
