"""A simulator of tuning on N replicas: the measured noise model over a synthetic surface.

Each replica is a :class:`~tuner_client.stats.noise.NoisyObjective` of its own (its own
drift walk, its own bias: per-point CV, drift and outliers as measured on this machine,
``REPLICA_CV`` between replicas) on a shared simulated clock. A replica measures one point
at a time in the tuner's paired protocol (:mod:`tuner_client.phases.blocks`): the reference,
then the candidate, the trailing reference opening the next block, so one evaluation costs
two measurements. The strategy is told the block ratio times the pooled level (the geometric
mean of the replicas' first reference values), exactly as
:mod:`tuner_client.phases.session_loop` does; with ``normalise=False`` it is told the raw value
instead (the ablation: replica bias and drift reach the strategy). A free replica takes the
next point the strategy can offer, so PRO's batches spread over the replicas and a
sequential strategy keeps one replica busy.

The truth is a throughput surface in (0, 1]: ``1 / (1 + (f(x) − f*) / gap)`` for a synthetic
minimisation problem :func:`harmony_core.synth.make_problem` (1 at the optimum, 0.5 at a typical
random point), so "90 % of the best configuration" is a true value of 0.9.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSON
from harmony_core.synth import Problem, make_problem
from strategies.base import Strategy, Trial, make_strategy
from tuner_client.stats.noise import POINT_SECONDS_REF, NoiseModel, NoisyObjective


@dataclass
class SimRun:
    """One simulated run: when the search's pick first reached the target, and what it is
    worth at the end."""

    replicas: int
    strategy: str
    evaluations: int = 0
    #: simulated seconds until the pick's true value first reached ``target`` (None: never)
    time_to_target: float | None = None
    #: the true value of the search's pick (its best measured point) at the end
    search_true: float = 0.0
    #: the true value of the final rounds' pick: the search's ``finalists`` best distinct
    #: points re-measured ``rounds`` times, paired, the rounds spread over the replicas
    final_true: float = 0.0
    #: (simulated seconds, true value of the pick) after every evaluation
    curve: list[tuple[float, float]] = field(default_factory=list)


def throughput_truth(problem: Problem) -> Any:
    """The problem as a throughput surface in (0, 1] (see the module docstring)."""
    gap = problem.typical_gap()

    def truth(point: Mapping[str, JSON]) -> float:
        return 1.0 / (1.0 + max(problem(point) - problem.optimum, 0.0) / gap)

    return truth


def simulate(replicas: int, *, strategy: str = "pro", function: str = "rosenbrock",
             dim: int = 4, seconds: float = 4 * 3600.0, seed: int = 0,
             model: NoiseModel | None = None, point_seconds: float = POINT_SECONDS_REF,
             target: float = 0.9, normalise: bool = True, finalists: int = 3,
             rounds: int = 4, strategy_options: Mapping[str, Any] | None = None) -> SimRun:
    """Tune for ``seconds`` of simulated time on ``replicas`` replicas (see the module
    docstring); PRO gets ``simplex_size = max(dim + 1, replicas + 1)`` unless given."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ConfigError(f"replicas must be a positive integer, got {replicas!r}")
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"seconds must be a positive number, got {seconds!r}")
    problem = make_problem(function, dim)
    truth = throughput_truth(problem)
    options = dict(strategy_options or {})
    if strategy == "pro":
        options.setdefault("simplex_size", max(dim + 1, replicas + 1))
    strat: Strategy = make_strategy(strategy, problem.space, seed=seed, **options)
    reference = problem.space.snap({n: 0.5 * (problem.space.numeric(n).min
                                              + problem.space.numeric(n).max)
                                    for n in problem.space.names})
    fleet = _Fleet.start(replicas, truth, model or NoiseModel.measured(), seed, reference,
                         point_seconds, normalise)
    run = SimRun(replicas, strategy)
    best_measured = -math.inf
    pick_true = 0.0
    pick_point: Mapping[str, Any] | None = None
    measured: list[tuple[float, Mapping[str, JSON]]] = []
    while True:
        if strat.converged and not fleet.events:
            # converged with time left: search again around the pick (as a tuner would)
            try:
                strat.restart(point=dict(pick_point) if pick_point is not None else None)
            except ConfigError:
                break
        fleet.hand_out(strat, seconds)
        if not fleet.events:
            break
        now, i, trial, value = fleet.next_result()
        strat.tell(trial.id, -value)
        run.evaluations += 1
        measured.append((value, trial.point))
        if value > best_measured:
            best_measured, pick_true, pick_point = value, truth(trial.point), trial.point
        run.curve.append((now, pick_true))
        if run.time_to_target is None and pick_true >= target:
            run.time_to_target = now
        fleet.release(i, now)
    run.search_true = pick_true
    run.final_true = truth(_final_pick(measured, fleet.machines, reference, fleet.last_ref,
                                       fleet.clock, finalists, rounds, point_seconds))
    return run


