"""Seeded simulators with a known truth (races, replicas, per-transaction runs, a session
replayed on measured tables): the benchmarks and tests measure false-claim rates on them. The
noise model they draw from is the product's (:mod:`tuner_client.stats.noise`)."""
