-- An analytic mix over TPC-H SF 0.1 whose sorts and hashes spill at work_mem 4MB (600,000
-- lineitem rows sorted or hashed whole) and fit in memory at 32-64MB: the proposals
-- benchmark's workload where work_mem can show an effect.
-- @weight 1
SELECT l_suppkey, count(DISTINCT l_partkey) FROM lineitem GROUP BY l_suppkey;
-- @weight 1
SELECT o_orderpriority, count(*), sum(l_extendedprice)
FROM orders JOIN lineitem ON l_orderkey = o_orderkey GROUP BY o_orderpriority;
-- @weight 1
SELECT count(*) FROM (SELECT rank() OVER (PARTITION BY l_partkey ORDER BY l_extendedprice DESC)
                      FROM lineitem) ranked;
