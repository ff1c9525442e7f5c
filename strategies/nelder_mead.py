"""Nelder-Mead simplex search as a push-style state machine.

Nelder & Mead, "A simplex method for function minimization", Computer Journal 7 (1965);
the move rules and coefficient names follow Lagarias et al., SIAM J. Optim. 9 (1998), and
match ``scipy.optimize.minimize(method="Nelder-Mead")`` step for step on a continuous
space. Each iteration reflects the worst vertex through the ``centroid`` of the others;
the ``reflected`` point is kept, ``expanded`` further, or ``contracted`` (outside or
inside); if contraction fails, every vertex shrinks toward the best.
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


class NelderMead(SimplexStrategy, name="nelder-mead"):
    """Standard Nelder-Mead on the unit-normalised, grid-snapped space.

    Options (besides :class:`SimplexStrategy`'s): ``reflect`` (rho, 1), ``expand`` (chi, 2),
    ``contract_outside`` and ``contract_inside`` (gamma, 0.5 each), ``shrink`` (sigma, 0.5).
    """

    def __init__(self, space: Space, *, seed: int = 0, region: FeasibleRegion | None = None,
                 reflect: float = 1.0, expand: float = 2.0, contract_outside: float = 0.5,
                 contract_inside: float = 0.5, **options: Any):
        name = type(self).name
        check_real(name, "reflect", reflect, low=0.0, low_open=True)
        check_real(name, "expand", expand, low=1.0, low_open=True)
        if expand <= reflect:
            raise option_error(name, "expand", f"> reflect ({reflect})", expand)
        check_real(name, "contract_outside", contract_outside, low=0.0, high=1.0,
                    low_open=True, high_open=True)
        check_real(name, "contract_inside", contract_inside, low=0.0, high=1.0,
                    low_open=True, high_open=True)
        self.rho = float(reflect)
        self.chi = float(expand)
        self.gamma_outside = float(contract_outside)
        self.gamma_inside = float(contract_inside)
        self.centroid = np.zeros(space.dim)
        self.reflected: Candidate | None = None
        self.expanded: Candidate | None = None
        self.contracted: Candidate | None = None
        super().__init__(space, seed=seed, region=region, **options)

    def _step(self) -> None:
        """Reflect the worst vertex through the centroid of the others."""
        worst = self.vertices[-1]
        self.centroid = np.add.reduce(self.vertices[:-1], 0) / (len(self.vertices) - 1)
        # (1 + rho) * c - rho * w is scipy's form of c + rho * (c - w): same rounding
        self._start_batch(Phase.REFLECT, [(1 + self.rho) * self.centroid - self.rho * worst])

    def _advance(self) -> None:
        phase, batch = self.phase, self._batch
        if phase is Phase.INIT:
            self._accept(batch)
            return
        c, w = self.centroid, self.vertices[-1]
        f = self.values
        if phase is Phase.REFLECT:
            self.reflected = batch[0]
            fr = _value(self.reflected)
            if fr < f[0]:
                rc = self.rho * self.chi
                self._start_batch(Phase.EXPAND, [(1 + rc) * c - rc * w])
            elif fr < f[-2]:
                self._replace_worst(batch[0])
            elif fr < f[-1]:
                rg = self.rho * self.gamma_outside
                self._start_batch(Phase.CONTRACT_OUTSIDE, [(1 + rg) * c - rg * w])
            else:
                g = self.gamma_inside
                self._start_batch(Phase.CONTRACT_INSIDE, [(1 - g) * c + g * w])
        elif phase is Phase.EXPAND:
            self.expanded = batch[0]
            reflected = self.reflected if self.reflected is not None else batch[0]
            self._replace_worst(self.expanded if _value(self.expanded) < _value(reflected)
                                else reflected)
        elif phase is Phase.CONTRACT_OUTSIDE:
            self.contracted = batch[0]
            if _value(self.contracted) <= _value(self.reflected):
                self._replace_worst(self.contracted)
            else:
                self._shrink()
        elif phase is Phase.CONTRACT_INSIDE:
            self.contracted = batch[0]
            if _value(self.contracted) < f[-1]:
                self._replace_worst(self.contracted)
            else:
                self._shrink()
        elif phase is Phase.SHRINK:
            if Counter(c.key for c in batch) == Counter(self.keys[1:]):
                # the grid turned the shrink into a no-op: the same moves would follow
                self._stall("shrink moved nothing on the grid")
            else:
                self._accept([self._vertex(0)] + batch)

    def _replace_worst(self, vertex: Candidate) -> None:
        self._accept([self._vertex(i) for i in range(len(self.keys) - 1)] + [vertex])

    def _shrink(self) -> None:
        """Move every vertex but the best halfway (``shrink``) toward the best."""
        best = self.vertices[0]
        self._start_batch(Phase.SHRINK, [best + self.shrink_coef * (v - best)
                                         for v in self.vertices[1:]])
