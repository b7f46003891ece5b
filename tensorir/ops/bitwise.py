"""Bitwise ops on integers: bitwise_and / or / xor (numpy broadcast), bitwise_not, bit_shift
(ONNX BitShift: `direction` "LEFT" or "RIGHT", unsigned types in ONNX; a signed x shifts
right arithmetically). Elementwise, the dtype of x out. A shift count at or past the bit
width gives 0 (numpy's rule; the code generator guards it, a hardware shift would not).
"""

from __future__ import annotations

import numpy as np

from tensorir.dtypes import NARROW, np_dtype
from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.elementwise import EW
from tensorir.ops.infer import Types, broadcast
from tensorir.ops.registry import InferFn, register_op


def _ints(fn: InferFn) -> InferFn:
    """`fn`, after checking that every input is an integer tensor."""

    def infer(ins: Types, attrs: dict) -> Types:
        if any(t.dtype == "bool" or not t.dtype.startswith(("int", "uint")) for t in ins):
            raise ShapeError(f"bitwise ops take integer inputs, got {[t.dtype for t in ins]}")
        return fn(ins, attrs)

    return infer


_BINARY = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}
for _name, _fn in _BINARY.items():
    register_op(_name, infer=_ints(broadcast()), **EW)(lambda a, b, _fn=_fn: _fn(a, b).astype(a.dtype))


@register_op("bitwise_not", infer=_ints(lambda ins, attrs: [TensorType(ins[0].shape, ins[0].dtype)]), **EW)
def bitwise_not(x: np.ndarray) -> np.ndarray:
    return np.invert(x)


@register_op("bit_shift", infer=_ints(broadcast()), **EW)
def bit_shift(x: np.ndarray, y: np.ndarray, direction: str) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    count = y.astype(np.int64)
    inside = (count >= 0) & (count < bits)
    safe = np.where(inside, count, 0).astype(x.dtype)
    moved = np.left_shift(x, safe) if direction == "LEFT" else np.right_shift(x, safe)
    return np.where(inside, moved, 0).astype(x.dtype)


def _infer_bitcast(ins: Types, attrs: dict) -> Types:
    src, to = ins[0].dtype, str(attrs["to"])
    if src in NARROW or to in NARROW or np_dtype(src).itemsize != np_dtype(to).itemsize:
        raise ShapeError(f"bitcast needs two types of the same width (not narrow ones), got {src} to {to}")
    return [TensorType(ins[0].shape, to)]


@register_op("bitcast", infer=_infer_bitcast, **EW)
def bitcast(x: np.ndarray, to: str) -> np.ndarray:
    """x's bits read as `to` (ONNX BitCast; a bool is the byte 0 or 1)."""
    return np.array(x, order="C").view(np_dtype(to))
