"""The power benchmark's pure parts: exact binomial intervals, the interleaved schedule, the
tally, the scout's configuration syntax and the kept traces."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.evidence import pertx
from benchmarks.evidence.power import (
    PAIRS,
    clopper_pearson,
    exposure_speedup,
    parse_configs,
    race_schedule,
    tally,
)
from workloads.per_transaction.trace import Trace


def test_clopper_pearson_matches_the_tabulated_intervals() -> None:
    # 9 of 10: 0.555-0.997; 0 of 20: 0-0.168; 1 of 20: 0.0013-0.249 (exact binomial tables)
    assert clopper_pearson(9, 10) == pytest.approx((0.5550, 0.9975), abs=1e-4)
    assert clopper_pearson(0, 20) == pytest.approx((0.0, 0.1684), abs=1e-4)
    assert clopper_pearson(1, 20) == pytest.approx((0.00127, 0.2487), abs=1e-4)
    assert clopper_pearson(10, 10)[1] == 1.0


def test_schedule_interleaves_one_run_per_pair_per_cycle() -> None:
    order = race_schedule(["a", "b", "aa"], {"a": 3, "b": 3, "aa": 2}, seed=1)
    assert Counter(order) == {"a": 3, "b": 3, "aa": 2}
    # the first two cycles hold every pair once, the third only what is still owed
    assert sorted(order[:3]) == sorted(order[3:6]) == ["a", "aa", "b"]
    assert sorted(order[6:]) == ["a", "b"]
    assert race_schedule(["a", "b"], {"a": 2, "b": 2}, seed=1) == race_schedule(
        ["a", "b"], {"a": 2, "b": 2}, seed=1)


def test_tally_counts_claims_per_pair_with_their_interval() -> None:
    runs = [{"pair": "x", "claimed": k < 7, "half_width": 0.01 * (k + 1),
             "interval": {"ratio": 1.1}} for k in range(10)]
    runs += [{"pair": "aa", "claimed": False, "half_width": 0.03,
              "interval": {"ratio": r}} for r in (0.98, 1.02, 0.99, 1.01)]
    out = tally(runs)
    assert out["x"]["claimed"] == 7 and out["x"]["runs"] == 10
    assert out["x"]["ci"] == pytest.approx(list(clopper_pearson(7, 10)))
    assert out["x"]["median_half_width"] == pytest.approx(0.06)
    assert out["aa"]["claimed"] == 0 and out["aa"]["rate"] == 0.0
    pooled = out["aa"]["pooled"]
    assert pooled["ratio"] == pytest.approx(1.0, abs=1e-3) and pooled["low"] < 1 < pooled["high"]


def test_scout_configurations_and_pairs() -> None:
    assert parse_configs("-;work_mem=64kB,jit=off;") == [{}, {"work_mem": "64kB", "jit": "off"}]
    for name, pair in PAIRS.items():
        # both arms name the same knobs (pgbench variants would otherwise differ in round trips)
        assert set(pair.reference) == set(pair.candidate), name
        assert (pair.reference == pair.candidate) == name.startswith("aa"), name


def test_exposure_speedup_counts_busy_streams_not_finished_latencies() -> None:
    def window(q6: int, q13: int) -> Trace:
        rows = ([(0, 0, 0.1 * i, 1.0, True) for i in range(q6)]
                + [(0, 1, 0.1 * i, 3.0, True) for i in range(q13)])
        return Trace.from_rows([{}], ["Q6", "Q13"], rows, 10.0)

    streams = {"Q6": 6, "Q13": 2}
    # Q6 alike; Q13 6 completions under B against 4 under A: mean latency 2/3 of A's, and
    # Q13 holds 2 of the 8 busy streams: 8 / (6 + 2 * 4/6) = 1.0909
    assert exposure_speedup(window(30, 4), window(30, 6), streams) == pytest.approx(12 / 11)
    assert exposure_speedup(window(30, 4), window(30, 4), streams) == pytest.approx(1.0)
    assert exposure_speedup(window(0, 0), window(30, 4), streams) is None


def test_kept_traces_load_back_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pertx, "TRACES", tmp_path)
    rows = [(k % 2, k % 3, 0.5 * k, 0.1 + 0.01 * k, k != 4) for k in range(12)]
    trace = Trace.from_rows([{"work_mem": "64kB"}, {"work_mem": "4MB"}], ["Q6", "Q13", "Q3"],
                            rows, 6.0)
    path = pertx.save_trace(trace, "power.t.x1.10.1")
    assert path == tmp_path / "power.t.x1.10.1.npz"
    back = pertx.load_trace(path)
    assert back.configurations == trace.configurations and back.templates == trace.templates
    for name in ("config", "template", "start", "latency", "ok"):
        assert (getattr(back, name) == getattr(trace, name)).all(), name
    assert back.seconds == 6.0 and back.errors == 1


def test_tally_counts_the_old_rules_claims_beside_the_new() -> None:
    runs = [{"pair": "aa", "claimed": False, "old_claimed": k == 0, "half_width": 0.03,
             "interval": {"ratio": 1.0}} for k in range(8)]
    out = tally(runs)["aa"]
    assert out["claimed"] == 0 and out["old_claimed"] == 1
    assert out["old_ci"] == pytest.approx(list(clopper_pearson(1, 8)))
