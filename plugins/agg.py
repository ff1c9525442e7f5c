"""The ``agg`` plugin: measure each point several times and tell the strategy one aggregate.

Noisy throughput is the reason (docs/background.md §2 and §4): a single sample ranks a point by
its luck.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence

from harmony_base.errors import ConfigError
from plugins.base import ACCEPT, Flow, FlowResult, Plugin, PluginTrial, SessionView

logger = logging.getLogger(__name__)

_HOW = ("min", "max", "mean", "median", "best")


def aggregate(samples: Sequence[float], how: str, maximize: bool = False) -> float:
    """``samples`` reduced with ``how`` (``best`` = max when maximising, else min)."""
    if not samples:
        raise ConfigError("cannot aggregate an empty list of samples")
    if how == "best":
        how = "max" if maximize else "min"
    reducers: dict[str, Callable[[Sequence[float]], float]] = {
        "min": min, "max": max, "mean": statistics.fmean, "median": statistics.median}
    try:
        return float(reducers[how](samples))
    except KeyError:
        raise ConfigError(f"aggregation must be one of {list(_HOW)}, got {how!r}") from None


class AggregatePlugin(Plugin, name="agg"):
    """Retries a candidate until it has ``times`` samples, then sets the aggregate as its value.

    Options: ``times`` (default 3), ``how`` (``min|max|mean|median|best``, default ``best``),
    ``retry_failures`` (failed samples measured again before the candidate fails: an
    integer, or ``true`` for up to ``times``; default 0 = the first failure fails it).
    """

    def __init__(self, session: SessionView, *, times: int = 3, how: str = "best",
                 retry_failures: int | bool = 0):
        super().__init__(session)
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise ConfigError(f"plugin 'agg': option 'times' must be an integer >= 1, "
                              f"got {times!r}")
        if how not in _HOW:
            raise ConfigError(f"plugin 'agg': option 'how' must be one of {list(_HOW)}, "
                              f"got {how!r}")
        if isinstance(retry_failures, bool):
            retry_failures = times if retry_failures else 0
        if not isinstance(retry_failures, int) or retry_failures < 0:
            raise ConfigError(f"plugin 'agg': option 'retry_failures' must be true, false or an "
                              f"integer >= 0, got {retry_failures!r}")
        self.times = times
        self.how = how
        self.retry_failures = retry_failures
        self._failures: dict[int, int] = {}
        self.retries = 0

    def analyze(self, trial: PluginTrial) -> FlowResult:
        if trial.failure is not None:
            failed = self._failures.get(trial.candidate, 0) + 1
            self._failures[trial.candidate] = failed
            if failed <= self.retry_failures:
                self.retries += 1
                return FlowResult(Flow.RETRY, reason=f"sample failed ({trial.failure}); "
                                                     f"retry {failed} of {self.retry_failures}")
            self._failures.pop(trial.candidate, None)
            return ACCEPT  # the failure fails the candidate
        if len(trial.samples) < self.times:
            self.retries += 1
            return FlowResult(Flow.RETRY, reason=f"sample {len(trial.samples)} of {self.times}")
        self._failures.pop(trial.candidate, None)
        trial.value = aggregate(trial.samples, self.how, bool(self.session.maximize))
        logger.debug("agg: candidate %d %s of %s = %s", trial.candidate, self.how,
                     trial.samples, trial.value)
        return ACCEPT
