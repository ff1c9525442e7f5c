"""The comparison of two configurations from a per-transaction run: B's speed relative to A,
template by template, combined with work weights, with a 95 % interval.

**Estimand.** Per template t (a pgbench script, a TPC-H query, a statement) the mean latency
under each configuration, ``m_tA`` and ``m_tB``; their ratio ``m_tB / m_tA``; and the
combination with work weights ``w_t`` (template t's share of the reference configuration's
total time, ``Σ_i∈A,t latency / Σ_i∈A latency``):

    L = Σ_t w_t · m_tB / m_tA          speedup = 1 / L

``L`` is the time the reference's own mix of work would take at B's per-template speeds,
relative to A (the live mode's objective in :mod:`tuner_client.stats.mix` is the same
quantity), so ``speedup`` is what a throughput comparison of the whole mix would read, and
above 1 means B is faster, as in every other ratio the tuner prints. It is the count ratio of
a client that draws each transaction from a fixed mix (pgbench, scripts, a replay); a
TPC-H stream loops its one query instead, and its count ratio weighs the templates by
completions: ``compare(estimand=...)`` takes the client model
(:mod:`tuner_client.stats.estimand`, which holds both formulas). Mean latencies, not
geometric means: the time a closed-loop workload spends is the sum of its latencies, and
the mean is the one average that adds up to it; a geometric mean would discount a template's
slow tail, which is part of what a knob changes. The price is sensitivity to outliers, which
the interval below carries honestly rather than hiding.

**Interval.** A bootstrap over time slices (a block bootstrap): the run is cut into
slices of ``slice_s`` seconds by each transaction's start time, the per-slice sums of
latency and counts per template and configuration are resampled with replacement by slice,
and ``L`` is recomputed from each resample; the interval is ``log L`` ± Student's quantile
times the resamples' standard deviation of ``log L`` (scaled by √(n/(n − 1))). Transactions of
one slice share the machine's state (both arms alike), so resampling whole slices keeps that
serial correlation inside a resampled unit instead of treating thousands of correlated
transactions as independent.

**Few queries per slice.** Student's quantile on (slices − 1) degrees of freedom assumes the
slices' contributions roughly normal. With ~10 queries per slice and arm, and the effect
carried by a slow heavy-tailed template of one or two queries per slice, a few slices carry
most of the variance, the variance estimate is far noisier than n − 1 degrees of freedom say,
and the interval was optimistic: 93 % coverage at a nominal 95 % on synthetic runs, and 2 A/A
false claims in 20 real races at ~10 queries per slice and arm (session 10). The default
(``interval="kurtosis-df"``) therefore takes the quantile on the degrees of freedom the
slices' kurtosis leaves (:func:`effective_df`, a Satterthwaite moment match on each slice's
influence on ``log L``): n − 1 for well-behaved slices, fewer when a few dominate. Simulated
(``benchmarks/results/pertx_claim_rule*.md``, closed-loop streams of
:mod:`~benchmarks.simulators.per_transaction_sim`): with heavy tails at 10 queries per slice and
arm it covered 95.6 % at 1.10× where the old rule covered 94.7 % (1,000 runs), A/A false
claims (one side of the 95 % interval) stayed at 0.7–5.0 % in every cell, and power cost
1–2 points. The quiet model's A/A read 93.4–93.7 % there (1,000 runs on seeds 0–999);
on 4,000 seeds it covers 94.9 % (94.2–95.6), and seeds 0–999 alone 93.2 % while the next
three thousands read 95.2, 96.4 and 94.9 %: the first thousand seeds' draw, not a defect
(``benchmarks/results/pertx_aa_slices.md``; 10 to 80 slices cover 95.2–95.5 % on the same
runs). ``interval="student-t"`` keeps the old rule for comparison. Slices should outlast
the correlation time of the noise (seconds here) where a comparison claims; at least
:data:`MIN_SLICES` slices are needed. A ranking may cut shorter ones
(:func:`ranking_slice_s`).

**Anytime-valid variant.** Per slice, every transaction's latency is divided by its
template's mean latency under A over the whole run (``c_t``), so each arm's slice value
``Σ latency / Σ c_t`` is its time relative to what the reference would take for the same
transactions (a missing template in one slice drops out instead of breaking the slice). The
per-slice log-ratios A/B go to the t-mixture confidence sequence of
:mod:`tuner_client.stats.sequential`, which holds at every number of slices at once, so a
race may look after every slice. Its estimand is the mean per-slice log speedup, equal to
``log(1/L)`` when the effect is stable over the run; it assumes slices independent and their
log-ratios roughly normal (thousands of transactions per slice average out the tails), and
``c_t`` from the whole run is a plug-in, not a predictable quantity.

**Throughput reading.** :func:`completions_per_slice` counts completions per configuration
per slice; under random assignment the counts are equal by design (every draw is a coin
flip), so speed shows in the busy time per completion, not in the counts.

Pure: numpy only; the trace comes from :mod:`workloads.per_transaction` (any object with the
same arrays will do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from harmony_base.errors import ConfigError
from tuner_client.stats.estimand import DRAWN, DRAWS, Estimand
from tuner_client.stats.paired import RatioInterval, t_quantile
from tuner_client.stats.sequential import confidence_sequence

#: the design's name in the decisions and in summary.json
DESIGN = "per-transaction"
#: fewest time slices a block bootstrap is run on
MIN_SLICES = 8
#: slices the run is cut into when no slice length is given
DEFAULT_SLICES = 20
#: the shortest slice of a comparison that claims (the noise's correlation time: seconds)
MIN_SLICE_S = 1.0
#: the shortest slice of a comparison that only ranks (:func:`ranking_slice_s`) ...
SHORT_SLICE_S = 0.25
#: ... where a slice holds at least this many of the run's mean latencies
SLICE_LATENCIES = 10
#: a ranking's first look: when the shortest slices could make :data:`MIN_SLICES` of them
FIRST_LOOK_S = MIN_SLICES * SHORT_SLICE_S
#: bootstrap resamples (the 2.5 % quantile's own noise stays below 1 % of the half-width)
RESAMPLES = 4000
#: how the interval is formed from the slice resamples (the module's docstring: Interval)
Interval = Literal["kurtosis-df", "student-t"]
INTERVALS: tuple[Interval, ...] = ("kurtosis-df", "student-t")


class Observations(Protocol):
    """Per-transaction arrays (:class:`workloads.per_transaction.Trace` has them)."""

    @property
    def config(self) -> np.ndarray: ...

    @property
    def template(self) -> np.ndarray: ...

    @property
    def start(self) -> np.ndarray: ...

    @property
    def latency(self) -> np.ndarray: ...

    @property
    def ok(self) -> np.ndarray: ...


@dataclass(frozen=True)
class TemplateRatio:
    """One template's mean latencies under A and B and its work weight (share of A's time)."""

    template: int
    n_reference: int
    n_candidate: int
    mean_reference_s: float
    mean_candidate_s: float
    weight: float

    @property
    def speedup(self) -> float:
        """B's speed over A's on this template (above 1: B faster)."""
        return self.mean_reference_s / self.mean_candidate_s


@dataclass(frozen=True)
class PerTransactionComparison:
    """B (``candidate``) against A (``reference``) from one per-transaction run."""

    reference: int
    candidate: int
    #: work-weighted speedup of B over A with its block-bootstrap interval
    interval: RatioInterval
    #: the confidence sequence over slices at the run's end (None: too few slices)
    anytime: RatioInterval | None
    templates: tuple[TemplateRatio, ...]
    transactions: tuple[int, int]
    slices: int
    slice_s: float
    design: str = DESIGN
    #: the client model the ratio counts by (:data:`tuner_client.stats.estimand.DRAWS` or
    #: ``LOOPS``)
    estimand: str = DRAWS
    #: the run's wrapper, measured in the run and subtracted: ms a transaction (mean)
    wrapper_ms: float = 0.0
    #: each time slice's log speedup, in time order (the race's running interval)
    slice_logs: tuple[float, ...] = ()

    @property
    def half_width(self) -> float:
        """Half the interval's width on the log scale, as a fraction (0.03: ±3 %)."""
        return 0.5 * (math.log(self.interval.high) - math.log(self.interval.low))

    def text(self) -> str:
        """``1.07× (95 % CI 1.04–1.10), per transaction: 3,195 transactions, 20 slices``."""
        wrapper = (f"; the SET LOCAL wrapper's {self.wrapper_ms:.2g} ms a transaction "
                   f"(measured in the run) subtracted" if self.wrapper_ms > 0 else "")
        return (f"{self.interval.text()}, per transaction: "
                f"{sum(self.transactions):,} transactions in {self.slices} slices of "
                f"{self.slice_s:.3g} s{wrapper}")


