"""The ``cache`` plugin: answer points that were already measured, without measuring again.

Known values come from the session's own history and, optionally, from a prior file: a
``log`` plugin file (JSON lines) or a CSV with one column per parameter plus ``value``.
The first value known for a point is the one returned.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSON
from harmony_base.space import EnumParam, IntParam, Param, Space
from plugins.base import ACCEPT, Flow, FlowResult, Plugin, PluginTrial, SessionView
from plugins.log import read_log

logger = logging.getLogger(__name__)

Key = tuple[object, ...]


def point_key(space: Space, point: Mapping[str, JSON]) -> Key | None:
    """A hashable key for a grid point of ``space`` (``None`` if it is not one)."""
    key: list[object] = []
    for p in space.params:
        if p.name not in point:
            return None
        k = _value_key(p, point[p.name])
        if k is None:
            return None
        key.append(k)
    return tuple(key)


def _value_key(p: Param, raw: Any) -> tuple[str, int] | float | None:
    """One coordinate of a point's key; ``raw`` is as read from a log or CSV file."""
    if isinstance(p, EnumParam):
        for v in p.values:
            if v == raw or (isinstance(raw, str) and str(v) == raw):
                return ("enum", p.values.index(v))
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(value):
        return None
    if isinstance(p, IntParam):
        return int(value) if value.is_integer() else None
    return round(value, 9)


def _read_csv(path: Path) -> Iterator[tuple[dict[str, str], str]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"plugin 'cache': cannot read prior file {path}: "
                          f"{exc.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames is None or "value" not in reader.fieldnames:
            raise ConfigError(f"plugin 'cache': prior CSV {path} needs a header with the "
                              f"parameter columns and 'value', got {reader.fieldnames}")
        for row in reader:
            yield row, row.get("value") or ""


def read_prior(path: Path, space: Space) -> dict[Key, float]:
    """Known values from a log file or CSV, keyed by grid point; other rows are skipped."""
    try:
        with path.open(encoding="utf-8") as handle:
            head = handle.read(1)
    except OSError as exc:
        raise ConfigError(f"plugin 'cache': cannot read prior file {path}: "
                          f"{exc.strerror}") from None
    rows: Iterator[tuple[Mapping[str, JSON], Any]]
    if head == "{":
        rows = ((r["point"], r.get("value")) for r in read_log(path) if r.get("failure") is None)
    else:
        rows = _read_csv(path)
    known: dict[Key, float] = {}
    skipped = 0
    for point, raw in rows:
        key = point_key(space, point)
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = math.nan
        if key is None or not math.isfinite(value):
            skipped += 1
            continue
        known.setdefault(key, value)
    logger.info("cache: %d known points from %s (%d rows skipped: off the grid, other "
                "parameters, or no value)", len(known), path, skipped)
    return known


class CachePlugin(Plugin, name="cache"):
    """RETURNs the known value of a point instead of handing it out again.

    Options: ``prior`` (optional path to a log file or CSV of earlier measurements).
    """

    def __init__(self, session: SessionView, *, prior: str | None = None):
        super().__init__(session)
        if prior is not None and (not isinstance(prior, str) or not prior):
            raise ConfigError(f"plugin 'cache': option 'prior' must be a file path, got {prior!r}")
        self.prior_path = Path(prior) if prior else None
        if self.prior_path is not None and not self.prior_path.is_file():
            raise ConfigError(f"plugin 'cache': prior file {self.prior_path} does not exist")
        self._space: Space | None = None
        self._prior: dict[Key, float] = {}
        self._known: dict[Key, float] = {}
        self._seen = 0  # history entries already indexed
        self.hits = 0

    def init(self, space: Space) -> Space:
        self._space = space
        if self.prior_path is not None:
            self._prior = read_prior(self.prior_path, space)
        return space

    def generate(self, trial: PluginTrial) -> FlowResult:
        space = self._space or self.session.space
        self._index_history(space)
        key = point_key(space, trial.point)
        if key is None:
            return ACCEPT
        value = self._known.get(key, self._prior.get(key))
        if value is None:
            return ACCEPT
        self.hits += 1
        logger.debug("cache: %s answered from %s", trial.point,
                     "history" if key in self._known else "prior data")
        return FlowResult(Flow.RETURN, value=value, reason="cached")

    def _index_history(self, space: Space) -> None:
        history = self.session.history()
        if len(history) < self._seen:  # the history was replaced: index it again
            self._known.clear()
            self._seen = 0
        for entry in history[self._seen:]:
            if entry.value is None or not math.isfinite(entry.value):
                continue
            key = point_key(space, entry.point)
            if key is not None:
                self._known.setdefault(key, entry.value)
        self._seen = len(history)
