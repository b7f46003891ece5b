"""GPU template of matrix products (`dense`, `matmul`, `gemm`, batched matmul): a tiled GEMM.

A work-group computes a (threads_y*rows) x (threads_x*cols) output tile; per `tile_k` step
of the reduction the A and B^T panels it needs are staged into shared memory by all its
work-items (cache_read "shared", barriers around), then each work-item accumulates its
rows x cols register tile from them. Batches are group.z. The GEMV form of `dense` (one or two
rows) and products without the `<op>_acc` / `<op>_bt` stages use the rows template.
Knobs: `threads_y`, `threads_x`, `rows`, `cols`, `tile_k`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorir.ops.dense_compute  # (the ops and computes register first)
import tensorir.ops.matmul_compute  # noqa: F401
from tensorir.ops.registry import register_schedule
from tensorir.schedule.gpu.common import fuse_axes, gpu_profile
from tensorir.schedule.gpu.rows import schedule_rows_gpu
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.space import knob
from tensorir.schedule.te import Tensor


def _stage(s: Schedule, suffix: str) -> Stage | None:
    return next((st for st in s.stages if st.name.endswith(suffix)), None)


def _coop_load(s: Schedule, cache: Tensor, acc: Stage, ko: Any, ty: int, tx: int) -> None:
    """Stage `cache` at acc's loop `ko`, its elements spread over the (ty, tx) work-items."""
    st = s[cache]
    st.compute_at(acc, ko)
    flat = fuse_axes(st, list(st.op.axis))
    _, inner = st.split(flat, factor=ty * tx)
    fy, fx = st.split(inner, factor=tx)
    st.bind(fy, "local.y")
    st.bind(fx, "local.x")


def schedule_gemm_gpu(s: Schedule, outputs: Sequence[Tensor], target: Any) -> None:
    """The shared-memory tiled GEMM (module docstring).

    func = op_kernel("dense", [TensorType((128, 768)), TensorType((768, 768))], {}, opencl_target)
    """
    acc, bt = _stage(s, "_acc"), _stage(s, "_bt")
    y = next(st for st in s.stages if st.is_output)
    if acc is None or bt is None or y.tensor.shape != acc.tensor.shape or y.tensor.ndim < 2:
        return schedule_rows_gpu(s, outputs, target)
    profile = gpu_profile(target)
    for st in s.stages:
        if not st.is_output and not st.op.reduce_axis and not st.inlined:
            st.compute_inline()
    *batch, i, j = y.op.axis
    limit = profile.max_work_group_size
    ty = knob("threads_y", [t for t in (1, 2, 4, 8, 16) if t <= limit], min(8, limit))
    tx = knob("threads_x", [t for t in (4, 8, 16, 32) if t * ty <= limit], 8 if 8 * ty <= limit else 4)
    rm = knob("rows", [1, 2, 4, 8], 4 if i.extent >= 32 else 1)
    rn = knob("cols", [1, 2, 4, 8], 4)
    kdim = acc.op.reduce_axis[0].extent
    tks = [t for t in (1, 2, 4, 8, 16, 32) if kdim % t == 0]  # a k tail gave wrong sums (see the report)
    tk = knob("tile_k", tks, max(t for t in tks if t <= 8))
    io, ii = y.split(i, factor=ty * rm)
    iy, ir = y.split(ii, factor=rm)
    jo, jj = y.split(j, factor=tx * rn)
    jx, jr = y.split(jj, factor=rn)
    y.reorder(*batch, io, jo, iy, jx, ir, jr)
    if batch:
        y.bind(fuse_axes(y, batch), "group.z")
    for ax, tag in ((io, "group.y"), (jo, "group.x"), (iy, "local.y"), (jx, "local.x")):
        y.bind(ax, tag)
    y.unroll(ir)
    y.unroll(jr)
    acc.compute_at(y, jx)
    *ab, ai, aj = acc.op.axis
    (k,) = acc.op.reduce_axis
    ko, ki = acc.split(k, factor=tk)
    acc.reorder(*ab, ko, ki, ai, aj)
    acc.unroll(ai)
    acc.unroll(aj)
    a_in = next(t for t in acc.op.input_tensors() if t is not bt.tensor)
    a_sh = s.cache_read(a_in, "shared", [acc])
    b_sh = s.cache_read(bt.tensor, "shared", [acc])
    bt.compute_inline()
    _coop_load(s, a_sh, acc, ko, ty, tx)
    _coop_load(s, b_sh, acc, ko, ty, tx)


for _op in ("dense", "matmul", "gemm"):
    register_schedule(_op, "opencl")(schedule_gemm_gpu)
