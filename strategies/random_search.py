"""Random search: uniform points of the feasible region, seeded, without repeats on a grid."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from harmony_base.errors import ConfigError
from harmony_base.region import FeasibleRegion
from harmony_base.space import Point, Space, Value
from strategies.base import Strategy, Trial

logger = logging.getLogger(__name__)

#: random draws before falling back to enumerating the not-yet-seen grid points
_DRAWS = 64
#: largest grid enumerated to find the points not seen yet
_ENUMERATE_LIMIT = 1_000_000


class RandomSearch(Strategy, name="random"):
    """Hands out random feasible points; on a grid, never the same point twice until exhausted.

    ``max_evals`` (optional) ends the search after that many points. The search has also
    converged once every feasible grid point has been handed out.
    """

    def __init__(self, space: Space, *, seed: int = 0, region: FeasibleRegion | None = None,
                 max_evals: int | None = None):
        super().__init__(space, seed=seed, region=region)
        if max_evals is not None and (isinstance(max_evals, bool) or not isinstance(max_evals, int)
                                      or max_evals < 1):
            raise ConfigError(f"strategy 'random': option max_evals must be a positive integer "
                              f"(or absent), got {max_evals!r}")
        self.max_evals = max_evals
        self._seen: dict[tuple[Value, ...], None] = {}
        self._refused: dict[tuple[Value, ...], None] = {}
        self._remaining: Iterator[Point] | None = None
        self._exhausted = False
        self._evals_at_start = 0

    @property
    def converged(self) -> bool:
        if self._exhausted:
            return True
        return self.max_evals is not None and len(self.trials) - self._evals_at_start \
            >= self.max_evals

    def ask(self) -> Trial | None:
        if self.converged:
            if self.convergence_reason is None:
                self.convergence_reason = f"budget spent (max_evals {self.max_evals})"
            return None
        point = self._draw()
        if point is None:
            self._exhausted = True
            self.convergence_reason = "every feasible point handed out"
            logger.info("random: every feasible point handed out (%d)", len(self._seen))
            return None
        self._seen[self.space.key(point)] = None
        return self._new_trial(point)

    def _on_result(self, trial: Trial) -> None:
        """Random search does not learn from results."""

    def rejected(self, trial_id: int, hint: Point | None = None) -> None:
        self._refused[self.space.key(self._trial(trial_id).point)] = None
        super().rejected(trial_id, hint)

    def restart(self, point: Point | None = None, simplex: list[Point] | None = None) -> None:
        """Start over: every point may be handed out again (``point``/``simplex`` are ignored)."""
        self._seen.clear()
        self._remaining = None
        self._exhausted = False
        self.convergence_reason = None
        self._evals_at_start = len(self.trials)

    def _usable(self, point: Point) -> bool:
        key = self.space.key(point)
        return key not in self._seen and key not in self._refused and self.region.contains(point)

    def _draw(self) -> Point | None:
        if self._remaining is None:
            for _ in range(_DRAWS):
                point = self.space.snap(self.region.sample(self.rng))
                if self._usable(point):
                    return point
            if not self.space.is_discrete or self.space.grid_size() > _ENUMERATE_LIMIT:
                for _ in range(16 * _DRAWS):
                    point = self.space.snap(self.region.sample(self.rng))
                    if self._usable(point):
                        return point
                return None
            # few unseen points left: shuffle the rest of the grid once and walk through it
            rest = [p for p in self.space.iter_grid() if self._usable(p)]
            order = self.rng.permutation(len(rest))
            self._remaining = iter([rest[i] for i in order])
        for point in self._remaining:
            if self._usable(point):
                return point
        return None
