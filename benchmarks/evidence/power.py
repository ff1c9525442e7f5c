"""Power of the per-transaction final race (issue 27, Evidence): pairs of configurations whose
true ratio is known, raced by the tuner's own code many times; and A/A false claims.

Steps (``python -m benchmarks.evidence power STEP``):

* ``scout``: one per-transaction run of several configurations on a mix, each against the
  first, per template -- to find knob settings worth about 1.05× and 1.10×.
* ``truth``: each pair's ground truth, measured separately from the races: ``rounds``
  interleaved whole-server window rounds (AB, BA, ...; ``ALTER SYSTEM`` + reload between
  windows), B's work-weighted speedup per round, a 95 % Student t interval over rounds
  (:func:`benchmarks.evidence.pertx.window_rounds`). For TPC-H streams a template's mean
  latency in a window is its streams' busy time over its completions
  (:func:`exposure_speedup`): at load 60-90 a Q13 takes seconds, and the finished queries of
  a 10 s window would leave out the slowest.
* ``race``: the tuner's per-transaction final race between the pair's reference (the
  original) and candidate, ``runs`` times per pair, on the code path of
  :class:`tuner_client.phases.final_per_transaction.PerTransaction`: the workload's
  per-transaction driver (:func:`workloads.per_transaction.from_config.make_assignment`) for
  ``final.max_seconds``, then :func:`tuner_client.stats.per_transaction_race.race_per_transaction`
  at 95 %. A/A runs race the reference against itself. The pairs' runs are interleaved
  (one of each per cycle, in a seeded random order), so drift and co-tenants hit them alike.
  Counted: runs recommending the candidate with its interval above 1 (power) and A/A runs
  claiming a winner (false claims), each with a Clopper-Pearson 95 % interval.

The run's length is fixed (``final.max_seconds``, ``--seconds``), as in the tuner: its race
does not stop early. Run: ``python -m benchmarks.evidence power {scout,truth,race}
[--pairs ...] [--seconds S] [--runs PAIR=N,other=N] [--tag T]``;
writes ``benchmarks/results/evidence_power.<step>[.T].{json,md}`` (rewritten after every
measurement). The A/A half-width beside a second load is :mod:`benchmarks.evidence.loaded`.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy.stats import beta

from benchmarks.evidence.common import RESULTS, header, load_average, machine, write_results
from benchmarks.evidence.endtoend import MB, open_memory_bound, tuner_dict
from benchmarks.evidence.pertx import (
    TRACES,
    fmt_iv,
    interval_dict,
    load_trace,
    pgbench_dsn,
    save_trace,
    window_rounds,
)
from tuner_client.config import TunerConfig, tuner_config_from_dict
from tuner_client.stats.paired import interval_from_logs
from tuner_client.stats.per_transaction import compare
from tuner_client.stats.per_transaction_race import race_per_transaction
from workloads.mix import parse_mix
from workloads.per_transaction.from_config import make_assignment
from workloads.per_transaction.settings import Configuration
from workloads.per_transaction.trace import Trace

logger = logging.getLogger(__name__)

MIX = "2Q3,2Q6,2Q9,2Q13"


@dataclass(frozen=True)
class Pair:
    """Two configurations raced on a workload (``config_for``'s spelling): the reference
    (the original) and the candidate."""

    workload: str
    reference: dict[str, str]
    candidate: dict[str, str]


#: TPC-H Q6 streams (no join, no sort: work_mem cannot matter) beside one or two Q13 streams
#: (a hash aggregate and a sort that spill at 64kB: Q13 ran 1.40x and 1.62x faster at 4MB in
#: the scouts), so Q13's share of the streams sets the ratio: 2 of 8 ~1.10x, 1 of 8 ~1.05x.
#: The A/A pairs race the reference against itself. pgbench scripts were tried too (the
#: scouts in the results): at load 50-90 a client's cycle is mostly waiting, which squashed
#: sort and JIT effects to 1.00-1.08x.
#: On a quiet machine (session 12) Q13 gains only 1.14-1.17x, so the first pair's truth is
#: 1.042x (1.015-1.070) and three quarters of the streams on Q13 make the ~1.10x pair
#: (``x1.10q``: 1.099x per transaction in its scout).
MIX_110, MIX_105, MIX_110Q = "tpch:6Q6,2Q13", "tpch:7Q6,1Q13", "tpch:2Q6,6Q13"
SLOW, FAST = {"work_mem": "64kB"}, {"work_mem": "4MB"}
PAIRS: dict[str, Pair] = {
    "x1.10": Pair(MIX_110, SLOW, FAST), "x1.05": Pair(MIX_105, SLOW, FAST),
    "aa-x1.10": Pair(MIX_110, SLOW, SLOW), "aa-x1.05": Pair(MIX_105, SLOW, SLOW),
    "x1.10q": Pair(MIX_110Q, SLOW, FAST), "aa-x1.10q": Pair(MIX_110Q, SLOW, SLOW),
}
#: configurations the scout compares with PostgreSQL's defaults (``--configs``)
SCOUT = ("-;random_page_cost=20;random_page_cost=60;enable_hashjoin=off;work_mem=64kB;"
         "enable_nestloop=off;jit=off")
#: the pgbench scripts of the ``scripts:`` workloads, their database's scale and clients
SCRIPTS = Path(__file__).resolve().parent / "power_scripts"
PGBENCH_SCALE, CLIENTS = 10, 4
STATE_DIR = Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-power"


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) binomial interval of k successes in n trials."""
    alpha = 1.0 - level
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def config_for(workload: str, limit: int, seconds: float, seed: int) -> TunerConfig:
    """The tuner config whose workload section the race's driver is built from: a TPC-H mix
    (``tpch:2Q3,2Q6``) or pgbench scripts of :data:`SCRIPTS` (``scripts:point@9,range_sort@1``)
    on the pgbench database at :data:`PGBENCH_SCALE`."""
    kind, _, spec = workload.partition(":")
    cfg = tuner_dict("evidence-power", spec if kind == "tpch" else MIX, scale=0.1,
                     memory_limit=limit, offline_evals=1, online_evals=1, queries=1,
                     warmup_s=1, seed=seed)
    if kind == "scripts":
        files = [f"{SCRIPTS / name}.pgbench@{weight}" for name, _, weight in
                 (item.partition("@") for item in spec.split(","))]
        cfg["workload"] = {"scripts": {"files": files, "clients": CLIENTS,
                                       "variables": {"scale": PGBENCH_SCALE}}}
    elif kind != "tpch":
        raise ValueError(f"--workload must be tpch:MIX or scripts:NAME@W,..., not {workload!r}")
    cfg["measure"]["design"] = "per-transaction"
    cfg["final"] = {"max_seconds": seconds}
    return tuner_config_from_dict(cfg)


def run_configs(cfg: TunerConfig, dsn: str, configs: Sequence[Configuration], seconds: float,
                seed: int) -> Trace:
    """The workload of ``cfg`` per transaction over ``configs`` for ``seconds``."""
    return make_assignment(cfg.workload, dsn, configs, seed=seed).run(int(seconds))


def race_once(dsns: dict[str, str], pair: str, limit: int, seconds: float, seed: int,
              tag: str = "") -> dict[str, Any]:
    """One final race of the pair (reference first), as the tuner runs it."""
    cfg = config_for(PAIRS[pair].workload, limit, seconds, seed)
    dsn = dsns[cfg.workload.kind]
    reference, candidate = PAIRS[pair].reference, PAIRS[pair].candidate
    started = time.monotonic()
    before = load_average()
    trace = run_configs(cfg, dsn, [reference, candidate], seconds, seed)
    trace_name = f"power{'.' + tag if tag else ''}.{pair}.{seed}"
    save_trace(trace, trace_name)
    race = race_per_transaction(trace, ["original", "candidate"], [reference, candidate],
                                level=cfg.final.level, seed=seed)
    result = race.comparisons["candidate"]
    return {"pair": pair, "seed": seed, "winner": race.winner,
            "claimed": race.winner == "candidate", "interval": interval_dict(result.interval),
            "anytime": interval_dict(result.anytime), "half_width": result.half_width,
            "transactions": list(result.transactions), "slices": result.slices,
            "errors": trace.errors, "trace": trace_name, "seconds": seconds,
            "wall_s": time.monotonic() - started,
            "load_average_start": before, "load_average": load_average()}


def parse_configs(text: str) -> list[dict[str, str]]:
    """``work_mem=4MB;work_mem=64kB,jit=off`` → configurations (``-``: the defaults, {})."""
    return [{} if item == "-" else dict(kv.split("=", 1) for kv in item.split(","))
            for item in text.split(";") if item]


def scout(cfg: TunerConfig, dsn: str, configs: list[dict[str, str]], seconds: float,
          seed: int) -> dict[str, Any]:
    """Every scouted configuration against the first, overall and per template. (Name the
    knobs in the first too: pgbench's latency is a client's cycle, so a variant with more
    ``SET LOCAL`` lines pays their round trips.)"""
    trace = run_configs(cfg, dsn, configs, seconds, seed)
    out: dict[str, Any] = {"seconds": seconds, "transactions": len(trace),
                           "errors": trace.errors, "configs": []}
    for k in range(1, len(configs)):
        r = compare(trace, 0, k, seed=seed)
        out["configs"].append({
            "config": configs[k], "speedup": interval_dict(r.interval),
            "templates": {Path(trace.templates[t.template]).stem: round(t.speedup, 3)
                          for t in r.templates},
            "weights": {Path(trace.templates[t.template]).stem: round(t.weight, 3)
                        for t in r.templates}})
        logger.info("scout %s: %s", configs[k], r.text())
    return out


def exposure_speedup(a: Trace, b: Trace, streams: Mapping[str, int]) -> float | None:
    """B's work-weighted speedup over A from one window each, for closed-loop streams whose
    queries take seconds: template t's mean latency is its streams' busy time over its
    completions (``streams_t × window / completions_t``), so a query cut off at the window's
    end counts as exposure instead of vanishing (the finished queries' mean would be biased
    low, more so for the slower configuration)."""
    def mean(trace: Trace, name: str) -> float | None:
        if name not in trace.templates:
            return None
        done = int(((trace.template == trace.templates.index(name)) & trace.ok).sum())
        return streams[name] * trace.seconds / done if done else None

    work = ratio = 0.0
    for name in streams:
        ma, mb = mean(a, name), mean(b, name)
        if ma is not None and mb is not None:
            # A's time share of template t is its share of the streams (all always busy)
            work += streams[name]
            ratio += streams[name] * mb / ma
    return work / ratio if ratio > 0 else None


def truth(dsns: dict[str, str], pair: str, limit: int, rounds: int, window_s: float,
          seed: int) -> dict[str, Any]:
    """The pair's ground truth from interleaved whole-server window rounds."""
    cfg = config_for(PAIRS[pair].workload, limit, window_s, seed)
    dsn = dsns[cfg.workload.kind]
    reference, candidate = PAIRS[pair].reference, PAIRS[pair].candidate

    def run(configs: list[dict[str, str]], seconds: float, s: int) -> Trace:
        return run_configs(cfg, dsn, configs, seconds, s)

    streams = (dict(parse_mix(cfg.workload.mix))
               if cfg.workload.kind == "tpch" and cfg.workload.mix else None)
    windows, interval = window_rounds(
        run, dsn, reference, candidate, rounds=rounds, window_s=window_s, seed=seed,
        set_local=cfg.workload.kind != "tpch",
        speedup=(lambda a, b: exposure_speedup(a, b, streams)) if streams else None)
    return {"pair": pair, "workload": PAIRS[pair].workload, "reference": reference,
            "candidate": candidate,
            "rounds": windows, "window": interval_dict(interval), "window_s": window_s}


def reanalyse(tags: Sequence[str]) -> list[dict[str, Any]]:
    """The race runs of ``evidence_power.race.<tag>.json`` re-decided from their kept traces
    by the current rule, each with the old rule's interval (``student-t``) beside it."""
    runs: list[dict[str, Any]] = []
    for tag in tags:
        saved = json.loads((RESULTS / f"evidence_power.race.{tag}.json").read_text())
        for r in saved["runs"]:
            trace = load_trace(TRACES / f"{r['trace']}.npz")
            pair = PAIRS[r["pair"]]
            race = race_per_transaction(trace, ["original", "candidate"],
                                        [pair.reference, pair.candidate], seed=r["seed"])
            result = race.comparisons["candidate"]
            old = compare(trace, 0, 1, seed=r["seed"], interval="student-t").interval
            runs.append({**r, "tag": tag, "winner": race.winner,
                         "claimed": race.winner == "candidate",
                         "interval": interval_dict(result.interval),
                         "half_width": result.half_width, "old_interval": interval_dict(old),
                         "old_claimed": old.above_one,
                         "per_arm": [int(x) for x in result.transactions]})
    return runs


def race_schedule(pairs: list[str], runs: dict[str, int], seed: int) -> list[str]:
    """Cycles of one run per pair still owed, each cycle in a seeded random order."""
    owed, rng, order = dict(runs), random.Random(seed), []
    while any(owed.values()):
        cycle = [p for p in pairs if owed[p] > 0]
        rng.shuffle(cycle)
        for p in cycle:
            owed[p] -= 1
        order += cycle
    return order


def tally(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per pair: runs, claims (candidate recommended, interval above 1) and their exact CI."""
    out: dict[str, dict[str, Any]] = {}
    for pair in dict.fromkeys(r["pair"] for r in runs):
        mine = [r for r in runs if r["pair"] == pair]
        k = sum(1 for r in mine if r["claimed"])
        low, high = clopper_pearson(k, len(mine))
        # what the anytime-valid interval (the confidence sequence over slices) would claim
        k_any = sum(1 for r in mine if r.get("anytime") and r["anytime"]["low"] > 1.0)
        k_old = sum(1 for r in mine if r.get("old_claimed"))
        widths = sorted(r["half_width"] for r in mine)
        logs = [math.log(r["interval"]["ratio"]) for r in mine]
        pooled = interval_from_logs(logs, level=0.95, method="t")
        out[pair] = {"runs": len(mine), "claimed": k, "rate": k / len(mine),
                     "ci": [low, high], "median_half_width": widths[len(widths) // 2],
                     "anytime_claimed": k_any, "old_claimed": k_old,
                     "old_ci": list(clopper_pearson(k_old, len(mine))),
                     "anytime_ci": list(clopper_pearson(k_any, len(mine))),
                     # the runs' ratios pooled: the per-transaction estimand, to set beside
                     # the windows' ground truth (a t interval over runs)
                     "pooled": interval_dict(pooled)}
    return out


def _old_rule_lines(data: dict[str, Any]) -> list[str]:
    """The pooled runs' claims under the old interval (Student's quantile on slices − 1 df)."""
    tags = ", ".join(dict.fromkeys(r["tag"] for r in data["runs"]))
    old = "; ".join(f"{pair} {t['old_claimed']} of {t['runs']} ({100 * t['old_ci'][0]:.0f}–"
                    f"{100 * t['old_ci'][1]:.0f} %)" for pair, t in tally(data["runs"]).items())
    return ["", f"Re-decided from the kept traces of the race tags {tags} by the current rule "
            f"(kurtosis-adjusted degrees of freedom). The same runs under the old rule (slices "
            f"− 1 degrees of freedom): {old}."]


def markdown(data: dict[str, Any]) -> str:
    step = data["step"]
    extra = ((f"Workload `{data['workload']}`" if step == "scout" else "TPC-H streams")
             + f" (tpch: SF 0.1; scripts: benchmarks/evidence/power_scripts/ on pgbench's "
             f"tables at scale {PGBENCH_SCALE}, {CLIENTS} clients) on the embedded cluster in a "
             f"{data['memory_limit_bytes'] / MB:.0f} MB memory cgroup; step `{step}`. "
             "Pairs (reference = the original → candidate): "
             + "; ".join(f"{p}: `{PAIRS[p].workload}` {PAIRS[p].reference} → "
                         f"{PAIRS[p].candidate}" for p in data["pairs"]) + ".")
    lines = [header(f"Power of the per-transaction final race: {step} (issue 27 Evidence)",
                    data["command"], data["machine"], extra), ""]
    if step == "scout":
        s = data.get("scout") or {}
        lines += [f"One per-transaction run of {s.get('seconds', 0):g} s, "
                  f"{s.get('transactions', 0):,} queries, {s.get('errors', 0)} errors.", "",
                  "| configuration | speedup over defaults (95 % CI) | per template |",
                  "|---|---|---|"]
        for c in s.get("configs", []):
            lines.append(f"| {c['config']} | {fmt_iv(c['speedup'])} | "
                         + ", ".join(f"{t} {v:.2f} (weight {c['weights'][t]:.2f})"
                                     for t, v in c["templates"].items()) + " |")
    if step == "truth":
        lines += ["| pair | candidate / reference in windows (95 % t CI) | rounds | window s |",
                  "|---|---|---:|---:|"]
        for t in data.get("truth", []):
            lines.append(f"| {t['pair']} | {fmt_iv(t['window'])} | {len(t['rounds'])} | "
                         f"{t['window_s']:g} |")
    if step in ("race", "pool"):
        lines += ["| pair | runs | candidate recommended, interval above 1 | rate (95 % "
                  "Clopper-Pearson) | median half-width | runs' ratios pooled (95 % t) | "
                  "anytime interval above 1 (95 % CP) |", "|---|---:|---:|---|---:|---|---|"]
        for pair, t in tally(data["runs"]).items():
            lines.append(f"| {pair} | {t['runs']} | {t['claimed']} | {100 * t['rate']:.0f} % "
                         f"({100 * t['ci'][0]:.0f}–{100 * t['ci'][1]:.0f} %) | "
                         f"±{100 * t['median_half_width']:.1f} % | {fmt_iv(t['pooled'])} | "
                         f"{t['anytime_claimed']} ({100 * t['anytime_ci'][0]:.0f}–"
                         f"{100 * t['anytime_ci'][1]:.0f} %) |")
        lines += _old_rule_lines(data) if step == "pool" else []
        lines += ["", "| # | pair | seed | candidate / original (95 % CI) | anytime (95 %) | "
                  "queries | recommended | load avg start → end |",
                  "|---:|---|---:|---|---|---:|---|---|"]
        for i, r in enumerate(data["runs"], 1):
            lines.append(f"| {i} | {r['pair']} | {r['seed']} | {fmt_iv(r['interval'])} | "
                         f"{fmt_iv(r['anytime'])} | {sum(r['transactions']):,} | "
                         f"{r['winner'] or 'original'} | {r['load_average_start']} → "
                         f"{r['load_average']} |")
    lines += ["", f"Wall {data.get('wall_s', 0):.0f} s; load average at the end "
                  f"{data.get('load_average_end')}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("step", choices=("scout", "truth", "race", "pool"))
    parser.add_argument("--pairs", default="", help="default: every pair (truth: but aa)")
    parser.add_argument("--workload", default=f"tpch:{MIX}",
                        help="tpch:MIX or scripts:NAME@WEIGHT,... (benchmarks/evidence/"
                             "power_scripts/NAME.pgbench on pgbench's tables)")
    parser.add_argument("--memory-limit-mb", type=int, default=320)
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="per-transaction run (race: final.max_seconds; scout)")
    parser.add_argument("--runs", default="other=10",
                        help="race runs per pair (PAIR=N,...; other: the rest)")
    parser.add_argument("--rounds", type=int, default=20, help="truth: window rounds")
    parser.add_argument("--window-s", type=float, default=10.0, help="truth: window length")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--configs", default=SCOUT, help="scout: k=v,...;k=v,... (the first "
                        "is the reference; -: the defaults)")
    parser.add_argument("--tag", default="")
    parser.add_argument("--tags", default="", help="pool: the race tags to re-decide")
    parser.add_argument("--state-dir", type=Path, default=STATE_DIR)
    args = parser.parse_args(argv)
    pairs = [p for p in args.pairs.split(",") if p] or [
        p for p in PAIRS if not (args.step == "truth" and p.startswith("aa"))]
    limit = args.memory_limit_mb * MB
    command = " ".join(["python -m benchmarks.evidence power",
                        *(sys.argv[2:] if argv is None else argv)])
    data: dict[str, Any] = {"machine": machine(), "command": command, "step": args.step,
                            "workload": args.workload, "memory_limit_bytes": limit,
                            "pairs": pairs,
                            "seconds": args.seconds, "runs": [], "truth": []}
    name = f"evidence_power.{args.step}" + (f".{args.tag}" if args.tag else "")
    if args.step == "pool":
        data["runs"] = reanalyse([t for t in args.tags.split(",") if t])
        data["pairs"] = list(dict.fromkeys(r["pair"] for r in data["runs"]))
        data["wall_s"], data["load_average_end"] = 0.0, load_average()
        write_results(name, data, markdown(data))
        return 0
    cfg = config_for(args.workload, limit, args.seconds, args.seed)
    t0 = time.monotonic()
    target = open_memory_bound(config_for(f"tpch:{MIX}", limit, 60, 1), args.state_dir)
    dsns = {"tpch": target.dsn, "scripts": pgbench_dsn(target, PGBENCH_SCALE)}

    def save() -> None:
        data["wall_s"], data["load_average_end"] = time.monotonic() - t0, load_average()
        write_results(name, data, markdown(data))

    try:
        if args.step == "scout":
            data["scout"] = scout(cfg, dsns[cfg.workload.kind], parse_configs(args.configs),
                                  args.seconds, args.seed)
        elif args.step == "truth":
            for k, pair in enumerate(pairs):
                data["truth"].append(truth(dsns, pair, limit, args.rounds, args.window_s,
                                           seed=args.seed + 1000 * k))
                save()
        else:
            wanted = dict(kv.split("=") for kv in args.runs.split(","))
            runs = {p: int(wanted[p] if p in wanted else wanted.get("other", "10"))
                    for p in pairs}
            for i, pair in enumerate(race_schedule(pairs, runs, args.seed)):
                data["runs"].append(race_once(dsns, pair, limit, args.seconds,
                                            seed=args.seed + i, tag=args.tag))
                save()
    finally:
        target.close()
        save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
