"""Anytime-valid intervals for the final race: false claims, coverage and power when the race
looks after every round, against the fixed-n t rules.

Simulated races (:mod:`benchmarks.simulators.race_sim`): a per-round log-ratio sd of 0.06 (the
``progress`` estimator's paired blocks, issue 27), log-normal noise on every measurement, the
machine's log level a random walk (sd 0.01 a measurement) with a trend (+0.002 a
measurement); 3 rounds at least, then the race stops whenever its rule says so, or at the
round limit (12 or 30). Each scenario and rule runs ``--races`` races (seeds 0..N−1); every
rate comes with its 95 % Wilson interval. Rules: ``anytime`` (confidence sequences, the
tuner's rule now), ``t-every-round`` (a 95 % fixed-n t interval checked after every round,
the race stopping as soon as it clears), ``t-race`` (the tuner's earlier rule: fixed-n t,
an early win only at 99 % Bonferroni-adjusted), ``anytime-claim`` (the confidence sequences
with the final phase's default ``until: claim`` stop: the race also ends once the decision
would recommend a candidate). Then the price: the median half-width of the
95 % interval at a fixed n, confidence sequence against t, on the same simulated rounds.

Run: ``flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.anytime_race [--quick]
[--races N]``. Writes benchmarks/results/anytime_race[.quick].json and .md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy
from scipy import stats
from scipy.stats import binomtest

from benchmarks.machine import cpu_model
from benchmarks.simulators.race_sim import RULES, Scenario, summarize
from tuner_client.stats.sequential import cs_multiplier

RESULTS = Path(__file__).parent / "results"
TRUTHS: dict[str, dict[str, float]] = {
    "A/A, one candidate": {"default": 1.0, "c": 1.0},
    "A/A, best of three": {"default": 1.0, "a": 1.0, "b": 1.0, "c": 1.0},
    "1.05×, one candidate": {"default": 1.0, "c": 1.05},
    "1.10×, one candidate": {"default": 1.0, "c": 1.10},
    "near-equal: 1.10×, 1.08×, 1.05×": {"default": 1.0, "a": 1.10, "b": 1.08, "c": 1.05},
}
HORIZONS = (12, 30)
FIXED_N = (4, 6, 12, 20, 30)


def _wilson(k: int, n: int) -> list[float]:
    ci = binomtest(k, n).proportion_ci(method="wilson")
    return [float(ci.low), float(ci.high)]


def _row(name: str, horizon: int, rule: str, races: int) -> dict[str, Any]:
    s = summarize(Scenario(truths=TRUTHS[name], max_rounds=horizon), range(races), rule)
    claims, false, cov = (round(x * races) for x in (s.claims, s.false_claims, s.coverage))
    row: dict[str, Any] = {
        "scenario": name, "max_rounds": horizon, "rule": rule, "races": races,
        "claims": s.claims, "claims_ci": _wilson(claims, races),
        "false_claims": s.false_claims, "false_claims_ci": _wilson(false, races),
        "coverage": s.coverage, "coverage_ci": _wilson(cov, races),
        "mean_rounds": s.mean_rounds, "median_half_width": s.median_half_width,
        "delivered": s.delivered,
    }
    if s.coverage_always is not None:
        always = round(s.coverage_always * races)
        row |= {"coverage_always": s.coverage_always,
                "coverage_always_ci": _wilson(always, races)}
    return row


def _widths(races: int, seed: int = 1) -> list[dict[str, Any]]:
    """Median 95 % half-width (upper side, % of the ratio) at fixed n over ``races`` streams
    of normal log-ratios with sd 0.06: the confidence sequence (one candidate, and three at
    98.3 %) against Student's t."""
    rng = np.random.default_rng(seed)
    out = []
    for n in FIXED_N:
        x = rng.normal(0.0, 0.06, size=(races, n))
        se = x.std(axis=1, ddof=1) / math.sqrt(n)
        row: dict[str, Any] = {"n": n}
        for key, mult in (("t", float(stats.t.ppf(0.975, n - 1))),
                          ("anytime", cs_multiplier(n, 0.05)),
                          ("anytime_of_3", cs_multiplier(n, 0.05 / 3))):
            row[key] = float(np.median(np.expm1(mult * se))) if math.isfinite(mult) else None
        out.append(row)
    return out


def _pct(x: float | None) -> str:
    return "unbounded" if x is None else f"±{100 * x:.1f} %"


