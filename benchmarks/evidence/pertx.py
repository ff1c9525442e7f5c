"""Validity of per-transaction assignment, measured: for each knob class, the per-transaction
ratio of two configurations against the whole-server window ratio of the same two, each with
its interval; and the A/A half-width of the per-transaction design after 60 s and 5 min.

Per knob class, configurations A and B differ only in that class's knobs (all session-settable).

* **Per transaction**: one run where every transaction (TPC-H query or pgbench script) draws
  A or B at random and runs under ``SET LOCAL``
  (:mod:`workloads.per_transaction`); B's work-weighted speedup over A with a block-bootstrap
  interval over time slices (:mod:`tuner_client.stats.per_transaction`).
* **Windows**: ``rounds`` interleaved rounds (A B, then B A, ...), each window the whole server
  under one configuration (``ALTER SYSTEM`` + ``pg_reload_conf()``, fresh connections after the
  reload); per round the same work-weighted speedup from its two windows, and a Student t
  interval over rounds on the log scale.
* **Agree?** The difference of the two log-ratios against its 95 % interval (the two
  half-widths combined as independent normal errors): "yes" when the interval holds 0.

Mixes: TPC-H at a small scale on the embedded cluster in a memory cgroup (Python streams) and
pgbench's select-only script (pgbench variants), on the same cluster.

Run: ``flock /tmp/harmony-bench.lock python -m benchmarks.evidence pertx [--quick]
[--mixes tpch,pgbench] [--classes work_mem,jit,...] [--tag T]``; writes
``benchmarks/results/evidence_pertx[.quick][.T].{json,md}`` (rewritten after every class).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from benchmarks.evidence.common import header, load_average, machine, write_results
from benchmarks.evidence.endtoend import MB, cgroup_snapshot, open_memory_bound, tuner_dict
from tuner_client.config import tuner_config_from_dict
from tuner_client.servers.target import Target
from tuner_client.stats.paired import interval_from_logs
from tuner_client.stats.per_transaction import compare, variance_by_template
from workloads.per_transaction import (
    PgbenchAssignment,
    StreamAssignment,
    Trace,
    builtin_template,
    tpch_draws,
)
from workloads.pgbench import PgbenchWorkload

logger = logging.getLogger(__name__)

#: knob class -> (A, B): the two configurations compared
CLASSES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "work_mem": ({"work_mem": "4MB"}, {"work_mem": "32MB"}),
    "random_page_cost": ({"random_page_cost": "4"}, {"random_page_cost": "20"}),
    "jit": ({"jit": "on"}, {"jit": "off"}),
    "max_parallel_workers_per_gather": ({"max_parallel_workers_per_gather": "2"},
                                        {"max_parallel_workers_per_gather": "0"}),
    "enable_hashjoin": ({"enable_hashjoin": "on"}, {"enable_hashjoin": "off"}),
    "enable_indexscan": ({"enable_indexscan": "on"}, {"enable_indexscan": "off"}),
}
DEFAULT_CLASSES = {"tpch": ("work_mem", "random_page_cost", "jit",
                            "max_parallel_workers_per_gather", "enable_hashjoin"),
                   "pgbench": ("work_mem", "enable_indexscan", "max_parallel_workers_per_gather")}
PGBENCH_DB = "pgbench"

#: runs a mix for some seconds with every transaction under one of the configurations
Runner = Callable[[list[dict[str, str]], float, int], Trace]


def _apply(dsn: str, config: Mapping[str, str], knobs: list[str]) -> None:
    """The whole server under ``config`` (knobs of the class it does not name: reset)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for knob in knobs:
            if knob in config:
                conn.execute(sql.SQL("ALTER SYSTEM SET {} TO {}").format(
                    sql.Identifier(knob), sql.Literal(config[knob])))
            else:
                conn.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(knob)))
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.2)  # the postmaster signals the backends; new connections read the file


def _window_speedup(a: Trace, b: Trace) -> float | None:
    """B's work-weighted speedup over A from one window of each (templates seen in both)."""
    names = sorted(set(a.templates) & set(b.templates))
    work = ratio = 0.0
    for name in names:
        ia, ib = a.templates.index(name), b.templates.index(name)
        la = a.latency[(a.template == ia) & a.ok]
        lb = b.latency[(b.template == ib) & b.ok]
        if la.size and lb.size:
            work += la.sum()
            ratio += la.sum() * lb.mean() / la.mean()
    return work / ratio if ratio > 0 else None


def interval_dict(result: Any) -> dict[str, Any] | None:
    if result is None:
        return None
    return {"ratio": result.ratio, "low": result.low, "high": result.high, "n": result.n,
            "method": result.method}


