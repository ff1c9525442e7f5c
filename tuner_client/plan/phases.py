"""The phases of a planned run (:class:`PhasePlan`): how many evaluations, measuring windows
and restarts each may take (upper bounds) and, once a window's length is known, how long.
Pure arithmetic on the config and the knob spaces; :mod:`tuner_client.plan.planner` puts it in the
plan beside the knobs and what is held.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner_client.config import KnobSpace, TunerConfig
from tuner_client.stats.screening_designs import pb_runs


@dataclass(frozen=True)
class PhasePlan:
    """One phase of the run: its evaluations, measuring windows and restarts (upper bounds),
    and its time when a window's length is known."""

    name: str
    evaluations: int
    windows: int
    restarts: int
    seconds: float | None
    detail: str
    #: the measurement design and why (:mod:`tuner_client.plan.designs`)
    design: str = ""



def phase_plans(config: TunerConfig, offline: KnobSpace, online: KnobSpace,
                window_s: float | None) -> list[PhasePlan]:
    """The run's phases in order (offline, screening, online, final) with upper bounds on
    their evaluations, windows and restarts, and their time when ``window_s`` is known."""
    m = config.measure
    # a paired block: the reference, the candidate's samples; the trailing reference opens
    # the next block
    per_eval = m.samples + 1 if m.paired else m.samples
    warm = m.warmup_s
    restart_warm = m.restart_warmup_s if m.restart_warmup_s is not None else m.warmup_s

    def seconds(windows: int, warmups: int, warmup_s: float) -> float | None:
        return None if window_s is None else windows * window_s + warmups * warmup_s

    phases: list[PhasePlan] = []
    passes = config.flow.max_passes
    if offline.names:
        evals = config.offline.evaluations * passes
        probes = config.bme.probes if config.bme.enabled else 0
        windows = evals * per_eval
        restarts = 2 * evals + probes
        secs = seconds(windows, 2 * evals, restart_warm)
        if secs is not None:
            # each probe may first wait up to settle_s for its buffer to settle
            secs += probes * (config.bme.probe_seconds + config.bme.settle_s)
        detail = (f"{config.offline.strategy} over {', '.join(offline.names)}, "
                  f"{config.offline.evaluations} evaluations a pass"
                  + (f", {probes} BME probes first (each settles up to "
                     f"{config.bme.settle_s:g} s)" if probes else "")
                  + "; every evaluation restarts the server (candidate, then reference)")
        phases.append(PhasePlan("offline", evals, windows, restarts, secs, detail))
    if config.screening.enabled and online.names:
        k = len(online.names)
        runs = (pb_runs(k) if config.screening.design == "pb" else 2 * k) \
            * config.screening.replicates
        windows = runs * config.screening.samples + math.ceil(runs / 2) + 1
        phases.append(PhasePlan(
            "screening", runs, windows, 0, seconds(windows, runs, warm),
            f"{config.screening.design.upper()} design over {k} knobs, "
            f"{config.screening.replicates} replicate(s): {runs} runs, the default measured "
            f"every 2 runs; knobs whose effect clears {config.screening.z:g} standard errors "
            f"are searched"))
    if online.names:
        how = "SET LOCAL per transaction" if config.database.managed else "ALTER SYSTEM + reload"
        evals = config.online.evaluations * passes
        windows = evals * per_eval
        phases.append(PhasePlan(
            "online", evals, windows, 0, seconds(windows, evals, warm),
            f"{config.online.strategy} over {', '.join(online.names)} ({how})"))
    f = config.final
    labels = 1 + f.candidates + len(f.baselines) + (1 if f.recommended else 0)
    visits = f.close_call_rounds * labels
    windows = visits * f.visit_samples
    restarts = visits if offline.names else 0
    phases.append(PhasePlan(
        "final", visits, windows, restarts + (1 if offline.names else 0),
        seconds(windows, visits, restart_warm if offline.names else warm),
        f"the default, {f.candidates} candidate(s) and baselines {list(f.baselines)} raced in "
        f"{f.rounds}..{f.close_call_rounds} rounds of {f.visit_samples} window(s) a visit; "
        + ("nothing server-wide changes (managed mode)" if config.database.managed else
           "the original configuration is restored at the end"
           + (" (a restart)" if offline.names else ""))))
    return phases
