"""Affine constraints compiled to an isl integer set over step-grid indices.

A constrained parameter ``p`` takes the values ``p.min + k * p.step`` for grid indices
``k = 0 .. p.size - 1``. Substituting that into each :class:`AffineConstraint` and scaling
by the common denominator gives integer rows ``sum(a_i * k_i) + b >= 0`` (or ``== 0``)
that are exact. isl is the source of truth for emptiness, bounds and sampling of thin sets;
the same integer rows are evaluated directly in Python for fast membership tests.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

import islpy as isl
import numpy as np

from harmony_base.errors import ConstraintError
from harmony_base.space import EnumParam, IntParam, Param, RealParam, Space
from plugins.affine import AffineConstraint, exact_number

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IntegerRow:
    """An exact integer constraint ``sum(coeffs[i] * k[i]) + constant >= 0`` (or ``== 0``)."""

    coeffs: tuple[int, ...]
    constant: int
    equality: bool
    text: str

    def residual(self, k: Sequence[int]) -> int:
        return self.constant + sum(a * x for a, x in zip(self.coeffs, k, strict=True))

    def holds(self, k: Sequence[int]) -> bool:
        r = self.residual(k)
        return r == 0 if self.equality else r >= 0


def in_box_and_rows(rows: Sequence[IntegerRow], upper: Sequence[int], k: Sequence[int]) -> bool:
    """Whether ``0 <= k <= upper`` holds and every row holds at ``k`` (exact integers)."""
    for x, u in zip(k, upper, strict=True):
        if x < 0 or x > u:
            return False
    for row in rows:
        r = row.constant
        for a, x in zip(row.coeffs, k, strict=True):
            r += a * x
        if r < 0 or (row.equality and r != 0):
            return False
    return True


def grid_of(param: Param, text: str) -> tuple[Fraction, Fraction]:
    """The exact ``(min, step)`` of a parameter's grid, or a ConstraintError for gridless ones."""
    if isinstance(param, EnumParam):
        raise ConstraintError(f"constraint {text!r}: parameter {param.name!r} is an enumeration; "
                              f"constraints may only name integer or stepped real parameters")
    if isinstance(param, RealParam) and not param.discrete:
        raise ConstraintError(f"constraint {text!r}: parameter {param.name!r} is continuous "
                              f"(real with step 0); give it a step > 0 so the constraint can be "
                              f"solved over integers")
    if not isinstance(param, IntParam | RealParam):
        raise ConstraintError(f"constraint {text!r}: parameter {param.name!r} has no grid")
    return (exact_number(param.min, f"min of {param.name!r}"),
            exact_number(param.step, f"step of {param.name!r}"))


