"""The BME probes in the real tuner (issue 19): not a replay, the tuner itself.

One-pass runs of the tuner on a memory-bound TPC-H mix with a knee (the index-driven
``2Q21,1Q5,1Q20,1Q2``, SF 0.1, 512 MB cgroup; ``--workload tpcb``: pgbench TPC-B at
``--pgbench-scale``, whose data is larger than the largest size), only shared_buffers
searched (16–256 MB),
alternately without probes (the offline search with its whole budget, ``offline.evaluations``)
and with ``bme.probes`` (the probed search, ``bme.evaluations``). Recorded per run: the
wall-clock of the run, the evaluations, the probes' decision and the size the run keeps. Then
every kept size and the sweep's best (TPC-H 192 MB, TPC-B 64 MB) are re-measured
interleaved, with the tuner's protocol, ``--rounds`` times; each kept size's throughput over
the sweep's best is the paired ratio over the rounds (95 % t interval).

Run: ``flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.evidence probed``
Writes ``benchmarks/results/evidence_probed[.<tag>].json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.evidence.common import header, load_average, machine, write_results
from benchmarks.evidence.endtoend import compare, open_memory_bound
from benchmarks.evidence.restart import uptime
from harmony_base.errors import HarmonyError
from tuner_client.api.client import connect
from tuner_client.config import tuner_config_from_dict
from tuner_client.flows import Tuner
from tuner_client.phases.state import best_of
from tuner_client.stats.paired import paired_ratio_interval
from workloads.pgbench import PgbenchWorkload

logger = logging.getLogger(__name__)

MB = 1 << 20
MIX = "2Q21,1Q5,1Q20,1Q2"
#: per workload: the best size of its steady-state sweep (benchmarks/results/bme_probes*.md)
REFERENCES = {"tpch": "192MB", "tpcb": "64MB"}


def tuner_dict(*, probes: int, scale: float, memory_limit: int, seed: int, warmup_s: float,
               seconds: float, offline_evals: int, probe_seconds: float,
               pgbench_scale: int = 0, clients: int = 8) -> dict[str, Any]:
    """A one-pass config searching shared_buffers only; ``probes`` 0 runs without probes;
    ``pgbench_scale`` > 0: pgbench TPC-B with ``clients`` instead of the TPC-H mix."""
    workload: dict[str, Any] = (
        {"pgbench": {"scale": pgbench_scale, "clients": clients}} if pgbench_scale
        else {"tpch": {"scale": scale, "mix": MIX}, "statement_timeout_s": 300})
    return {
        "name": f"probed-{probes}", "seed": seed,
        "database": {"memory_limit": memory_limit, "restart_timeout_s": 120},
        "workload": workload,
        "measure": {"warmup_s": warmup_s, "samples": 3, "seconds": seconds, "queries": None},
        "budget": {"ram": "auto", "os_reserved": "32MB", "connections": "auto",
                   "shared_buffers_fraction": 0.5},
        "offline": {"knobs": {"shared_buffers": {"min": "16MB", "max": "256MB", "step": "8MB"}},
                    "evaluations": offline_evals},
        # the schema wants an online knob: one evaluation of one, the same in both arms; the
        # offline phase's wall-clock is read where its last evaluation ends
        "online": {"knobs": {"jit": {"values": ["on", "off"]}}, "evaluations": 1},
        "bme": {"probes": probes, "probe_seconds": probe_seconds},
        "flow": {"kind": "one-pass"},
        "final": {"rounds": 0},
    }


def one_run(cfg: Any, target: Any) -> dict[str, Any]:
    started = time.monotonic()
    ended: list[float] = []  # when each record arrived, from the run's start

    def note(record: Any) -> None:
        if "offline" in record.session:
            ended.append(time.monotonic() - started)

    tuner = Tuner(cfg, target=target, client=connect(None), on_record=note)
    result = tuner.run()
    summary = result.to_dict()
    wall = time.monotonic() - started
    offline = [r for r in tuner.records if "offline" in r.session]
    kept = best_of(offline)
    return {"wall_s": wall, "offline_s": max(ended, default=0.0), "evaluations": len(offline),
            "sizes": [r.in_force.get("shared_buffers") for r in offline],
            "values": [r.value for r in offline],
            # the size the offline pass put in force for the rest of the run (its best)
        "kept": kept.in_force.get("shared_buffers") if kept is not None else None,
        "recommended": summary["best_settings"].get("shared_buffers"),
            "probe_decisions": [{k: d.get(k) for k in ("decision", "reason", "window",
                                                       "probe_cost_s", "m_star")}
                                for d in tuner.state.probe_decisions],
            "decisions": summary["decisions"]}


def init_pgbench(dsn: str, scale: int) -> None:
    """pgbench's tables at ``scale`` on ``dsn`` (reused when present), vacuumed and analysed."""
    PgbenchWorkload(dsn, scale=scale).start()  # pgbench -i unless already there
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def run(args: argparse.Namespace) -> dict[str, Any]:
    memory_limit = args.memory_limit_mb * MB
    tpcb = args.workload == "tpcb"
    reference = REFERENCES[args.workload]
    data: dict[str, Any] = {"machine": machine(), "workload": args.workload,
                            "mix": f"pgbench TPC-B, scale {args.pgbench_scale}, "
                                   f"{args.clients} clients" if tpcb else MIX,
                            "scale": args.pgbench_scale if tpcb else args.scale,
                            "reference": reference,
                            "memory_limit_bytes": memory_limit, "runs": [],
                            "offline_evals": args.offline_evals, "uptime_start": uptime()}

    def config(probes: int, seed: int) -> Any:
        return tuner_config_from_dict(tuner_dict(
            probes=probes, scale=args.scale, memory_limit=memory_limit, seed=seed,
            warmup_s=args.warmup, seconds=args.seconds, offline_evals=args.offline_evals,
            probe_seconds=args.probe_seconds,
            pgbench_scale=args.pgbench_scale if tpcb else 0, clients=args.clients))

    # pgbench's tables are loaded outside the memory cgroup, as the TPC-H data is
    target = open_memory_bound(config(0, 1), args.state_dir,
                               fill=(lambda dsn: init_pgbench(dsn, args.pgbench_scale))
                               if tpcb else None)
    try:
        for i in range(args.repeats):
            for probes in (0, args.probes) if i % 2 == 0 else (args.probes, 0):
                cfg = config(probes, seed=1 + i)
                entry = {"repeat": i + 1, "probes": probes, "load_average": load_average(),
                         **one_run(cfg, target)}
                logger.info("[probed] repeat %d, probes %d: kept %s after %d evaluations in "
                            "%.0f s", i + 1, probes, entry["kept"], entry["evaluations"],
                            entry["wall_s"])
                data["runs"].append(entry)
        kept = sorted({r["kept"] for r in data["runs"] if r["kept"]} | {reference},
                      key=lambda s: int(s.removesuffix("MB")) if s.endswith("MB") else 0)
        configs = {size: {"shared_buffers": size} for size in kept}
        data["compare"] = compare(config(0, 99), target, configs, args.rounds)
    finally:
        target.close()
    by = {size: [row["qpm"] for row in data["compare"]["rounds"] if row["config"] == size]
          for size in data["compare"]["settings"]}
    data["ratios"] = {}
    data["uptime_end"] = uptime()
    for size, values in by.items():
        iv = paired_ratio_interval(values, by[reference])
        data["ratios"][size] = None if iv is None else [iv.ratio, iv.low, iv.high]
    return data


