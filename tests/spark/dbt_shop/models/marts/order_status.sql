{{ config(materialized='incremental', unique_key='order_id') }}
-- each order's latest row, merged by order_id
SELECT order_id, customer_id, order_date, status
FROM {{ ref('stg_orders') }}
{% if is_incremental() %}
-- is_incremental(): on the consistent catalog stg_orders now reads only the orders that arrived since this model's
-- last epoch (no filter on {{ this }} needed: the plugin fixes the range and records it)
{% endif %}
