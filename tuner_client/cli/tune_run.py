"""``harmony tune CONFIG.yaml``: run a tuning flow against PostgreSQL and report the result (the
options are in :mod:`tuner_client.cli.tune`, which imports this module only when it runs)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from types import FrameType

from tuner_client.cli.progress import RunView, live_view
from tuner_client.config import TunerConfig, load_tuner_config
from tuner_client.flows import Tuner, TuneResult
from tuner_client.metrics.exporter import metrics_from_args
from tuner_client.plan.planner import make_plan
from tuner_client.plan.text import format_plan


def _number(value: float) -> str:
    """A measured value as printed: one decimal, three significant digits below 10 (the
    live estimator's relative speed is near 1)."""
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def format_result(result: TuneResult) -> str:
    """A readable summary: best configuration, throughput vs the default, files written."""
    best, throughput, work = result.best, result.best.throughput, result.work
    lines = [f"passes: {work.passes}, evaluations: {work.evaluations}"]
    changed = best.changed
    decision = result.intervals.decision
    for line in decision.lines if decision is not None else ():  # the verdict, interval first
        lines.append(line if line.startswith(" ") else f"result: {line}")
    lines.append("recommended configuration:" if changed else
                 "recommended configuration: the original (no significant improvement)")
    width = max((len(k) for k in best.settings), default=0)
    for name, value in best.settings.items():
        mark = "" if name not in changed else f"   (default {best.original.get(name)})"
        lines.append(f"  {name:<{width}} = {value}{mark}")
    ci = result.intervals.improvement_ci
    decision = result.intervals.decision
    kind = "anytime-valid CI" if decision is not None and decision.method == "anytime" else "CI"
    if throughput.best is not None and throughput.default is not None:
        lines.append(f"throughput, default vs best interleaved over "
                     f"{len(result.intervals.rounds)} round(s): {_number(throughput.default)} "
                     f"-> {_number(throughput.best)} {throughput.unit} "
                     f"({100 * (result.improvement or 0.0):+.1f}%"
                     + (f", 95 % {kind} {100 * ci[0]:+.1f}% to {100 * ci[1]:+.1f}%" if ci else "")
                     + ")")
    for text in work.decisions:
        lines.append(f"decision: {text}")
    guardrails = result.evidence.guardrails
    if guardrails is not None:  # live mode
        lines.append(f"guardrails: {len(guardrails.events)} trip(s) {guardrails.by_kind}"
                     + "".join(f"\n  {t.reason} with {t.settings}: reverted to "
                               f"{t.restored} {(t.detected_after_s or 0) + t.revert_s:.2f}"
                               f" s after it took effect" for t in guardrails.events))
    if result.output_dir is not None:
        lines.append(f"ALTER SYSTEM statements: {result.output_dir / 'alter_system.sql'}")
        lines.append(f"postgresql.conf fragment: {result.output_dir / 'postgresql.conf.fragment'}")
        if work.sessions:
            first = work.sessions[-1]
            lines.append(f"sessions exported to {result.output_dir / 'sessions'}; report: "
                         f"harmony report {first} --from-xml "
                         f"{result.output_dir / 'sessions' / (first + '.xml')}")
    return "\n".join(lines)


def _term_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_with_metrics(config: TunerConfig, args: argparse.Namespace, output: Path) -> TuneResult:
    """Run ``config``'s flow with the metrics endpoint ``args`` ask for (stopped at the end)."""
    metrics = metrics_from_args(args, [k.name for k in config.knob_specs()], tuner=config.name)
    # SIGTERM unwinds like Ctrl-C: the flow restores the configuration and leaves the
    # server running before the process exits
    previous = signal.signal(signal.SIGTERM, _term_as_interrupt)
    try:
        view = RunView(config)
        tuner = Tuner(config, server=args.server, state_dir=args.state_dir, output_dir=output,
                      metrics=metrics, on_measured=view.measured, on_decision=view.decided)
        view.best_of = lambda: tuner.state.best
        with live_view(view):
            return tuner.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
        metrics.stop()


def run_tune(args: argparse.Namespace) -> int:
    """Entry point of ``harmony tune``; the CLI maps errors to exit codes."""
    config = load_tuner_config(args.config)
    if args.plan:
        return run_plan(config, args)
    if args.replica:
        from tuner_client.cli.replica_worker import run_replica

        reported = run_replica(config, server=args.server or config.server or "",
                               replica=args.replica, state_dir=args.state_dir,
                               idle_s=args.replica_idle)
        print(f"replica {args.replica}: {reported} evaluations reported")
        return 0
    output = args.output or Path("harmony-out") / config.name
    result = run_with_metrics(config, args, output)
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=2, default=str)
        print()
    else:
        print(format_result(result))
    return 0


def run_plan(config: TunerConfig, args: argparse.Namespace) -> int:
    """``harmony tune --plan``: print the plan and write it as JSON; nothing is changed."""
    plan = make_plan(config, time_window=True)
    output = args.output or Path("harmony-out") / config.name
    output.mkdir(parents=True, exist_ok=True)
    path = output / "plan.json"
    path.write_text(json.dumps(plan.to_dict(), indent=2) + "\n")
    if args.json:
        json.dump(plan.to_dict(), sys.stdout, indent=2)
        print()
    else:
        print(format_plan(plan))
        print(f"\nwritten to {path}")
    return 0
