"""The probes' decision on known curves (no database): a knee is found and trusted, a flat
curve has no knee, a non-monotone or far-extrapolated one is rejected with why; the search
window; the ``bme:`` config section's errors."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from bme.equation import BMEParams, miss_probability
from bme.probe_decision import Probe, decide, probe_sizes, search_radius, search_window
from harmony_base.errors import ConfigError
from tuner_client.config import parse_tuner_config

MB = 1 << 20
ACCESSES = 1_000_000
#: a curve with its knee at 96 MB and a floor of 0.02
TRUE = BMEParams(p_star=0.02, p_c=0.05, m_b=4 * MB, m_star=96 * MB)


def _probes(sizes: list[int], params: BMEParams = TRUE, noise: float = 0.0,
            seed: int = 0) -> list[Probe]:
    rng = np.random.default_rng(seed)
    out = []
    for size in sizes:
        p = float(miss_probability(params, size)) * (1 + noise * rng.standard_normal())
        reads = int(round(min(1.0, max(0.0, p)) * ACCESSES))
        out.append(Probe(size=size, hits=ACCESSES - reads, reads=reads, window_s=3.0,
                         cost_s=3.5))
    return out


def test_probe_sizes_are_log_spread_on_the_grid_and_inside_the_range() -> None:
    sizes = probe_sizes(32 * MB, 2048 * MB, 4, step=8 * MB)
    assert sizes == [32 * MB, 128 * MB, 512 * MB, 2048 * MB]
    assert probe_sizes(32 * MB, 100 * MB, 5, step=8 * MB)[-1] <= 100 * MB
    with pytest.raises(ConfigError, match="at least 3"):
        probe_sizes(32 * MB, 64 * MB, 2)


def test_a_knee_inside_the_range_is_found_with_p_star_from_the_catalog() -> None:
    probes = _probes(probe_sizes(8 * MB, 256 * MB, 5, step=8 * MB), noise=0.03, seed=1)
    touched = int(TRUE.p_star * ACCESSES)  # the cold misses are the touched pages
    decision = decide(probes, touched_pages=touched, low=8 * MB, high=256 * MB)
    assert decision.kind == "knee", decision.reason
    assert decision.fit is not None and decision.fit.r2 > 0.95
    assert decision.fit.p_star_given and decision.p_star == pytest.approx(0.02, rel=0.05)
    assert decision.fit.params.m_star == pytest.approx(96 * MB, rel=0.15)
    start, low, high = search_window(decision, 8 * MB, 256 * MB, 8 * MB)  # type: ignore[misc]
    # started on the flat side, 25 % past M* (a size below the knee still misses)
    assert low == 8 * MB and start == pytest.approx(1.25 * 96 * MB, rel=0.15)
    # capped a little past M*: the rest of the budget is left to the other consumers
    assert start <= high <= 1.25 * decision.fit.params.m_star + 8 * MB


def test_a_target_miss_probability_gives_the_size_and_the_budget_caps_it() -> None:
    probes = _probes(probe_sizes(8 * MB, 256 * MB, 5, step=8 * MB))
    touched = int(TRUE.p_star * ACCESSES)
    decision = decide(probes, touched_pages=touched, low=8 * MB, high=256 * MB,
                      target_miss=0.1)
    assert decision.kind == "knee" and decision.size is not None
    assert float(miss_probability(TRUE, decision.size)) == pytest.approx(0.1, abs=0.01)
    below = decide(probes, touched_pages=touched, low=8 * MB, high=256 * MB,
                   target_miss=0.01)
    assert below.kind == "knee" and below.size == int(below.fit.params.m_star)  # type: ignore[union-attr]
    assert "below the floor" in below.reason
    capped = decide(probes, touched_pages=touched, low=8 * MB, high=64 * MB)
    assert capped.capped and capped.size == 64 * MB and "capped" in capped.reason


def test_a_flat_curve_has_no_knee_and_the_search_stays_small() -> None:
    probes = _probes(probe_sizes(128 * MB, 1024 * MB, 4, step=8 * MB))  # all beyond M*
    decision = decide(probes, touched_pages=20_000, low=32 * MB, high=1024 * MB)
    assert decision.kind == "no-knee" and decision.size == 128 * MB
    assert "no knee" in decision.reason
    start, _, high = search_window(decision, 32 * MB, 1024 * MB, 8 * MB)  # type: ignore[misc]
    assert start == 128 * MB and high == 160 * MB


def test_rejections_say_why() -> None:
    sizes = probe_sizes(8 * MB, 256 * MB, 5, step=8 * MB)
    probes = _probes(sizes)
    swapped = [probes[0], probes[3], probes[2], probes[1], probes[4]]
    bumpy = [Probe(p.size, q.hits, q.reads, 3.0, 3.5) for p, q in zip(probes, swapped,
                                                                     strict=True)]
    decision = decide(bumpy, touched_pages=20_000, low=8 * MB, high=256 * MB)
    assert decision.kind == "rejected" and "not monotone" in decision.reason
    assert search_window(decision, 8 * MB, 256 * MB, 8 * MB) is None
    far = BMEParams(p_star=1e-5, p_c=9.5e-5, m_b=4 * MB, m_star=100_000 * MB)
    still_falling = _probes(sizes, far)
    decision = decide(still_falling, touched_pages=10, low=8 * MB, high=256 * MB)
    # a curve still falling at the largest probe: the knee is beyond the budget's cap
    assert decision.kind == "knee" and decision.capped and decision.size == 256 * MB
    assert "the knee lies beyond the largest probe" in decision.reason
    # the same fit with a last probe that no longer falls is not trusted
    flat_end = [*still_falling[:-1], Probe(sizes[-1], still_falling[-2].hits,
                                           still_falling[-2].reads, 3.0, 3.5)]
    decision = decide(flat_end, touched_pages=10, low=8 * MB, high=256 * MB)
    assert decision.kind == "rejected" and "no longer falls" in decision.reason
    decision = decide(probes[:2], touched_pages=20_000, low=8 * MB, high=256 * MB)
    assert decision.kind == "rejected" and "needs 3" in decision.reason


@pytest.mark.parametrize(("section", "message"), [
    ("bme: {probes: 2}", r"bme.probes must be 0 \(no probes\) or at least 3"),
    ("bme: {probes: 4, target_miss: 1.0}", "strictly between 0 and 1"),
    ("bme: {probes: 0, target_miss: 0.1}", "needs probes"),
    ("bme: {probes: 4, probe_secs: 3}", "probe_secs"),
    ("bme: {probes: 4, probe_seconds: 0}", "probe_seconds"),
    ("bme: {probes: 4, evaluations: 0}", "evaluations"),
])
def test_bme_config_errors_name_the_key(section: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_tuner_config(f"name: x\n{section}\n", source="x.yaml")
    assert "x.yaml" in str(info.value)


def test_bme_config_defaults_and_values() -> None:
    # on by default (issue 31): 4 probes, each settling for at most 30 s; probes: 0 is off
    default = parse_tuner_config("name: x\n").bme
    assert default.enabled and (default.probes, default.settle_s) == (4, 30.0)
    assert not parse_tuner_config("name: x\nbme: {probes: 0}\n").bme.enabled
    assert parse_tuner_config("name: x\nbme: {settle_s: 0}\n").bme.settle_s == 0.0
    assert parse_tuner_config("name: x\n").bme.evaluations == 2
    cfg = parse_tuner_config("name: x\nbme: {probes: 5, probe_seconds: 2, target_miss: 0.05, "
                             "evaluations: 3}\n")
    assert (cfg.bme.probes, cfg.bme.probe_seconds, cfg.bme.target_miss,
            cfg.bme.evaluations) == (5, 2.0, 0.05, 3)


def test_the_window_reaches_the_first_probe_past_a_knee_fitted_short_of_it() -> None:
    # measured on uniform key lookups over a 120 MB table (benchmarks/results/
    # bme_probes_keys.first-rule.md): a straight miss curve, on its floor from 128 MB on; the
    # fit puts M* near 98 MB, and 1.25·M* alone (120 MB) would cut the search off short of
    # every size where the table fits
    misses = {16: 0.368, 32: 0.267, 64: 0.138, 128: 0.0016, 256: 0.0015}
    probes = [Probe(size=s * MB, hits=ACCESSES - int(p * ACCESSES), reads=int(p * ACCESSES),
                    window_s=3.0, cost_s=3.5) for s, p in misses.items()]
    decision = decide(probes, touched_pages=1500, low=16 * MB, high=256 * MB)
    assert decision.kind == "knee" and decision.fit is not None, decision.reason
    assert 64 * MB < decision.fit.params.m_star < 0.8 * 128 * MB
    assert search_window(decision, 16 * MB, 256 * MB, 8 * MB) == (120 * MB, 16 * MB, 128 * MB)
    # the cap stays below the largest probe: the memory past the floor is left to the others
    assert search_window(decision, 16 * MB, 1024 * MB, 8 * MB)[2] == 128 * MB  # type: ignore[index]


def test_the_probed_search_steps_by_a_share_of_its_start() -> None:
    # 30 % of a 192MB start over a 16..256MB window: 57.6MB of 240MB
    assert search_radius(192 * MB, 16 * MB, 256 * MB, 8 * MB) == pytest.approx(0.24)
    # never under one grid step, never over the whole range
    assert search_radius(16 * MB, 8 * MB, 1024 * MB, 8 * MB) == pytest.approx(8 / 1016)
    assert search_radius(200 * MB, 190 * MB, 210 * MB, 8 * MB) == 1.0
    # on a log-scaled range the step is the factor 1.3: log(1.3) / log(256 / 16)
    assert search_radius(192 * MB, 16 * MB, 256 * MB, 8 * MB, log=True) == \
        pytest.approx(math.log(1.3) / math.log(16))


def test_the_summary_bme_carries_every_probe_decision_with_or_without_a_fit() -> None:
    """``state.bme`` (the summary's ``bme``) holds the probes, the decision and why, also for a
    flat curve that decides "no knee" without a fit (issue 31: it was null then); with a fit
    R², M* and P* beside them."""
    from types import SimpleNamespace
    from typing import cast

    from tuner_client.metrics.exporter import TunerMetrics
    from tuner_client.phases.offline_probes import _record
    from tuner_client.phases.state import RunContext, RunState

    ctx = cast(RunContext, SimpleNamespace(metrics=TunerMetrics(["shared_buffers"])))
    flat = decide(_probes(probe_sizes(128 * MB, 1024 * MB, 4, step=8 * MB)),
                  touched_pages=20_000, low=32 * MB, high=1024 * MB)
    assert flat.kind == "no-knee" and flat.fit is None
    state = RunState()
    _record(ctx, state, "p1-offline", flat, 6.5, [], (128 * MB, 32 * MB, 160 * MB))
    assert state.bme is not None
    assert (state.bme["source"], state.bme["decision"], state.bme["pass"]) == \
        ("probes", "no-knee", "p1-offline")
    assert "no knee" in state.bme["reason"] and state.bme["probe_cost_s"] == 6.5
    assert len(state.bme["probes"]) == 4 and len(state.bme["points"]) == 4
    assert "r2" not in state.bme and state.bme["window"] == [128 * MB, 32 * MB, 160 * MB]

    probes = _probes(probe_sizes(8 * MB, 256 * MB, 5, step=8 * MB))
    knee = decide(probes, touched_pages=int(TRUE.p_star * ACCESSES), low=8 * MB,
                  high=256 * MB)
    assert knee.kind == "knee" and knee.fit is not None
    state = RunState()
    _record(ctx, state, "p1-offline", knee, 9.0, [], None)
    assert state.bme is not None and state.bme["decision"] == "knee"
    assert state.bme["r2"] == pytest.approx(float(knee.fit.r2))
    assert state.bme["m_star"] == pytest.approx(float(knee.fit.params.m_star))
    assert state.bme["p_star"] == pytest.approx(float(knee.fit.params.p_star))
    assert 0.9 * TRUE.m_star < state.bme["m_star"] < 1.1 * TRUE.m_star


def test_a_flat_curve_from_a_buffer_that_never_filled_is_no_knee_found_in_range() -> None:
    """A flat curve confines the search (no knee: the pages fit) only when the largest
    probe's buffer was full at the end of its window; otherwise (or unknown) the decision is
    "no knee found in range" and no window is set, so the search keeps its whole range."""
    from tuner_client.phases.offline_probes import flat_needs_a_full_buffer
    from tuner_client.probes.runner import BufferFill

    sizes = probe_sizes(128 * MB, 1024 * MB, 4, step=8 * MB)
    flat = decide(_probes(sizes), touched_pages=20_000, low=32 * MB, high=1024 * MB)
    assert flat.kind == "no-knee"
    largest = 1024 * MB // 8192
    full = flat_needs_a_full_buffer(flat, {sizes[-1]: BufferFill(largest - 100, largest)})
    assert full is flat and search_window(full, 32 * MB, 1024 * MB, 8 * MB) is not None
    for fills in ({sizes[-1]: BufferFill(largest // 3, largest)}, {}):
        short = flat_needs_a_full_buffer(flat, fills)
        assert short.kind == "rejected" and not short.usable and short.size is None
        assert short.reason.startswith("no knee found in range")
        assert search_window(short, 32 * MB, 1024 * MB, 8 * MB) is None
    assert "43690 of 131072 buffers" in flat_needs_a_full_buffer(
        flat, {sizes[-1]: BufferFill(largest // 3, largest)}).reason
    # a knee is left alone
    knee = decide(_probes(probe_sizes(8 * MB, 256 * MB, 5, step=8 * MB)),
                  touched_pages=int(TRUE.p_star * ACCESSES), low=8 * MB, high=256 * MB)
    assert flat_needs_a_full_buffer(knee, {}) is knee


def test_a_knee_fitted_past_the_pages_the_windows_touched_is_taken_there() -> None:
    """Session 20's one-pass probes (4Q6,4Q9,4Q13 in 320 MB): two points above a floor of 0 leave
    the fitted M* loose (117-275MB across three near-equal runs); this run's 275MB lies past
    the 21,355 pages (167MB) of every relation the windows touched, which the 320MB probe held
    while reading the floor."""
    readings = [(32, 1_584_870, 615_292, "full"), (104, 2_345_431, 136_895, "full"),
                (320, 2_874_649, 0, "fits"), (1024, 2_502_399, 0, "fits")]
    probes = [Probe(size=s * MB, hits=h, reads=r, window_s=3.2, cost_s=9.0,
                    touched={"lineitem": 21_355}, settled=settled)
              for s, h, r, settled in readings]
    bound = 21_355 * 8192
    decision = decide(probes, touched_pages=21_355, low=32 * MB, high=1024 * MB)
    assert decision.kind == "knee" and decision.fit is not None, decision.reason
    assert decision.fit.params.m_star > 1.5 * bound  # the fit alone: ~275MB
    assert decision.knee == bound and decision.size == bound
    assert "taken at 167MB, the pages the windows touched" in decision.reason
    assert "the probe at 320MB read the floor" in decision.reason
    assert decision.to_dict()["knee_bound"] == bound
    # 25 % past the bound, on the 8MB grid; the top still reaches the first probe past it
    assert search_window(decision, 32 * MB, 1024 * MB, 8 * MB) == (208 * MB, 32 * MB, 320 * MB)
    # without the touched pages, or without a settled probe past them, the fit stands
    for loose in (decide(probes, touched_pages=None, low=32 * MB, high=1024 * MB),
                  decide([replace(p, settled="") for p in probes], touched_pages=21_355,
                         low=32 * MB, high=1024 * MB)):
        assert loose.kind == "knee" and loose.knee_bound is None
        assert loose.size == pytest.approx(loose.fit.params.m_star, rel=0.01)  # type: ignore[union-attr]
        assert loose.size > 1.5 * bound  # type: ignore[operator]
