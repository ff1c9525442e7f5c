"""Switchback slices, measured (issue 27 item 3): the carry-over after ``ALTER SYSTEM`` +
reload, the A/A half-width, and a known-effect comparison by switchback against whole-server
windows of the same length.

Workload: pgbench's TPC-B-like script (4 clients, scale 5) on a private embedded cluster,
timed per transaction (:class:`workloads.per_transaction.PgbenchAssignment` over one
configuration, the server's). Knob: ``fsync`` (context sighup: a reload, never SET), whose
effect on a commit-bound workload is known in sign: ``off`` skips the WAL flush, so it is
faster. The cluster is a throwaway; the server's ``postgresql.auto.conf`` is restored after
every switchback anyway (:class:`tuner_client.switchback.ConfigurationSwitch`).

1. **Carry-over**: ``blocks`` of on/off in 3-s slices; per 0.25-s bin after a switch, the speed
   against each configuration's steady speed (:mod:`tuner_client.stats.switchback_carry`).
2. **A/A**: on/on switchback in ``measure.slice_s``-long slices; the 95 % confidence sequence's
   half-width after the run (and Student's fixed-n interval over blocks for comparison).
3. **Known effect**: on/off by switchback, then the same seconds as interleaved window rounds
   (on off, off on, ...; per round the work-weighted speedup of its two windows, a t interval
   and the confidence sequence over rounds).

Run: ``python -m benchmarks.evidence switchback [--quick] [--tag T]``; writes
``benchmarks/results/evidence_switchback[.quick][.T].{json,md}``.
"""

from __future__ import annotations

import argparse
import logging
import math
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from benchmarks.evidence.common import header, load_average, machine, write_results
from tuner_client.config.defaults import DEFAULT_SLICE_S
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.stats.paired import interval_from_logs
from tuner_client.stats.switchback import (
    block_log_speedups,
    compare,
    totals_from_transactions,
)
from tuner_client.stats.switchback_carry import carry_over
from tuner_client.switchback import ConfigurationSwitch, run_driven, settle_margin
from workloads.per_transaction import PgbenchAssignment, Trace, builtin_template
from workloads.pgbench import find_pgbench

logger = logging.getLogger(__name__)

ON, OFF = {"fsync": "on"}, {"fsync": "off"}
CLIENTS, SCALE = 4, 5


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def _driver(dsn: str, seed: int) -> PgbenchAssignment:
    return PgbenchAssignment(dsn, [{}], [builtin_template("tpcb-like")], clients=CLIENTS,
                             variables={"scale": SCALE}, seed=seed)


def _interval(iv: Any) -> dict[str, Any] | None:
    if iv is None:
        return None
    return {"ratio": iv.ratio, "low": iv.low, "high": iv.high if math.isfinite(iv.high) else None,
            "n": iv.n, "method": iv.method}


def switchback(dsn: str, configs: list[dict[str, str]], *, blocks: int, slice_s: float,
               seed: int) -> dict[str, Any]:
    """One driven switchback; its comparison, drops, switch time and the raw spans/trace."""
    before = _uptime()
    with psycopg.connect(dsn, autocommit=True) as conn:
        run = run_driven(conn, KnobCatalog.from_connection(conn), configs, _driver(dsn, seed),
                         blocks=blocks, slice_s=slice_s, seed=seed)
    trace = run.trace
    start = trace.origin + trace.start
    totals = totals_from_transactions(list(run.spans), trace.template, start, trace.latency,
                                      trace.ok, settle_s=settle_margin(slice_s))
    result = compare(totals, 0, 1)
    logs = block_log_speedups(totals, 0, 1)
    fixed = interval_from_logs(logs.tolist(), level=0.95, method="t")
    logger.info("switchback %s vs %s: %s", configs[0], configs[1], result.text())
    return {"configs": configs, "blocks": blocks, "slice_s": slice_s,
            "interval": _interval(result.interval), "half_width": result.half_width,
            "fixed_n_t": _interval(fixed),
            "fixed_n_half_width": (0.5 * math.log(fixed.high / fixed.low) if fixed else None),
            "observations": list(result.observations), "dropped": dict(totals.dropped),
            "switch_ms": run.switch_ms, "uptime_before": before, "uptime_after": _uptime(),
            "_run": (run.spans, trace, start)}


def carry(dsn: str, *, blocks: int, seed: int) -> dict[str, Any]:
    """The settle profile of on/off switches in 3-s slices."""
    out = switchback(dsn, [ON, OFF], blocks=blocks, slice_s=3.0, seed=seed)
    spans, trace, start = out.pop("_run")
    found = carry_over(list(spans), trace.template, start, trace.latency, trace.ok, bin_s=0.25)
    for row in found.rows():
        logger.info("carry-over %s", row)
    out.update({"settle_s": found.settle_s, "effect_log": found.effect,
                "profile": [{"after_s": t, "toward_previous": math.exp(m) - 1.0,
                             "half_width": 1.96 * se, "slices": n}
                            for t, m, se, n in found.profile]})
    return out


def _window(dsn: str, config: dict[str, str], seconds: int, seed: int) -> Trace:
    with psycopg.connect(dsn, autocommit=True) as conn, \
            ConfigurationSwitch(conn, KnobCatalog.from_connection(conn), [config, ON]) as sw:
        sw.apply(0)
        return _driver(dsn, seed).run(seconds)


