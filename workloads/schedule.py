"""Workload shifts: a sequence of (mix, duration) phases and a driver that follows it.

Written ``"12Q6:90m;6Q7,6Q13:30m"`` (durations in s, m or h, combinable as ``1h30m``; a bare
number is seconds) or as a YAML list of ``{mix: ..., duration: ...}`` items. After the last
phase the last mix keeps running until ``stop()`` unless ``repeat=True``, which cycles.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from harmony_base.errors import WorkloadError
from workloads.base import Workload
from workloads.driver import StreamSet, _check_timeout, check_tpch_database
from workloads.mix import Mix, parse_mix
from workloads.recorder import Recorder
from workloads.sample import Sample

logger = logging.getLogger(__name__)

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([hms])", re.IGNORECASE)
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds in ``"90m"``, ``"1h30m"``, ``"45s"``, ``"30"`` or a number; must be > 0."""
    if isinstance(text, bool):
        raise WorkloadError(f"a phase duration must be like 90m, 30s or 1h, but got {text!r}")
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        raw = text.strip()
        try:
            seconds = float(raw)
        except ValueError:
            parts = _DURATION_PART.findall(raw)
            if not parts or _DURATION_PART.sub("", raw).strip():
                raise WorkloadError(
                    f"a phase duration must be like 90m, 30s, 1h30m or a number of seconds, "
                    f"but got {text!r}"
                ) from None
            seconds = sum(float(n) * _UNIT_SECONDS[u.lower()] for n, u in parts)
    if not (math.isfinite(seconds) and seconds > 0):
        raise WorkloadError(f"a phase duration must be > 0, but got {text!r}")
    return seconds


@dataclass(frozen=True)
class Phase:
    """One phase of a schedule: run ``mix`` for ``seconds``."""

    mix: Mix
    seconds: float


class Schedule:
    """An ordered, non-empty list of phases."""

    def __init__(self, phases: Sequence[tuple[Mix | str, float | str] | Phase]) -> None:
        built: list[Phase] = []
        for phase in phases:
            if isinstance(phase, Phase):
                built.append(phase)
            else:
                mix, duration = phase
                built.append(Phase(parse_mix(mix), parse_duration(duration)))
        if not built:
            raise WorkloadError("a workload schedule needs at least one (mix, duration) phase")
        self.phases: tuple[Phase, ...] = tuple(built)

    @property
    def total_seconds(self) -> float:
        return sum(p.seconds for p in self.phases)

    def __str__(self) -> str:
        return ";".join(f"{p.mix}:{p.seconds:g}s" for p in self.phases)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schedule) and self.phases == other.phases

    def __hash__(self) -> int:
        return hash(self.phases)


def _phase_from_item(item: object) -> tuple[Mix | str, float | str]:
    if not isinstance(item, dict) or set(item) != {"mix", "duration"}:
        raise WorkloadError(
            "each schedule item must be a mapping with exactly the keys mix and duration, "
            f"but got {item!r}"
        )
    mix = item["mix"]
    return (parse_mix(mix if isinstance(mix, str | list) else str(mix)), item["duration"])


#: a schedule as a config gives it: ``"12Q6:90m;6Q7,6Q13:30m"``, a YAML list, or a Schedule
ScheduleSpec = Schedule | str | Sequence[object]


def parse_schedule(spec: ScheduleSpec) -> Schedule:
    """Parse ``"12Q6:90m;6Q7,6Q13:30m"``, a YAML list (text or loaded), or pass a Schedule."""
    if isinstance(spec, Schedule):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if "\n" in text or text.startswith("- ") or text.startswith("["):
            try:
                loaded = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise WorkloadError(f"the workload schedule is not valid YAML: {exc}") from exc
            if not isinstance(loaded, list):
                raise WorkloadError(f"a YAML workload schedule must be a list, got {loaded!r}")
            return parse_schedule(loaded)
        phases: list[tuple[Mix | str, float | str]] = []
        for part in filter(None, (p.strip() for p in text.split(";"))):
            mix, sep, duration = part.rpartition(":")
            if not sep or not mix.strip():
                raise WorkloadError(
                    f"each schedule phase must be <mix>:<duration> like 12Q6:90m, but got "
                    f"{part!r} in {text!r}"
                )
            phases.append((mix.strip(), duration.strip()))
        return Schedule(phases)
    return Schedule([_phase_from_item(item) for item in spec])


