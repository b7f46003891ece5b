"""`Stage.bind`'s rules: which loops may map onto the GPU launch, and the checks that keep
two loops off one id (schedule.py delegates here, as it does placement to placement.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorir.loop.ir import THREAD_TAGS, ForKind

if TYPE_CHECKING:
    from tensorir.schedule.schedule import Stage
    from tensorir.schedule.te import IterVar


def bind(stage: Stage, axis: IterVar, tag: str) -> None:
    """Bind `axis` of `stage` to the launch id `tag` (Stage.bind's docstring), or raise
    ScheduleError saying why not."""
    from tensorir.schedule.schedule import ScheduleError

    stage.check_leaf(axis, "bind")
    if tag not in THREAD_TAGS:
        raise ScheduleError(f"bind: unknown tag {tag!r}; one of {', '.join(THREAD_TAGS)}")
    if axis.kind == "reduce" and not tag.startswith("local."):
        raise ScheduleError(
            f"bind: {axis.name} is a reduction axis; only local.* (one work-group) can share it "
            "(work-groups would race)"
        )
    bound_red = next((a for a in stage.threads if a.kind == "reduce" and a is not axis), None)
    if axis.kind == "reduce" and bound_red is not None:
        raise ScheduleError(f"bind: reduction axis {bound_red.name} is already bound; bind one")
    old = stage.threads.get(axis)
    if old is not None and old != tag:
        raise ScheduleError(f"bind: axis {axis.name} is already bound to {old}")
    other = next((a for a, t in stage.threads.items() if t == tag and a is not axis), None)
    if other is not None:
        raise ScheduleError(f"bind: {tag} is already bound to axis {other.name} of stage {stage.name}")
    kind = ForKind.GPU_BLOCK if tag.startswith("group.") else ForKind.GPU_THREAD
    stage._annotate(axis, kind, "bind")
    stage.threads[axis] = tag
