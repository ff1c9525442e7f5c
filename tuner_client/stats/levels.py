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


#: the share of a race's error rate its anytime-valid sequence spends on stopping early; the
#: rest goes to a fixed-horizon Student t interval read once, at the race's planned end (its
#: time limit, set before any data). Both together hold at the race's level (Bonferroni over
#: the two kinds of look: the sequence errs at some look with probability at most its share,
#: the end's interval with at most the rest). At 97.5 % and 16 observations the end's
#: multiplier is 2.6 where the sequence's is 3.9: a race that runs to its limit, as an A/A or a
#: small effect does, ends 1.5x narrower for the same seconds (2.3x fewer seconds for the same
#: width); one stopped early needs an effect 1.2x larger to clear (4.8 at this share).
EARLY_SHARE = 0.2


def early_level(level: float) -> float:
    """The level of the anytime-valid sequence that may stop a race before its limit."""
    return 1.0 - (1.0 - level) * EARLY_SHARE


def end_level(level: float) -> float:
    """The level of the fixed-horizon interval read at a race's planned end."""
    return 1.0 - (1.0 - level) * (1.0 - EARLY_SHARE)
