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
other labels keep their plain 95 % intervals.

The rounds come from a race that looked at them after every round and stopped when it chose
to, so the intervals (``method="anytime"``, the default) are the race's anytime-valid
confidence sequences (:mod:`tuner_client.stats.sequential`) at the number of rounds it ran:
they hold whatever the stopping rule was, which a fixed-n interval does not (checked after
every round it claims a gain too often: ``benchmarks/anytime_race.py``). The Bonferroni
split is then over every candidate that raced, as in the race, not only the stable ones:
the candidates were compared at that level from the first round. ``method="t"`` (fixed-n
Student t, the earlier rule) remains for rounds whose number was fixed in advance.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSONObject
from tuner_client.stats.levels import simultaneous_level
from tuner_client.stats.paired import Method, RatioInterval, paired_ratio_interval
from tuner_client.stats.sequential import CITATION, METHOD
from tuner_client.stats.unstable import degrade_reason, spread_reason

logger = logging.getLogger(__name__)

Round = Mapping[str, float | None]

#: by the earlier fixed-n rule (``method="t"``), an early stop of the race needed the winner's
#: interval at this level to exclude 1; confidence sequences need no such guard
EARLY_LEVEL = 0.99

#: how each method is named in the decisions and in summary.json
METHOD_NAMES: dict[str, str] = {
    "anytime": f"{METHOD} ({CITATION})",
    "t": "fixed-n Student t interval",
    "bootstrap": "fixed-n percentile bootstrap interval",
}
#: what the decisions add about each method
METHOD_NOTES: dict[str, str] = {
    "anytime": "on the paired log-ratios, valid at whichever round the race stopped",
    "t": "on the paired log-ratios, valid for a number of rounds fixed in advance",
    "bootstrap": "on the paired log-ratios, valid for a number of rounds fixed in advance",
}


@dataclass(frozen=True)
class FinalDecision:
    """What the final rounds concluded. ``improvement``/``improvement_ci`` are fractions
    (0.18 = +18 %) of the winner's ratio to the reference, the interval simultaneous over the
    candidates (at ``decision_level``): 0.0 / None when the original is kept; ``best`` and
    ``intervals`` (plain, at ``level``) still carry the best candidate's evidence then.
    ``method``: how the intervals were computed (a key of :data:`METHOD_NAMES`)."""

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
    method: Method = "anytime"
    #: the measurement design: ``windows`` (paired rounds) or ``per-transaction``
    design: str = "windows"
    #: per-transaction design: transactions behind the shown interval (reference, candidate)
    transactions: tuple[int, int] | None = None
    #: the interval method's name when the design names its own (else ``METHOD_NAMES``)
    method_text: str | None = None
    #: duet: what its second cluster was, ``clone`` (made by the run) or ``twin``
    #: (``database.twin``); None for the other designs
    second: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def to_dict(self) -> JSONObject:
        """The decision for summary.json: ``method`` names the interval method,
        ``observations`` the paired observations behind the winner's (else the best
        candidate's) interval, and each interval its own ``n``."""
        shown = self.winner or self.best
        iv = self.intervals.get(shown) if shown is not None else None
        return {"winner": self.winner, "reference": self.reference, "best": self.best,
                "design": self.design,
                "transactions": list(self.transactions) if self.transactions else None,
                "method": self.method_text or METHOD_NAMES[self.method],
                # per transaction: the transactions behind the interval, else paired rounds
                "observations": (sum(self.transactions) if self.transactions
                                 else iv.n if iv is not None else 0),
                "rounds": self.rounds, "level": self.level,
                "decision_level": self.decision_level, "improvement": self.improvement,
                "improvement_ci": list(self.improvement_ci) if self.improvement_ci else None,
                # an unbounded confidence sequence (too few rounds yet) has no finite high: null
                "intervals": {k: (None if v is None else
                                  {"ratio": v.ratio, "low": v.low,
                                   "high": v.high if math.isfinite(v.high) else None,
                                   "n": v.n, "method": v.method})
                              for k, v in self.intervals.items()},
                "unstable": dict(self.unstable), "text": list(self.lines),
                **({"second": self.second} if self.second is not None else {})}


def race_verdict(winner: str | None, reference: str,
                 simultaneous: Mapping[str, RatioInterval], design_words: str) -> str:
    """A single-run race's decision in one line; ``design_words`` names the design (e.g.
    ``per transaction``)."""
    if winner is None:
        return f"kept {reference}: no candidate's interval lies above 1 ({design_words})"
    return (f"recommend {winner}: {simultaneous[winner].text()} over {reference}, "
            f"simultaneous over {len(simultaneous)} candidates ({design_words})")


