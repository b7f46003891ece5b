"""Integer arithmetic helpers shared by the simplifier, the verifier and lowering.

* `int_range(e, ranges)`: inclusive [lo, hi] bounds of an integer expression given
  ranges of its variables (None when unknown).
* `to_linear` / `from_linear`: an integer expression as `sum(coeff * atom) + const`,
  the canonical form the simplifier rebuilds index expressions in (`i*16 + j`).
* `fold_binop` / `fold_cast`: constant folding with the IR's semantics.
* `conjuncts`: the operands of a condition's top-level `and`s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from tensorir.loop.ir import BinOp, Cast, Cmp, Const, Expr, Load, Not, Select, Var

Range = tuple[int, int]
Ranges = Mapping[Expr, Range]
Linear = tuple[dict[Expr, int], int]


def is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def const_value(e: Expr) -> int | float | bool | None:
    return e.value if isinstance(e, Const) else None


# ---- ranges --------------------------------------------------------------------------
def _mul_range(a: Range, b: Range) -> Range:
    prods = [x * y for x in a for y in b]
    return min(prods), max(prods)


def _binop_range(e: BinOp, ranges: Ranges) -> Range | None:
    ra = int_range(e.a, ranges)
    c = const_value(e.b)
    if e.op == "%" and isinstance(c, int) and c > 0:
        if ra is not None and ra[0] >= 0 and ra[1] < c:
            return ra
        terms, k = to_linear(e.a)  # a multiple of g mod c is a multiple of gcd(g, c)
        return 0, c - math.gcd(c, k, *terms.values())
    rb = int_range(e.b, ranges)
    if ra is None or rb is None:
        return None
    if e.op == "+":
        return ra[0] + rb[0], ra[1] + rb[1]
    if e.op == "-":
        return ra[0] - rb[1], ra[1] - rb[0]
    if e.op == "*":
        return _mul_range(ra, rb)
    if e.op == "//" and isinstance(c, int) and c > 0:
        return ra[0] // c, ra[1] // c
    if e.op == "min":
        return min(ra[0], rb[0]), min(ra[1], rb[1])
    if e.op == "max":
        return max(ra[0], rb[0]), max(ra[1], rb[1])
    return None


def int_range(e: Expr, ranges: Ranges) -> Range | None:
    """Inclusive bounds of scalar integer/bool expression `e`, or None when unknown."""
    if e.lanes != 1:
        return None
    if isinstance(e, Const):
        return (int(e.value), int(e.value)) if not is_float(e.dtype) else None
    if isinstance(e, Cmp | Not) or e.dtype == "bool":
        return (0, 1)
    if not is_int(e.dtype):
        return None
    if isinstance(e, Var):
        return ranges.get(e)
    if isinstance(e, BinOp):
        return _binop_range(e, ranges)
    if isinstance(e, Select):
        ra, rb = int_range(e.a, ranges), int_range(e.b, ranges)
        return None if ra is None or rb is None else (min(ra[0], rb[0]), max(ra[1], rb[1]))
    if isinstance(e, Cast) and (is_int(e.value.dtype) or e.value.dtype == "bool"):
        return int_range(e.value, ranges)
    if isinstance(e, Load) and e.dtype == "uint8":
        return (0, 255)
    return ranges.get(e)


# ---- linear forms --------------------------------------------------------------------
def _add_into(dst: dict[Expr, int], src: dict[Expr, int], scale: int) -> None:
    for t, k in src.items():
        dst[t] = dst.get(t, 0) + k * scale


def to_linear(e: Expr) -> Linear:
    """`e` (scalar integer) as ({atom: coeff}, const); atoms keep first-appearance order."""
    if isinstance(e, Const) and isinstance(e.value, int | np.integer) and not isinstance(e.value, bool):
        return {}, int(e.value)
    if isinstance(e, BinOp) and e.op in ("+", "-", "*") and e.lanes == 1:
        ta, ca = to_linear(e.a)
        tb, cb = to_linear(e.b)
        if e.op == "*":
            if not tb:
                ta, ca, tb, cb = tb, cb, ta, ca  # make the constant side `a`
            if not ta:
                out: dict[Expr, int] = {}
                _add_into(out, tb, ca)
                return out, ca * cb
            return {e: 1}, 0
        out = dict(ta)
        sign = 1 if e.op == "+" else -1
        _add_into(out, tb, sign)
        return out, ca + sign * cb
    return {e: 1}, 0


def _term(atom: Expr, k: int) -> Expr:
    return atom if k == 1 else BinOp("*", atom, Const(k, atom.dtype))


def from_linear(terms: Mapping[Expr, int], const: int, dtype: str) -> Expr:
    """Rebuild `sum(k*t) + const` left-associatively: `i*16 + j - 1`."""
    items = [(t, k) for t, k in terms.items() if k != 0]
    if not items:
        return Const(const, dtype)
    if items[0][1] < 0:
        pos = next((n for n, (_, k) in enumerate(items) if k > 0), None)
        if pos is not None:
            items.insert(0, items.pop(pos))
    t0, k0 = items[0]
    if k0 > 0:
        acc = _term(t0, k0)
    elif const > 0:
        acc, const = BinOp("-", Const(const, dtype), _term(t0, -k0)), 0
    else:
        acc = BinOp("-", Const(0, dtype), _term(t0, -k0))
    for t, k in items[1:]:
        acc = BinOp("+", acc, _term(t, k)) if k > 0 else BinOp("-", acc, _term(t, -k))
    if const > 0:
        acc = BinOp("+", acc, Const(const, dtype))
    elif const < 0:
        acc = BinOp("-", acc, Const(-const, dtype))
    return acc


def conjuncts(cond: Expr) -> list[Expr]:
    """The operands of `cond`'s top-level `and`s (`[cond]` when it is not one)."""
    if isinstance(cond, BinOp) and cond.op == "and":
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