class ScheduledDriver(Workload):
    """Runs a schedule's mixes in turn; ``sample()`` works as on :class:`WorkloadDriver`.

    At a phase boundary the old streams' queries are cancelled (not counted) and the new
    mix starts. A sample spanning a boundary counts both phases; its ``mix`` label names
    every mix it saw, joined by ``->``.
    """

    def __init__(
        self,
        dsn: str,
        schedule: ScheduleSpec,
        *,
        seed: int = 0,
        statement_timeout_s: float | None = None,
        repeat: bool = False,
    ) -> None:
        self.dsn = dsn
        self.schedule = parse_schedule(schedule)
        self.seed = seed
        _check_timeout(statement_timeout_s)
        self.statement_timeout_s = statement_timeout_s
        self.repeat = repeat
        self.scale: float | None = None
        self._recorder = Recorder()
        self._lock = threading.Lock()
        self._current: StreamSet | None = None
        self._phase_index = -1
        self._mixes_seen: list[Mix] = []
        self._stop_event = threading.Event()
        self._controller: threading.Thread | None = None
        #: when the schedule began: a restart (stop + start) resumes the phase the clock is in
        self._epoch: float | None = None

    @property
    def phase_index(self) -> int:
        """Index of the running phase (-1 before start)."""
        return self._phase_index

    @property
    def current_mix(self) -> Mix | None:
        with self._lock:
            return self._current.mix if self._current else None

    def start(self) -> None:
        if self._controller is not None:
            raise WorkloadError("the scheduled driver is already running; stop() it first")
        self.scale = check_tpch_database(self.dsn)
        self._recorder.reset()
        self._stop_event.clear()
        if self._epoch is None:
            self._epoch = time.monotonic()
        index, remaining = self._phase_at(time.monotonic() - self._epoch)
        self._switch_to(index)
        self._controller = threading.Thread(
            target=self._follow_schedule, args=(index, remaining), name="harmony-schedule",
            daemon=True,
        )
        self._controller.start()

    def _switch_to(self, index: int) -> None:
        phase = self.schedule.phases[index]
        assert self.scale is not None
        new = StreamSet(
            self.dsn, phase.mix,
            seed=self.seed + index, scale=self.scale, recorder=self._recorder,
            statement_timeout_s=self.statement_timeout_s,
        )  # fmt: skip
        with self._lock:
            old, self._current = self._current, new
            self._phase_index = index
            self._mixes_seen.append(phase.mix)
        if old is not None:
            old.stop()
        new.start()
        logger.info("schedule phase %d: mix %s for %g s", index, phase.mix, phase.seconds)

    def _phase_at(self, elapsed: float) -> tuple[int, float]:
        """The phase the schedule's clock is in after ``elapsed`` seconds, and its time left."""
        phases = self.schedule.phases
        total = sum(p.seconds for p in phases)
        if self.repeat and total > 0:
            elapsed %= total
        for index, phase in enumerate(phases):
            if elapsed < phase.seconds:
                return index, phase.seconds - elapsed
            elapsed -= phase.seconds
        return len(phases) - 1, float("inf")  # past the end: the last mix keeps running

    def _follow_schedule(self, index: int, remaining: float) -> None:
        wait = remaining
        while True:
            if self._stop_event.wait(None if wait == float("inf") else wait):
                return
            wait = self.schedule.phases[(index + 1) % len(self.schedule.phases)].seconds
            if index + 1 < len(self.schedule.phases):
                index += 1
            elif self.repeat:
                index = 0
            else:
                return  # the last mix keeps running until stop()
            self._switch_to(index)

    def _labels(self) -> tuple[list[str], str]:
        with self._lock:
            seen = list(self._mixes_seen)
            current = self._current.mix if self._current else None
        labels: list[str] = []
        for mix in seen:
            if not labels or labels[-1] != str(mix):
                labels.append(str(mix))
        queries = list(current.queries) if current else []
        return queries, " -> ".join(labels)

    def sample(
        self,
        seconds: float | None = None,
        *,
        queries: int | None = None,
        timeout_s: float | None = None,
        since: float | None = None,
        every_query: bool = False,
    ) -> Sample:
        """As :meth:`WorkloadDriver.sample` (the streams of the mix running now)."""
        if self._controller is None:
            raise WorkloadError("the scheduled driver is not running; call start() first")
        with self._lock:
            self._mixes_seen = [self._current.mix] if self._current else []
        return self._recorder.sample(
            seconds, queries=queries, timeout_s=timeout_s, labels=self._labels,
            since=since, every_query=every_query, concurrency=self._concurrency,
        )

    def _concurrency(self) -> dict[str, int]:
        with self._lock:
            return dict(self._current.mix.streams) if self._current else {}

    def stop(self) -> None:
        controller, self._controller = self._controller, None
        if controller is None:
            return
        self._stop_event.set()
        controller.join(timeout=30)
        self._recorder.stop()
        with self._lock:
            current, self._current = self._current, None
        if current is not None:
            current.stop()



def wait_for_phase(driver: ScheduledDriver, index: int, timeout_s: float) -> bool:
    """Block until ``driver`` runs phase ``index`` (for demos and tests); False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if driver.phase_index == index:
            return True
        time.sleep(0.02)
    return driver.phase_index == index
