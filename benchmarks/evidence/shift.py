"""Workload shift: the mix switches mid-run; multi-pass (shift detector) vs one-pass.

A schedule runs mix A for ``switch_s`` seconds, then mix B for the rest of the run. Both
flows start on A; the one-pass flow tunes once and stops; the multi-pass flow, once its online
session has used its budget, monitors the best point and restarts from the offline session
when 3 measurements in a row leave the converged band. Reported: when the detector fired
(seconds after the switch), and throughput under mix B at the end (the tuner's own
interleaved default-vs-best rounds, which run on B since the last mix keeps running).

Run: ``python -m benchmarks.evidence shift [--quick]`` (small cluster, SF 0.1, no cgroup).
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.evidence.common import fmt, header, load_average, machine, write_results
from benchmarks.evidence.flowrun import open_small_target, run_flow, small_config
from workloads.base import Workload
from workloads.sample import Sample

logger = logging.getLogger(__name__)

MIX_A = "3Q6,3Q13"
MIX_B = "3Q1,3Q9"
#: seconds after the multi-pass monitoring starts before the mix switches
SWITCH_DELAY_S = 15.0


class ShiftingWorkload(Workload):
    """Mix A until :meth:`switch` is called, mix B after it, whatever restarts happen between.

    The project's ``ScheduledDriver`` starts its schedule over from phase 0 on every
    ``start()``, and the measurer stops and starts the workload around each PostgreSQL
    restart, so an offline evaluation after a timed switch would bring mix A back. This
    driver switches once, on an event, for good; a switch waits for a running sample.
    """

    def __init__(self, dsn: str, seed: int) -> None:
        from workloads.driver import WorkloadDriver

        self._make = lambda mix: WorkloadDriver(dsn, mix, seed=seed, statement_timeout_s=120)
        self.mix = MIX_A
        self.switched_at: float | None = None
        self._lock = threading.Lock()
        self._driver: Any = None
        self._running = False

    def switch(self) -> None:
        with self._lock:
            if self.mix == MIX_B:
                return
            self.mix = MIX_B
            if self._running and self._driver is not None:
                self._driver.stop()
                self._driver = self._make(MIX_B)
                self._driver.start()
            self.switched_at = time.monotonic()
        logger.info("workload switched to %s", MIX_B)

    def switch_later(self, delay_s: float) -> None:
        threading.Timer(delay_s, self.switch).start()

    def start(self) -> None:
        with self._lock:
            if not self._running:
                self._driver = self._make(self.mix)
                self._driver.start()
                self._running = True

    def sample(self, seconds: float | None = None, *, queries: int | None = None,
               timeout_s: float | None = None, since: float | None = None,
               every_query: bool = False) -> Sample:
        with self._lock:
            return self._driver.sample(seconds, queries=queries, timeout_s=timeout_s,
                                       since=since, every_query=every_query)

    def stop(self) -> None:
        with self._lock:
            if self._running:
                self._driver.stop()
                self._running = False


def run_pair(target: Any, quick: bool) -> dict[str, Any]:
    """Both flows on mix A; the mix switches to B when the first pass's online session ends.

    One-pass: right after its last online evaluation (so its final rounds run on B).
    Multi-pass: ``SWITCH_DELAY_S`` after its monitoring of the converged point starts.
    """
    offline, online = 2, 4 if quick else 8
    out: dict[str, Any] = {"schedule": f"{MIX_A}, then {MIX_B}", "offline_evals": offline,
                           "online_evals": online, "switch_delay_s": SWITCH_DELAY_S}
    for flow in ("one-pass", "multi-pass"):
        # the local-minimum detector is off: a full run with it on fired it in both passes,
        # so monitoring (and the switch) never came (results/evidence_shift.local-minimum-on)
        cfg = small_config(f"evidence-shift-{flow}", flow=flow, mix=MIX_A,
                           offline_evals=offline, online_evals=online, queries=9,
                           monitor=10 if quick else 16, max_passes=2, local_minimum=False)
        la = load_average()
        started = time.monotonic()
        shift = ShiftingWorkload(target.dsn, seed=1)

        def on_record(n: int, shift: ShiftingWorkload = shift, flow: str = flow) -> None:
            if flow == "one-pass" and n == offline + online:
                shift.switch()

        def on_decision(text: str, shift: ShiftingWorkload = shift) -> None:
            if "workload-shift band" in text and shift.switched_at is None:
                shift.switch_later(SWITCH_DELAY_S)

        try:
            result = run_flow(cfg, target, on_record=on_record, on_decision=on_decision,
                              workload=shift)
        finally:
            shift.stop()
        switch_t = shift.switched_at - started if shift.switched_at is not None else None
        result["switch_at_s"] = switch_t
        result["load_average_start"] = la
        result["load_average_end"] = load_average()
        fired = [d for d in result["timed_decisions"] if "workload shift:" in d["text"]]
        result["detected_at_s"] = fired[0]["t"] if fired else None
        result["detect_delay_s"] = (fired[0]["t"] - switch_t) if fired and switch_t else None
        result["measurements_to_detect"] = (
            sum(1 for e in result["timeline"] if e["session"].endswith("-monitor")
                and switch_t is not None and switch_t <= e["t"] <= fired[0]["t"])
            if fired else None)
        result["wall_s"] = time.monotonic() - started
        out[flow] = result
        logger.info("%s: switch at %s s, detected at %s s; tuned/default under B %s", flow,
                    switch_t, result["detected_at_s"], result["tuned_over_default"])
    return out


def _count(n: int | None) -> str:
    return "–" if n is None else str(n)


def markdown(data: dict[str, Any]) -> str:
    cmd = "python -m benchmarks.evidence shift" + (" --quick" if data["quick"] else "")
    extra = (f"\nMix A `{MIX_A}`, then mix B `{MIX_B}`: one-pass switches right after its last "
             f"online evaluation, multi-pass {SWITCH_DELAY_S:g} s into its monitoring of the "
             f"converged point. TPC-H SF 0.1, embedded cluster without a "
             f"memory cgroup (budget RAM declared as 1GB). The one-pass flow gets 2 offline + "
             f"online evaluations; the multi-pass flow the same per pass (at most 2 passes) plus "
             f"monitoring. 'under B' = the tuner's own final rounds (default vs best, "
             f"interleaved A/B/A/B), which run after the switch.\n")
    lines = [header("Workload shift: multi-pass vs one-pass", cmd, data["machine"], extra)]
    lines.append("| flow | passes | evaluations | switch at (s) | shift detected at (s) | "
                 "delay (s) | monitor measurements after switch | default qpm under B | "
                 "best qpm under B | best/default | wall s | load avg |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for flow in ("one-pass", "multi-pass"):
        r = data["pair"].get(flow)
        if r is None:
            continue
        lines.append(f"| {flow} | {r['passes']} | {r['evaluations']} | {fmt(r['switch_at_s'])} | "
                     f"{fmt(r['detected_at_s'])} | {fmt(r['detect_delay_s'])} | "
                     f"{_count(r['measurements_to_detect'])} | "
                     f"{fmt(r['default_qpm'])} | "
                     f"{fmt(r['best_qpm'])} | {fmt(r['tuned_over_default'])} | "
                     f"{fmt(r['wall_s'])} | {r['load_average_end']} |")
    for flow in ("one-pass", "multi-pass"):
        r = data["pair"].get(flow)
        if r is None:
            continue
        lines.append(f"\n**{flow}** timeline (s since start: session, qpm):\n")
        lines.append(", ".join(f"{e['t']:.0f}: {e['session']} {fmt(e['qpm'])}"
                               for e in r["timeline"]))
        lines.append("\nDecisions: " + ("; ".join(f"[{d['t']:.0f} s] {d['text']}"
                                                  for d in r["timed_decisions"]) or "none"))
        lines.append(f"\nBest settings: {r['best_settings']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer evaluations and monitoring")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-small")
    args = parser.parse_args(argv)
    mach = machine()
    target = open_small_target(args.state_dir)
    try:
        pair = run_pair(target, args.quick)
    finally:
        target.close()
    data = {"machine": mach, "quick": args.quick, "pair": pair}
    write_results("evidence_shift" + (".quick" if args.quick else ""), data, markdown(data))
    return 0