def _slice_sums(obs: Observations, arms: tuple[int, int], slice_s: float, *,
                wrapper: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per slice, template and arm (0: reference, 1: candidate): latency sums and counts;
    ``wrapper``: keep the run's wrapper in the latencies (else subtracted where measured)."""
    keep = obs.ok & np.isin(obs.config, arms) & (obs.latency > 0)
    arm = (obs.config[keep] == arms[1]).astype(int)
    template = obs.template[keep].astype(int)
    slice_no = np.floor((obs.start[keep] - obs.start.min()) / slice_s).astype(int)
    shape = (int(slice_no.max(initial=-1)) + 1, int(obs.template.max(initial=-1)) + 1, 2)
    sums, counts = np.zeros(shape), np.zeros(shape)
    np.add.at(sums, (slice_no, template, arm), obs.latency[keep])
    np.add.at(counts, (slice_no, template, arm), 1)
    overhead = None if wrapper else getattr(obs, "overhead", None)
    if overhead is not None:
        # the run's wrapper (BEGIN; SET LOCAL ...; END), measured in the run, is not the
        # workload's: its round trips diluted every ratio toward 1 (the shop's read mix read
        # 1.32x where its own pgbench counted 1.67x); a cell keeps at least a tenth of its time
        cost = np.zeros(shape)
        np.add.at(cost, (slice_no, template, arm),
                  overhead[obs.config[keep].astype(int), template])
        sums = np.maximum(sums - cost, 0.1 * sums)
    return sums, counts


def wrapper_ms(obs: Observations, arms: tuple[int, int]) -> float:
    """The wrapper's mean cost a transaction of ``arms`` subtracted (ms; 0 when none)."""
    overhead = getattr(obs, "overhead", None)
    keep = obs.ok & np.isin(obs.config, arms)
    if overhead is None or not keep.any():
        return 0.0
    return float(1e3 * overhead[obs.config[keep].astype(int),
                                obs.template[keep].astype(int)].mean())


def _check(obs: Observations, reference: int, candidate: int) -> None:
    if reference == candidate:
        raise ConfigError(f"a comparison needs two configurations, but got {reference} twice")
    counts = np.bincount(obs.config[obs.ok].astype(int), minlength=max(reference, candidate) + 1)
    for name, k in (("reference", reference), ("candidate", candidate)):
        if counts[k] == 0:
            raise ConfigError(f"the {name} configuration {k} has no finished transaction in the "
                              f"trace; run longer")


def _log_interval(sums: np.ndarray, counts: np.ndarray, point: float, level: float,
                  interval: Interval, seed: int, resamples: int, estimand: Estimand
                  ) -> tuple[float, float]:
    """The interval of ``log L`` from the slices (the module's docstring: Interval)."""
    n = sums.shape[0]
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples)
    boot_s = (weights @ sums.reshape(n, -1)).reshape(resamples, *sums.shape[1:])
    boot_n = (weights @ counts.reshape(n, -1)).reshape(resamples, *counts.shape[1:])
    boot = estimand.latency_ratio(boot_s, boot_n)
    usable = np.isfinite(boot) & (boot > 0)
    log_point = math.log(point)
    df = float(n - 1)
    if interval == "kurtosis-df":
        z = estimand.influence(sums, counts, sums.sum(axis=0)[None],
                               counts.sum(axis=0)[None])[:, 0]
        df = effective_df(z)
    se = float(np.std(np.log(boot[usable]), ddof=1)) * math.sqrt(n / (n - 1))
    half = t_quantile(0.5 + level / 2, math.floor(10 * df) / 10) * se  # few cached df values
    return log_point - half, log_point + half