def integer_row(constraint: AffineConstraint, names: Sequence[str],
                grids: Sequence[tuple[Fraction, Fraction]]) -> IntegerRow | None:
    """Substitute ``value = min + k*step`` and scale to integers; ``None`` if always true."""
    coeffs = [Fraction(0)] * len(names)
    constant = constraint.constant
    for i, name in enumerate(names):
        c = constraint.coeffs.get(name, Fraction(0))
        lo, step = grids[i]
        coeffs[i] = c * step
        constant += c * lo
    scale = math.lcm(*(f.denominator for f in (*coeffs, constant)))
    ints = [int(f * scale) for f in coeffs]
    const = int(constant * scale)
    equality = constraint.kind == "=="
    if constraint.kind == ">":
        const -= 1  # over integers, x > 0 is x - 1 >= 0
    g = math.gcd(*ints)
    if g > 1:
        if equality:
            if const % g:
                # no integer point satisfies it: keep the row, isl reports the set empty
                return IntegerRow(tuple(ints), const, True, constraint.text)
            const //= g
        else:
            const = math.floor(Fraction(const, g))  # a*k/g is an integer: tighten the bound
        ints = [a // g for a in ints]
    if not any(ints):
        return None if (const == 0 if equality else const >= 0) else IntegerRow(
            tuple(ints), const, equality, constraint.text)
    return IntegerRow(tuple(ints), const, equality, constraint.text)


class GridPolytope:
    """The feasible grid indices of some parameters: a box ``0 <= k_i <= upper_i`` and rows."""

    def __init__(self, names: Sequence[str], upper: Sequence[int], rows: Sequence[IntegerRow]):
        self.names = tuple(names)
        self.upper = tuple(int(u) for u in upper)
        self.rows = tuple(rows)
        self.ctx = isl.Context()
        self.set = self._build(self.rows)
        self._points: list[tuple[int, ...]] | None = None

    @classmethod
    def from_constraints(cls, space: Space,
                         constraints: Sequence[AffineConstraint]) -> GridPolytope:
        """Compile ``constraints`` over the grids of the parameters they name (in space order)."""
        named = {n for c in constraints for n in c.coeffs}
        names = [n for n in space.names if n in named]
        grids = []
        for name in names:
            text = next(c.text for c in constraints if name in c.coeffs)
            grids.append(grid_of(space[name], text))
        upper = [space[n].size - 1 for n in names]
        rows = [r for r in (integer_row(c, names, grids) for c in constraints) if r is not None]
        return cls(names, upper, rows)

    # -- isl --------------------------------------------------------------------
    def _build(self, rows: Sequence[IntegerRow]) -> isl.Set:
        space = isl.Space.set_alloc(self.ctx, 0, len(self.names))
        for i in range(len(self.names)):
            space = space.set_dim_name(isl.dim_type.set, i, f"k{i}")
        bset = isl.BasicSet.universe(space)
        local = isl.LocalSpace.from_space(space)
        n = len(self.names)
        for i, u in enumerate(self.upper):
            lower_row = IntegerRow(tuple(int(j == i) for j in range(n)), 0, False, "")
            upper_row = IntegerRow(tuple(-int(j == i) for j in range(n)), u, False, "")
            bset = bset.add_constraint(self._constraint(local, lower_row))
            bset = bset.add_constraint(self._constraint(local, upper_row))
        for row in rows:
            bset = bset.add_constraint(self._constraint(local, row))
        return isl.Set.from_basic_set(bset)

    def _constraint(self, local: isl.LocalSpace, row: IntegerRow) -> isl.Constraint:
        c = (isl.Constraint.equality_alloc(local) if row.equality
             else isl.Constraint.inequality_alloc(local))
        for i, a in enumerate(row.coeffs):
            if a:
                c = c.set_coefficient_val(isl.dim_type.set, i, self._val(a))
        return c.set_constant_val(self._val(row.constant))

    def _val(self, n: int) -> isl.Val:
        return isl.Val.read_from_str(self.ctx, str(int(n)))

    def is_empty(self) -> bool:
        return bool(self.set.is_empty())

    def bounds(self) -> list[tuple[int, int]]:
        """Each dimension's smallest and largest feasible index (the feasible bounding box)."""
        if self.is_empty():
            raise ConstraintError("the feasible set is empty: it has no bounds")
        return [(int(self.set.dim_min_val(i).to_python()), int(self.set.dim_max_val(i).to_python()))
                for i in range(len(self.names))]

    def shifted(self, lower: Sequence[int], upper: Sequence[int]) -> GridPolytope:
        """The same set over indices re-based at ``lower`` with new upper ends (after narrowing)."""
        rows = [IntegerRow(r.coeffs, r.residual(lower), r.equality, r.text) for r in self.rows]
        return GridPolytope(self.names, upper, rows)

    def first_conflict(self) -> IntegerRow | None:
        """The first row that, added to the rows before it, empties the set (``None`` if none)."""
        for n in range(1, len(self.rows) + 1):
            if self._build(self.rows[:n]).is_empty():
                return self.rows[n - 1]
        return None

    # -- membership and enumeration --------------------------------------------
    def contains(self, k: Sequence[int]) -> bool:
        """Exact membership of an index vector (box and rows), evaluated in Python."""
        return in_box_and_rows(self.rows, self.upper, k)

    def violated(self, k: Sequence[int]) -> list[IntegerRow]:
        return [r for r in self.rows if not r.holds(k)]

    def box_size(self) -> int:
        return math.prod(u + 1 for u in self.upper)

    def points(self) -> list[tuple[int, ...]]:
        """Every feasible index vector (enumerated by isl once, then cached)."""
        if self._points is None:
            found: list[tuple[int, ...]] = []
            n = len(self.names)

            def visit(p: isl.Point) -> None:
                found.append(tuple(int(p.get_coordinate_val(isl.dim_type.set, i).to_python())
                                   for i in range(n)))

            self.set.foreach_point(visit)
            found.sort()
            self._points = found
        return self._points

    def iter_box(self) -> Iterator[tuple[int, ...]]:
        """Every index vector of the box (feasible or not), for brute-force checks."""
        yield from np.ndindex(*(u + 1 for u in self.upper))

    def sample_sequential(self, rng: np.random.Generator) -> tuple[int, ...]:
        """A feasible index vector built one coordinate at a time with isl (works for thin sets).

        Each coordinate is drawn uniformly between the bounds of what is still feasible; if
        the draw falls into a hole of an integer projection, isl's own sample point decides.
        """
        bset = self.set
        chosen = [0] * len(self.names)
        for i in rng.permutation(len(self.names)):
            i = int(i)
            lo = int(bset.dim_min_val(i).to_python())
            hi = int(bset.dim_max_val(i).to_python())
            value = int(rng.integers(lo, hi + 1))
            fixed = bset.fix_val(isl.dim_type.set, i, self._val(value))
            if fixed.is_empty():
                value = int(bset.sample_point().get_coordinate_val(isl.dim_type.set, i).to_python())
                fixed = bset.fix_val(isl.dim_type.set, i, self._val(value))
            chosen[i] = value
            bset = fixed
        return tuple(chosen)
