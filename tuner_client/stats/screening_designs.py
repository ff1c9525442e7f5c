"""The two-level designs a knob screening runs (:mod:`tuner_client.stats.screening`):
Plackett–Burman (N runs for up to N − 1 knobs, N = 8, 12, 16, 20 or 24, from the cyclic
generator rows of Plackett and Burman, *The design of optimum multifactorial experiments*,
Biometrika 33, 1946; the unused columns are dummies whose apparent effects measure the noise)
and one-at-a-time at the ends."""

from __future__ import annotations

from typing import Literal

import numpy as np

from harmony_base.errors import ConfigError

Design = Literal["pb", "oat"]

#: Plackett and Burman's (1946) first rows; the other rows are cyclic shifts, then all minus
PB_GENERATORS: dict[int, str] = {
    8: "+++-+--",
    12: "++-+++---+-",
    16: "++++-+-++--+---",
    20: "++--++++-+-+----++-",
    24: "+++++-+-++--++--+-+----",
}

def pb_runs(n_factors: int) -> int:
    """The runs of the smallest Plackett–Burman design for ``n_factors`` two-level factors."""
    if n_factors < 1:
        raise ConfigError(f"a screening design needs at least one knob, but got {n_factors}")
    for n in sorted(PB_GENERATORS):
        if n - 1 >= n_factors:
            return n
    raise ConfigError(f"Plackett–Burman designs here take at most 23 knobs, but got "
                      f"{n_factors}; screen them in groups")


def plackett_burman(n_factors: int) -> np.ndarray:
    """The N × (N − 1) matrix of ±1 of the smallest PB design for ``n_factors``: the first
    ``n_factors`` columns are the factors, the rest dummies. Columns are orthogonal and
    balanced (XᵀX = N·I)."""
    n = pb_runs(n_factors)
    first = [1 if c == "+" else -1 for c in PB_GENERATORS[n]]
    rows = [first[-i:] + first[:-i] if i else list(first) for i in range(n - 1)]
    rows.append([-1] * (n - 1))
    return np.array(rows, dtype=int)


def oat_design(n_factors: int) -> np.ndarray:
    """The 2k × k one-at-a-time design: knob j at −1 then +1, the others at 0 (default)."""
    if n_factors < 1:
        raise ConfigError(f"a screening design needs at least one knob, but got {n_factors}")
    rows = np.zeros((2 * n_factors, n_factors), dtype=int)
    for j in range(n_factors):
        rows[2 * j, j], rows[2 * j + 1, j] = -1, 1
    return rows


def design_matrix(design: Design, k: int) -> np.ndarray:
    """The design's matrix of levels for ``k`` knobs (−1 low, +1 high, 0 the default)."""
    if design == "pb":
        return plackett_burman(k)
    if design == "oat":
        return oat_design(k)
    raise ConfigError(f"design must be 'pb' or 'oat', but got {design!r}")
