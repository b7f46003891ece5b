"""Sound default schedules for ops without a tuned or hand-written one.

`schedule_injective` inlines every elementwise intermediate and gives each output one
fused loop: vectorized by the target's lane count, parallel over the rest when large.
`schedule_reduce` does the same over the data axes of a reduction, reduction inside.
`schedule_reduction` puts contiguous data axes below the reduction (vectorized there),
`schedule_rowwise` computes softmax / norm statistics inside the output's row loop, and
`schedule_injective_params` keeps small per-channel stages out of the per-element loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tensorir.dtypes import dtype_bits
from tensorir.loop.arith import is_int, to_linear
from tensorir.loop.ir import Call
from tensorir.loop.visitor import walk
from tensorir.schedule.schedule import MAX_LANES, Schedule, Stage
from tensorir.schedule.te import IterVar, Reduce, Tensor, TensorLoad
from tensorir.target import Target

PARALLEL_MIN_WORK = 1 << 14  # elements; below this a parallel launch costs more than it saves


def inline_injective(s: Schedule) -> None:
    """Inline every non-output stage without a reduction."""
    for st in s.stages:
        if not st.is_output and not st.op.reduce_axis and not st.inlined:
            st.compute_inline()


def _size(st: Stage) -> int:
    return math.prod(st.tensor.shape)


def elementwise_lanes(st: Stage, target: Target) -> int:
    """Vector lanes for the stage's loop: its dtype's, but at most float32's for an integer
    output narrower than 32 bits (a quantize computes in float32: 64 uint8 lanes would be
    four float vectors per step, and per-channel operands would straddle channels)."""
    lanes = target.vector_lanes(st.tensor.dtype)
    if is_int(st.tensor.dtype) and dtype_bits(st.tensor.dtype) < 32:
        lanes = min(lanes, target.vector_lanes("float32"))
    return lanes


def vectorize_parallel_data_axes(
    st: Stage, target: Target, work: int, reads: Sequence[Tensor] | None = None
) -> None:
    """Fuse the data axes, vectorize the innermost lanes when they divide, parallel outside.
    `reads`: the tensors the stage reads once inlined stages are substituted (Schedule.reads).
    Where one has another shape (a per-channel scale, a bias) and the last axis is narrower
    than the lanes, a vector covers one last-axis row: 16 lanes over 8-channel blocks span two
    pixels, the scale's index is no ramp and the loop ran scalar (PP-OCRv4's squeeze-excite
    `x + x * s` on 3 x 80 x 80 x 8, AVX-512)."""
    axes = list(st.op.axis)
    if not axes:
        return
    lanes = elementwise_lanes(st, target)
    last = axes[-1].extent
    shape = tuple(st.tensor.shape)
    broadcasts = any(tuple(t.shape) != shape and math.prod(t.shape) > 1 for t in reads or ())
    if len(axes) > 1 and last < lanes and lanes % last == 0 and broadcasts:
        lanes = last
    fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
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
            vectorize_parallel_data_axes(st, target, _size(st), s.reads(st))


def schedule_reduce(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Reductions: each stage's data axes fused and parallel, the reduction innermost."""
    inline_injective(s)
    for st in s.stages:
        if st.inlined:
            continue
        work = _size(st)
        for r in st.op.reduce_axis:
            work *= r.extent
        vectorize_parallel_data_axes(st, target, work, s.reads(st))


# ---- reductions with epilogues -----------------------------------------------------------
def _axis_strides(st: Stage) -> dict[IterVar, int]:
    """Element strides of the stage's axes in the input it reduces (the load using the most
    reduction axes; an axis inside a non-affine index gets none)."""
    src = st.op.body.source if isinstance(st.op.body, Reduce) else st.op.body
    red = set(st.op.reduce_axis)
    loads = [n for n in walk(src) if isinstance(n, TensorLoad)]
    scored = [(len(red & {v for v in walk(ld) if isinstance(v, IterVar)}), ld) for ld in loads]
    if not scored or max(n for n, _ in scored) == 0:
        return {}
    load = max(scored, key=lambda t: t[0])[1]
    strides: dict[IterVar, int] = {}
    step = 1
    for index, extent in zip(reversed(load.indices), reversed(load.tensor.shape), strict=True):
        terms, _ = to_linear(index)
        for atom, k in terms.items():
            if isinstance(atom, IterVar):
                strides[atom] = strides.get(atom, 0) + k * step
        step *= extent
    return strides


def _reduce_inner_axes(st: Stage) -> tuple[list[IterVar], list[IterVar]]:
    """(outer, inner) data axes of a reduction stage: inner ones move through the input
    faster than every reduction axis (contiguous below the reduction; fastest last)."""
    strides = _axis_strides(st)
    red = [abs(strides[r]) for r in st.op.reduce_axis if strides.get(r)]
    if not red:
        return list(st.op.axis), []
    inner = [a for a in st.op.axis if a.extent > 1 and 0 < abs(strides.get(a, 0)) < min(red)]
    inner.sort(key=lambda a: -abs(strides[a]))
    return [a for a in st.op.axis if a not in inner], inner


