"""Switchback slices analysed: configurations alternated on the whole server in short slices,
each observation attributed to the slice it started in, compared block by block.

**Design.** The run is ``blocks`` blocks of K slices, one slice per configuration in a random
order per block (:func:`balanced_order`), so every configuration runs once per block and a
drift within a block favours none on average (Bojinov, Simchi-Levi and Zhao, "Design and
analysis of switchback experiments", Management Science 2023, on randomized switchbacks).
A slice's :class:`SliceSpan` runs from the moment its configuration was in force (reload
done) to the moment the next switch began.

**Attribution.** A transaction belongs to the slice whose span holds its start, also when
it ends after the span (it is *carried* past the switch): a backend takes a reloaded value only
between commands, so a statement that started in a slice runs entirely under that slice's
configuration, and in a closed loop the transactions *started* in a span are a sample of the
mix, the template being drawn at the start. Dropping the carried ones instead (the rule until
issue 45) keeps a length-biased sample: a long statement straddles a switch more often than a
short one, and more often under the slower configuration, which then looks faster than it is
(``benchmarks/results/accuracy.r2-range.md``: the long statement straddled 16 % / 26 % of the
time under the faster / slower arm; one trace read 0.70× dropping them, 0.67× keeping them,
against pgbench's own count, 0.60×, 0.49–0.72). A carried transaction still shares the server
with the next slice's first transactions; on that trace, leaving out what started while
carried work ran, or a settle margin as long as the longest template (1.27 s), moved the
ratio by less than 0.01, and the decisions ask for slices ten times the longest template's
mean latency when it outlasts the settle margin. Dropped are only transactions that start within
``settle_s`` of the span's beginning (a backend takes a new value at its next command, and a
cache or a background writer may carry the previous configuration's state for a while: the
carry-over, measured by :mod:`tuner_client.stats.switchback_carry`), those that start between
spans (during a switch), and failed ones. With counters only (live mode:
``pg_stat_statements`` deltas), the slice's window starts ``settle_s`` after its beginning and
a call is counted when it ends; the settle margin then is the whole protection.

**Estimand and interval.** The ratio is the workload's own count
(:mod:`tuner_client.stats.estimand`: transactions per second of a mix whose clients draw
each transaction, the default; queries per second of TPC-H streams, each looping its query).
For draws, per block, the reference's slice and the candidate's slice give each arm's time
relative to what the reference's per-template costs predict for the same work (per template
t the reference's mean latency over the run, ``c_t``; an arm's value ``Σ latency / Σ c_t``),
so a slice that happened to draw a cheaper mix is not credited with a gain; for loops, each
block's pseudo-value of the completion-weighted ratio. The block's value goes to
:func:`tuner_client.stats.horizon.race_interval`: the t-mixture confidence sequence, valid at
every number of blocks at once, so a live race may stop after any block; once every planned
block has run, the end's Student t interval. Blocks are the independent units; the
transactions inside a slice share its machine state and are not counted as independent.
Bonferroni splits alpha over the candidates.

Pure: numpy only; times are seconds on one clock (the callers use ``time.time()``).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSONObject
from tuner_client.stats.drift import Drift, reference_drift
from tuner_client.stats.estimand import COUNTS, DRAWN, DRAWS, Estimand
from tuner_client.stats.horizon import method_words, race_interval
from tuner_client.stats.levels import simultaneous_level
from tuner_client.stats.paired import Method, RatioInterval
from tuner_client.stats.race_outcome import DesignRace
from tuner_client.stats.sequential import CITATION, METHOD

#: the design's name in the decisions and in summary.json
DESIGN = "switchback"
#: the share of transactions carried past a switch above which the decisions warn: they are
#: kept (attributed to the slice they started in), but their work spills into the next
#: slice, whose configuration then shares the server with the previous one's long statements
CARRIED_WARNING = 0.05
#: slices this many times the longest template's mean latency keep the carried work under
#: about a tenth of a slice (at most one such transaction per client runs on past a switch)
SLICE_PER_LONGEST = 10
#: the interval method, as summary.json names it
METHOD_TEXT = (f"{METHOD} ({CITATION}) over per-block log speedups, work-weighted "
               f"per-template costs; one slice per configuration per block")


def balanced_order(configurations: int, blocks: int, seed: int = 0) -> list[tuple[int, int]]:
    """``(block, configuration)`` per slice: every block holds each configuration once, in
    an order drawn at random per block (seeded)."""
    if configurations < 2 or blocks < 1:
        raise ConfigError(f"a switchback needs at least 2 configurations and 1 block, but got "
                          f"{configurations} configurations and {blocks} blocks")
    # seeded through a hash: Python's own string seeding gave nearby seeds nearly the same
    # first draws ("switchback/0" to "/4" all drew 0.83-0.86), so runs that should order
    # their slices independently shared one order, and a concurrent switchback's load could
    # fall on the same configuration in every block
    digest = hashlib.sha256(f"switchback/{seed}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    out: list[tuple[int, int]] = []
    for block in range(blocks):
        order = list(range(configurations))
        rng.shuffle(order)
        out += [(block, k) for k in order]
    return out


@dataclass(frozen=True)
class SliceSpan:
    """One slice: its block, its configuration, and when it ran (``begin``: its configuration
    in force; ``end``: the next switch began)."""

    block: int
    config: int
    begin: float
    end: float


@dataclass(frozen=True)
class SliceTotals:
    """Per slice (rows, in the order of ``spans``) and template (columns): the busy seconds
    and the observations kept; ``dropped`` counts what attribution left out, by reason;
    ``carried`` how many kept transactions ended after their slice (0 with counters)."""

    spans: tuple[SliceSpan, ...]
    sums: np.ndarray
    counts: np.ndarray
    dropped: Mapping[str, int]
    carried: int = 0

    @property
    def kept(self) -> int:
        return int(self.counts.sum())

    @property
    def longest_mean_s(self) -> float:
        """The largest per-template mean of the kept observations (s; 0 when none)."""
        n, total = self.counts.sum(axis=0), self.sums.sum(axis=0)
        return float((total[n > 0] / n[n > 0]).max(initial=0.0))


def _check_spans(spans: Sequence[SliceSpan]) -> None:
    for a, b in zip(spans, spans[1:], strict=False):
        if not a.begin < a.end <= b.begin:
            raise ConfigError(f"slice spans must be ordered and disjoint, but slice {a} is "
                              f"followed by {b}")


def attribute(spans: Sequence[SliceSpan], start: np.ndarray, latency: np.ndarray,
              ok: np.ndarray, *, settle_s: float) -> tuple[np.ndarray, dict[str, int], int]:
    """Each transaction's slice (index into ``spans``; -1 when dropped), the counts of the
    dropped ones: ``settling`` (started within ``settle_s`` of its slice's beginning),
    ``between`` (started outside every slice, e.g. during a switch or before the first) and
    ``failed``; and how many of the kept ones were carried past their slice's end."""
    _check_spans(spans)
    if settle_s < 0:
        raise ConfigError(f"settle_s must be >= 0 seconds, but got {settle_s}")
    begins = np.array([s.begin for s in spans], dtype=float)
    ends = np.array([s.end for s in spans], dtype=float)
    idx = np.searchsorted(begins, start, side="right") - 1
    inside = (idx >= 0) & (start < ends[np.clip(idx, 0, None)])
    safe = np.clip(idx, 0, None)
    settling = inside & (start < begins[safe] + settle_s)
    failed = inside & ~settling & ~ok
    keep = inside & ~settling & ok
    carried = keep & (start + latency > ends[safe])
    dropped = {"settling": int(settling.sum()), "between": int((~inside).sum()),
               "failed": int(failed.sum())}
    return np.where(keep, idx, -1), dropped, int(carried.sum())


def totals_from_transactions(spans: Sequence[SliceSpan], template: np.ndarray,
                             start: np.ndarray, latency: np.ndarray, ok: np.ndarray, *,
                             settle_s: float) -> SliceTotals:
    """Per-slice busy seconds and counts per template from per-transaction observations
    (``start`` on the spans' clock), each in the slice it started in."""
    where, dropped, carried = attribute(spans, start, latency, ok, settle_s=settle_s)
    keep = where >= 0
    shape = (len(spans), int(template.max(initial=-1)) + 1)
    sums, counts = np.zeros(shape), np.zeros(shape)
    np.add.at(sums, (where[keep], template[keep].astype(int)), latency[keep])
    np.add.at(counts, (where[keep], template[keep].astype(int)), 1)
    return SliceTotals(tuple(spans), sums, counts, dropped, carried)


def totals_from_deltas(spans: Sequence[SliceSpan],
                       deltas: Sequence[Mapping[str, tuple[int, float]]]) -> SliceTotals:
    """Per-slice totals from counter deltas, one mapping per slice of template (a
    ``queryid``; or one pseudo-template of committed transactions over the window's seconds)
    to ``(calls, busy seconds)``."""
    if len(deltas) != len(spans):
        raise ConfigError(f"one counter delta per slice is needed, but got {len(deltas)} for "
                          f"{len(spans)} slices")
    names = sorted({q for d in deltas for q in d})
    index = {q: i for i, q in enumerate(names)}
    sums, counts = np.zeros((len(spans), len(names))), np.zeros((len(spans), len(names)))
    for s, delta in enumerate(deltas):
        for q, (calls, busy) in delta.items():
            if calls > 0 and busy >= 0:
                sums[s, index[q]], counts[s, index[q]] = busy, calls
    return SliceTotals(tuple(spans), sums, counts, {})


def block_log_speedups(totals: SliceTotals, reference: int, candidate: int,
                       estimand: Estimand = DRAWN) -> np.ndarray:
    """Per block holding both configurations with observations: ``log`` of the candidate's
    work-weighted speed over the reference's (above 0: the candidate is faster)."""
    pairs: dict[int, dict[int, int]] = {}
    for row, span in enumerate(totals.spans):
        if span.config in (reference, candidate) and totals.counts[row].sum() > 0:
            pairs.setdefault(span.block, {})[span.config] = row
    rows = [(p[reference], p[candidate]) for _, p in sorted(pairs.items())
            if reference in p and candidate in p]
    if not rows:
        return np.zeros(0)
    ref, cand = zip(*rows, strict=True)
    sums = np.stack([totals.sums[list(ref)], totals.sums[list(cand)]], axis=-1)
    counts = np.stack([totals.counts[list(ref)], totals.counts[list(cand)]], axis=-1)
    return estimand.slice_log_speedups(sums, counts)


@dataclass(frozen=True)
class SwitchbackComparison:
    """A candidate against the reference from one switchback run."""

    reference: int
    candidate: int
    #: the confidence sequence's value at the blocks observed (method ``anytime``)
    interval: RatioInterval
    blocks: int
    #: observations kept (reference, candidate): transactions, or calls with counters
    observations: tuple[int, int]
    #: each block's log speedup, in time order (the race's running interval)
    block_logs: tuple[float, ...] = ()

    @property
    def half_width(self) -> float:
        """Half the interval's width on the log scale (0.03: ±3 %); inf while unbounded."""
        if self.interval.low <= 0 or not math.isfinite(self.interval.high):
            return math.inf
        return 0.5 * (math.log(self.interval.high) - math.log(self.interval.low))

    def text(self) -> str:
        """``1.07× (95 % anytime-valid CI 1.02–1.12), switchback: 24 blocks``."""
        return (f"{self.interval.text()}, switchback: {self.blocks} blocks, "
                f"{sum(self.observations):,} observations kept")


def compare(totals: SliceTotals, reference: int = 0, candidate: int = 1, *,
            level: float = 0.95, estimand: Estimand = DRAWN, ended: bool = False
            ) -> SwitchbackComparison:
    """The candidate's work-weighted speedup over the reference with its interval over
    blocks at ``level`` (:func:`tuner_client.stats.horizon.race_interval`: the confidence
    sequence, bounds 0/inf while it is still unbounded; ``ended``: the race ran every block
    it planned, and the end's t interval)."""
    if not 0.0 < level < 1.0:
        raise ConfigError(f"the confidence level must be between 0 and 1, but got {level}")
    logs = block_log_speedups(totals, reference, candidate, estimand)
    interval = race_interval(logs.tolist(), level=level, ended=ended)
    if interval is None:
        raise ConfigError(f"a switchback comparison needs at least 2 blocks holding both "
                          f"configurations {reference} and {candidate} with observations, "
                          f"but got {logs.size}; run more blocks")
    configs = np.array([s.config for s in totals.spans])
    kept = totals.counts.sum(axis=1)
    return SwitchbackComparison(reference, candidate, interval, int(logs.size),
                                (int(kept[configs == reference].sum()),
                                 int(kept[configs == candidate].sum())),
                                tuple(logs.tolist()))


@dataclass(frozen=True)
class SwitchbackRace(DesignRace[SwitchbackComparison]):
    """Every candidate against the reference from one switchback run, and the decision: its
    observations are blocks (``rounds`` and each interval's ``n``)."""

    design: ClassVar[str] = DESIGN
    design_words: ClassVar[str] = "switchback"
    method: ClassVar[Method] = "anytime"
    method_text: ClassVar[str] = METHOD_TEXT
    unit: ClassVar[str | None] = "block"
    horizon: ClassVar[bool] = True

    slice_s: float
    settle_s: float
    slices: int
    dropped: Mapping[str, int]
    #: what was counted: ``transactions`` (a driven workload) or a counters' description
    source: str = "transactions"
    #: observations kept over all slices
    kept: int = 0
    #: kept transactions that ended after their slice (carried past the switch)
    carried: int = 0
    #: the longest template's mean latency (s; 0 with counters, whose calls end in the window)
    longest_s: float = 0.0
    #: what the ratios count (:data:`tuner_client.stats.estimand.COUNTS`)
    counts: str = COUNTS[DRAWS]
    #: the reference's own level over its slices (None: too few slices)
    drift: Drift | None = None
    #: the race ran every block it planned: its intervals are the end's t intervals
    ended: bool = False

    def interval_method(self) -> Method:
        return "t" if self.ended else "anytime"

    def interval_method_text(self) -> str:
        return f"{method_words(self.ended)}, over blocks of paired slices"

    def design_line(self) -> str:
        dropped = ", ".join(f"{n} {why}" for why, n in self.dropped.items() if n) or "none"
        carried = (f"; {self.carried} carried past a switch, kept in the slice they started in"
                   if self.carried else "")
        return (f"final race measured by {DESIGN}: {self.slices} slices of {self.slice_s:g} s "
                f"(ALTER SYSTEM + reload between them), one per configuration per block in a "
                f"random order; the ratio counts {self.counts}; {self.source} attributed to "
                f"the slice they started in, the "
                f"first {self.settle_s:g} s of each slice left out; dropped: {dropped}"
                f"{carried}; intervals at {100 * self.level:.4g} % (Bonferroni over "
                f"{len(self.comparisons)} candidates) over blocks: {method_words(self.ended)}")

    def notes(self) -> list[str]:
        if not (self.carried and (self.carried > CARRIED_WARNING * self.kept
                                  or self.longest_s > self.settle_s)):
            return []
        # kept, so no sample bias; but their work runs on into the next slice, beside the
        # next configuration's first transactions, which compresses the ratios
        return [f"{self.carried} of {self.kept} transactions ran past a switch (kept "
                f"in the slice they started in) and the longest statement takes "
                f"{self.longest_s:.2g} s on average, against a settle margin of "
                f"{self.settle_s:g} s: their work spills into the next slice; slices "
                f"of {SLICE_PER_LONGEST * self.longest_s:.2g} s or more "
                f"(measure.slice_s) keep that under a tenth of a slice"]

    def observations(self, comparison: SwitchbackComparison) -> int:
        return comparison.blocks

    def running_logs(self, comparison: SwitchbackComparison) -> Sequence[float]:
        """The blocks' log speedups (the trace's last step is the decision's plain
        interval)."""
        return comparison.block_logs

    def summary_fields(self) -> JSONObject:
        return {"slice_s": self.slice_s, "settle_s": self.settle_s, "slices": self.slices,
                "dropped": dict(self.dropped), "carried": self.carried,
                "longest_s": self.longest_s, "source": self.source}

    def comparison_fields(self, label: str, comparison: SwitchbackComparison) -> JSONObject:
        return {"blocks": comparison.blocks, "observations": list(comparison.observations)}


def race(totals: SliceTotals, labels: Sequence[str], *, slice_s: float, settle_s: float,
         level: float = 0.95, source: str = "transactions", estimand: Estimand = DRAWN,
         ended: bool = False) -> SwitchbackRace:
    """Configuration 0 (``labels[0]``) is the reference, every other one a candidate; the
    winner is the best candidate whose simultaneous interval lies above 1 (else none);
    ``estimand``: what the ratios count (the workload's client model); ``ended``: every
    planned block ran (:mod:`tuner_client.stats.horizon`)."""
    if len(labels) < 2:
        raise ConfigError(f"a race needs a reference and at least one candidate, but got "
                          f"{len(labels)} labels")
    m = len(labels) - 1
    simultaneous = simultaneous_level(level, m)
    comparisons = {labels[k]: compare(totals, 0, k, level=simultaneous, estimand=estimand,
                                      ended=ended)
                   for k in range(1, len(labels))}
    plain = {labels[k]: compare(totals, 0, k, level=level, estimand=estimand, ended=ended)
             for k in range(1, len(labels))}
    clear = [label for label, r in comparisons.items() if r.interval.above_one]
    winner = max(clear, key=lambda label: comparisons[label].interval.ratio, default=None)
    return SwitchbackRace(labels[0], comparisons, plain, winner, simultaneous, level, slice_s,
                          settle_s, len(totals.spans), dict(totals.dropped), source, totals.kept,
                          totals.carried,
                          totals.longest_mean_s if source == "transactions" else 0.0,
                          counts=estimand.text(), drift=reference_drift_of(totals, settle_s),
                          ended=ended)


def reference_drift_of(totals: SliceTotals, settle_s: float, reference: int = 0
                       ) -> Drift | None:
    """The reference's drift over its slices (:mod:`tuner_client.stats.drift`): each
    slice's kept observations per second of its settled span, at the span's middle."""
    rows = [(0.5 * (span.begin + span.end), float(totals.counts[row].sum())
             / (span.end - span.begin - settle_s))
            for row, span in enumerate(totals.spans)
            if span.config == reference and span.end - span.begin > settle_s]
    return reference_drift([t for t, _ in rows], [v for _, v in rows], unit="slices")
