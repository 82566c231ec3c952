SELECT c.customer_id, c.first_name, c.last_name,
       count(o.order_id) AS number_of_orders,
       min(o.order_date) AS first_order
FROM {{ ref('stg_customers') }} AS c LEFT JOIN {{ ref('orders') }} AS o ON c.customer_id = o.customer_id
GROUP BY c.customer_id, c.first_name, c.last_name
