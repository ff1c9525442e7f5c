"""The level arithmetic of simultaneous claims, in one place: a claim made over ``k``
comparisons at once holds at ``level`` when each comparison is judged at
``1 - (1 - level) / k`` (Bonferroni: the error rates add up to at most ``1 - level``).

Every race (the windows race's drops and win, a per-transaction or switchback race over its
candidates, the final decision's best of m) and the split race's two stages (each stage at
``simultaneous_level(level, 2)``, so that the product of their intervals holds at ``level``)
take their levels from :func:`simultaneous_level`.
"""

from __future__ import annotations


def simultaneous_level(level: float, comparisons: int) -> float:
    """The level each of ``comparisons`` claims must hold at for all of them to hold at
    ``level`` together (Bonferroni; fewer than one comparison counts as one)."""
    return 1.0 - (1.0 - level) / max(1, comparisons)
