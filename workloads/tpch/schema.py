"""The TPC-H schema (spec clause 1.4) in PostgreSQL DDL, its keys, indexes and row counts."""

from __future__ import annotations

from dataclasses import dataclass

#: Tables in load order (small first, so a failure shows up early and cheaply).
TABLES: tuple[str, ...] = (
    "region",
    "nation",
    "supplier",
    "customer",
    "part",
    "partsupp",
    "orders",
    "lineitem",
)

#: Column definitions per table, in the column order of the generated CSV files.
COLUMNS: dict[str, str] = {
    "region": """
        r_regionkey integer not null,
        r_name char(25) not null,
        r_comment varchar(152) not null""",
    "nation": """
        n_nationkey integer not null,
        n_name char(25) not null,
        n_regionkey integer not null,
        n_comment varchar(152) not null""",
    "supplier": """
        s_suppkey integer not null,
        s_name char(25) not null,
        s_address varchar(40) not null,
        s_nationkey integer not null,
        s_phone char(15) not null,
        s_acctbal numeric(15,2) not null,
        s_comment varchar(101) not null""",
    "customer": """
        c_custkey integer not null,
        c_name varchar(25) not null,
        c_address varchar(40) not null,
        c_nationkey integer not null,
        c_phone char(15) not null,
        c_acctbal numeric(15,2) not null,
        c_mktsegment char(10) not null,
        c_comment varchar(117) not null""",
    "part": """
        p_partkey integer not null,
        p_name varchar(55) not null,
        p_mfgr char(25) not null,
        p_brand char(10) not null,
        p_type varchar(25) not null,
        p_size integer not null,
        p_container char(10) not null,
        p_retailprice numeric(15,2) not null,
        p_comment varchar(23) not null""",
    "partsupp": """
        ps_partkey integer not null,
        ps_suppkey integer not null,
        ps_availqty integer not null,
        ps_supplycost numeric(15,2) not null,
        ps_comment varchar(199) not null""",
    "orders": """
        o_orderkey bigint not null,
        o_custkey integer not null,
        o_orderstatus char(1) not null,
        o_totalprice numeric(15,2) not null,
        o_orderdate date not null,
        o_orderpriority char(15) not null,
        o_clerk char(15) not null,
        o_shippriority integer not null,
        o_comment varchar(79) not null""",
    "lineitem": """
        l_orderkey bigint not null,
        l_partkey integer not null,
        l_suppkey integer not null,
        l_linenumber integer not null,
        l_quantity numeric(15,2) not null,
        l_extendedprice numeric(15,2) not null,
        l_discount numeric(15,2) not null,
        l_tax numeric(15,2) not null,
        l_returnflag char(1) not null,
        l_linestatus char(1) not null,
        l_shipdate date not null,
        l_commitdate date not null,
        l_receiptdate date not null,
        l_shipinstruct char(25) not null,
        l_shipmode char(10) not null,
        l_comment varchar(44) not null""",
}

#: The spec's primary keys (clause 1.4.2.2).
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "region": ("r_regionkey",),
    "nation": ("n_nationkey",),
    "supplier": ("s_suppkey",),
    "customer": ("c_custkey",),
    "part": ("p_partkey",),
    "partsupp": ("ps_partkey", "ps_suppkey"),
    "orders": ("o_orderkey",),
    "lineitem": ("l_orderkey", "l_linenumber"),
}

#: Indexes on the foreign-key columns not already led by a primary key (clause 1.4.2.3).
#: No FOREIGN KEY constraints are declared: they only slow loading and the queries do not
#: need them.
FOREIGN_KEY_INDEXES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("nation", ("n_regionkey",)),
    ("supplier", ("s_nationkey",)),
    ("customer", ("c_nationkey",)),
    ("partsupp", ("ps_suppkey",)),
    ("orders", ("o_custkey",)),
    ("lineitem", ("l_partkey", "l_suppkey")),
    ("lineitem", ("l_suppkey",)),
)


@dataclass(frozen=True)
class RowCountRule:
    """The spec's cardinality of one table at a scale factor (clause 4.2.5)."""

    base: int
    scaled: bool = True
    tolerance: float = 0.0  # relative; lineitem's count is only approximately 6,000,000 * SF

    def expected(self, scale: float) -> int:
        """The row count the spec gives at ``scale``."""
        if not self.scaled:
            return self.base
        return max(1, round(self.base * scale))

    def accepts(self, rows: int, scale: float) -> bool:
        """Whether ``rows`` agrees with the spec at ``scale``."""
        expected = self.expected(scale)
        return abs(rows - expected) <= self.tolerance * expected


ROW_COUNTS: dict[str, RowCountRule] = {
    "region": RowCountRule(5, scaled=False),
    "nation": RowCountRule(25, scaled=False),
    "supplier": RowCountRule(10_000),
    "customer": RowCountRule(150_000),
    "part": RowCountRule(200_000),
    "partsupp": RowCountRule(800_000),
    "orders": RowCountRule(1_500_000),
    "lineitem": RowCountRule(6_000_000, tolerance=0.05),
}

#: Name of the table that records a finished load and its scale factor.
MARKER_TABLE = "harmony_tpch_loaded"
