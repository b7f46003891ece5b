"""Compute definition of `im2col` (ops/im2col.py): one select per element, reading x only
inside the map (the window's tap and the channel from the output channel).

The schedule keeps the rows: (b, j) fused and parallel, then oh, then ow in vectors, so the
tap / channel split and the row's bounds are computed once per row, and the column bounds
are affine in the lane: the vectorizer runs the blocks inside the map on vectors and only
those across its left / right edge lane by lane (loop/passes.py: _edge_split)."""

from __future__ import annotations

from collections.abc import Sequence

import tensorir.ops.im2col  # noqa: F401  (the reference registers the op first)
from tensorir.loop.ir import Expr
from tensorir.ops.conv import out_spatial
from tensorir.ops.nn_compute import all_, const, maybe_parallel, pick_vector, work_of
from tensorir.ops.registry import register_compute
from tensorir.schedule.defaults import inline_injective
from tensorir.schedule.schedule import Schedule
from tensorir.schedule.te import Tensor, compute, if_then_else
from tensorir.target import Target


def schedule_im2col(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    inline_injective(s)
    y = s[outputs[0]]
    b, j, _, ow = y.op.axis
    rows = y.fuse(b, j)
    lanes = pick_vector(ow.extent, target.vector_lanes(y.tensor.dtype))
    if lanes > 1:
        _, inner = y.split(ow, factor=lanes)
        y.vectorize(inner)
    maybe_parallel(y, rows, work_of(y))


@register_compute("im2col", schedule=schedule_im2col)
def im2col_compute(
    x: Tensor, *, kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int], channels: int, fill: int
) -> Tensor:
    n, c, h, w = x.shape
    (kh, kw), (sh, sw) = kernel, strides
    oh, ow = out_spatial((h, w), kernel, strides, pads, (1, 1))

    def body(b: Expr, j: Expr, i0: Expr, i1: Expr) -> Expr:
        tap, ch = j // channels, j % channels
        ih, iw = i0 * sh + tap // kw - pads[0], i1 * sw + tap % kw - pads[1]
        conds = [ih >= 0, ih < h, iw >= 0, iw < w] + ([ch < c] if channels > c else [])
        return if_then_else(all_(*conds), x[b, ch, ih, iw], const(fill, x.dtype))

    return compute((n, kh * kw * channels, oh, ow), body, name="im2col")
