"""How one replica measures the trials of a search session it fetches (:class:`Trials`),
one of two ways:

- paired (``measure.paired``, :class:`tuner_client.phases.blocks.PairedTrials`, beside the
  block it measures): one block beside the session's reference *on that replica*, reported
  as one value (on a replicated pool the ratio times the session's pooled level,
  :class:`~tuner_client.phases.blocks.SessionReferences`);
- unpaired (a pool of one only, :class:`SampledTrials`): each fetched trial is one sample
  (:meth:`Measurer.sample`) and the session's ``agg`` plugin asks for the same point
  ``measure.samples`` times.

The loop that fetches and reports them is :mod:`tuner_client.phases.session_loop`.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

from harmony_base.errors import HarmonyError
from harmony_base.jsontypes import JSON
from tuner_client.measurer import Measurer, PointRecord, aggregate

logger = logging.getLogger(__name__)


@dataclass
class Measured:
    """What measuring one fetched trial gave: the value to report (or the failure), and the
    record when the evaluation is finished (``ask``: whether ``after_eval`` sees it)."""

    value: float | None
    failure: str | None
    record: PointRecord | None = None
    ask: bool = True


class Trials(ABC):
    """How one replica measures the trials it fetches (paired blocks or single samples)."""

    label: str
    #: the objective's unit, as the log prints values (:attr:`RunContext.unit`)
    unit: str = "queries/min"

    @property
    def midway(self) -> bool:
        """True while an evaluation spans more fetches (its next trial needs no claim)."""
        return False

    @abstractmethod
    def measure(self, point: Mapping[str, JSON], settings: dict[str, str]) -> Measured:
        """Measure one fetched trial of ``point`` (``settings``: its knob values)."""


class SampledTrials(Trials):
    """Each trial one sample of its point; the record is finished after ``samples``."""

    def __init__(self, measurer: Measurer, label: str, samples: int, how: str) -> None:
        self.measurer, self.label, self.samples, self.how = measurer, label, samples, how
        self.current: PointRecord | None = None

    @property
    def midway(self) -> bool:
        return self.current is not None

    def measure(self, point: Mapping[str, JSON], settings: dict[str, str]) -> Measured:
        current = self.current
        if current is None or current.point != point:
            current = self.current = PointRecord(session=self.label, point=dict(point),
                                                 settings=settings)
            outcome = self.measurer.apply(settings)
            current.restart_s, current.apply_s = outcome.restart_s, outcome.apply_s
            current.prewarm = outcome.prewarm.to_dict() if outcome.prewarm is not None else None
            current.in_force = dict(self.measurer.in_force)
            if outcome.failure is not None:
                return self._failed(current, outcome.failure)
        try:
            sample = self.measurer.sample()
        except HarmonyError as exc:
            logger.warning("[%s] %s: sampling failed: %s", self.label, settings, exc)
            return self._failed(current, f"sampling failed: {exc}")
        current.samples.append(sample)
        logger.info("[%s] %s sample %d/%d: %.4g %s", self.label, settings,
                    len(current.samples), self.samples, sample.qpm, self.unit)
        if len(current.samples) < self.samples:
            return Measured(sample.qpm, None)
        if _no_block_counts(current):
            current.window = self.measurer.point_window()
        current.value = aggregate([s.qpm for s in current.samples], self.how)
        self.current = None
        return Measured(sample.qpm, None, current)

    def _failed(self, record: PointRecord, failure: str) -> Measured:
        self.current = None
        record.failure = failure
        return Measured(None, failure, record, ask=False)


def _no_block_counts(record: PointRecord) -> bool:
    """True when the samples' counters show no block access (not flushed yet)."""
    total = record.stats_total()
    return total is None or total.blks_hit + total.blks_read == 0
