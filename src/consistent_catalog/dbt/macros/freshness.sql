{#-
  dbt source freshness on the consistent catalog: a source's freshness is its watermark W(X) (docs/protocol.md
  §3): the barrier up to which the table is complete, max(the barrier of main's head, consistent.watermark), read
  from the table's metadata through the plain catalog, not max(loaded_at) over its rows. dbt asks for freshness
  only where a source has a loaded_at_field; its value is not read here (any name will do, e.g.
  loaded_at_field: consistent_watermark). Routed here by the project's dispatch (README.md, "dbt").
-#}
{% macro spark__collect_freshness(source, loaded_at_field, filter) -%}
  {%- set catalogs = consistent_catalog.consistent_plain_catalog() -%}
  {%- set q = consistent_catalog.consistent_quote -%}
  {%- set table = q(catalogs['plain']) ~ '.' ~ q(source.schema) ~ '.' ~ q(source.identifier) -%}
  {%- set head = run_query(
      "SELECT max(CAST(s.summary['consistent.barrier'] AS bigint)) FROM " ~ table ~ ".snapshots AS s JOIN "
      ~ table ~ ".refs AS r ON s.snapshot_id = r.snapshot_id WHERE r.name = 'main'").columns[0].values()[0] -%}
  {%- set marks = [] -%}
  {%- if head is not none -%}{%- do marks.append(head | int) -%}{%- endif -%}
  {%- for row in run_query("SHOW TBLPROPERTIES " ~ table).rows -%}
    {%- if row[0] == 'consistent.watermark' -%}{%- do marks.append(row[1] | int) -%}{%- endif -%}
  {%- endfor -%}
  {% call statement('collect_freshness', fetch_result=True, auto_begin=False) -%}
    SELECT {{ "timestamp_millis(" ~ (marks | max) ~ ")" if marks else "CAST(NULL AS timestamp)" }} AS max_loaded_at,
           {{ current_timestamp() }} AS snapshotted_at
  {%- endcall %}
  {{ return(load_result('collect_freshness')) }}
{%- endmacro %}
