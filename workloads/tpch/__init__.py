"""TPC-H: schema, data loading, the 22 query templates and their substitution parameters."""

from workloads.tpch.load import LoadProgress, LoadResult, load_tpch, loaded_scale
from workloads.tpch.params import default_params, random_params
from workloads.tpch.queries import QUERY_NAMES, QueryInstance, build_query, make_query, query_name

__all__ = [
    "QUERY_NAMES",
    "LoadProgress",
    "LoadResult",
    "QueryInstance",
    "build_query",
    "default_params",
    "load_tpch",
    "loaded_scale",
    "make_query",
    "query_name",
    "random_params",
]
