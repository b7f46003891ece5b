"""GPU template for injective ops: elementwise ops, fused elementwise chains and data
movement (concat, resize, transpose, slice, pad, gather, layout_transform, ...).

Every intermediate is inlined; each output is one flat loop over all its elements, split
in `vector`-lane pieces (float4 loads/stores where the index is affine in the lane, e.g.
the channel block of NCHW4c), then by the work-group size onto (group.x, local.x):

    for f_o in gpu_block(0, 98, "group.x"):
      for f_i in gpu_thread(0, 256, "local.x"):
        y[ramp((f_o*256 + f_i)*4, 1, 4)] = max(x[ramp(..)] + b[..], broadcast(0.0, 4))

Knobs: `work_group` (work-items per group), `vector` (1 or 4 lanes per work-item).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorir.ops.registry import NoScheduleError
from tensorir.schedule.defaults import inline_injective
from tensorir.schedule.gpu.common import (
    bind_flat,
    default_group,
    fuse_axes,
    gpu_profile,
    group_choices,
    size_of,
)
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.space import knob
from tensorir.schedule.te import Tensor

VECTOR = 4  # float4: the lanes of one NCHW4c channel block


def flat_gpu(st: Stage, profile: Any) -> None:
    """One output stage as a flat (group.x, local.x[, vector]) loop."""
    if not st.op.axis:
        raise NoScheduleError(f"{st.name} is a scalar: nothing to spread over work-items")
    *outer, last = st.op.axis
    lanes = VECTOR if last.extent % VECTOR == 0 else 1
    vec = knob("vector", sorted({1, lanes}), lanes)
    lane = None
    if vec > 1:  # lanes from the last axis: the index stays affine in them
        last, lane = st.split(last, factor=vec)
    fused = fuse_axes(st, [*outer, last]) if last.extent > 1 or not outer else fuse_axes(st, outer)
    work = fused.extent
    group = knob("work_group", group_choices(profile), default_group(profile, work))
    bind_flat(st, fused, group)
    if lane is not None:
        st.vectorize(lane)


def schedule_injective_gpu(s: Schedule, outputs: Sequence[Tensor], target: Any) -> None:
    """Inline every intermediate; each output flat over the work-items (module docstring).

    s = create_schedule(outs); schedule_injective_gpu(s, outs, target)
    """
    inline_injective(s)
    profile = gpu_profile(target)
    for st in s.stages:
        if not st.inlined:
            flat_gpu(st, profile)


__all__ = ["flat_gpu", "schedule_injective_gpu", "size_of"]
