"""Replaying a tuning session on measured data: a table of values measured at a few settings
of one knob becomes a truth function, and :class:`~tuner_client.stats.noise.NoisyObjective`
adds the noise, so a strategy can be run many times, seeded, against what a real machine did.

Moved out of ``benchmarks/bme_prior.py`` (which replays the offline shared_buffers session
with and without the BME prior); the honest-tuning and fleet simulations replay the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from harmony_base.errors import ConfigError
from tuner_client.stats.noise import NoiseModel, NoisyObjective, Point


class MeasuredTable:
    """Values measured at a few settings of one knob (e.g. qpm and the miss rate P at each
    shared_buffers size), linear in log(setting) between measured settings and held constant
    beyond the ends.

    ``columns`` maps a name to one value per setting; the settings need not be sorted.
    """

    def __init__(self, settings: Sequence[float], columns: Mapping[str, Sequence[float]]) -> None:
        if not settings or any(not (math.isfinite(s) and s > 0) for s in settings):
            raise ConfigError(f"a measured table needs positive, finite settings, but got "
                              f"{list(settings)}")
        order = np.argsort(np.asarray(settings, dtype=float), kind="stable")
        self._settings = [float(settings[i]) for i in order]
        self.log_settings = np.log(np.asarray(self._settings))
        if np.any(np.diff(self.log_settings) == 0):
            raise ConfigError("a measured table needs one row per setting; pool repeated "
                              "settings first")
        self.columns: dict[str, np.ndarray] = {}
        for name, values in columns.items():
            if len(values) != len(settings):
                raise ConfigError(f"column {name!r} has {len(values)} values for "
                                  f"{len(settings)} settings")
            self.columns[name] = np.asarray(values, dtype=float)[order]

    @property
    def settings(self) -> list[float]:
        return list(self._settings)

    def value(self, column: str, setting: float) -> float:
        """``column`` at ``setting`` (interpolated in log setting)."""
        if column not in self.columns:
            raise ConfigError(f"the table has no column {column!r}; it has "
                              f"{sorted(self.columns)}")
        return float(np.interp(math.log(setting), self.log_settings, self.columns[column]))

    def at(self, setting: float) -> dict[str, float]:
        """Every column at ``setting``."""
        return {name: self.value(name, setting) for name in self.columns}

    def truth(self, knob: str, column: str, *, unit: float = 1.0) -> Callable[[Point], float]:
        """A truth function for :class:`NoisyObjective`: ``column`` at ``point[knob] × unit``
        (``unit`` converts the point's units to the table's, e.g. MB to bytes)."""
        if column not in self.columns:
            raise ConfigError(f"the table has no column {column!r}; it has "
                              f"{sorted(self.columns)}")
        return lambda point: self.value(column, float(point[knob]) * unit)


def replay_objective(table: MeasuredTable, knob: str, column: str, *, unit: float = 1.0,
                     model: NoiseModel | None = None, seed: int = 0) -> NoisyObjective:
    """A seeded noisy objective over a measured table (``model`` defaults to the measured
    noise of this machine, :meth:`NoiseModel.measured`)."""
    return NoisyObjective(table.truth(knob, column, unit=unit), model, seed)


def point_noise_only(cv: float, *, shape: str = "lognormal") -> NoiseModel:
    """Independent multiplicative noise of ``cv`` per measurement: no drift, outliers or
    replica bias (the noise the BME-prior replay was written with, ``shape="normal"``)."""
    if shape not in ("lognormal", "normal"):
        raise ConfigError(f"shape must be 'lognormal' or 'normal', but got {shape!r}")
    return NoiseModel.quiet().with_(point_cv=cv, point_shape=shape)
