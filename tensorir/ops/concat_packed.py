"""concat_packed: a channel concat of NCHW[x]c tensors whose channel blocks differ from each
other's or the output's, written straight in the output's block.

    concat_packed(a: f32[1,3,80,80,8], b: f32[1,3,80,80,8], ...) block=16 -> f32[1,6,80,80,16]

y[n, c // block, h, w, c % block] = x_k[n, l // b_k, h, w, l % b_k] for the input k holding
channel c and its channel l = c - offset_k there. The layout pass (passes/layout.py) uses it
where a concat's inputs (24 channels: block 8) cannot share the output's block (96: block 16),
instead of unpacking every input and packing the result.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.loop.ir import Expr
from tensorir.ops.infer import Types
from tensorir.ops.layout import pack_array, unpack_array
from tensorir.ops.registry import register_compute, register_op
from tensorir.ops.tensor_compute import schedule_movement
from tensorir.schedule.te import Tensor, compute, if_then_else


def _infer(ins: Types, attrs: dict[str, Any]) -> Types:
    block = int(attrs["block"])
    first = ins[0]
    if any(t.ndim != 5 or (t.shape[0], *t.shape[2:4]) != (first.shape[0], *first.shape[2:4]) for t in ins):
        raise ShapeError(
            f"concat_packed: inputs must be NCHW[x]c with one N, H, W, got {[str(t) for t in ins]}"
        )
    channels = sum(t.shape[1] * t.shape[4] for t in ins)
    if channels % block:
        raise ShapeError(f"concat_packed: {channels} channels do not fill blocks of {block}")
    n, _, h, w, _ = first.shape
    return [TensorType((n, channels // block, h, w, block), first.dtype)]


@register_op("concat_packed", infer=_infer, pattern="injective", gpu="injective")
def concat_packed(*xs: np.ndarray, block: int) -> np.ndarray:
    return pack_array(np.concatenate([unpack_array(x) for x in xs], axis=1), block)


@register_compute("concat_packed", schedule=schedule_movement)
def concat_packed_compute(*xs: Tensor, block: int) -> Tensor:
    offsets = [0]
    for t in xs:
        offsets.append(offsets[-1] + t.shape[1] * t.shape[4])
    n, _, h, w, _ = xs[0].shape

    def pick(lo: int, hi: int, i: tuple[Expr, ...], c: Expr) -> Expr:
        if hi - lo == 1:
            local = c - offsets[lo] if offsets[lo] else c
            b = xs[lo].shape[4]
            return xs[lo][i[0], local // b, i[2], i[3], local % b]
        mid = (lo + hi) // 2
        return if_then_else(c < offsets[mid], pick(lo, mid, i, c), pick(mid, hi, i, c))

    def body(*i: Expr) -> Expr:
        return pick(0, len(xs), i, i[1] * block + i[4])

    return compute((n, offsets[-1] // block, h, w, block), body, name="concat_packed")
