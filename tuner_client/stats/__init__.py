"""The statistics of tuning under noise: paired ratios with intervals (fixed-n, and
anytime-valid confidence sequences for the race), racing, screening,
the final decision, instability flags, and a seeded noise model to test them against (the
simulators built on it, which only benchmarks and tests run, are in ``benchmarks/simulators/``).

Pure: no database, no HTTP, no asyncio; numpy and scipy only. The tuning run's phases use
these; tests check them on :mod:`tuner_client.stats.noise`'s synthetic objectives.
"""

from tuner_client.stats.decision import FinalDecision, decide
from tuner_client.stats.paired import (
    RatioInterval,
    ReferenceLevel,
    abba_ratio,
    block_ratio,
    paired_ratio_interval,
)
from tuner_client.stats.racing import Race, RaceBudget, RaceResult, RaceRules
from tuner_client.stats.screening import KnobEffect, KnobLevels, Screening, screen
from tuner_client.stats.sequential import confidence_sequence

__all__ = ["FinalDecision", "KnobEffect", "KnobLevels", "Race", "RaceBudget", "RaceResult",
           "RaceRules", "RatioInterval", "ReferenceLevel", "Screening", "abba_ratio", "block_ratio",
           "confidence_sequence", "decide", "paired_ratio_interval", "screen"]
