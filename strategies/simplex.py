"""Shared machinery of the simplex strategies (Nelder-Mead and Parallel Rank Ordering).

A simplex strategy works on the unit-normalised space: every vertex is a vector of
``[0, 1]^dim`` whose point is snapped to the grid. It moves in *batches* of candidate
vertices; :meth:`ask` hands out a batch's unmeasured points (several at once when the
batch holds several), and the state machine advances once every candidate has a value.

Candidates get their values from three places besides a measurement: a candidate outside
the feasible region is handled by ``reject_method`` (:mod:`strategies.simplex_vertices`);
a candidate whose snapped point was measured before is answered from memory; a candidate
sharing its point with another outstanding one waits for that measurement. So a grid that
turns a move into a no-op never costs a measurement.

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

import logging
import math
from abc import abstractmethod
from collections.abc import Mapping, Sequence

import numpy as np

from harmony_base.jsontypes import JSON
from harmony_base.region import FeasibleRegion
from harmony_base.space import Point, RealParam, Space
from strategies.base import Strategy, Trial
from strategies.options import check_simplex_options, is_fixed, option_error
from strategies.simplex_combine import CombineStep
from strategies.simplex_phase import Phase
from strategies.simplex_vertices import Candidate, Key, SimplexVertices

logger = logging.getLogger(__name__)

#: safety net: state-machine steps in a row without handing out a point
_MAX_SILENT_STEPS = 100_000
#: restarts in a row that needed no new measurement before the grid counts as exhausted
_MAX_SILENT_RESTARTS = 60


class SimplexStrategy(CombineStep, SimplexVertices, Strategy):
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
      * ``combine`` (off): after an initial axis simplex (``point``, ``random-point``), measure
        once the point that takes every axis's better step at once, a one-factor-at-a-time
        design's predicted best (:meth:`_main_effects_point`); it replaces the worst vertex
        where it beats it. The tuner's online search turns it on.

    Subclasses implement :meth:`_step` (start the next move from the sorted simplex) and
    :meth:`_advance` (consume a finished batch).
    """

    def __init__(self, space: Space, *, seed: int = 0, region: FeasibleRegion | None = None,
                 simplex_size: int | None = None, init_method: str | None = None,
                 init_point: Mapping[str, JSON] | None = None, init_radius: float = 0.3,
                 init_simplex: Sequence[Mapping[str, JSON]] | None = None,
                 reject_method: str = "penalty", fval_tol: float = 1e-4, fval_atol: float = 0.0,
                 size_tol: float = 1e-4, max_evals: int | None = None, reexpand: bool = True,
                 restart_decay: float = 0.5, restart_patience: int | None = None,
                 shrink: float = 0.5, combine: bool = False):
        super().__init__(space, seed=seed, region=region)
        if not isinstance(combine, bool):
            raise option_error(type(self).name, "combine", "true or false", combine)
        #: indices of the axes that can move (a parameter with one grid value cannot)
        self.active_axes = [k for k, p in enumerate(space.params) if not is_fixed(p)]
        options = check_simplex_options(
            type(self).name, space, len(self.active_axes), simplex_size=simplex_size,
            init_method=init_method, init_point=init_point, init_radius=init_radius,
            init_simplex=init_simplex, reject_method=reject_method, fval_tol=fval_tol,
            fval_atol=fval_atol, size_tol=size_tol, max_evals=max_evals,
            restart_decay=restart_decay, restart_patience=restart_patience, shrink=shrink)
        self.simplex_size: int = options.simplex_size
        self.init_method: str = options.init_method
        self.init_point: Point = dict(options.init_point) if options.init_point is not None \
            else space.default_point()
        self.init_radius = float(init_radius)
        #: a given initial simplex (e.g. the best points of prior sessions: a warm start)
        self.init_simplex: list[Point] | None = (
            [dict(p) for p in options.init_simplex] if options.init_simplex is not None
            else None)
        self.reject_method = reject_method
        self.fval_tol = float(fval_tol)
        self.fval_atol = float(fval_atol)
        self.size_tol = float(size_tol)
        self.max_evals = max_evals
        self.reexpand = bool(reexpand)
        self.restart_decay = float(restart_decay)
        self.restart_patience = restart_patience
        self.shrink_coef = float(shrink)
        self._init_grid(space)
        self._init_state(space)
        #: the initial axis simplex's main-effects point is measured once (``combine``)
        self._combine_pending = combine and self.init_method in ("point", "random-point")
        self._init_batch: list[Candidate] = []
        self._start_batch(Phase.INIT, self._initial_simplex())

    def _init_grid(self, space: Space) -> None:
        """Per-axis grid facts in unit coordinates: continuous axes, the smallest step, the
        scale of the rank test."""
        res = space.unit_resolution()
        self._continuous = np.array([isinstance(p, RealParam) and not p.discrete
                                     for p in space.params])
        #: one grid step per axis in unit coordinates (``size_tol`` for continuous axes)
        self._min_step = np.where(self._continuous, max(self.size_tol, 1e-9), res)
        self._all_continuous = bool(np.all(self._continuous[self.active_axes]))
        #: per-axis scale that turns unit differences into grid steps (for the rank test)
        self._rank_scale = np.where(res > 0, 1.0 / np.where(res > 0, res, 1.0), 1.0)

    def _init_state(self, space: Space) -> None:
        """The state machine before the first batch: no simplex, no memory, no restarts."""
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
        us = self._restart_simplex(point, simplex)
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

    def _pump(self) -> None:
        """Advance the state machine while the current batch needs no measurement."""
        while self.phase is not Phase.CONVERGED and all(c.value is not None for c in self._batch):
            self._silent_steps += 1
            if self._silent_steps > _MAX_SILENT_STEPS:
                logger.warning("%s: %d steps without a new point; stopping", self.name,
                               _MAX_SILENT_STEPS)
                self._converge("no progress")
                return
            self._advance_phase()

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

    def _improved_since_restart(self) -> bool:
        """Whether the best value beat the one at the last restart by more than the tolerance."""
        if self._best_at_restart is None:
            return True
        f0 = float(self.values[0])
        tol = self.fval_tol * abs(self._best_at_restart) + self.fval_atol
        return bool(f0 < self._best_at_restart - tol) or (
            not math.isfinite(self._best_at_restart) and math.isfinite(f0))

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
        radius = self._stall_radius(self.restarts, self._silent_restarts)
        self.restarts += 1
        self._best_at_restart = float(self.values[0])
        logger.debug("%s: %s; restart %d around %s (radius %.3g)", self.name, reason,
                     self.restarts, self.points[0], radius)
        us = self._oriented_simplex(self.vertices[0], radius)
        self._seen_silent.clear()
        self.phase = Phase.INIT
        self._batch = [self._vertex(0)] + [self._candidate(u) for u in us[1:]]

    def _converge(self, reason: str) -> None:
        self.phase = Phase.CONVERGED
        self.convergence_reason = reason
        self._batch = []
        logger.info("%s: converged (%s) after %d evaluations; best %s", self.name, reason,
                    self.evaluations, self.points[0] if self.points else None)


