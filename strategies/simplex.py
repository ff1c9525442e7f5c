"""Shared machinery of the simplex strategies (Nelder-Mead and Parallel Rank Ordering).

A simplex strategy works on the unit-normalised space: every vertex is a vector of
``[0, 1]^dim`` whose point is snapped to the grid. It moves in *batches* of candidate
vertices; :meth:`ask` hands out a batch's unmeasured points (several at once when the
batch holds several), and the state machine advances once every candidate has a value.

Candidates get their values from three places besides a measurement: a candidate outside
the feasible region is handled by ``reject_method`` (``penalty`` scores it
:attr:`Strategy.PENALTY`, ``random`` replaces it by a random feasible point, ``project``
by the region's projection); a candidate whose snapped point was measured before is
answered from memory; a candidate sharing its point with another outstanding one waits
for that measurement. So a grid that turns a move into a no-op never costs a measurement.

When the simplex stalls (all vertices on one grid point, a degenerate simplex, a shrink
that moves nothing on the grid, a cycle of steps that needs no new measurement, or the
value and size tolerances met) the search *restarts around its best vertex* with a fresh
simplex in a random orientation, whose radius shrinks by ``restart_decay`` from
``init_radius`` to one grid step over successive restarts and then starts over from
``init_radius``. Under noise and on grids a simplex collapses long before the search is
done; the restarts keep it going, so the search ends only when

* the budget ``max_evals`` is spent,
* ``restart_patience`` restarts in a row found no better point (a tolerance the user sets),
* the value and size tolerances hold again right after a restart that found nothing better
  (a restart confirms the minimum, as Numerical Recipes advises for Nelder-Mead), or
* the restarts reach no point that was not measured already (a small grid, exhausted).

:attr:`convergence_reason` says which.
"""

from __future__ import annotations

import enum
import logging
import math
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harmony.base.errors import ConfigError
from harmony.base.space import FeasibleRegion, Point, RealParam, Space, Value, WholeSpace
from strategies.base import Strategy, Trial

logger = logging.getLogger(__name__)

Key = tuple[Value, ...]

INIT_METHODS = ("point", "random-point", "lhs", "random", "simplex")
REJECT_METHODS = ("penalty", "random", "project")
#: attempts at drawing a non-degenerate random / Latin-hypercube initial simplex
_INIT_ATTEMPTS = 20
#: attempts at drawing a feasible replacement for an infeasible candidate
_REPLACE_ATTEMPTS = 100
#: safety net: state-machine steps in a row without handing out a point
_MAX_SILENT_STEPS = 100_000
#: restarts in a row that needed no new measurement before the grid counts as exhausted
_MAX_SILENT_RESTARTS = 60
#: restarts in a row that needed no new measurement before the restart radius starts to grow
_WIDEN_AFTER_SILENT = 6


class Phase(enum.Enum):
    """What the batch being measured is for."""

    INIT = "init"
    REFLECT = "reflect"
    EXPAND = "expand"
    EXPAND_ONE = "expand-one"
    EXPAND_ALL = "expand-all"
    CONTRACT_OUTSIDE = "contract-outside"
    CONTRACT_INSIDE = "contract-inside"
    SHRINK = "shrink"
    CONVERGED = "converged"


@dataclass
class Candidate:
    """A vertex waiting for its value: unit coordinates, snapped point, and its value."""

    u: np.ndarray
    point: Point
    key: Key
    value: float | None = None
    handed_out: bool = False


def option_error(strategy: str, option: str, must: str, got: Any) -> ConfigError:
    """A uniform message for a bad strategy option."""
    return ConfigError(f"strategy {strategy!r}: option {option} must be {must}, got {got!r}")


