"""Paired, drift-cancelling measurement: each candidate is measured in a block between two
measurements of the session's reference configuration.

A block is ``reference, candidate × samples, reference``; the trailing reference is still in
force when the next block starts, so it also opens that block (a chain ``A B A B' A …``, one
reference measurement per candidate). The candidate's value for the strategy is its ratio to
the reference in its block (the geometric mean of its samples over that of the two reference
values) times the reference's running level: levels wander 10–30 % over tens of minutes on
these machines, the ratio within a block much less (``benchmarks/README.md``, paired
measurement).

On a replicated pool (:attr:`tuner_client.replicas.ReplicaPool.replicated`) each replica
keeps its own reference, measured once on every live replica before the session is defined
(:func:`open_references`): the candidate's ratio to its own replica's reference is scaled by
the geometric mean of those first measurements, the session's *pooled level*, so a slower or
drifting replica cancels out and the strategy sees one scale.

A search session's paired trial is one block (:class:`PairedTrials`, the paired way of
:class:`tuner_client.phases.trials.Trials`), here beside it.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from harmony_base.errors import HarmonyError
from harmony_base.jsontypes import JSON, JSONObject
from tuner_client.measurer import Measurer, PointRecord
from tuner_client.metrics.exporter import TunerMetrics
from tuner_client.phases.trials import Measured, Trials
from tuner_client.replicas import Replica, ReplicaPool
from tuner_client.stats.paired import ReferenceLevel, block_ratio

logger = logging.getLogger(__name__)

#: the metadata key of a replicated session: pooled level, reference settings, lease
METADATA_KEY = "replicas"


@dataclass
class Reference:
    """The configuration a session's candidates are compared with, and what it measured."""

    label: str
    settings: dict[str, str]
    level: ReferenceLevel = field(default_factory=ReferenceLevel)
    #: the reference value just measured while the reference is still in force: it opens
    #: the next block instead of a new measurement
    last: float | None = None
    #: log(after / before) of every block: the reference's own drift across one candidate
    drifts: list[float] = field(default_factory=list)

    def noise(self) -> float | None:
        """The relative noise of one measurement, from the reference's repeats around the
        blocks (the spread of log(after/before) over √2); None before two blocks."""
        if len(self.drifts) < 2:
            return None
        return statistics.stdev(self.drifts) / math.sqrt(2.0)


def measure_reference(measurer: Measurer, metrics: TunerMetrics, ref: Reference) -> float | None:
    """One measurement of the reference configuration (apply, warm up, one sample).

    The reference is what was in force when the session started (the user's own settings or
    ones the budget admitted before), so it is applied without the budget check, as the
    final rounds apply the original: the user's own may break a budget tighter than what
    they run today, and refusing it would leave the session without a reference.
    """
    record = measurer.measure(f"{ref.label}-reference", {}, ref.settings, samples=1,
                              check_budget=False)
    metrics.record_point(record, kind="reference", restarts=False)
    if record.failure is not None or record.value is None:
        logger.warning("[%s] reference measurement failed: %s", ref.label, record.failure)
        return None
    return record.value


def measure_block(measurer: Measurer, metrics: TunerMetrics, ref: Reference, label: str,
                  point: Mapping[str, JSON], settings: Mapping[str, str]) -> PointRecord:
    """Measure ``settings`` in a block beside ``ref``; ``value`` is the paired value."""
    fresh = ref.last is None
    before = measure_reference(measurer, metrics, ref) if fresh else ref.last
    record = measurer.measure(label, point, settings)
    if record.failure is not None:
        # refused by the budget: nothing was applied and the reference is still in force;
        # otherwise the next block starts with a fresh reference measurement
        if not record.failure.startswith("infeasible"):
            ref.last = None
        record.value = None
        return record
    after = measure_reference(measurer, metrics, ref)
    ref.last = after
    references = [v for v in (before, after) if v is not None and v > 0]
    record.reference = references
    ratio = block_ratio([s.qpm for s in record.samples], references)
    if before and after and before > 0 and after > 0:
        ref.drifts.append(math.log(after / before))
    for v in ([before, after] if fresh else [after]):
        ref.level.add(v)
    if ratio is None:
        record.value = None
        record.failure = "no usable reference measurement in the block"
        return record
    record.ratio = ratio
    record.value = ref.level.value(ratio)
    return record


