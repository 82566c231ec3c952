{{ config(materialized='incremental') }}
-- every payment once, appended as it arrives (no unique_key: an append)
SELECT id AS payment_id, order_id, payment_method, amount FROM {{ source('raw', 'payments') }}