def effective_df(influence: np.ndarray) -> float:
    """Degrees of freedom of a variance estimated from ``influence`` (one value per slice):
    n − 1 for normal values, fewer when a few slices carry most of the variance. A
    moment match (Satterthwaite): var(s²) = σ⁴ (2/(n − 1) + (κ − 3)/n) for values of kurtosis
    κ, and a χ²_ν/ν variance has var 2σ⁴/ν; κ is the values' own sample kurtosis (at least
    3), and ν at least 2."""
    n = influence.size
    squares = influence ** 2
    kurtosis = n * float((squares ** 2).sum()) / float(squares.sum()) ** 2 \
        if squares.sum() > 0 else 3.0
    return max(2.0, 2.0 / (2.0 / (n - 1) + max(kurtosis - 3.0, 0.0) / n))


def ranking_slice_s(obs: Observations) -> float:
    """The shortest slice a comparison that only ranks may cut ``obs`` into:
    :data:`SLICE_LATENCIES` mean latencies, within [:data:`SHORT_SLICE_S`,
    :data:`MIN_SLICE_S`] s. A mix of queries of milliseconds (pgbench, the demo's SF 0.01)
    then has 8 slices after 2 s instead of 8 s; queries of 0.1 s or more keep 1-s slices."""
    done = obs.latency[obs.ok]
    mean = float(done.mean()) if done.size else MIN_SLICE_S
    return min(MIN_SLICE_S, max(SHORT_SLICE_S, SLICE_LATENCIES * mean))


