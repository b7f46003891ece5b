"""Compute definition of `qconv1x1` (ops/qconv.py): the blocked matrix product of
matmul_compute.py with the output channels as rows and the pixels as columns.

    qconv1x1_x[b, cq, p]  = x[b, 4cq .. 4cq+3, p] as the bytes of one int32 (a pass over x;
                            xor 0x80808080 for x_offset 128, ops/qdense.py: ARM's sdot)
    qconv1x1_bt[o, cq]    = w[o, cq]              (inlined; w[o // 16, cq, o % 16] for "channels")
    qconv1x1_acc[b, o, p] = sum_cq dot4_u8s8(qconv1x1_x[b, cq, p], qconv1x1_bt[o, cq])
    qconv1x1[b, o, h, w]  = requantize(qconv1x1_acc[b, o, h W + w] + bias[o])

(vector="channels": the accumulator is (b, p, o), the same sum, the roles of the operands
below swapped: one pixel's four channel bytes broadcast, 16 output channels' packed weights.)

The accumulator runs over the pixels flattened (p = h W + w), and the schedule fuses the
output's (h, w) to match, so the dequantize that follows (and anything elementwise after it)
fuses into the output stage while the columns stay long enough to vectorize on 7x7 maps too.
With the pixels vectorized, each step of the reduction loads one vector of 16 packed pixels
(shared by the MR output channels of the register tile), each output channel broadcasts its
packed weight word, and the update is one vpdpbusd on AVX-512 VNNI (codegen/llvm_dot.py),
or with x_offset 128 dot4_s8s8, one sdot per four lanes on aarch64 with dotprod.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorir.ops.qconv  # noqa: F401  (the reference registers the op first)
from tensorir.loop.ir import Const, Expr
from tensorir.ops.matmul_compute import schedule_matmul_block
from tensorir.ops.nn_compute import inline_elementwise, load, schedule_copy, stage_named
from tensorir.ops.qdense import BLOCK, QUAD
from tensorir.ops.qdense_compute import dot4, quad_word, requantize
from tensorir.ops.registry import register_compute
from tensorir.schedule.schedule import Schedule
from tensorir.schedule.te import Tensor, compute, if_then_else, reduce_axis, sum_
from tensorir.target import Target


def schedule_qconv1x1(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """The blocked matmul schedule (weights read in place) on (batch, rows, columns) of the
    accumulator: (Cout, H x W fused) for vector="pixels", (H x W fused, Cout) for "channels"."""
    acc, bt, xw = (stage_named(s, f"qconv1x1_{part}") for part in ("acc", "bt", "x"))
    inline_elementwise(s, keep=[bt, xw])
    schedule_copy(xw, target)
    y = next(st for st in s.stages if st.is_output)
    b, o, h, w = y.op.axis
    hw = y.fuse(h, w)
    rows, cols = (o, hw) if acc.tensor.shape[1] == o.extent else (hw, o)
    schedule_matmul_block(s, y, ([b], rows, cols), acc, bt, target, pack_b=False)


def _word(x: Tensor, b: Expr, q: Expr, j: Expr, x_offset: int) -> Expr:
    """Channels 4q .. 4q+3 of pixel j of x as one int32, channel 4q + t in byte t."""
    width = x.shape[3]
    return quad_word([x[b, q * QUAD + t, j // width, j % width] for t in range(QUAD)], x_offset)


@register_compute("qconv1x1", schedule=schedule_qconv1x1)
def qconv1x1_compute(
    x: Tensor,
    w: Tensor,
    bias: Tensor,
    scale: Tensor,
    *,
    vector: str,
    zero_point: int,
    lo: int,
    hi: int,
    x_offset: int = 0,
    hard_swish: float = 0.0,
    float_out: bool = False,
) -> Tensor:
    n, c, height, width = x.shape
    cout = bias.shape[0]
    if vector == "channels":
        bt = compute((cout, c // QUAD), lambda o, q: w[o // BLOCK, q, o % BLOCK], name="qconv1x1_bt")
    else:
        bt = compute(w.shape, lambda o, q: w[o, q], name="qconv1x1_bt")
    pixels = height * width
    if vector == "pixels" and pixels % BLOCK and pixels > BLOCK:  # whole vectors: the tail's words 0
        cols = -(-pixels // BLOCK) * BLOCK
        xw = compute(
            (n, c // QUAD, cols),
            lambda b, q, j: if_then_else(j < pixels, _word(x, b, q, j, x_offset), Const(0, "int32")),
            name="qconv1x1_x",
        )
    else:
        cols = pixels
        xw = compute((n, c // QUAD, pixels), lambda b, q, j: _word(x, b, q, j, x_offset), name="qconv1x1_x")
    cq = reduce_axis(c // QUAD, "cq")

    def dot(b: Expr, o: Expr, j: Expr) -> Expr:
        return sum_(dot4((xw[b, cq, j],), bt[o, cq], x_offset), axis=cq)

    if vector == "channels":
        acc = compute((n, pixels, cout), lambda b, j, o: dot(b, o, j), name="qconv1x1_acc")
    else:
        acc = compute((n, cout, cols), dot, name="qconv1x1_acc")

    def out(b: Expr, o: Expr, i: Expr, j: Expr) -> Expr:
        p = i * width + j
        v = load(acc, (b, p, o) if vector == "channels" else (b, o, p), "int32")
        return requantize(v, bias[o], scale[o], zero_point, lo, hi, hard_swish, float_out)

    return compute((n, cout, height, width), out, name="qconv1x1")
