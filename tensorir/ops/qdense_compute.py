"""Compute definition of `qdense` (ops/qdense.py): the register-blocked matrix product of
matmul_compute.py over int32 words of four k.

    qdense_bt[n, kq]  = w[n // 16, kq, n % 16]                     (inlined: the packed weights)
    qdense_acc[m, n]  = sum_kq dot4_u8s8(x[m, 4kq], .., x[m, 4kq+3], qdense_bt[n, kq])
    qdense[m, n]      = requantize(qdense_acc[m, n] + bias[n])

`dot4_u8s8` is the loop-IR intrinsic of codegen/llvm_dot.py: with the columns vectorized (16
int32 lanes, one packed weight vector per kq) and the four activations broadcast, each
accumulator update is one `vpdpbusd` on AVX-512 VNNI, int32 widening multiply-adds elsewhere.
The weights are packed at compile time, so the template's run-time panel packing is off (no
gemm_pack_b knob); its other knobs (gemm_rows, gemm_col_vectors, gemm_row_chunk_tiles) are
the tuner's.

With x_offset 128 (ARM's sdot, ops/qdense.py) the activations are packed once per kernel, four
k of a row as one int32 xor 0x80808080 (x - 128 as int8 bytes), and the product is
`dot4_s8s8` of that word (broadcast) by the weight vector, one sdot per four columns:

    qdense_x[m, kq]   = (x[m, 4kq] | x[m, 4kq+1] << 8 | .. ) ^ 0x80808080
    qdense_acc[m, n]  = sum_kq dot4_s8s8(qdense_x[m, kq], qdense_bt[n, kq])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import tensorir.ops.qdense  # noqa: F401  (the reference registers the op first)
from tensorir.loop.ir import BinOp, Call, Const, Expr
from tensorir.ops.matmul_compute import schedule_matmul_block
from tensorir.ops.nn_compute import const, inline_elementwise, load, schedule_copy, stage_named
from tensorir.ops.qdense import BLOCK, QUAD
from tensorir.ops.registry import register_compute
from tensorir.schedule.schedule import Schedule
from tensorir.schedule.te import Tensor, call, cast, compute, max_, min_, reduce_axis, sum_
from tensorir.target import Target


def schedule_qdense(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """The blocked matmul schedule on the int32 accumulator, weights read where they are
    (the packed activations of x_offset 128 computed in a pass of their own)."""
    acc, bt = stage_named(s, "qdense_acc"), stage_named(s, "qdense_bt")
    xw = stage_named(s, "qdense_x")
    inline_elementwise(s, keep=[bt] + ([xw] if xw else []))
    if xw is not None:
        schedule_copy(xw, target)
    y = next(st for st in s.stages if st.is_output)
    i, j = y.op.axis
    schedule_matmul_block(s, y, ([], i, j), acc, bt, target, pack_b=False)


def dot4(acts: tuple, word: Expr, x_offset: int = 0) -> Expr:
    """The dot4_u8s8 intrinsic (codegen/llvm_dot.py): four uint8 values (or one packed int32)
    by one int32 word; dot4_s8s8 (signed activation bytes: sdot) for x_offset 128."""
    return Call("dot4_s8s8" if x_offset else "dot4_u8s8", (*acts, word), "int32")


def quad_word(acts: list[Expr], x_offset: int) -> Expr:
    """Four uint8 values as the bytes of one int32 (acts[t] in byte t), xor 0x80808080 for
    x_offset 128: each byte then x - 128 as int8."""
    word = None
    for t, a in enumerate(acts):
        v = cast(a, "int32")
        v = BinOp("shl", v, Const(8 * t, "int32")) if t else v
        word = v if word is None else BinOp("or", word, v)
    assert word is not None
    return BinOp("xor", word, Const(-0x7F7F7F80, "int32")) if x_offset else word  # 0x80808080


def requantize(
    acc: Expr,
    bias: Expr,
    scale: Expr,
    zero_point: int,
    lo: int,
    hi: int,
    hard_swish: float = 0.0,
    float_out: bool = False,
) -> Expr:
    """clip(round_even(act(float32(acc + bias) * scale)) + zero_point, lo, hi) as uint8
    (act: ops/qdense.py's requantize_ref); float32(acc + bias) * scale for `float_out`."""
    v = cast(acc + bias, "float32") * scale
    if float_out:
        return v
    if hard_swish:
        gate = v * const(float(np.float32(hard_swish / 6)), "float32") + const(0.5, "float32")
        v = v * min_(max_(gate, const(0.0, "float32")), const(1.0, "float32"))
    v = call("round", v) + const(zero_point, "float32")
    return cast(min_(max_(v, const(lo, "float32")), const(hi, "float32")), "uint8")


@register_compute("qdense", schedule=schedule_qdense)
def qdense_compute(
    x: Tensor,
    w: Tensor,
    bias: Tensor,
    scale: Tensor,
    *,
    n: int,
    zero_point: int,
    lo: int,
    hi: int,
    x_offset: int = 0,
    hard_swish: float = 0.0,
    float_out: bool = False,
) -> Tensor:
    m, k = x.shape
    bt = compute((n, k // QUAD), lambda j, q: w[j // BLOCK, q, j % BLOCK], name="qdense_bt")
    kq = reduce_axis(k // QUAD, "kq")
    if x_offset:
        xw = compute(
            (m, k // QUAD),
            lambda i, q: quad_word([x[i, q * QUAD + t] for t in range(QUAD)], x_offset),
            name="qdense_x",
        )

        def dot(i: Expr, j: Expr) -> Expr:
            return sum_(dot4((xw[i, kq],), bt[j, kq], x_offset), axis=kq)
    else:

        def dot(i: Expr, j: Expr) -> Expr:
            return sum_(dot4(tuple(x[i, kq * QUAD + t] for t in range(QUAD)), bt[j, kq]), axis=kq)

    acc = compute((m, n), dot, name="qdense_acc")
    return compute(
        (m, n),
        lambda i, j: requantize(
            load(acc, (i, j), "int32"), bias[j], scale[j], zero_point, lo, hi, hard_swish, float_out
        ),
        name="qdense",
    )