def windows(dsn: str, *, rounds: int, window_s: int, seed: int) -> dict[str, Any]:
    """Interleaved on/off window rounds; per round B's (off) speed over A's (on)."""
    before = _uptime()
    speeds = []
    for r in range(rounds):
        order = (("A", ON), ("B", OFF)) if r % 2 == 0 else (("B", OFF), ("A", ON))
        got = {label: _window(dsn, config, window_s, seed + 2 * r + i)
               for i, (label, config) in enumerate(order)}
        # the whole window's closed-loop speed: transactions per busy client-second
        rate = {k: float(t.ok.sum()) / float(t.latency[t.ok].sum()) for k, t in got.items()}
        speeds.append(rate["B"] / rate["A"])
        logger.info("window round %d: off/on %.3f (load %s)", r + 1, speeds[-1], load_average())
    logs = [math.log(s) for s in speeds]
    return {"rounds": rounds, "window_s": window_s, "speedups": speeds,
            "t": _interval(interval_from_logs(logs, level=0.95, method="t")),
            "anytime": _interval(interval_from_logs(logs, level=0.95, method="anytime")),
            "uptime_before": before, "uptime_after": _uptime()}


def _markdown(data: dict[str, Any], command: str) -> str:
    def iv(d: dict[str, Any] | None) -> str:
        if not d or d.get("high") is None:
            return "unbounded"
        return f"{d['ratio']:.3f}× ({d['low']:.3f}–{d['high']:.3f}, n={d['n']})"

    c, aa, k, w = data["carry_over"], data["aa"], data["known"], data["windows"]
    lines = [header("Switchback slices: carry-over, A/A, known effect vs windows", command,
                    data["machine"], "\npgbench tpcb-like, 4 clients, scale 5; knob fsync "
                    "(sighup) switched by ALTER SYSTEM + reload.\n"),
             "## Carry-over (on/off, 3-s slices)\n",
             f"Steady effect off/on {math.exp(c['effect_log']):.3f}×; settle time "
             f"**{c['settle_s']:.2f} s**; {c['blocks']} blocks; switch {c['switch_ms']:.1f} ms "
             f"mean; dropped {c['dropped']}.  \n{c['uptime_before']} → {c['uptime_after']}\n",
             "| after switch (s) | toward previous config | ± (95 %) | slices |",
             "|---|---|---|---|"]
    lines += [f"| {p['after_s']:.2f} | {100 * p['toward_previous']:+.1f} % | "
              f"{100 * p['half_width']:.1f} % | {p['slices']} |" for p in c["profile"]]
    lines += ["", "## A/A and known effect\n",
              "| comparison | design | seconds | interval (95 %) | half-width | fixed-n t "
              "| uptime |",
              "|---|---|---|---|---|---|---|",
              f"| on/on (A/A) | switchback {aa['slice_s']:g}-s slices | "
              f"{2 * aa['blocks'] * aa['slice_s']:.0f} | anytime {iv(aa['interval'])} | "
              f"±{100 * aa['half_width']:.1f} % | {iv(aa['fixed_n_t'])} | "
              f"{aa['uptime_before']} |",
              f"| off/on | switchback {k['slice_s']:g}-s slices | "
              f"{2 * k['blocks'] * k['slice_s']:.0f} | anytime {iv(k['interval'])} | "
              f"±{100 * k['half_width']:.1f} % | {iv(k['fixed_n_t'])} | {k['uptime_before']} |",
              f"| off/on | windows {w['window_s']} s × 2 × {w['rounds']} rounds | "
              f"{2 * w['rounds'] * w['window_s']} | anytime {iv(w['anytime'])} | – | "
              f"{iv(w['t'])} | {w['uptime_before']} |", ""]
    return "\n".join(lines)


def _init(cluster: LocalCluster) -> str:
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE pgbench")
    dsn = cluster.dsn_for("pgbench")
    subprocess.run([str(find_pgbench()), "-i", "-q", "-s", str(SCALE), dsn], check=True,
                   capture_output=True)
    return dsn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.evidence switchback")
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--tag", default="")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    scale = 0.5 if args.quick else 1.0
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-switchback-", dir="/tmp"))
    cluster = LocalCluster(state, sync_initdb=False)
    data: dict[str, Any] = {"machine": machine()}
    try:
        cluster.start()
        dsn = _init(cluster)
        data["carry_over"] = carry(dsn, blocks=int(20 * scale), seed=args.seed)
        aa = switchback(dsn, [ON, dict(ON)], blocks=int(30 * scale), slice_s=DEFAULT_SLICE_S,
                        seed=args.seed + 1)
        known = switchback(dsn, [ON, OFF], blocks=int(30 * scale), slice_s=DEFAULT_SLICE_S,
                           seed=args.seed + 2)
        aa.pop("_run"), known.pop("_run")
        data["aa"], data["known"] = aa, known
        seconds = 2 * known["blocks"] * DEFAULT_SLICE_S
        data["windows"] = windows(dsn, rounds=int(12 * scale),
                                  window_s=max(1, round(seconds / (2 * int(12 * scale)))),
                                  seed=args.seed + 3)
    finally:
        cluster.destroy()
        shutil.rmtree(state, ignore_errors=True)
    name = "evidence_switchback" + (".quick" if args.quick else "") + \
        (f".{args.tag}" if args.tag else "")
    command = "python -m benchmarks.evidence switchback" + (" --quick" if args.quick else "")
    write_results(name, data, _markdown(data, command))
    logger.info("wrote benchmarks/results/%s.{json,md}", name)
    return 0 if np.isfinite(data["aa"]["half_width"]) else 1
