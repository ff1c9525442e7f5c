-- An analytic mix over TPC-H SF 0.1 whose sorts spill at work_mem 4MB and fit in memory at
-- 32-64MB (EXPLAIN ANALYZE on the benchmark's cluster: the first sorts 600,000 lineitem rows,
-- 24 MB on disk; the second's parallel group sorts write 6 MB each): the proposals
-- benchmark's workload where work_mem can show an effect. (A count(DISTINCT) per l_suppkey
-- read lineitem through an index in order and never spilled.)
-- @weight 1
SELECT l_orderkey, l_partkey, l_suppkey, l_extendedprice FROM lineitem
ORDER BY l_shipdate, l_extendedprice OFFSET 599000;
-- @weight 1
SELECT l_partkey, l_suppkey, sum(l_quantity) FROM lineitem GROUP BY l_partkey, l_suppkey
ORDER BY 3 DESC LIMIT 10;
