"""``combine``, an option of the simplex strategies: after an initial axis simplex around a
point (each other vertex one step along one axis: ``init_method`` ``point`` or
``random-point``), measure once the point that takes every axis's better step at once, the
predicted best of a one-factor-at-a-time design, and let it replace the worst vertex where it
beats it. A simplex reaches that point only through several moves when two knobs help only
together. A mixin of :class:`strategies.simplex.SimplexStrategy`, which sets the attributes
declared here.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import ClassVar

import numpy as np

from harmony_base.space import Space
from strategies.simplex_phase import Phase
from strategies.simplex_vertices import Candidate, Key, candidate_value


class CombineStep:
    """The ``combine`` step of a simplex strategy (see the module docstring)."""

    space: Space
    phase: Phase
    active_axes: list[int]
    _batch: list[Candidate]
    _memo: dict[Key, float]
    #: the initial axis simplex's combined point is still to be measured
    _combine_pending: bool
    #: the initial simplex, held while its combined point is measured
    _init_batch: list[Candidate]
    name: ClassVar[str]

    @abstractmethod
    def _advance(self) -> None: ...

    @abstractmethod
    def _start_batch(self, phase: Phase, us: list[np.ndarray]) -> None: ...

    @abstractmethod
    def _accept(self, candidates: list[Candidate]) -> None: ...

    def _advance_phase(self) -> None:
        """The subclass's :meth:`_advance`, but for ``combine``'s one extra move after the
        initial axis simplex: the point that takes every axis's better step at once."""
        if self.phase is Phase.INIT and self._combine_pending:
            self._combine_pending = False
            combined = self._main_effects_point(self._batch)
            if combined is not None:
                self._init_batch = list(self._batch)
                self._start_batch(Phase.COMBINE, [combined])
                return
        if self.phase is Phase.COMBINE:
            init, extra = self._init_batch, self._batch[0]
            self._init_batch = []
            worst = max(range(len(init)), key=lambda i: (candidate_value(init[i]), i))
            if candidate_value(extra) < candidate_value(init[worst]):
                init[worst] = extra  # kept as NM keeps a reflection better than the worst
            self._accept(init)
            return
        self._advance()

    def _main_effects_point(self, batch: list[Candidate]) -> np.ndarray | None:
        """After an axis simplex around ``batch[0]`` (each other vertex moved along one axis),
        the point that takes, on every axis, the coordinate of that axis's best vertex where
        it beat the start: a one-factor-at-a-time design's predicted best, which a simplex
        reaches only through several moves when two knobs help only together. None where
        fewer than two axes gained (the point would be a vertex already) or the point is
        measured already.

        On the capture benchmark's surface the lone step to work_mem 1MB read 1.07×, below
        the random_page_cost step's 1.19×, so the simplex moved away from it, while both
        together read 1.26×: from the original, 10 evaluations reached ≥ 90 % of that gain in
        100 of 100 replays with this point and 68 without (work_mem on a log scale), 92 and
        6 on a linear one (``benchmarks/results/capture_search.s33.md``)."""
        x0, f0 = batch[0].u, candidate_value(batch[0])
        # the axes each other vertex moved along: one each in an axis simplex
        moved = [np.flatnonzero(np.abs(c.u - x0) > 1e-12) for c in batch[1:]]
        if not math.isfinite(f0) or any(len(m) > 1 for m in moved):
            return None
        combined = np.array(x0, dtype=float)
        gained = 0
        for axis in self.active_axes:
            better = [c for c, m in zip(batch[1:], moved, strict=True)
                      if list(m) == [axis] and candidate_value(c) < f0]
            if better:
                combined[axis] = min(better, key=candidate_value).u[axis]
                gained += 1
        if gained < 2:
            return None
        key = self.space.key(self.space.from_unit(combined))
        if key in self._memo or any(c.key == key for c in batch):
            return None
        return combined
