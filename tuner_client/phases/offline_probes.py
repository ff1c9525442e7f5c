"""Buffer Miss Equation probes before an offline pass (``bme.probes``): a few restarts at
shared_buffers sizes spread over the range the memory budget allows, each a short window
reading only the miss probability, from a settled buffer (``bme.settle_s``; 0: from the cold
buffer); the fitted curve's decision says where
the offline search runs (:func:`bme.probe_decision.search_window`), or why it cannot.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from bme.probe_decision import (
    Probe,
    ProbeDecision,
    decide,
    probe_sizes,
    search_radius,
    search_window,
)
from harmony_base.errors import HarmonyError
from harmony_base.jsontypes import JSONObject
from harmony_base.space import IntParam
from tuner_client.config import KnobSpace, format_bytes
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.state import RunContext, RunState
from tuner_client.probes.runner import (
    BufferFill,
    ends_flat_settled,
    ends_flat_unfilled,
    fits_at_smallest,
    probe_order,
    run_probes,
    touched_pages,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbeAdvice:
    """A usable decision in session units: where the offline search starts, its range, and
    its first step as a fraction of that range (the simplex strategies' ``init_radius``)."""

    decision: ProbeDecision
    start: int
    bounds: tuple[int, int]
    radius: float


def probe_shared_buffers(ctx: RunContext, state: RunState, label: str,
                         space: KnobSpace) -> ProbeAdvice | None:
    """Probe, fit, decide and record the decision; the advice when the decision is usable."""
    cfg = ctx.config.bme
    if not cfg.enabled or "shared_buffers" not in space.names:
        return None
    knob = space["shared_buffers"]
    param = knob.param
    if not isinstance(param, IntParam):
        return None
    measurer = ctx.measurer
    if param.upper <= param.min + 2 * param.step:
        return None  # a fixed shared_buffers (or nearly): no curve to read
    if measurer.applier.controller is None:
        state.decide(Decision.of(label, Kind.SKIPPED, step="BME probes", reason=(
            "no BME probes: the tuner cannot restart this server (no controller), and every "
            "probe is a restart")))
        return None
    low = int(knob.canonical(param.min))
    high = min(int(knob.canonical(param.upper)), ctx.budget.shared_buffers_cap(measurer.in_force))
    step = int(knob.canonical(param.min + param.step)) - low
    if high <= low + 2 * step:
        state.decide(Decision.of(label, Kind.SKIPPED, step="BME probes", reason=(
            f"no BME probes: the memory budget leaves shared_buffers only "
            f"{format_bytes(low)}..{format_bytes(max(low, high))}")))
        return None
    before = measurer.in_force["shared_buffers"]  # tracked always (the budget reads it)
    sizes = probe_sizes(low, high, cfg.probes, step)
    fills: dict[int, BufferFill] = {}
    probes, failures = run_probes(measurer, sizes, cfg.probe_seconds, fills,
                                  settle_s=cfg.settle_s, order=probe_order,
                                  stop=lambda got: fits_at_smallest(got, sizes[0])
                                  or ends_flat_unfilled(got, fills)
                                  or ends_flat_settled(got, fills))
    # the last probed size is not left in force
    outcome = ctx.apply({"shared_buffers": before}, warm_up=False)
    if outcome.failure is not None:
        logger.warning("%s: shared_buffers %s not restored after the probes: %s", label,
                       before, outcome.failure)
    decision = decide_set(probes, fills, len(sizes) - len(probes) - len(failures), low=low,
                          high=high, min_r2=cfg.min_r2, target_miss=cfg.target_miss)
    cost = sum(p.cost_s for p in probes)
    window = search_window(decision, low, high, step)
    _record(ctx, state, label, decision, cost, failures, window)
    misses = {format_bytes(p.size): p.miss for p in probes if p.accesses}
    if window is None:
        state.decide(Decision.of(label, Kind.MODEL, step="BME probes", followed=False,
                                 values=misses, seconds=cost, reason=decision.reason,
                                 count=len(failures), text=failures[0] if failures else None))
        return None
    start, lo, hi = window
    state.decide(Decision.of(
        label, Kind.MODEL, step="BME probes", followed=True, values=misses, seconds=cost,
        method=decision.kind, reason=decision.reason,
        settings={"start": {"shared_buffers": format_bytes(start)},
                  "window": {"low": format_bytes(lo), "high": format_bytes(hi),
                             "left": format_bytes(max(0, high - hi))}}))
    state.recommend({**ctx.original, "shared_buffers": format_bytes(start)})
    return ProbeAdvice(decision, int(knob.session_value(start)),
                       (int(knob.session_value(lo)), int(knob.session_value(hi))),
                       search_radius(start, lo, hi, step, log=param.log))


def decide_set(probes: Sequence[Probe], fills: dict[int, BufferFill], skipped: int, *,
               low: int, high: int, min_r2: float = 0.9,
               target_miss: float | None = None) -> ProbeDecision:
    """A probe set's decision: "no knee" at the smallest when it alone read a flat curve from
    a settled buffer and the ``skipped`` larger probes were not run (:func:`fits_at_smallest`);
    "no knee found in range" when the two ends decided so and the ``skipped`` probes between
    were not run (:func:`ends_flat_unfilled`); "no knee" at the smallest when they read flat
    from a settled largest buffer (:func:`ends_flat_settled`); else the fit's
    (:func:`bme.probe_decision.decide`) with a flat curve needing a full buffer."""
    # (one probe with larger ones skipped: the stop rule saw the smallest size fit)
    if skipped > 0 and probes and fits_at_smallest(probes, probes[0].size):
        small = probes[0]
        return ProbeDecision(
            "no-knee", f"no knee: the smallest probe ({format_bytes(small.size)}) read "
            f"{small.miss:.4f} from a settled buffer ({small.settled}), so the workload's pages "
            f"fit there; a larger buffer misses no more, so the {skipped} larger probe(s) were "
            f"not run; memory above it is better left to the other consumers", (small,),
            size=max(low, min(high, small.size)), touched_pages=touched_pages(probes) or None)
    if skipped > 0 and ends_flat_settled(probes, fills):
        small, large = sorted(probes, key=lambda p: p.size)
        return ProbeDecision(
            "no-knee", f"no knee: the smallest and the largest probe read a flat curve "
            f"({format_bytes(small.size)}: {small.miss:.4f}, {format_bytes(large.size)}: "
            f"{large.miss:.4f}) from a settled largest buffer ({large.settled or 'full'}), so "
            f"the workload's pages fit at the smallest; memory above it is better left to the "
            f"other consumers; the {skipped} probe(s) between lie between the two on a curve "
            f"that falls with size and were not run", (small, large),
            size=max(low, min(high, small.size)), touched_pages=touched_pages(probes) or None)
    if skipped > 0 and ends_flat_unfilled(probes, fills):
        small, large = sorted(probes, key=lambda p: p.size)
        fill = fills[large.size]
        return ProbeDecision(
            "rejected", f"no knee found in range: the smallest and the largest probe read a "
            f"flat curve ({format_bytes(small.size)}: {small.miss:.4f}, "
            f"{format_bytes(large.size)}: {large.miss:.4f}) and the largest never saw a full "
            f"buffer ({fill.used} of {fill.capacity} buffers held a page), so the flat curve "
            f"may be misses of a buffer still filling; the {skipped} probe(s) between could "
            f"not change that and were not run; the search keeps its whole range",
            tuple(sorted(probes, key=lambda p: p.size)))
    decision = decide(probes, touched_pages=touched_pages(probes) or None, low=low, high=high,
                      min_r2=min_r2, target_miss=target_miss)
    return flat_needs_a_full_buffer(decision, fills)


def flat_needs_a_full_buffer(decision: ProbeDecision,
                             fills: dict[int, BufferFill]) -> ProbeDecision:
    """A flat curve says the workload's pages fit only when the largest probe's buffer was
    full, or had settled with every page the workload touches resident ("fits"); from a
    buffer that never filled (a short window from a cold start, data larger than the probes)
    it says nothing of the knee, so the decision becomes "no knee found in range" and the
    search keeps its whole range (issue 31)."""
    if decision.kind != "no-knee" or not decision.probes:
        return decision
    largest = max(decision.probes, key=lambda p: p.size)
    fill = fills.get(largest.size)
    if (fill is not None and fill.full) or largest.settled == "fits":
        return decision
    seen = (f"{fill.used} of {fill.capacity} buffers held a page at the end of its window"
            if fill is not None else "whether its buffer filled is unknown (no pg_buffercache)")
    return replace(decision, kind="rejected",
                   reason=f"no knee found in range: the curve is flat but the largest probe "
                          f"({format_bytes(largest.size)}) never saw a full buffer ({seen}), "
                          f"so the flat curve may be compulsory misses of a buffer still filling; "
                          f"the search keeps its whole range", size=None)


def _record(ctx: RunContext, state: RunState, label: str, decision: ProbeDecision, cost: float,
            failures: list[str], window: tuple[int, int, int] | None) -> None:
    """Keep the decision for the sessions' metadata and the summary's ``bme`` (the probes, the
    fit when there is one, the decision and why, whatever the decision) and export its fit to
    the metrics."""
    meta: JSONObject = decision.to_dict()
    meta.update({"source": "probes", "pass": label, "probe_cost_s": cost,
                 "failures": failures, "window": list(window) if window else None})
    state.note_probe_decision(meta)
    if decision.fit is None:
        return
    try:
        ctx.metrics.record_bme_fit(decision.fit.params, r2=float(decision.fit.r2),
                                   sizes=(float(decision.probes[0].size),
                                          float(decision.probes[-1].size)))
    except HarmonyError as exc:
        logger.info("BME fit not exported to the metrics: %s", exc)
