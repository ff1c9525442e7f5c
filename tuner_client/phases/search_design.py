"""Which design measures a search session, in a module of its own: the dispatcher between
the per-transaction session
(:func:`tuner_client.phases.search_per_transaction.run_per_transaction_session`), the
switchback one (:func:`tuner_client.phases.search_switchback.run_switchback_session`), the
duet one (:func:`tuner_client.phases.search_duet.run_duet_session`) and the windows one
(:func:`tuner_client.phases.session_loop.run_session`), by the engine's choice for the
session's knobs (:data:`tuner_client.engine.comparison.SEARCH_DESIGNS`)."""

from __future__ import annotations

from collections.abc import Callable

from tuner_client.config import KnobSpace
from tuner_client.engine.designs import DUET, PER_TRANSACTION, SWITCHBACK, Choice
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.design_choice import choose_for
from tuner_client.phases.search_duet import run_duet_session
from tuner_client.phases.search_per_transaction import run_per_transaction_session
from tuner_client.phases.search_switchback import run_switchback_session
from tuner_client.phases.session_loop import run_session
from tuner_client.phases.state import RunContext, RunState

#: the search sessions of the designs a search runs other than windows
RUNNERS: dict[str, Callable[..., str]] = {PER_TRANSACTION: run_per_transaction_session,
                                          SWITCHBACK: run_switchback_session,
                                          DUET: run_duet_session}


def session_runner(ctx: RunContext, state: RunState, label: str, space: KnobSpace
                   ) -> Callable[..., str]:
    """How session ``label`` over ``space`` is measured: per transaction where the engine
    chooses it for its knobs (every searched knob may differ from the reference), else by
    switchback (reload-time knobs without memory, live traffic), else by duet (knobs with
    memory, restart-time knobs, where a clone can run beside the server), else in windows
    (:func:`run_session`), the decisions saying why each more precise design was not."""
    choice = search_choice(ctx, space)
    if choice.passed_over:
        state.decide(Decision(label, Kind.MEASURED, design=choice.design, why=choice.text()))
    return RUNNERS.get(choice.design, run_session)


def search_choice(ctx: RunContext, space: KnobSpace, designs: tuple[str, ...] | None = None
                  ) -> Choice:
    """The engine's design for a session over ``space`` among ``designs`` (None: the online
    search's, :data:`~tuner_client.engine.comparison.SEARCH_DESIGNS`): every searched knob
    may differ from the reference (against {} each one counts)."""
    return choose_for(ctx, [ctx.current(space.names), {}], search=True, designs=designs)
