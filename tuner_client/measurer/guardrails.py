"""Live mode's guardrails: stop a configuration that hurts the application, within the sample.

While a configuration is measured on live traffic, the partial window is checked every
``workload.observe.poll_s`` (:attr:`workloads.observe.ObservedWorkload.watch`):

* **latency**: the statements' weighted latency relative to the reference configuration
  (:mod:`tuner_client.stats.mix`) above ``1 + latency_margin``;
* **errors**: rolled-back transactions and deadlocks per finished transaction above the
  reference's rate plus ``error_margin``;
* **memory**: the server's memory (the proportional set size of the postmaster and its
  children, local servers only) above ``memory_fraction`` of what the budget gives PostgreSQL.

A check that fails raises :class:`harmony_base.errors.GuardrailTrip`; the measurer then restores
the last good configuration at once and scores the point as failed
(:meth:`tuner_client.measurer.trips.TripHandler.tripped`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from harmony_base.errors import GuardrailTrip
from harmony_base.jsontypes import JSONObject
from tuner_client.config.model import GuardConfig
from tuner_client.measurer.server_cpu import PROC
from tuner_client.stats.mix import MixReference
from workloads.observe import ObservedWindow

logger = logging.getLogger(__name__)

#: fewest rolled-back transactions (and deadlocks) in a window before the error check counts
MIN_ERRORS = 3


@dataclass
class Trip:
    """One guardrail trip: what tripped, for which settings, and how fast it was undone."""

    kind: str
    reason: str
    settings: dict[str, str]
    restored: dict[str, str]
    #: from the moment the configuration took effect to the moment the trip was detected
    detected_after_s: float | None
    #: from detection to the last good configuration being back in force
    revert_s: float
    at: float = field(default_factory=time.time)
    failure: str | None = None  # the revert itself failed (the server is then left alone)

    def to_dict(self) -> JSONObject:
        return asdict(self)


def server_memory_bytes(postmaster: int) -> int | None:
    """The proportional set size (Pss) of the postmaster and its children, in bytes: shared
    memory counted once across them. None when the processes are not readable here."""
    total, found = 0, False
    pids = [str(postmaster)]
    for entry in os.scandir(PROC):
        if entry.name.isdigit() and entry.name != str(postmaster):
            try:
                stat = (PROC / entry.name / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if len(fields) > 1 and fields[1] == str(postmaster):
                pids.append(entry.name)
    for pid in pids:
        try:
            text = (PROC / pid / "smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) * 1024
                found = True
                break
    return total if found else None


class Guardrail:
    """Judges partial windows of live traffic; :meth:`check` raises on a trip.

    ``reference`` (the reference configuration's statement costs) and ``baseline_error_rate``
    are set when the measurer learns the reference; before that only the memory check runs.
    ``memory_used`` returns the server's memory in bytes (None when unknown) and
    ``memory_limit_bytes`` is what the budget gives PostgreSQL.
    """

    def __init__(self, config: GuardConfig, *, memory_limit_bytes: int | None = None,
                 memory_used: Callable[[], int | None] | None = None) -> None:
        self.config = config
        self.memory_limit_bytes = memory_limit_bytes
        self.memory_used = memory_used
        self.reference: MixReference | None = None
        #: R of the original configuration's latest window (1.0 until measured): the latency
        #: limit is ``level · (1 + latency_margin)``, so a server that drifts slower (load,
        #: the application) does not trip every candidate against stale reference costs
        self.level: float = 1.0
        self.baseline_error_rate: float = 0.0
        self.trips: list[Trip] = []
        self._memory_warned = False

    def check(self, window: ObservedWindow, *, latency_margin: float | None = None) -> None:
        """Raise :class:`GuardrailTrip` when the window breaks a guardrail (the latency one at
        ``latency_margin``, by default the config's)."""
        cfg = self.config
        margin = cfg.latency_margin if latency_margin is None else latency_margin
        if self.reference is not None:
            score = self.reference.score(window.statements, min_calls=cfg.min_calls,
                                         min_coverage=cfg.min_coverage)
            if score is None and window.seconds >= 1.0:
                # a configuration that makes the heavy statements rare (each call far slower)
                # is judged on the calls that did complete (the live benchmark: 4 % of the
                # reference's time had 20 calls in 3 s while lookups ran 100x slower)
                score = self.reference.score(window.statements, min_calls=1,
                                             min_coverage=cfg.min_coverage)
            limit = self.level * (1.0 + margin)
            if score is not None and score.ratio > limit:
                how = "1 + workload.observe.guard.latency_margin" \
                    if margin == cfg.latency_margin else \
                    f"{1 + margin:.2f}, the limit for {window.seconds:.1f} s of a candidate's " \
                    f"slices"
                raise GuardrailTrip(
                    f"guardrail: the statements' weighted latency is {score.ratio:.2f}x the "
                    f"reference's costs, above {limit:.2f}x (the original configuration's "
                    f"latest {self.level:.2f}x times {how})"
                    f" over {score.calls} calls in {window.seconds:.1f} s", kind="latency")
        rate = window.error_rate
        errors = window.xact_rollback + window.deadlocks
        if rate is not None and errors >= MIN_ERRORS \
                and rate > self.baseline_error_rate + cfg.error_margin:
            raise GuardrailTrip(
                f"guardrail: {errors} rolled-back transactions or deadlocks in "
                f"{window.seconds:.1f} s, {100 * rate:.1f} % of transactions (reference "
                f"{100 * self.baseline_error_rate:.1f} % + workload.observe.guard.error_margin "
                f"{100 * cfg.error_margin:.1f} %)", kind="errors")
        self.check_memory()

    def check_memory(self) -> None:
        """Raise :class:`GuardrailTrip` when the server nears its memory limit."""
        if self.memory_used is None or not self.memory_limit_bytes:
            return
        used = self.memory_used()
        if used is None:
            if not self._memory_warned:
                logger.info("the server's memory is not readable here (not a local server?): "
                            "the memory guardrail is off")
                self._memory_warned = True
            return
        fraction, budget_mib = self.config.memory_fraction, self.memory_limit_bytes / 2**20
        if used > fraction * self.memory_limit_bytes:
            raise GuardrailTrip(
                f"guardrail: the server uses {used / 2**20:.0f} MiB, above {100 * fraction:.0f} "
                f"% (workload.observe.guard.memory_fraction) of the {budget_mib:.0f} MiB the "
                f"budget gives PostgreSQL", kind="memory")

    def summary(self) -> GuardrailSummary:
        """The trips for the run's summary."""
        return GuardrailSummary(tuple(self.trips))


@dataclass(frozen=True)
class GuardrailSummary:
    """A live run's guardrail trips, in the order they happened."""

    events: tuple[Trip, ...]

    @property
    def by_kind(self) -> dict[str, int]:
        """How many trips of each kind (``latency``, ``errors``, ``memory``)."""
        out: dict[str, int] = {}
        for trip in self.events:
            out[trip.kind] = out.get(trip.kind, 0) + 1
        return out

    def to_dict(self) -> JSONObject:
        """The ``guardrails`` entry of summary.json."""
        return {"trips": len(self.events), "by_kind": self.by_kind,
                "events": [t.to_dict() for t in self.events]}
