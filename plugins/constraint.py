"""The ``constraint`` plugin: affine integer constraints, solved with isl, that shrink the space.

At launch it narrows every constrained parameter to the feasible bounding box (so the
session's space really shrinks) and offers strategies a :class:`ConstrainedRegion`; at
fetch it rejects any point outside the constraints, optionally hinting the nearest
feasible point.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from harmony_base.errors import ConfigError, ConstraintError
from harmony_base.jsontypes import JSON
from harmony_base.space import IntParam, RealParam, Space
from plugins.affine import AffineConstraint, exact_number, parse_constraint
from plugins.base import ACCEPT, Flow, FlowResult, Plugin, PluginTrial, SessionView
from plugins.feasible import ConstrainedRegion
from plugins.grid_polytope import GridPolytope

logger = logging.getLogger(__name__)

_HINTS = ("project", "none")


class ConstraintPlugin(Plugin, name="constraint"):
    """Keeps every handed-out point inside affine constraints over integer/stepped parameters.

    Options: ``constraints`` (list of expressions), ``constants`` (name -> number),
    ``reject_hint`` (``project``: hint the nearest feasible point; ``none``).
    """

    def __init__(self, session: SessionView, *, constraints: Sequence[str] | str = (),
                 constants: Mapping[str, JSON] | None = None, reject_hint: str = "project"):
        super().__init__(session)
        if isinstance(constraints, str):
            constraints = [constraints]
        if not isinstance(constraints, Sequence) or not constraints or not all(
                isinstance(c, str) for c in constraints):
            raise ConfigError(f"plugin 'constraint': option 'constraints' must be a non-empty list "
                              f"of expressions, got {constraints!r}")
        constants = dict(constants or {})
        if not isinstance(constants, Mapping):
            raise ConfigError(f"plugin 'constraint': option 'constants' must be a mapping of "
                              f"names to numbers, got {constants!r}")
        for name, value in constants.items():
            exact_number(value, f"constant {name!r}")
        if reject_hint not in _HINTS:
            raise ConfigError(f"plugin 'constraint': option 'reject_hint' must be one of "
                              f"{list(_HINTS)}, got {reject_hint!r}")
        self.texts = list(constraints)
        self.constants = constants
        self.reject_hint = reject_hint
        self._region: ConstrainedRegion | None = None
        self.rejections = 0

    def init(self, space: Space) -> Space:
        """Compile the constraints with isl and return ``space`` narrowed to the feasible box."""
        parsed: list[AffineConstraint] = []
        for text in self.texts:
            parsed.extend(parse_constraint(text, space.names, self.constants))
        polytope = GridPolytope.from_constraints(space, parsed)
        if polytope.is_empty():
            raise ConstraintError(self._empty_message(space, polytope))
        bounds = polytope.bounds()
        narrowed = _narrowed(space, dict(zip(polytope.names, bounds, strict=True)))
        lower = [lo for lo, _ in bounds]
        upper = [hi - lo for lo, hi in bounds]
        self._region = ConstrainedRegion(narrowed, polytope.shifted(lower, upper))
        for name in polytope.names:
            before, after = space.numeric(name), narrowed.numeric(name)
            logger.info("constraint: %s narrowed from %s..%s to %s..%s", name,
                        before.min, before.max, after.min, after.max)
        return narrowed

    def region(self) -> ConstrainedRegion | None:
        return self._region

    def generate(self, trial: PluginTrial) -> FlowResult:
        region = self._region
        if region is None:
            raise ConstraintError("plugin 'constraint': generate() called before init()")
        if region.contains(trial.point):
            return ACCEPT
        self.rejections += 1
        broken = region.violated(trial.point)
        hint = region.project(trial.point) if self.reject_hint == "project" else None
        logger.debug("constraint: rejecting %s (breaks %s), hint %s", trial.point, broken, hint)
        return FlowResult(Flow.REJECT, hint=hint, reason="violates " + "; ".join(broken))

    def _empty_message(self, space: Space, polytope: GridPolytope) -> str:
        conflict = polytope.first_conflict()
        ranges = ", ".join(f"{n} in {space.numeric(n).min}..{space.numeric(n).max}"
                           for n in polytope.names)
        if conflict is None:
            return f"the constraints {self.texts} leave no feasible grid point ({ranges})"
        first = self.texts.index(conflict.text) if conflict.text in self.texts else -1
        earlier = self.texts[:first]
        with_others = f" together with {earlier}" if earlier else ""
        return (f"constraint {conflict.text!r}{with_others} leaves no feasible grid point "
                f"({ranges}); relax it or widen the parameter ranges")


def _narrowed(space: Space, bounds: Mapping[str, tuple[int, int]]) -> Space:
    """``space`` with each named parameter cut to grid indices ``lo..hi`` (grid kept aligned)."""
    values = {}
    for name, (lo, hi) in bounds.items():
        p = space[name]
        if isinstance(p, IntParam | RealParam):
            values[name] = (p.value_at(lo), p.value_at(hi))
    return space.narrowed(values)
