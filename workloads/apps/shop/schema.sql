-- The example application "shop": customers, products, orders and their items.
-- Sizes per --scale N (harmony workload app-setup shop): 10 000 N customers, 1 000 N products,
-- 20 000 N orders of 1-4 items each (about 25 MB per unit of scale).
CREATE TABLE customers (
    id          bigint PRIMARY KEY,
    name        text NOT NULL,
    email       text NOT NULL,
    region      integer NOT NULL,
    created_at  timestamptz NOT NULL
);

CREATE TABLE products (
    id          integer PRIMARY KEY,
    name        text NOT NULL,
    category    integer NOT NULL,
    price       numeric(10, 2) NOT NULL,
    stock       integer NOT NULL
);

CREATE TABLE orders (
    id          bigserial PRIMARY KEY,
    customer_id bigint NOT NULL REFERENCES customers (id),
    created_at  timestamptz NOT NULL,
    status      text NOT NULL,
    total       numeric(12, 2) NOT NULL
);

CREATE TABLE order_items (
    order_id    bigint NOT NULL REFERENCES orders (id),
    product_id  integer NOT NULL REFERENCES products (id),
    qty         integer NOT NULL,
    price       numeric(10, 2) NOT NULL,
    PRIMARY KEY (order_id, product_id)
);

CREATE INDEX orders_customer_created ON orders (customer_id, created_at);
CREATE INDEX orders_created ON orders (created_at);
CREATE INDEX order_items_product ON order_items (product_id);