def linear_diff(a: Expr, b: Expr) -> Linear:
    ta, ca = to_linear(a)
    tb, cb = to_linear(b)
    out = dict(ta)
    _add_into(out, tb, -1)
    return {t: k for t, k in out.items() if k != 0}, ca - cb


# ---- constant folding ----------------------------------------------------------------
def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _fold_int(op: str, a: int, b: int) -> int | None:
    if op in ("/", "//", "%") and b == 0:
        return None
    table = {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "/": lambda: _trunc_div(a, b),
        "//": lambda: a // b,
        "%": lambda: a % b,
        "min": lambda: min(a, b),
        "max": lambda: max(a, b),
        "and": lambda: a & b,
        "or": lambda: a | b,
        "xor": lambda: a ^ b,
    }
    fn = table.get(op)
    return None if fn is None else fn()


def _fold_float(op: str, a: float, b: float) -> float | None:
    if op in ("/", "//", "%") and b == 0:
        return None
    table = {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "/": lambda: a / b,
        "//": lambda: float(math.floor(a / b)),
        "%": lambda: a - math.floor(a / b) * b,
        "min": lambda: min(a, b),
        "max": lambda: max(a, b),
    }
    fn = table.get(op)
    return None if fn is None else fn()


def round_to(value: float | int | bool, dtype: str) -> int | float | bool:
    """`value` converted (C-style: truncation towards zero) to a Python scalar of `dtype`."""
    if dtype == "bool":
        return bool(value)
    if is_float(dtype):
        return float(np.float32(value)) if dtype == "float32" else float(value)
    return math.trunc(value) if isinstance(value, float) else int(value)


def fold_binop(op: str, a: Const, b: Const, dtype: str) -> Const | None:
    if dtype == "bool":
        r = _fold_int(op, int(bool(a.value)), int(bool(b.value)))
        return None if r is None else Const(bool(r), "bool")
    if is_float(dtype):
        rf = _fold_float(op, float(a.value), float(b.value))
        return None if rf is None else Const(round_to(rf, dtype), dtype)
    ri = _fold_int(op, int(a.value), int(b.value))
    return None if ri is None else Const(ri, dtype)


CMP_FNS = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def fold_cast(c: Const, dtype: str) -> Const | None:
    if isinstance(c.value, float) and not math.isfinite(c.value) and not is_float(dtype):
        return None
    return Const(round_to(c.value, dtype), dtype)
