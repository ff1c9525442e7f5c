"""Live mode's search before and after the switchback search (issue 51, item 3): the same
live tuning run twice on traffic the tuner does not drive, once with the search in
whole-server windows (the old route, ``measure.design: windows`` for the search) and once by
switchback (``measure.design: auto``, which now takes switchback for live traffic).

A private cluster with pg_stat_statements preloaded holds the shop tables of
:mod:`benchmarks.live_traffic`; an independent ``pgbench`` process sends Zipf-skewed range
lookups, order inserts and a reporting query for the whole benchmark (2 clients, closed loop).
Each run is the live config of :mod:`benchmarks.evidence.live` (work_mem, random_page_cost,
effective_cache_size, jit; nelder-mead) with the search's evaluations capped so that both runs
fit in 10 minutes. Reported per run: the search's evaluation ratios to their reference (their
spread) and half-widths (switchback: each evaluation's own anytime-valid 95 % interval;
windows: a paired block has none, the ledger's variance from the reference's repeats stands
in), the final race's design and half-width, guardrail trips and the original restored.

Run: ``flock /tmp/harmony-bench.lock python -m benchmarks.switchback_search`` (``--tag default
--per-transaction-s 30 --final-seconds 120``: the product's run lengths); writes
``benchmarks/results/switchback_search[.tag].{json,md}``. ``--traffic lookup`` sends the
shop's lookups alone (one statement), ``--traffic sysbench`` sysbench's ``oltp_read_write``
from 4 threads instead of the shop (:mod:`benchmarks.live_sysbench`, the issue's held-out live
traffic), ``--designs auto`` runs only the default route.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from pathlib import Path
from typing import Any

from benchmarks.evidence.common import header, load_average, machine, ratio, spread, write_results
from benchmarks.evidence.live import tuner_dict as live_dict
from benchmarks.live_sysbench import sysbench_with_traffic
from benchmarks.live_traffic import (
    BENCH_ROWS,
    BENCH_WEIGHTS,
    Shop,
    error_lines,
    shop_with_traffic,
)
from tuner_client.api.client import connect
from tuner_client.config import tuner_config_from_dict
from tuner_client.flows import Tuner

logger = logging.getLogger(__name__)

ROWS, WEIGHTS = BENCH_ROWS, BENCH_WEIGHTS
#: ``--traffic``: the shop's scripts and weights
TRAFFIC: dict[str, dict[str, int] | None] = {"shop": WEIGHTS, "lookup": {"lookup": 1},
                                             "sysbench": None}
COMMAND = "flock /tmp/harmony-bench.lock python -m benchmarks.switchback_search"


def tuner_dict(dsn: str, data_dir: Path, design: str, evaluations: int,
               per_transaction_s: float = 20.0, final_s: float = 60.0) -> dict[str, Any]:
    """The live config of :mod:`benchmarks.evidence.live` (not quick), ``measure.design``
    ``design``, the search capped at ``evaluations``, a run of one candidate
    ``per_transaction_s`` long, the final race at ``final_s``."""
    live = live_dict(dsn, data_dir, quick=False)
    return {**live, "name": f"switchback-search-{design}",
            "measure": {**live["measure"], "design": design,
                        "per_transaction_s": per_transaction_s},
            "online": {**live["online"], "evaluations": evaluations},
            "final": {"candidates": 2, "baselines": ["pgtune"], "max_seconds": final_s}}


def half_width(low: float | None, high: float | None) -> float | None:
    """Half an interval's width on the log scale (0.05: ±5 %); None when unbounded."""
    if low is None or high is None or not 0 < low <= high < math.inf:
        return None
    return 0.5 * (math.log(high) - math.log(low))


def run_once(shop: Shop, design: str, args: argparse.Namespace) -> dict[str, Any]:
    """One live tuning run on ``shop``; what the search and the final race measured."""
    auto_conf = shop.cluster.data_dir / "postgresql.auto.conf"
    before = auto_conf.read_text()
    target = shop.target()
    config = tuner_config_from_dict(
        tuner_dict(shop.dsn, shop.cluster.data_dir, design, args.evaluations,
                   args.per_transaction_s, args.final_seconds),
        source="benchmarks/switchback_search.py")
    started = time.monotonic()
    tuner = Tuner(config, client=connect(None), target=target, run_id=f"sbs-{design}")
    result = tuner.run()
    seconds = time.monotonic() - started
    summary: dict[str, Any] = dict(result.to_dict())
    search = []
    ledger = tuner.state.ledger
    for r in tuner.records:
        if not r.session.endswith("-online"):
            continue
        hw = half_width(*r.interval) if r.interval is not None else None
        standing = ledger.standing(r.in_force) if ledger is not None else None
        sd = math.sqrt(standing.variance) if standing is not None and standing.variance \
            is not None and math.isfinite(standing.variance) else None
        search.append({"settings": r.settings, "design": r.design, "ratio": r.ratio,
                       "interval": list(r.interval) if r.interval else None,
                       "half_width": hw,
                       "ledger_half_width": 1.96 * sd if sd is not None else None,
                       "failure": r.failure})
    decision = summary.get("decision") or {}
    intervals = decision.get("intervals") or {}
    final = {label: {"ratio": iv["ratio"], "low": iv["low"], "high": iv["high"],
                     "half_width": half_width(iv["low"], iv["high"]), "n": iv.get("n")}
             for label, iv in intervals.items() if iv is not None}
    measured = [d for d in summary["decisions"] if "evaluations measured by" in d]
    return {"design_requested": design, "seconds": seconds, "search": search,
            "search_design": measured, "final_design": decision.get("design"),
            "final": final, "winner": decision.get("winner"),
            "guardrail_trips": (summary.get("guardrails") or {}).get("trips", 0),
            "restored": auto_conf.read_text() == before,
            "decisions": summary["decisions"]}


