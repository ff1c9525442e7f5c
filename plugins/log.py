"""The ``log`` plugin: one JSON line per analysed trial, appended and flushed as it happens.

A line holds ``time`` (UTC, ISO 8601), ``session``, ``client``, ``candidate``, ``point``,
``value`` and ``failure``, and ``samples`` (how many values the candidate has so far).
The ``cache`` plugin reads these files back as prior data (:func:`read_log`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSONObject
from plugins.base import ACCEPT, FlowResult, Plugin, PluginTrial, SessionView

logger = logging.getLogger(__name__)


def format_log_line(session: str, trial: PluginTrial, when: datetime) -> str:
    """The JSON text of one log line (without the newline)."""
    value = trial.value if trial.value is None or math.isfinite(trial.value) else None
    record: JSONObject = {
        "time": when.isoformat(timespec="microseconds"), "session": session,
        "client": trial.client, "candidate": trial.candidate, "point": trial.point,
        "value": value, "failure": trial.failure, "samples": len(trial.samples)}
    return json.dumps(record, sort_keys=False, separators=(",", ":"))


def read_log(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a log file, in order; a malformed line is a ConfigError naming it."""
    p = Path(path)
    try:
        handle = p.open(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read log file {p}: {exc.strerror}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{p}, line {number}: not a log line ({exc.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("point"), dict):
                raise ConfigError(f"{p}, line {number}: a log line needs a 'point' object")
            yield record


class LogPlugin(Plugin, name="log"):
    """Appends one line per analysed trial to ``path`` (created with its directory if missing).

    Lines are not written while the server replays its command log after a restart, so a
    crash-recovered session does not log its trials twice.
    """

    def __init__(self, session: SessionView, *, path: str):
        super().__init__(session)
        if not isinstance(path, str) or not path:
            raise ConfigError(f"plugin 'log': option 'path' must be a file path, got {path!r}")
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise ConfigError(f"plugin 'log': cannot open {self.path} for appending: "
                              f"{exc.strerror}") from None
        self.lines = 0

    def analyze(self, trial: PluginTrial) -> FlowResult:
        if getattr(self.session, "replaying", False):
            return ACCEPT
        line = format_log_line(self.session.name, trial, datetime.now(UTC))
        try:
            # opened per line: nothing stays open between trials and every line is on disk
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
            self.lines += 1
        except OSError as exc:
            # losing a log line must not stop the tuning; say so loudly instead
            logger.error("log plugin: cannot write to %s: %s", self.path, exc)
        return ACCEPT