def _markdown(rows: list[dict[str, Any]], widths: list[dict[str, Any]],
              meta: dict[str, Any]) -> str:
    lines = [
        "# Anytime-valid intervals for the final race: false claims, coverage, power",
        "",
        f"Command: `{meta['command']}`; {meta['races']} races per row (seeds 0..N−1). "
        f"Simulated, so the machine's load does not enter the numbers (ran on {meta['cpu']}, "
        f"{meta['cores']} cores, Python {meta['python']}, numpy {meta['numpy']}, scipy "
        f"{meta['scipy']}, {meta['platform']}; load {meta['load_before']} before, "
        f"{meta['load_after']} after; {meta['wall_s']:.0f} s).",
        "",
        "Per-round log-ratio sd 0.06, log-normal noise, drift (random walk sd 0.01 and trend "
        "+0.002 per measurement); at least 3 rounds, the race checks its rule after every "
        "round. *Claims*: the decision recommended a candidate (power where one is truly "
        "better); *false claims*: one truly no better than the default; *coverage*: every "
        "candidate's printed interval held its true ratio at the end; *always*: every "
        "candidate's confidence sequence (at the race's Bonferroni level) held it at every "
        "round; *delivered*: the mean true ratio of what the run leaves in force (the winner, else "
        "the default's 1.0). Rates with 95 % Wilson intervals.",
        "",
        "| scenario | max rounds | rule | claims | false claims | coverage at stop | "
        "coverage at every round | mean rounds | median half-width at stop | delivered |",
        "|---|---:|---|---|---|---|---|---:|---:|---:|",
    ]

    def rate(r: dict[str, Any], key: str) -> str:
        lo, hi = r[f"{key}_ci"]
        return f"{100 * r[key]:.1f} % ({100 * lo:.1f}–{100 * hi:.1f})"

    for r in rows:
        always = rate(r, "coverage_always") if "coverage_always" in r else "—"
        lines.append(f"| {r['scenario']} | {r['max_rounds']} | {r['rule']} | "
                     f"{rate(r, 'claims')} | {rate(r, 'false_claims')} | "
                     f"{rate(r, 'coverage')} | {always} | {r['mean_rounds']:.1f} | "
                     f"{_pct(r['median_half_width'])} | {r['delivered']:.3f}× |")
    lines += [
        "",
        f"## The price: 95 % half-width at a fixed n ({meta['races']} streams each, "
        "log-ratio sd 0.06, median)",
        "",
        "| paired rounds | fixed-n t | confidence sequence | confidence sequence, one of "
        "three (98.3 %) |",
        "|---:|---:|---:|---:|",
    ]
    for w in widths:
        lines.append(f"| {w['n']} | {_pct(w['t'])} | {_pct(w['anytime'])} | "
                     f"{_pct(w['anytime_of_3'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 races per row")
    parser.add_argument("--races", type=int, default=None)
    args = parser.parse_args(argv)
    races = args.races or (300 if args.quick else 2000)
    command = "flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.anytime_race" + (
        " --quick" if args.quick else "") + (f" --races {args.races}" if args.races else "")
    stem = "anytime_race" + (".quick" if args.quick else "")
    load_before = os.getloadavg()
    started = time.monotonic()
    RESULTS.mkdir(exist_ok=True)
    rows: list[dict[str, Any]] = []
    widths = _widths(races)
    for horizon in HORIZONS:
        for name in TRUTHS:
            for rule in RULES:
                rows.append(_row(name, horizon, rule, races))
                r = rows[-1]
                print(f"{name}, {horizon} rounds, {rule}: claims {100 * r['claims']:.1f} %, "
                      f"false {100 * r['false_claims']:.1f} %, coverage "
                      f"{100 * r['coverage']:.1f} %", flush=True)
                # written after every row: a run cut short keeps what it has
                meta = {"command": command, "races": races, "cpu": cpu_model(),
                        "cores": os.cpu_count(), "host": platform.node(),
                        "python": platform.python_version(), "numpy": np.__version__,
                        "scipy": scipy.__version__, "platform": platform.platform(),
                        "load_before": " ".join(f"{x:.1f}" for x in load_before),
                        "load_after": " ".join(f"{x:.1f}" for x in os.getloadavg()),
                        "wall_s": time.monotonic() - started}
                (RESULTS / f"{stem}.json").write_text(json.dumps(
                    {"meta": meta, "rows": rows, "half_widths": widths}, indent=2))
                (RESULTS / f"{stem}.md").write_text(_markdown(rows, widths, meta))
    anytime = [r for r in rows if r["rule"].startswith("anytime")]
    ok = all(r["false_claims"] <= 0.05 and r["coverage"] >= 0.95 for r in anytime)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
