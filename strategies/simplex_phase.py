"""What a simplex strategy's batch being measured is for (its state machine's phases)."""

from __future__ import annotations

import enum


class Phase(enum.Enum):
    """What the batch being measured is for."""

    INIT = "init"
    COMBINE = "combine"
    REFLECT = "reflect"
    EXPAND = "expand"
    EXPAND_ONE = "expand-one"
    EXPAND_ALL = "expand-all"
    CONTRACT_OUTSIDE = "contract-outside"
    CONTRACT_INSIDE = "contract-inside"
    SHRINK = "shrink"
    CONVERGED = "converged"
