"""CMA-ES as a push-style strategy, through the ``cmaes`` library.

Hansen & Ostermeier, "Completely derandomized self-adaptation in evolution strategies",
Evolutionary Computation 9 (2001); on grid axes CMA-ES with Margin (Hamano et al., GECCO 2022),
which keeps the marginal probability of leaving the ``mean``'s grid cell from vanishing, so a
search on integers does not freeze on one point. Each generation samples ``popsize`` points
from harmony_base.jsontypes import JSON, JSONObject
from N(``mean``, ``sigma``^2 C) on the unit cube; every point is snapped to the grid, and a
point outside the feasible region is resampled (never handed out). The whole generation can be
measured at once, by as many clients as there are.

Defaults follow Optuna's ``CmaEsSampler``: the unit cube as bounds, the mean at its centre (or
``init_point``), ``sigma0`` a sixth of the range, the library's population ``4 + 3 ln n`` and
``10 n`` resampling attempts. Unlike Optuna the strategy uses the margin on grid axes by
default (``with_margin``) and restarts when the library's stopping test fires (a doubled
population around the best point, IPOP, Auger & Hansen 2005), so it stops only at ``max_evals``,
or when a small discrete space is exhausted (its feasible points are counted: every one was
handed out) or the search stalled (``_MAX_SILENT_DRAWS`` draws in a row met only points handed
out already), which bounds the work of one ``ask`` instead of resampling without end.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from cmaes import CMA, CMAwM

from harmony_base.errors import ConfigError
from harmony_base.region import FeasibleRegion
from harmony_base.space import EnumParam, Param, Point, RealParam, Space, Value
from strategies.base import Strategy, Trial
from strategies.options import check_real, is_fixed, option_error

logger = logging.getLogger(__name__)

Key = tuple[Value, ...]

#: generations in a row answered wholly from memory before a restart (the search stalled)
_MAX_SILENT_GENERATIONS = 50
#: restarts in a row without a new point before the space counts as exhausted
_MAX_SILENT_RESTARTS = 20
#: feasible-region samples tried when every CMA draw of a candidate was infeasible
_FALLBACK_ATTEMPTS = 100
#: draws (CMA samples and fallback samples) in a row that found no new point before the
#: search counts as stalled and converges; bounds the work of one ask (50-200 ms)
_MAX_SILENT_DRAWS = 1_000
#: a discrete space with at most this many grid points has its feasible points counted, so
#: that a search which has handed out every one of them converges at once
_COUNT_LIMIT = 10_000


@dataclass
class _Member:
    """One sample of the current generation: what CMA is told, the point, and its value."""

    x_tell: np.ndarray
    point: Point
    key: Key
    value: float | None = None


class CMAES(Strategy, name="cma-es"):
    """CMA-ES on the unit-normalised space (fixed parameters left out), grid-snapped.

    Options: ``init_point`` (the initial mean; default the centre of the space, as Optuna),
    ``sigma0`` (unit cube; default 1/6), ``popsize`` (default ``4 + floor(3 ln n)``),
    ``with_margin`` (CMA-ES with Margin on grid axes; default on when an axis is a grid),
    ``n_max_resampling`` (draws per candidate before falling back to a feasible random point;
    default ``10 n``), ``restart`` (``ipop`` (default) or ``none``: converge when CMA stops)
    and ``max_evals`` (points handed out per start; default: no limit).
    """

    def __init__(self, space: Space, *, seed: int = 0, region: FeasibleRegion | None = None,
                 init_point: Mapping[str, object] | None = None, sigma0: float | None = None,
                 popsize: int | None = None, with_margin: bool | None = None,
                 n_max_resampling: int | None = None, restart: str = "ipop",
                 max_evals: int | None = None):
        super().__init__(space, seed=seed, region=region)
        name = type(self).name
        self.axes = [k for k, p in enumerate(space.params) if not is_fixed(p)]
        n = max(len(self.axes), 1)
        if sigma0 is not None:
            check_real(name, "sigma0", sigma0, low=0.0, high=1.0, low_open=True)
        for option, value in (("popsize", popsize), ("n_max_resampling", n_max_resampling),
                              ("max_evals", max_evals)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < (2 if option == "popsize" else 1)):
                low = 2 if option == "popsize" else 1
                raise option_error(name, option, f"an integer >= {low} (or absent)", value)
        if restart not in ("ipop", "none"):
            raise option_error(name, "restart", "one of ipop, none", restart)
        if with_margin is not None and not isinstance(with_margin, bool):
            raise option_error(name, "with_margin", "true or false", with_margin)
        if init_point is not None:
            if not isinstance(init_point, Mapping):
                raise option_error(name, "init_point", "a mapping of parameter name to value",
                                   init_point)
            try:
                init_point = space.snap(init_point)
            except (ConfigError, TypeError, ValueError) as exc:
                raise ConfigError(f"strategy {name!r}: option init_point is not a point of the "
                                  f"space: {exc}") from None
        self.init_point: Point | None = dict(init_point) if init_point is not None else None
        self.sigma0 = float(sigma0) if sigma0 is not None else 1.0 / 6.0
        self.popsize = popsize if popsize is not None else 4 + int(math.floor(3 * math.log(n)))
        self.n_max_resampling = n_max_resampling if n_max_resampling is not None else 10 * n
        self.restart_strategy = restart
        self.max_evals = max_evals
        #: unit-cube grid step per moving axis (0: continuous or log-scaled, snapped afterwards)
        self.steps = np.array([_unit_step(space.params[k]) for k in self.axes], dtype=float)
        self.with_margin = bool(np.any(self.steps > 0)) if with_margin is None \
            else with_margin and bool(np.any(self.steps > 0))
        self.convergence_reason = None
        #: restarts since the start (IPOP doublings of the population)
        self.restarts = 0
        self.generation = 0
        self._population = self.popsize
        self._members: list[_Member] = []
        self._memo: dict[Key, float] = {}
        self._refused: dict[Key, None] = {}
        self._outstanding: dict[Key, int] = {}
        self._trial_key: dict[int, Key] = {}
        self._silent_generations = 0
        self._silent_restarts = 0
        self._silent_draws = 0
        self._evals_at_start = 0
        self._stopped = False
        #: every feasible point of a small discrete space (counted on first need); None: not
        #: counted yet; an empty tuple stands for "too large or continuous to count"
        self._feasible_keys: frozenset[Key] | tuple[()] | None = None
        #: unit coordinates of the fixed parameters (the moving ones are overwritten)
        self._fixed_unit = space.to_unit(space.default_point())
        centre = self._unit(self.init_point) if self.init_point is not None \
            else np.full(len(self.axes), 0.5)
        self._optimizer = self._new_optimizer(centre, self.sigma0, self._population)

    # -- the Strategy contract ---------------------------------------------------
    @property
    def converged(self) -> bool:
        if self._stopped:
            return True
        return self.max_evals is not None and self.evaluations >= self.max_evals

    @property
    def evaluations(self) -> int:
        """Points handed out since the start or the last :meth:`restart`."""
        return len(self.trials) - self._evals_at_start

    def ask(self) -> Trial | None:
        if self.converged:
            if self.convergence_reason is None:
                self.convergence_reason = f"budget spent (max_evals {self.max_evals})"
            return None
        while not self._stopped:
            if len(self._members) < self._population:
                member = self._sample()
                self._members.append(member)
                if member.value is not None or member.key in self._outstanding:
                    # answered from memory, or waits for that point's measurement
                    if self._silent_draws >= _MAX_SILENT_DRAWS:
                        self._stalled()
                    continue
                trial = self._new_trial(member.point)
                self._outstanding[member.key] = trial.id
                self._trial_key[trial.id] = member.key
                self._silent_generations = 0
                self._silent_restarts = 0
                self._silent_draws = 0
                if self.max_evals is not None and self.evaluations >= self.max_evals:
                    self.convergence_reason = f"budget spent (max_evals {self.max_evals})"
                return trial
            if any(m.value is None for m in self._members):
                return None  # the generation is out: wait for its measurements
            self._finish_generation()
            if not self._stopped and self._silent_generations:
                self._stop_if_exhausted()
        return None

    def _on_result(self, trial: Trial) -> None:
        key = self._trial_key.pop(trial.id, None)
        if key is None:  # a late answer from before a restart: recorded, not used
            return
        self._outstanding.pop(key, None)
        value = self.score(trial)
        self._memo[key] = value
        for m in self._members:
            if m.value is None and m.key == key:
                m.value = value

    def rejected(self, trial_id: int, hint: Point | None = None) -> None:
        """A plugin refused a point: never hand it out again; it ranks as a failure."""
        self._refused[self.space.key(self._trial(trial_id).point)] = None
        super().rejected(trial_id, hint)

    def restart(self, point: Point | None = None, simplex: list[Point] | None = None) -> None:
        """Start again with the initial population: around ``point`` (or the first point of
        ``simplex``), else around ``init_point`` or the centre. Remembered measurements are
        forgotten; refused points stay refused. The random stream goes on, so a restart never
        repeats the previous search."""
        start = point if point is not None else simplex[0] if simplex else self.init_point
        centre = self._unit(self.space.snap(start)) if start is not None \
            else np.full(len(self.axes), 0.5)
        self._memo.clear()
        self._outstanding.clear()
        self._trial_key.clear()
        self._members = []
        self._population = self.popsize
        self.restarts = 0
        self.generation = 0
        self._silent_generations = 0
        self._silent_restarts = 0
        self._silent_draws = 0
        self._stopped = False
        self.convergence_reason = None
        self._evals_at_start = len(self.trials)
        self._optimizer = self._new_optimizer(centre, self.sigma0, self._population)

    # -- generations ------------------------------------------------------------------
    def _new_optimizer(self, mean: np.ndarray, sigma: float, population: int) -> CMA | CMAwM:
        dim = len(self.axes)
        # the library needs at least one dimension: a space of fixed parameters gets a dummy
        mean = np.clip(mean, 0.0, 1.0) if dim else np.full(1, 0.5)
        bounds = np.tile([0.0, 1.0], (max(dim, 1), 1))
        seed = int(self.rng.integers(1, 2**31 - 2))
        if self.with_margin:
            return CMAwM(mean=mean, sigma=sigma, bounds=bounds, steps=self.steps, seed=seed,
                         population_size=population, n_max_resampling=self.n_max_resampling)
        return CMA(mean=mean, sigma=sigma, bounds=bounds, seed=seed, population_size=population,
                   n_max_resampling=self.n_max_resampling)

    def _draw(self) -> tuple[np.ndarray, np.ndarray]:
        """One sample: the coordinates to evaluate and the ones CMA is told."""
        if isinstance(self._optimizer, CMAwM):
            return self._optimizer.ask()
        x = self._optimizer.ask()
        return x, x

    def _sample(self) -> _Member:
        """A feasible member of the generation (resampled until the region contains it).

        Every draw counts towards :data:`_MAX_SILENT_DRAWS` (see :meth:`_stalled`).
        """
        for _ in range(self.n_max_resampling):
            self._silent_draws += 1
            x_eval, x_tell = self._draw()
            point = self._point(x_eval)
            if self._feasible(point):
                return self._member(x_tell, point)
        # CMA keeps drawing infeasible points: a feasible random point stands in
        for _ in range(_FALLBACK_ATTEMPTS):
            self._silent_draws += 1
            point = self.space.snap(self.region.sample(self.rng))
            if self._feasible(point):
                return self._member(self._unit(point), point)
        raise ConfigError(f"strategy {self.name!r}: found no feasible point in "
                          f"{_FALLBACK_ATTEMPTS} samples of the feasible region")

    def _member(self, x_tell: np.ndarray, point: Point) -> _Member:
        key = self.space.key(point)
        return _Member(x_tell=np.array(x_tell, dtype=float), point=point, key=key,
                       value=self._memo.get(key))

    def _finish_generation(self) -> None:
        """Tell CMA the complete, measured generation; restart (or stop) if CMA stopped."""
        values = np.array([m.value for m in self._members], dtype=float)
        finite = values[np.isfinite(values)]
        if finite.size:
            # failures rank below every measured point without an infinite value
            worst = float(finite.max())
            values = np.where(np.isfinite(values), values,
                              worst + (worst - float(finite.min())) + 1.0 + abs(worst))
        else:
            values = np.zeros_like(values)
        self._optimizer.tell([(m.x_tell, float(v))
                              for m, v in zip(self._members, values, strict=True)])
        self._members = []
        self.generation += 1
        self._silent_generations += 1
        if self._optimizer.should_stop():
            self._stop_or_restart("the CMA stopping test fired")
        elif self._silent_generations > _MAX_SILENT_GENERATIONS:
            self._stop_or_restart(f"{_MAX_SILENT_GENERATIONS} generations needed no new point")

    def _stop_or_restart(self, reason: str) -> None:
        if self.restart_strategy == "none":
            self._stop(reason)
            return
        self._silent_restarts += 1
        if self._silent_restarts > _MAX_SILENT_RESTARTS:
            self._stop(f"{reason}; exhausted: {_MAX_SILENT_RESTARTS} restarts in a row reached "
                       f"only points measured already")
            return
        best = self.best()
        centre = self._unit(best.point) if best is not None else np.full(len(self.axes), 0.5)
        self.restarts += 1
        self._population *= 2
        self._silent_generations = 0
        logger.debug("%s: %s; restart %d around %s with population %d", self.name, reason,
                     self.restarts, best.point if best else None, self._population)
        self._optimizer = self._new_optimizer(centre, self.sigma0, self._population)

    def _stop_if_exhausted(self) -> None:
        """Converge when a small space has no feasible point left that was never handed out
        (CMA would otherwise resample measured points, restart after restart, forever)."""
        feasible = self._feasible_points()
        if feasible is None:
            return
        left = feasible - self._refused.keys() - self._memo.keys() - self._outstanding.keys()
        if not left:
            self._stop(f"exhausted: every one of the {len(feasible)} feasible points was "
                       f"handed out")

    def _stalled(self) -> None:
        """:data:`_MAX_SILENT_DRAWS` draws in a row met only points handed out already: a
        small space converges; a large one restarts (IPOP), and stops after
        :data:`_MAX_SILENT_RESTARTS` such restarts, so one ``ask`` stays bounded."""
        self._silent_draws = 0
        self._members = []  # the generation is abandoned: CMA is told nothing of it
        feasible = self._feasible_points()
        measured = len(self._memo.keys() | self._outstanding.keys())
        reason = (f"stalled: {_MAX_SILENT_DRAWS} draws in a row reached only points handed out "
                  f"already")
        if feasible is not None:
            self._stop(f"{reason} ({measured} of {len(feasible)} feasible points)")
        else:
            self._stop_or_restart(reason)

    def _feasible_points(self) -> frozenset[Key] | None:
        """Every feasible grid point of a small discrete space; None for a large one."""
        if self._feasible_keys is None:
            self._feasible_keys = ()
            if self.space.is_discrete and self.space.grid_size() <= _COUNT_LIMIT:
                self._feasible_keys = frozenset(
                    self.space.key(p) for p in self.space.iter_grid() if self.region.contains(p))
        return self._feasible_keys if isinstance(self._feasible_keys, frozenset) else None

    def _stop(self, reason: str) -> None:
        self._stopped = True
        self.convergence_reason = reason
        logger.info("%s: converged (%s) after %d evaluations", self.name, reason,
                    self.evaluations)

    # -- coordinates ---------------------------------------------------------------------
    def _point(self, x: np.ndarray) -> Point:
        u = self._fixed_unit.copy()
        u[self.axes] = np.clip(x[: len(self.axes)], 0.0, 1.0)
        return self.space.from_unit(u)

    def _unit(self, point: Point) -> np.ndarray:
        return np.asarray(self.space.to_unit(point)[self.axes], dtype=float) if self.axes \
            else np.full(1, 0.5)

    def _feasible(self, point: Point) -> bool:
        key = self.space.key(point)
        return key not in self._refused and self.region.contains(point)


def _unit_step(p: Param) -> float:
    """A parameter's grid step on the unit cube; 0 where the grid is not even there (log)."""
    if isinstance(p, RealParam) and not p.discrete:
        return 0.0
    if isinstance(p, EnumParam):
        return 1.0 / (p.size - 1)
    return 0.0 if p.log else 1.0 / (p.size - 1)
