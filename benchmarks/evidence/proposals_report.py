"""The proposals benchmark's markdown: per workload, each knob's proposal and screening verdict
over the repeated runs, and how many of the cleared knobs the proposals contained."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from benchmarks.evidence.common import header


def _effect(e: dict[str, Any] | None) -> str:
    if e is None:
        return "–"
    text = f"{e['ratio']:.3f} ± {e['se']:.3f}"
    return f"**{text}**" if e["cleared"] else text


def workload_table(runs: list[dict[str, Any]], broad: list[str]) -> list[str]:
    """knob | proposed in k of n runs (symptom) | effect ± se per run (bold: cleared) | cleared
    in k of n runs; then the containment count and each run's evidence."""
    n = len(runs)
    heads = " | ".join(f"run {r.get('repeat', 0) + 1}: ratio ± se" for r in runs)
    lines = [f"| knob | proposed | {heads} | cleared |",
             "|---|---|" + "---|" * n + "---|"]
    extra = sorted({k for r in runs for k in r["proposed"] if k not in broad})
    for knob in broad + extra:
        effects = [{e["knob"]: e for e in r["effects"]}.get(knob) for r in runs]
        symptoms = sorted({r["symptom"][knob] for r in runs if knob in r["symptom"]})
        proposed = sum(knob in r["proposed"] for r in runs)
        cleared = sum(bool(e and e["cleared"]) for e in effects)
        lines.append(f"| {knob} | {proposed} of {n}"
                     + (f" ({'; '.join(symptoms)})" if symptoms else "") + " | "
                     + " | ".join(_effect(e) for e in effects)
                     + f" | {'**' if cleared else ''}{cleared} of {n}{'**' if cleared else ''} |")
    got = sum(len(r["contained"]) for r in runs)
    total = sum(len(r["cleared"]) for r in runs)
    missed = [f"{k} (run {r.get('repeat', 0) + 1})" for r in runs for k in r["cleared"]
              if k not in r["proposed"]]
    lines += ["", f"Cleared knobs the same run's proposal contained: **{got} of {total}**"
              + (f" (missed: {', '.join(missed)})" if missed else "") + "."]
    for r in runs:
        se = max((e["se"] for e in r["effects"]), default=float("nan"))
        lines += ["", f"Run {r.get('repeat', 0) + 1}: {r['evaluations']} evaluations, "
                      f"{r['wall_s']:.0f} s wall, screening se {se:.1%}, load average "
                      + (f"before {', '.join(str(x) for x in r['load_average_before'])}, "
                         if "load_average_before" in r else "")
                      + f"after {', '.join(str(x) for x in r['load_average'])}; proposal "
                      f"evidence:"]
        lines += [f"- {p['symptom']}: {', '.join(p['knobs'])} — {p['evidence']}"
                  for p in r["proposals"]] or ["- no symptom"]
    return lines


def markdown(data: dict[str, Any]) -> str:
    """The whole result: the design, one section per workload, the overall count."""
    broad = list(data["broad"])
    titles = data.get("titles", {})
    lines = [header("Proposed knobs vs the knobs a broad screening clears", data["command"],
                    data["machine"],
                    f"Each run watches its workload {data['observe_s']:.0f} s for the proposal "
                    f"(the statistics' difference over that window; pg_stat_statements "
                    f"preloaded; reload-time knobs only), then the tuner screens the broad set "
                    f"{', '.join(broad)} with their built-in ranges (Plackett–Burman, "
                    f"{data.get('replicates', 2)} replicates, {data['window_s']:.0f} s windows, "
                    f"the default measured every 2 runs; shared_buffers held). A knob's ratio is "
                    f"the throughput at its range's high end over its low end (the design's "
                    f"main effect); bold: cleared. A knob clears "
                    f"when |log ratio| ≥ z·se (z from the screening's multiplicity "
                    f"correction). Workloads are interleaved run by run.")]
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in data["runs"]:
        by_kind[run["kind"]].append(run)
    summary = ["", "| workload | runs | cleared (runs) | proposed (runs) | cleared ⊂ proposed |",
               "|---|---|---|---|---|"]
    sections: list[str] = []
    for kind, runs in by_kind.items():
        title = titles.get(kind, kind)
        cleared = _counts(k for r in runs for k in r["cleared"])
        proposed = _counts(k for r in runs for k in r["proposed"])
        got = sum(len(r["contained"]) for r in runs)
        total = sum(len(r["cleared"]) for r in runs)
        summary.append(f"| {title} | {len(runs)} | {cleared or 'none'} | {proposed or 'none'} "
                       f"| {got} of {total} |")
        sections += ["", f"## {title}", ""] + workload_table(runs, broad)
    total = sum(len(r["cleared"]) for r in data["runs"])
    got = sum(len(r["contained"]) for r in data["runs"])
    lines += summary + ["", f"Over all runs: **{got} of {total}** cleared knobs were in the "
                            f"same run's proposal."] + sections
    return "\n".join(lines)


def _counts(knobs: Any) -> str:
    counts: dict[str, int] = defaultdict(int)
    for k in knobs:
        counts[k] += 1
    return ", ".join(f"{k} ({n})" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
