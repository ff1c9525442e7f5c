"""The example application (workloads/apps/shop), measured two ways.

``python -m benchmarks.shop tune``: ``harmony tune`` on configs/shop-scripted.yaml with
shortened budgets (an embedded cluster): the final rounds' decision between the default,
PGTune's rules and the tuned configuration, each with its paired 95 % interval.

``python -m benchmarks.shop capture``: the capture's overhead on the live server: the shop's
scripts run as the live load; rounds of a window without capture and a window with the
capture's logging on, in ABBA order; the paired ratio's t interval.

Results go to benchmarks/results/shop_*.md with the command, the machine and ``uptime``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.machine import cpu_model

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SCRIPTS = ["workloads/apps/shop/lookup.pgbench@6", "workloads/apps/shop/order.pgbench@3",
           "workloads/apps/shop/report.pgbench@1"]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean of log ratios back-transformed, with its 95 % t interval."""
    from scipy import stats

    logs = [math.log(v) for v in values]
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def run_tune(args: argparse.Namespace) -> str:
    config = yaml.safe_load((ROOT / "configs" / "shop-scripted.yaml").read_text())
    config["name"] = "shop-scripted-bench"
    config["offline"] = {"evaluations": args.offline}
    config["online"] = {"seconds": args.online_seconds}
    config["final"] = {"baselines": ["pgtune"], "max_rounds": args.rounds,
                       "max_seconds": args.final_seconds}
    before = uptime()
    with tempfile.TemporaryDirectory(prefix="harmony-shop-bench-") as tmp:
        path = Path(tmp) / "shop.yaml"
        path.write_text(yaml.safe_dump(config))
        out = Path(tmp) / "out"
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "harmony.cli", "tune", str(path),
                               "--output", str(out), "--state-dir", str(Path(tmp) / "state")],
                              cwd=ROOT, capture_output=True, text=True)
        seconds = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        summary = json.loads((out / "summary.json").read_text())
        measured: dict[str, dict[str, str]] = {}
        trials = out / "trials.jsonl"
        for line in (trials.read_text().splitlines() if trials.exists() else []):
            record = json.loads(line)
            if str(record.get("session", "")).startswith("final-"):
                measured.setdefault(record["session"][6:], record.get("settings") or {})
    after = uptime()
    decision = summary.get("decision") or {}
    lines = [
        "# The shop application, scripted: tuned vs default vs PGTune rules", "",
        f"Command: `python -m benchmarks.shop tune --offline {args.offline} --online-seconds "
        f"{args.online_seconds} --rounds {args.rounds} --final-seconds {args.final_seconds}"
        + (f" --tag {args.tag}" if args.tag else "") + "`",
        f"(configs/shop-scripted.yaml with those budgets; embedded cluster, shop scale 1, "
        f"8 clients, estimator work). Machine: {cpu_model()}, {os.cpu_count()} cores, shared "
        f"with other helpers' tests. Wall time {seconds / 60:.1f} min.", "",
        f"- uptime before: `{before}`", f"- uptime after: `{after}`", "",
        "Decision (final rounds interleaved, paired by round; 95 % intervals):", "",
    ]
    lines += [f"    {line}" for line in decision.get("text") or []]
    lines += ["", "Configurations of the final rounds:", ""]
    lines += [f"- {label}: {settings}" for label, settings in measured.items()]
    lines += ["", f"improvement: {summary.get('improvement')}, improvement_ci: "
                  f"{summary.get('improvement_ci')}",
              f"final rounds: {len(summary.get('ab_rounds') or [])}",
              f"best settings: {summary.get('best_settings')}"]
    return "\n".join(lines) + "\n"


def run_capture(args: argparse.Namespace) -> str:
    import psycopg

    from tuner_client.servers.local_cluster import LocalCluster
    from workloads.apps import setup_app
    from workloads.capture import logging_for_capture
    from workloads.scripted import ScriptedWorkload

    before = uptime()
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="harmony-capture-bench-", dir="/tmp")))
    cluster.init()
    cluster.start()
    try:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE shop")
        dsn = cluster.dsn_for("shop")
        setup_app(dsn, "shop", 1)
        workload = ScriptedWorkload(dsn, SCRIPTS, clients=args.clients, writes=True,
                                    variables={"scale": 1})
        ratios: list[float] = []
        rows = []
        with workload:
            workload.sample(3.0)  # warm-up
            for r in range(args.rounds):
                values: dict[str, float] = {}
                order = ["off", "on"] if r % 2 == 0 else ["on", "off"]
                for label in order:
                    if label == "on":
                        with logging_for_capture(dsn, f"bench{r}"):
                            values[label] = workload.sample(args.seconds).qpm
                    else:
                        values[label] = workload.sample(args.seconds).qpm
                ratios.append(values["on"] / values["off"])
                rows.append(f"| {r + 1} | {'-'.join(order)} | {values['off'] / 60:.1f} | "
                            f"{values['on'] / 60:.1f} | {ratios[-1]:.3f} |")
    finally:
        cluster.destroy()
    after = uptime()
    mean, low, high = t_interval(ratios)
    return "\n".join([
        "# The capture's overhead on the live server", "",
        f"Command: `python -m benchmarks.shop capture --rounds {args.rounds} --seconds "
        f"{args.seconds} --clients {args.clients}`. The shop's scripts (lookup@6, order@3, "
        f"report@1; writes) on a local cluster at scale 1 as the live load; each round one "
        f"window without and one with the capture's logging (log_min_duration_statement=0 "
        f"with parameters, the capture's log_line_prefix), ABBA order. Machine: "
        f"{cpu_model()}, {os.cpu_count()} cores, shared with other helpers' tests.", "",
        f"- uptime before: `{before}`", f"- uptime after: `{after}`", "",
        "| round | order | tps without | tps with capture | ratio |", "|---:|---|---:|---:|---:|",
        *rows, "",
        f"Throughput with capture / without: **{mean:.3f}** (95 % t interval over rounds of the "
        f"log ratio: {low:.3f}-{high:.3f}), i.e. an overhead of {100 * (1 - mean):.1f} % "
        f"({100 * (1 - high):.1f} to {100 * (1 - low):.1f} %).", ""])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shop")
    sub = parser.add_subparsers(dest="what", required=True)
    tune = sub.add_parser("tune")
    tune.add_argument("--offline", type=int, default=3)
    tune.add_argument("--online-seconds", type=float, default=240)
    tune.add_argument("--rounds", type=int, default=5)
    tune.add_argument("--final-seconds", type=float, default=240)
    cap = sub.add_parser("capture")
    cap.add_argument("--rounds", type=int, default=8)
    cap.add_argument("--seconds", type=float, default=10)
    cap.add_argument("--clients", type=int, default=8)
    for each in (tune, cap):
        each.add_argument("--tag", default="", help="suffix of the result file's name")
    args = parser.parse_args()
    text = run_tune(args) if args.what == "tune" else run_capture(args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"shop_{args.what}{args.tag}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