def measure_class(run: Runner, dsn: str, a: dict[str, str], b: dict[str, str], *,
                  pertx_s: float, rounds: int, window_s: float, seed: int) -> dict[str, Any]:
    """The per-transaction and window ratios of B over A, with their intervals."""
    started = time.monotonic()
    trace = run([a, b], pertx_s, seed)
    result = compare(trace, 0, 1, seed=seed)
    out: dict[str, Any] = {
        "a": a, "b": b, "per_transaction": interval_dict(result.interval),
        "anytime": interval_dict(result.anytime), "transactions": list(result.transactions),
        "slices": result.slices, "slice_s": result.slice_s, "errors": trace.errors,
        "templates": [{"template": trace.templates[t.template], "n_a": t.n_reference,
                       "n_b": t.n_candidate, "speedup": t.speedup, "weight": t.weight}
                      for t in result.templates],
        "pertx_wall_s": time.monotonic() - started}
    logger.info("per transaction %s → %s: %s", a, b, result.text())
    windows, win = window_rounds(run, dsn, a, b, rounds=rounds, window_s=window_s, seed=seed)
    out.update({"windows": windows, "window": interval_dict(win),
                "wall_s": time.monotonic() - started})
    out["agree"], out["difference"] = _agreement(result.interval, win)
    return out


def window_rounds(run: Runner, dsn: str, a: dict[str, str], b: dict[str, str], *, rounds: int,
                  window_s: float, seed: int, set_local: bool = False,
                  speedup: Callable[[Trace, Trace], float | None] | None = None
                  ) -> tuple[list[dict[str, Any]], Any]:
    """``rounds`` interleaved window rounds (AB, BA, ...) of the whole server under A and B;
    per round B's work-weighted speedup, and the 95 % t interval over rounds (log scale).
    ``set_local``: every transaction also sets the window's own configuration locally, so the
    windows pay the per-transaction design's ``SET LOCAL`` round trips (pgbench latencies are
    client cycles, which include them). ``speedup``: B's speedup from a window of each
    (default: work-weighted per-template mean latencies of the finished transactions)."""
    knobs = sorted(set(a) | set(b))
    windows: list[dict[str, Any]] = []
    try:
        for r in range(rounds):
            order = ("A", "B") if r % 2 == 0 else ("B", "A")
            got: dict[str, Trace] = {}
            for label in order:
                _apply(dsn, a if label == "A" else b, knobs)
                config = (a if label == "A" else b) if set_local else {}
                got[label] = run([config], window_s, seed + 100 + 2 * r + (label == "B"))
            speed = (speedup or _window_speedup)(got["A"], got["B"])
            windows.append({"round": r + 1, "order": "".join(order), "speedup": speed,
                            "n_a": len(got["A"]), "n_b": len(got["B"]),
                            "load_average": load_average()})
            logger.info("window round %d (%s): B/A %s", r + 1, "".join(order), speed)
    finally:
        _apply(dsn, {}, knobs)
    logs = [math.log(w["speedup"]) for w in windows if w["speedup"]]
    return windows, interval_from_logs(logs, level=0.95, method="t")


def _agreement(pertx: Any, window: Any) -> tuple[bool | None, dict[str, float] | None]:
    """Whether the two log-ratios differ by less than their combined 95 % half-width."""
    if window is None or not math.isfinite(window.high) or window.low <= 0:
        return None, None
    half = [0.5 * (math.log(iv.high) - math.log(iv.low)) for iv in (pertx, window)]
    diff = math.log(pertx.ratio) - math.log(window.ratio)
    combined = math.sqrt(half[0] ** 2 + half[1] ** 2)
    return abs(diff) <= combined, {"ratio": math.exp(diff), "low": math.exp(diff - combined),
                                   "high": math.exp(diff + combined)}


#: where the evidence scripts keep their runs' traces, so a rule can be re-applied to them
TRACES = Path(__file__).resolve().parent.parent / "results" / "traces"


def save_trace(trace: Trace, name: str) -> Path:
    """The trace's arrays as ``benchmarks/results/traces/<name>.npz`` (a few kB a minute)."""
    TRACES.mkdir(parents=True, exist_ok=True)
    path = TRACES / f"{name}.npz"
    np.savez_compressed(path, config=trace.config, template=trace.template, start=trace.start,
                        latency=trace.latency, ok=trace.ok, seconds=trace.seconds,
                        templates=np.array(trace.templates),
                        configurations=np.array([json.dumps(dict(c), sort_keys=True)
                                                 for c in trace.configurations]))
    return path


def load_trace(path: Path) -> Trace:
    """A trace written by :func:`save_trace`."""
    with np.load(path) as z:
        return Trace(tuple(json.loads(c) for c in z["configurations"]),
                     tuple(str(t) for t in z["templates"]), z["config"], z["template"],
                     z["start"], z["latency"], z["ok"], float(z["seconds"]))


