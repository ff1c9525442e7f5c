"""A tuning run you can watch: a live view of the phase, the evaluations, the point being
measured, the best so far and the time left.

On a terminal :class:`RunView` draws a `rich` live panel under the log lines (which keep
scrolling above it); otherwise it draws nothing and the plain log lines are the record.
The view only listens: the flow calls :meth:`RunView.measured` with every record and
:meth:`RunView.decided` with every decision (see :class:`tuner_client.flows.Tuner`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.table import Table

from tuner_client.config import TunerConfig
from tuner_client.measurer import PointRecord


def phase_of(session: str) -> str:
    """The phase a record's session name belongs to (``p1-offline``, ``p2-online``,
    ``final-best``, ``screening-…``); the name itself when none."""
    for phase in ("final", "screening", "offline", "online"):
        if phase in session:
            return phase
    return session


@dataclass
class RunView:
    """What the live view shows, updated from the flow's callbacks; :meth:`table` renders it."""

    config: TunerConfig
    started: float = field(default_factory=time.monotonic)
    phase: str = "prepare"
    evaluations: int = 0
    final_rounds: int = 0
    point: dict[str, str] = field(default_factory=dict)
    best: PointRecord | None = None
    #: the run's own best (``RunState.best``, ranked by paired ratios where they share a
    #: reference); without it, the highest value shown
    best_of: Callable[[], PointRecord | None] | None = None
    last_decision: str = ""
    seconds: list[float] = field(default_factory=list)
    _last: float = field(default_factory=time.monotonic)

    @property
    def planned(self) -> int:
        """Search evaluations of one pass (offline + online) as configured."""
        return self.config.offline.evaluations + self.config.online.evaluations

    def measured(self, record: PointRecord) -> None:
        now = time.monotonic()
        self.seconds.append(now - self._last)
        self._last = now
        self.phase = phase_of(record.session)
        self.point = dict(record.settings)
        if self.phase == "final":
            self.final_rounds += 1
        elif self.phase in ("offline", "online"):
            self.evaluations += 1
            if self.best_of is not None:
                self.best = self.best_of()
            elif record.value is not None and (self.best is None or self.best.value is None
                                               or record.value > self.best.value):
                self.best = record

    def decided(self, text: str) -> None:
        self.last_decision = text

    def time_left(self) -> float | None:
        """Seconds left for the planned evaluations and the final rounds at the mean pace."""
        if not self.seconds:
            return None
        pace = sum(self.seconds) / len(self.seconds)
        final = self.config.final
        left_search = max(0, self.planned - self.evaluations)
        # the final rounds measure the default, a baseline and the candidates each round
        per_round = 1 + len(final.baselines) + max(1, final.candidates)
        left_final = max(0, max(2, final.rounds) * per_round - self.final_rounds)
        return pace * (left_search + left_final)

    def table(self) -> Table:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        elapsed = time.monotonic() - self.started
        left = self.time_left()
        grid.add_row("phase", self.phase)
        grid.add_row("evaluations", f"{self.evaluations} of {self.planned} per pass"
                     + (f", final measurements {self.final_rounds}" if self.final_rounds else ""))
        grid.add_row("point", ", ".join(f"{k}={v}" for k, v in self.point.items()) or "-")
        grid.add_row("best", _best_text(self.best))
        grid.add_row("time", f"{elapsed:.0f} s elapsed"
                     + (f", about {left:.0f} s left" if left is not None else ""))
        if self.last_decision:
            grid.add_row("decision", self.last_decision)
        return grid


def _best_text(record: PointRecord | None) -> str:
    if record is None or record.value is None:
        return "-"
    text = f"{record.value:.1f}"
    if record.ratio is not None:
        text += f" ({record.ratio:.3f}× its reference in the same block)"
    values = [s.qpm for s in record.samples if s.qpm is not None]
    if len(values) >= 2:
        text += f", samples {min(values):.1f}–{max(values):.1f}"
    return text + f" at {', '.join(f'{k}={v}' for k, v in record.in_force.items())}"


@contextlib.contextmanager
def live_view(view: RunView, *, enabled: bool | None = None) -> Iterator[RunView]:
    """Draw ``view`` live on the terminal while the block runs (nothing when not a TTY).

    Log handlers writing to stderr are pointed at the live console for the duration, so log
    lines scroll above the panel instead of tearing it.
    """
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield view
        return
    console = Console(file=sys.stderr)
    handlers = [h for h in logging.getLogger().handlers
                if isinstance(h, logging.StreamHandler) and h.stream is sys.stderr]
    with Live(get_renderable=view.table, console=console, refresh_per_second=2,
              transient=False, redirect_stderr=True):
        previous = [h.setStream(sys.stderr) for h in handlers]
        try:
            yield view
        finally:
            for handler, stream in zip(handlers, previous, strict=True):
                if stream is not None:
                    handler.setStream(stream)