def arrange_reduction(st: Stage, target: Target) -> IterVar | None:
    """Loops (outer data, [inner data / lanes], reduction, inner lanes) with the contiguous
    inner data axes vectorized below the reduction; returns the outer data loop (or None)."""
    outer, inner = _reduce_inner_axes(st)
    red = list(st.op.reduce_axis)
    st.reorder(*outer, *red, *inner)
    o = st.fuse(*outer) if len(outer) > 1 else (outer[0] if outer else None)
    i = st.fuse(*inner) if len(inner) > 1 else (inner[0] if inner else None)
    lanes = target.vector_lanes(st.tensor.dtype)
    if i is not None and lanes > 1 and i.extent % lanes == 0 and i.extent > lanes:
        io, ii = st.split(i, factor=lanes)
        st.reorder(io, *red)
        st.vectorize(ii)
        return st.fuse(o, io) if o is not None else io
    if i is not None and i.extent <= MAX_LANES:
        st.vectorize(i)
    return o


def schedule_reduction_stage(st: Stage, target: Target) -> None:
    """`arrange_reduction`, the outer data loop parallel when the work is large."""
    par = arrange_reduction(st, target)
    work = _size(st)
    for r in st.op.reduce_axis:
        work *= r.extent
    if par is not None and work >= PARALLEL_MIN_WORK and par.extent > 1:
        st.parallel(par)


def schedule_reduction(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Reductions (and elementwise epilogues) at root: each reduction stage as
    `schedule_reduction_stage`, each elementwise one as one fused vectorized loop."""
    inline_injective(s)
    for st in s.stages:
        if st.inlined or st.attach[0] != "root":
            continue
        if st.op.reduce_axis:
            schedule_reduction_stage(st, target)
        else:
            vectorize_parallel_data_axes(st, target, _size(st), s.reads(st))


# ---- row-wise multi-stage ops (softmax, normalizations) ----------------------------------
def _has_call(st: Stage) -> bool:
    return any(isinstance(n, Call) for n in walk(st.op.body))


def inline_full_size(s: Schedule, size: int) -> None:
    """Inline the elementwise intermediates as large as the output (`size` elements), except
    an expensive one (a math call) read by several stages; smaller ones (per-row or
    per-channel values) stay stages, computed once instead of per element."""
    keep = [
        st
        for st in s.stages
        if not st.is_output
        and not st.op.reduce_axis
        and (_size(st) < size or (len(s.consumers(st.tensor)) > 1 and _has_call(st)))
    ]
    for st in s.stages:
        if not st.is_output and not st.op.reduce_axis and not st.inlined and st not in keep:
            st.compute_inline()


def schedule_injective_params(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Elementwise ops with per-channel precomputation (batch_norm's scale/sqrt(var)): the small
    stages once at root, the outputs as one fused vectorized loop each."""
    inline_full_size(s, max(_size(s[t]) for t in outputs))
    for st in s.stages:
        if not st.inlined:
            vectorize_parallel_data_axes(st, target, _size(st), s.reads(st))


def _vectorize_inner(st: Stage, inner: list[IterVar], target: Target) -> None:
    """Fuse `inner` (the last loops) and vectorize it, split by the lanes when they divide."""
    if not inner:
        return
    col = st.fuse(*inner) if len(inner) > 1 else inner[0]
    lanes = target.vector_lanes(st.tensor.dtype)
    if lanes > 1 and col.extent % lanes == 0 and col.extent > lanes:
        st.vectorize(st.split(col, factor=lanes)[1])
    elif col.extent <= MAX_LANES:
        st.vectorize(col)


def _row_col(st: Stage, inner_dims: set[int]) -> tuple[list[IterVar], list[IterVar]]:
    """The stage's data axes reordered (rows, then the inner dims)."""
    rows = [a for d, a in enumerate(st.op.axis) if d not in inner_dims]
    inner = [a for d, a in enumerate(st.op.axis) if d in inner_dims]
    st.reorder(*rows, *inner, *st.op.reduce_axis)
    return rows, inner


def _attachable(s: Schedule, st: Stage, main: Stage, row: IterVar) -> bool:
    readers = s.consumers(st.tensor)
    return bool(readers) and all(c is main or c.attach == ("at", main, row) for c in readers)


def schedule_rowwise(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Ops normalizing rows with per-row statistics (softmax, layer/instance norm): the largest
    output loops over the rows (fused, parallel when large) and, inside, over the row
    (vectorized); every stage it reads (max, exp, sums, statistics) is computed at the row
    loop, so the row stays in cache. Stages that cannot go there stay at root."""
    main = max((s[t] for t in outputs), key=_size)
    inline_full_size(s, _size(main))
    red = [st for st in s.stages if st.op.reduce_axis and st.tensor.ndim == main.tensor.ndim]
    if not red:
        return schedule_reduction(s, outputs, target)
    shape = main.tensor.shape
    inner_dims = {d for d, (r, m) in enumerate(zip(red[0].tensor.shape, shape, strict=True)) if r == 1 < m}
    rows, inner = _row_col(main, inner_dims)
    if not rows:
        return schedule_reduction(s, outputs, target)
    row = main.fuse(*rows) if len(rows) > 1 else rows[0]
    _vectorize_inner(main, inner, target)
    for st in reversed(s.stages):
        if st is main or st.inlined:
            continue
        if _attachable(s, st, main, row):
            st.compute_at(main, row)
            if st.op.reduce_axis:
                arrange_reduction(st, target)
            elif st.tensor.shape == shape:
                _vectorize_inner(st, _row_col(st, inner_dims)[1], target)
        elif st.op.reduce_axis:
            schedule_reduction_stage(st, target)
        else:
            vectorize_parallel_data_axes(st, target, _size(st), s.reads(st))
    if _size(main) >= PARALLEL_MIN_WORK and row.extent > 1:
        main.parallel(row)
