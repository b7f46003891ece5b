"""Helpers for kernels written directly in loop IR (serial loops with data-dependent trip
counts and stores: ops/dynamic_compute.py, ops/tfidf.py): scalar registers, serial loops,
the parameters from the op's types, and the finished LoopFunc.

    regs = Regs(); n = regs.new("n")
    body = seq(put(n, ZERO), loop(i, size, If(cond, incr(n))), Store(count, ZERO, get(n)))
    return finish(name, params, scratch, regs.wrap(body))
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorir.graph.types import TensorType
from tensorir.loop.ir import (
    Allocate,
    BinOp,
    Buffer,
    Const,
    Expr,
    For,
    ForKind,
    Load,
    LoopFunc,
    Seq,
    Stmt,
    Store,
    Var,
)
from tensorir.loop.verify import verify
from tensorir.ops.registry import NoScheduleError
from tensorir.target import Target

ZERO = Const(0)


class Regs:
    """Scalar registers of a kernel: one-element local buffers, allocated at the top (an
    allocation inside a loop would grow the stack every iteration)."""

    def __init__(self) -> None:
        self.bufs: list[Buffer] = []

    def new(self, name: str, dtype: str = "int64") -> Buffer:
        b = Buffer(name, (1,), dtype, "local")
        self.bufs.append(b)
        return b

    def wrap(self, body: Stmt) -> Stmt:
        for b in reversed(self.bufs):
            body = Allocate(b, body)
        return body


def get(r: Buffer) -> Expr:
    return Load(r, ZERO)


def put(r: Buffer, value: Expr) -> Stmt:
    return Store(r, ZERO, value)


def incr(r: Buffer) -> Stmt:
    return put(r, get(r) + 1)


def loop(var: Var, extent: Expr | int, body: Stmt, start: Expr | int = 0) -> Stmt:
    """for var in range(start, start + extent), serial."""
    return For(var, Const(start) if isinstance(start, int) else start, _e(extent), ForKind.SERIAL, body)


def upto(var: Var, begin: Expr, end: Expr | int, body: Stmt) -> Stmt:
    """for var in range(begin, end)."""
    return loop(var, _e(end) - begin, body, begin)


def _e(x: Expr | int) -> Expr:
    return Const(x) if isinstance(x, int) else x


def seq(*stmts: Stmt) -> Stmt:
    return Seq(tuple(stmts))


def both(*conds: Expr) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = BinOp("and", out, c)
    return out


def kernel_params(
    in_types: Sequence[TensorType], out_types: Sequence[TensorType], names: Sequence[str]
) -> list[Buffer]:
    types = [*in_types, *out_types]
    return [Buffer(n, t.shape, t.dtype) for n, t in zip(names, types, strict=True)]


def finish(name: str, params: Sequence[Buffer], scratch: Sequence[Buffer], body: Stmt) -> LoopFunc:
    func = LoopFunc(name, (*params, *scratch), body, {"num_scratch": len(scratch)})
    verify(func, check_bounds=False)  # indices come from the data
    return func


def cpu_only(op: str, target: Target) -> None:
    if target.kind != "llvm":
        raise NoScheduleError(f"{op} runs on the CPU")
