"""The 22 TPC-H queries (spec clause 2.4) in PostgreSQL dialect, built from the templates of
:mod:`workloads.tpch.templates`.

A template is composed with ``psycopg.sql`` literals from one instance's parameters (never
string formatting), so each instance is a plain statement like the one ``qgen`` prints and
PostgreSQL plans it with the actual values. Q15's view is a CTE, so concurrent streams
never clash over a shared view name.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from psycopg import sql

from harmony_base.errors import WorkloadError
from workloads.tpch.params import Params, default_params, random_params
from workloads.tpch.templates import TEMPLATES

QUERY_NAMES: tuple[str, ...] = tuple(f"Q{i}" for i in range(1, 23))



def _derived(name: str, params: Params) -> dict[str, object]:
    """Values the templates use that are spelled differently from the parameters."""
    values: dict[str, object] = dict(params)
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
    if text not in TEMPLATES:
        raise WorkloadError(f"TPC-H query must be one of Q1..Q22, but got {query!r}")
    return text


def build_query(query: str | int, params: Params) -> QueryInstance:
    """Compose the instance of ``query`` with the given substitution parameters."""
    name = query_name(query)
    values = _derived(name, params)
    try:
        statement = sql.SQL(TEMPLATES[name]).format(
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
