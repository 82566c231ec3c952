SELECT p.id AS payment_id, p.order_id, m.label AS payment_method, p.amount / 100.0 AS amount
FROM {{ source('raw', 'payments') }} AS p JOIN {{ ref('payment_methods') }} AS m ON p.payment_method = m.payment_method
