"""Push-style search strategies (pure search logic; no I/O).

Importing this package registers the built-in strategies: ``nelder-mead``, ``pro``,
``cma-es``, ``random`` and ``exhaustive``.
"""

from strategies.base import FeasibleRegion, Strategy, Trial, WholeSpace, make_strategy
from strategies.cmaes_strategy import CMAES
from strategies.exhaustive import Exhaustive
from strategies.nelder_mead import NelderMead
from strategies.pro import PRO
from strategies.random_search import RandomSearch
from strategies.simplex import SimplexStrategy
from strategies.space import EnumParam, IntParam, Param, Point, RealParam, Space, space_from_dicts

__all__ = [
    "CMAES", "PRO", "EnumParam", "Exhaustive", "FeasibleRegion", "IntParam", "NelderMead",
    "Param", "Point", "RandomSearch", "RealParam", "SimplexStrategy", "Space", "Strategy",
    "Trial", "WholeSpace", "make_strategy", "space_from_dicts",
]
