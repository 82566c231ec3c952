WITH paid AS (
    SELECT order_id, sum(amount) AS amount FROM {{ ref('stg_payments') }} GROUP BY order_id
)
SELECT o.order_id, o.customer_id, o.order_date, o.status, coalesce(p.amount, 0) AS amount
FROM {{ ref('stg_orders') }} AS o LEFT JOIN paid AS p ON o.order_id = p.order_id
