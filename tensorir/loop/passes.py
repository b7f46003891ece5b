"""Loop-kind lowering passes: `vectorize` and `unroll`.

vectorize: a `vectorized` loop of constant extent n whose body is stores (optionally under
`If`s with loop-invariant conditions) becomes that body evaluated on n lanes at once:

    for j in vectorized(0, 8):            C[ramp(i*8, 1, 8)] = A[ramp(i*8, 1, 8)] + broadcast(B[i], 8)
      C[i*8 + j] = A[i*8 + j] + B[i]

The loop var becomes `ramp(start, 1, n)`; affine index arithmetic stays a `Ramp` (always
with a constant stride); loop-invariant operands are scalars, wrapped in `Broadcast`
where they meet a vector. Anything else (a nested loop, a condition or index that depends
on the lane in a non-affine way, e.g. a data-dependent gather, a store whose index does
not move with the lane, a buffer both stored and read at different indices) leaves the loop
as a `serial` one. So after this pass no `vectorized` loop remains.

unroll: an `unrolled` loop of constant extent <= `max_unroll` is replaced by its body
repeated with the loop var set to each value (then `simplify` folds the indices). Longer
or non-constant unrolled loops keep their kind for the code generator.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import numpy as np

from tensorir.loop.arith import conjuncts, const_value, is_int, to_linear
from tensorir.loop.ir import (
    BinOp,
    Broadcast,
    Buffer,
    Call,
    Cast,
    Cmp,
    Const,
    Expr,
    For,
    ForKind,
    If,
    Load,
    LoopFunc,
    Not,
    Ramp,
    Select,
    Seq,
    Stmt,
    Store,
    Var,
)
from tensorir.loop.partition import partition_tails
from tensorir.loop.simplify import simplify
from tensorir.loop.visitor import Mutator, substitute, uses_var, walk

MAX_UNROLL = 64


class NotVectorizable(Exception):
    """Raised inside the vectorizer when a loop has to stay serial."""


def _bc(e: Expr, n: int) -> Expr:
    return e if e.lanes == n else Broadcast(e, n)


class _Lanes:
    """Rewrites the expressions of one loop body into n-lane vector expressions."""

    def __init__(self, loop: For, n: int) -> None:
        self.var, self.n = loop.var, n
        self.ramp = Ramp(loop.start, Const(1, loop.var.dtype), n)

    def vec(self, e: Expr) -> Expr:
        if e == self.var:
            return self.ramp
        if not uses_var(e, self.var):
            return e
        if isinstance(e, BinOp):
            return self.binop(e)
        if isinstance(e, Load):
            v = self.vec(e.index)
            return Load(e.buffer, simplify(v)) if v.lanes == 1 else Load(e.buffer, self.index(e.index))
        return self.elementwise(e)

    def binop(self, e: BinOp) -> Expr:
        a, b = self.vec(e.a), self.vec(e.b)
        if is_int(e.dtype) and e.op in ("+", "-"):
            if isinstance(a, Ramp) and (isinstance(b, Ramp) or b.lanes == 1):
                bb, bs = (b.base, b.stride) if isinstance(b, Ramp) else (b, Const(0, b.dtype))
                return Ramp(BinOp(e.op, a.base, bb), BinOp(e.op, a.stride, bs), self.n)
            if isinstance(b, Ramp) and a.lanes == 1 and e.op == "+":
                return Ramp(BinOp("+", a, b.base), b.stride, self.n)
        if is_int(e.dtype) and e.op in ("//", "%") and isinstance(a, Ramp) and _aligned(a, b):
            # the n lanes stay inside one block of b: one quotient, the remainder a ramp
            q = BinOp(e.op, a.base, b)
            return q if e.op == "//" else Ramp(q, a.stride, self.n)
        if is_int(e.dtype) and e.op == "*":
            if isinstance(a, Ramp) and b.lanes == 1:
                return Ramp(BinOp("*", a.base, b), BinOp("*", a.stride, b), self.n)
            if isinstance(b, Ramp) and a.lanes == 1:
                return Ramp(BinOp("*", a, b.base), BinOp("*", a, b.stride), self.n)
        return BinOp(e.op, _bc(a, self.n), _bc(b, self.n))

    def index(self, idx: Expr) -> Expr:
        v = self.vec(idx)
        if isinstance(v, Ramp):
            stride = simplify(v.stride)
            if isinstance(stride, Const) and stride.value != 0:
                return Ramp(simplify(v.base), stride, self.n)
        raise NotVectorizable(f"index {idx} is not affine in the lane")

    def elementwise(self, e: Expr) -> Expr:
        n = self.n
        if isinstance(e, Cmp):
            return Cmp(e.op, _bc(self.vec(e.a), n), _bc(self.vec(e.b), n))
        if isinstance(e, Not):
            return Not(self.vec(e.a))
        if isinstance(e, Select):
            return Select(*(_bc(self.vec(x), n) for x in (e.cond, e.a, e.b)))
        if isinstance(e, Cast):
            return Cast(e.type_, _bc(self.vec(e.value), n))
        if isinstance(e, Call):
            return replace(e, args=tuple(_bc(self.vec(a), n) for a in e.args))
        raise NotVectorizable(f"cannot vectorize {type(e).__name__}")

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, Seq):
            return Seq(tuple(self.stmt(x) for x in s.stmts))
        if isinstance(s, Store):
            return Store(s.buffer, self.index(s.index), _bc(self.vec(s.value), self.n))
        if isinstance(s, If) and not uses_var(s.cond, self.var):
            orelse = None if s.orelse is None else self.stmt(s.orelse)
            return If(s.cond, self.stmt(s.then), orelse)
        raise NotVectorizable(f"cannot vectorize a {type(s).__name__} statement")


def _aligned(r: Ramp, divisor: Expr) -> bool:
    """Whether the lanes base + k stride (k < n) all fall in one block of `divisor`: the
    stride positive and n stride dividing both the divisor and every term of the base
    (indices are non-negative, so then floor((base + k stride) / d) = floor(base / d))."""
    stride, d = const_value(r.stride), const_value(divisor)
    if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0 for v in (stride, d)):
        return False
    span = r.lanes * stride
    terms, const = to_linear(r.base)
    return d % span == 0 and const % span == 0 and all(k % span == 0 for k in terms.values())


def _check_dependences(body: Stmt) -> None:
    """All accesses to a buffer the body stores to must use one index (no lane crosses)."""
    indices: dict[Buffer, set[Expr]] = {}
    stored: set[Buffer] = set()
    for node in walk(body):
        if isinstance(node, Store | Load):
            indices.setdefault(node.buffer, set()).add(node.index)
        if isinstance(node, Store):
            stored.add(node.buffer)
    for buf in stored:
        if len(indices[buf]) > 1:
            raise NotVectorizable(f"{buf.name} is accessed at several indices")


def vectorize_loop(loop: For) -> Stmt:
    """The body of `loop` on vector lanes, or `loop` as a serial loop if that is impossible."""
    serial = replace(loop, kind=ForKind.SERIAL)
    if not isinstance(loop.extent, Const):
        return serial
    n = int(loop.extent.value)
    if n <= 1:
        return substitute(loop.body, {loop.var: loop.start})
    try:
        _check_dependences(loop.body)
        if any(isinstance(x, Ramp | Broadcast) for x in walk(loop.body)):
            raise NotVectorizable("body is already vectorized")
        return simplify(_Lanes(loop, n).stmt(loop.body))  # type: ignore[no-any-return]
    except NotVectorizable:
        return _edge_split(loop, n, serial)


def _affine_comparisons(cond: Expr, var: Var) -> list[Cmp] | None:
    """The comparisons whose `and` `cond` is, when each compares integers affine in `var`."""
    comparisons = conjuncts(cond)
    for c in comparisons:
        if not isinstance(c, Cmp) or c.op == "!=" or not is_int(c.a.dtype):
            return None
        for side in (c.a, c.b):
            terms, _ = to_linear(side)
            if any(atom != var and uses_var(atom, var) for atom in terms):
                return None
    return comparisons  # type: ignore[return-value]


def _edge_split(loop: For, n: int, serial: For) -> Stmt:
    """A body `if c(lane): A else: B` with c an `and` of comparisons affine in the lane (a
    window's bounds; optionally under a tail guard `if g(lane):` of the same kind): each
    comparison is monotone in the lane, so it holds for every lane when it holds for the
    first and the last. Those blocks (the interior of a padded map) run A on vectors, the
    blocks where some comparison of c fails at both ends run B on vectors, the few blocks
    across an edge stay serial. Anything else: `serial`."""
    body, guard = loop.body, None
    if (
        isinstance(body, If)
        and body.orelse is None
        and isinstance(body.then, If)
        and uses_var(body.then.cond, loop.var)
    ):
        guard, body = body.cond, body.then
    if not isinstance(body, If) or not uses_var(body.cond, loop.var):
        return serial
    comparisons = _affine_comparisons(body.cond, loop.var)
    if comparisons is None or (guard is not None and _affine_comparisons(guard, loop.var) is None):
        return serial
    lanes = _Lanes(loop, n)
    try:
        then = lanes.stmt(body.then)
        orelse = None if body.orelse is None else lanes.stmt(body.orelse)
    except NotVectorizable:
        return serial
    ends = [{loop.var: loop.start}, {loop.var: BinOp("+", loop.start, Const(n - 1, loop.var.dtype))}]

    def at_both_ends(c: Expr) -> Expr:
        return BinOp("and", substitute(c, ends[0]), substitute(c, ends[1]))

    inside = at_both_ends(body.cond)
    rest: Stmt = serial
    if orelse is not None:  # some comparison false at both ends: false for every lane
        outside = functools.reduce(
            lambda a, b: BinOp("or", a, b), [at_both_ends(Not(c)) for c in comparisons]
        )
        rest = If(outside if guard is None else BinOp("and", at_both_ends(guard), outside), orelse, serial)
    if guard is not None:
        inside = BinOp("and", at_both_ends(guard), inside)
    return simplify(If(inside, then, rest))  # type: ignore[no-any-return]


class _Vectorize(Mutator):
    def visit_For(self, s: For) -> Stmt:
        s = self.generic(s)
        return vectorize_loop(s) if s.kind is ForKind.VECTORIZED else s


class _Unroll(Mutator):
    def __init__(self, max_unroll: int) -> None:
        self.max_unroll = max_unroll

    def visit_For(self, s: For) -> Stmt:
        s = self.generic(s)
        if s.kind is not ForKind.UNROLLED or not isinstance(s.extent, Const):
            return s
        n = int(s.extent.value)
        if n > self.max_unroll:
            return s
        copies = [substitute(s.body, {s.var: BinOp("+", s.start, Const(k, s.var.dtype))}) for k in range(n)]
        return Seq(tuple(copies))


def vectorize(node: Any) -> Any:
    """Turn every `vectorized` loop into vector expressions (or a serial loop)."""
    return _Vectorize().visit(node)


def unroll(node: Any, max_unroll: int = MAX_UNROLL) -> Any:
    """Expand `unrolled` loops of constant extent <= max_unroll (then run `simplify`)."""
    return _Unroll(max_unroll).visit(node)


def loop_passes(func: LoopFunc) -> LoopFunc:
    """The loop passes a lowered kernel goes through, in order: simplify, vectorize, unroll,
    partition the loops whose tails are guarded inside (partition.py), then simplify what
    unrolling and partitioning exposed."""
    func = simplify(func)
    func = vectorize(func)
    return simplify(partition_tails(unroll(func)))  # type: ignore[no-any-return]


def optimize_loops(func: LoopFunc) -> LoopFunc:
    """`loop_passes`, then the result verified with bounds checks.
    `schedule.lower(..., passes=True)` is `optimize_loops(lower(..., passes=False))`."""
    from tensorir.loop.verify import verify

    func = loop_passes(func)
    verify(func, check_bounds=True)
    return func
