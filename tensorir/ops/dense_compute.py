"""Compute definition of `dense` (x: (M, K) @ w: (N, K)^T, the canonical form of gemm and of
matmul by a constant).

Many rows: the register-blocked matrix product of matmul_compute.py, with the weights already
in the (N, K) layout its `bt` stage wants.

One or two rows (a classifier head, a GEMV): the product is memory-bound and N-blocked
tiles would stream the weights with little reuse, so the reduction is split instead:
`dense_part[i, j, l] = sum_ko x[i, ko*L + l] * w[j, ko*L + l]` keeps L partial sums per
output, read along each weight row contiguously (l vectorized, JB rows at once for
independent accumulators), then `dense_gemv[i, j] = sum_l dense_part[i, j, l]`.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorir.ops.dense  # noqa: F401  (the reference registers the op first)
from tensorir.ops.matmul_compute import matmul_parts, schedule_matmul
from tensorir.ops.nn_compute import (
    acc_type,
    fuse_all,
    inline_elementwise,
    load,
    maybe_parallel,
    pick_rows,
    schedule_copy,
    stage_named,
    work_of,
)
from tensorir.ops.registry import register_compute
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.space import knob
from tensorir.schedule.te import Tensor, compute, reduce_axis, sum_
from tensorir.target import Target

GEMV_LANES = 16  # partial sums per output (4 NEON vectors, 1 AVX-512 vector)
GEMV_MAX_ROWS = 2
# weight rows per inner step: independent accumulators, and each row a stream from memory
# (the weights are read once each): 8 streams pull more bandwidth than 4 (MobileNetV2's
# 1280 -> 1000 classifier, 5 MB, in the model, one thread, Zen 4: 0.216 -> 0.179 ms), where
# the register file holds their sums (AVX-512: 8 of 32; AVX2 and NEON, whose sums take 2 and
# 4 vectors a row, keep 4 rows: 8 spilled)
GEMV_ROW_BLOCK = 8
GEMV_SMALL_ROW_BLOCK = 4


def gemv_row_block(target: Target) -> int:
    """The default weight rows per step: GEMV_ROW_BLOCK where their sums, the x vectors and a
    spare fit the registers, else GEMV_SMALL_ROW_BLOCK."""
    per_row = max(1, GEMV_LANES // target.vector_lanes("float32"))
    fits = (GEMV_ROW_BLOCK + 1) * per_row + 2 <= target.num_vector_registers
    return GEMV_ROW_BLOCK if fits else GEMV_SMALL_ROW_BLOCK


def is_gemv(m: int, k: int) -> bool:
    """An (m, k) x takes the GEMV form (module docstring)."""
    return m <= GEMV_MAX_ROWS and k % GEMV_LANES == 0 and k >= 4 * GEMV_LANES


def gemv_stages(x: Tensor, n: int, rows: int, weight) -> Tensor:
    """The GEMV form's stages for `n` outputs, `rows` >= n of them in dense_part (a padded
    layout's whole blocks); `weight(j, ko, l, dtype)` loads the weight of output j at input
    ko * GEMV_LANES + l."""
    (m, k), L = x.shape, GEMV_LANES
    dt = acc_type(x.dtype)
    ko = reduce_axis(k // L, "ko")
    part = compute(
        (m, rows, L),
        lambda i, j, l: sum_(load(x, (i, ko * L + l), dt) * weight(j, ko, l, dt), axis=ko),
        name="dense_part",
    )
    lr = reduce_axis(L, "l")
    acc = compute((m, n), lambda i, j: sum_(part[i, j, lr], axis=lr), name="dense_gemv")
    return compute((m, n), lambda i, j: load(acc, (i, j), x.dtype), name="dense")


def _gemv(x: Tensor, w: Tensor) -> Tensor:
    n = w.shape[0]
    return gemv_stages(x, n, n, lambda j, ko, l, dt: load(w, (j, ko * GEMV_LANES + l), dt))


def gemv_rows(target: Target, n: int) -> int:
    """The `gemv_rows` knob: weight rows per step of an n-row GEMV (default gemv_row_block's,
    or fewer where n has a divisor near it: pick_rows)."""
    rows = [r for r in (1, 2, 4, 8) if r <= n]
    return knob("gemv_rows", rows, pick_rows(n, gemv_row_block(target)))


def schedule_dense(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """GEMV form: row blocks in parallel, K lanes vectorized; else the blocked product."""
    part = stage_named(s, "dense_part")
    if part is None:
        schedule_matmul(s, outputs, target)
        return
    schedule_gemv(s, part, gemv_rows(target, part.op.axis[1].extent), target)


def schedule_gemv(s: Schedule, part: Stage, block: int, target: Target) -> None:
    """`block` weight rows per step, their sums in registers (unrolled), K lanes vectorized;
    row blocks in parallel; the lane sums and the epilogue after."""
    inline_elementwise(s)
    i, j, lane = part.op.axis
    (ko,) = part.op.reduce_axis
    jo, ji = part.split(j, factor=block)
    outer = fuse_all(part, [i, jo])
    part.reorder(outer, ko, ji, lane)
    part.unroll(ji)
    part.vectorize(lane)
    maybe_parallel(part, outer, work_of(part))
    for st in s.stages:
        if st is not part and not st.inlined:
            if st.op.reduce_axis:
                fused = fuse_all(st, list(st.op.axis))
                maybe_parallel(st, fused, work_of(st))
            else:
                schedule_copy(st, target)


@register_compute("dense", schedule=schedule_dense)
def dense_compute(x: Tensor, w: Tensor) -> Tensor:
    if is_gemv(*x.shape):
        return _gemv(x, w)
    acc, _ = matmul_parts(x, w, False, True, "dense", ())
    return compute(acc.shape, lambda i, j: load(acc, (i, j), x.dtype), name="dense")
