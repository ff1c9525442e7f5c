"""What the measurer records: one throughput sample, and everything measured for one point."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from harmony_base.jsontypes import JSONObject
from tuner_client.measurer.counters import StatsDelta


@dataclass
class SampleRecord:
    """One throughput sample: the driver's count and the server's counters beside it.

    ``qpm`` is the value the tuner ranks by: the configured estimator's (named by
    ``estimator``; for ``work`` and ``work_per_cpu`` it is not in queries per minute, see
    :data:`tuner_client.measurer.estimators.ESTIMATORS`). Every other estimate of the same
    completions is kept beside it for comparisons: ``count_qpm`` (completed queries per
    minute, the study's measure), ``concurrency_qpm`` (Little's law), ``work_per_s``
    (reference-seconds of work per wall second) and ``work_per_cpu`` (per CPU-second of the
    server, ``server_cpu`` being the cores the server used on average over the sample, read
    from ``cpu_source``). ``per_query`` holds each template's ``[completed, mean latency s]``,
    so that any estimator can be recomputed later.
    """

    qpm: float
    completed: int
    errors: int
    seconds: float
    stats: StatsDelta | None = None
    count_qpm: float | None = None
    concurrency_qpm: float | None = None
    estimator: str = "count"
    work_per_s: float | None = None
    server_cpu: float | None = None
    cpu_source: str | None = None
    work_per_cpu: float | None = None
    per_query: dict[str, tuple[int, float | None]] = field(default_factory=dict)
    #: each statement's mean latency (s) of a scripted or replayed workload (``file, line N``)
    per_statement: dict[str, float] = field(default_factory=dict)
    #: queries per minute credited by their run time inside the window (``progress``)
    progress_qpm: float | None = None


@dataclass
class PointRecord:
    """Everything measured for one configuration (one candidate of a session)."""

    session: str
    point: JSONObject
    settings: dict[str, str]
    in_force: dict[str, str] = field(default_factory=dict)
    samples: list[SampleRecord] = field(default_factory=list)
    restart_s: float | None = None
    apply_s: float | None = None
    failure: str | None = None
    #: what the warm restart before it loaded back (:class:`PrewarmResult` as a dict)
    prewarm: JSONObject | None = None
    value: float | None = None  # the aggregate of the samples
    started: float = field(default_factory=time.time)
    #: the counters over the whole point (after warm-up to after the last sample, waiting
    #: for the backends to flush them): see :meth:`Measurer.point_window`
    window: StatsDelta | None = None
    #: paired measurement: the candidate/reference ratio of the block, and the reference's
    #: values measured just before and after the candidate (``value`` is then the ratio
    #: times the reference's running level: see :mod:`tuner_client.phases.blocks`)
    ratio: float | None = None
    reference: list[float] = field(default_factory=list)
    #: the replica (its client id) that measured it, in a run over several replicas
    replica: str | None = None
    #: how ``ratio`` was measured: ``windows`` (whole-server windows) or ``per-transaction``
    #: (one run beside the reference, each transaction drawing one of them), then with the
    #: ratio's 95 % interval and the transactions of (reference, candidate) behind it
    design: str = "windows"
    interval: tuple[float, float] | None = None
    transactions: tuple[int, int] | None = None

    def stats_total(self) -> StatsDelta | None:
        """The samples' counters summed (None when any sample lost its counters); when
        they counted no block access (short samples end before the backends flush their
        statistics, about once a second) the point's whole window instead, if known."""
        deltas = [s.stats for s in self.samples]
        summed = None
        if deltas and all(d is not None for d in deltas):
            summed = StatsDelta(*(sum(getattr(d, f) for d in deltas)
                                  for f in ("xact_commit", "blks_hit", "blks_read",
                                            "temp_bytes", "seconds")))
        if self.window is not None and (summed is None
                                        or summed.blks_hit + summed.blks_read == 0):
            return self.window
        return summed

    def to_dict(self) -> JSONObject:
        out = asdict(self)
        for sample, raw in zip(self.samples, out["samples"], strict=True):
            if sample.stats is not None:
                raw["stats"]["miss_ratio"] = sample.stats.miss_ratio
        return out
