"""Live mode's guardrails around the measurer: the last good configuration, and putting it
back within a sample when a guardrail trips (:mod:`tuner_client.measurer.guardrails` decides
when)."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from harmony_base.errors import GuardrailTrip
from tuner_client.knobs.in_force import InForce
from tuner_client.measurer.applying import Applier
from tuner_client.measurer.guardrails import Trip
from tuner_client.measurer.options import LiveWatch

logger = logging.getLogger(__name__)


class TripHandler:
    """Tracks the last configuration that finished a sample without tripping a guardrail,
    and restores it at once on a trip (recorded on the guardrail and told to ``on_trip``)."""

    def __init__(self, live: LiveWatch, in_force: InForce, applier: Applier) -> None:
        #: live mode's guardrails, checked on partial windows during every sample
        self.guard = live.guard
        self.on_trip = live.on_trip
        self.in_force = in_force
        self.applier = applier
        #: the last configuration that finished a sample without tripping a guardrail
        self.last_good: dict[str, str] | None = None
        self.original: dict[str, str] = {}  # in force before the first apply

    def before_first_apply(self) -> None:
        """Remember the configuration in force before the tuner changes anything."""
        if self.last_good is None:
            self.last_good = dict(self.in_force.values)
            self.original = dict(self.in_force.values)

    def sample_finished(self) -> None:
        """The configuration in force finished a sample cleanly: it is the last good one."""
        if self.guard is not None:
            self.last_good = dict(self.in_force.values)

    def at_original(self) -> bool:
        """Whether the original configuration (before the first apply) is in force."""
        return self.in_force.holds(self.original)

    def watch(self, window: Any) -> None:
        """The live workload's hook on partial windows: the guardrails judge every
        configuration that has not yet finished a sample cleanly, except the original one
        (what the server runs without the tuner: reverting it would have nowhere to go)."""
        if self.guard is None or self.last_good is None:
            return
        if not (self.in_force.holds(self.last_good) or self.at_original()):
            self.guard.check(window)

    def tripped(self, trip: GuardrailTrip) -> Trip:
        """Restore the last good configuration now (reload-time knobs by ALTER SYSTEM +
        reload, restart-time knobs by a restart), and record the trip."""
        detected = time.monotonic()
        tried = dict(self.in_force.values)
        back = self.in_force.differs(self.last_good or {})
        logger.warning("%s with %s: restoring the last good configuration %s", trip.reason,
                       {n: tried.get(n) for n in back}, back)
        failure = self.applier.put_back(back)
        if failure is not None:
            logger.error("guardrail: %s", failure)
        self.in_force.applied_at = time.monotonic()
        changed_at = self.in_force.changed_at
        record = Trip(kind=trip.kind, reason=trip.reason,
                      settings={n: tried.get(n, "") for n in back}, restored=back,
                      revert_s=time.monotonic() - detected, failure=failure,
                      detected_after_s=detected - changed_at if changed_at is not None else None)
        if self.guard is not None:
            self.guard.trips.append(record)
        if self.on_trip is not None:
            self.on_trip(record)
        logger.warning("guardrail: reverted in %.3f s (%.2f s after the configuration took "
                       "effect)", record.revert_s, record.detected_after_s or math.nan)
        return record
