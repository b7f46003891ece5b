"""Compute definition of `qdwconv` (ops/qdwconv.py): the `spatial` form of conv_compute.py
in int32 lanes, with the windowed schedule of depthwise float convs (nn_compute.py:
schedule_windowed: per (image, channel, row chunk), the output row vectorized, a few rows
in registers; its knobs window_row_chunk / window_vectors / window_rows are the tuner's).

    qdwconv_pad[b, c, h, w] = x[b, c, h - top, w - left], x_zero_point outside
    qdwconv_acc[b, c, o]    = sum_taps int32(qdwconv_pad[b, c, o*s + tap]) * w[c, tap]
    qdwconv[b, c, o]        = requantize(qdwconv_acc[b, c, o] + bias[c])
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorir.ops.qdwconv  # noqa: F401  (the reference registers the op first)
from tensorir.loop.ir import Const, Expr
from tensorir.ops.conv import out_spatial
from tensorir.ops.nn_compute import (
    inline_elementwise,
    load,
    pad_spatial,
    schedule_pad,
    schedule_windowed,
    stage_named,
)
from tensorir.ops.qdense_compute import requantize
from tensorir.ops.registry import register_compute
from tensorir.schedule.schedule import Schedule
from tensorir.schedule.te import Tensor, compute, reduce_axis, sum_
from tensorir.target import Target


def schedule_qdwconv(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    acc, pad = stage_named(s, "qdwconv_acc"), stage_named(s, "qdwconv_pad")
    inline_elementwise(s, keep=[pad] if pad is not None else [])
    if pad is not None:
        schedule_pad(pad)
    schedule_windowed(s, next(st for st in s.stages if st.is_output), acc, target)


@register_compute("qdwconv", schedule=schedule_qdwconv)
def qdwconv_compute(
    x: Tensor,
    w: Tensor,
    bias: Tensor,
    scale: Tensor,
    *,
    strides: Sequence[int],
    pads: Sequence[int],
    x_zero_point: int,
    zero_point: int,
    lo: int,
    hi: int,
) -> Tensor:
    n, c = x.shape[:2]
    ks = w.shape[1:]
    out = out_spatial(x.shape[2:], ks, strides, pads, (1, 1))
    need = [(out[d] - 1) * strides[d] + ks[d] for d in range(2)]
    xp = pad_spatial(x, pads[:2], need, Const(x_zero_point, "uint8"), "qdwconv_pad")
    rk = [reduce_axis(k, f"r{d}") for d, k in enumerate(ks)]

    def window(b: Expr, ch: Expr, oh: Expr, ow: Expr) -> Expr:
        pix = load(xp, (b, ch, oh * strides[0] + rk[0], ow * strides[1] + rk[1]), "int32")
        return sum_(pix * w[ch, rk[0], rk[1]], axis=rk)

    acc = compute((n, c, *out), window, name="qdwconv_acc")
    return compute(
        (n, c, *out),
        lambda b, ch, oh, ow: requantize(
            load(acc, (b, ch, oh, ow), "int32"), bias[ch], scale[ch], zero_point, lo, hi
        ),
        name="qdwconv",
    )
