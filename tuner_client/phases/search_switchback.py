"""A search session's evaluations measured by switchback (issue 51, item 3), where the engine
chooses it (:func:`tuner_client.phases.search_design.search_choice`): a reload-time knob
without memory is searched (SET LOCAL cannot carry it), or the traffic is live (every knob is
switched by reload, the sessions being the application's), and the run measures one
database. Before, any such session went to whole-server windows, whose ratios read at
noise level (issue 51: 25 window evaluations of a write-heavy search spread 0.68–1.18×; 11 in
live mode 0.78–1.17×).

Each fetch of the strategy's ready trials (up to :data:`MAX_BATCH`, as per transaction) is
ONE switchback run over the session's reference and the batch's feasible candidates
(:func:`switchback_race`): the whole server alternates them in slices of ``measure.slice_s``
with ``ALTER SYSTEM`` + reload (:class:`tuner_client.switchback.ConfigurationSwitch`, which
puts ``postgresql.auto.conf`` back as it was on every exit), one slice per configuration per
block in a random order (:func:`tuner_client.stats.switchback.balanced_order`), for about
:func:`run_seconds` of the per-transaction search (``measure.per_transaction_s`` × (k + 1)/2
for k candidates), at least :data:`MIN_BLOCKS` blocks. With a workload the tuner drives
every transaction is timed and attributed to the slice it started in
(:func:`tuner_client.phases.final_switchback.driven_race`); in live mode the application's
counters are read at each slice's settled start and end
(:func:`~tuner_client.phases.final_switchback.live_race`), which may end the run after any
block whose intervals all exclude 1.

Each candidate's ratio is its paired ratio to the reference over the blocks, with a Student t
95 % interval of its block log-ratios (:func:`search_interval`; not Bonferroni-split: the
search ranks, only the final race claims, with anytime-valid intervals). The strategy is told
that ratio times the reference's window level (measured once per session, as per
transaction), and the record carries the ratio and
its reference into the ledger (:func:`tuner_client.phases.state.record_point`), which ranks
it by paired ratio, never by an absolute level. A candidate that breaks the memory budget is
never switched to: it is reported infeasible.

Measured (``benchmarks/results/switchback_search*.md``, live shop traffic from pgbench, 2
cores at load 11–15): the live switchback search's evaluations read ±41–47 % (median
half-width, 4–5 blocks of 3-s slices) where the windows route's ledger gave ±35–57 %, and
the final race by switchback ±31–53 % against windows' ±36–65 %: on live counters a block's
log-ratio still moves by about 0.3, so the design is valid there but not yet more precise.
Driven (TPC-H, 1-s slices, 5 blocks, load ~12) hash joins off read 0.73× and 0.78× beside
the reference's own point at about 1 (``tests/test_search_switchback.py``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from harmony_base.errors import HarmonyError
from tuner_client.engine.comparison import live_traffic
from tuner_client.engine.designs import SWITCHBACK, differing_knobs
from tuner_client.measurer import PointRecord
from tuner_client.measurer.guardrails import Trip
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.final_switchback import MIN_BLOCKS, driven_race, live_race
from tuner_client.phases.search_batches import (
    LEVEL,
    MAX_BATCH,
    Evaluation,
    SessionEvaluations,
    run_seconds,
)
from tuner_client.phases.slice_watch import SliceWatch
from tuner_client.phases.state import RunContext
from tuner_client.stats.paired import RatioInterval, interval_from_logs
from tuner_client.stats.switchback import SliceSpan, SwitchbackComparison, SwitchbackRace
from workloads.connect import connect
from workloads.observe import ObservedWindow

logger = logging.getLogger(__name__)

__all__ = ["MAX_BATCH", "SwitchbackEvaluations", "fill_by_switchback", "run_switchback_session",
           "switchback_race"]


def switchback_race(ctx: RunContext, configs: Sequence[Mapping[str, str]], labels: list[str],
                    seconds: float, *, seed: int,
                    harmed: Callable[[SwitchbackRace], bool] | None = None,
                    judge: Callable[[SliceSpan, ObservedWindow], bool] | None = None
                    ) -> SwitchbackRace:
    """One switchback run over ``configs`` (the first the reference; ``labels`` theirs) for
    about ``seconds``, in blocks of one ``measure.slice_s`` slice per configuration (at least
    :data:`MIN_BLOCKS`); driven by the tuner's workload, or read from the counters of live
    traffic (which ``harmed`` may stop after any block from the second on, and ``judge``, the
    guardrails, after any slice). Only the knobs that differ are switched;
    ``postgresql.auto.conf`` is restored before this returns or raises. Raises
    :class:`HarmonyError` when the run fails."""
    slice_s = ctx.config.measure.slice_s
    blocks = max(MIN_BLOCKS, int(seconds // (len(configs) * slice_s)))
    names = differing_knobs(configs) or sorted(configs[0])
    switched = [{n: c[n] for n in names} for c in configs]
    ctx.measurer.stop()  # the windows' workload must not run beside this one
    with connect(ctx.target.dsn) as conn:
        if live_traffic(ctx.config):
            return live_race(ctx, conn, switched, labels, blocks, LEVEL, seed=seed,
                             harmed=harmed, judge=judge)
        return driven_race(ctx, conn, switched, labels, blocks, LEVEL, seed=seed)


def search_interval(comparison: SwitchbackComparison) -> RatioInterval | None:
    """``comparison``'s ratio with a Student t interval at :data:`LEVEL` over its blocks'
    log-ratios (None below 2 blocks): the search ranks, as the per-transaction search does
    with its nominal intervals; the final race claims with the anytime-valid confidence
    sequence, which over the 4–6 blocks of a search's run is about twice as wide (one run
    on TPC-H read 0.73× (0.53–1.00) anytime-valid for hash joins off)."""
    iv = interval_from_logs(comparison.block_logs, level=LEVEL, method="t")
    return iv if iv is not None and iv.low > 0 and math.isfinite(iv.high) else None


def interval_text(iv: RatioInterval, comparison: SwitchbackComparison) -> str:
    """``0.73× (95 % CI 0.62–0.86), switchback: 5 blocks, 906 observations kept``."""
    return (f"{iv.text()}, switchback: {comparison.blocks} blocks, "
            f"{sum(comparison.observations):,} observations kept")


def fill_by_switchback(decide: Callable[[Decision], None], label: str, record: PointRecord,
                       comparison: SwitchbackComparison, level: float, counts: str) -> None:
    """``record``'s ratio to the session's reference from a switchback run, its interval
    (:func:`search_interval`) and value at the reference's ``level``, said to ``decide`` as a
    decision of session ``label`` (a failure where fewer than 2 blocks held both)."""
    record.design = SWITCHBACK
    iv = search_interval(comparison)
    if iv is None:
        record.failure = (f"no switchback interval: {comparison.blocks} block(s) held "
                          f"both configurations with observations")
        return
    record.ratio = iv.ratio
    record.interval = (iv.low, iv.high)
    record.transactions = comparison.observations
    record.reference = [level]
    record.value = iv.ratio * level
    decide(Decision.note(
        f"{label}: {record.settings}: {interval_text(iv, comparison)} over the reference",
        design=SWITCHBACK, settings={"candidate": dict(record.settings)},
        ratio=iv.ratio, low=iv.low, high=iv.high, level=iv.level,
        counts=counts or None, rounds=comparison.blocks))


@dataclass(eq=False)
class SwitchbackEvaluations(SessionEvaluations):
    """Measures batches of a session's candidates beside ``reference`` by switchback."""

    design: ClassVar[str] = SWITCHBACK

    slices: int = 0
    #: what the runs counted (transactions, or a counters' description)
    source: str = ""

    def measure_feasible(self, runnable: list[Evaluation], level: float) -> None:
        """One switchback run of ``runnable`` beside the reference. In live mode a candidate
        whose ratio so far reads below the guardrail's line (1 / (1 + ``latency_margin``),
        half the reference's speed by default) ends the run after the block that shows it:
        it fails as harmful, and the others run again without it."""
        ctx = self.ctx
        labels, configs = self.arms(runnable)
        seconds = run_seconds(ctx.config.measure.per_transaction_s, len(runnable))
        watch = SliceWatch.of(ctx.measurer.trips, ctx.config, labels, configs)
        logger.info("[%s] switchback run %d: the reference and %d candidate(s) for about "
                    "%.0f s", self.label, self.runs + 1, len(runnable), seconds)
        race: SwitchbackRace | None = None
        try:
            with self.counted():
                race = switchback_race(ctx, configs, labels, seconds,
                                       seed=ctx.config.seed + 1000 * self.runs,
                                       harmed=watch.harmed, judge=watch.judge)
        except HarmonyError as exc:
            if not watch.trips:
                for ev in runnable:
                    ev.record.failure = f"switchback run failed: {exc}"
                return
        if race is not None:
            self.slices += race.slices
            self.source, self.counts = race.source, race.counts
        if watch.stopped():
            evs = dict(zip(labels[1:], runnable, strict=True))
            for label in watch.trips:
                self._tripped(evs[label], *watch.record(label))
            for label, ratio in watch.harmful.items():
                blocks = race.plain[label].blocks if race is not None else 0
                evs[label].record.design = SWITCHBACK
                evs[label].record.failure = (
                    f"guardrail: {ratio:.2f}× the reference by switchback over the first "
                    f"{blocks} blocks, below {watch.line:.2f} (1 / (1 + "
                    f"workload.observe.guard.latency_margin)): left out of the run")
            rest = [runnable[k - 1] for k in watch.left()[1:]]
            if rest:
                self.measure_feasible(rest, level)
            return
        assert race is not None  # no trip: the run returned its race or failed above
        for label, ev in zip(labels[1:], runnable, strict=True):
            fill_by_switchback(self.state.decide, self.label, ev.record, race.plain[label], level,
                               self.counts)

    def _tripped(self, ev: Evaluation, trip: Trip, span: SliceSpan) -> None:
        """A guardrail tripped in ``ev``'s slice (recorded by the watch): the candidate
        failed and dropped from the search, and a decision says so."""
        ev.record.design = SWITCHBACK
        ev.record.failure = (f"{trip.reason}, in its switchback slice (block {span.block + 1},"
                             f" {trip.detected_after_s or 0.0:.1f} s after its switch): "
                             f"reverted in {trip.revert_s:.2f} s, left out of the run")
        self.state.decide(Decision.of(
            self.label, Kind.DROPPED, design=SWITCHBACK, labels=(f"trial {ev.got.trial_id}",),
            settings={f"trial {ev.got.trial_id}": dict(ev.settings)}, rounds=span.block + 1,
            reason=f"{trip.kind} guardrail tripped in its slice of the switchback search "
                   f"({trip.reason}); the trip is the slice's configuration's (its settled "
                   f"window judged); failed to the strategy and left out of the run"))

    def summary(self) -> Decision:
        """The session's design in one decision."""
        return Decision.note(
            f"{self.label}: evaluations measured {SWITCHBACK}: {self.runs} run(s), "
            f"{self.slices} slices of {self.ctx.config.measure.slice_s:g} s in "
            f"{self.seconds:.0f} s, each batch's candidates beside the reference "
            f"{self.reference.settings} in one run (ALTER SYSTEM + reload between slices, one "
            f"slice per configuration per block in a random order; {self.source or 'nothing'} "
            f"attributed to the slice they started in; the ratio counts "
            f"{self.counts or 'nothing'}; Student t intervals over blocks at {100 * LEVEL:.0f} "
            f"%, not split over the candidates: the search only ranks, the final race claims "
            f"with anytime-valid ones)",
            design=SWITCHBACK)


#: measure a session by switchback (:meth:`SessionEvaluations.run_session`)
run_switchback_session = SwitchbackEvaluations.run_session
