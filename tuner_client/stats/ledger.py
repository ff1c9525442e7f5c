"""One ledger of comparisons: every measured configuration's ratio to the original, carried
through the chain of paired comparisons that measured it, with its uncertainty.

A paired measurement says how a configuration compares with its *reference* (the session's
reference, the incumbent of a per-transaction search), never with the original directly: an
offline point is measured against the original, the online session's candidates against the
offline best then in force. Its absolute level (the ratio times the reference's running
level) carries the machine's drift between minutes, and levels measured under different
designs are different estimands (a per-transaction run's queries/min is not a window's).
The ledger composes the ratios instead: along a chain original → A → B,
``log(B/original) = log(A/original) + log(B/A)`` and, the links being measured in separate
blocks, their variances add. Several measurements of one configuration against one reference
are pooled first (inverse-variance), then the chains through different references are
(ignoring that they may share links: a little optimistic there, never across one chain).

On the demo the online search's best read 1.215× its own reference (the offline best) and
came to 7,939 queries/min, below an offline window's 8,885 queries/min measured minutes
earlier; ranked by levels, the offline point raced as "best" and the 1.215× candidate never
raced. Ranked by the ledger it is 1.215× the offline best's own standing over the original.

**Ranking.** The standings' points rank no configuration fairly against another measured
far less precisely: the search's highest point is the one its noise lifted most (the
winner's curse), and a duet evaluation of 3 batches read 1.05× (0.35–3.14) in a run whose
precise evaluations read 0.97–1.03×; ranked by points it raced first, at "1.20× the
original" (``benchmarks/results/aa_default.s31-abba.md``, run 0). The ranking therefore
shrinks each paired measurement toward no change by its own noise (an empirical-Bayes
posterior mean, James and Stein's estimator with the effects' spread estimated from the
run's own links: ``τ² = mean(log-ratio² − variance)``, at least :data:`MIN_EFFECT_SD`²),
and ranks by the chains of shrunk links (:meth:`Ledger.scores`). A link known to ±3 %
keeps nearly all of its effect; one known to ±100 % keeps nearly none. The standings' own
points and intervals, which the decisions show, are not shrunk.

Pure: plain Python; a configuration is the tuple of its tuned knobs' values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

from harmony_base.errors import ConfigError

Key = tuple[str, ...]

#: the relative noise of one whole-server window assumed before the run has measured its own
#: (per-window sd of log level 7–15 % on this machine: engine.designs)
DEFAULT_WINDOW_SD = 0.10
#: the normal quantile of a two-sided 95 % interval (a link's interval → its variance)
Z95 = 1.959963984540054
#: the least spread (sd of a log-ratio) of the true effects the ranking assumes: a change of
#: configuration moving the count by about 1 % is plausible before any data. It keeps a
#: run whose links all read as noise (an A/A) ranking by each link's evidence, not by ties
MIN_EFFECT_SD = 0.01


@dataclass(frozen=True)
class Link:
    """One paired measurement: ``config`` against ``reference``, ``log(config/reference)``
    and that log-ratio's variance; ``session`` and ``design`` say where it was measured."""

    reference: Key
    config: Key
    log_ratio: float
    variance: float
    session: str = ""
    design: str = "windows"


@dataclass(frozen=True)
class Standing:
    """A configuration's ratio to the original through the ledger: ``log_ratio`` and its
    ``variance``; ``links``: the paired measurements behind it, ``depth`` the length of the
    longest chain used (0: the original itself)."""

    log_ratio: float
    variance: float
    links: int
    depth: int

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    def interval(self, z: float = Z95) -> tuple[float, float]:
        """The ratio's interval at ``z`` standard errors (95 % by default)."""
        half = z * math.sqrt(max(self.variance, 0.0))
        return math.exp(self.log_ratio - half), math.exp(self.log_ratio + half)

    def text(self) -> str:
        """``1.32× the original (95 % 1.12–1.55, 3 paired measurements, chain of 2)``."""
        if self.depth == 0:
            return "the original"
        low, high = self.interval()
        return (f"{self.ratio:.2f}× the original (95 % {low:.2f}–{high:.2f}, {self.links} "
                f"paired measurement{'s' if self.links != 1 else ''}, chain of {self.depth})")


def interval_variance(low: float, high: float, level: float = 0.95) -> float | None:
    """The variance of a log-ratio from its two-sided interval (None when unbounded)."""
    if not (0.0 < low <= high < math.inf):
        return None
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    return ((math.log(high) - math.log(low)) / (2.0 * z)) ** 2


