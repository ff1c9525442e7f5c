"""The restart evidence's per-window miss probability (no database): the prewarm's reads
flushed into the first window are taken out of runs that read the counters before the flush."""

from __future__ import annotations

import pytest

from benchmarks.evidence.restart import (
    analyse,
    fpi_analysis,
    markdown,
    miss_analysis,
    pooled,
    window_misses,
)


def _counters(windows: list[tuple[int, int]]) -> list[dict[str, int]]:
    hit = read = 0
    out = [{"blks_hit": 0, "blks_read": 0}]
    for h, r in windows:
        hit, read = hit + h, read + r
        out.append({"blks_hit": hit, "blks_read": read})
    return out


def test_the_prewarms_reads_leave_the_first_window_of_an_unflushed_run() -> None:
    # pgbench, scale 20 (session 11): 153,857 hits and 21,914 reads in the first window, of
    # which 16,357 were the prewarm's; settled windows at 0.036
    cycle = {"kind": "warm", "prewarm": {"blocks": 16_357},
             "counters": _counters([(153_857, 21_914), (240_000, 9_000), (240_000, 9_000)])}
    raw = window_misses(cycle, flushed=True)
    fixed = window_misses(cycle, flushed=False)
    assert raw is not None and fixed is not None
    assert raw[0] == pytest.approx(0.1247, abs=1e-4)
    assert fixed[0] == pytest.approx(5_557 / 159_414, abs=1e-6)  # 0.0349
    assert fixed[1:] == raw[1:]
    cold = {"kind": "restart", "prewarm": None, "counters": cycle["counters"]}
    assert window_misses(cold, flushed=False) == raw
    assert window_misses({"kind": "warm", "counters": []}) is None


def test_first_minus_settled_with_an_interval_over_the_cycles() -> None:
    cycles = [{"kind": "restart", "flushed": True,
               "counters": _counters([(90_000, 10_000 + k), (95_000, 5_000), (95_000, 5_000)])}
              for k in range(3)]
    out = miss_analysis(cycles, steady=2)
    mean, low, high = out["miss_first_minus_steady_restart"]
    assert mean == pytest.approx(0.05, abs=1e-3) and low < mean < high
    assert "miss_warm" not in out  # no warm cycle


def test_full_page_images_per_window_first_and_settled() -> None:
    """A restart is a checkpoint: the first window rewrites whole pages into the WAL."""
    def cycle(first: int) -> dict[str, object]:
        total, counters = 0, [{"wal_fpi": 0}]
        for n in (first, 2_000, 1_000, 1_000):
            total += n
            counters.append({"wal_fpi": total})
        return {"kind": "warm", "counters": counters}

    out = fpi_analysis([cycle(30_000), cycle(32_000), cycle(28_000)], steady=2)
    assert out["fpi_first_warm"][0] == pytest.approx(30_000)
    assert out["fpi_settled_warm"][0] == pytest.approx(1_000)
    assert out["fpi_first_warm"][1] < 30_000 < out["fpi_first_warm"][2]
    assert fpi_analysis([{"kind": "warm", "counters": [{"blks_hit": 0}] * 3}] * 2, 2) == {}


def _run(windows: int, cycles: int, first: float) -> dict[str, object]:
    """A measured run of pgbench-like windows: each cycle's first window ``first`` times the
    level of the rest (1000 plus the cycle's number)."""
    return {"command": f"restart --windows {windows}", "machine": {}, "pgbench_scale": 20,
            "memory_limit_mb": 320, "window_s": 4.0, "kinds": ["warm"], "wall_s": 60.0,
            "load_average_end": [1.0, 1.0, 1.0],
            "cycles": [{"kind": "warm", "qpm": [1000.0 * first] + [1000.0 + c] * (windows - 1),
                        "progress": [None] * windows,
                        "counters": [{"wal_fpi": k} for k in range(windows + 1)]}
                       for c in range(cycles)]}


def test_pooled_runs_are_cut_to_the_fewest_windows_and_the_headline_is_after_the_warm_up() -> None:
    """Session 13's 16-window cycles pool with 9-window ones: every cycle keeps 9 windows (its
    counters 10), so the settled level is the same seconds after the return in all."""
    data = pooled([_run(16, 3, 0.9), _run(9, 2, 0.9)])
    assert [len(c["qpm"]) for c in data["cycles"]] == [9] * 5
    assert [len(c["counters"]) for c in data["cycles"]] == [10] * 5
    data.update(steady=2, warmup_windows=1)
    data["analysis"] = analyse(data)
    first, after = data["analysis"]["warm"][0], data["analysis"]["warm"][1]
    assert first[0] == pytest.approx(0.9 / 1.002, abs=2e-3)
    assert after[0] == pytest.approx(1.0) and 0.98 <= after[1] <= after[2] <= 1.02
    text = markdown(data)
    assert ("first window after a 4-s warm-up after a warm restart (prewarm)** (4–8 s after "
            "the return), by count: 1.000 (1.000–1.000) of the settled level over 5 cycles: "
            "within ±2 %") in text
    data["warmup_windows"] = 0
    assert "first window after a" not in markdown(data)
