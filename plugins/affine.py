"""Parse constraint expressions into exact affine inequalities, with Python's ``ast`` (no eval).

A constraint is a comparison (chains allowed) of affine expressions over parameter names,
numeric literals and named constants: ``work_mem * connections + temp_buffers <= 1024``.
Each comparison becomes one :class:`AffineConstraint` ``sum(coeffs[p] * p) + constant >= 0``
(or ``== 0``), with :class:`fractions.Fraction` coefficients so nothing is rounded.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction

from harmony_base.errors import ConstraintError

#: comparison operators a constraint may use
_COMPARISONS = {ast.LtE: "<=", ast.Lt: "<", ast.GtE: ">=", ast.Gt: ">", ast.Eq: "=="}
#: the largest integer exponent accepted in ``constant ** n``
_MAX_EXPONENT = 64


@dataclass(frozen=True)
class AffineConstraint:
    """``sum(coeffs[name] * name) + constant`` compared with 0.

    ``kind`` is ``">="`` (non-negative), ``">"`` (positive) or ``"=="`` (zero); ``text`` is
    the source expression it came from (for error messages).
    """

    coeffs: Mapping[str, Fraction]
    constant: Fraction
    kind: str
    text: str

    def holds(self, values: Mapping[str, Fraction]) -> bool:
        """Exact evaluation at ``values`` (a value for every name in ``coeffs``)."""
        total = self.constant + sum((c * values[n] for n, c in self.coeffs.items()), Fraction(0))
        if self.kind == ">=":
            return total >= 0
        if self.kind == ">":
            return total > 0
        return total == 0


@dataclass(frozen=True)
class _Affine:
    coeffs: dict[str, Fraction]
    constant: Fraction

    @property
    def is_constant(self) -> bool:
        return not self.coeffs

    def scaled(self, factor: Fraction) -> _Affine:
        if factor == 0:
            return _Affine({}, Fraction(0))
        return _Affine({n: c * factor for n, c in self.coeffs.items()}, self.constant * factor)

    def plus(self, other: _Affine, sign: int = 1) -> _Affine:
        coeffs = dict(self.coeffs)
        for n, c in other.coeffs.items():
            coeffs[n] = coeffs.get(n, Fraction(0)) + sign * c
        return _Affine({n: c for n, c in coeffs.items() if c != 0},
                       self.constant + sign * other.constant)


def exact_number(value: object, what: str) -> Fraction:
    """``value`` as an exact fraction; floats are read as the decimal they print as (0.1 = 1/10)."""
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise ConstraintError(f"{what} must be a number, got {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConstraintError(f"{what} must be finite, got {value!r}")
        return Fraction(repr(value))
    return Fraction(value)


def parse_constraint(text: str, parameters: Collection[str],
                     constants: Mapping[str, object] | None = None) -> list[AffineConstraint]:
    """Parse one constraint expression into its affine inequalities.

    Raises :class:`ConstraintError` quoting ``text`` and pointing at the offending part for
    syntax errors, non-affine terms, unknown names, or a comparison that names no parameter.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConstraintError(f"a constraint must be a non-empty string, got {text!r}")
    consts = {name: exact_number(v, f"constant {name!r}") for name, v in (constants or {}).items()}
    clash = sorted(set(consts) & set(parameters))
    if clash:
        raise ConstraintError(f"constant {clash[0]!r} has the name of a parameter; rename it")
    source = text.strip()
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        col = (exc.offset or 1) - 1
        raise ConstraintError(_pointed(source, f"syntax error: {exc.msg}", col, col + 1)) from None
    parser = _Parser(source, set(parameters), consts)
    return parser.constraints(tree.body)


