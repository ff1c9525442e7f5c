"""The final decision: recommend the search's best candidate only when its interval of
tuned/reference lies above 1 and it is stable; otherwise keep the original, and say why with
the interval.

The final rounds measure every label (the reference, e.g. ``default``; the baselines, e.g.
``pgtune``; the search's candidates) once per round, interleaved, so each label's ratio to
the reference is paired by round. Picking the best of m candidates and then testing it at
95 % would claim a gain up to m times too often, so the winner must clear a Bonferroni
level (1 − 0.05/m), and the interval printed for it (and ``improvement_ci``) is that
simultaneous one: a plain 95 % interval of the best of m covers its true ratio less often
(synthetic, 300 seeds, raced rounds: 80.5 % for the best of three candidates two of which are
truly 1.05×, 92.1 % for one truly 1.08×; the simultaneous interval 93.5 % and 95.5 %). The
other labels keep their plain 95 % intervals. Stopping the rounds
early is allowed only on a strict level (Haybittle–Peto in spirit), so taking "as many rounds
as the interval needs" does not inflate false claims.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harmony.base.errors import ConfigError
from tuner_client.stats.paired import Method, RatioInterval, paired_ratio_interval
from tuner_client.stats.unstable import degrade_reason, spread_reason

logger = logging.getLogger(__name__)

Round = Mapping[str, float | None]

#: an early stop of the final rounds needs the winner's interval at this level to exclude 1;
#: at the round limit the ordinary level applies (measured with the race of the final rounds:
#: A/A false claims 3.2 %, 2.0 % for the best of 3 identical candidates,
#: tests/test_stats_decision.py)
EARLY_LEVEL = 0.99


@dataclass(frozen=True)
class FinalDecision:
    """What the final rounds concluded. ``improvement``/``improvement_ci`` are fractions
    (0.18 = +18 %) of the winner's ratio to the reference, the interval simultaneous over the
    candidates (at ``decision_level``): 0.0 / None when the original is kept; ``best`` and
    ``intervals`` (plain, at ``level``) still carry the best candidate's evidence then."""

    winner: str | None
    reference: str
    best: str | None
    intervals: dict[str, RatioInterval | None]
    unstable: dict[str, str]
    lines: tuple[str, ...]
    rounds: int
    level: float
    decision_level: float
    improvement: float = 0.0
    improvement_ci: tuple[float, float] | None = None
    baselines: tuple[str, ...] = field(default=())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def to_dict(self) -> dict[str, Any]:
        """The decision for summary.json."""
        return {"winner": self.winner, "reference": self.reference, "best": self.best,
                "rounds": self.rounds, "level": self.level,
                "decision_level": self.decision_level, "improvement": self.improvement,
                "improvement_ci": list(self.improvement_ci) if self.improvement_ci else None,
                "intervals": {k: (None if v is None else
                                  {"ratio": v.ratio, "low": v.low, "high": v.high, "n": v.n})
                              for k, v in self.intervals.items()},
                "unstable": dict(self.unstable), "text": list(self.lines)}


def _series(rounds: Sequence[Round], label: str) -> list[float | None]:
    return [r.get(label) for r in rounds]


def _labels(rounds: Sequence[Round], reference: str, baselines: Sequence[str],
            candidates: Sequence[str] | None) -> list[str]:
    if candidates is not None:
        return list(candidates)
    seen: dict[str, None] = {}
    for r in rounds:
        for label in r:
            if label != reference and label not in baselines:
                seen.setdefault(label, None)
    return list(seen)


def decide(rounds: Sequence[Round], *, reference: str = "default",
           baselines: Sequence[str] = ("pgtune",), candidates: Sequence[str] | None = None,
           level: float = 0.95, method: Method = "t", seed: int = 0,
           search_ratios: Mapping[str, Sequence[float]] | None = None,
           names: Mapping[str, str] | None = None) -> FinalDecision:
    """Judge the final rounds (dicts label → value, paired by round, in time order).

    ``candidates`` default to every label that is neither the reference nor a baseline.
    ``search_ratios``: a candidate's paired ratios measured during the search, in order; the
    final rounds' ratios are appended to them for the degrade check. ``names``: how a label
    is printed (e.g. ``{"pgtune": "PGTune rules", "c1": "tuned"}``).
    """
    if not rounds:
        raise ConfigError("the decision needs at least one final round, but got none")
    names = dict(names or {})
    cands = _labels(rounds, reference, baselines, candidates)
    ref_values = _series(rounds, reference)
    intervals: dict[str, RatioInterval | None] = {}
    for label in [*baselines, *cands]:
        intervals[label] = paired_ratio_interval(_series(rounds, label), ref_values,
                                                 level=level, method=method, seed=seed)
    unstable: dict[str, str] = {}
    for label in cands:
        values = _series(rounds, label)
        reason = spread_reason(values, ref_values)
        if reason is None and search_ratios and search_ratios.get(label):
            final = [c / r if c and r else None for c, r in zip(values, ref_values, strict=True)]
            earlier = list(search_ratios[label])
            reason = degrade_reason([*earlier, *final], first=len(earlier))
        if reason is not None:
            unstable[label] = reason
    eligible = [c for c in cands if c not in unstable and intervals[c] is not None]
    m = max(1, len(eligible))
    decision_level = 1.0 - (1.0 - level) / m
    best = max(eligible, key=lambda c: intervals[c].ratio) if eligible else None  # type: ignore[union-attr]
    winner: str | None = None
    strict: RatioInterval | None = None
    if best is not None:
        strict = paired_ratio_interval(_series(rounds, best), ref_values, level=decision_level,
                                       method=method, seed=seed)
        if strict is not None and strict.above_one:
            winner = best

    def name(label: str) -> str:
        return names.get(label, label)

    ref_name = name(reference)
    lines: list[str] = []
    if winner is not None:
        assert strict is not None
        shown = strict.text() if m == 1 else (
            f"{strict.ratio:.2f}× ({100 * level:.0f} % CI {strict.low:.2f}–{strict.high:.2f} "
            f"simultaneous over {m} candidates, i.e. {100 * decision_level:.1f} % each)")
        lines.append(f"recommending {name(winner)}: {name(winner)}/{ref_name} {shown}"
                     f" over {strict.n} rounds")
    else:
        why = "no stable candidate" if best is None else "no significant improvement"
        lines.append(f"{why}; keeping the original ({ref_name})")
        if best is not None:
            iv = intervals[best]
            assert iv is not None
            lines.append(f"  best candidate {name(best)}/{ref_name} {iv.text()} over {iv.n} "
                         "rounds: the interval includes 1" if iv.low <= 1.0 else
                         f"  best candidate {name(best)}/{ref_name} {iv.text()}: above 1 at "
                         f"{100 * level:.0f} % but not at the {100 * decision_level:.1f} % "
                         f"needed for the best of {m} candidates")
    for label in [*baselines, *cands]:
        if label == winner or (winner is None and label == best):
            continue
        iv = intervals.get(label)
        shown = iv.text() if iv is not None else "not enough paired rounds"
        lines.append(f"  {name(label)}/{ref_name} {shown}")
    for label, reason in unstable.items():
        lines.append(f"  {name(label)} is unstable and not recommended: {reason}")
    improvement, improvement_ci = 0.0, None
    if winner is not None and strict is not None:
        improvement, improvement_ci = strict.fractions()
    return FinalDecision(winner=winner, reference=reference, best=best, intervals=intervals,
                         unstable=unstable, lines=tuple(lines), rounds=len(rounds), level=level,
                         decision_level=decision_level, improvement=improvement,
                         improvement_ci=improvement_ci, baselines=tuple(baselines))

