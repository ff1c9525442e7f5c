"""The measurement engine's rules: which design measures a comparison (:mod:`.designs`, the
validity table and the chooser) and the memory-pressure rule it uses (:mod:`.pressure`).
The runs themselves are the phases' (:mod:`tuner_client.phases.design_choice` dispatches)."""
