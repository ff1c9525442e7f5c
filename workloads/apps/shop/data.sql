-- The shop's rows for scale :scale (run by `harmony workload app-setup shop`, which binds
-- :scale); deterministic: setseed fixes random().
SELECT setseed(0.17);

INSERT INTO customers (id, name, email, region, created_at)
SELECT i, 'customer ' || i, 'c' || i || '@example.com', 1 + (i % 10),
       now() - (i % 1000) * interval '1 day'
FROM generate_series(1, 10000 * :scale) AS i;

INSERT INTO products (id, name, category, price, stock)
SELECT i, 'product ' || i, 1 + (i % 20), round((1 + random() * 199)::numeric, 2), 1000000
FROM generate_series(1, 1000 * :scale) AS i;

INSERT INTO orders (customer_id, created_at, status, total)
SELECT 1 + floor(random() * 10000 * :scale)::bigint,
       now() - random() * interval '365 days',
       (ARRAY['new', 'paid', 'shipped', 'delivered'])[1 + floor(random() * 4)::int], 0
FROM generate_series(1, 20000 * :scale);

INSERT INTO order_items (order_id, product_id, qty, price)
SELECT o.id, p.product_id, 1 + floor(random() * 5)::int, pr.price
FROM orders o
CROSS JOIN LATERAL (
    SELECT DISTINCT 1 + floor(random() * 1000 * :scale + o.id * 0)::int AS product_id
    FROM generate_series(1, 1 + (o.id % 4))
) AS p
JOIN products pr ON pr.id = p.product_id;

UPDATE orders o SET total = s.total
FROM (SELECT order_id, sum(qty * price) AS total FROM order_items GROUP BY order_id) AS s
WHERE s.order_id = o.id;
