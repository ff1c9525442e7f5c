"""The session core: a strategy, its plugin stack, and trial bookkeeping.

Pure and deterministic: no I/O, no clock, no threads. The server wraps it for the network
(logging every command that changed it before answering, and replaying that log after a
crash); the client's standalone mode runs the very same core in-process.

Terms: a *candidate* is one point the strategy asked for; a *trial* is one hand-out of a
candidate to a client (with ``agg``, one candidate is measured several times). Clients
report by trial id. Values are in the objective's own sign everywhere except at the
strategy boundary, where maximised objectives are negated (strategies always minimise).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np

from harmony_base.errors import ConfigError, HarmonyError, TrialError
from harmony_base.region import FeasibleRegion
from harmony_base.space import Point, Space
from harmony_base.trial import SessionStatus, TrialRecord, TrialStatus
from harmony_core.definition import PluginSpec, SessionDefinition
from plugins.base import Flow, FlowResult, HistoryEntry, Plugin, PluginTrial, make_plugin
from strategies.base import Strategy, make_strategy

__all__ = ["Assignment", "PluginSpec", "SessionCore", "SessionDefinition", "TrialRecord"]

logger = logging.getLogger(__name__)

#: how many plugin rejections/returns one fetch may work through before answering "wait"
_MAX_STEPS_PER_FETCH = 10_000


@dataclass
class Assignment:
    """A trial handed to a client."""

    trial_id: int
    point: Point
    candidate: int


@dataclass
class _Candidate:
    id: int
    strategy_id: int
    generation: int
    point: Point
    samples: list[float] = field(default_factory=list)
    done: bool = False
    outstanding: int = 0  # trials handed out and not yet reported or released


class _Intersection:
    """The feasible region of several plugins at once."""

    def __init__(self, space: Space, regions: list[FeasibleRegion]):
        self.space = space
        self.regions = regions

    def contains(self, point: Point) -> bool:
        return all(r.contains(point) for r in self.regions)

    def sample(self, rng: np.random.Generator) -> Point:
        for _ in range(10_000):
            point = self.regions[0].sample(rng)
            if self.contains(point):
                return point
        raise HarmonyError("could not sample a point that satisfies every plugin's constraints")

    def project(self, point: Point) -> Point | None:
        for region in self.regions:
            projected = region.project(point)
            if projected is None:
                return None
            point = projected
        return point if self.contains(point) else None


class SessionCore:
    """One tuning session's state machine (see the module docstring)."""

    def __init__(self, definition: SessionDefinition):
        self.definition = definition
        self.name = definition.name
        self.seed = definition.seed
        self.maximize = definition.maximize
        #: True while the server replays its command log (plugins with side effects skip them)
        self.replaying = False
        self.version = 0
        self.paused = False
        self.clients: set[str] = set()
        self._trials: dict[int, TrialRecord] = {}
        self._candidates: dict[int, _Candidate] = {}
        self._queue: deque[int] = deque()
        self._history: list[HistoryEntry] = []
        self._best: tuple[Point, float] | None = None
        self._generation = 0
        self._space = definition.space
        self.plugins: list[Plugin] = [make_plugin(p.name, self, **dict(p.options))
                                      for p in definition.plugins]
        for plugin in self.plugins:
            self._space = plugin.init(self._space)
        regions = [r for r in (p.region() for p in self.plugins) if r is not None]
        self.region: FeasibleRegion | None = None
        if len(regions) == 1:
            self.region = regions[0]
        elif regions:
            self.region = _Intersection(self._space, regions)
        self.strategy: Strategy = make_strategy(definition.strategy, self._space,
                                                seed=definition.seed, region=self.region,
                                                **dict(definition.strategy_options))

    # -- SessionView (what plugins see) -----------------------------------------
    @property
    def space(self) -> Space:
        return self._space

    def history(self) -> list[HistoryEntry]:
        """Every completed candidate: its point and (aggregated) value or failure, in order."""
        return list(self._history)

    # -- commands ---------------------------------------------------------------
    def join(self, client: str) -> None:
        if client not in self.clients:
            self.clients.add(client)
            for plugin in self.plugins:
                plugin.join(client)
            self.version += 1

    def fetch(self, client: str) -> Assignment | None:
        """Hand the next point to ``client``, or ``None`` when nothing is ready now."""
        if self.paused:
            return None
        for _ in range(_MAX_STEPS_PER_FETCH):
            candidate = self._next_candidate()
            if candidate is None:
                return None
            trial = PluginTrial(candidate=candidate.id, point=dict(candidate.point), client=client,
                                samples=list(candidate.samples))
            result = self._run_hooks("generate", trial)
            if result.flow is Flow.WAIT:
                self._queue.appendleft(candidate.id)
                return None
            if result.flow is Flow.REJECT:
                self._reject(candidate, result)
                continue
            if result.flow is Flow.RETURN:
                # answered without measuring (e.g. from a cache): complete it as it stands
                self.version += 1
                self._complete(candidate, result.value,
                               None if result.value is not None else result.reason or "returned")
                continue
            record = TrialRecord(id=len(self._trials), candidate=candidate.id,
                                 point=dict(candidate.point), client=client)
            self._trials[record.id] = record
            candidate.outstanding += 1
            self.version += 1
            return Assignment(record.id, dict(record.point), candidate.id)
        logger.warning("session %s: %d plugin decisions in one fetch without a point to hand out",
                       self.name, _MAX_STEPS_PER_FETCH)
        return None

    def report(self, trial_id: int, value: float | None = None, failure: str | None = None,
               client: str | None = None) -> bool:
        """Record a measurement; ``False`` for a duplicate (ignored, never double counted)."""
        record = self._trial(trial_id)
        if record.status.reported:
            return False
        measured: float | None = None
        if failure is None:
            if value is None or isinstance(value, bool) or not math.isfinite(float(value)):
                failure = f"non-finite measurement {value!r}"
            else:
                measured = float(value)
        candidate = self._candidates[record.candidate]
        if record.status is TrialStatus.LEASED:
            candidate.outstanding -= 1
        else:  # a late report for a released trial: keep it, drop the re-queued copy if unused
            self._drop_from_queue(candidate.id)
        record = replace(record, status=TrialStatus.FAILED if failure is not None
                         else TrialStatus.DONE, value=measured, failure=failure,
                         client=client if client is not None else record.client)
        self._trials[record.id] = record
        self.version += 1
        if not candidate.done:
            self._record_sample(candidate, record.value, failure, client=record.client)
        return True

    def release(self, trial_id: int) -> None:
        """The trial's lease expired: hand its point out again."""
        record = self._trial(trial_id)
        if record.status is not TrialStatus.LEASED:
            return
        self._trials[record.id] = replace(record, status=TrialStatus.RELEASED)
        candidate = self._candidates[record.candidate]
        candidate.outstanding -= 1
        if not candidate.done and candidate.generation == self._generation:
            self._queue.appendleft(candidate.id)
        self.version += 1

    def pause(self) -> None:
        if not self.paused:
            self.paused = True
            self.version += 1

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.version += 1

    def restart(self, point: Point | None = None) -> None:
        """Start the search again (optionally from ``point``); outstanding trials become stale."""
        if point is not None:
            self._space.check_point(point)
        self._generation += 1
        self._queue.clear()
        try:
            self.strategy.restart(point=self._space.snap(point) if point is not None else None)
        except ConfigError:
            # strategies without restart support start over from scratch with a new seed
            self.strategy = make_strategy(self.definition.strategy, self._space,
                                          seed=self.definition.seed + self._generation,
                                          region=self.region,
                                          **dict(self.definition.strategy_options))
        self.version += 1

    def close(self) -> None:
        for plugin in self.plugins:
            plugin.fini()

    # -- queries ----------------------------------------------------------------
    def best(self) -> tuple[Point, float] | None:
        """The best completed candidate so far, in the objective's own sign."""
        return (dict(self._best[0]), self._best[1]) if self._best is not None else None

    @property
    def converged(self) -> bool:
        return bool(self.strategy.converged or any(p.converged() for p in self.plugins))

    @property
    def convergence_reason(self) -> str | None:
        """Why the search ended (e.g. the budget spent, a tolerance met), None while it runs."""
        if self.strategy.converged:
            return self.strategy.convergence_reason or "the strategy converged"
        for plugin in self.plugins:
            if plugin.converged():
                return f"plugin {type(plugin).__name__} ended the search"
        return None

    @property
    def status(self) -> SessionStatus:
        """``paused``, ``converged`` or ``running`` (what session listings show)."""
        if self.paused:
            return SessionStatus.PAUSED
        return SessionStatus.CONVERGED if self.converged else SessionStatus.RUNNING

    def trials(self) -> list[TrialRecord]:
        return list(self._trials.values())

    def trial(self, trial_id: int) -> TrialRecord:
        return self._trial(trial_id)

    def counts(self) -> dict[str, int]:
        out = {status.value: 0 for status in TrialStatus}
        for record in self._trials.values():
            out[record.status.value] += 1
        out["candidates"] = len(self._candidates)
        out["completed"] = len(self._history)
        return out

    # -- internals --------------------------------------------------------------
    def _trial(self, trial_id: int) -> TrialRecord:
        try:
            return self._trials[int(trial_id)]
        except (KeyError, TypeError, ValueError):
            raise TrialError(f"session {self.name!r} has no trial {trial_id!r}") from None

    def _next_candidate(self) -> _Candidate | None:
        while self._queue:
            candidate = self._candidates[self._queue.popleft()]
            if not candidate.done and candidate.generation == self._generation:
                return candidate
        asked = self.strategy.ask()
        if asked is None:
            return None
        candidate = _Candidate(id=len(self._candidates), strategy_id=asked.id,
                               generation=self._generation, point=dict(asked.point))
        self._candidates[candidate.id] = candidate
        self.version += 1
        return candidate

    def _drop_from_queue(self, candidate_id: int) -> None:
        if candidate_id in self._queue:
            self._queue.remove(candidate_id)

    def _run_hooks(self, hook: str, trial: PluginTrial) -> FlowResult:
        for plugin in self.plugins:
            result: FlowResult = getattr(plugin, hook)(trial)
            if result.flow is not Flow.ACCEPT:
                return result
        return FlowResult(Flow.ACCEPT, value=trial.value)

    def _reject(self, candidate: _Candidate, result: FlowResult) -> None:
        candidate.done = True
        self.version += 1
        logger.debug("session %s: candidate %d %s rejected: %s", self.name, candidate.id,
                     candidate.point, result.reason)
        if candidate.generation == self._generation:
            hint = self._space.snap(result.hint) if result.hint is not None else None
            self.strategy.rejected(candidate.strategy_id, hint)

    def _record_sample(self, candidate: _Candidate, value: float | None, failure: str | None,
                       client: str | None) -> None:
        if value is not None:
            candidate.samples.append(float(value))
        trial = PluginTrial(candidate=candidate.id, point=dict(candidate.point), value=value,
                            failure=failure, client=client, samples=list(candidate.samples))
        result = self._run_hooks("analyze", trial)
        self.version += 1
        if result.flow is Flow.RETRY:
            self._queue.appendleft(candidate.id)
            return
        if result.flow is Flow.WAIT:
            return  # a plugin holds the result back; it stays incomplete
        if result.flow is Flow.REJECT:
            self._reject(candidate, result)
            return
        final = result.value if result.flow is Flow.RETURN else trial.value
        self._complete(candidate, final, trial.failure)

    def _complete(self, candidate: _Candidate, value: float | None, failure: str | None) -> None:
        candidate.done = True
        self._drop_from_queue(candidate.id)
        if value is not None and not math.isfinite(value):
            value, failure = None, failure or f"non-finite value {value!r}"
        self._history.append(HistoryEntry(dict(candidate.point), value, failure))
        if value is not None and (self._best is None or (
                value > self._best[1] if self.maximize else value < self._best[1])):
            self._best = (dict(candidate.point), value)
        if candidate.generation != self._generation:
            return  # a stale measurement from before a restart: kept, not told
        if value is None:
            self.strategy.tell(candidate.strategy_id, failure=failure or "failed")
        else:
            self.strategy.tell(candidate.strategy_id, -value if self.maximize else value)
