{#-
  materialized='incremental' on the consistent catalog (README.md, "dbt"; docs/protocol.md §5.5, "Incremental epochs
  in Spark SQL"): each run of the model is one epoch of its job, as materialized='epoch' is, but when
  is_incremental() is true the statement reads only what changed in each source since the sink's last epoch and
  appends it (no unique_key) or merges it by unique_key:

      {{ config(materialized='incremental', unique_key='order_id') }}
      SELECT ... FROM {{ ref('stg_orders') }}
      {% if is_incremental() %} -- nothing to filter: the sources already hold only their new rows {% endif %}

  dbt takes a built-in materialization from a package only when the root project says so (dbt >= 1.8), so a project
  adds one file, macros/consistent_incremental.sql:

      {% materialization incremental, adapter='spark' %}
        {{ return(consistent_catalog.materialization_incremental_spark()) }}
      {% endmaterialization %}

  The run, in the session the profile of `consistent-catalog spark-conf --dbt-profile` configures:

      -- the table from the model's output schema, as materialized='epoch' makes it (consistent_ensure_table)
      SET spark.sql.consistent.job=<job>;
      SET spark.sql.consistent.version=<md5 of the model's raw SQL, its unique_key and the views it reads>;
      -- is_incremental(): the plugin reads each source as its rows appended since the sink's last epoch
      SET spark.sql.consistent.incremental=true;
      INSERT INTO ns.model BY NAME <the model's SQL>;                      -- no unique_key
      MERGE INTO ns.model AS t USING (<the model's SQL>) AS s ON t.k = s.k -- unique_key
        WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *;
      RESET spark.sql.consistent.incremental;
      -- otherwise (the first run, --full-refresh: SET spark.sql.consistent.rebuild=true first): the whole model
      INSERT OVERWRITE ns.model BY NAME <the model's SQL>;

  The plugin fixes the range inside the statement: it plans the epoch's barrier T and its inputs snap(source, T),
  and reads each source from the sink's previous input (its main head's consistent.sources) to that input, so the
  epoch records exactly the range it read. The definition is the declared version, not the statement's text: the
  full and the incremental statements are one definition, and an edited model (or view, or unique_key) computes a
  new generation (its sources read whole, merged into an empty table, switched in when published).

  A source whose rows changed otherwise than by appends in the range (a derived table recomputed by INSERT
  OVERWRITE, a revision) is refused by the plugin (CONSISTENT_READ.NOT_INCREMENTAL) with the way out: dbt run
  --full-refresh -s <model>.
-#}

{# The recorded SQL of each view model `node` reads, "name=SQL" (for the definition's version). #}
{% macro consistent_view_texts(node) -%}
  {%- set texts = [] -%}
  {%- for view, text in consistent_catalog.consistent_read_views(node) -%}
    {%- do texts.append((view.alias or view.name) | lower ~ "=" ~ (text or '')) -%}
  {%- endfor -%}
  {{ return(texts | sort | join('\n')) }}
{%- endmacro %}

{% materialization incremental, adapter='spark' -%}
  {%- set target_relation = this -%}
  {%- set unique_key = config.get('unique_key') -%}
  {%- set keys = [] if unique_key is none else ([unique_key] if unique_key is string else unique_key | list) -%}
  {%- set strategy = config.get('incremental_strategy') or ('merge' if keys else 'append') -%}

  {{ consistent_catalog.consistent_check_threads("materialized='incremental'") }}
  {%- set job = consistent_catalog.consistent_job_of(model) -%}
  {%- if strategy not in ('append', 'merge') or (strategy == 'merge') != (keys | length > 0) -%}
    {{ exceptions.raise_compiler_error(
        "model " ~ model['name'] ~ ": incremental_strategy '" ~ strategy ~ "' with unique_key " ~ unique_key
        ~ " is not one the consistent catalog runs: leave incremental_strategy unset (append without a unique_key, "
        ~ "merge by the unique_key with one)") }}
  {%- endif -%}

  {#- before the table is made: what dbt compiled the model's SQL with -#}
  {%- set incremental = is_incremental() -%}
  {%- set rebuild = should_full_refresh() -%}

  {{ run_hooks(pre_hooks) }}

  {%- set query = consistent_catalog.consistent_model_query(target_relation, model, compiled_code) -%}
  {%- set version = local_md5(model['raw_code'] ~ '\n--unique_key ' ~ keys | join(',') ~ '\n--views\n'
                              ~ consistent_catalog.consistent_view_texts(model)) -%}

  {%- call statement('consistent_job') -%}
    SET spark.sql.consistent.job={{ job }}
  {%- endcall -%}
  {%- call statement('consistent_version') -%}
    SET spark.sql.consistent.version=dbt-incremental:{{ version }}
  {%- endcall -%}
  {%- if incremental -%}
    {%- call statement('consistent_incremental') -%}
      SET spark.sql.consistent.incremental=true
    {%- endcall -%}
    {%- if keys -%}
      {%- set q = consistent_catalog.consistent_quote -%}
      {%- set on = [] -%}
      {%- for key in keys -%}{%- do on.append("t." ~ q(key) ~ " = s." ~ q(key)) -%}{%- endfor -%}
      {%- call statement('main') -%}
        MERGE INTO {{ target_relation }} AS t USING (
        {{ query }}
        ) AS s ON {{ on | join(' AND ') }}
        WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *
      {%- endcall -%}
    {%- else -%}
      {%- call statement('main') -%}
        INSERT INTO {{ target_relation }} BY NAME
        {{ query }}
      {%- endcall -%}
    {%- endif -%}
    {%- call statement('reset_consistent_incremental') -%}
      RESET spark.sql.consistent.incremental
    {%- endcall -%}
  {%- else -%}
    {{ consistent_catalog.consistent_overwrite_epoch(target_relation, query, rebuild) }}
  {%- endif -%}
  {%- call statement('reset_consistent_version') -%}
    RESET spark.sql.consistent.version
  {%- endcall -%}
  {%- call statement('reset_consistent_job') -%}
    RESET spark.sql.consistent.job
  {%- endcall -%}

  {{ run_hooks(post_hooks) }}

  {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}
