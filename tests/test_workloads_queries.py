"""Unit tests: the 22 query templates and their substitution parameters (no database)."""

from __future__ import annotations

import datetime
import random
from decimal import Decimal

import pytest

from harmony_base.errors import WorkloadError
from workloads.tpch.params import COLORS, NATIONS, REGIONS, default_params, random_params
from workloads.tpch.queries import (
    QUERY_NAMES,
    build_query,
    make_query,
    query_name,
    validation_query,
)


def test_there_are_22_queries_and_names_normalise() -> None:
    assert QUERY_NAMES == tuple(f"Q{i}" for i in range(1, 23))
    assert query_name(6) == query_name("q6") == query_name(" Q6 ") == "Q6"
    for bad in ("Q0", "Q23", "23", "x", ""):
        with pytest.raises(WorkloadError, match="Q1..Q22"):
            query_name(bad)


def test_spec_word_lists_have_their_sizes() -> None:
    assert len(COLORS) == 92 and len(set(COLORS)) == 92
    assert len(NATIONS) == 25 and len(REGIONS) == 5
    assert sum(1 for _, region in NATIONS if region == 1) == 5  # AMERICA


@pytest.mark.parametrize("name", QUERY_NAMES)
def test_every_template_composes_with_random_and_default_params(name: str) -> None:
    instance = make_query(name, random.Random(7), scale=0.01)
    text = instance.text()
    assert text.lower().startswith(("select", "with"))
    assert "{" not in text and "}" not in text  # every placeholder was filled
    assert validation_query(name).text()


def test_same_seed_same_instances_different_seed_differs() -> None:
    a = [make_query("Q6", random.Random(1)).params for _ in range(1)]
    b = [make_query("Q6", random.Random(1)).params for _ in range(1)]
    assert a == b
    rng = random.Random(2)
    draws = {tuple(sorted(make_query("Q6", rng).params.items())) for _ in range(50)}
    assert len(draws) > 20  # each instance gets its own date, discount and quantity


def test_q6_parameters_follow_the_spec_ranges() -> None:
    rng = random.Random(3)
    seen_years, seen_discounts, seen_quantities = set(), set(), set()
    for _ in range(2000):
        p = random_params("Q6", rng)
        assert p["date"].month == 1 and p["date"].day == 1
        seen_years.add(p["date"].year)
        seen_discounts.add(p["discount"])
        seen_quantities.add(p["quantity"])
    assert seen_years == {1993, 1994, 1995, 1996, 1997}
    assert seen_discounts == {Decimal(d) / 100 for d in range(2, 10)}
    assert seen_quantities == {24, 25}


def test_month_and_day_ranges_of_date_parameters() -> None:
    rng = random.Random(4)
    q4 = {random_params("Q4", rng)["date"] for _ in range(3000)}
    assert min(q4) == datetime.date(1993, 1, 1) and max(q4) == datetime.date(1997, 10, 1)
    assert len(q4) == 58  # Jan 1993 .. Oct 1997
    q10 = {random_params("Q10", rng)["date"] for _ in range(2000)}
    assert min(q10) == datetime.date(1993, 2, 1) and max(q10) == datetime.date(1995, 1, 1)
    q3 = {random_params("Q3", rng)["date"] for _ in range(2000)}
    assert min(q3) == datetime.date(1995, 3, 1) and max(q3) == datetime.date(1995, 3, 31)
    q1 = {random_params("Q1", rng)["delta"] for _ in range(2000)}
    assert min(q1) == 60 and max(q1) == 120


def test_parameters_that_must_differ_do() -> None:
    rng = random.Random(5)
    for _ in range(500):
        q7 = random_params("Q7", rng)
        assert q7["nation1"] != q7["nation2"]
        q12 = random_params("Q12", rng)
        assert q12["shipmode1"] != q12["shipmode2"]
        q16 = random_params("Q16", rng)
        assert len(set(q16["sizes"])) == 8 and all(1 <= s <= 50 for s in q16["sizes"])
        q22 = random_params("Q22", rng)
        assert len(set(q22["codes"])) == 7 and all(10 <= int(c) <= 34 for c in q22["codes"])
        q8 = random_params("Q8", rng)
        assert REGIONS[dict(NATIONS)[q8["nation"]]] == q8["region"]
        assert len(q8["type"].split()) == 3


def test_q11_fraction_scales_inversely_with_the_scale_factor() -> None:
    assert default_params("Q11", 1.0)["fraction"] == Decimal("0.0001")
    assert default_params("Q11", 0.01)["fraction"] == Decimal("0.01")
    assert random_params("Q11", random.Random(0), 10)["fraction"] == Decimal("0.00001")


def test_validation_instances_are_the_spec_ones() -> None:
    q6 = validation_query("Q6").text()
    assert "'1994-01-01'::date" in q6 and "0.06 - 0.01" in q6 and "l_quantity < 24" in q6
    q13 = validation_query("Q13").text()
    assert "'%special%requests%'" in q13
    q16 = validation_query("Q16").text()
    assert "(49, 14, 23, 45, 19, 3, 36, 9)" in q16 and "'MEDIUM POLISHED%'" in q16


def test_q15_uses_a_cte_not_a_shared_view() -> None:
    text = make_query("Q15", random.Random(0)).text().lower()
    assert text.startswith("with revenue0") and "create view" not in text


def test_missing_parameter_and_bad_scale_are_clear() -> None:
    with pytest.raises(WorkloadError, match="needs the parameter 'quantity'"):
        build_query("Q6", {"date": datetime.date(1994, 1, 1), "discount": Decimal("0.06")})
    with pytest.raises(WorkloadError, match="scale factor must be > 0"):
        random_params("Q6", random.Random(0), 0)


def test_literals_are_escaped_not_formatted() -> None:
    hostile = "x'; drop table lineitem; --"
    text = build_query("Q21", {"nation": hostile}).text()
    assert "'x''; drop table lineitem; --'" in text
