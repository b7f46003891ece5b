"""Interval bounds for lowering: the symbolic range of an index as loops sweep theirs (a
compute_at region), and the guard that turns a Select whose arm could read out of bounds
into an If around its store (schedule/lower.py)."""

from __future__ import annotations

from tensorir.loop.arith import Range, int_range
from tensorir.loop.ir import BinOp, Const, Expr, If, Load, Select, Stmt, Store, Var
from tensorir.loop.simplify import simplify
from tensorir.loop.visitor import substitute, walk


def sym_bound(e: Expr, ranged: dict[Expr, Range]) -> tuple[Expr, Expr] | None:
    """Symbolic [lo, hi] of `e` as the vars in `ranged` sweep their ranges (others fixed)."""
    if not any(n in ranged for n in walk(e) if isinstance(n, Var)):
        return e, e
    if isinstance(e, Var):
        lo, hi = ranged[e]
        return Const(lo, e.dtype), Const(hi, e.dtype)
    if isinstance(e, Select):
        a, b = sym_bound(e.a, ranged), sym_bound(e.b, ranged)
        if a is None or b is None:
            return None
        return BinOp("min", a[0], b[0]), BinOp("max", a[1], b[1])
    if not isinstance(e, BinOp):
        return None
    a, b = sym_bound(e.a, ranged), sym_bound(e.b, ranged)
    if a is None or b is None:
        return None
    c = e.b.value if isinstance(e.b, Const) else None
    if e.op == "+":
        return a[0] + b[0], a[1] + b[1]
    if e.op == "-":
        return a[0] - b[1], a[1] - b[0]
    if e.op in ("min", "max"):
        return BinOp(e.op, a[0], b[0]), BinOp(e.op, a[1], b[1])
    if e.op == "*" and isinstance(c, int):
        return (a[0] * c, a[1] * c) if c >= 0 else (a[1] * c, a[0] * c)
    if e.op == "//" and isinstance(c, int) and c > 0:
        return a[0] // c, a[1] // c
    if e.op == "%" and isinstance(c, int) and c > 0:
        return Const(0, e.dtype), Const(c - 1, e.dtype)
    return None


def _unsafe_arm(arm: Expr, ranges: dict[Expr, Range], known: dict) -> bool:
    """Whether evaluating `arm` unconditionally could fault: a load whose index may leave its
    buffer over the loop ranges, or an integer division by a non-constant. `known`: answers
    for arms and loads seen before under the same ranges (nested selects share their arms'
    loads, and each arm is walked again for every select around it)."""
    hit = known.get(("arm", arm))
    if hit is None:
        hit = known[("arm", arm)] = any(_unsafe_node(x, ranges, known) for x in walk(arm))
    return hit


def _unsafe_node(x: Expr, ranges: dict[Expr, Range], known: dict) -> bool:
    if isinstance(x, Load):
        unsafe = known.get(("load", x))
        if unsafe is None:
            unsafe = known[("load", x)] = not _in_bounds(x, ranges)
        return unsafe
    divides = isinstance(x, BinOp) and x.op in ("/", "//", "%") and not isinstance(x.b, Const)
    return divides and not x.dtype.startswith("float")


def _in_bounds(load: Load, ranges: dict[Expr, Range]) -> bool:
    """Whether `load` stays in its buffer over the loop ranges: by interval arithmetic on the
    index, and if that cannot tell, on the simplified index (a cached region's index is the
    global one minus the region's start, whose common terms only the simplifier cancels: a
    conv's epilogue reads its accumulator so)."""

    def fits(index: Expr) -> bool:
        r = int_range(index, ranges)
        return r is not None and r[0] >= 0 and r[1] < load.buffer.size

    return fits(load.index) or fits(simplify(load.index, ranges))


def hoist_selects(s: Store, ranges: dict[Expr, Range], known: dict | None = None) -> Stmt:
    """store(..., f(select(c, a, b))) -> if c: store(f(a)) else: store(f(b)) when evaluating
    a or b could fault (a Select evaluates both arms; an out-of-range arm must not be read).
    In-bounds arms stay a Select, which vectorizes."""
    known = {} if known is None else known
    for n in walk(s.value):
        if isinstance(n, Select) and any(_unsafe_arm(arm, ranges, known) for arm in (n.a, n.b)):
            then = Store(s.buffer, s.index, substitute(s.value, {n: n.a}))
            other = Store(s.buffer, s.index, substitute(s.value, {n: n.b}))
            return If(n.cond, hoist_selects(then, ranges, known), hoist_selects(other, ranges, known))
    return s


def window(bounds: list[tuple[Expr, Expr]], n: int, full: int, ranges: dict[Expr, Range]) -> tuple[Expr, int]:
    """(start, extent) of a compute_at region along one dimension of `full` elements: the
    union of the `n` readers' [lo, hi] bounds (all of it when a bound is unknown or the
    window would cover the tensor)."""
    if not bounds or len(bounds) != n:
        return Const(0), full
    lo, hi = bounds[0]
    for b_lo, b_hi in bounds[1:]:
        lo, hi = BinOp("min", lo, b_lo), BinOp("max", hi, b_hi)
    lo = simplify(lo, ranges)
    extent = simplify(hi - lo + 1, ranges)
    r = int_range(extent, ranges)
    if r is None or r[1] >= full:
        return Const(0), full
    ext = max(r[1], 1)
    at = int_range(lo, ranges)
    if at is None or at[0] < 0:
        # reads before the tensor (a padded consumer's guarded border loads): the window
        # starts at 0 instead, so only the producer's own domain is computed (rows past
        # its end are guarded like a split's tail)
        lo = simplify(BinOp("max", lo, Const(0, lo.dtype)), ranges)
    return lo, ext
