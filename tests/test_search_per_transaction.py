"""The online search's evaluations measured per transaction in a real tuning run (PostgreSQL +
TPC-H SF 0.01, standalone, ``measure.design: per-transaction``): a clearly worse setting
(hash joins off on a hash-join mix) reads below its reference with an interval below 1, the
reference's own setting reads about 1, and the run records the design in ``trials.jsonl``,
``summary.json`` and its decisions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tune_fixtures import TpchCluster, tpch_cluster, tune, tune_yaml  # noqa: F401  (fixture)

from tuner_client.engine.comparison import OFFLINE_SEARCH_DESIGNS
from tuner_client.measurer import PointRecord
from tuner_client.phases.design_choice import choose_for, race_in
from tuner_client.phases.search_design import search_choice
from tuner_client.phases.search_per_transaction import LEVEL, MAX_BATCH, run_seconds
from tuner_client.phases.search_stops import (
    RANK_LEVEL,
    SETTLED_HALF_WIDTH,
    SETTLED_NO_GAIN,
    STALL_MIN,
    Stall,
    ranked,
)
from tuner_client.phases.state import outranks
from tuner_client.stats.per_transaction import rank_compare, ranking_slice_s
from workloads.per_transaction import Trace

# Q3, Q9 and Q13 join by hashing at this scale; with hash joins off they merge or loop
CONFIG = tune_yaml(
    "pertx-search", 4, mix="2Q3,2Q9,1Q13",
    measure="design: per-transaction, per_transaction_s: 20",
    online="{knobs: {enable_hashjoin: {values: ['on', 'off']}}, strategy: {name: exhaustive}, "
           "evaluations: 2}",
    final="{rounds: 1, max_seconds: 30}")


def test_run_seconds_keep_each_arms_share() -> None:
    assert run_seconds(30, 1) == 30
    assert run_seconds(30, 5) == 90  # six arms: each keeps a two-arm run's transactions
    assert MAX_BATCH >= 6


def _synthetic(speedups: list[float], sigma: float, seconds: float = 20.0, seed: int = 1,
               latency_s: float = 0.01) -> Trace:
    """200 transactions a second of one template, lognormal latencies of log-sd ``sigma``
    around ``latency_s``, configuration k ``speedups[k]`` times as fast as the reference
    (0)."""
    rng = np.random.default_rng(seed)
    n = int(200 * seconds)
    start = np.sort(rng.uniform(0.0, seconds, n))
    config = rng.integers(0, len(speedups), n)
    latency = latency_s * rng.lognormal(0.0, sigma, n) / np.asarray(speedups)[config]
    rows = [(int(c), 0, float(s), float(x), True) for c, s, x in zip(config, start, latency,
                                                                      strict=True)]
    return Trace.from_rows(tuple({"work_mem": f"{k + 1}MB"} for k in range(len(speedups))),
                           ["Q"], rows, seconds)


def test_a_run_ends_once_every_candidate_is_ranked() -> None:
    """A run may end early once each candidate's 80 % interval is within ±3 %, within a
    quarter of its own effect, or wholly below 1.05 (no gain worth taking); a 1.03×
    candidate whose interval reaches past 1.05 at more than ±3 % keeps it going (the
    comments' widths are 95 % ones unless they say 80 %)."""
    for seed in (1, 2, 3):
        assert ranked(_synthetic([1.0, 1.3], 0.5, seed=seed), seed)  # ±3.0–3.7 %, 1.29–1.34×
        assert ranked(_synthetic([1.0, 1.0], 0.1, seed=seed), seed)  # A/A at ±0.7 %
        assert ranked(_synthetic([1.0, 0.9], 0.7, seed=seed), seed)  # ±5 %, below 0.98
        assert not ranked(_synthetic([1.0, 1.03], 1.0, seed=seed), seed)  # up to 1.11–1.18
        # one candidate ranked, the other not: the run goes on
        # (80 %: the 1.3x at ±3.7-4.9 %, within a quarter of its effect; the 1.03x up to
        # 1.08-1.13 at ±3.7-4.8 %)
        assert not ranked(_synthetic([1.0, 1.3, 1.03], 0.7, seed=seed), seed)
    # the run is looked at with 80 % intervals (the search ranks; the evaluation's own
    # interval is 95 %): an A/A candidate reading 0.98x is below 1.05 at 80 % (up to 1.03)
    # when its 95 % interval still reaches 1.06 at ±4 %, past both of the other rules
    no_gain = _synthetic([1.0, 1.0], 0.9, seed=1)
    wide = rank_compare(no_gain, 0, 1, level=LEVEL, seed=1, resamples=1000)
    assert wide.interval.high > SETTLED_NO_GAIN and wide.half_width > SETTLED_HALF_WIDTH
    assert rank_compare(no_gain, 0, 1, level=RANK_LEVEL, seed=1,
                        resamples=1000).interval.high < SETTLED_NO_GAIN
    assert ranked(no_gain, 1)
    # too few slices for an interval: not yet. Transactions of 10 ms may be cut into slices
    # of 0.25 s (10 mean latencies, at least 0.25 s): 1.5 s make 6, 2.5 s make 10
    assert ranking_slice_s(_synthetic([1.0], 0.1)) == pytest.approx(0.25)
    assert not ranked(_synthetic([1.0, 2.0], 0.1, seconds=1.5))
    assert ranked(_synthetic([1.0, 2.0], 0.1, seconds=2.5))
    # transactions of 50 ms make slices of 0.5 s, of 0.2 s slices of 1 s (never longer):
    # 5 s make 5 slices
    assert ranking_slice_s(_synthetic([1.0], 0.01, latency_s=0.05)) == pytest.approx(0.5, 0.01)
    slow = _synthetic([1.0, 2.0], 0.1, seconds=5.0, latency_s=0.2)
    assert ranking_slice_s(slow) == 1.0 and not ranked(slow)


def test_search_evaluations_per_transaction(tpch_cluster: TpchCluster,  # noqa: F811
                                            tmp_path: Path) -> None:
    tuner = tune(tpch_cluster, CONFIG, source="pertx-search.yaml", run_id="s1",
                 output_dir=tmp_path)
    assert tuner.config.measure.per_transaction_s == 20
    result = tuner.run()
    online = {r.settings["enable_hashjoin"]: r for r in tuner.records
              if r.session == "p1-online"}
    assert set(online) == {"on", "off"}, [r.session for r in tuner.records]
    off, same = online["off"], online["on"]
    for record in (off, same):
        assert record.design == "per-transaction" and record.interval is not None
        assert record.transactions is not None and min(record.transactions) >= 30
        assert record.value is not None and record.ratio is not None
    # hash joins off: clearly slower, the whole interval below 1
    assert off.ratio < 0.95 and off.interval[1] < 1.0, (off.ratio, off.interval)
    # the reference's own setting: no gap beyond 3 %, and narrower than ±15 %. Not "holds 1":
    # the interval is a nominal 95 % one, which the run's early end makes miss more often than
    # 1 run in 20, so the test would fail that often
    assert same.interval[0] <= 1.03 and same.interval[1] >= 0.97, same.interval
    assert same.interval[1] / same.interval[0] < 1.35, same.interval
    assert same.value > off.value  # the strategy ranks the worse setting below
    # both candidates in one run beside the reference, and the run says so
    decisions = "\n".join(result.work.decisions)
    assert "p1-online: evaluations measured per-transaction: 1 run(s)" in decisions, decisions
    assert "p1-offline: evaluations measured" not in decisions  # restart knobs: windows
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert any("measured per-transaction" in d for d in summary["decisions"])
    assert result.best.settings.get("enable_hashjoin", "on") == "on"
    trials = [json.loads(line) for line in (tmp_path / "trials.jsonl").read_text().splitlines()]
    designs = {t["session"]: t["design"] for t in trials if t["session"] in ("p1-online",
                                                                             "p1-offline")}
    assert designs == {"p1-online": "per-transaction", "p1-offline": "windows"}
    ctx = tuner.context
    assert ctx is not None and search_choice(ctx, ctx.online_space).design == "per-transaction"
    # the offline search (restart-time knobs) runs in windows with warm restarts; the
    # online route would search them by duet on a clone
    why = search_choice(ctx, ctx.offline_space, OFFLINE_SEARCH_DESIGNS).text()
    assert search_choice(ctx, ctx.offline_space).design == "duet"
    assert why.startswith("windows") and "shared_buffers ('postmaster')" in why, why


# parallel query has a system-wide side (workers compete for the cores) that per-transaction
# latency misjudges: its values are measured by switchback beside the reference
WIDE_CONFIG = tune_yaml(
    "pertx-search-wide", 5, mix="2Q1,2Q6,1Q13",
    measure="design: per-transaction, per_transaction_s: 10, slice_s: 1",
    online="{knobs: {max_parallel_workers_per_gather: {min: 0, max: 2}}, "
           "strategy: {name: exhaustive}, evaluations: 3}",
    final="{rounds: 0, max_seconds: 30}")


def test_system_wide_knobs_are_measured_by_switchback(tpch_cluster: TpchCluster,  # noqa: F811
                                                      tmp_path: Path) -> None:
    tuner = tune(tpch_cluster, WIDE_CONFIG, source="pertx-wide.yaml", run_id="s2",
                 output_dir=tmp_path)
    result = tuner.run()
    online = {r.settings["max_parallel_workers_per_gather"]: r for r in tuner.records
              if r.session == "p1-online"}
    assert set(online) == {"0", "1", "2"}, [r.session for r in tuner.records]
    decisions = "\n".join(result.work.decisions)
    # the values other than the reference's (2) are measured whole by switchback beside it,
    # both in ONE run; the reference's own value per transaction (an A/A comparison)
    whole = {v: r for v, r in online.items() if v != "2"}
    for record in online.values():
        assert record.ratio is not None and record.value is not None
        assert record.interval is not None
        assert record.interval[0] <= record.ratio <= record.interval[1]
    for value, record in whole.items():
        assert record.design == "switchback", (value, record.design)
        assert record.interval is not None
        # a sanity bound on a few seconds of switchback, not a precision claim: a single
        # window block on a loaded 2-core machine once read 2.08× for 2 → 0 (quiet: 1.2–1.3×)
        assert 1 / 3 < record.ratio < 3.0, (value, record.ratio)
        assert record.interval[1] / record.interval[0] > 1.02, record.interval
        said = [d for d in result.work.decisions
                if f"'max_parallel_workers_per_gather': '{value}'}}: " in d]
        assert said and all(", switchback: " in d and "(95 % CI " in d and
                            d.endswith(" over the reference") for d in said), said
    assert online["2"].design == "per-transaction"
    assert 0.88 < online["2"].ratio < 1.12, online["2"].ratio  # the reference against itself
    assert "measured whole by switchback beside it (2 candidate(s) in 1 run(s))" in decisions, \
        decisions
    # the final race between configurations differing in parallel query switches the whole
    # server (switchback), never per transaction, and says why
    ctx = tuner.context
    assert ctx is not None
    original = dict(ctx.original)
    assert original["max_parallel_workers_per_gather"] == "2", original
    candidates = {"default": original,
                  "best": {**original, "max_parallel_workers_per_gather": "0"}}
    choice = choose_for(ctx, [candidates["default"], candidates["best"]])
    assert choice.design == "switchback", choice
    assert "not per-transaction: max_parallel_workers_per_gather ('user') differs: it has a " \
           "system-wide side" in choice.text(), choice.text()
    race = race_in(choice.design, ctx, tuner.state, candidates, ["default", "best"])
    assert race is not None
    decision = race.to_final_decision()
    said = "\n".join(tuner.state.decisions)
    assert decision.design == "switchback", said
    iv = decision.intervals["best"]
    # a driven switchback runs every block it planned: the end's t interval (stats/horizon)
    assert iv is not None and iv.method == "t" and 0 < iv.low <= iv.ratio <= iv.high


def test_paired_ratios_rank_the_search_whatever_the_values_say() -> None:
    """The demo's run 9 (session 16): the online search's reference was the offline best
    (shared_buffers 96MB, its window value 13,470 qpm); a trial with parallel workers off read
    1.21× over it, a value of 11,990 qpm at the reference's level minutes later. The ratio
    over the incumbent itself decides: the trial is the new best, and a 0.95× one is not,
    whatever its value. Two trials against one reference rank by their ratios (a 1.157× one
    read 6,326 qpm after the level moved, a 1.155× one 8,871). Against another configuration
    the values still decide."""
    names = ["shared_buffers", "max_parallel_workers_per_gather"]

    def rec(value: float, ratio: float | None, sb: str, workers: str) -> PointRecord:
        return PointRecord(session="p1", point={}, settings={}, value=value, ratio=ratio,
                           in_force={"shared_buffers": sb,
                                     "max_parallel_workers_per_gather": workers})

    incumbent = rec(13_470.0, None, "96MB", "2")
    trial = rec(11_990.0, 1.21, "96MB", "0")
    against = dict(incumbent.in_force)
    assert outranks(trial, against, incumbent, None, names)
    assert not outranks(trial, None, incumbent, None, names)  # no reference: values, as before
    worse = rec(14_000.0, 0.95, "96MB", "0")
    assert not outranks(worse, against, incumbent, None, names)
    # the reference is not the incumbent (the original's shared_buffers): values decide
    elsewhere = {**against, "shared_buffers": "128MB"}
    assert not outranks(trial, elsewhere, incumbent, None, names)
    assert outranks(worse, elsewhere, incumbent, None, names)
    assert outranks(trial, against, None, None, names)
    # both against one reference: 1.157× outranks 1.155× at a third of its value, not 1.15×
    first = rec(8_871.0, 1.155, "96MB", "1")
    assert outranks(rec(6_326.0, 1.157, "96MB", "0"), elsewhere, first, elsewhere, names)
    assert not outranks(rec(9_000.0, 1.15, "96MB", "0"), elsewhere, first, elsewhere, names)


def test_a_session_stalls_after_two_simplexes_without_a_gain() -> None:
    """Two knobs: a simplex is 3 vertices, so 6 evaluations in a row with no interval wholly
    above 1 stop the session; a gain resets the count, and a failure does not count."""
    def record(low: float | None, high: float = 1.1) -> PointRecord:
        return PointRecord(session="p1", point={}, settings={},
                           interval=None if low is None else (low, high))

    stall = Stall(knobs=2)
    assert stall.limit == 6 and Stall(knobs=1).limit == STALL_MIN == 4
    for _ in range(5):
        stall.add(record(0.95))
    assert not stall.stalled
    stall.add(record(1.02, 1.2))  # a gain
    assert stall.without_gain == 0
    for low in (0.9, 0.99, 1.0, 0.7):
        stall.add(record(low))
    stall.add(record(None))  # failed: no interval
    assert stall.without_gain == 4 and not stall.stalled
    stall.add(record(0.97))
    stall.add(record(0.5, 0.8))  # a clear loss is no gain either
    assert stall.stalled and "the last 6 evaluations showed no gain" in stall.text()
