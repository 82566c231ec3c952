{#- materialized='incremental' from the consistent_catalog package (README.md, "dbt"): dbt takes a built-in
    materialization from a package only when the root project names it so -#}
{% materialization incremental, adapter='spark' %}
  {{ return(consistent_catalog.materialization_incremental_spark()) }}
{% endmaterialization %}