def aa_half_widths(run: Runner, seconds: float, seed: int,
                   marks: tuple[float, ...] = (60.0, 300.0),
                   trace_name: str | None = None) -> dict[str, Any]:
    """One A/A per-transaction run of ``seconds``; the interval after each mark (its
    prefix); the trace kept under ``trace_name`` when given."""
    trace = run([{}, {}], seconds, seed)
    if trace_name:
        save_trace(trace, trace_name)
    shares = variance_by_template(trace)
    out: dict[str, Any] = {"seconds": seconds}
    for mark in marks:
        if mark > seconds + 1:
            continue
        keep = trace.start < mark
        prefix = Trace(trace.configurations, trace.templates, trace.config[keep],
                       trace.template[keep], trace.start[keep], trace.latency[keep],
                       trace.ok[keep], mark)
        result = compare(prefix, 0, 1, seed=seed)
        out[f"{mark:g}s"] = {"interval": interval_dict(result.interval),
                             "anytime": interval_dict(result.anytime),
                             "half_width": result.half_width,
                             "transactions": sum(result.transactions)}
        logger.info("A/A after %g s: %s (±%.1f %%)", mark, result.text(),
                    100 * result.half_width)
    # which templates the run's A/A width comes from, with each one's weight and count
    out["templates"] = {trace.templates[t.template]: {
        "weight": t.weight, "queries": [t.n_reference, t.n_candidate],
        "variance_share": shares.get(t.template, 0.0)}
        for t in compare(trace, 0, 1, seed=seed).templates}
    return out


def tpch_runner(dsn: str, mix: str) -> Runner:
    draws = tpch_draws(dsn, mix)
    return lambda configs, seconds, seed: StreamAssignment(dsn, configs, draws,
                                                           seed=seed).run(seconds)


def pgbench_runner(dsn: str, clients: int, scale: int) -> Runner:
    template = builtin_template("select-only")
    return lambda configs, seconds, seed: PgbenchAssignment(
        dsn, configs, [template], clients=clients, variables={"scale": scale},
        seed=seed + 1).run(max(1, round(seconds)))


def pgbench_dsn(target: Target, scale: int) -> str:
    assert target.cluster is not None
    with psycopg.connect(target.cluster.dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            [PGBENCH_DB]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(PGBENCH_DB)))
    dsn = target.cluster.dsn_for(PGBENCH_DB)
    PgbenchWorkload(dsn, scale=scale).start()  # initialises the tables unless present
    return dsn


def fmt_iv(iv: dict[str, Any] | None) -> str:
    if not iv:
        return "–"
    if not math.isfinite(iv["high"]) or iv["low"] <= 0:
        return f"{iv['ratio']:.3f}× (unbounded)"
    return f"{iv['ratio']:.3f}× ({iv['low']:.3f}–{iv['high']:.3f})"