def traffic_text(weights: dict[str, int] | None) -> str:
    """The traffic in words."""
    if weights is None:
        return ("sysbench oltp_read_write, 4 threads, closed loop, 4 tables of 100,000 rows "
                "(its 18 statements a transaction: point and range selects, updates, a delete "
                "and an insert)")
    return (f"pgbench, 2 clients, closed loop, scripts {weights} on {ROWS} items "
            "(Zipf 1.1 keys)")


def pct(x: float | None) -> str:
    """A log half-width as ``±5.0 %``."""
    return "–" if x is None else f"±{100 * x:.1f} %"


def _row(run: dict[str, Any]) -> str:
    ratios = [s["ratio"] for s in run["search"] if s["ratio"] is not None]
    own = [s["half_width"] for s in run["search"] if s["half_width"] is not None]
    ledger = [s["ledger_half_width"] for s in run["search"]
              if s["ledger_half_width"] is not None]
    r, h, hl = spread(ratios), spread(own), spread(ledger)
    final = [v["half_width"] for v in run["final"].values() if v["half_width"] is not None]
    return (f"| {run['design_requested']} | {len(run['search'])} "
            f"({sum(1 for s in run['search'] if s['failure'])} failed) | "
            f"{ratio(r['min'])}–{ratio(r['max'])} (median {ratio(r['median'])}) | "
            f"{pct(h['median'])} | {pct(hl['median'])} | {run['final_design']} "
            f"{pct(min(final) if final else None)}–{pct(max(final) if final else None)} | "
            f"{run['winner'] or 'the original'} | {run['guardrail_trips']} | {run['restored']} | "
            f"{run['seconds']:.0f} s |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.switchback_search")
    parser.add_argument("--evaluations", type=int, default=8)
    parser.add_argument("--per-transaction-s", type=float, default=20.0,
                        help="measure.per_transaction_s (the product's default: 30)")
    parser.add_argument("--final-seconds", type=float, default=60.0,
                        help="final.max_seconds (the product's default: 120)")
    parser.add_argument("--tag", default="", help="results/switchback_search.<tag>.md")
    parser.add_argument("--traffic", choices=sorted(TRAFFIC), default="shop",
                        help="the shop's three scripts, or its lookups alone (one statement: "
                             "what a live race reads when the traffic's mix does not move)")
    parser.add_argument("--designs", default="windows,auto",
                        help="the search designs to run, in order (comma-separated)")
    args = parser.parse_args(argv)
    weights = TRAFFIC[args.traffic]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    mach = machine()
    load_before = load_average()
    runs = []
    held = (sysbench_with_traffic("harmony-bench-sbs-") if weights is None else
            shop_with_traffic("harmony-bench-sbs-", rows=ROWS, weights=weights))
    with held as shop:
        for design in args.designs.split(","):
            runs.append(run_once(shop, design, args))
        pgbench = shop.traffic.stop()
    load_after = load_average()
    errors = error_lines(pgbench)
    data = {"machine": mach, "load_before": load_before, "load_after": load_after,
            "rows": ROWS, "weights": weights, "evaluations": args.evaluations,
            "config": tuner_dict("<dsn>", Path("<data_dir>"), "<design>", args.evaluations,
                                 args.per_transaction_s, args.final_seconds),
            "runs": runs, "pgbench_errors": errors}
    command = COMMAND + "".join(
        f" {flag} {value}" for flag, value, default in (
            ("--evaluations", args.evaluations, 8),
            ("--per-transaction-s", args.per_transaction_s, 20.0),
            ("--final-seconds", args.final_seconds, 60.0), ("--tag", args.tag, ""),
            ("--traffic", args.traffic, "shop"), ("--designs", args.designs, "windows,auto"))
        if value != default)
    lines = [header("Live mode's search: whole-server windows vs switchback", command, mach,
                    f"Load average before {load_before}, after {load_after} (other helpers' "
                    f"tests ran beside it). Traffic: {traffic_text(weights)}, from its own "
                    f"process, for every run; the tuner only observes it. PostgreSQL "
                    f"{mach.get('postgres', '')}."),
             "| search design | evaluations | ratio to reference: spread | median half-width "
             "(own 95 % interval) | median half-width (ledger) | final race: design, "
             "half-widths | kept | guardrail trips | original restored | wall |",
             "|---|---|---|---|---|---|---|---|---|---|",
             *(_row(run) for run in runs), "",
             "Half-widths on the log scale (±5 %: the interval is ratio ×/÷ 1.05). A window "
             "evaluation has no interval of its own; the ledger's stands in (its variance from "
             "the reference's repeats around the blocks).", "",
             f"The traffic printed {len(errors)} error or aborted-client lines.", ""]
    for run in runs:
        lines += [f"## {run['design_requested']}", "",
                  *[f"- {d}" for d in run["search_design"]],
                  *[f"- {s['settings']}: {s['design']} {ratio(s['ratio'])}"
                    + (f" ({ratio(s['interval'][0])}–{ratio(s['interval'][1])})"
                       if s["interval"] else "")
                    + (f" failed: {s['failure']}" if s["failure"] else "")
                    for s in run["search"]], ""]
    write_results("switchback_search" + (f".{args.tag}" if args.tag else ""), data,
                  "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
