"""pad_packed: a zero pad of a packed tensor's channels and space, written in the output's
channel block:

    pad_packed(x: f32[1,3,64,64,8]) pads=(0,0,0,4,0,0) block=4 -> f32[1,7,64,64,4]

pads = (channels, H, W before; channels, H, W after). With l = c - pads[0], i = h - pads[1],
j = w - pads[2]: y[n, c // block, h, w, c % block] = x[n, l // b, i, j, l % b] where (l, i, j)
lies inside x, else 0. The layout pass (passes/layout.py) uses it for a constant zero Pad of a
packed tensor (BlazeFace's residuals pad 24 channels to 28 before the add), instead of
unpacking, padding and packing again: two layout transforms and a pad became one copy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.loop.ir import Expr
from tensorir.ops.infer import Types
from tensorir.ops.layout import pack_array, unpack_array
from tensorir.ops.registry import register_compute, register_op
from tensorir.schedule.defaults import PARALLEL_MIN_WORK
from tensorir.schedule.schedule import Schedule
from tensorir.schedule.te import Tensor, all_, compute, if_then_else, max_, min_
from tensorir.target import Target


def _out_shape(x: tuple[int, ...], pads: tuple[int, ...], block: int) -> tuple[int, ...]:
    n, cb, h, w, b = x
    c, hh, ww = (d + pads[k] + pads[k + 3] for k, d in enumerate((cb * b, h, w)))
    if c % block:
        raise ShapeError(f"pad_packed: {c} channels do not fill blocks of {block}")
    return (n, c // block, hh, ww, block)


def _infer(ins: Types, attrs: dict[str, Any]) -> Types:
    (x,) = ins
    pads = tuple(int(p) for p in attrs["pads"])
    if x.ndim != 5 or len(pads) != 6 or min(pads) < 0:
        raise ShapeError(f"pad_packed: an NCHW[x]c input and 6 pads >= 0, got {x} and {pads}")
    return [TensorType(_out_shape(x.shape, pads, int(attrs["block"])), x.dtype)]


@register_op("pad_packed", infer=_infer, pattern="injective", gpu="injective")
def pad_packed(x: np.ndarray, pads: tuple[int, ...], block: int) -> np.ndarray:
    p = [(0, 0)] + [(pads[k], pads[k + 3]) for k in range(3)]
    return pack_array(np.pad(unpack_array(x), p), block)


def schedule_pad_packed(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """The output's lanes in runs of g = gcd(input block, output block), each run a vector
    copy from one input block (the compute's e // g and e % g become the split's two loops);
    the rows (n, channel block, h) in parallel when the work is large."""
    (y,) = outputs
    st = s[y]
    n, ob, h, _, e = st.op.axis
    g = math.gcd(y.op.input_tensors()[0].shape[4], y.shape[4])
    if 1 < g < e.extent:
        _, lanes = st.split(e, factor=g)
        st.vectorize(lanes)
    elif g > 1:
        st.vectorize(e)
    rows = st.fuse(n, ob, h)
    if math.prod(y.shape) >= PARALLEL_MIN_WORK:
        st.parallel(rows)


@register_compute("pad_packed", schedule=schedule_pad_packed)
def pad_packed_compute(x: Tensor, pads: tuple[int, ...], block: int) -> Tensor:
    """With g = gcd(b, block, channels before), lane e of an output block is lane e % g of the
    run of g that starts at channel ob * block + e // g * g: one input block holds the run,
    so the read is x[.., run // b, .., run % b + e % g], contiguous in e % g."""
    _, cb, h, w, b = x.shape
    sizes = (cb * b, h, w)
    g = math.gcd(b, block, pads[0])

    def body(n: Expr, ob: Expr, y: Expr, z: Expr, e: Expr) -> Expr:
        inside, at = [], []
        run = ob * block + e // g * g if g > 1 else ob * block + e
        for k, v in enumerate((run, y, z)):
            before, after = pads[k], pads[k + 3]
            u = v - before if before else v
            if before:
                inside.append(u >= 0)
            if after:
                inside.append(u < sizes[k])
            # clamped: a select may evaluate the read for the pad's elements too
            at.append(min_(max_(u, 0), sizes[k] - 1) if before or after else u)
        l, i, j = at
        lane = l % b + e % g if g > 1 else l % b
        value = x[n, l // b, i, j, lane]
        return if_then_else(all_(*inside), value, 0.0) if inside else value

    return compute(_out_shape(x.shape, pads, block), body, name="pad_packed")