def markdown(data: dict[str, Any]) -> str:
    extra = (f"TPC-H mix `{data['tpch_mix']}` at SF {data['scale']} and pgbench select-only "
             f"(scale {data['pgbench_scale']}, {data['clients']} clients) on the embedded "
             f"cluster in a {data['memory_limit_bytes'] / MB:.0f} MB memory cgroup. Per "
             f"transaction: {data['pertx_s']:g} s, B's work-weighted speedup over A, 95 % "
             f"percentile bootstrap over 20 time slices (anytime: t-mixture confidence "
             f"sequence over the slices). Windows: {data['rounds']} interleaved rounds "
             f"(AB, BA, ...) of {data['window_s']:g} s per configuration, ALTER SYSTEM + "
             f"reload between windows, 95 % t interval over rounds. Agree: the log "
             f"difference's 95 % interval (half-widths combined) holds 0.")
    lines = [header("Per-transaction vs window ratios, per knob class (issue 27 item 2)",
                    data["command"], data["machine"], extra), "",
             "| mix | knob class | A → B | per transaction B/A (95 % CI) | transactions | "
             "anytime (95 %) | windows B/A (95 % CI) | rounds | per-tx / window (95 %) | "
             "agree? |", "|---|---|---|---|---:|---|---|---:|---|---|"]
    for mix, classes in data["results"].items():
        for name, r in classes.items():
            if "error" in r:
                lines.append(f"| {mix} | {name} | – | error: {r['error']} | | | | | | |")
                continue
            change = ", ".join(f"{k} {r['a'].get(k, 'default')}→{r['b'].get(k, 'default')}"
                               for k in sorted(set(r["a"]) | set(r["b"])))
            agree = {True: "yes", False: "**no**", None: "–"}[r.get("agree")]
            lines.append(f"| {mix} | {name} | {change} | {fmt_iv(r['per_transaction'])} | "
                         f"{sum(r['transactions']):,} | {fmt_iv(r['anytime'])} | "
                         f"{fmt_iv(r.get('window'))} | {len(r.get('windows', []))} | "
                         f"{fmt_iv(r.get('difference'))} | {agree} |")
    if data.get("aa"):
        lines += ["", "## A/A half-width of the per-transaction design", "",
                  "| mix | after | transactions | B/A (95 % bootstrap CI) | half-width | "
                  "anytime (95 %) |", "|---|---:|---:|---|---:|---|"]
        for mix, aa in data["aa"].items():
            for mark, r in aa.items():
                if not isinstance(r, dict):
                    continue
                lines.append(f"| {mix} | {mark} | {r['transactions']:,} | "
                             f"{fmt_iv(r['interval'])} | ±{100 * r['half_width']:.1f} % | "
                             f"{fmt_iv(r['anytime'])} |")
    lines += ["", f"Wall {data.get('wall_s', 0):.0f} s; load average at the end "
                  f"{data.get('load_average_end')}; cgroup at the end: "
                  f"{data.get('cgroup_end', {}).get('oom_kills', '–')} OOM kills."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="60 s per-transaction runs, 10 rounds of 6 s windows, A/A 300 s")
    parser.add_argument("--mixes", default="tpch,pgbench")
    parser.add_argument("--classes", default="", help="knob classes (default: per mix)")
    parser.add_argument("--tpch-mix", default="2Q3,2Q6,2Q9,2Q13")
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--memory-limit-mb", type=int, default=320)
    parser.add_argument("--pgbench-scale", type=int, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--pertx-s", type=float, default=None, help="default 120 (quick: 60)")
    parser.add_argument("--rounds", type=int, default=None, help="default 12 (quick: 10)")
    parser.add_argument("--window-s", type=float, default=None, help="default 10 (quick: 6)")
    parser.add_argument("--aa-s", type=float, default=300.0, help="0: no A/A run")
    parser.add_argument("--tag", default="")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-pertx")
    args = parser.parse_args(argv)
    pertx_s = args.pertx_s or (60.0 if args.quick else 120.0)
    rounds = args.rounds or (10 if args.quick else 12)
    window_s = args.window_s or (6.0 if args.quick else 10.0)
    limit = args.memory_limit_mb * MB
    mixes = [m for m in args.mixes.split(",") if m]
    command = " ".join(["flock /tmp/harmony-bench.lock python -m benchmarks.evidence pertx",
                        *(sys.argv[2:] if argv is None else argv)])
    data: dict[str, Any] = {
        "machine": machine(), "command": command.strip(), "tpch_mix": args.tpch_mix,
        "scale": args.scale, "memory_limit_bytes": limit, "pgbench_scale": args.pgbench_scale,
        "clients": args.clients, "pertx_s": pertx_s, "rounds": rounds, "window_s": window_s,
        "results": {}, "aa": {}}
    name = "evidence_pertx" + (".quick" if args.quick else "") + (f".{args.tag}" if args.tag
                                                                   else "")
    cfg = tuner_config_from_dict(tuner_dict(
        "evidence-pertx", args.tpch_mix, scale=args.scale, memory_limit=limit, offline_evals=1,
        online_evals=1, queries=1, warmup_s=1, seed=1))
    t0 = time.monotonic()
    target = open_memory_bound(cfg, args.state_dir)
    try:
        for mix in mixes:
            if mix == "tpch":
                dsn, run = target.dsn, tpch_runner(target.dsn, args.tpch_mix)
            else:
                dsn = pgbench_dsn(target, args.pgbench_scale)
                run = pgbench_runner(dsn, args.clients, args.pgbench_scale)
            classes = [c for c in args.classes.split(",") if c] or DEFAULT_CLASSES[mix]
            data["results"][mix] = {}
            for k, knob_class in enumerate(classes):
                a, b = CLASSES[knob_class]
                try:
                    data["results"][mix][knob_class] = measure_class(
                        run, dsn, a, b, pertx_s=pertx_s, rounds=rounds, window_s=window_s,
                        seed=17 * (k + 1))
                except Exception as exc:  # noqa: BLE001  (one class failing must not lose the rest)
                    logger.exception("%s / %s failed", mix, knob_class)
                    data["results"][mix][knob_class] = {"error": str(exc)}
                data["wall_s"] = time.monotonic() - t0
                write_results(name, data, markdown(data))
            if args.aa_s > 0:
                data["aa"][mix] = aa_half_widths(run, args.aa_s, seed=99)
                data["wall_s"] = time.monotonic() - t0
                write_results(name, data, markdown(data))
        data["cgroup_end"] = cgroup_snapshot(target)
    finally:
        target.close()
    data["wall_s"] = time.monotonic() - t0
    data["load_average_end"] = load_average()
    write_results(name, data, markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


