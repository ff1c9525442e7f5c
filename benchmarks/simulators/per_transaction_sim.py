"""Simulated per-transaction runs with a known truth, to measure the coverage, false claims and
power of the interval rule of :mod:`tuner_client.stats.per_transaction` where it is weakest:
few queries per time slice and heavy-tailed latencies.

The model is the tuner's TPC-H driver: closed-loop streams, each running one template back to
back, every query drawing configuration A or B with a fair coin (every query that starts within
the run is counted, as the driver drains them). A query's latency is its template's mean under
its configuration × the machine's level when it starts × log-normal noise with mean 1 and the
template's ``sigma``. The level's log walks randomly from second to second (``drift_sd``) and
co-tenant bursts multiply it by ``burst`` for one second with probability ``burst_p``: both arms
share them, as on a real machine.

The truth is the estimand of :func:`~tuner_client.stats.per_transaction.compare` in
expectation: ``L = Σ_t n_t m_tB / Σ_t n_t m_tA`` with ``n_t`` template t's expected count per
arm (its streams over its mean latency over the two arms), speedup ``1/L``.

Pure and seeded: numpy's generator, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from harmony_base.errors import ConfigError
from tuner_client.stats.per_transaction import Interval, compare


@dataclass(frozen=True)
class Template:
    """``streams`` closed-loop streams of one query: mean latency under A (s), B's speedup on
    it (above 1: faster under B) and the log-normal noise's sigma."""

    streams: int
    mean_s: float
    speedup: float = 1.0
    sigma: float = 0.8


#: the power evidence's TPC-H pair (``6Q6,2Q13``, work_mem 64kB against 4MB): Q6 fast and
#: unaffected, Q13 slow, heavy-tailed and 1.57x faster under B (truth about 1.10x)
POWER_MIX: Mapping[str, Template] = {
    "Q6": Template(6, 0.8, 1.0, 0.6), "Q13": Template(2, 3.0, 1.57, 1.0)}


@dataclass(frozen=True)
class SimTrace:
    """The arrays :class:`~tuner_client.stats.per_transaction.Observations` asks for."""

    config: np.ndarray
    template: np.ndarray
    start: np.ndarray
    latency: np.ndarray
    ok: np.ndarray


@dataclass(frozen=True)
class RunModel:
    """One simulated run: templates, its length, and the machine's noise."""

    templates: Mapping[str, Template] = field(default_factory=lambda: dict(POWER_MIX))
    seconds: float = 60.0
    drift_sd: float = 0.05
    burst_p: float = 0.05
    burst: float = 1.6

    def __post_init__(self) -> None:
        if not self.templates or self.seconds <= 0:
            raise ConfigError(f"a simulated run needs templates and seconds > 0, but got "
                              f"{len(self.templates)} templates and {self.seconds} s")

    def aa(self) -> RunModel:
        """The same run with B identical to A (every template's speedup 1)."""
        return RunModel({k: Template(t.streams, t.mean_s, 1.0, t.sigma)
                         for k, t in self.templates.items()}, self.seconds, self.drift_sd,
                        self.burst_p, self.burst)

    def truth(self) -> float:
        """B's work-weighted speedup over A in expectation (above 1: B faster)."""
        num = den = 0.0
        for t in self.templates.values():
            mean_b = t.mean_s / t.speedup
            n = t.streams / (0.5 * (t.mean_s + mean_b))
            num += n * mean_b
            den += n * t.mean_s
        return den / num

    def queries_per_second(self) -> float:
        """Expected queries a second, both arms together."""
        return sum(t.streams / (0.5 * (t.mean_s + t.mean_s / t.speedup))
                   for t in self.templates.values())


def simulate_run(model: RunModel, seed: int, drop_unfinished: bool = False) -> SimTrace:
    """One run of ``model``: every stream's queries until the run's end (``drop_unfinished``:
    without those still running at the end, as the driver did before session 10's drain)."""
    rng = np.random.default_rng(seed)
    seconds = int(math.ceil(model.seconds)) + 1
    log_level = np.cumsum(rng.normal(0.0, model.drift_sd, seconds))
    log_level += np.where(rng.random(seconds) < model.burst_p, math.log(model.burst), 0.0)
    rows: list[tuple[int, int, float, float]] = []
    for k, t in enumerate(model.templates.values()):
        means = (t.mean_s, t.mean_s / t.speedup)
        for _ in range(t.streams):
            clock = rng.uniform(0.0, t.mean_s)  # streams do not start in lockstep
            while clock < model.seconds:
                arm = int(rng.integers(2))
                noise = math.exp(t.sigma * rng.standard_normal() - t.sigma ** 2 / 2)
                latency = means[arm] * math.exp(log_level[int(clock)]) * noise
                if not (drop_unfinished and clock + latency > model.seconds):
                    rows.append((arm, k, clock, latency))
                clock += latency
    arr = np.array(rows, dtype=float).reshape(-1, 4)
    return SimTrace(arr[:, 0].astype(int), arr[:, 1].astype(int), arr[:, 2], arr[:, 3],
                    np.ones(arr.shape[0], dtype=bool))


def with_truth(model: RunModel, truth: float, template: str) -> RunModel:
    """``model`` with ``template``'s speedup set so the run's truth is ``truth`` (the others
    at 1): bisection on the speedup, which the truth increases with."""
    low, high = 1.0, 100.0
    base = {k: Template(t.streams, t.mean_s, 1.0, t.sigma) for k, t in model.templates.items()}
    for _ in range(60):
        mid = math.sqrt(low * high)
        t = base[template]
        trial = RunModel({**base, template: Template(t.streams, t.mean_s, mid, t.sigma)},
                         model.seconds, model.drift_sd, model.burst_p, model.burst)
        low, high = (mid, high) if trial.truth() < truth else (low, mid)
    return trial


def seconds_for(model: RunModel, per_slice_and_arm: float, slices: int = 20) -> float:
    """The run length that gives ``per_slice_and_arm`` queries per slice and arm."""
    return 2.0 * slices * per_slice_and_arm / model.queries_per_second()


@dataclass(frozen=True)
class Rates:
    """Coverage, claims and width of one interval rule over many simulated runs."""

    runs: int
    covered: int
    claims: int
    false_claims: int
    median_half_width: float
    queries_per_slice_and_arm: float


def rates(model: RunModel, seeds: range, interval: Interval, resamples: int = 2000,
          level: float = 0.95) -> Rates:
    """:func:`~tuner_client.stats.per_transaction.compare` on ``simulate_run(model, seed)``
    for every seed: how often its interval holds the truth, claims B (interval above 1), and
    claims it falsely (truth not above 1)."""
    truth = model.truth()
    covered = claims = 0
    widths, per_slice = [], []
    for seed in seeds:
        result = compare(simulate_run(model, seed), level=level, seed=seed,
                         resamples=resamples, interval=interval)
        covered += result.interval.low <= truth <= result.interval.high
        claims += result.interval.above_one
        widths.append(result.half_width)
        per_slice.append(sum(result.transactions) / 2 / result.slices)
    return Rates(len(seeds), covered, claims, claims if truth <= 1.0 else 0,
                 float(np.median(widths)), float(np.mean(per_slice)))