@dataclass
class _Fleet:
    """The replicas on the simulated clock: each one's noisy machine, its last reference
    value, its own time; the results on their way (a heap by finish time) and the free
    replicas."""

    machines: list[NoisyObjective]
    reference: Mapping[str, JSON]
    last_ref: list[float]
    clock: list[float]
    point_seconds: float
    #: the pooled level the block ratios are scaled to; None: the strategy gets raw values
    level: float | None
    events: list[tuple[float, int, int]] = field(default_factory=list)  # (finish, replica, id)
    pending: dict[int, tuple[Trial, float]] = field(default_factory=dict)
    free: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, replicas: int, truth: Any, model: NoiseModel, seed: int,
              reference: Mapping[str, JSON], point_seconds: float, normalise: bool) -> _Fleet:
        """Every replica measures the reference once, opening its first block; their
        geometric mean is the pooled level."""
        machines = [NoisyObjective(truth, model, seed=int(seed * 1000 + i), replica=i)
                    for i in range(replicas)]
        last_ref = [m.measure(reference, point_seconds) for m in machines]
        level = math.exp(float(np.mean(np.log(last_ref))))
        return cls(machines, reference, last_ref, [point_seconds] * replicas, point_seconds,
                   level if normalise else None, free=list(range(replicas)))

    def hand_out(self, strat: Strategy, seconds: float) -> None:
        """Hand a point to every free replica the strategy can serve now (and whose time is
        not up); each measures it in its paired block."""
        still_free = []
        for i in self.free:
            trial = strat.ask() if self.clock[i] < seconds else None
            if trial is None:
                still_free.append(i)
                continue
            m = self.machines[i]
            m.idle(self.clock[i] - m.now)  # the replica waited for a point: its drift walked on
            candidate = m.measure(trial.point, self.point_seconds)
            after = m.measure(self.reference, self.point_seconds)
            ratio = candidate / math.sqrt(self.last_ref[i] * after)
            self.last_ref[i] = after
            value = ratio * self.level if self.level is not None else candidate
            self.clock[i] = m.now
            self.pending[trial.id] = (trial, value)
            heapq.heappush(self.events, (self.clock[i], i, trial.id))
        self.free = still_free

    def next_result(self) -> tuple[float, int, Trial, float]:
        """The earliest result: when it is known, its replica, the trial and its value."""
        now, i, tid = heapq.heappop(self.events)
        trial, value = self.pending.pop(tid)
        return now, i, trial, value

    def release(self, i: int, now: float) -> None:
        """Replica ``i`` is free at ``now``; a replica that waited for this result starts at
        the same moment."""
        for j in self.free:
            self.clock[j] = max(self.clock[j], now)
        self.free.append(i)


def _final_pick(measured: list[tuple[float, Mapping[str, JSON]]], machines: list[NoisyObjective],
                reference: Mapping[str, JSON], last_ref: list[float], clock: list[float],
                finalists: int, rounds: int, point_seconds: float) -> Mapping[str, JSON]:
    """The final rounds: the ``finalists`` best distinct measured points, each re-measured
    beside the reference ``rounds`` times, round ``r`` on replica ``r mod N``; the best mean
    log ratio wins."""
    ranked: list[Mapping[str, JSON]] = []
    seen: set[tuple[object, ...]] = set()
    for _, point in sorted(measured, key=lambda vp: vp[0], reverse=True):
        key = tuple(sorted(point.items()))
        if key not in seen:
            seen.add(key)
            ranked.append(point)
        if len(ranked) >= finalists:
            break
    if len(ranked) <= 1 or rounds < 1:
        return ranked[0] if ranked else reference
    logs: list[list[float]] = [[] for _ in ranked]
    for r in range(rounds):
        i = r % len(machines)
        m = machines[i]
        m.idle(max(clock[i] - m.now, 0.0))
        before = last_ref[i]
        for k in (range(len(ranked)) if r % 2 == 0 else reversed(range(len(ranked)))):
            value = m.measure(ranked[k], point_seconds)
            after = m.measure(reference, point_seconds)
            logs[k].append(math.log(value / math.sqrt(before * after)))
            before = after
        last_ref[i], clock[i] = before, m.now
    return ranked[int(np.argmax([np.mean(v) for v in logs]))]
