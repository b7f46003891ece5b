"""Software prefetch of an input tensor at the top of a loop (`Stage.prefetch`).

A stage that streams a large input through the caches (a conv's weights: layer 4 of
ResNet-50 reads 9.4 MB per 3x3 conv) stalls wherever it touches lines for the first time
faster than the hardware prefetchers bring them in. `Stage.prefetch` asks for those lines
earlier, spread over the loops that run before they are needed, so the DRAM traffic
overlaps the arithmetic instead of stalling it (the classic software-pipelined prefetch of
hand-written GEMM kernels; TVM's `s[B].prefetch`).

The request is plain data, so it stays in the schedule's trace: at the top of each
iteration of loop `at`, `count` prefetches of the tensor's flat elements

    offset + sum(mul * (coord(axis) // div) for axis, mul, div in terms) + k * stride,   k < count

each clamped into the tensor, where coord(axis) is the stage's coordinate on one of its
root axes (data or reduction) at that point of the nest: loops inside `at` count as 0.

    for r in range(0, 4):                      for r in range(0, 4):
      for k in range(0, 64):           ->        prefetch(W[min(r*64 + 64, 255)])
        acc[...] += W[r*64 + k] * ...            for k in range(0, 64):
                                                   acc[...] += W[r*64 + k] * ...
    (W: 4 x 64; `s[acc].prefetch(W, r, [(r, 64, 1)], offset=64, count=1, stride=16)`: the
    next row's first line while this row runs)

Prefetch never faults and changes no value (loop/ir.py: Prefetch), so a wrong request
costs only bandwidth; the clamp keeps the address inside the tensor for LLVM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tensorir.loop.ir import BinOp, Buffer, Cast, Const, Expr, Prefetch, Seq, Stmt
from tensorir.schedule.te import IterVar, Tensor


@dataclass(frozen=True)
class PrefetchSpec:
    """One `Stage.prefetch` request (module docstring)."""

    tensor: Tensor
    at: IterVar
    terms: tuple[tuple[IterVar, int, int], ...]  # (root axis, multiplier, divisor)
    offset: int
    count: int
    stride: int


def prefetch_stmt(spec: PrefetchSpec, coords: Mapping[IterVar, Expr], buffer: Buffer) -> Stmt:
    """The prefetches of one iteration of `spec.at`: `coords` holds the stage's root
    coordinates there (inner loops at 0); `buffer` is the tensor's (flat, row-major)."""
    base: Expr = Const(spec.offset, "int64")
    for axis, mul, div in spec.terms:
        c = _int64(coords[axis])
        if div != 1:
            c = BinOp("//", c, Const(div, "int64"))
        base = BinOp("+", base, BinOp("*", c, Const(mul, "int64")))
    last = Const(buffer.size - 1, "int64")
    stmts = [
        Prefetch(buffer, BinOp("min", BinOp("+", base, Const(k * spec.stride, "int64")), last))
        for k in range(spec.count)
    ]
    return Seq(tuple(stmts))


def _int64(e: Expr) -> Expr:
    return e if e.dtype == "int64" else Cast("int64", e)
