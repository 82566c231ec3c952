{#-
  Views on the consistent catalog: a view is the statement's own subquery, not DDL (README.md, "dbt").

  A model with materialized='view' (dbt-spark's own view materialization, unchanged) does not create a view:
  lake_consistent refuses DDL, and a view read by an epoch must be read at that epoch's cut, which only the reading
  statement knows. dbt-spark's view materialization builds the view with get_create_view_as_sql, which a project
  routes here with the package's dispatch (the one dbt seed needs):

      dispatch:
        - macro_namespace: dbt
          search_order: ['<your project>', 'consistent_catalog', 'dbt']

  so `dbt run` of a view model checks that its compiled SQL analyses (DESCRIBE QUERY, its errors at the view) and
  records it, views it reads already inlined, as properties of the view's namespace in the plain catalog
  (consistent.dbt-view.<view>.<i>: the UTF-8 text in hex, in chunks that fit any catalog's property column). Every
  statement that reads the view then carries its SQL in place of its name: an epoch (materialized='epoch', whose
  definition so holds the view's text: an edited view starts new generations of the epochs reading it) and dbt's tests (get_test_sql).
  As with a view in any warehouse, the SQL recorded is the one of the view's last `dbt run`.
-#}

{% macro consistent_view_prefix(name) -%}
  {{ return('consistent.dbt-view.' ~ (name | lower) ~ '.') }}
{%- endmacro %}

{# A Spark SQL string literal holding `text`. #}
{% macro consistent_string_literal(text) -%}
  {{ return("'" ~ text | replace('\\', '\\\\') | replace("'", "\\'") ~ "'") }}
{%- endmacro %}

{# {view name (lower case): its SQL} recorded in the namespace `schema` of the plain catalog. #}
{% macro consistent_recorded_views(schema) -%}
  {%- set catalogs = consistent_catalog.consistent_plain_catalog() -%}
  {%- set q = consistent_catalog.consistent_quote -%}
  {%- set found = [] -%}
  {%- for row in run_query("DESCRIBE NAMESPACE EXTENDED " ~ q(catalogs['plain']) ~ "." ~ q(schema)).rows -%}
    {%- if row[0] == 'Properties' -%}{%- do found.append(row[1]) -%}{%- endif -%}
  {%- endfor -%}
  {%- set properties = found | join(' ') -%}
  {#- the values are hex digits and the counts digits: no comma or parenthesis to confuse the split -#}
  {%- set chunks = {} -%}
  {%- for name, index, value in modules.re.findall('\\(consistent\\.dbt-view\\.([^,()]+)\\.(\\d+|n),([0-9A-Fa-f]*)\\)', properties) -%}
    {%- if name not in chunks -%}{%- do chunks.update({name: {}}) -%}{%- endif -%}
    {%- do chunks[name].update({index: value}) -%}
  {%- endfor -%}
  {%- set views = {} -%}
  {%- for name, parts in chunks.items() if 'n' in parts -%}
    {%- set hex = [] -%}
    {%- for i in range(parts['n'] | int) -%}{%- do hex.append(parts.get(i | string, '')) -%}{%- endfor -%}
    {%- do views.update({name: hex | join('')}) -%}
  {%- endfor -%}
  {%- if views -%}
    {%- set names = views.keys() | list -%}
    {%- set decoded = [] -%}
    {%- for name in names -%}
      {%- do decoded.append("decode(unhex('" ~ views[name] ~ "'), 'UTF-8')") -%}
    {%- endfor -%}
    {%- set row = run_query("SELECT " ~ decoded | join(", ")).rows[0] -%}
    {%- for name in names -%}{%- do views.update({name: row[loop.index0]}) -%}{%- endfor -%}
  {%- endif -%}
  {{ return(views) }}
{%- endmacro %}

{# The view models `node` reads, each as [its graph node, its recorded SQL or none when never run]. #}
{% macro consistent_read_views(node) -%}
  {%- set views = [] -%}
  {%- set recorded = {} -%}
  {%- for uid in node.depends_on.nodes if uid in graph.nodes -%}
    {%- set parent = graph.nodes[uid] -%}
    {%- if parent.resource_type == 'model' and parent.config.materialized == 'view' -%}
      {%- if parent.schema | lower not in recorded -%}
        {%- do recorded.update({parent.schema | lower: consistent_catalog.consistent_recorded_views(parent.schema)}) -%}
      {%- endif -%}
      {%- do views.append([parent, recorded[parent.schema | lower].get((parent.alias or parent.name) | lower)]) -%}
    {%- endif -%}
  {%- endfor -%}
  {{ return(views) }}
{%- endmacro %}

{#
  `sql` of `node` (a model or test of the graph) with each view model it reads replaced by the view's recorded SQL,
  as a subquery: FROM shop.stg_orders AS o becomes FROM (SELECT ...) AS o. A view never run is refused with the
  way out.
#}
{% macro consistent_inline_views(sql, node) -%}
  {%- set result = [sql] -%}  {#- a list: a set inside a Jinja loop does not outlive the iteration -#}
  {%- for view, text in consistent_catalog.consistent_read_views(node) -%}
    {%- if text is none -%}
      {{ exceptions.raise_compiler_error(
          node.name ~ " reads the view " ~ view.name ~ ", which has not been run on the consistent catalog (its SQL "
          ~ "is recorded by its dbt run): dbt run -s " ~ view.name ~ " (or +" ~ node.name ~ ") first") }}
    {%- endif -%}
    {%- set pattern = '(?i)(?<![\\w`.])`?' ~ modules.re.escape(view.schema) ~ '`?\\s*\\.\\s*`?'
                      ~ modules.re.escape(view.alias or view.name) ~ '`?(?![\\w`])' -%}
    {%- do result.append(modules.re.sub(pattern, '(\n' ~ text | replace('\\', '\\\\') ~ '\n)', result[-1])) -%}
  {%- endfor -%}
  {{ return(result[-1]) }}
{%- endmacro %}

{# dbt-spark's view materialization: record the view's SQL instead of CREATE VIEW (the statement it returns runs). #}
{% macro spark__get_create_view_as_sql(relation, sql) -%}
  {{ consistent_catalog.consistent_check_threads("a view") }}
  {%- set catalogs = consistent_catalog.consistent_plain_catalog() -%}
  {%- set q = consistent_catalog.consistent_quote -%}
  {%- set inlined = consistent_catalog.consistent_inline_views(sql, model) -%}
  {#- its errors here, at the view, rather than in every epoch reading it -#}
  {%- do run_query("DESCRIBE QUERY " ~ inlined) -%}
  {%- set hex = run_query("SELECT hex(encode(" ~ consistent_catalog.consistent_string_literal(inlined)
                          ~ ", 'UTF-8'))").rows[0][0] -%}
  {%- set prefix = consistent_catalog.consistent_view_prefix(relation.identifier) -%}
  {%- set size = 900 -%}
  {%- set pairs = [] -%}
  {%- for start in range(0, hex | length, size) -%}
    {%- do pairs.append("'" ~ prefix ~ loop.index0 ~ "' = '" ~ hex[start:start + size] ~ "'") -%}
  {%- endfor -%}
  {%- do pairs.append("'" ~ prefix ~ "n' = '" ~ pairs | length ~ "'") -%}
  {{ log("consistent_catalog: view " ~ relation ~ " recorded in the namespace " ~ catalogs['plain'] ~ "."
         ~ relation.schema ~ " (" ~ inlined | length ~ " characters): read as a subquery by the statements reading it",
         info=true) }}
  ALTER NAMESPACE {{ q(catalogs['plain']) }}.{{ q(relation.schema) }} SET DBPROPERTIES ({{ pairs | join(', ') }})
{%- endmacro %}

{# dbt test on the consistent catalog: a test reading a view reads the view's SQL in its place. #}
{% macro spark__get_test_sql(main_sql, fail_calc, warn_if, error_if, limit) -%}
  {{ return(dbt.default__get_test_sql(consistent_catalog.consistent_inline_views(main_sql, model), fail_calc, warn_if,
                                      error_if, limit)) }}
{%- endmacro %}