def estimand_of(obs: Observations) -> Estimand:
    """The client model a trace records (:attr:`workloads.per_transaction.Trace.loops`: TPC-H
    streams loop their query), else draws."""
    loops, templates = getattr(obs, "loops", None), getattr(obs, "templates", None)
    return DRAWN if loops is None or templates is None \
        else Estimand.for_templates(templates, loops)


def rank_compare(obs: Observations, reference: int = 0, candidate: int = 1,
                 **kwargs: Any) -> PerTransactionComparison:
    """:func:`compare` for a ranking: slices as short as :func:`ranking_slice_s`."""
    return compare(obs, reference, candidate, min_slice_s=ranking_slice_s(obs), **kwargs)


def compare(obs: Observations, reference: int = 0, candidate: int = 1, *,
            slice_s: float | None = None, level: float = 0.95, seed: int = 0,
            resamples: int = RESAMPLES, interval: Interval = "kurtosis-df",
            min_slice_s: float = MIN_SLICE_S, estimand: Estimand | None = None
            ) -> PerTransactionComparison:
    """B's speedup over A, as the workload's client counts it (``estimand``: the client
    model, :mod:`tuner_client.stats.estimand`), with a block-bootstrap interval over time
    slices (``slice_s``: default the run's span / :data:`DEFAULT_SLICES`, at least
    ``min_slice_s``, which only a ranking should lower: :func:`ranking_slice_s`);
    ``interval``: :data:`INTERVALS`. Without ``estimand``, the trace's own
    (:func:`estimand_of`)."""
    estimand = estimand if estimand is not None else estimand_of(obs)
    if not 0.0 < level < 1.0:
        raise ConfigError(f"the confidence level must be between 0 and 1, but got {level}")
    if interval not in INTERVALS:
        raise ConfigError(f"interval must be one of {INTERVALS}, but got {interval!r}")
    _check(obs, reference, candidate)
    span = float(obs.start.max() - obs.start.min()) if obs.start.size else 0.0
    # a hair over span/DEFAULT_SLICES, so the last transaction still falls in the last slice
    slice_s = slice_s if slice_s is not None else max(min_slice_s,
                                                      span / DEFAULT_SLICES * (1 + 1e-9))
    if not slice_s > 0:
        raise ConfigError(f"slice_s must be > 0 seconds, but got {slice_s}")
    sums, counts = _slice_sums(obs, (reference, candidate), slice_s)
    occupied = counts.sum(axis=(1, 2)) > 0
    sums, counts = sums[occupied], counts[occupied]
    n_slices = sums.shape[0]
    if n_slices < MIN_SLICES:
        raise ConfigError(f"a block bootstrap needs at least {MIN_SLICES} time slices, but the "
                          f"run has {n_slices} of {slice_s:g} s; run longer or pass a shorter "
                          f"slice_s")
    total_s, total_n = sums.sum(axis=0), counts.sum(axis=0)
    point = float(estimand.latency_ratio(total_s, total_n))
    low_log, high_log = _log_interval(sums, counts, point, level, interval, seed, resamples,
                                      estimand)
    ratio = RatioInterval(1.0 / point, math.exp(-high_log), math.exp(-low_log), n_slices,
                          level, "bootstrap")
    work = np.where((total_n > 0).all(axis=-1), total_s[:, 0], 0.0)
    templates = tuple(
        TemplateRatio(t, int(total_n[t, 0]), int(total_n[t, 1]), total_s[t, 0] / total_n[t, 0],
                      total_s[t, 1] / total_n[t, 1], float(work[t] / work.sum()))
        for t in range(total_n.shape[0]) if total_n[t].all())
    return PerTransactionComparison(
        reference, candidate, ratio, _anytime(sums, counts, level, estimand),
        templates, (int(total_n[:, 0].sum()), int(total_n[:, 1].sum())), n_slices, slice_s,
        estimand=estimand.model, wrapper_ms=wrapper_ms(obs, (reference, candidate)),
        slice_logs=tuple(estimand.slice_log_speedups(sums, counts).tolist()))


