"""The plan before a run (``harmony define --plan``): what will run, in which phases, how long a
window takes, live mode's plan, as text; and the knobs the workload's statistics point at
(:mod:`.proposals` over :mod:`.workload_stats`)."""
