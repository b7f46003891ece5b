"""Shared pieces of the GPU templates: the device profile of a target, work-group sizes
and the binding of a flat loop onto (group.x, local.x).

    prof = gpu_profile(target)                 # target.profile, else the PoCL profile
    go, gi = bind_flat(stage, fused, 128)      # group.x over go, local.x over gi
"""

from __future__ import annotations

from typing import Any

from tensorir.schedule.schedule import Stage
from tensorir.schedule.te import IterVar

GROUP_SIZES = (32, 64, 128, 256, 512, 1024)
PREFERRED_GROUP = 256  # work-items per group for streaming kernels, capped by the device


def gpu_profile(target: Any) -> Any:
    """The device profile a template reads: `target.profile` (a DeviceProfile or a name),
    else the PoCL profile.

        gpu_profile(get_target("opencl:pocl")).max_work_group_size
    """
    from tensorir.devices import get_profile

    prof = getattr(target, "profile", None)
    if not prof:
        return get_profile("pocl")
    return get_profile(prof) if isinstance(prof, str) else prof


def group_choices(profile: Any, cap: int | None = None) -> list[int]:
    """Work-group sizes the device allows (and `cap`, the work available, does not waste)."""
    limit = min(profile.max_work_group_size, profile.max_work_item_sizes[0])
    out = [g for g in GROUP_SIZES if g <= limit]
    if cap is not None:
        small = [g for g in out if g < cap]
        out = [*small, next((g for g in out if g >= cap), out[-1])] if out else out
    return out or [1]


def default_group(profile: Any, work: int, want: int = PREFERRED_GROUP) -> int:
    """`want` work-items per group (capped by the device), smaller when `work` would not
    fill one group per compute unit."""
    choices = group_choices(profile)
    g = max(c for c in choices if c <= max(want, choices[0]))
    while g > choices[0] and work < g * profile.compute_units:
        g //= 2
    return g


def bind_flat(st: Stage, axis: IterVar, group: int) -> tuple[IterVar, IterVar]:
    """Split `axis` by `group` and bind (group.x, local.x) (a guard skips the tail).

    for i in range(0, 1000)   ->   for i_o in gpu_block(0, 8, "group.x"):
                                     for i_i in gpu_thread(0, 128, "local.x"): if i_o*128 + i_i < 1000: ...
    """
    outer, inner = st.split(axis, factor=group)
    st.bind(outer, "group.x")
    st.bind(inner, "local.x")
    return outer, inner


def fuse_axes(st: Stage, axes: list[IterVar]) -> IterVar:
    """The axes fused into one loop (a single axis as is)."""
    return st.fuse(*axes) if len(axes) > 1 else axes[0]


def size_of(st: Stage) -> int:
    n = 1
    for d in st.tensor.shape:
        n *= d
    return n