@dataclass
class Ledger:
    """The run's paired measurements (:class:`Link`) and each configuration's
    :class:`Standing` over the original (see the module docstring)."""

    names: tuple[str, ...]
    original: Key
    links: list[Link] = field(default_factory=list)
    #: log(after/before) of the windows' reference measurements around one candidate: the
    #: run's own window noise (a drift across one window is two windows' noise)
    drifts: list[float] = field(default_factory=list)
    _cache: dict[Key, Standing] | None = field(default=None, repr=False)
    _scores: dict[Key, float] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, original: Mapping[str, str]) -> Ledger:
        names = tuple(original)
        return cls(names, tuple(original[n] for n in names))

    def key(self, settings: Mapping[str, str]) -> Key:
        """The configuration ``settings`` names (a tuned knob it leaves out: the original's)."""
        return tuple(str(settings.get(n, o)) for n, o in zip(self.names, self.original,
                                                             strict=True))

    def window_variance(self) -> float:
        """The variance of one window's log level: from the run's reference drifts once it
        has two (each drift is the difference of two windows), else the default."""
        if len(self.drifts) < 2:
            return DEFAULT_WINDOW_SD ** 2
        return math.fsum(d * d for d in self.drifts) / (2.0 * len(self.drifts))

    def add(self, reference: Mapping[str, str], config: Mapping[str, str], ratio: float,
            variance: float | None = None, *, references: int = 2, session: str = "",
            design: str = "windows") -> Link | None:
        """Keep ``config``'s measured ``ratio`` to ``reference``; ``variance`` of its log
        (None: a whole-server window's, from the run's noise, beside ``references``
        measurements of the reference). None (nothing kept) for a ratio that is not a
        positive number or a configuration compared with itself."""
        if not (ratio > 0 and math.isfinite(ratio)):
            return None
        ref, cfg = self.key(reference), self.key(config)
        if ref == cfg:
            return None
        if variance is None or not (variance > 0 and math.isfinite(variance)):
            variance = self.window_variance() * (1.0 + 1.0 / max(1, references))
        link = Link(ref, cfg, math.log(ratio), variance, session, design)
        self.links.append(link)
        self._cache = self._scores = None
        return link

    def note_drift(self, before: float, after: float) -> None:
        """One window reference measured before and after a candidate (levels > 0)."""
        if before > 0 and after > 0:
            self.drifts.append(math.log(after / before))
            self._cache = self._scores = None

    def standing(self, settings: Mapping[str, str] | Key) -> Standing | None:
        """``settings``' standing over the original (None: no chain of paired measurements
        reaches it)."""
        key = settings if isinstance(settings, tuple) else self.key(settings)
        return self.standings().get(key)

    def standings(self) -> dict[Key, Standing]:
        """Every configuration a chain from the original reaches, resolved breadth first:
        a configuration's standing pools its links from configurations resolved before it
        (a link back to a later one, e.g. the original measured against the offline best,
        does not move an earlier standing)."""
        if self._cache is None:
            self._cache = _resolve(self.original, self.links)
        return self._cache

    def effect_variance(self) -> float:
        """τ², the spread of the links' true log-ratios beyond their noise: the mean over
        the links of ``log-ratio² − variance`` (moments), at least :data:`MIN_EFFECT_SD`²."""
        excess = (math.fsum(lk.log_ratio ** 2 - lk.variance for lk in self.links)
                  / len(self.links)) if self.links else 0.0
        return max(MIN_EFFECT_SD ** 2, excess)

    def scores(self) -> dict[Key, float]:
        """Each configuration's ranking score: its log-ratio to the original through the
        chains of its links, each pooled link shrunk toward no change by
        ``τ² / (τ² + variance)`` (see the module's ranking)."""
        if self._scores is None:
            resolved = _resolve(self.original, self.links, shrink=self.effect_variance())
            self._scores = {k: st.log_ratio for k, st in resolved.items()}
        return self._scores

    def score(self, settings: Mapping[str, str] | Key) -> float | None:
        """``settings``' ranking score (None: no chain reaches it)."""
        key = settings if isinstance(settings, tuple) else self.key(settings)
        return self.scores().get(key)

    def rank(self, keys: Sequence[Key]) -> list[Key]:
        """``keys`` with a standing, best first (by :meth:`scores`)."""
        sc = self.scores()
        return sorted((k for k in keys if k in sc), key=lambda k: -sc[k])


def _resolve(original: Key, links: Sequence[Link], shrink: float | None = None
             ) -> dict[Key, Standing]:
    """The standings of every configuration a chain from ``original`` reaches over
    ``links``, breadth first (see :meth:`Ledger.standings`); ``shrink``: τ², each pooled
    link shrunk toward no change by it (None: as measured)."""
    resolved: dict[Key, Standing] = {original: Standing(0.0, 0.0, 0, 0)}
    pending = list(links)
    while True:
        frontier: dict[Key, list[Link]] = {}
        for link in pending:
            if link.reference in resolved and link.config not in resolved:
                frontier.setdefault(link.config, []).append(link)
        if not frontier:
            return resolved
        for cfg, group in frontier.items():
            resolved[cfg] = _pool(group, resolved, shrink)
        pending = [lk for lk in pending if lk.config not in resolved]


def _pool(links: Sequence[Link], resolved: Mapping[Key, Standing],
          shrink: float | None = None) -> Standing:
    """One configuration's standing from its links to resolved references: per reference the
    links pooled by inverse variance (the pooled log-ratio times ``τ² / (τ² + its
    variance)`` where ``shrink`` gives τ²) plus the reference's own standing, then the
    references pooled the same way."""
    by_ref: dict[Key, list[Link]] = {}
    for link in links:
        by_ref.setdefault(link.reference, []).append(link)
    means, variances, depth, count = [], [], 0, 0
    for ref, group in by_ref.items():
        weights = [1.0 / lk.variance for lk in group]
        total = math.fsum(weights)
        mean = math.fsum(w * lk.log_ratio for w, lk in zip(weights, group, strict=True)) / total
        if shrink is not None:
            mean *= shrink / (shrink + 1.0 / total)
        base = resolved[ref]
        means.append(base.log_ratio + mean)
        variances.append(base.variance + 1.0 / total)
        depth = max(depth, base.depth + 1)
        count += len(group) + base.links
    if not means:
        raise ConfigError("a standing needs at least one link")
    weights = [1.0 / v for v in variances]
    total = math.fsum(weights)
    return Standing(math.fsum(w * m for w, m in zip(weights, means, strict=True)) / total,
                    1.0 / total, count, depth)