def _anytime(sums: np.ndarray, counts: np.ndarray, level: float, estimand: Estimand
             ) -> RatioInterval | None:
    logs = estimand.slice_log_speedups(sums, counts)
    cs = confidence_sequence(logs.tolist(), alpha=1.0 - level)
    if cs is None:
        return None
    mean, low, high = cs
    return RatioInterval(math.exp(mean), math.exp(low) if math.isfinite(low) else 0.0,
                         math.exp(high) if math.isfinite(high) else math.inf, int(logs.size),
                         level, "anytime")


def completions_per_slice(obs: Observations, configurations: int, slice_s: float
                          ) -> tuple[np.ndarray, np.ndarray]:
    """(completions, busy seconds), each of shape (slices, configurations): the throughput
    reading of a per-transaction run. Completions per busy second is each configuration's
    speed on the mix it drew; the counts alone are equal by design."""
    if not slice_s > 0:
        raise ConfigError(f"slice_s must be > 0 seconds, but got {slice_s}")
    keep = obs.ok
    slice_no = np.floor(obs.start[keep] / slice_s).astype(int)
    slice_no -= slice_no.min(initial=0)
    shape = (int(slice_no.max(initial=-1)) + 1, configurations)
    counts, busy = np.zeros(shape, dtype=int), np.zeros(shape)
    np.add.at(counts, (slice_no, obs.config[keep].astype(int)), 1)
    np.add.at(busy, (slice_no, obs.config[keep].astype(int)), obs.latency[keep])
    return counts, busy


def variance_by_template(obs: Observations, reference: int = 0, candidate: int = 1,
                         slices: int = DEFAULT_SLICES) -> dict[int, float]:
    """Each template's share of the variance of ``log L`` (its own terms of the slices'
    influence; cross terms between templates are left out, so the shares need not sum to 1):
    which templates an A/A interval's width comes from."""
    _check(obs, reference, candidate)
    span = float(obs.start.max() - obs.start.min())
    sums, counts = _slice_sums(obs, (reference, candidate), max(span / slices * (1 + 1e-9),
                                                                 1e-9))
    total_s, total_n = sums.sum(axis=0)[None], counts.sum(axis=0)[None]
    whole = float((DRAWN.influence(sums, counts, total_s, total_n) ** 2).sum())
    shares = {}
    for t in range(sums.shape[1]):
        only = np.zeros(sums.shape[1], dtype=bool)
        only[t] = True
        z = DRAWN.influence(sums * only[None, :, None], counts * only[None, :, None], total_s,
                            total_n)
        shares[t] = float((z ** 2).sum()) / whole if whole > 0 else 0.0
    return shares
