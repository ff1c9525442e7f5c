"""Push-style search strategies (pure search logic; no I/O).

Importing this package registers the built-in strategies.
"""

from strategies.base import FeasibleRegion, Strategy, Trial, WholeSpace, make_strategy
from strategies.space import EnumParam, IntParam, Param, Point, RealParam, Space, space_from_dicts

__all__ = [
    "EnumParam", "FeasibleRegion", "IntParam", "Param", "Point", "RealParam", "Space",
    "Strategy", "Trial", "WholeSpace", "make_strategy", "space_from_dicts",
]
