"""Exhaustive grid search in odometer order, as a baseline and to map small spaces."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from harmony_base.errors import ConfigError
from harmony_base.region import FeasibleRegion
from harmony_base.space import Point, RealParam, Space, Value
from strategies.base import Strategy, Trial

logger = logging.getLogger(__name__)


class Exhaustive(Strategy, name="exhaustive"):
    """Every feasible grid point, the last parameter changing fastest, ``passes`` times over.

    Needs a discrete space (every real parameter with a step > 0). Points are handed out
    without waiting for results, so any number of clients can work at once.
    """

    def __init__(self, space: Space, *, seed: int = 0, region: FeasibleRegion | None = None,
                 passes: int = 1):
        super().__init__(space, seed=seed, region=region)
        if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
            raise ConfigError(f"strategy 'exhaustive': option passes must be a positive integer, "
                              f"got {passes!r}")
        if not space.is_discrete:
            continuous = [p.name for p in space.params
                          if isinstance(p, RealParam) and not p.discrete]
            raise ConfigError(f"strategy 'exhaustive' needs a discrete space, but parameters "
                              f"{continuous} are continuous (step 0); give them a step > 0")
        self.passes = passes
        self.current_pass = 0
        self._refused: dict[tuple[Value, ...], None] = {}
        self._grid: Iterator[Point] = space.iter_grid()

    @property
    def converged(self) -> bool:
        return self.current_pass >= self.passes

    def ask(self) -> Trial | None:
        while self.current_pass < self.passes:
            for point in self._grid:
                if self.space.key(point) not in self._refused and self.region.contains(point):
                    return self._new_trial(point)
            self.current_pass += 1
            self._grid = self.space.iter_grid()
            logger.debug("exhaustive: pass %d of %d done", self.current_pass, self.passes)
        self.convergence_reason = f"every feasible grid point measured {self.passes} times"
        return None

    def _on_result(self, trial: Trial) -> None:
        """Exhaustive search does not learn from results."""

    def rejected(self, trial_id: int, hint: Point | None = None) -> None:
        self._refused[self.space.key(self._trial(trial_id).point)] = None
        super().rejected(trial_id, hint)

    def restart(self, point: Point | None = None, simplex: list[Point] | None = None) -> None:
        """Walk the grid again from its first point, for ``passes`` passes."""
        self.current_pass = 0
        self.convergence_reason = None
        self._grid = self.space.iter_grid()

