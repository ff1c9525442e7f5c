-- The shop's workload as plain SQL: each statement is one unit of work, drawn with the weight
-- of its `-- @weight` line; `-- @param name = <pgbench expression>` lines draw its parameters
-- (random, random_zipfian, random_exponential, random_gaussian... over :scale).
-- @weight 4
-- @param cid = random_zipfian(1, 10000 * :scale, 1.1)
SELECT id, name, email, region FROM customers WHERE id = :cid;

-- @weight 2
-- @param cid = random_zipfian(1, 10000 * :scale, 1.1)
SELECT id, created_at, status, total FROM orders WHERE customer_id = :cid
    ORDER BY created_at DESC LIMIT 10;

-- @weight 1
-- @param region = random(1, 10)
SELECT p.category, count(DISTINCT o.id) AS orders, sum(oi.qty * oi.price) AS revenue
FROM orders o
JOIN customers c ON c.id = o.customer_id
JOIN order_items oi ON oi.order_id = o.id
JOIN products p ON p.id = oi.product_id
WHERE c.region = :region AND o.created_at > now() - interval '90 days'
GROUP BY p.category
ORDER BY revenue DESC;
