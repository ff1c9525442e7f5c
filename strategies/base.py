"""The push-style strategy contract shared by every search strategy.

A strategy is a state machine: the session *asks* it for points and *tells* it what
they measured. Strategies always minimise; the session flips the sign for objectives
that are maximised. Strategies never import HTTP, storage or database code.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from harmony_base.errors import ConfigError, TrialError
from harmony_base.region import FeasibleRegion, WholeSpace
from harmony_base.registry import Registry
from harmony_base.space import Point, Space


@dataclass
class Trial:
    """A point handed out by a strategy, identified by ``id`` (unique within the strategy).

    This is the strategy's own proposal, not the session's trial record
    (:class:`harmony_base.trial.TrialRecord`): one proposal may be handed to clients as
    several trials (re-leased after a lease runs out, re-measured by ``agg``), or answered
    by a plugin without any; its value is in the strategy's sign (always minimised). The
    strategy knows nothing of clients, leases or times, so it keeps this small mutable type.
    """

    id: int
    point: Point
    value: float | None = None
    failure: str | None = None

    @property
    def done(self) -> bool:
        return self.value is not None or self.failure is not None


@dataclass
class _Registry:
    classes: dict[str, type[Strategy]] = field(default_factory=dict)


class Strategy(ABC):
    """Base class: subclasses register under a name, e.g. ``class X(Strategy, name="x")``.

    Contract:
      * :meth:`ask` returns a new :class:`Trial` or ``None`` when nothing can be handed out
        until more results are told; it never returns a point outside the space or
        outside the feasible region.
      * :meth:`tell` takes a trial id and a value to minimise, or a failure reason; a second
        report for the same id is ignored (returns ``False``); an unknown id raises.
      * :meth:`rejected` is how a plugin refuses a point it was handed; ``hint`` is an
        optional replacement point.
    """

    registry: ClassVar[Registry[Strategy]] = Registry("strategy", group="harmony.strategies")
    name: ClassVar[str] = ""
    #: value used to rank failed and penalised trials: worse than any real measurement
    PENALTY: ClassVar[float] = math.inf

    def __init_subclass__(cls, name: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if name is not None:
            Strategy.registry.add(name, cls)
            cls.name = name

    def __init__(self, space: Space, *, seed: int = 0, region: FeasibleRegion | None = None):
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.region: FeasibleRegion = region if region is not None else WholeSpace(space)
        self.trials: dict[int, Trial] = {}
        self._next_id = 0
        #: why the strategy stopped handing out points (``None`` while it goes on)
        self.convergence_reason: str | None = None

    # -- the contract ---------------------------------------------------------
    @abstractmethod
    def ask(self) -> Trial | None:
        """The next point to measure, or ``None`` when waiting for results."""

    @abstractmethod
    def _on_result(self, trial: Trial) -> None:
        """React to a finished trial (value set, or failure set)."""

    @property
    @abstractmethod
    def converged(self) -> bool:
        """True once the strategy will hand out no further useful points."""

    def tell(self, trial_id: int, value: float | None = None, failure: str | None = None) -> bool:
        """Record a result; returns ``False`` for a duplicate report (ignored)."""
        trial = self._trial(trial_id)
        if trial.done:
            return False
        if failure is None and value is not None and math.isfinite(value):
            trial.value = float(value)
        else:
            trial.failure = failure if failure is not None else f"non-finite measurement {value!r}"
            trial.value = None
        self._on_result(trial)
        return True

    def rejected(self, trial_id: int, hint: Point | None = None) -> None:
        """A plugin refused this point; by default it counts as a failed (penalised) trial."""
        self.tell(trial_id, failure="rejected")

    def best(self) -> Trial | None:
        """The measured trial with the lowest value so far (failures excluded)."""
        done = [t for t in self.trials.values() if t.value is not None]
        return min(done, key=lambda t: (t.value, t.id)) if done else None

    def restart(self, point: Point | None = None, simplex: list[Point] | None = None) -> None:
        """Start the search again, optionally from a point or a full simplex."""
        raise ConfigError(f"strategy {self.name!r} does not support restart")

    # -- helpers for subclasses ----------------------------------------------
    def _new_trial(self, point: Point) -> Trial:
        trial = Trial(self._next_id, self.space.snap(point))
        self._next_id += 1
        self.trials[trial.id] = trial
        return trial

    def _trial(self, trial_id: int) -> Trial:
        try:
            return self.trials[trial_id]
        except KeyError:
            raise TrialError(f"strategy {self.name!r} never handed out trial {trial_id}") from None

    @staticmethod
    def score(trial: Trial) -> float:
        """The value used for ranking: failures rank worse than every measurement."""
        return trial.value if trial.value is not None else Strategy.PENALTY


def load_entry_point_strategies() -> None:
    """Import third-party strategies registered in the ``harmony.strategies`` group."""
    Strategy.registry.load_entry_points()


def make_strategy(name: str, space: Space, *, seed: int = 0,
                  region: FeasibleRegion | None = None, **options: object) -> Strategy:
    """Instantiate a registered strategy by name; unknown names and options are errors."""
    # the built-ins are registered: importing this module ran strategies/__init__.py first

    # only a failure to bind the options is the user's "bad options"; a TypeError raised
    # inside the constructor is a bug and propagates as it is
    return Strategy.registry.build(name, space, seed=seed, region=region, **options)
