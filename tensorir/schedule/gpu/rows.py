"""GPU template for reductions: one work-item per output row.

The largest output's axes split into *rows* (the axes its reduction stages keep) and the
*inner* axes (those the statistics reduce away: softmax's class axis, layer norm's hidden
axis). The rows are fused and spread over (group.x, local.x); every other stage — the
reductions (max, sums, variances), statistics that are outputs too (layer norm's mean) — is
computed per work-item at the local.x loop, into private memory, its reduction serial:

    for r_o in gpu_block(0, 2, "group.x"):
      for r_i in gpu_thread(0, 64, "local.x"):
        sm_max = allocate(f32[1], "local")
        sm_max[0] = -inf; for k in range(0, 1000): sm_max[0] = max(sm_max[0], x[..])
        ...
        for c in range(0, 1000): y[..] = exp(x[..] - sm_max[0]) / sm_sum[0]

Ops whose reductions keep every output axis (reduce_mean, pools, a plain conv, argmax)
are one work-item per output element; a last axis of 4 (the NCHW4c channel block) is then
vectorized (`vector` knob). A stage that cannot be placed at that loop (read by stages
outside it) makes the op unschedulable here (`NoScheduleError`: it runs on the CPU).
Knob: `work_group`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorir.ops.registry import NoScheduleError
from tensorir.schedule.gpu.common import (
    bind_flat,
    default_group,
    fuse_axes,
    gpu_profile,
    group_choices,
    size_of,
)
from tensorir.schedule.gpu.injective import VECTOR
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.space import knob
from tensorir.schedule.te import IterVar, Tensor


def _inner_dims(s: Schedule, main: Stage) -> set[int]:
    """Dimensions of `main` that a same-rank reduction stage reduces away (extent 1 there)."""
    shape = main.tensor.shape
    for st in s.stages:
        if st.op.reduce_axis and not st.inlined and st.tensor.ndim == len(shape):
            return {d for d, (r, m) in enumerate(zip(st.tensor.shape, shape, strict=True)) if r == 1 < m}
    return set()


def _inline_all(s: Schedule) -> None:
    """Inline the elementwise intermediates (recomputed per use: no row buffers per work-item)."""
    for st in s.stages:
        if not st.is_output and not st.op.reduce_axis and not st.inlined:
            st.compute_inline()


def _arrange(st: Stage, vec: int) -> None:
    """A stage computed per work-item: reductions outside, a last axis of `vec` lanes inside
    (vectorized), the other data axes between."""
    data = list(st.op.axis)
    lane = data.pop() if vec > 1 and data and data[-1].extent == vec else None
    st.reorder(*data, *st.op.reduce_axis, *([lane] if lane is not None else []))
    if lane is not None:
        st.vectorize(lane)


def schedule_rows_gpu(s: Schedule, outputs: Sequence[Tensor], target: Any) -> None:
    """Rows over the work-items, everything else per work-item (module docstring).

    s = create_schedule(outs); schedule_rows_gpu(s, outs, get_target("opencl"))
    """
    profile = gpu_profile(target)
    main = max((s[t] for t in outputs), key=size_of)
    _inline_all(s)
    inner = _inner_dims(s, main)
    rows = [a for d, a in enumerate(main.op.axis) if d not in inner]
    cols = [a for d, a in enumerate(main.op.axis) if d in inner]
    last = main.op.axis[-1]
    lanes = VECTOR if not cols and rows and last.extent == VECTOR else 1
    vec = knob("vector", sorted({1, lanes}), lanes)
    lane: IterVar | None = None
    if vec > 1:
        lane = rows.pop()
    main.reorder(*rows, *cols, *([lane] if lane else []), *main.op.reduce_axis)
    row = fuse_axes(main, rows) if rows else None
    if row is None:  # a single row (a full reduction): one work-item
        row = main.split(cols[0], nparts=1)[0]
    group = knob("work_group", group_choices(profile, row.extent), default_group(profile, row.extent, 64))
    _, local = bind_flat(main, row, group)
    if lane is not None:
        main.vectorize(lane)
    for st in reversed(s.stages):
        if st is main or st.inlined:
            continue
        readers = s.consumers(st.tensor)
        if not readers or not all(c is main or c.attach == ("at", main, local) for c in readers):
            raise NoScheduleError(f"{st.name} is read outside the row of {main.name}: no GPU row schedule")
        st.compute_at(main, local)
        _arrange(st, vec)
