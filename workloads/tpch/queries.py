"""The 22 TPC-H query templates (spec clause 2.4) in PostgreSQL dialect.

A template is composed with ``psycopg.sql`` literals from one instance's parameters (never
string formatting), so each instance is a plain statement like the one ``qgen`` prints and
PostgreSQL plans it with the actual values. Q15's view is a CTE, so concurrent streams
never clash over a shared view name.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from harmony.base.errors import WorkloadError
from workloads.tpch.params import Params, default_params, random_params

QUERY_NAMES: tuple[str, ...] = tuple(f"Q{i}" for i in range(1, 23))

_TEMPLATES: dict[str, str] = {
    "Q1": """
select l_returnflag, l_linestatus,
       sum(l_quantity) as sum_qty,
       sum(l_extendedprice) as sum_base_price,
       sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge,
       avg(l_quantity) as avg_qty,
       avg(l_extendedprice) as avg_price,
       avg(l_discount) as avg_disc,
       count(*) as count_order
from lineitem
where l_shipdate <= date '1998-12-01' - {delta} * interval '1 day'
group by l_returnflag, l_linestatus
order by l_returnflag, l_linestatus""",
    "Q2": """
select s_acctbal, s_name, n_name, p_partkey, p_mfgr, s_address, s_phone, s_comment
from part, supplier, partsupp, nation, region
where p_partkey = ps_partkey
  and s_suppkey = ps_suppkey
  and p_size = {size}
  and p_type like {type_pattern}
  and s_nationkey = n_nationkey
  and n_regionkey = r_regionkey
  and r_name = {region}
  and ps_supplycost = (
      select min(ps_supplycost)
      from partsupp, supplier, nation, region
      where p_partkey = ps_partkey
        and s_suppkey = ps_suppkey
        and s_nationkey = n_nationkey
        and n_regionkey = r_regionkey
        and r_name = {region})
order by s_acctbal desc, n_name, s_name, p_partkey
limit 100""",
    "Q3": """
select l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue,
       o_orderdate, o_shippriority
from customer, orders, lineitem
where c_mktsegment = {segment}
  and c_custkey = o_custkey
  and l_orderkey = o_orderkey
  and o_orderdate < {date}
  and l_shipdate > {date}
group by l_orderkey, o_orderdate, o_shippriority
order by revenue desc, o_orderdate
limit 10""",
    "Q4": """
select o_orderpriority, count(*) as order_count
from orders
where o_orderdate >= {date}
  and o_orderdate < {date} + interval '3 months'
  and exists (
      select * from lineitem
      where l_orderkey = o_orderkey and l_commitdate < l_receiptdate)
group by o_orderpriority
order by o_orderpriority""",
    "Q5": """
select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue
from customer, orders, lineitem, supplier, nation, region
where c_custkey = o_custkey
  and l_orderkey = o_orderkey
  and l_suppkey = s_suppkey
  and c_nationkey = s_nationkey
  and s_nationkey = n_nationkey
  and n_regionkey = r_regionkey
  and r_name = {region}
  and o_orderdate >= {date}
  and o_orderdate < {date} + interval '1 year'
group by n_name
order by revenue desc""",
    "Q6": """
select sum(l_extendedprice * l_discount) as revenue
from lineitem
where l_shipdate >= {date}
  and l_shipdate < {date} + interval '1 year'
  and l_discount between {discount} - 0.01 and {discount} + 0.01
  and l_quantity < {quantity}""",
    "Q7": """
select supp_nation, cust_nation, l_year, sum(volume) as revenue
from (
    select n1.n_name as supp_nation, n2.n_name as cust_nation,
           extract(year from l_shipdate) as l_year,
           l_extendedprice * (1 - l_discount) as volume
    from supplier, lineitem, orders, customer, nation n1, nation n2
    where s_suppkey = l_suppkey
      and o_orderkey = l_orderkey
      and c_custkey = o_custkey
      and s_nationkey = n1.n_nationkey
      and c_nationkey = n2.n_nationkey
      and ((n1.n_name = {nation1} and n2.n_name = {nation2})
           or (n1.n_name = {nation2} and n2.n_name = {nation1}))
      and l_shipdate between date '1995-01-01' and date '1996-12-31'
) as shipping
group by supp_nation, cust_nation, l_year
order by supp_nation, cust_nation, l_year""",
    "Q8": """
