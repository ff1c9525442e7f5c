"""What ``summary.json`` carries for ``harmony report`` beyond the result itself: the race
round by round, every measurement's paired ratio beside its reference, and the unit.

The report (:mod:`harmony_report`) sits below the tuner and cannot recompute a paired
interval, so the tuner writes down what the race saw: after each round, each label's ratio to
the reference with its interval over the rounds so far (the interval the race judged, at the
decision's level and by its method), where a candidate left the race and why, and why the
race stopped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSON, JSONObject
from tuner_client.measurer import PointRecord
from tuner_client.stats.paired import Method, paired_ratio_interval

logger = logging.getLogger(__name__)

_DROPPED = re.compile(r"^final: (?P<label>\S+) dropped after (?P<after>\d+) rounds: (?P<why>.*)$",
                      re.S)
#: labels of ``ab_rounds`` that are copies, not measurements (``tuned`` repeats the winner's)
COPIED_LABELS = ("tuned",)


def race_trace(rounds: Sequence[Mapping[str, float | None]], decision: Mapping[str, Any] | None,
               decisions: Sequence[str]) -> JSONObject | None:
    """The race as the report draws it: per label (candidates and baselines) its ratio to
    the reference and interval after every round from the second on; the candidates dropped,
    after which round and why (the race's own words); why it stopped; the winner."""
    if decision is None or len(rounds) < 2:
        return None
    reference = str(decision.get("reference") or "default")
    level = float(decision.get("level") or 0.95)
    intervals = decision.get("intervals") or {}
    recorded = next((iv["method"] for iv in intervals.values()
                     if isinstance(iv, Mapping) and iv.get("method")), None)
    # each interval records its method's key; the decision's ``method`` is its long name
    method = cast(Method, str(decision.get("race_method") or recorded or "t"))
    labels = [label for label in intervals if label not in COPIED_LABELS]
    trajectory: dict[str, list[dict[str, float | int]]] = {}
    try:
        for label in labels:
            points = []
            for k in range(2, len(rounds) + 1):
                iv = paired_ratio_interval([r.get(label) for r in rounds[:k]],
                                           [r.get(reference) for r in rounds[:k]],
                                           level=level, method=method)
                if iv is not None and label in rounds[k - 1]:
                    points.append({"round": k, "ratio": iv.ratio, "low": iv.low,
                                   "high": iv.high, "n": iv.n})
            trajectory[label] = points
    except ConfigError as exc:
        # the summary is still written; the report then draws the race without its rounds
        logger.warning("summary.json: the race's rounds not traced: %s", exc)
        trajectory = {}
    # the race's drops as phases.final words them (a drop after the last round included)
    dropped: dict[str, JSONObject] = {}
    for line in decisions:
        found = _DROPPED.match(line)
        if found is not None and found["label"] in labels:
            dropped[found["label"]] = {"after": int(found["after"]), "reason": found["why"]}
    stopped = next((d.split("stopped: ", 1)[1] for d in decisions
                    if d.startswith(f"final: {len(rounds)} rounds; stopped: ")), None)
    return {"reference": reference, "level": level, "method": method,
            "decision_level": decision.get("decision_level"), "labels": labels,
            "trajectory": trajectory, "dropped": dropped, "stopped": stopped,
            "winner": decision.get("winner"), "unstable": dict(decision.get("unstable") or {})}


def measurement_trace(records: Sequence[PointRecord]) -> list[JSONObject]:
    """Every measured point in order: its session label, the paired ratio to the session's
    reference (None unpaired), the value the strategy saw, the reference's own measurements
    around it, the replica that measured it, and the settings in force (so a final label's
    configuration can be found among the search's evaluations)."""
    return [{"session": r.session, "ratio": r.ratio, "value": r.value,
             "reference": list(r.reference), "replica": r.replica, "failure": r.failure,
             "in_force": dict(r.in_force)}
            for r in records]


def report_inputs(records: Sequence[PointRecord], rounds: Sequence[Mapping[str, float | None]],
                  decision: Mapping[str, JSON] | None, decisions: Sequence[str],
                  unit: str, *, trace: JSONObject | None = None) -> JSONObject:
    """The keys summary.json gains for the report (``race``, ``measurements``, ``unit``):
    ``trace``, the race as its design recorded it
    (:class:`tuner_client.stats.trace.RaceTrace`), else the race read back from the rounds
    and the decisions' words (:func:`race_trace`)."""
    return {"race": trace if trace is not None else race_trace(rounds, decision, decisions),
            "measurements": measurement_trace(records), "unit": unit}
