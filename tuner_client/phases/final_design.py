"""The final race's side of the design protocol (:mod:`tuner_client.engine.protocol`): the
run a final design reads (:class:`FinalRun`), the base class every final design derives from,
and the one composition every precise design is run in (:class:`Fallback`: when its run
fails, the universal design races instead).

The designs: :class:`~tuner_client.phases.final_per_transaction.PerTransaction`,
:class:`~tuner_client.phases.final_switchback.Switchback`,
:class:`~tuner_client.phases.final_windows.Windows`, and the compositions
:class:`~tuner_client.phases.final_split.Split` and
:class:`~tuner_client.phases.final_narrow.Narrowing`;
:func:`tuner_client.phases.design_choice.final_design` puts them together for a race.

A new design (duet, issue 51) is one more class: ``class Duet(FinalDesign, name="duet")``
whose :meth:`race` runs the request (its labels, configurations and ``request.level``, which a
composition's stage lowers) and returns an outcome with ``winner`` and
``to_final_decision()`` (and ``trace()`` to be drawn); a column in the engine's validity
table (:mod:`tuner_client.engine.designs`) for the chooser to take it; and its module in
:data:`tuner_client.phases.design_choice.FINAL_DESIGNS`, imported so that it registers.
Nothing that runs a race changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from tuner_client.engine.designs import differing_knobs
from tuner_client.engine.protocol import Design, RaceOutcome, RaceRequest
from tuner_client.phases.state import RunContext, RunState


@dataclass(frozen=True)
class FinalRun:
    """What a final design reads and writes: the run's context (the config, the server, its
    measurer and budget) and the run's ledger (records and decisions); ``dropped``: the
    labels a design dropped as harmful to live traffic (a guardrail tripped in their slice),
    which no later design races again."""

    ctx: RunContext
    state: RunState
    dropped: set[str] = field(default_factory=set)


class FinalDesign(Design[FinalRun]):
    """A design of the final race."""


@runtime_checkable
class Recommends(Protocol):
    """An outcome whose recommendation is a configuration of its own making (a split race's
    session part with a restart part on top), not one of the request's."""

    def recommended(self) -> Mapping[str, str] | None: ...


@runtime_checkable
class Rounds(Protocol):
    """An outcome measured one configuration at a time, in rounds (windows): each round's
    absolute values by label, for the throughput the result reports."""

    @property
    def rounds(self) -> Sequence[Mapping[str, float | None]]: ...


class Fallback(FinalDesign, name="fallback"):
    """``first``, and ``then`` when ``first`` could not run (said why in the decisions)."""

    def __init__(self, first: FinalDesign, then: FinalDesign) -> None:
        self.first, self.then = first, then

    def race(self, run: FinalRun, request: RaceRequest) -> RaceOutcome | None:
        outcome = self.first.race(run, request)
        if outcome is not None:
            return outcome
        # what ``first`` dropped as harmful is never raced again
        labels = tuple(label for label in request.labels if label not in run.dropped)
        if len(labels) < 2:
            return None
        return self.then.race(run, replace(request, labels=labels, reported=tuple(
            label for label in request.reported if label not in run.dropped)))


def shared_in_force(ctx: RunContext, configs: Sequence[Mapping[str, str]]) -> list[str]:
    """The prelude of a design that runs every configuration in one run: stop the windows'
    workload (it must not run beside the run) and put in force the knobs every configuration
    shares, at the reference's values (a restart when a restart-time one changes), so that
    the run switches exactly the differences; the knobs that differ."""
    differing = differing_knobs(configs)
    ctx.measurer.stop()
    ctx.apply({n: v for n, v in configs[0].items() if n not in differing},
              check_budget=False, warm_up=False)
    return differing
