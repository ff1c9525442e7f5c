"""The per-transaction claim rule where it is weakest, on simulated closed-loop runs with a known
truth (:mod:`benchmarks.simulators.per_transaction_sim`): ~10 queries per slice and arm, the
effect carried by a slow heavy-tailed template. Also the pieces of the rule: each slice's
influence on log L and the degrees of freedom its kurtosis leaves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.simulators.per_transaction_sim import (
    RunModel,
    Template,
    rates,
    seconds_for,
    simulate_run,
    with_truth,
)
from tuner_client.stats.estimand import DRAWN
from tuner_client.stats.per_transaction import (
    _slice_sums,
    compare,
    effective_df,
    variance_by_template,
)

#: the benchmark's ``loaded`` model (benchmarks/pertx_claim_rule.py): Q13 carries the effect
LOADED = RunModel({"Q6": Template(6, 0.8, 1.0, 0.6), "Q13": Template(2, 3.0, 1.0, 1.0)},
                  drift_sd=0.02, burst_p=0.05, burst=1.6)


def sized(per_slice: float) -> RunModel:
    return RunModel(LOADED.templates, seconds_for(LOADED, per_slice), LOADED.drift_sd,
                    LOADED.burst_p, LOADED.burst)


def test_the_truth_and_the_run_length() -> None:
    assert LOADED.aa().truth() == 1.0
    model = with_truth(sized(10), 1.10, "Q13")
    assert model.truth() == pytest.approx(1.10, abs=1e-6)
    assert model.templates["Q13"].speedup == pytest.approx(1.47, abs=0.01)
    run = simulate_run(model, 1)
    per_slice_and_arm = run.config.size / 2 / 20
    assert 7 < per_slice_and_arm < 13  # 10 asked; the drift and bursts move it


def test_influence_is_the_derivative_of_log_l_by_slice_weight() -> None:
    run = simulate_run(sized(10), 3)
    sums, counts = _slice_sums(run, (0, 1), float(np.ptp(run.start)) / 20 * (1 + 1e-9))
    total_s, total_n = sums.sum(axis=0), counts.sum(axis=0)
    z = DRAWN.influence(sums, counts, total_s[None], total_n[None])[:, 0]
    base, eps = math.log(float(DRAWN.latency_ratio(total_s, total_n))), 1e-6
    numeric = [(math.log(float(DRAWN.latency_ratio(total_s + eps * sums[j],
                                                   total_n + eps * counts[j])))
                - base) / eps for j in range(sums.shape[0])]
    assert z == pytest.approx(numeric, abs=1e-4)
    assert abs(z.sum()) < 1e-12


def test_effective_df_is_n_minus_1_for_normal_slices_and_small_for_one_dominant() -> None:
    rng = np.random.default_rng(0)
    normal = [effective_df(rng.standard_normal(20)) for _ in range(2000)]
    assert 12 < float(np.median(normal)) <= 19
    one_dominant = np.r_[np.full(19, 0.01), 1.0]
    assert effective_df(one_dominant) < 2.2  # the least 20 slices can give: 2/(2/19 + 17/20)
    assert effective_df(np.zeros(20)) == 19.0


def test_the_new_rule_is_never_narrower_than_the_old() -> None:
    for seed in range(20):
        run = simulate_run(with_truth(sized(10), 1.10, "Q13"), seed)
        new = compare(run, seed=seed, resamples=500).half_width
        old = compare(run, seed=seed, resamples=500, interval="student-t").half_width
        assert new >= old - 1e-12


@pytest.mark.parametrize("per_slice", [10, 30])
def test_a_a_false_claims_and_coverage_with_few_queries_per_slice(per_slice: int) -> None:
    """Nominal: 2.5 % claims (one side of a 95 % interval), 95 % coverage; 200 runs."""
    r = rates(sized(per_slice).aa(), range(200), "kurtosis-df", resamples=500)
    assert r.false_claims <= 10  # ≤ 5 %
    assert r.covered >= 184  # ≥ 92 %: 95 % less ~2 binomial sd


def test_power_at_1_10_with_10_queries_per_slice_and_its_cost() -> None:
    """The new rule gives up a little power for its coverage: both measured on the same runs."""
    model = with_truth(sized(10), 1.10, "Q13")
    new = rates(model, range(200), "kurtosis-df", resamples=500)
    old = rates(model, range(200), "student-t", resamples=500)
    assert new.covered >= 184 and new.covered >= old.covered
    assert old.claims - 10 <= new.claims <= old.claims


def test_variance_by_template_names_the_noisy_heavy_template() -> None:
    noisy_q13 = RunModel({"Q6": Template(6, 0.8, 1.0, 0.1), "Q13": Template(2, 3.0, 1.0, 1.0)},
                         seconds=120.0, drift_sd=0.0, burst_p=0.0).aa()
    noisy_q6 = RunModel({"Q6": Template(6, 0.8, 1.0, 1.0), "Q13": Template(2, 3.0, 1.0, 0.1)},
                        seconds=120.0, drift_sd=0.0, burst_p=0.0).aa()
    q13 = variance_by_template(simulate_run(noisy_q13, 1))
    q6 = variance_by_template(simulate_run(noisy_q6, 1))
    assert q13[1] > 0.8 and q13[0] < 0.1  # template 1 is Q13
    assert q6[0] > 0.8 and q6[1] < 0.1
