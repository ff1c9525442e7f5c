"""Where the final race's noise comes from, read from finished runs' outputs (no database).

A window race's per-round log-ratio has three parts: the samples inside one visit of a
configuration (a restart, a warm-up and ``measure.samples`` windows), the visit's own level
(what moves between visits seconds apart), and what the two visits of a round share (and
pairing cancels). For each ``--output`` directory of a ``harmony tune`` run this prints, from
its ``trials.jsonl`` (every final visit's samples) and ``summary.json`` (the rounds):

- the within-visit sd of the samples' log values (pooled over visits),
- the sd of the visits' mean log values per label, against what the within-visit noise
  alone would give a mean of that many samples,
- the sd of the rounds' log-ratios of ``best`` over ``default``, and the correlation of the
  two labels' levels across rounds (what pairing removes),
- where the search ran in windows, the visit sd of its reference measured twice around each
  candidate (a reload between, no restart): the sd of the pair's log-ratio over √2,
- the same sds for other estimators computed from the samples' per-query counts and mean
  latencies (count, and per-template Little's law ``sum(streams_t / latency_t)``) when
  ``--streams`` names the mix (e.g. ``Q1=2,Q6=2,Q13=1``).

Usage: ``python -m benchmarks.final_noise OUT [OUT ...] [--streams Q1=2,Q6=2,Q13=1]``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any


def _visits(trials: list[dict[str, Any]], streams: dict[str, int]
            ) -> list[tuple[str, dict[str, list[float]]]]:
    """(label, {estimator: log values of the visit's samples}) of every final visit."""
    visits = []
    for trial in trials:
        if not str(trial.get("session", "")).startswith("final-"):
            continue
        logs: dict[str, list[float]] = defaultdict(list)
        for sample in trial.get("samples", []):
            logs["value"].append(math.log(sample["qpm"]))
            if sample.get("count_qpm"):
                logs["count"].append(math.log(sample["count_qpm"]))
            per = sample.get("per_query") or {}
            if streams and all(per.get(q, [0, 0])[0] > 0 for q in streams):
                logs["little"].append(math.log(60 * sum(n / per[q][1]
                                                        for q, n in streams.items())))
        visits.append((trial["session"][len("final-"):], dict(logs)))
    return visits


def _sd(values: list[float]) -> float | None:
    return statistics.stdev(values) if len(values) > 2 else None


def decompose(out: Path, streams: dict[str, int]) -> dict[str, Any]:
    """The noise parts of one run's final race (see the module)."""
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    visits = _visits(trials, streams)
    row: dict[str, Any] = {"run": out.name, "visits": len(visits)}
    for estimator in ("value", "count", "little"):
        within = [statistics.variance(v[estimator]) for _, v in visits
                  if len(v.get(estimator, [])) >= 2]
        means: dict[str, list[float]] = defaultdict(list)
        sizes = []
        for label, v in visits:
            if v.get(estimator):
                means[label].append(statistics.fmean(v[estimator]))
                sizes.append(len(v[estimator]))
        between = [s for s in (_sd(m) for m in means.values()) if s is not None]
        if within and between:
            w = math.sqrt(statistics.fmean(within))
            row[estimator] = {"within": w, "between": statistics.fmean(between),
                              "from_within": w / math.sqrt(statistics.fmean(sizes))}
    # the windows search measures its reference before and after each candidate: two visits
    # of one configuration seconds apart with a reload between them and no restart
    pairs = []
    for trial in trials:
        ref = trial.get("reference") or []
        if trial.get("design") == "windows" and len(ref) == 2 and all(ref):
            pairs.append(math.log(ref[1] / ref[0]))
    if len(pairs) > 2:
        row["reload_visit_sd"] = math.sqrt(statistics.fmean([x * x for x in pairs]) / 2)
    summary = json.loads((out / "summary.json").read_text())
    rounds = [r for r in summary.get("ab_rounds") or [] if r.get("default") and r.get("best")]
    if len(rounds) >= 3:
        default = [math.log(r["default"]) for r in rounds]
        best = [math.log(r["best"]) for r in rounds]
        row["rounds"] = len(rounds)
        row["round_sd"] = statistics.stdev([b - d for b, d in zip(best, default, strict=True)])
        row["unpaired_sd"] = math.sqrt(statistics.variance(default) + statistics.variance(best))
        row["corr"] = statistics.correlation(default, best)
    return row


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outputs", nargs="+", type=Path, help="harmony tune --output dirs")
    parser.add_argument("--streams", default="",
                        help="the mix's streams per template, e.g. Q1=2,Q6=2,Q13=1")
    args = parser.parse_args(argv)
    streams = {q: int(n) for q, n in (p.split("=") for p in args.streams.split(",") if p)}
    print("| run | visits | within-visit sd (value / count / little) | visit-mean sd "
          "(value) | of it from within | reload visits' sd | rounds | round log-ratio sd | "
          "unpaired | corr |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for out in args.outputs:
        if not (out / "trials.jsonl").is_file() or not (out / "summary.json").is_file():
            print(f"| {out.name} | no trials.jsonl and summary.json in {out} (not a finished "
                  f"run's --output) ||||||||")
            continue
        row = decompose(out, streams)
        value = row.get("value", {})
        within = " / ".join(_fmt(row.get(e, {}).get("within")) for e in
                            ("value", "count", "little"))
        print(f"| {row['run']} | {row['visits']} | {within} | {_fmt(value.get('between'))} | "
              f"{_fmt(value.get('from_within'))} | {_fmt(row.get('reload_visit_sd'))} | "
              f"{row.get('rounds', '')} | "
              f"{_fmt(row.get('round_sd'))} | {_fmt(row.get('unpaired_sd'))} | "
              f"{_fmt(row.get('corr'))} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