class SimplexStrategy(Strategy):
    """Base of the simplex strategies: initial simplex, candidate resolution, convergence.

    Options shared by the simplex strategies:
      * ``simplex_size``: vertices (default: movable parameters + 1; never fewer).
      * ``init_method``: ``point`` (``init_point`` plus one axis step of ``init_radius`` per
        vertex, like scipy's initial simplex), ``random-point`` (the same around a random
        feasible point), ``lhs`` (a Latin hypercube) or ``random`` (random feasible vertices).
        Default: ``point`` when ``init_point`` is given, else ``lhs``.
      * ``init_point`` (default: the space's default point), ``init_radius`` (unit cube, 0.3:
        wide enough that the first moves on a grid under noise see differences larger than
        the noise; 0.1 halved the solved share on the noisy-grid benchmark).
      * ``init_simplex``: the initial vertices themselves (``init_method: simplex``), e.g. the
        best points of prior sessions; infeasible ones are replaced by feasible samples.
      * ``reject_method``: ``penalty`` | ``random`` | ``project`` for infeasible candidates.
      * ``fval_tol`` (relative to ``|best|``) plus ``fval_atol`` (absolute), and ``size_tol``
        (unit cube): converged when both hold. ``max_evals``: points handed out per start.
      * ``reexpand``: restart a stalled simplex around its best vertex (default) or converge
        at once (the behaviour of a plain Nelder-Mead).
      * ``restart_decay`` (0.5): each restart's radius is the previous one's times this, from
        ``init_radius`` down to one grid step, then from ``init_radius`` again.
      * ``restart_patience``: converge once this many restarts in a row found no point better
        than ``fval_tol``/``fval_atol`` allow; default ``None``: restart until the budget.
      * ``shrink``: the shrink coefficient (0.5).

    Subclasses implement :meth:`_step` (start the next move from the sorted simplex) and
    :meth:`_advance` (consume a finished batch).
    """

    def __init__(self, space: Space, *, seed: int = 0, region: FeasibleRegion | None = None,
                 simplex_size: int | None = None, init_method: str | None = None,
                 init_point: Mapping[str, Any] | None = None, init_radius: float = 0.3,
                 init_simplex: Sequence[Mapping[str, Any]] | None = None,
                 reject_method: str = "penalty", fval_tol: float = 1e-4, fval_atol: float = 0.0,
                 size_tol: float = 1e-4, max_evals: int | None = None, reexpand: bool = True,
                 restart_decay: float = 0.5, restart_patience: int | None = None,
                 shrink: float = 0.5):
        super().__init__(space, seed=seed, region=region)
        name = type(self).name
        spans = [not _is_fixed(p) for p in space.params]
        #: indices of the axes that can move (a parameter with one grid value cannot)
        self.active_axes = [k for k, moves in enumerate(spans) if moves]
        n_eff = len(self.active_axes)
        if init_simplex is not None:
            if isinstance(init_simplex, str | bytes | Mapping) \
                    or not isinstance(init_simplex, Sequence):
                raise option_error(name, "init_simplex", "a list of points", init_simplex)
            if simplex_size is None:
                simplex_size = len(init_simplex)
            elif simplex_size != len(init_simplex):
                raise option_error(name, "init_simplex", f"{simplex_size} points (simplex_size)",
                                   f"{len(init_simplex)} points")
            try:
                init_simplex = [space.snap(p) for p in init_simplex]
            except (ConfigError, TypeError, ValueError) as exc:
                raise ConfigError(f"strategy {name!r}: option init_simplex holds a point that is "
                                  f"not a point of the space: {exc}") from None
            init_method = init_method or "simplex"
        if simplex_size is None:
            simplex_size = n_eff + 1
        if isinstance(simplex_size, bool) or not isinstance(simplex_size, int) \
                or simplex_size < n_eff + 1:
            raise option_error(name, "simplex_size", f"an integer >= {n_eff + 1} (the number of "
                               f"movable parameters + 1)", simplex_size)
        if init_method is None:
            init_method = "point" if init_point is not None else "lhs"
        if init_method not in INIT_METHODS:
            raise option_error(name, "init_method", f"one of {', '.join(INIT_METHODS)}",
                               init_method)
        if init_method == "simplex" and init_simplex is None:
            raise option_error(name, "init_simplex", "a list of points when init_method is simplex",
                               None)
        if reject_method not in REJECT_METHODS:
            raise option_error(name, "reject_method", f"one of {', '.join(REJECT_METHODS)}",
                               reject_method)
        _check_real(name, "init_radius", init_radius, low=0.0, high=1.0, low_open=True)
        _check_real(name, "fval_tol", fval_tol, low=0.0)
        _check_real(name, "fval_atol", fval_atol, low=0.0)
        _check_real(name, "size_tol", size_tol, low=0.0)
        _check_real(name, "shrink", shrink, low=0.0, high=1.0, low_open=True, high_open=True)
        if max_evals is not None and (isinstance(max_evals, bool) or not isinstance(max_evals, int)
                                      or max_evals < 1):
            raise option_error(name, "max_evals", "a positive integer (or absent)", max_evals)
        _check_real(name, "restart_decay", restart_decay, low=0.0, high=1.0, low_open=True,
                    high_open=True)
        if restart_patience is not None and (isinstance(restart_patience, bool)
                                             or not isinstance(restart_patience, int)
                                             or restart_patience < 1):
            raise option_error(name, "restart_patience", "a positive integer (or absent)",
                               restart_patience)
        if init_point is not None:
            if not isinstance(init_point, Mapping):
                raise option_error(name, "init_point", "a mapping of parameter name to value",
                                   init_point)
            try:
                init_point = space.snap(init_point)
            except (ConfigError, TypeError, ValueError) as exc:
                raise ConfigError(f"strategy {name!r}: option init_point is not a point of the "
                                  f"space: {exc}") from None
        self.simplex_size: int = simplex_size
        self.init_method: str = init_method
        self.init_point: Point = dict(init_point) if init_point is not None \
            else space.default_point()
        self.init_radius = float(init_radius)
        #: a given initial simplex (e.g. the best points of prior sessions: a warm start)
        self.init_simplex: list[Point] | None = (
            [dict(p) for p in init_simplex] if init_simplex is not None else None)
        self.reject_method = reject_method
        self.fval_tol = float(fval_tol)
        self.fval_atol = float(fval_atol)
        self.size_tol = float(size_tol)
        self.max_evals = max_evals
        self.reexpand = bool(reexpand)
        self.restart_decay = float(restart_decay)
        self.restart_patience = restart_patience
        self.shrink_coef = float(shrink)

        res = space.unit_resolution()
        self._continuous = np.array([isinstance(p, RealParam) and not p.discrete
                                     for p in space.params])
        #: one grid step per axis in unit coordinates (``size_tol`` for continuous axes)
        self._min_step = np.where(self._continuous, max(self.size_tol, 1e-9), res)
        self._all_continuous = bool(np.all(self._continuous[self.active_axes]))
        #: per-axis scale that turns unit differences into grid steps (for the rank test)
        self._rank_scale = np.where(res > 0, 1.0 / np.where(res > 0, res, 1.0), 1.0)

        self.phase = Phase.INIT
        self.vertices = np.zeros((0, space.dim))
        self.values = np.zeros(0)
        self.keys: list[Key] = []
        self.points: list[Point] = []
        self.iterations = 0
        self.convergence_reason = None
        self._batch: list[Candidate] = []
        self._memo: dict[Key, float] = {}
        self._refused: dict[Key, None] = {}
        self._outstanding: dict[Key, int] = {}
        self._trial_key: dict[int, Key] = {}
        self._seen_silent: set[tuple[Key, ...]] = set()
        self._silent_steps = 0
        #: restarts around a best vertex since the start (or the last :meth:`restart`)
        self.restarts = 0
        #: restarts in a row that found no better point, and the best value at the last one
        self._stale_restarts = 0
        self._best_at_restart: float | None = None
        self._silent_restarts = 0
        self._evals_at_start = 0
        self._start_batch(Phase.INIT, self._initial_simplex())

    # -- the Strategy contract ---------------------------------------------------
    def ask(self) -> Trial | None:
        if self.converged:
            if self.convergence_reason is None:
                self.convergence_reason = f"budget spent (max_evals {self.max_evals})"
            return None
        self._pump()
        if self.converged:
            return None
        for c in self._batch:
            if c.value is not None or c.handed_out:
                continue
            c.handed_out = True
            if c.key in self._outstanding:  # the same point is being measured already
                continue
            trial = self._new_trial(c.point)
            self._outstanding[c.key] = trial.id
            self._trial_key[trial.id] = c.key
            self._seen_silent.clear()
            self._silent_steps = 0
            self._silent_restarts = 0
            if self.max_evals is not None and self.evaluations >= self.max_evals:
                self.convergence_reason = f"budget spent (max_evals {self.max_evals})"
            logger.debug("%s: hand out trial %d (%s) %s", self.name, trial.id, self.phase.value,
                         trial.point)
            return trial
        return None

    @property
    def converged(self) -> bool:
        if self.phase is Phase.CONVERGED:
            return True
        return self.max_evals is not None and self.evaluations >= self.max_evals

    @property
    def evaluations(self) -> int:
        """Points handed out since the start or the last restart."""
        return len(self.trials) - self._evals_at_start

    def _on_result(self, trial: Trial) -> None:
        key = self._trial_key.pop(trial.id, None)
        if key is None:  # a late answer from before a restart: recorded, not used
            return
        self._outstanding.pop(key, None)
        value = self.score(trial)
        self._memo[key] = value
        for c in self._batch:
            if c.value is None and c.key == key:
                c.value = value
        self._pump()

    def rejected(self, trial_id: int, hint: Point | None = None) -> None:
        """A plugin refused a point: never hand it out again; replace it per ``reject_method``."""
        trial = self._trial(trial_id)
        if trial.done:
            return
        trial.failure = "rejected"
        key = self._trial_key.pop(trial_id, None)
        if key is None:
            return
        self._outstanding.pop(key, None)
        self._refused[key] = None
        for c in self._batch:
            if c.value is None and c.key == key:
                c.handed_out = False
                self._reject(c, hint)
                if c.value is None:
                    c.value = self._memo.get(c.key)
        self._pump()

    def restart(self, point: Point | None = None, simplex: list[Point] | None = None) -> None:
        """Start again: around ``point``, from ``simplex``, or from a new initial simplex.

        Remembered measurements are forgotten (the objective may have changed, e.g. after a
        workload shift); refused points stay refused. ``max_evals`` counts anew. Without a
        point or simplex the new initial simplex is never the previous one: a Latin hypercube
        or random simplex is drawn anew, and an axis simplex around ``init_point`` (or a given
        ``init_simplex``) becomes a randomly oriented simplex of the same radius.
        """
        if simplex is not None:
            if len(simplex) != self.simplex_size:
                raise ConfigError(f"strategy {self.name!r}: a restart simplex needs "
                                  f"{self.simplex_size} points (simplex_size), got {len(simplex)}")
            us = [self._unit(self.space.snap(p)) for p in simplex]
        elif point is not None:
            us = self._axis_simplex(self._unit(self.space.snap(point)),
                                    np.maximum(self.init_radius, self._min_step))
        elif self.init_method in ("point", "simplex"):
            centre = self.init_point if self.init_method == "point" or not self.init_simplex \
                else self.init_simplex[0]
            us = self._oriented_simplex(self._unit(self.space.snap(centre)), self.init_radius)
        else:
            us = self._initial_simplex()
        self._memo.clear()
        self._outstanding.clear()
        self._trial_key.clear()
        self._seen_silent.clear()
        self._silent_steps = 0
        self.restarts = 0
        self._stale_restarts = 0
        self._best_at_restart = None
        self._silent_restarts = 0
        self.convergence_reason = None
        self._evals_at_start = len(self.trials)
        logger.info("%s: restart (%s)", self.name,
                    "given simplex" if simplex is not None else
                    f"around {point}" if point is not None else self.init_method)
        self._start_batch(Phase.INIT, us)

    # -- views ---------------------------------------------------------------------
    def simplex(self) -> list[tuple[Point, float]]:
        """The current simplex, best first: each vertex's point and value."""
        return [(dict(p), float(v)) for p, v in zip(self.points, self.values, strict=True)]

    # -- subclass interface ----------------------------------------------------------
    @abstractmethod
    def _step(self) -> None:
        """Start the next move from the sorted, non-converged simplex."""

    @abstractmethod
    def _advance(self) -> None:
        """Consume the finished batch (every candidate has a value) of ``self.phase``."""

    # -- batches -------------------------------------------------------------------------
    def _start_batch(self, phase: Phase, us: Sequence[np.ndarray]) -> None:
        self.phase = phase
        self._batch = [self._candidate(u) for u in us]

    def _candidate(self, u: np.ndarray) -> Candidate:
        point = self.space.from_unit(u)
        c = Candidate(u=self._unit(point, raw=u), point=point, key=self.space.key(point))
        if not self._feasible(point):
            self._reject(c, None)
        if c.value is None:
            c.value = self._memo.get(c.key)
        return c

    def _pump(self) -> None:
        """Advance the state machine while the current batch needs no measurement."""
        while self.phase is not Phase.CONVERGED and all(c.value is not None for c in self._batch):
            self._silent_steps += 1
            if self._silent_steps > _MAX_SILENT_STEPS:
                logger.warning("%s: %d steps without a new point; stopping", self.name,
                               _MAX_SILENT_STEPS)
                self._converge("no progress")
                return
            self._advance()

    def _feasible(self, point: Point) -> bool:
        if self._refused and self.space.key(point) in self._refused:
            return False
        # every snapped point is in the whole space: skip the check for the trivial region
        return isinstance(self.region, WholeSpace) or self.region.contains(point)

    def _reject(self, c: Candidate, hint: Point | None) -> None:
        """Apply ``reject_method`` to an infeasible or refused candidate."""
        if self.reject_method != "penalty":
            for replacement in self._replacements(c.point, hint):
                try:
                    replacement = self.space.snap(replacement)
                except ConfigError as exc:
                    logger.warning("%s: ignoring a replacement that is not a point: %s",
                                   self.name, exc)
                    continue
                if self._feasible(replacement):
                    c.point, c.key, c.u = (replacement, self.space.key(replacement),
                                           self._unit(replacement))
                    return
        c.value = self.PENALTY

    def _replacements(self, point: Point, hint: Point | None) -> Iterator[Point]:
        if hint is not None:
            yield hint
        if self.reject_method == "project":
            projected = self.region.project(point)
            if projected is not None:
                yield projected
        else:
            for _ in range(_REPLACE_ATTEMPTS):
                yield self.region.sample(self.rng)

    def _unit(self, point: Point, raw: np.ndarray | None = None) -> np.ndarray:
        """Unit coordinates of a snapped point (continuous axes keep the exact ``raw``)."""
        u = self.space.to_unit(point)
        if raw is not None:
            u = np.where(self._continuous, np.clip(raw, 0.0, 1.0), u)
        return u

    # -- the simplex ------------------------------------------------------------------------
    def _accept(self, candidates: Sequence[Candidate]) -> None:
        """Make ``candidates`` the simplex, sorted best first (stable), then go on."""
        values = np.array([c.value for c in candidates], dtype=float)
        order = np.argsort(values, kind="stable")
        self.vertices = np.array([candidates[i].u for i in order])
        self.values = values[order]
        self.keys = [candidates[i].key for i in order]
        self.points = [candidates[i].point for i in order]
        self.iterations += 1
        self._check_and_step()

    def _vertex(self, i: int) -> Candidate:
        return Candidate(u=self.vertices[i], point=self.points[i], key=self.keys[i],
                         value=float(self.values[i]), handed_out=True)

    def _check_and_step(self) -> None:
        if self.max_evals is not None and self.evaluations >= self.max_evals:
            self._converge(f"budget spent (max_evals {self.max_evals})")
            return
        if len(set(self.keys)) == 1:
            self._stall("collapsed on the grid")
            return
        f0 = self.values[0]
        # penalised (infinite) vertices: never converged by tolerance
        spread = float(np.max(np.abs(self.values[1:] - f0))) \
            if np.all(np.isfinite(self.values)) else math.inf
        size = float(np.max(np.abs(self.vertices[1:] - self.vertices[0])))
        if spread <= self.fval_tol * abs(f0) + self.fval_atol and size <= self.size_tol:
            tolerances = f"tolerances (value spread {spread:.3g}, size {size:.3g})"
            if self._best_at_restart is not None and not self._improved_since_restart():
                self._converge(f"{tolerances} after a restart that found no better point "
                               f"({self.restarts} restarts)")
            else:
                self._stall(tolerances)
            return
        if self._degenerate(self.vertices):
            self._stall("degenerate simplex")
            return
        signature = tuple(self.keys)
        if signature in self._seen_silent:
            self._stall("cycle without new measurements")
            return
        self._seen_silent.add(signature)
        self._step()

    def _degenerate(self, vertices: np.ndarray) -> bool:
        n_eff = len(self.active_axes)
        if n_eff == 0:
            return False
        active = vertices[:, self.active_axes]
        if self._all_continuous and not np.any((active == 0.0) | (active == 1.0)):
            # off the grid and off the bounds nothing snaps, so nothing can flatten the simplex
            return False
        diffs = (active[1:] - active[0]) * self._rank_scale[self.active_axes]
        return int(np.linalg.matrix_rank(diffs)) < n_eff

    def _improved_since_restart(self) -> bool:
        """Whether the best value beat the one at the last restart by more than the tolerance."""
        if self._best_at_restart is None:
            return True
        f0 = float(self.values[0])
        tol = self.fval_tol * abs(self._best_at_restart) + self.fval_atol
        return bool(f0 < self._best_at_restart - tol) or (
            not math.isfinite(self._best_at_restart) and math.isfinite(f0))

    def restart_radius(self, k: int) -> float:
        """The radius (unit cube) of the ``k``-th restart: ``init_radius`` shrunk ``k`` times by
        ``restart_decay`` down to one grid step, then from ``init_radius`` again."""
        floor = float(np.max(self._min_step[self.active_axes])) if self.active_axes else 1.0
        if self.init_radius <= floor:
            return self.init_radius
        cycle = int(math.ceil(math.log(floor / self.init_radius) / math.log(self.restart_decay)))
        return max(self.init_radius * self.restart_decay ** (k % (cycle + 1)), floor)

    def _stall(self, reason: str) -> None:
        """Restart around the best vertex with a fresh, randomly oriented, smaller simplex.

        Converges instead when ``reexpand`` is off, when ``restart_patience`` restarts in a row
        found nothing better, or when restarts keep reaching only measured points.
        """
        if not self.reexpand:
            self._converge(reason)
            return
        if self._best_at_restart is not None:
            self._stale_restarts = 0 if self._improved_since_restart() \
                else self._stale_restarts + 1
        if self.restart_patience is not None and self._stale_restarts >= self.restart_patience:
            self._converge(f"{reason}; restart_patience: {self._stale_restarts} restarts in a "
                           f"row found no better point")
            return
        self._silent_restarts += 1
        if self._silent_restarts > _MAX_SILENT_RESTARTS:
            self._converge(f"{reason}; exhausted: {_MAX_SILENT_RESTARTS} restarts in a row reached "
                           f"only points measured already")
            return
        radius = self.restart_radius(self.restarts)
        if self._silent_restarts > _WIDEN_AFTER_SILENT:
            # the neighbourhood is all measured (an exact grid optimum, or a corner): look
            # wider, at a random radius so that every distance gets its chance
            widest = min(1.0, max(radius, self.init_radius)
                         * 2.0 ** (self._silent_restarts - _WIDEN_AFTER_SILENT))
            radius = float(self.rng.uniform(radius, widest))
        self.restarts += 1
        self._best_at_restart = float(self.values[0])
        logger.debug("%s: %s; restart %d around %s (radius %.3g)", self.name, reason,
                     self.restarts, self.points[0], radius)
        us = self._oriented_simplex(self.vertices[0], radius)
        self._seen_silent.clear()
        self.phase = Phase.INIT
        self._batch = [self._vertex(0)] + [self._candidate(u) for u in us[1:]]

    def _oriented_simplex(self, x0: np.ndarray, radius: float) -> list[np.ndarray]:
        """``x0`` plus ``simplex_size - 1`` vertices at ``radius`` in a random orientation.

        The first ``n`` directions are the columns of a random orthogonal matrix (so the simplex
        is a rotated, reflected axis simplex); further vertices take random unit directions.
        Every axis moves at least one grid step. If the grid flattens the rotated simplex, a
        randomly signed axis simplex in random axis order is used instead.
        """
        axes = self.active_axes
        n_eff = len(axes)
        if n_eff == 0:
            return [np.array(x0, dtype=float)] * self.simplex_size
        q, r = np.linalg.qr(self.rng.standard_normal((n_eff, n_eff)))
        q = q * np.sign(np.diag(r))  # a uniformly random orthogonal matrix
        directions = [q[:, j] for j in range(n_eff)]
        for _ in range(self.simplex_size - 1 - n_eff):
            d = self.rng.standard_normal(n_eff)
            directions.append(d / np.linalg.norm(d))
        step = np.maximum(radius, self._min_step[axes])
        us = [np.array(x0, dtype=float)]
        for d in directions[: self.simplex_size - 1]:
            u = np.array(x0, dtype=float)
            moved = u[axes] + step * d
            # a step out of the unit cube goes the other way along that axis
            out = (moved < 0.0) | (moved > 1.0)
            moved[out] = u[axes][out] - (step * d)[out]
            u[axes] = np.clip(moved, 0.0, 1.0)
            us.append(self._unit(self.space.from_unit(u), raw=u))
        if not self._degenerate(np.array(us)):
            return us
        order = self.rng.permutation(n_eff)
        signs = self.rng.choice([-1.0, 1.0], size=n_eff)
        us = [np.array(x0, dtype=float)]
        for j in range(1, self.simplex_size):
            k = order[(j - 1) % n_eff]
            axis = axes[k]
            ring = (j - 1) // n_eff
            u = np.array(x0, dtype=float)
            delta = signs[k] * (1 if ring % 2 == 0 else -1) * step[k] * (1 + ring // 2)
            moved = u[axis] + delta
            if moved > 1.0 or moved < 0.0:
                moved = u[axis] - delta
            u[axis] = min(max(moved, 0.0), 1.0)
            us.append(u)
        return us

    def _converge(self, reason: str) -> None:
        self.phase = Phase.CONVERGED
        self.convergence_reason = reason
        self._batch = []
        logger.info("%s: converged (%s) after %d evaluations; best %s", self.name, reason,
                    self.evaluations, self.points[0] if self.points else None)

    # -- initial simplices ----------------------------------------------------------------------
    def _initial_simplex(self) -> list[np.ndarray]:
        if self.init_method == "simplex" and self.init_simplex is not None:
            out = []
            for point in self.init_simplex:
                if not self._feasible(point):
                    point = self.space.snap(self.region.sample(self.rng))
                out.append(self._unit(point))
            return out
        if self.init_method in ("point", "random-point"):
            start = self.init_point if self.init_method == "point" \
                else self.space.snap(self.region.sample(self.rng))
            return self._axis_simplex(self._unit(start),
                                      np.maximum(self.init_radius, self._min_step))
        best: list[np.ndarray] = []
        for _ in range(_INIT_ATTEMPTS):
            if self.init_method == "lhs":
                us = self._latin_hypercube()
            else:
                us = [self._unit(self.space.snap(self.region.sample(self.rng)))
                      for _ in range(self.simplex_size)]
            best = us
            if not self._degenerate(np.array(us)):
                break
        return best

    def _latin_hypercube(self) -> list[np.ndarray]:
        """``simplex_size`` points, one per stratum of every axis; infeasible ones resampled."""
        k, dim = self.simplex_size, self.space.dim
        u = np.full((k, dim), 0.5)
        for axis in range(dim):
            u[:, axis] = (self.rng.permutation(k) + self.rng.random(k)) / k
        out = []
        for row in u:
            point = self.space.from_unit(row)
            if not self._feasible(point):
                for _ in range(_REPLACE_ATTEMPTS):
                    sampled = self.space.snap(self.region.sample(self.rng))
                    if self._feasible(sampled):
                        point = sampled
                        break
            out.append(self._unit(point, raw=row if self._feasible(point) else None))
        return out

    def _axis_simplex(self, x0: np.ndarray, radius: np.ndarray,
                      sign: float = 1.0) -> list[np.ndarray]:
        """``x0`` plus axis steps (like scipy's initial simplex): vertex j moves along one axis.

        With more vertices than movable axes + 1, later rounds step the other way and further.
        A step that would leave the unit cube is taken in the opposite direction.
        """
        us = [np.array(x0, dtype=float)]
        n_eff = len(self.active_axes)
        if n_eff == 0:  # nothing can move: every vertex is the one point of the space
            return us * self.simplex_size
        for j in range(1, self.simplex_size):
            axis = self.active_axes[(j - 1) % n_eff]
            ring = (j - 1) // n_eff
            direction = sign if ring % 2 == 0 else -sign
            step = float(radius[axis]) * (1 + ring // 2)
            u = np.array(x0, dtype=float)
            moved = u[axis] + direction * step
            if moved > 1.0 or moved < 0.0:
                moved = u[axis] - direction * step
            u[axis] = min(max(moved, 0.0), 1.0)
            us.append(u)
        return us


def _is_fixed(p: Any) -> bool:
    if isinstance(p, RealParam) and not p.discrete:
        return p.max == p.min
    return bool(p.size == 1)


def _check_real(strategy: str, option: str, value: Any, *, low: float | None = None,
                high: float | None = None, low_open: bool = False,
                high_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise option_error(strategy, option, "a finite number", value)
    bad_low = low is not None and (value <= low if low_open else value < low)
    bad_high = high is not None and (value >= high if high_open else value > high)
    if bad_low or bad_high:
        lo = "" if low is None else f"{low} {'<' if low_open else '<='} "
        hi = "" if high is None else f" {'<' if high_open else '<='} {high}"
        raise option_error(strategy, option, f"{lo}{option}{hi}".strip(), value)
