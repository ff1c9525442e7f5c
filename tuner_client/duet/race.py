"""The duet race: blocks of segments, in each block every candidate beside the reference
once, the roles (which cluster runs the reference) swapped in the order ABBA, ABBA, ...
(:func:`candidate_on_clone`), until
every candidate's interval excludes 1 (anytime-valid: looked at after every block) or the
time is spent (then the end's t interval: :mod:`tuner_client.stats.horizon`).

Each cluster is an :class:`Arm`: how to put a configuration in force on it (a reload, or a
restart when a postmaster knob differs) and the DSN its workload client connects to. The
server's arm is the run's own apply (journaled, crash-safe); the second's is
:meth:`tuner_client.duet.clone.Clone.apply` or :meth:`tuner_client.duet.twin.Twin.apply`, its
name (``clone`` or ``twin``) what the log lines and the decisions call it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harmony_base.errors import ConfigError
from tuner_client.duet.driver import Runner, pin_postmaster
from tuner_client.duet.stats import BATCH_S, DuetRace, Segment, race

logger = logging.getLogger(__name__)

#: seconds per segment measured (after the warm-up)
SEGMENT_S = 20
#: seconds left out at the start of each segment (connections, the first cache misses,
#: a reload's settling)
WARMUP_S = 3
#: fewest blocks: both orientations of every candidate, twice
MIN_BLOCKS = 4


@dataclass
class Arm:
    """One cluster of the duet: its name (``server``; the second's, ``clone`` or ``twin``,
    names it in the decisions), its DSN for the workload and how to configure it."""

    name: str
    dsn: str
    apply: Callable[[Mapping[str, str]], object]
    #: the settings last put in force (None: unknown)
    current: dict[str, str] | None = None
    #: pin the cluster (its data directory's postmaster) and its client to these CPUs
    cpus: str | None = None
    data_dir: Path | None = None

    def put(self, settings: Mapping[str, str]) -> None:
        if self.current != dict(settings):
            self.apply(settings)
            self.current = dict(settings)
        if self.cpus is not None and self.data_dir is not None:
            pin_postmaster(self.data_dir, self.cpus)  # a restart forks a new postmaster


def candidate_on_clone(block: int) -> bool:
    """Whether the candidates run on the second cluster in ``block``: in blocks 0 and 3 of
    every four (ABBA). The asymmetry between the clusters is taken out as half the difference
    of the two orientations' means; where it drifts (a clone's caches filling, a neighbour's
    load on one cluster's CPU), alternating ABAB put those means a block apart in time and left
    half a block's drift in every ratio. ABBA cancels a linear drift every four blocks, and
    leaves a third of ABAB's after six (the race ends after an even number). Ten A/A runs of
    server-wide knobs by duet read 8 of 10 ratios above 1, a mean of +1.6 % (se 0.7 %), under
    ABAB (``benchmarks/results/aa_default.s30-sw.md``)."""
    return block % 4 in (0, 3)


def run_duet(server: Arm, clone: Arm, configs: Sequence[Mapping[str, str]],
             labels: Sequence[str], runner: Runner, *, max_seconds: float,
             level: float = 0.95, segment_s: int = SEGMENT_S, warmup_s: int = WARMUP_S,
             min_blocks: int = MIN_BLOCKS, clone_text: str = "", short_by: int = 0,
             clock: Callable[[], float] = time.monotonic) -> DuetRace | None:
    """Race ``labels`` (``configs[0]`` the reference) by duet for ``max_seconds`` (ending
    after an even number of blocks, so by a block more at most; longer, up to twice that,
    until every candidate has the batches of two whole blocks, or all but ``short_by`` of
    them; three times it at most); None when too little was measured for an interval.
    ``clone`` is the second cluster's arm, a clone or the twin: its name is what the
    decisions call it."""
    if len(configs) != len(labels) or len(labels) < 2:
        raise ConfigError(f"a duet race needs a reference and a candidate, one configuration "
                          f"per label, but got {len(configs)} configurations for "
                          f"{len(labels)} labels")
    started = clock()
    segments: list[Segment] = []
    outcome: DuetRace | None = None
    block = 0
    per_segment = segment_s + warmup_s + 2
    while True:
        on_clone = candidate_on_clone(block)
        for k in range(1, len(configs)):
            cand, ref = configs[k], configs[0]
            server.put(ref if on_clone else cand)
            clone.put(cand if on_clone else ref)
            # one second more than the segment: the first report is a second in, and a
            # second may fail to pair; the batches then fill the segment
            paired = runner((server.dsn, clone.dsn), segment_s + warmup_s + 1, warmup_s,
                            (server.cpus, clone.cpus))
            # cluster 0 is the server: log(candidate/reference) is second/server when the
            # candidate runs on the second cluster
            logs = paired.log_ratios(1 if on_clone else 0)
            segments.append(Segment(k, on_clone, tuple(logs),
                                    paired.counts[0 if on_clone else 1], paired.seconds))
            logger.info("duet block %d: %s on the %s, %d paired seconds, skew %.2f s; its "
                        "batches read %s", block, labels[k],
                        clone.name if on_clone else server.name, len(logs), paired.skew_s,
                        " ".join(f"{math.exp(b):.3f}" for b in segments[-1].batches()))
        block += 1
        outcome = race(segments, labels, segment_s=segment_s, level=level, clone=clone_text,
                       second=clone.name)
        spent = clock() - started
        if outcome is not None and block >= min_blocks and all(
                c.interval.excludes_one for c in outcome.comparisons.values()):
            logger.info("duet: every interval excludes 1 after %d blocks", block)
            break
        # on a loaded machine a segment pairs fewer seconds than it ran (a second without a
        # report on either side): the time limit waits for the batches two whole blocks give
        enough = outcome is not None and all(
            c.batches >= 2 * (segment_s // BATCH_S) - short_by
            for c in outcome.comparisons.values())
        # the limit is looked at after an even number of blocks, where each candidate ran
        # as often on the clone as on the server (the asymmetry cancels exactly), and stops
        # once another block, at the pace so far, would not fit (the pair it starts may
        # overrun the limit by a block): an A/A at the 240-s default ran 3 blocks, 2
        # segments of a candidate on the clone against 1 on the server
        pace = max(spent / block, per_segment * (len(configs) - 1))
        if block >= 2 and block % 2 == 0 and spent + pace > max_seconds and (
                enough or spent > 2 * max_seconds) or spent > 3 * max_seconds:
            logger.info("duet: %.0f s of %.0f spent after %d blocks", spent, max_seconds, block)
            # the limit was fixed before the race: its end reads the t interval
            return race(segments, labels, segment_s=segment_s, level=level, clone=clone_text,
                        second=clone.name, ended=True)
    return outcome
