"""Live mode on application-like traffic from a separate process: tuned vs default vs PGTune,
and the guardrail's time to revert.

A private cluster with pg_stat_statements preloaded holds the shop tables of
:mod:`benchmarks.live_traffic`; an independent ``pgbench`` process sends Zipf-skewed range
lookups, order inserts and a reporting query for the whole benchmark. The tuner only observes
it (``workload: {observe: ...}``):

1. **tuning**: a one-pass live run (reload-time knobs only) whose final rounds re-measure the
   original configuration, PGTune's rules and the tuned one interleaved, and apply issue 14's
   decision rule (:mod:`tuner_client.phases.final`): each label's paired ratio to the default
   with its 95 % interval;
2. **guardrail**: a configuration that makes the lookups sequential scans is applied again and
   again; each time the guardrail restores the last good one, and the time from the bad
   configuration taking effect to the good one being back is recorded (mean with a 95 %
   t-interval);
3. **nothing lost**: pgbench's count of failed transactions over the whole benchmark, and
   the orders it inserted against the rows in the table.

Run: ``flock /tmp/harmony-bench.lock python -m benchmarks.evidence live [--quick]``; writes
``benchmarks/results/evidence_live[.quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg
from scipy import stats as scistats

from benchmarks.evidence.common import fmt, header, load_average, machine, ratio, write_results
from benchmarks.live_traffic import BENCH_ROWS, BENCH_WEIGHTS, error_lines, shop_with_traffic
from tuner_client.api.client import connect
from tuner_client.config import GuardConfig, MeasureConfig, tuner_config_from_dict
from tuner_client.flows import Tuner
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import LiveWatch, Measurer, ServerAccess
from tuner_client.measurer.guardrails import Guardrail
from workloads.observe import ObservedWorkload

logger = logging.getLogger(__name__)

ROWS, WEIGHTS = BENCH_ROWS, BENCH_WEIGHTS
SLOW = {"enable_indexscan": "off", "enable_bitmapscan": "off"}


def tuner_dict(dsn: str, data_dir: Path, quick: bool) -> dict[str, Any]:
    return {
        "name": "live-bench", "seed": 7,
        "database": {"dsn": dsn, "controller": {"kind": "pg_ctl",
                                                "options": {"data_dir": str(data_dir)}}},
        "workload": {"observe": {"min_calls": 20, "poll_s": 0.5}},
        "measure": {"warmup_s": 1.0 if quick else 2.0, "samples": 1 if quick else 2,
                    "seconds": 2.0 if quick else 3.0},
        "budget": {"ram": "2GB", "os_reserved": "512MB", "connections": 20},
        "online": {"knobs": {
            "work_mem": {"min": "1MB", "max": "64MB", "step": "1MB"},
            "random_page_cost": {"min": 1.0, "max": 8.0, "step": 0.5},
            "effective_cache_size": {"min": "64MB", "max": "1GB", "step": "64MB"},
            "jit": {"values": ["off", "on"]}},
            "evaluations": 4 if quick else 10},
        "final": {"rounds": 2 if quick else 4, "max_rounds": 3 if quick else 6,
                  "candidates": 1 if quick else 2, "baselines": ["pgtune"]},
    }


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and its two-sided t-interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = scistats.t.ppf(0.5 + level / 2, len(values) - 1) * statistics.stdev(values) \
        / math.sqrt(len(values))
    return mean, mean - half, mean + half


def guardrail_trips(dsn: str, trips: int) -> list[dict[str, Any]]:
    """Apply the slow configuration ``trips`` times; each time the guardrail reverts it."""
    with psycopg.connect(dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    guard = Guardrail(GuardConfig())
    measurer = Measurer(ServerAccess(dsn, catalog), ObservedWorkload(dsn, poll_s=0.25),
                        MeasureConfig(warmup_s=3.0, samples=2, queries=None, seconds=3.0,
                                      estimator="latency"), live=LiveWatch(guard))
    measurer.in_force = measurer.current_settings(list(SLOW))
    original = dict(measurer.in_force)
    out = []
    try:
        measurer.measure("reference", {}, original, samples=1)
        for i in range(trips):
            started = time.monotonic()
            record = measurer.measure(f"slow-{i}", {}, SLOW, samples=1)
            wall = time.monotonic() - started
            trip = guard.trips[-1] if len(guard.trips) == i + 1 else None
            out.append({"failure": record.failure, "wall_s": wall,
                        "tripped": trip is not None,
                        "detected_after_s": trip.detected_after_s if trip else None,
                        "revert_s": trip.revert_s if trip else None,
                        "kind": trip.kind if trip else None,
                        "restored": measurer.in_force == original})
            time.sleep(1.0)  # the good configuration serves a moment before the next trip
    finally:
        measurer.restore(original)
        measurer.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.evidence live")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trips", type=int, default=None)
    args = parser.parse_args(argv)
    quick = args.quick
    trips = args.trips or (5 if quick else 15)
    mach = machine()
    load_before = load_average()
    started = time.monotonic()
    with shop_with_traffic("harmony-bench-live-", rows=ROWS, weights=WEIGHTS) as shop:
        config = tuner_config_from_dict(tuner_dict(shop.dsn, shop.cluster.data_dir, quick),
                                        source="benchmarks/evidence/live.py")
        tuner = Tuner(config, client=connect(None), target=shop.target(), run_id="bench")
        result = tuner.run()
        summary = result.to_dict()
        tuning_s = time.monotonic() - started
        revert = guardrail_trips(shop.dsn, trips)
        pgbench_output = shop.traffic.stop()
        with psycopg.connect(shop.dsn) as conn:
            row = conn.execute("SELECT count(*) FROM orders").fetchone()
        orders = int(row[0]) if row else 0
    load_after = load_average()
    decision = summary["decision"] or {}
    intervals = decision.get("intervals") or {}
    times = [r["detected_after_s"] + r["revert_s"] for r in revert if r["tripped"]]
    reverts = [r["revert_s"] for r in revert if r["tripped"]]
    errors = error_lines(pgbench_output)
    mean, low, high = t_interval(times) if times else (math.nan, math.nan, math.nan)
    data = {"machine": mach, "load_before": load_before, "load_after": load_after,
            "quick": quick, "rows": ROWS, "weights": WEIGHTS,
            "config": tuner_dict("<dsn>", Path("<data_dir>"), quick),
            "tuning_seconds": tuning_s, "result": result.to_dict(),
            "guardrail": {"trips": revert, "revert_mean_s": mean, "ci": [low, high],
                          "tripped": len(times), "attempts": len(revert)},
            "orders_in_table": orders, "pgbench_output": pgbench_output[-4000:],
            "pgbench_errors": errors}
    name = "evidence_live" + (".quick" if quick else "")
    command = ("flock /tmp/harmony-bench.lock python -m benchmarks.evidence live"
               + (" --quick" if quick else ""))
    lines = [header("Live mode: tuned vs default vs PGTune on observed traffic; guardrail "
                    "revert time", command, mach,
                    f"Load average before {load_before}, after {load_after} (other helpers' "
                    f"tests and benchmarks ran beside it). Traffic: pgbench, 2 clients, "
                    f"closed loop, scripts {WEIGHTS} on {ROWS} items (Zipf 1.1 keys), from "
                    f"its own process."),
             "## Tuning (issue 14's decision rule, paired ratios to the original)\n",
             "| label | ratio to default | 95 % interval | rounds |", "|---|---|---|---|"]
    for label, iv in intervals.items():
        if iv is None:
            lines.append(f"| {label} | – | not enough paired rounds | – |")
        else:
            lines.append(f"| {label} | {ratio(iv['ratio'])} | {ratio(iv['low'])}–"
                         f"{ratio(iv['high'])} | {iv['n']} |")
    lines += ["", f"Decision: {decision.get('winner')} kept. Best settings: "
                  f"`{summary['best_settings']}`.", "",
              *[f"- {t}" for t in summary["decisions"]], "",
              f"Guardrail trips during the tuning run: "
              f"{(summary['guardrails'] or {}).get('trips', 0)} "
              f"{(summary['guardrails'] or {}).get('by_kind', {})}.", "",
              "## Guardrail: time from a harmful configuration to the last good one\n",
              f"{len(times)} of {len(revert)} applications of {SLOW} tripped the latency "
              f"guardrail (default margin: 2x the reference's weighted latency). Time from "
              f"the configuration taking effect to the last good one back in force: mean "
              f"{fmt(mean)} s, 95 % t-interval {fmt(low)}–{fmt(high)} s (median "
              f"{fmt(statistics.median(times) if times else None)} s, max "
              f"{fmt(max(times) if times else None)} s); the revert itself (ALTER SYSTEM + "
              f"reload + verification) took {fmt(statistics.median(reverts) if reverts else None)}"
              f" s (median). Poll interval 0.25 s.", "",
              "## Nothing lost\n",
              f"pgbench (its own process, for the whole benchmark, {len(WEIGHTS)} scripts) "
              f"printed {len(errors)} error or aborted-client lines; {orders} orders in the "
              f"table. The server was left with the original configuration after each part."]
    write_results(name, data, "\n".join(lines))
    logger.info("wrote %s", name)
    return 0
