"""Benchmark: how long ``harmony --help``, ``harmony --version`` and ``harmony tune --help`` take
against ``python -c pass`` (issue 46: a command line answers at once).

    python -m benchmarks.cli_startup [--quick] [--rounds N] [--tree DIR]

Each round runs the four commands once, in a shuffled order, as fresh processes
(``python -m harmony.cli ...``: the console script's code), timing each one's wall clock and
CPU (user + system). ``--tree`` runs them in another checkout (``-m`` puts the working
directory first on ``sys.path``), e.g. a ``git archive`` of an older commit, and writes
nothing. Reported per command: the median and a distribution-free 95 % interval of the median
(order statistics), and the same for the per-round difference to ``python -c pass`` (paired,
so a load spike that slows a whole round cancels). Goal: each wall-clock difference within
0.3 s. Writes ``benchmarks/results/cli_startup.json`` and ``cli_startup.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import cpu_model

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: the goal: each command within this many seconds of ``python -c pass``
GOAL_S = 0.3
COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "harmony --help": ["-m", "harmony.cli", "--help"],
    "harmony --version": ["-m", "harmony.cli", "--version"],
    "harmony tune --help": ["-m", "harmony.cli", "tune", "--help"],
}


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(median, low, high)``: the sample median and the order-statistic interval that covers
    the true median with probability >= ``level`` (binomial, no distribution assumed)."""
    ordered = sorted(values)
    n = len(ordered)
    tail = (1 - level) / 2
    k, cumulative = 0, 0.0
    while k < n:  # the largest k with P(Binom(n, 1/2) < k) <= tail
        step = math.comb(n, k) / 2 ** n
        if cumulative + step > tail:
            break
        cumulative += step
        k += 1
    low, high = (ordered[k - 1], ordered[n - k]) if k >= 1 else (ordered[0], ordered[-1])
    return statistics.median(ordered), low, high


def _time(args: list[str], tree: Path) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of one run; CPU (user + system) is what the load cannot stretch."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, *args], cwd=tree, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, args)
    return wall, usage.ru_utime + usage.ru_stime


def measure(rounds: int, tree: Path = ROOT, seed: int = 1) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU seconds per command, one of each per round in a shuffled order (after one
    warm-up round)."""
    rng = random.Random(seed)
    names = list(COMMANDS)
    for name in names:  # warm the file cache and the bytecode
        _time(COMMANDS[name], tree)
    times: dict[str, dict[str, list[float]]] = {"wall": {n: [] for n in names},
                                                "cpu": {n: [] for n in names}}
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            wall, cpu = _time(COMMANDS[name], tree)
            times["wall"][name].append(wall)
            times["cpu"][name].append(cpu)
    return times


def summarise(times: dict[str, dict[str, list[float]]]) -> list[dict[str, Any]]:
    rows = []
    for name in COMMANDS:
        row: dict[str, Any] = {"command": name}
        for kind, per_command in times.items():
            base, values = per_command["python -c pass"], per_command[name]
            median, low, high = median_interval(values)
            row[kind] = {"median_s": median, "ci95_s": [low, high]}
            if name != "python -c pass":
                diff, dlow, dhigh = median_interval(
                    [v - b for v, b in zip(values, base, strict=True)])
                row[kind].update(over_pass_s=diff, over_pass_ci95_s=[dlow, dhigh],
                                 goal_met=dhigh <= GOAL_S)
        rows.append(row)
    return rows


def _cell(entry: dict[str, Any], key: str) -> str:
    if key not in entry:
        return "—"
    low, high = entry[key.replace("_s", "_ci95_s") if key != "median_s" else "ci95_s"]
    return f"{entry[key]:.3f} s ({low:.3f}–{high:.3f})"


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [f"# CLI start-up ({result['rounds']} rounds, {result['date']})", "",
             f"Machine: {m['cpu']}, {m['cpus']} CPUs, load average {m['load_before']} before and "
             f"{m['load_after']} after; Python {m['python']}; commit {result['commit']}.", "",
             f"Goal: within {GOAL_S} s of `python -c pass` (the upper end of the paired "
             "interval). Medians with 95 % order-statistic intervals; CPU is user + system "
             "time, which the machine's load does not stretch as it does the wall clock.", "",
             "| command | wall | wall over `python -c pass` | CPU | CPU over `python -c pass` "
             "| goal (wall) |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        wall, cpu = r["wall"], r["cpu"]
        goal = "—" if "goal_met" not in wall else ("met" if wall["goal_met"] else "not met")
        lines.append(f"| `{r['command']}` | {_cell(wall, 'median_s')} | "
                     f"{_cell(wall, 'over_pass_s')} | {_cell(cpu, 'median_s')} | "
                     f"{_cell(cpu, 'over_pass_s')} | {goal} |")
    return "\n".join(lines) + "\n"


def _commit(tree: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, text=True,
                          capture_output=True, check=False)
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 rounds instead of 30")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 30)")
    parser.add_argument("--tree", type=Path, default=None,
                        help="time another checkout's code; nothing is written")
    args = parser.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 30)
    load_before = os.getloadavg()[0]
    times = measure(rounds, args.tree or ROOT)
    result = {
        "date": time.strftime("%Y-%m-%d"), "rounds": rounds, "commit": _commit(args.tree or ROOT),
        "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_before": round(load_before, 2),
                    "load_after": round(os.getloadavg()[0], 2)},
        "rows": summarise(times), "seconds": times,
    }
    text = markdown(result)
    print(text)
    if not args.quick and args.tree is None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "cli_startup.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "cli_startup.md").write_text(text)
    return 0 if all(r["wall"].get("goal_met", True) for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
