"""The measurement engine's rules: which design measures a comparison (:mod:`.designs`, the
validity table and the chooser), the facts a comparison is judged on, read from the config and
the knob catalog for the run and the plan alike (:mod:`.comparison`), and the memory-pressure
rule (:mod:`.pressure`). The runs themselves are the phases'
(:mod:`tuner_client.phases.design_choice` dispatches); the one protocol every design
implements, and their registry by name (:mod:`.protocol`)."""
