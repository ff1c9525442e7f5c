"""A race's interval, from its looks and its planned end: before the race's time limit, the
anytime-valid confidence sequence at :func:`~tuner_client.stats.levels.early_level` (a race
may stop at any look where it clears); at the limit, set before any data, a Student t
interval at :func:`~tuner_client.stats.levels.end_level`, read once. The two error rates add
up to the race's level (:data:`~tuner_client.stats.levels.EARLY_SHARE`), so whichever the
race reports holds at that level.

Why: a race that runs to its limit (an A/A, a small effect, the demo's restart part) paid the
sequence's price for looks it never acted on: 3.9 against Student's 2.5 at 16 observations
and 97.5 %. Read at its end, the same seconds give an interval 1.5x narrower.

The limit must be the one fixed in advance (seconds, or blocks), never "until it clears":
the end's t interval is valid for a number of observations the data did not choose. A race
whose observations per second vary with the machine's load still qualifies: the count is
chosen by the clock, not by the values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tuner_client.stats.levels import EARLY_SHARE, early_level, end_level
from tuner_client.stats.paired import RatioInterval, interval_from_logs
from tuner_client.stats.sequential import CITATION, METHOD


def race_interval(logs: Sequence[float], *, level: float, ended: bool
                  ) -> RatioInterval | None:
    """The interval of the mean of ``logs`` holding at ``level`` together with the race's
    other looks: the sequence's value before the end (``ended`` False), the end's t interval
    at it; None below 2 observations. Its ``level`` is the race's, its ``method`` says which
    of the two it is (``anytime`` or ``t``)."""
    if ended:
        iv = interval_from_logs(logs, level=end_level(level), method="t")
    else:
        iv = interval_from_logs(logs, level=early_level(level), method="anytime")
    return None if iv is None else dataclasses.replace(iv, level=level)


def method_words(ended: bool) -> str:
    """How :func:`race_interval` computed the intervals, for a design's decision line."""
    early, end = round(100 * EARLY_SHARE), round(100 * (1 - EARLY_SHARE))
    if ended:
        return (f"Student t read once at the race's time limit, fixed in advance, with {end} % "
                f"of the error rate (the {METHOD} that could have stopped it earlier held the "
                f"other {early} %)")
    return (f"{METHOD} ({CITATION}) with {early} % of the error rate, the race stopped where "
            f"it cleared (the t interval its time limit would have read held the other "
            f"{end} %)")
