"""Which design measures a search session, in a module of its own: the dispatcher between the
windows session (:func:`tuner_client.phases.session_loop.run_session`) and the
per-transaction one
(:func:`tuner_client.phases.search_per_transaction.run_per_transaction_session`), by the
engine's choice for the session's knobs."""

from __future__ import annotations

from collections.abc import Callable

from tuner_client.config import KnobSpace
from tuner_client.engine.designs import Choice
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.design_choice import choose_for
from tuner_client.phases.search_per_transaction import run_per_transaction_session
from tuner_client.phases.session_loop import run_session
from tuner_client.phases.state import RunContext, RunState


def session_runner(ctx: RunContext, state: RunState, label: str, space: KnobSpace
                   ) -> Callable[..., str]:
    """How session ``label`` over ``space`` is measured: :func:`run_per_transaction_session`
    where the engine chooses per transaction for its knobs (every searched knob may differ
    from the reference), else :func:`run_session`, the decisions saying why."""
    choice = search_choice(ctx, space)
    if choice.per_transaction:
        return run_per_transaction_session
    if choice.passed_over:
        state.decide(Decision(label, Kind.MEASURED, design=choice.design, why=choice.text()))
    return run_session


def search_choice(ctx: RunContext, space: KnobSpace) -> Choice:
    """The engine's design for a session over ``space``: every searched knob may differ
    from the reference (against {} each one counts)."""
    return choose_for(ctx, [ctx.current(space.names), {}], search=True)