def race_decision(*, winner: str | None, reference: str,
                  plain: Mapping[str, RatioInterval], simultaneous: Mapping[str, RatioInterval],
                  rounds: Mapping[str, int], lines: Sequence[str], level: float,
                  decision_level: float, method: Method, design: str, method_text: str,
                  transactions: Mapping[str, tuple[int, int]] | None = None) -> FinalDecision:
    """A race measured in one design (per transaction, switchback) as a
    :class:`FinalDecision`: every candidate's plain interval, the best by its plain ratio, and
    the winner's (else the best's) simultaneous interval as the improvement when there is a
    winner. ``rounds``/``transactions``: each candidate's observations (slices or blocks,
    and the transactions of reference and candidate)."""
    best = max(plain, key=lambda label: plain[label].ratio)
    shown = winner or best
    improvement, ci = simultaneous[shown].fractions()
    return FinalDecision(
        winner=winner, reference=reference, best=best, intervals=dict(plain), unstable={},
        lines=tuple(lines), rounds=rounds[shown], level=level, decision_level=decision_level,
        improvement=improvement if winner is not None else 0.0,
        improvement_ci=ci if winner is not None else None, method=method, design=design,
        transactions=transactions[shown] if transactions is not None else None,
        method_text=method_text)


def split_decision(first: FinalDecision | None, second: FinalDecision | None,
                   whole: RatioInterval | None, changed: Mapping[str, str], *, level: float,
                   design: str) -> FinalDecision:
    """A race split in two stages as one decision: each stage's intervals (named by its
    part), their lines, and the product of the claimed parts' intervals (``whole``, None
    when neither part was claimed) as the recommendation of ``changed``."""
    intervals: dict[str, RatioInterval | None] = {}
    for stage, decision in (("session part", first), ("restart part", second)):
        for label, iv in (decision.intervals.items() if decision is not None else ()):
            intervals[f"{label} ({stage})"] = iv
    lines = [*(first.lines if first is not None else ()),
             *(f"restart part: {line}" for line in (second.lines if second is not None else ()))]
    winner = None
    if whole is not None:
        winner = "tuned"
        intervals[winner] = whole
        lines.append(f"recommending {dict(changed)}: {whole.ratio:.2f}× the original "
                     f"({100 * whole.level:.0f} % CI {whole.low:.2f}–{whole.high:.2f}, the "
                     f"product of the claimed parts' intervals, each at half the error rate)")
    else:
        lines.append("no part measured clearly better than the original; keeping the "
                     "original")
    return FinalDecision(
        winner=winner, reference="default",
        best=winner or (f"{first.best} (session part)" if first and first.best else None),
        intervals=intervals, unstable={}, lines=tuple(lines),
        rounds=second.rounds if second is not None else 0, level=level,
        decision_level=level,
        improvement=whole.ratio - 1.0 if whole is not None else 0.0,
        improvement_ci=(whole.low - 1.0, whole.high - 1.0) if whole is not None else None,
        method="anytime", design=design,
        transactions=first.transactions if first is not None else None,
        method_text="session part: its design's interval; restart part: anytime-valid "
                    "confidence sequence over paired windows; product of the two")


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
           level: float = 0.95, method: Method = "anytime", seed: int = 0,
           search_ratios: Mapping[str, Sequence[float]] | None = None,
           names: Mapping[str, str] | None = None, also_compared: int = 0) -> FinalDecision:
    """Judge the final rounds (dicts label → value, paired by round, in time order).

    ``candidates`` default to every label that is neither the reference nor a baseline.
    ``search_ratios``: a candidate's paired ratios measured during the search, in order; the
    final rounds' ratios are appended to them for the degrade check. ``names``: how a label
    is printed (e.g. ``{"pgtune": "PGTune rules", "c1": "tuned"}``). ``method``: ``anytime``
    for raced rounds (confidence sequences, Bonferroni over every candidate), ``t`` or
    ``bootstrap`` for a number of rounds fixed in advance (Bonferroni over the stable ones).
    ``also_compared``: candidates compared before these rounds and not measured in them (a
    per-transaction stage chose among them); the Bonferroni split counts them too.
    """
    if not rounds:
        raise ConfigError("the decision needs at least one final round, but got none")
    cands = _labels(rounds, reference, baselines, candidates)
    ref_values = _series(rounds, reference)
    intervals: dict[str, RatioInterval | None] = {}
    for label in [*baselines, *cands]:
        intervals[label] = paired_ratio_interval(_series(rounds, label), ref_values,
                                                 level=level, method=method, seed=seed)
    unstable = _unstable_candidates(rounds, cands, ref_values, search_ratios)
    pick = _pick_winner(rounds, cands, intervals, unstable, ref_values, level=level,
                        method=method, seed=seed, also_compared=also_compared)
    lines = _decision_lines(pick, intervals, unstable, reference=reference,
                            labels=[*baselines, *cands], names=dict(names or {}), level=level,
                            method=method)
    improvement, improvement_ci = 0.0, None
    if pick.winner is not None and pick.strict is not None:
        improvement, improvement_ci = pick.strict.fractions()
    return FinalDecision(winner=pick.winner, reference=reference, best=pick.best,
                         intervals=intervals, unstable=unstable, lines=tuple(lines),
                         rounds=len(rounds), level=level, decision_level=pick.decision_level,
                         improvement=improvement, improvement_ci=improvement_ci,
                         baselines=tuple(baselines), method=method)


