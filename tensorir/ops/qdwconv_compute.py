"""Compute definition of `qdwconv` (ops/qdwconv.py): the `spatial` form of conv_compute.py,
with the windowed schedule of depthwise float convs (nn_compute.py: schedule_windowed: per
(image, channel, row chunk), the output row vectorized, a few rows in registers; its knobs
window_row_chunk / window_vectors / window_rows and pad_at are the tuner's).

    qdwconv_pad[b, c, h, w] = float32(x[b, c, h - top, w - left]), x_zero_point outside
    qdwconv_acc[b, c, o]    = sum_taps qdwconv_pad[b, c, o + tap] * w[c, tap]        (stride 1)
    qdwconv[b, c, o]        = requantize(int32(qdwconv_acc[b, c, o]) + bias[c])

The padding stage converts each input byte to float32 once (by default per row chunk, inside
the parallel loop, so the rows stay in cache), not once per tap. With strides it also splits
the input by stride phase (`_phases`), so each tap of a strided window reads a contiguous row
instead of every s-th element. The window sums run in float32 FMAs, which are exact here:
every product is an integer below 255 * 128 in magnitude and a sum of at most MAX_TAPS of
them stays below 2^24 (float32's integer range), so the int32 it is cast back to is the
integer sum. ops/qdwconv.py takes the weights as float32 integers for that.
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
    place_pad,
    schedule_windowed,
    stage_named,
)
from tensorir.ops.qdense_compute import requantize
from tensorir.ops.registry import register_compute
from tensorir.schedule.schedule import Schedule
from tensorir.schedule.te import Tensor, all_, cast, compute, if_then_else, reduce_axis, sum_
from tensorir.target import Target

ROW = 16  # lanes of the padding copy's rows


def schedule_qdwconv(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    acc, pad = stage_named(s, "qdwconv_acc"), stage_named(s, "qdwconv_pad")
    inline_elementwise(s, keep=[pad])
    y = next(st for st in s.stages if st.is_output)
    place_pad(pad, y, schedule_windowed(s, y, acc, target), chunk_default=True)
    if pad is not None and pad.attach[0] == "at" and pad.op.axis[-1].extent > ROW:
        # the blocks of a padded row inside the map convert uint8 -> float32 on vectors,
        # those across its edges (and the row's tail) lane by lane (loop/passes.py: _edge_split)
        _, lanes = pad.split(pad.op.axis[-1], factor=ROW)
        pad.vectorize(lanes)


def _phases(
    x: Tensor, strides: Sequence[int], pads: Sequence[int], ks: Sequence[int], out: Sequence[int], fill: int
) -> Tensor:
    """The padded input split by stride phase, so a strided window reads contiguous rows:
    qdwconv_pad[b, c, p, q, i, j] = padded x[b, c, i*s0 + p, j*s1 + q] (fill outside x)."""
    (s0, s1), (h, w) = strides, x.shape[2:]
    rows, cols = out[0] + (ks[0] - 1) // s0, out[1] + (ks[1] - 1) // s1

    def body(b: Expr, ch: Expr, p: Expr, q: Expr, i: Expr, j: Expr) -> Expr:
        r, t = i * s0 + p - pads[0], j * s1 + q - pads[1]
        inside = all_(r >= 0, r < h, t >= 0, t < w)
        return if_then_else(inside, cast(x[b, ch, r, t], "float32"), Const(float(fill), "float32"))

    return compute((*x.shape[:2], s0, s1, rows, cols), body, name="qdwconv_pad")


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
    hard_swish: float = 0.0,
    float_out: bool = False,
) -> Tensor:
    n, c = x.shape[:2]
    ks = w.shape[1:]
    out = out_spatial(x.shape[2:], ks, strides, pads, (1, 1))
    rk = [reduce_axis(k, f"r{d}") for d, k in enumerate(ks)]
    if tuple(strides) == (1, 1):
        need = [out[d] + ks[d] - 1 for d in range(2)]
        xf = compute(x.shape, lambda *i: cast(x[i], "float32"), name="qdwconv_float")  # inlined
        xp = pad_spatial(xf, pads[:2], need, Const(float(x_zero_point), "float32"), "qdwconv_pad")

        def pixel(b: Expr, ch: Expr, oh: Expr, ow: Expr) -> Expr:
            return xp[b, ch, oh + rk[0], ow + rk[1]]
    else:
        xs = _phases(x, strides, pads, ks, out, x_zero_point)

        def pixel(b: Expr, ch: Expr, oh: Expr, ow: Expr) -> Expr:
            (s0, s1), (r0, r1) = strides, rk
            return xs[b, ch, r0 % s0, r1 % s1, oh + r0 // s0, ow + r1 // s1]

    def window(b: Expr, ch: Expr, oh: Expr, ow: Expr) -> Expr:
        return sum_(pixel(b, ch, oh, ow) * w[ch, rk[0], rk[1]], axis=rk)

    acc = compute((n, c, *out), window, name="qdwconv_acc")
    return compute(
        (n, c, *out),
        lambda b, ch, oh, ow: requantize(
            load(acc, (b, ch, oh, ow), "int32"),
            bias[ch],
            scale[ch],
            zero_point,
            lo,
            hi,
            hard_swish,
            float_out,
        ),
        name="qdwconv",
    )
