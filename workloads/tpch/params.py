"""Substitution parameters of the 22 TPC-H queries (spec clause 2.4), drawn like ``qgen``.

Each query has a generator that draws its parameters from a ``random.Random`` following the
spec's rules, and the spec's validation parameters (``default_params``), with which the
published SF 1 answers hold. Values are typed (``datetime.date``, ``Decimal``, ``int``,
``str``, tuples); the templates in :mod:`workloads.tpch.queries` turn them into literals.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable
from decimal import Decimal

from harmony_base.errors import WorkloadError

Params = dict[str, object]

#: Regions (clause 4.2.3), index = r_regionkey.
REGIONS: tuple[str, ...] = ("AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST")

#: Nations and their region keys (clause 4.2.3), index = n_nationkey.
NATIONS: tuple[tuple[str, int], ...] = (
    ("ALGERIA", 0), ("ARGENTINA", 1), ("BRAZIL", 1), ("CANADA", 1), ("EGYPT", 4),
    ("ETHIOPIA", 0), ("FRANCE", 3), ("GERMANY", 3), ("INDIA", 2), ("INDONESIA", 2),
    ("IRAN", 4), ("IRAQ", 4), ("JAPAN", 2), ("JORDAN", 4), ("KENYA", 0),
    ("MOROCCO", 0), ("MOZAMBIQUE", 0), ("PERU", 1), ("CHINA", 2), ("ROMANIA", 3),
    ("SAUDI ARABIA", 4), ("VIETNAM", 2), ("RUSSIA", 3), ("UNITED KINGDOM", 3),
    ("UNITED STATES", 1),
)  # fmt: skip

TYPE_SYLLABLE_1 = ("STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO")
TYPE_SYLLABLE_2 = ("ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED")
TYPE_SYLLABLE_3 = ("TIN", "NICKEL", "BRASS", "STEEL", "COPPER")
CONTAINER_SYLLABLE_1 = ("SM", "LG", "MED", "JUMBO", "WRAP")
CONTAINER_SYLLABLE_2 = ("CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM")
SEGMENTS = ("AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD")
SHIP_MODES = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")
Q13_WORDS_1 = ("special", "pending", "unusual", "express")
Q13_WORDS_2 = ("packages", "requests", "accounts", "deposits")

#: The words p_name is made of (clause 4.2.3); Q9 and Q20 draw a colour from them.
COLORS: tuple[str, ...] = (
    "almond", "antique", "aquamarine", "azure", "beige", "bisque", "black", "blanched",
    "blue", "blush", "brown", "burlywood", "burnished", "chartreuse", "chiffon", "chocolate",
    "coral", "cornflower", "cornsilk", "cream", "cyan", "dark", "deep", "dim", "dodger",
    "drab", "firebrick", "floral", "forest", "frosted", "gainsboro", "ghost", "goldenrod",
    "green", "grey", "honeydew", "hot", "indian", "ivory", "khaki", "lace", "lavender",
    "lawn", "lemon", "light", "lime", "linen", "magenta", "maroon", "medium", "metallic",
    "midnight", "mint", "misty", "moccasin", "navajo", "navy", "olive", "orange", "orchid",
    "pale", "papaya", "peach", "peru", "pink", "plum", "powder", "puff", "purple", "red",
    "rose", "rosy", "royal", "saddle", "salmon", "sandy", "seashell", "sienna", "sky",
    "slate", "smoke", "snow", "spring", "steel", "tan", "thistle", "tomato", "turquoise",
    "violet", "wheat", "white", "yellow",
)  # fmt: skip


def _nation(rng: random.Random) -> str:
    return rng.choice(NATIONS)[0]


def _brand(rng: random.Random) -> str:
    return f"Brand#{rng.randint(1, 5)}{rng.randint(1, 5)}"


def _month_start(
    rng: random.Random, first: tuple[int, int], last: tuple[int, int]
) -> datetime.date:
    """First day of a month drawn uniformly from ``first`` to ``last`` (year, month), inclusive."""
    lo = first[0] * 12 + first[1] - 1
    hi = last[0] * 12 + last[1] - 1
    index = rng.randint(lo, hi)
    return datetime.date(index // 12, index % 12 + 1, 1)


def _year_start(rng: random.Random) -> datetime.date:
    return datetime.date(rng.randint(1993, 1997), 1, 1)


def _q1(rng: random.Random, scale: float) -> Params:
    return {"delta": rng.randint(60, 120)}


def _q2(rng: random.Random, scale: float) -> Params:
    return {
        "size": rng.randint(1, 50),
        "type": rng.choice(TYPE_SYLLABLE_3),
        "region": rng.choice(REGIONS),
    }


def _q3(rng: random.Random, scale: float) -> Params:
    return {
        "segment": rng.choice(SEGMENTS),
        "date": datetime.date(1995, 3, rng.randint(1, 31)),
    }


def _q4(rng: random.Random, scale: float) -> Params:
    return {"date": _month_start(rng, (1993, 1), (1997, 10))}


def _q5(rng: random.Random, scale: float) -> Params:
    return {"region": rng.choice(REGIONS), "date": _year_start(rng)}


def _q6(rng: random.Random, scale: float) -> Params:
    return {
        "date": _year_start(rng),
        "discount": Decimal(rng.randint(2, 9)) / 100,
        "quantity": rng.randint(24, 25),
    }


def _q7(rng: random.Random, scale: float) -> Params:
    nation1, nation2 = rng.sample([name for name, _ in NATIONS], 2)
    return {"nation1": nation1, "nation2": nation2}


def _q8(rng: random.Random, scale: float) -> Params:
    nation, region_key = rng.choice(NATIONS)
    part_type = " ".join(
        rng.choice(s) for s in (TYPE_SYLLABLE_1, TYPE_SYLLABLE_2, TYPE_SYLLABLE_3)
    )
    return {"nation": nation, "region": REGIONS[region_key], "type": part_type}


def _q9(rng: random.Random, scale: float) -> Params:
    return {"color": rng.choice(COLORS)}


def _q10(rng: random.Random, scale: float) -> Params:
    return {"date": _month_start(rng, (1993, 2), (1995, 1))}


def _q11(rng: random.Random, scale: float) -> Params:
    return {"nation": _nation(rng), "fraction": _q11_fraction(scale)}


def _q11_fraction(scale: float) -> Decimal:
    # Clause 2.4.11.3: FRACTION is 0.0001 / SF.
    return Decimal("0.0001") / Decimal(repr(scale))


def _q12(rng: random.Random, scale: float) -> Params:
    mode1, mode2 = rng.sample(SHIP_MODES, 2)
    return {"shipmode1": mode1, "shipmode2": mode2, "date": _year_start(rng)}


def _q13(rng: random.Random, scale: float) -> Params:
    return {"word1": rng.choice(Q13_WORDS_1), "word2": rng.choice(Q13_WORDS_2)}


def _q14(rng: random.Random, scale: float) -> Params:
    return {"date": _month_start(rng, (1993, 1), (1997, 12))}


def _q15(rng: random.Random, scale: float) -> Params:
    return {"date": _month_start(rng, (1993, 1), (1997, 10))}


def _q16(rng: random.Random, scale: float) -> Params:
    return {
        "brand": _brand(rng),
        "type": f"{rng.choice(TYPE_SYLLABLE_1)} {rng.choice(TYPE_SYLLABLE_2)}",
        "sizes": tuple(rng.sample(range(1, 51), 8)),
    }


def _q17(rng: random.Random, scale: float) -> Params:
    container = f"{rng.choice(CONTAINER_SYLLABLE_1)} {rng.choice(CONTAINER_SYLLABLE_2)}"
    return {"brand": _brand(rng), "container": container}


def _q18(rng: random.Random, scale: float) -> Params:
    return {"quantity": rng.randint(312, 315)}


def _q19(rng: random.Random, scale: float) -> Params:
    return {
        "quantity1": rng.randint(1, 10),
        "quantity2": rng.randint(10, 20),
        "quantity3": rng.randint(20, 30),
        "brand1": _brand(rng),
        "brand2": _brand(rng),
        "brand3": _brand(rng),
    }


def _q20(rng: random.Random, scale: float) -> Params:
    return {"color": rng.choice(COLORS), "date": _year_start(rng), "nation": _nation(rng)}


def _q21(rng: random.Random, scale: float) -> Params:
    return {"nation": _nation(rng)}


def _q22(rng: random.Random, scale: float) -> Params:
    # Country codes are n_nationkey + 10 (clause 4.2.2.9).
    return {"codes": tuple(str(code) for code in rng.sample(range(10, 35), 7))}


_GENERATORS: dict[str, Callable[[random.Random, float], Params]] = {
    f"Q{i}": gen
    for i, gen in enumerate(
        (_q1, _q2, _q3, _q4, _q5, _q6, _q7, _q8, _q9, _q10, _q11,
         _q12, _q13, _q14, _q15, _q16, _q17, _q18, _q19, _q20, _q21, _q22),
        start=1,
    )
}  # fmt: skip

#: The spec's validation parameters (clause 2.4.x.4), except Q11's scale-dependent fraction.
_VALIDATION: dict[str, Params] = {
    "Q1": {"delta": 90},
    "Q2": {"size": 15, "type": "BRASS", "region": "EUROPE"},
    "Q3": {"segment": "BUILDING", "date": datetime.date(1995, 3, 15)},
    "Q4": {"date": datetime.date(1993, 7, 1)},
    "Q5": {"region": "ASIA", "date": datetime.date(1994, 1, 1)},
    "Q6": {"date": datetime.date(1994, 1, 1), "discount": Decimal("0.06"), "quantity": 24},
    "Q7": {"nation1": "FRANCE", "nation2": "GERMANY"},
    "Q8": {"nation": "BRAZIL", "region": "AMERICA", "type": "ECONOMY ANODIZED STEEL"},
    "Q9": {"color": "green"},
    "Q10": {"date": datetime.date(1993, 10, 1)},
    "Q11": {"nation": "GERMANY"},
    "Q12": {"shipmode1": "MAIL", "shipmode2": "SHIP", "date": datetime.date(1994, 1, 1)},
    "Q13": {"word1": "special", "word2": "requests"},
    "Q14": {"date": datetime.date(1995, 9, 1)},
    "Q15": {"date": datetime.date(1996, 1, 1)},
    "Q16": {
        "brand": "Brand#45", "type": "MEDIUM POLISHED", "sizes": (49, 14, 23, 45, 19, 3, 36, 9),
    },
    "Q17": {"brand": "Brand#23", "container": "MED BOX"},
    "Q18": {"quantity": 300},
    "Q19": {
        "quantity1": 1, "quantity2": 10, "quantity3": 20,
        "brand1": "Brand#12", "brand2": "Brand#23", "brand3": "Brand#34",
    },
    "Q20": {"color": "forest", "date": datetime.date(1994, 1, 1), "nation": "CANADA"},
    "Q21": {"nation": "SAUDI ARABIA"},
    "Q22": {"codes": ("13", "31", "23", "29", "30", "18", "17")},
}  # fmt: skip


def _check(name: str, scale: float) -> None:
    if name not in _GENERATORS:
        raise WorkloadError(f"TPC-H query must be one of Q1..Q22, but got {name!r}")
    if not scale > 0:
        raise WorkloadError(f"TPC-H scale factor must be > 0, but got {scale!r}")


def random_params(name: str, rng: random.Random, scale: float = 1.0) -> Params:
    """Draw one instance's substitution parameters for query ``name`` ("Q1".."Q22")."""
    _check(name, scale)
    return _GENERATORS[name](rng, scale)


def default_params(name: str, scale: float = 1.0) -> Params:
    """The spec's validation parameters for ``name``; Q11's fraction is 0.0001 / ``scale``."""
    _check(name, scale)
    params = dict(_VALIDATION[name])
    if name == "Q11":
        params["fraction"] = _q11_fraction(scale)
    return params
