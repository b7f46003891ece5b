"""Sound default schedules for ops without a tuned or hand-written one.

`schedule_injective` inlines every elementwise intermediate and gives each output one
fused loop: vectorized by the target's lane count, parallel over the rest when large.
`schedule_reduce` does the same over the data axes of a reduction, reduction inside.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.te import Tensor
from tensorir.target import Target

PARALLEL_MIN_WORK = 1 << 14  # elements; below this a parallel launch costs more than it saves


def inline_injective(s: Schedule) -> None:
    """Inline every non-output stage without a reduction."""
    for st in s.stages:
        if not st.is_output and not st.op.reduce_axis and not st.inlined:
            st.compute_inline()


def _size(st: Stage) -> int:
    n = 1
    for d in st.tensor.shape:
        n *= d
    return n


def vectorize_parallel_data_axes(st: Stage, target: Target, work: int) -> None:
    """Fuse the data axes, vectorize the innermost lanes when they divide, parallel outside."""
    axes = list(st.op.axis)
    if not axes:
        return
    fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
    lanes = target.vector_lanes(st.tensor.dtype)
    inner_ok = not st.op.reduce_axis and lanes > 1 and fused.extent % lanes == 0
    if inner_ok and fused.extent > lanes:
        outer, inner = st.split(fused, factor=lanes)
        st.vectorize(inner)
    elif inner_ok:
        outer = None
        st.vectorize(fused)
    else:
        outer = fused
    if outer is not None and work >= PARALLEL_MIN_WORK and outer.extent > 1:
        st.parallel(outer)


def schedule_injective(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    inline_injective(s)
    for st in s.stages:
        if st.is_output:
            vectorize_parallel_data_axes(st, target, _size(st))


def schedule_reduce(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Reductions: each stage's data axes fused and parallel, the reduction innermost."""
    inline_injective(s)
    for st in s.stages:
        if st.inlined:
            continue
        work = _size(st)
        for r in st.op.reduce_axis:
            work *= r.extent
        vectorize_parallel_data_axes(st, target, work)
