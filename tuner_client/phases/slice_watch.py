"""Live mode's watch over a switchback run's slices, for the search and for the final race
alike: the guardrails judge every candidate's slice (a trip stops the run at once, and the
switch puts the configuration back), and the harm line judges the race so far after each
block from the second on (a candidate reading below 1 / (1 + ``latency_margin``) of the
reference ends the run after the block that shows it). Whoever ran the slices then drops what
tripped or harmed, and runs the others again without it.

**Pooled slices.** A candidate's slices are judged together: each slice's settled window is
added to the candidate's earlier ones in the run, and the guardrail reads the sum. Until the
sum holds :data:`POOLED_S` seconds the latency limit is the guardrail's squared
(``(1 + latency_margin)²``: 4x by default): a harmless candidate's sub-second slice once read
2.06x against a 2.03x limit and tripped (a CI run of ``tests/test_search_switchback.py``),
while a harmful one trips at once (lookups by sequential scan read 62x in their first slice).
Slices of 3 s (live mode's) hold more than :data:`POOLED_S` settled seconds each: they are
judged at the guardrail's own limit from the first.

**Attribution.** A trip is the slice's own configuration's: the window judged is what the
traffic did from the slice's settle margin after its switch to its end (the window the race
counts), so a statement of the slice before that ends late is left out of it, and no rule for
"the first seconds of a slice" is needed. The reference's slices (``config`` 0: the
session's reference or the original, the configuration the server returns to between
candidates and after the run) are not judged, as windows never judge the original:
reverting it would have nowhere to go.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harmony_base.errors import GuardrailTrip
from tuner_client.config import ObserveConfig, TunerConfig
from tuner_client.measurer.guardrails import Guardrail, Trip
from tuner_client.measurer.trips import TripHandler
from tuner_client.stats.switchback import SliceSpan, SwitchbackRace
from workloads.observe import ObservedWindow

#: settled seconds of a candidate's slices before its latency is judged at the guardrail's own
#: limit (see the module)
POOLED_S = 2.0


def slice_trip(guard: Guardrail, span: SliceSpan, window: ObservedWindow,
               configs: Sequence[Mapping[str, str]]) -> Trip | None:
    """Live mode's guardrails on ``window``, the settled slices of ``span``'s configuration so
    far (the module's pooling): the trip (its ``revert_s`` left 0 until the configuration is
    back), or None (the reference's slices are never judged: see the module)."""
    if span.config == 0:
        return None
    margin = guard.config.latency_margin
    try:
        guard.check(window, latency_margin=None if window.seconds >= POOLED_S
                    else (1.0 + margin) ** 2 - 1.0)
    except GuardrailTrip as trip:
        return Trip(kind=trip.kind, reason=trip.reason, settings=dict(configs[span.config]),
                    restored=dict(configs[0]), detected_after_s=time.time() - span.begin,
                    revert_s=0.0)
    return None


def harm_margin(config: TunerConfig) -> float:
    """Live mode's guardrail margin on latency (``workload.observe.guard.latency_margin``;
    without live traffic, the default's)."""
    observe = config.workload.observe
    return (observe or ObserveConfig()).guard.latency_margin


@dataclass
class SliceWatch:
    """What tripped and what harmed in one switchback run over ``configs`` (``labels``
    theirs, the first the reference): pass :meth:`judge` and :meth:`harmed` to the run."""

    handler: TripHandler
    labels: Sequence[str]
    configs: Sequence[Mapping[str, str]]
    #: the harm line: a candidate's ratio to the reference below it harms the application
    line: float
    #: by label: the trip, the slice it tripped in, and when it was seen (monotonic)
    trips: dict[str, tuple[Trip, SliceSpan, float]] = field(default_factory=dict)
    #: by label: the ratio read below :attr:`line`
    harmful: dict[str, float] = field(default_factory=dict)
    #: by configuration: its slices' settled windows so far, added up
    pooled: dict[int, ObservedWindow] = field(default_factory=dict)

    @classmethod
    def of(cls, handler: TripHandler, config: TunerConfig, labels: Sequence[str],
           configs: Sequence[Mapping[str, str]]) -> SliceWatch:
        return cls(handler, labels, configs, 1.0 / (1.0 + harm_margin(config)))

    def judge(self, span: SliceSpan, window: ObservedWindow) -> bool:
        """The guardrails on ``span``'s settled window added to its configuration's earlier
        ones: True (stop now) on a trip."""
        guard = self.handler.guard
        if guard is None or span.config == 0:
            return False
        earlier = self.pooled.get(span.config)
        pooled = self.pooled[span.config] = window if earlier is None else earlier.plus(window)
        trip = slice_trip(guard, span, pooled, self.configs)
        if trip is not None:
            self.trips[self.labels[span.config]] = (trip, span, time.monotonic())
        return trip is not None

    def harmed(self, race: SwitchbackRace) -> bool:
        """The harm line on the race so far: True (stop after this block) when a candidate
        reads below it."""
        self.harmful.update({label: c.interval.ratio for label, c in race.plain.items()
                             if c.interval.ratio < self.line})
        return bool(self.harmful)

    def stopped(self) -> bool:
        """Whether a candidate tripped or harmed."""
        return bool(self.trips or self.harmful)

    def record(self, label: str) -> tuple[Trip, SliceSpan]:
        """``label``'s trip, recorded as the measurer's are (the guardrail's list, the run's
        summary and metrics through ``on_trip``), reverted once the run's switch put the
        configuration back (called after the run returned or raised)."""
        trip, span, detected = self.trips[label]
        trip.revert_s = time.monotonic() - detected
        if self.handler.guard is not None:
            self.handler.guard.trips.append(trip)
        if self.handler.on_trip is not None:
            self.handler.on_trip(trip)
        return trip, span

    def left(self) -> list[int]:
        """The indexes of the configurations that neither tripped nor harmed (the
        reference's, 0, first)."""
        out = {*self.trips, *self.harmful}
        return [k for k, label in enumerate(self.labels) if k == 0 or label not in out]