select o_year,
       sum(case when nation = {nation} then volume else 0 end) / sum(volume) as mkt_share
from (
    select extract(year from o_orderdate) as o_year,
           l_extendedprice * (1 - l_discount) as volume,
           n2.n_name as nation
    from part, supplier, lineitem, orders, customer, nation n1, nation n2, region
    where p_partkey = l_partkey
      and s_suppkey = l_suppkey
      and l_orderkey = o_orderkey
      and o_custkey = c_custkey
      and c_nationkey = n1.n_nationkey
      and n1.n_regionkey = r_regionkey
      and r_name = {region}
      and s_nationkey = n2.n_nationkey
      and o_orderdate between date '1995-01-01' and date '1996-12-31'
      and p_type = {type}
) as all_nations
group by o_year
order by o_year""",
    "Q9": """
select nation, o_year, sum(amount) as sum_profit
from (
    select n_name as nation,
           extract(year from o_orderdate) as o_year,
           l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity as amount
    from part, supplier, lineitem, partsupp, orders, nation
    where s_suppkey = l_suppkey
      and ps_suppkey = l_suppkey
      and ps_partkey = l_partkey
      and p_partkey = l_partkey
      and o_orderkey = l_orderkey
      and s_nationkey = n_nationkey
      and p_name like {color_pattern}
) as profit
group by nation, o_year
order by nation, o_year desc""",
    "Q10": """
select c_custkey, c_name, sum(l_extendedprice * (1 - l_discount)) as revenue,
       c_acctbal, n_name, c_address, c_phone, c_comment
from customer, orders, lineitem, nation
where c_custkey = o_custkey
  and l_orderkey = o_orderkey
  and o_orderdate >= {date}
  and o_orderdate < {date} + interval '3 months'
  and l_returnflag = 'R'
  and c_nationkey = n_nationkey
group by c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment
order by revenue desc
limit 20""",
    "Q11": """
select ps_partkey, sum(ps_supplycost * ps_availqty) as value
from partsupp, supplier, nation
where ps_suppkey = s_suppkey
  and s_nationkey = n_nationkey
  and n_name = {nation}
group by ps_partkey
having sum(ps_supplycost * ps_availqty) > (
    select sum(ps_supplycost * ps_availqty) * {fraction}
    from partsupp, supplier, nation
    where ps_suppkey = s_suppkey
      and s_nationkey = n_nationkey
      and n_name = {nation})
order by value desc""",
    "Q12": """
select l_shipmode,
       sum(case when o_orderpriority = '1-URGENT' or o_orderpriority = '2-HIGH'
                then 1 else 0 end) as high_line_count,
       sum(case when o_orderpriority <> '1-URGENT' and o_orderpriority <> '2-HIGH'
                then 1 else 0 end) as low_line_count
from orders, lineitem
where o_orderkey = l_orderkey
  and l_shipmode in ({shipmode1}, {shipmode2})
  and l_commitdate < l_receiptdate
  and l_shipdate < l_commitdate
  and l_receiptdate >= {date}
  and l_receiptdate < {date} + interval '1 year'
group by l_shipmode
order by l_shipmode""",
    "Q13": """
select c_count, count(*) as custdist
from (
    select c_custkey, count(o_orderkey)
    from customer left outer join orders
         on c_custkey = o_custkey and o_comment not like {comment_pattern}
    group by c_custkey
) as c_orders (c_custkey, c_count)
group by c_count
order by custdist desc, c_count desc""",
    "Q14": """
