"""Duet: two clusters holding the same data measured at the same moments, one configuration
each, the roles swapped between segments (Bulej et al., "Duet Benchmarking", ICPE 2020; on
this machine an A/A read ±9.7 % in 100 s where interleaved windows read ±48 %,
``benchmarks/results/duet.full.md``).

In the order they act: :mod:`.clone` makes the second cluster (a base backup into a scratch
directory, crash-safe through :mod:`tuner_client.crashsafe.clones`); :mod:`.driver` drives
the workload to both at once and reads each one's per-second count; :mod:`.stats` turns the
segments into paired log-ratios, batch means, the clone's asymmetry and anytime-valid
intervals; :mod:`.race` alternates the segments over the candidates until the intervals
decide or the time is spent.
"""
