"""The ratio a comparison estimates is the throughput the workload's own client counts
(issue 45 item 3): a client drawing each transaction from a fixed mix, or streams each
looping one query (TPC-H)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from harmony_base.errors import ConfigError
from tuner_client.stats.estimand import DRAWN, Estimand
from tuner_client.stats.per_transaction import _slice_sums, compare

# the demo's shape: a fast query that gains a lot, a slow one that loses a little
MEAN_A = {"Q1": 0.040, "Q6": 0.010, "Q13": 0.030}
SPEEDUP = {"Q1": 0.88, "Q6": 1.60, "Q13": 1.05}
STREAMS = {"Q1": 2, "Q6": 2, "Q13": 1}
TEMPLATES = sorted(MEAN_A)


def looping_run(seconds: float, cv: float, seed: int) -> SimpleNamespace:
    """A per-transaction run of closed-loop streams, each looping its template and drawing
    configuration A (0) or B (1) per query: latencies gamma-distributed around the means."""
    rng = np.random.default_rng(seed)
    rows = []
    for name, streams in STREAMS.items():
        for _ in range(streams):
            t = 0.0
            while t < seconds:
                arm = int(rng.integers(2))
                mean = MEAN_A[name] / (SPEEDUP[name] if arm else 1.0)
                lat = mean if cv == 0 else float(rng.gamma(1 / cv**2, mean * cv**2))
                rows.append((arm, TEMPLATES.index(name), t, lat))
                t += lat
    config, template, start, latency = (np.array(c) for c in zip(*rows, strict=True))
    return SimpleNamespace(config=config, template=template, start=start, latency=latency,
                           ok=np.ones(len(rows), dtype=bool))


def count_truth() -> float:
    """Queries per second under B over A, each stream at 1 / its mean latency."""
    rate_a = sum(n / MEAN_A[t] for t, n in STREAMS.items())
    rate_b = sum(n * SPEEDUP[t] / MEAN_A[t] for t, n in STREAMS.items())
    return rate_b / rate_a


def test_loops_estimate_the_streams_count_where_draws_estimate_another_ratio() -> None:
    run = looping_run(30.0, 0.0, seed=1)
    loops = Estimand.for_templates(TEMPLATES, STREAMS)
    by_count = compare(run, estimand=loops)
    assert by_count.interval.ratio == pytest.approx(count_truth(), rel=1e-9)
    assert count_truth() == pytest.approx(1.408, abs=0.001)
    # the work-weighted reading of the same run is lower: the draws client's formula
    # applied to streams weighs the slow Q1 by its time
    work = compare(run)
    assert work.interval.ratio < count_truth() / 1.06
    assert by_count.estimand == "loops" and work.estimand == "draws"


def test_draws_estimate_the_count_of_a_client_that_draws_from_a_fixed_mix() -> None:
    rng = np.random.default_rng(2)
    weights = {"Q1": 0.3, "Q6": 0.6, "Q13": 0.1}
    n = 40_000
    template = rng.choice(3, size=n, p=[weights[t] for t in TEMPLATES])
    config = rng.integers(2, size=n)
    mean_a = np.array([MEAN_A[t] for t in TEMPLATES])
    speed = np.array([SPEEDUP[t] for t in TEMPLATES])
    latency = mean_a[template] / np.where(config == 1, speed[template], 1.0)
    run = SimpleNamespace(config=config, template=template, start=np.cumsum(latency) / 4,
                          latency=latency, ok=np.ones(n, dtype=bool))
    p = np.array([weights[t] for t in TEMPLATES])
    truth = float((p * mean_a).sum() / (p * mean_a / speed).sum())
    # the drawn mix, not the weights: the run's own counts are what the estimand holds fixed
    assert compare(run).interval.ratio == pytest.approx(truth, rel=0.01)


def test_the_loops_influence_is_the_derivative_by_slice_weight_and_sums_to_zero() -> None:
    run = looping_run(20.0, 0.5, seed=3)
    loops = Estimand.for_templates(TEMPLATES, STREAMS)
    sums, counts = _slice_sums(run, (0, 1), 1.0)
    total_s, total_n = sums.sum(axis=0), counts.sum(axis=0)
    z = loops.influence(sums, counts, total_s[None], total_n[None])[:, 0]
    base, eps = math.log(float(loops.latency_ratio(total_s, total_n))), 1e-6
    numeric = [(math.log(float(loops.latency_ratio(total_s + eps * sums[j],
                                                   total_n + eps * counts[j]))) - base) / eps
               for j in range(sums.shape[0])]
    assert z == pytest.approx(numeric, abs=1e-4)
    assert abs(z.sum()) < 1e-9
    # the anytime-valid race's per-slice values average to the estimate
    logs = loops.slice_log_speedups(sums, counts)
    assert float(logs.mean()) == pytest.approx(-base, abs=1e-9)


def test_the_loops_interval_covers_the_count_truth_in_repeated_noisy_runs() -> None:
    loops = Estimand.for_templates(TEMPLATES, STREAMS)
    covered = [compare(looping_run(20.0, 0.6, seed=s), estimand=loops, seed=s,
                       resamples=1000).interval for s in range(40)]
    hits = sum(iv.low <= count_truth() <= iv.high for iv in covered)
    assert hits >= 34, [(round(iv.low, 3), round(iv.high, 3)) for iv in covered]


def test_a_template_no_stream_loops_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="Q13 has none"):
        Estimand.for_templates(TEMPLATES, {"Q1": 2, "Q6": 2})
    assert Estimand.for_templates(TEMPLATES, None) == DRAWN
