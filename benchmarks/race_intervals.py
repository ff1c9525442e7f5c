"""Every finished run's final race re-read with one interval method, so that runs of trees
whose races printed different kinds (fixed-n t intervals before issue 27, anytime-valid
confidence sequences since) can be compared like for like (no database).

For each ``harmony tune --output`` directory this reads ``summary.json``'s ``ab_rounds`` (each
round's value per label) and prints, for every label against ``default``: the rounds, the
geometric-mean ratio, the 95 % fixed-n t interval on the paired log-ratios and the 95 %
t-mixture confidence sequence (valid whenever the race stopped), both computed as the race
computes them (:func:`tuner_client.stats.paired.paired_ratio_interval`, ``t`` and
``anytime``) and unadjusted for the number of candidates.

Usage: ``python -m benchmarks.race_intervals OUT [OUT ...]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from tuner_client.stats.paired import log_ratios, paired_ratio_interval


def intervals(out: Path, *, level: float = 0.95) -> list[dict[str, Any]]:
    """One row per label raced against ``default`` in ``out``'s final rounds."""
    rounds = json.loads((out / "summary.json").read_text()).get("ab_rounds") or []
    labels = sorted({k for r in rounds for k in r if k not in ("default", "tuned")})
    reference = [r.get("default") for r in rounds]
    rows = []
    for label in labels:
        values = [r.get(label) for r in rounds]
        t = paired_ratio_interval(values, reference, level=level, method="t")
        cs = paired_ratio_interval(values, reference, level=level, method="anytime")
        if t is None or cs is None:
            continue
        rows.append({"run": out.name, "label": label, "rounds": t.n, "ratio": t.ratio,
                     "sd": statistics.stdev(log_ratios(values, reference)),
                     "t": (t.low, t.high), "cs": (cs.low, cs.high)})
    return rows


def _pair(iv: tuple[float, float]) -> str:
    return f"{iv[0]:.2f}–{iv[1]:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outputs", nargs="+", type=Path, help="harmony tune --output dirs")
    args = parser.parse_args(argv)
    print("| run | label | rounds | ratio | round log-ratio sd | 95 % fixed-n t | "
          "95 % confidence sequence |")
    print("|---|---|---:|---:|---:|---|---|")
    for out in args.outputs:
        for r in intervals(out):
            print(f"| {r['run']} | {r['label']} | {r['rounds']} | {r['ratio']:.3f}× | "
                  f"{r['sd']:.3f} | {_pair(r['t'])} | {_pair(r['cs'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
