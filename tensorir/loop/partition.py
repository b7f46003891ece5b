"""Loop partition: a serial loop whose last iterations fail a guard runs as two loops.

A register block that does not divide its extent is guarded: `pick_rows` takes 6 tiles of 49,
and after unrolling every row of the block tests `t_o*6 + k < 49` -- inside the reduction
loop, where the test is repeated at every step and, worse, keeps LLVM from holding the
accumulators in registers (a store under a branch cannot be promoted out of the loop):

    for t_o in range(0, 9):                      for t_o in range(0, 8):
      for rc in range(0, 128):                     for rc in range(0, 128):
        acc[t_o*96] = ...                            acc[t_o*96] = ...
        if t_o*6 + 1 < 49:              ->           acc[t_o*96 + 16] = ...
          acc[t_o*96 + 16] = ...                 for t_o in range(8, 9):
                                                   for rc in range(0, 128):
                                                     acc[t_o*96] = ...
                                                     (the rows past 49: gone)

The split point is the first value of the loop variable at which a guard of the body turns
false, over the guards that compare an affine function of that variable alone with a
constant and hold below a bound (`a*v + b < c`, a > 0, and the like). The loop is split only
when such a guard sits inside an inner loop (a guard at the top of the body costs one branch
per iteration: not worth a second copy of the body). `simplify` then drops the guards the
first loop's range proves and the code the second loop's range rules out. TVM's
LoopPartition pass does this for the same reason.
"""

from __future__ import annotations

from typing import Any

from tensorir.loop.arith import conjuncts, const_value, is_int, linear_diff
from tensorir.loop.ir import Cmp, Const, Expr, For, ForKind, If, Seq, Stmt, Var
from tensorir.loop.visitor import Mutator, children


def first_false(cond: Expr, var: Var) -> int | None:
    """The least value of `var` at and above which comparison `cond` is false, when `cond`
    is `k*var + c OP 0` (k, c constants after moving everything to one side) and holds below
    that value; None for any other condition (it names no tail)."""
    if not isinstance(cond, Cmp) or cond.lanes != 1 or not is_int(cond.a.dtype):
        return None
    if cond.op not in ("<", "<=", ">", ">="):
        return None
    terms, c = linear_diff(cond.a, cond.b)
    if set(terms) != {var}:
        return None
    k = terms[var]
    if cond.op in (">", ">="):  # k*v + c > 0  <=>  -k*v - c < 0
        k, c = -k, -c
    if k <= 0:  # holds above a bound (a head, not a tail), or not at all
        return None
    if cond.op in ("<", ">"):  # k*v + c < 0  <=>  v < -c/k
        return -(c // k)
    return (-c) // k + 1  # k*v + c <= 0  <=>  v <= -c/k


def _guards(body: Stmt, var: Var) -> tuple[list[int], bool]:
    """(the tail bounds of `body`'s guards on `var`, whether one sits inside an inner loop)."""
    bounds: list[int] = []
    inner = False

    def visit(node: Any, depth: int) -> None:
        nonlocal inner
        if isinstance(node, If):
            found = [b for c in conjuncts(node.cond) if (b := first_false(c, var)) is not None]
            bounds.extend(found)
            inner = inner or (bool(found) and depth > 0)
        if isinstance(node, For):
            depth += 1
        for child in children(node):
            if isinstance(child, Stmt):
                visit(child, depth)

    visit(body, 0)
    return bounds, inner


def partition_loop(loop: For) -> Stmt:
    """`loop` split where its guarded tail begins (module docstring), else `loop` itself."""
    if loop.kind is not ForKind.SERIAL:
        return loop
    start, extent = const_value(loop.start), const_value(loop.extent)
    if start is None or extent is None:
        return loop
    bounds, inner = _guards(loop.body, loop.var)
    inside = [b for b in bounds if start < b < start + extent]  # the others hold or fail throughout
    if not inner or not inside:
        return loop
    split = min(inside)

    def part(lo: int, hi: int) -> For:
        dtype = loop.extent.dtype
        return For(loop.var, Const(lo, dtype), Const(hi - lo, dtype), loop.kind, loop.body)

    return Seq((part(start, split), part(split, start + extent)))


class _Partition(Mutator):
    def visit_For(self, s: For) -> Stmt:
        return partition_loop(self.generic(s))


def partition_tails(node: Any) -> Any:
    """Split every serial loop whose guarded tail is tested inside an inner loop."""
    return _Partition().visit(node)