class _Parser:
    def __init__(self, source: str, parameters: set[str], constants: Mapping[str, Fraction]):
        self.source = source
        self.parameters = parameters
        self.constants = constants

    def fail(self, node: ast.AST, message: str) -> ConstraintError:
        start = getattr(node, "col_offset", 0)
        end = getattr(node, "end_col_offset", None) or start + 1
        return ConstraintError(_pointed(self.source, message, start, end))

    def constraints(self, node: ast.expr) -> list[AffineConstraint]:
        if not isinstance(node, ast.Compare):
            raise self.fail(node, "a constraint must be a comparison such as "
                                  "'a + 2*b <= 100' (operators <=, <, >=, >, ==)")
        out: list[AffineConstraint] = []
        left_node = node.left
        left = self.affine(left_node)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.affine(right_node)
            symbol = _COMPARISONS.get(type(op))
            if symbol is None:
                raise self.fail(node, f"comparison operator {type(op).__name__} is not allowed; "
                                      f"use <=, <, >=, > or ==")
            # normalise to "expr >= 0", "expr > 0" or "expr == 0"
            if symbol in ("<=", "<"):
                diff, kind = right.plus(left, -1), ">=" if symbol == "<=" else ">"
            elif symbol in (">=", ">"):
                diff, kind = left.plus(right, -1), symbol
            else:
                diff, kind = left.plus(right, -1), "=="
            if diff.is_constant:
                part = ast.Compare(left=left_node, ops=[op], comparators=[right_node])
                ast.copy_location(part, left_node)
                part.end_col_offset = right_node.end_col_offset
                raise self.fail(part, "this comparison names no parameter (after simplification); "
                                      "a constraint must restrict at least one parameter")
            out.append(AffineConstraint(diff.coeffs, diff.constant, kind, self.source))
            left_node, left = right_node, right
        return out

    def affine(self, node: ast.expr) -> _Affine:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise self.fail(node, f"only numeric literals are allowed, got {node.value!r}")
            return _Affine({}, exact_number(node.value, "a literal"))
        if isinstance(node, ast.Name):
            if node.id in self.parameters:
                return _Affine({node.id: Fraction(1)}, Fraction(0))
            if node.id in self.constants:
                return _Affine({}, self.constants[node.id])
            raise self.fail(node, f"unknown name {node.id!r}: it is neither a parameter "
                                  f"{sorted(self.parameters)} nor a constant "
                                  f"{sorted(self.constants)}")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            inner = self.affine(node.operand)
            return inner.scaled(Fraction(-1)) if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp):
            return self.binary(node)
        if isinstance(node, ast.Call):
            raise self.fail(node, "function calls are not allowed in a constraint")
        raise self.fail(node, f"{type(node).__name__} is not allowed in a constraint; use "
                              f"+, -, * and / by constants, numbers, constants and parameters")

    def binary(self, node: ast.BinOp) -> _Affine:
        left, right = self.affine(node.left), self.affine(node.right)
        if isinstance(node.op, ast.Add):
            return left.plus(right)
        if isinstance(node.op, ast.Sub):
            return left.plus(right, -1)
        if isinstance(node.op, ast.Mult):
            if left.is_constant:
                return right.scaled(left.constant)
            if right.is_constant:
                return left.scaled(right.constant)
            raise self.fail(node, f"not affine: this multiplies parameters "
                                  f"{sorted(left.coeffs)} and {sorted(right.coeffs)}; only "
                                  f"multiplication by a constant is allowed")
        if isinstance(node.op, ast.Div):
            if not right.is_constant:
                raise self.fail(node, f"not affine: division by parameter(s) "
                                      f"{sorted(right.coeffs)}; only division by a constant "
                                      f"is allowed")
            if right.constant == 0:
                raise self.fail(node, "division by zero")
            return left.scaled(1 / right.constant)
        if isinstance(node.op, ast.Pow):
            exponent = right.constant
            if (left.is_constant and right.is_constant and exponent.denominator == 1
                    and 0 <= exponent <= _MAX_EXPONENT):
                return _Affine({}, left.constant ** int(exponent))
            raise self.fail(node, "not affine: ** is only allowed between constants, with a "
                                  f"whole exponent 0..{_MAX_EXPONENT} (e.g. 1024**2)")
        raise self.fail(node, f"operator {type(node.op).__name__} is not allowed; use +, -, "
                              f"* and / by constants")


def _pointed(source: str, message: str, start: int, end: int) -> str:
    """``message`` about ``source``, with a caret line under columns ``start..end``."""
    start = max(0, min(start, len(source)))
    end = max(start + 1, min(end, len(source) + 1))
    return (f"constraint {source!r}: {message}\n    {source}\n    "
            f"{' ' * start}{'^' * (end - start)}")