select 100.00 * sum(case when p_type like 'PROMO%' then l_extendedprice * (1 - l_discount)
                         else 0 end)
       / sum(l_extendedprice * (1 - l_discount)) as promo_revenue
from lineitem, part
where l_partkey = p_partkey
  and l_shipdate >= {date}
  and l_shipdate < {date} + interval '1 month'""",
    "Q15": """
with revenue0 (supplier_no, total_revenue) as (
    select l_suppkey, sum(l_extendedprice * (1 - l_discount))
    from lineitem
    where l_shipdate >= {date}
      and l_shipdate < {date} + interval '3 months'
    group by l_suppkey)
select s_suppkey, s_name, s_address, s_phone, total_revenue
from supplier, revenue0
where s_suppkey = supplier_no
  and total_revenue = (select max(total_revenue) from revenue0)
order by s_suppkey""",
    "Q16": """
select p_brand, p_type, p_size, count(distinct ps_suppkey) as supplier_cnt
from partsupp, part
where p_partkey = ps_partkey
  and p_brand <> {brand}
  and p_type not like {type_pattern}
  and p_size in ({sizes})
  and ps_suppkey not in (
      select s_suppkey from supplier where s_comment like '%Customer%Complaints%')
group by p_brand, p_type, p_size
order by supplier_cnt desc, p_brand, p_type, p_size""",
    "Q17": """
select sum(l_extendedprice) / 7.0 as avg_yearly
from lineitem, part
where p_partkey = l_partkey
  and p_brand = {brand}
  and p_container = {container}
  and l_quantity < (
      select 0.2 * avg(l_quantity) from lineitem where l_partkey = p_partkey)""",
    "Q18": """
select c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice, sum(l_quantity)
from customer, orders, lineitem
where o_orderkey in (
      select l_orderkey from lineitem
      group by l_orderkey having sum(l_quantity) > {quantity})
  and c_custkey = o_custkey
  and o_orderkey = l_orderkey
group by c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice
order by o_totalprice desc, o_orderdate
limit 100""",
    "Q19": """
select sum(l_extendedprice * (1 - l_discount)) as revenue
from lineitem, part
where (p_partkey = l_partkey
       and p_brand = {brand1}
       and p_container in ('SM CASE', 'SM BOX', 'SM PACK', 'SM PKG')
       and l_quantity >= {quantity1} and l_quantity <= {quantity1} + 10
       and p_size between 1 and 5
       and l_shipmode in ('AIR', 'AIR REG')
       and l_shipinstruct = 'DELIVER IN PERSON')
   or (p_partkey = l_partkey
       and p_brand = {brand2}
       and p_container in ('MED BAG', 'MED BOX', 'MED PKG', 'MED PACK')
       and l_quantity >= {quantity2} and l_quantity <= {quantity2} + 10
       and p_size between 1 and 10
       and l_shipmode in ('AIR', 'AIR REG')
       and l_shipinstruct = 'DELIVER IN PERSON')
   or (p_partkey = l_partkey
       and p_brand = {brand3}
       and p_container in ('LG CASE', 'LG BOX', 'LG PACK', 'LG PKG')
       and l_quantity >= {quantity3} and l_quantity <= {quantity3} + 10
       and p_size between 1 and 15
       and l_shipmode in ('AIR', 'AIR REG')
       and l_shipinstruct = 'DELIVER IN PERSON')""",
    "Q20": """
select s_name, s_address
from supplier, nation
where s_suppkey in (
      select ps_suppkey from partsupp
      where ps_partkey in (select p_partkey from part where p_name like {color_pattern})
        and ps_availqty > (
            select 0.5 * sum(l_quantity) from lineitem
            where l_partkey = ps_partkey
              and l_suppkey = ps_suppkey
              and l_shipdate >= {date}
              and l_shipdate < {date} + interval '1 year'))
  and s_nationkey = n_nationkey
  and n_name = {nation}
order by s_name""",
    "Q21": """
