"""Parallel Rank Ordering (PRO): a simplex search whose every step is a batch.

Tabatabaee, Tiwari & Hollingsworth, "Parallel parameter tuning for applications with
performance variability", SC 2005. Each step reflects *all* vertices except the best
through the best; the batch of ``reflected`` points is measured at once by as many
clients as there are. If the best reflected point beats the best vertex the step
succeeded, and an expansion check decides between the reflected and the ``expanded``
simplex; otherwise every vertex shrinks toward the best.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import numpy as np

from harmony_base.region import FeasibleRegion
from harmony_base.space import Space
from strategies.options import check_real, option_error
from strategies.simplex import Candidate, Phase, SimplexStrategy
from strategies.simplex_vertices import candidate_value as _value

logger = logging.getLogger(__name__)

EXPAND_CHECKS = ("one", "all")


class PRO(SimplexStrategy, name="pro"):
    """Parallel rank ordering on the unit-normalised, grid-snapped space.

    Options (besides :class:`SimplexStrategy`'s): ``reflect`` (1), ``expand`` (2),
    ``shrink`` (0.5), and ``expand_check``: ``one`` measures the expansion of the best
    reflected point first and expands the rest only if it paid off (fewer wasted
    measurements); ``all`` measures every expansion as one batch (more parallelism).
    ``simplex_size`` may be N+1 (default) or larger, e.g. k*N to keep k clients busy.
    """

    def __init__(self, space: Space, *, seed: int = 0, region: FeasibleRegion | None = None,
                 reflect: float = 1.0, expand: float = 2.0, expand_check: str = "one",
                 **options: Any):
        name = type(self).name
        check_real(name, "reflect", reflect, low=0.0, low_open=True)
        check_real(name, "expand", expand, low=1.0, low_open=True)
        if expand_check not in EXPAND_CHECKS:
            raise option_error(name, "expand_check", "one of one, all", expand_check)
        self.rho = float(reflect)
        self.chi = float(expand)
        self.expand_check = expand_check
        self.reflected: list[Candidate] = []
        self.expanded: list[Candidate] = []
        self._best_reflected = 0
        super().__init__(space, seed=seed, region=region, **options)

    def _step(self) -> None:
        """Reflect every vertex but the best through the best, as one batch."""
        best = self.vertices[0]
        self._start_batch(Phase.REFLECT, [(1 + self.rho) * best - self.rho * v
                                          for v in self.vertices[1:]])

    def _expansion(self, i: int) -> np.ndarray:
        """The expanded point of vertex ``i + 1`` (the ``i``-th reflected one)."""
        rc = self.rho * self.chi
        return (1 + rc) * self.vertices[0] - rc * self.vertices[i + 1]

    def _advance(self) -> None:
        phase, batch = self.phase, self._batch
        if phase is Phase.INIT:
            self._accept(batch)
        elif phase is Phase.REFLECT:
            self.reflected = list(batch)
            values = [_value(c) for c in batch]
            self._best_reflected = int(np.argmin(values))
            if values[self._best_reflected] < self.values[0]:
                if self.expand_check == "one":
                    self._start_batch(Phase.EXPAND_ONE,
                                      [self._expansion(self._best_reflected)])
                else:
                    self._start_batch(Phase.EXPAND_ALL,
                                      [self._expansion(i) for i in range(len(batch))])
            else:
                best = self.vertices[0]
                self._start_batch(Phase.SHRINK, [best + self.shrink_coef * (v - best)
                                                 for v in self.vertices[1:]])
        elif phase is Phase.EXPAND_ONE:
            j = self._best_reflected
            if _value(batch[0]) < _value(self.reflected[j]):
                expanded_j = batch[0]
                self._start_batch(Phase.EXPAND_ALL, [self._expansion(i)
                                                     for i in range(len(self.reflected))
                                                     if i != j])
                # the already measured expansion takes its place in the batch
                self._batch.insert(j, expanded_j)
            else:
                self._accept([self._vertex(0)] + self.reflected)
        elif phase is Phase.EXPAND_ALL:
            self.expanded = list(batch)
            if min(_value(c) for c in self.expanded) < min(_value(c) for c in self.reflected):
                self._accept([self._vertex(0)] + self.expanded)
            else:
                self._accept([self._vertex(0)] + self.reflected)
        elif phase is Phase.SHRINK:
            if Counter(c.key for c in batch) == Counter(self.keys[1:]):
                self._stall("shrink moved nothing on the grid")
            else:
                self._accept([self._vertex(0)] + batch)
