"""The tuner's subcommands (``harmony tune``, ``restore``, ``sessions``, ``demo``): each light
module holds its options and help and reaches the work through ``LazyModule``; the work
modules (``tune_run``, the progress view, a replica's worker process) load when it runs."""