select s_name, count(*) as numwait
from supplier, lineitem l1, orders, nation
where s_suppkey = l1.l_suppkey
  and o_orderkey = l1.l_orderkey
  and o_orderstatus = 'F'
  and l1.l_receiptdate > l1.l_commitdate
  and exists (
      select * from lineitem l2
      where l2.l_orderkey = l1.l_orderkey and l2.l_suppkey <> l1.l_suppkey)
  and not exists (
      select * from lineitem l3
      where l3.l_orderkey = l1.l_orderkey
        and l3.l_suppkey <> l1.l_suppkey
        and l3.l_receiptdate > l3.l_commitdate)
  and s_nationkey = n_nationkey
  and n_name = {nation}
group by s_name
order by numwait desc, s_name
limit 100""",
    "Q22": """
select cntrycode, count(*) as numcust, sum(c_acctbal) as totacctbal
from (
    select substring(c_phone from 1 for 2) as cntrycode, c_acctbal
    from customer
    where substring(c_phone from 1 for 2) in ({codes})
      and c_acctbal > (
          select avg(c_acctbal) from customer
          where c_acctbal > 0.00 and substring(c_phone from 1 for 2) in ({codes}))
      and not exists (select * from orders where o_custkey = c_custkey)
) as custsale
group by cntrycode
order by cntrycode""",
}


def _derived(name: str, params: Params) -> dict[str, Any]:
    """Values the templates use that are spelled differently from the parameters."""
    values: dict[str, Any] = dict(params)
    if name == "Q2":
        values["type_pattern"] = f"%{params['type']}"
    elif name == "Q9":
        values["color_pattern"] = f"%{params['color']}%"
    elif name == "Q13":
        values["comment_pattern"] = f"%{params['word1']}%{params['word2']}%"
    elif name == "Q16":
        values["type_pattern"] = f"{params['type']}%"
    elif name == "Q20":
        values["color_pattern"] = f"{params['color']}%"
    return values


def _literal(value: object) -> sql.Composable:
    if isinstance(value, tuple):
        return sql.SQL(", ").join(sql.Literal(v) for v in value)
    return sql.Literal(value)


@dataclass(frozen=True)
class QueryInstance:
    """One executable instance of a TPC-H query with its substitution parameters."""

    name: str
    params: Params
    statement: sql.Composed

    def text(self) -> str:
        """The statement as SQL text (e.g. to print or to run in psql)."""
        return self.statement.as_string(None).strip()


def query_name(query: str | int) -> str:
    """Normalise ``6``, ``"6"``, ``"q6"`` or ``"Q6"`` to ``"Q6"``; raise WorkloadError otherwise."""
    text = str(query).strip().upper()
    if not text.startswith("Q"):
        text = f"Q{text}"
    if text not in _TEMPLATES:
        raise WorkloadError(f"TPC-H query must be one of Q1..Q22, but got {query!r}")
    return text


def build_query(query: str | int, params: Params) -> QueryInstance:
    """Compose the instance of ``query`` with the given substitution parameters."""
    name = query_name(query)
    values = _derived(name, params)
    try:
        statement = sql.SQL(_TEMPLATES[name]).format(
            **{key: _literal(value) for key, value in values.items()}
        )
    except KeyError as exc:
        raise WorkloadError(
            f"TPC-H {name} needs the parameter {exc.args[0]!r}, but got only {sorted(params)}"
        ) from exc
    return QueryInstance(name, dict(params), statement)


def make_query(query: str | int, rng: random.Random, scale: float = 1.0) -> QueryInstance:
    """A fresh instance of ``query`` with parameters drawn from ``rng`` per the spec's rules."""
    name = query_name(query)
    return build_query(name, random_params(name, rng, scale))


def validation_query(query: str | int, scale: float = 1.0) -> QueryInstance:
    """The instance with the spec's validation parameters (the published SF 1 answers)."""
    name = query_name(query)
    return build_query(name, default_params(name, scale))