def _unstable_candidates(rounds: Sequence[Round], cands: Sequence[str],
                         ref_values: Sequence[float | None],
                         search_ratios: Mapping[str, Sequence[float]] | None) -> dict[str, str]:
    """Candidate → why it is unstable: too wide a spread in the final rounds, or (given its
    ratios from the search) a degrade from the search to the final rounds."""
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
    return unstable


@dataclass(frozen=True)
class _Pick:
    """The best stable candidate, its interval at the Bonferroni level over ``m`` candidates
    (``strict``), and the winner: the best when that interval lies above 1."""

    best: str | None
    winner: str | None
    strict: RatioInterval | None
    m: int
    decision_level: float


def _pick_winner(rounds: Sequence[Round], cands: Sequence[str],
                 intervals: Mapping[str, RatioInterval | None], unstable: Mapping[str, str],
                 ref_values: Sequence[float | None], *, level: float, method: Method,
                 seed: int, also_compared: int = 0) -> _Pick:
    """Bonferroni over every raced candidate (``anytime``) or the stable ones (fixed n), and
    ``also_compared`` more."""
    eligible = [c for c in cands if c not in unstable and intervals[c] is not None]
    m = max(1, (len(cands) if method == "anytime" else len(eligible)) + also_compared)
    decision_level = simultaneous_level(level, m)
    ratios = {c: iv.ratio for c in eligible if (iv := intervals[c]) is not None}
    best = max(ratios, key=lambda c: ratios[c]) if ratios else None
    winner: str | None = None
    strict: RatioInterval | None = None
    if best is not None:
        strict = paired_ratio_interval(_series(rounds, best), ref_values, level=decision_level,
                                       method=method, seed=seed)
        if strict is not None and strict.above_one:
            winner = best
    return _Pick(best=best, winner=winner, strict=strict, m=m, decision_level=decision_level)


def _decision_lines(pick: _Pick, intervals: Mapping[str, RatioInterval | None],
                    unstable: Mapping[str, str], *, reference: str, labels: Sequence[str],
                    names: Mapping[str, str], level: float, method: Method) -> list[str]:
    """The decision in words: the verdict with its interval, then every other label's."""
    winner, best, strict, m = pick.winner, pick.best, pick.strict, pick.m
    decision_level = pick.decision_level

    def name(label: str) -> str:
        return names.get(label, label)

    ref_name = name(reference)
    lines: list[str] = []
    if winner is not None:
        assert strict is not None
        kind = "anytime-valid CI" if method == "anytime" else "CI"
        shown = strict.text() if m == 1 else (
            f"{strict.ratio:.2f}× ({100 * level:.0f} % {kind} {strict.low:.2f}–{strict.high:.2f} "
            f"simultaneous over {m} candidates, i.e. {100 * decision_level:.1f} % each)")
        lines.append(f"recommending {name(winner)}: {name(winner)}/{ref_name} {shown}"
                     f" over {strict.n} paired rounds in windows")
    else:
        why = "no stable candidate" if best is None else "no significant improvement"
        lines.append(f"{why}; keeping the original ({ref_name})")
        if best is not None:
            iv = intervals[best]
            assert iv is not None
            lines.append(f"  best candidate {name(best)}/{ref_name} {iv.text()} over {iv.n} "
                         "paired rounds in windows: the interval includes 1" if iv.low <= 1.0 else
                         f"  best candidate {name(best)}/{ref_name} {iv.text()} over {iv.n} "
                         f"paired rounds in windows: above 1 at "
                         f"{100 * level:.0f} % but not at the {100 * decision_level:.1f} % "
                         f"needed for the best of {m} candidates")
    for label in labels:
        if label == winner or (winner is None and label == best):
            continue
        iv = intervals.get(label)
        shown = f"{iv.text()} over {iv.n} paired rounds in windows" if iv is not None \
            else "not enough paired rounds in windows"
        lines.append(f"  {name(label)}/{ref_name} {shown}")
    for label, reason in unstable.items():
        lines.append(f"  {name(label)} is unstable and not recommended: {reason}")
    lines.append(f"  intervals: {METHOD_NAMES[method]} {METHOD_NOTES[method]}")
    return lines