class PairedTrials(Trials):
    """Each trial one block beside ``ref`` on ``measurer`` (:func:`measure_block`)."""

    def __init__(self, measurer: Measurer, metrics: TunerMetrics, label: str, ref: Reference,
                 pooled_level: float | None = None) -> None:
        self.measurer, self.metrics, self.label, self.ref = measurer, metrics, label, ref
        self.pooled_level = pooled_level

    def measure(self, point: Mapping[str, JSON], settings: dict[str, str]) -> Measured:
        record = measure_block(self.measurer, self.metrics, self.ref, self.label, point,
                               settings)
        if self.pooled_level is not None and record.ratio is not None:
            record.value = record.ratio * self.pooled_level
        return Measured(record.value, None if record.value is not None
                        else record.failure or "not measured", record)


@dataclass
class SessionReferences:
    """A session's reference on every replica of the pool, and (replicated) its pooled level.

    In a pool of one the session's own :class:`Reference` is the primary's and a candidate's
    value is its ratio times the reference's running level; on a replicated pool every
    replica has its own, and the ratio is scaled by ``pooled_level`` instead.
    """

    label: str
    settings: dict[str, str]
    by_replica: dict[str, Reference]
    replicated: bool = False
    #: the geometric mean of the replicas' first reference measurements (replicated only)
    pooled_level: float | None = None

    @property
    def primary_reference(self) -> Reference:
        """The first replica's reference (the run's own database while it is alive)."""
        return next(iter(self.by_replica.values()))

    def of(self, replica: Replica) -> Reference:
        """``replica``'s reference (a fresh one for a replica that joined later)."""
        ref = self.by_replica.get(replica.name)
        if ref is None:
            ref = self.by_replica[replica.name] = Reference(f"{self.label}@{replica.name}",
                                                            dict(self.settings))
        return ref

    def metadata(self, in_force: Mapping[str, str], pool: ReplicaPool) -> JSONObject:
        """What lets any replica (local or remote) join the session and scale the same way:
        the pooled level, the reference, the coordinator's settings in force, the lease."""
        return {"pooled_level": self.pooled_level, "reference": dict(self.settings),
                "in_force": dict(in_force), "lease_s": pool.lease_s,
                "replicas": [r.name for r in pool.live]}

    def noise(self) -> float | None:
        """The relative noise of one measurement, from the first replica's reference repeats
        (:meth:`Reference.noise`)."""
        return self.primary_reference.noise()


def pooled_level(levels: list[float]) -> float | None:
    """The geometric mean of the replicas' reference levels (None without one)."""
    good = [v for v in levels if v is not None and math.isfinite(v) and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in good)) if good else None


def open_references(pool: ReplicaPool, metrics: TunerMetrics, label: str,
                    reference: Reference) -> SessionReferences:
    """Session ``label``'s references over ``pool``. In a pool of one, ``reference`` itself
    (its next block measures it); on a replicated pool every live replica measures its
    settings once, in parallel, and the geometric mean is the pooled level."""
    settings = dict(reference.settings)
    if not pool.replicated:
        return SessionReferences(label, settings, {pool.primary.name: reference})
    refs = {r.name: Reference(f"{label}@{r.name}", dict(settings)) for r in pool.live}

    def first(replica: Replica) -> None:
        try:
            value = measure_reference(replica.joined(), metrics, refs[replica.name])
        except (HarmonyError, OSError) as exc:
            logger.warning("replica %s: reference measurement failed: %s", replica.name, exc)
            value = None
        refs[replica.name].last = value
        refs[replica.name].level.add(value)

    pool.run_each(first)
    level = pooled_level([v for r in refs.values() if (v := r.last) is not None])
    return SessionReferences(label, settings, refs, replicated=True, pooled_level=level)