def markdown(data: dict[str, Any], command: str) -> str:
    reference = data.get("reference", REFERENCES["tpch"])
    what = (data["mix"] if data.get("workload") == "tpcb"
            else f"TPC-H SF {data['scale']} mix `{data['mix']}`")
    extra = (f"\n{what} on the embedded cluster in a "
             f"{data['memory_limit_bytes'] // MB} MB memory cgroup; shared_buffers 16–256 MB "
             f"the only knob; offline.evaluations {data['offline_evals']}.\n"
             + (f"\nuptime before: `{data['uptime_start']}`; after: `{data['uptime_end']}`.\n"
                if data.get("uptime_start") else ""))
    lines = [header("BME probes in the real tuner", command, data["machine"], extra),
             "## Runs", "",
             "| repeat | probes | offline phase (s, probes included) | offline evaluations | "
             f"sizes measured | kept | kept / {reference} (95 % CI) |",
             "|---:|---:|---:|---:|---|---:|---:|"]
    ratios = data.get("ratios", {})
    for r in data["runs"]:
        ratio = ratios.get(r["kept"])
        lines.append(f"| {r['repeat']} | {r['probes']} | {r['offline_s']:.0f} | "
                     f"{r['evaluations']}"
                     f" | {', '.join(str(s) for s in r['sizes'])} | {r['kept']} | "
                     + (f"{ratio[0]:.3f} ({ratio[1]:.3f}–{ratio[2]:.3f})" if ratio else "—")
                     + " |")
    walls = {p: [r["offline_s"] for r in data["runs"] if r["probes"] == p]
             for p in sorted({r["probes"] for r in data["runs"]})}
    lines += ["", "Mean offline phase: " + ", ".join(
        f"{'without probes' if p == 0 else f'{p} probes'} {sum(w) / len(w):.0f} s"
        for p, w in walls.items()) + ".", "", "## Re-measured, interleaved", "",
        "| shared_buffers | per round | / " + reference + " (95 % CI) |", "|---:|---|---:|"]
    for size, ratio in ratios.items():
        values = [row["qpm"] for row in data["compare"]["rounds"] if row["config"] == size]
        lines.append(f"| {size} | {', '.join(f'{v:.0f}' if v else '—' for v in values)} | "
                     + (f"{ratio[0]:.3f} ({ratio[1]:.3f}–{ratio[2]:.3f})" if ratio else "—")
                     + " |")
    lines += ["", "## The probes' decisions", ""]
    for r in data["runs"]:
        for d in r["probe_decisions"]:
            window = d["window"]
            where = (f"start {window[0] // MB} MB in {window[1] // MB}..{window[2] // MB} MB"
                     if window else "no window")
            lines.append(f"- repeat {r['repeat']}: {d['decision']}, {where}, probes "
                         f"{d['probe_cost_s']:.1f} s: {d['reason']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.evidence probed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=tuple(REFERENCES), default="tpch")
    parser.add_argument("--scale", type=float, default=0.1, help="TPC-H scale factor")
    parser.add_argument("--pgbench-scale", type=int, default=55,
                        help="tpcb: pgbench -i scale (about 15 MB per unit)")
    parser.add_argument("--clients", type=int, default=8, help="tpcb: pgbench clients")
    parser.add_argument("--memory-limit-mb", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=2,
                        help="pairs of runs (without, with probes; order alternating)")
    parser.add_argument("--probes", type=int, default=4)
    parser.add_argument("--probe-seconds", type=float, default=1.5)
    parser.add_argument("--offline-evals", type=int, default=6)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="default /var/tmp/harmony-bench-probed[-tpcb]")
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    if args.state_dir is None:
        args.state_dir = Path("/var/tmp/harmony-bench-probed"
                              + ("-tpcb" if args.workload == "tpcb" else ""))
    command = ("flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.evidence probed "
               + " ".join(argv or []))
    name = "evidence_probed" + (f".{args.tag}" if args.tag else "")
    try:
        data = run(args)
    except HarmonyError:
        logger.exception("the probed benchmark failed")
        raise
    write_results(name, data, markdown(data, command))
    print(markdown(data, command))
    return 0
