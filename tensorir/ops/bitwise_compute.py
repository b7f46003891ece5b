"""Compute definitions of the bitwise ops (bitwise.py): the code generator's integer
and / or / xor / shl / shr and bitcast (a bool's cast to uint8 is its byte), one injective loop
like every elementwise op."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import tensorir.ops.bitwise  # noqa: F401  (the references register the ops first)
from tensorir.loop.ir import BinOp, Call, Expr
from tensorir.ops.elementwise_compute import const, elementwise
from tensorir.ops.registry import register_compute
from tensorir.schedule.defaults import schedule_injective
from tensorir.schedule.te import Tensor, all_, cast, select


def all_ones(dtype: str) -> Expr:
    """The value with every bit set (-1 signed, the maximum unsigned)."""
    return const(-1 if dtype.startswith("int") else int(np.iinfo(np.dtype(dtype)).max), dtype)


def shift(x: Expr, y: Expr, direction: str) -> Expr:
    """x shifted by y, 0 where y is outside [0, bits) (a hardware shift leaves that undefined)."""
    count = cast(y, x.dtype)
    bits = const(np.dtype(x.dtype).itemsize * 8, x.dtype)
    inside = all_(count >= const(0, x.dtype), count < bits) if x.dtype.startswith("int") else count < bits
    moved = BinOp("shl" if direction == "LEFT" else "shr", x, count)
    return select(inside, moved, const(0, x.dtype))


def _register(name: str, fn: Callable[..., Expr]) -> None:
    def compute_fn(*ins: Tensor, **attrs: str) -> Tensor:
        return elementwise(name, list(ins), lambda *v: fn(*v, **attrs))

    register_compute(name, schedule=schedule_injective)(compute_fn)


_register("bitwise_and", lambda a, b: BinOp("and", a, cast(b, a.dtype)))
_register("bitwise_or", lambda a, b: BinOp("or", a, cast(b, a.dtype)))
_register("bitwise_xor", lambda a, b: BinOp("xor", a, cast(b, a.dtype)))
_register("bitwise_not", lambda x: BinOp("xor", x, all_ones(x.dtype)))
_register("bit_shift", shift)
_register("bitcast", lambda x, to: cast(x, to) if x.dtype == "bool" else Call("bitcast", (x,), to))
