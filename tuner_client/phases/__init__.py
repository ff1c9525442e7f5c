"""The tuning run as phases, each a module with explicit inputs and outputs.

``prepare`` (target, spaces, budget, measurer) → ``offline`` / ``online`` passes (sessions and
the measuring loop) → ``final`` (the decision) → ``outputs`` (SQL, conf fragment, trials,
exports). The orchestrator is :class:`tuner_client.flows.Tuner`; the run's state is the
:class:`~tuner_client.phases.state.RunContext` (fixed once prepared) and the
:class:`~tuner_client.phases.state.RunState` (what the run has learnt) passed between them.
"""
