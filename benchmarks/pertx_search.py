"""Wall-clock and decision of a config's whole tuning run, measured in windows and per
transaction (issue 27, Evidence **Time**).

Each run is ``harmony tune CONFIG`` in its own process on a fresh embedded cluster (its own
state directory, so both designs pay the same TPC-H load), once as the config stands and once
with ``measure.design: per-transaction`` (plus the overrides given with ``--set``). The result
records per run: the wall-clock, the load average at the start and the end, the held
recommendation (or "kept the original") and the decision's interval of the best candidate
over the default, with the design that measured it.

    python -m benchmarks.pertx_search configs/tpch-demo.yaml --tag demo \\
        --set measure.per_transaction_s=10 --set final.max_seconds=30
    python -m benchmarks.pertx_search configs/tpch-onepass-4q6-4q9-4q13.yaml --tag onepass
    python -m benchmarks.pertx_search --from-dirs windows=DIR per-transaction=DIR --tag demo

``--from-dirs`` re-analyses runs already made (an output directory holding ``stdout.json``,
the ``--json`` summary, and ``wall.txt``), ``--from-json`` this benchmark's own JSON.
Writes benchmarks/results/pertx_search.<tag>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.machine import cpu_model

RESULTS = Path(__file__).parent / "results"
DESIGNS = ("windows", "per-transaction")


def design_config(path: Path, design: str, overrides: list[str]) -> dict[str, Any]:
    """The config at ``path`` with ``measure.design`` set (and, per transaction, the
    ``section.key=value`` overrides)."""
    cfg = yaml.safe_load(path.read_text())
    cfg.setdefault("measure", {})["design"] = design
    if design != "windows":
        for item in overrides:
            key, value = item.split("=", 1)
            section, name = key.split(".", 1)
            cfg.setdefault(section, {})[name] = yaml.safe_load(value)
    return cfg


def run_one(cfg: dict[str, Any], out: Path) -> dict[str, Any]:
    """One ``harmony tune`` run on a fresh embedded cluster; its summary and wall-clock."""
    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    state = Path(tempfile.mkdtemp(prefix="harmony-pertx-search-", dir="/tmp"))
    harmony = Path(sys.executable).with_name("harmony")
    load_start = os.getloadavg()
    started = time.monotonic()
    with (out / "stdout.json").open("w") as stdout, (out / "stderr.log").open("w") as stderr:
        rc = subprocess.run([str(harmony), "tune", str(config), "--state-dir", str(state),
                             "--output", str(out), "--json"], stdout=stdout, stderr=stderr,
                            check=False).returncode
    wall = time.monotonic() - started
    shutil.rmtree(state, ignore_errors=True)  # the run stopped its embedded cluster
    return outcome(json.loads((out / "stdout.json").read_text()) if rc == 0 else None, wall,
                   list(load_start), list(os.getloadavg()), rc, out)


def from_dir(out: Path) -> dict[str, Any]:
    """A run made by hand: ``stdout.json`` and ``wall.txt`` (start/end lines with uptime's
    load averages and ``wall_s=``)."""
    text = (out / "wall.txt").read_text()
    loads = [[float(x) for x in m] for m in
             re.findall(r"load average: ([\d.]+), ([\d.]+), ([\d.]+)", text)]
    wall = float(re.search(r"wall_s=([\d.]+)", text).group(1))  # type: ignore[union-attr]
    rc = int(re.search(r"rc=(\d+)", text).group(1))  # type: ignore[union-attr]
    summary = json.loads((out / "stdout.json").read_text()) if rc == 0 else None
    return outcome(summary, wall, loads[0], loads[-1], rc, out)


def phase_seconds(log: Path) -> dict[str, float]:
    """Seconds of the run's phases from its log's timestamps: ``setup`` (cluster, TPC-H
    load) until the first pass, ``search`` until the final rounds, ``final`` to the end
    (to the second)."""
    marks: dict[str, int] = {}
    last = None
    for line in log.read_text().splitlines() if log.exists() else []:
        m = re.match(r"(\d\d):(\d\d):(\d\d) ", line)
        if m is None:
            continue
        t = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3))
        marks.setdefault("start", t)
        last = t
        if "=== pass 1 " in line:
            marks.setdefault("search", t)
        if "=== final" in line:
            marks.setdefault("final", t)
    if last is None or "search" not in marks or "final" not in marks:
        return {}
    span = {"setup": marks["search"] - marks["start"], "search": marks["final"] - marks["search"],
            "final": last - marks["final"]}
    return {k: float(v % 86400) for k, v in span.items()}


def outcome(summary: dict[str, Any] | None, wall: float, load_start: list[float],
            load_end: list[float], rc: int, out: Path) -> dict[str, Any]:
    """What the table shows of one run."""
    row: dict[str, Any] = {"wall_s": round(wall, 1), "load_start": load_start,
                           "load_end": load_end, "rc": rc, "output": str(out),
                           "phases_s": phase_seconds(out / "stderr.log")}
    if row["phases_s"]:  # the log starts after the process: setup is the rest of the wall
        phases = row["phases_s"]
        phases["setup"] = round(wall - phases["search"] - phases["final"], 1)
    if summary is None:
        return row
    decision = summary.get("decision") or {}
    shown = decision.get("winner") or decision.get("best")
    interval = (decision.get("intervals") or {}).get(shown) if shown else None
    evaluations = [d for d in summary["decisions"] if "evaluations measured" in d]
    row.update({"recommendation": decision.get("winner") or "kept the original",
                "best_settings": summary["best_settings"],
                "shown": shown, "interval": interval, "design": decision.get("design"),
                "observations": decision.get("observations"),
                "search_design": evaluations, "evaluations": summary.get("evaluations"),
                "restart_part": restart_part(decision)})
    return row


def restart_part(decision: dict[str, Any]) -> dict[str, Any]:
    """A split race's restart-part intervals (at the plain level) and the widest half-width
    among them (log scale); empty when the race was not split."""
    parts = {label: iv for label, iv in (decision.get("intervals") or {}).items()
             if label.endswith("(restart part)") and iv}
    widths = [0.5 * math.log(iv["high"] / iv["low"]) for iv in parts.values()
              if iv.get("low") and iv.get("high")]
    return {"intervals": parts, "half_width": max(widths) if widths else None} if parts else {}


def _interval_text(row: dict[str, Any]) -> str:
    iv = row.get("interval")
    if not iv:
        return "—"
    return (f"{row['shown']}/default {iv['ratio']:.3f}× ({iv['low']:.3f}–{iv['high']:.3f}), "
            f"{row['design']}, {row['observations']} obs.")


def markdown(tag: str, rows: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"# Tuning run wall-clock by design: {tag}", "",
             f"`{meta['command']}` on {meta['cpu']}, {meta['cores']} cores (shared; the load "
             f"average at each run's start and end is in the table). One run per design.", "",
             "| design | wall-clock (s) | setup / search / final (s) | load 1-min start → end "
             "| decision | interval (95 %) of the best over the default | recommended settings |",
             "|---|---|---|---|---|---|---|"]
    for design, row in rows.items():
        verdict = row.get("recommendation") or f"failed (exit {row['rc']})"
        phases = row.get("phases_s") or {}
        split = " / ".join(f"{phases[k]:.0f}" for k in ("setup", "search", "final")) \
            if phases else "—"
        lines.append(f"| {design} | {row['wall_s']:.0f} | {split} | {row['load_start'][0]:.1f} "
                     f"→ {row['load_end'][0]:.1f} | {verdict} | {_interval_text(row)} | "
                     f"{row.get('best_settings', '—')} |")
    if all("wall_s" in r for r in rows.values()) and len(rows) == 2:
        w, p = (rows[d]["wall_s"] for d in DESIGNS)
        lines += ["", f"per-transaction / windows wall-clock: {p / w:.2f}"]
    for design, row in rows.items():
        for text in row.get("search_design") or []:
            lines += ["", f"{design}: {text}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, nargs="?")
    parser.add_argument("--tag", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="an override of the per-transaction run (YAML value)")
    parser.add_argument("--from-dirs", nargs="+", metavar="DESIGN=DIR")
    parser.add_argument("--from-json", type=Path, metavar="FILE",
                        help="re-analyse this benchmark's own JSON (its runs' output dirs)")
    parser.add_argument("--order", default=",".join(DESIGNS),
                        help="the designs in the order they run (default windows first)")
    args = parser.parse_args(argv)
    rows: dict[str, dict[str, Any]] = {}
    if args.from_json:
        for design, row in json.loads(args.from_json.read_text())["runs"].items():
            out = Path(row["output"])
            summary = json.loads((out / "stdout.json").read_text()) if row["rc"] == 0 else None
            rows[design] = outcome(summary, row["wall_s"], row["load_start"], row["load_end"],
                                   row["rc"], out)
    elif args.from_dirs:
        for item in args.from_dirs:
            design, directory = item.split("=", 1)
            rows[design] = from_dir(Path(directory))
    else:
        if args.config is None:
            parser.error("a config (or --from-dirs) is needed")
        for design in args.order.split(","):
            out = Path(tempfile.mkdtemp(prefix=f"pertx-search-{args.tag}-{design}-"))
            rows[design] = run_one(design_config(args.config, design, args.set), out)
    rows = {d: rows[d] for d in DESIGNS if d in rows}
    meta = {"command": "python -m benchmarks.pertx_search " + " ".join(argv or sys.argv[1:]),
            "cpu": cpu_model(), "cores": os.cpu_count(), "overrides": args.set}
    if args.from_json:  # the measured run's own command and machine
        meta = {**json.loads(args.from_json.read_text())["meta"], "reanalysed": meta["command"]}
    RESULTS.mkdir(exist_ok=True)
    base = f"pertx_search.{args.tag}"
    (RESULTS / f"{base}.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=2)
                                          + "\n")
    (RESULTS / f"{base}.md").write_text(markdown(args.tag, rows, meta))
    print(markdown(args.tag, rows, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
