"""Push-style search strategies (pure search logic; no I/O).

Importing this package registers the built-in strategies: ``nelder-mead``, ``pro``,
``cma-es``, ``random`` and ``exhaustive``.
"""

from strategies.base import Strategy, Trial, make_strategy
from strategies.cmaes_strategy import CMAES
from strategies.exhaustive import Exhaustive
from strategies.nelder_mead import NelderMead
from strategies.pro import PRO
from strategies.random_search import RandomSearch
from strategies.simplex import SimplexStrategy

__all__ = [
    "CMAES", "PRO", "Exhaustive", "NelderMead", "RandomSearch", "SimplexStrategy", "Strategy",
    "Trial", "make_strategy",
]
