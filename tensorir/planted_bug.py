"""TEST ONLY: make one kernel wrong on purpose, so the validation tools (`tir run --compare-ort`,
`tir diff`) can be checked against a kernel known to be broken.

    TIR_TEST_BREAK_KERNEL=<text>

The first kernel in model order whose node name, op or workload key contains <text> reads its
first activation input (its first input that is not a model constant) scaled by BREAK_SCALE, so
its result is wrong while every other kernel is right. Never set it outside tests: a model
compiled with it is wrong by design. The compiler reads it in one place (compiler.lower_kernels).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable

from tensorir.loop.ir import BinOp, Broadcast, Buffer, Const, Expr, Load, LoopFunc
from tensorir.loop.visitor import Mutator

ENV = "TIR_TEST_BREAK_KERNEL"
BREAK_SCALE = 1.5


def wanted() -> str | None:
    """The text naming the kernel to break, or None (the normal case)."""
    return os.environ.get(ENV) or None


def matches(text: str, *fields: str) -> bool:
    return any(text in f for f in fields)


class _ScaleLoads(Mutator):
    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer

    def visit_Load(self, node: Load) -> Expr:
        load = self.generic(node)
        if node.buffer != self.buffer:
            return load
        scale: Expr = Const(BREAK_SCALE, node.dtype)
        return BinOp("*", load, scale if load.lanes == 1 else Broadcast(scale, load.lanes))


def break_kernel(func: LoopFunc, num_inputs: int, const_inputs: Iterable[int]) -> LoopFunc | None:
    """`func` with its first float activation input read scaled by BREAK_SCALE (None when it
    has no such input)."""
    const = set(const_inputs)
    for k, buf in enumerate(func.params[:num_inputs]):
        if k not in const and buf.dtype.startswith("float"):
            body = _ScaleLoads(buf).visit(func.body)
            return dataclasses.replace(func, body=body, attrs={**func.attrs, "broken_on_purpose": True})
    return None
