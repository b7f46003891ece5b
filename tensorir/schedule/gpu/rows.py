"""GPU template for reductions: one work-item per output row, or a work-group per row.

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

Long rows with few of them leave that GPU idle; `reduce_threads` = T > 1 gives each row a
work-group of T work-items instead (rows on group.x). Every reduction stage binds its
reduction's inner part to local.x (a tree over __local memory, schedule/allreduce.py) and
the row's epilogue spreads its columns over the same work-items:

    for r in gpu_block(0, 4, "group.x"):
      for c_i in gpu_thread(0, 128, "local.x"):
        sm_max = allocate(f32[1,1], "local")
        ... strided partial max, sm_max_red[c_i] = partial, log2(128) tree steps, barriers
        sm_sum = ... the same for the exp sum
        for c_o in range(0, 8): if c_o*128 + c_i < 1000: y[..] = exp(x[..] - sm_max[0]) / sm_sum[0]

Without columns (reduce_mean, pools) the stages sit at the row's group.x loop, each with its
own local.x loop. The default T (`default_reduce_threads`) is 1 when the rows alone fill the
device (compute units x PREFERRED_GROUP work-items) or are short, else the smallest T that
fills it, at least 4 elements per work-item. Knobs: `reduce_threads`, and for T = 1
`work_group`, `vector`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tensorir.ops.registry import NoScheduleError
from tensorir.schedule.gpu.common import (
    PREFERRED_GROUP,
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

REDUCE_THREADS = (1, 8, 16, 32, 64, 128, 256)  # work-items per row (1: the row is serial)


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


def reduce_thread_choices(profile: Any, length: int) -> list[int]:
    """Work-items per row the device allows, none past the row `length`."""
    limit = min(profile.max_work_group_size, profile.max_work_item_sizes[0])
    return [t for t in REDUCE_THREADS if t == 1 or t <= min(limit, length)]


def default_reduce_threads(profile: Any, rows: int, length: int) -> int:
    """1 when `rows` work-items fill the device (compute units x PREFERRED_GROUP) or the rows
    are short; else the smallest T whose rows x T fills it (the largest allowed when none
    does), keeping at least 4 elements of the row per work-item."""
    want = profile.compute_units * PREFERRED_GROUP
    ok = [t for t in reduce_thread_choices(profile, length) if t > 1 and 4 * t <= length]
    if not ok or rows >= want:
        return 1
    return next((t for t in ok if rows * t >= want), ok[-1])


def _reduce_length(s: Schedule) -> int:
    """The longest reduction of the op's (non-inlined) stages."""
    longest = 1
    for st in s.stages:
        if not st.inlined and st.op.reduce_axis:
            longest = max(longest, math.prod(a.extent for a in st.op.reduce_axis))
    return longest


def _tree_reduce(st: Stage, threads: int) -> None:
    """st's reductions fused, split by `threads`, the inner part bound to local.x (a tree
    over the work-items); data loops outside."""
    data = [a for a in st.leaves if a.kind == "data"]
    red = [a for a in st.leaves if a.kind == "reduce"]
    st.reorder(*data, *red)
    k_o, k_i = st.split(fuse_axes(st, red), factor=threads)
    st.reorder(k_i, k_o)
    st.bind(k_i, "local.x")


def _schedule_tree(s: Schedule, main: Stage, rows: list[IterVar], cols: list[IterVar], threads: int) -> None:
    """A work-group of `threads` per row (module docstring)."""
    main.reorder(*rows, *cols, *main.op.reduce_axis)
    row = fuse_axes(main, rows)
    main.bind(row, "group.x")
    at = row
    if cols:  # the epilogue's columns over the work-items; main's own reductions stay serial
        c_o, c_i = main.split(fuse_axes(main, cols), factor=threads)
        main.reorder(c_i, c_o)
        main.bind(c_i, "local.x")
        at = c_i
    elif main.op.reduce_axis:
        _tree_reduce(main, threads)
    _attach_all(s, main, at, lambda st: _tree_reduce(st, threads) if st.op.reduce_axis else None)


def _attach_all(s: Schedule, main: Stage, at: IterVar, arrange: Any) -> None:
    """Every other stage computed at main's loop `at`, then arranged."""
    for st in reversed(s.stages):
        if st is main or st.inlined:
            continue
        readers = s.consumers(st.tensor)
        if not readers or not all(c is main or c.attach == ("at", main, at) for c in readers):
            raise NoScheduleError(f"{st.name} is read outside the row of {main.name}: no GPU row schedule")
        st.compute_at(main, at)
        arrange(st)


def schedule_rows_gpu(s: Schedule, outputs: Sequence[Tensor], target: Any) -> None:
    """Rows over the work-items, everything else per work-item; or a work-group per row
    (`reduce_threads` > 1). See the module docstring.

    s = create_schedule(outs); schedule_rows_gpu(s, outs, get_target("opencl"))
    """
    profile = gpu_profile(target)
    main = max((s[t] for t in outputs), key=size_of)
    if not main.op.axis:
        raise NoScheduleError(f"{main.name} is a scalar: no rows to spread over work-items")
    _inline_all(s)
    inner = _inner_dims(s, main)
    rows = [a for d, a in enumerate(main.op.axis) if d not in inner]
    cols = [a for d, a in enumerate(main.op.axis) if d in inner]
    nrows = math.prod(a.extent for a in rows)
    length = _reduce_length(s)
    default = default_reduce_threads(profile, nrows, length)
    threads = knob("reduce_threads", reduce_thread_choices(profile, length), default)
    last = main.op.axis[-1]
    lanes = VECTOR if not cols and rows and last.extent == VECTOR else 1
    vec = knob("vector", sorted({1, lanes}), lanes)
    row_ext = nrows if rows else 1
    group = knob("work_group", group_choices(profile, row_ext), default_group(profile, row_ext, 64))
    if threads > 1 and rows:
        return _schedule_tree(s, main, rows, cols, threads)
    lane: IterVar | None = None
    if vec > 1:
        lane = rows.pop()
    main.reorder(*rows, *cols, *([lane] if lane else []), *main.op.reduce_axis)
    row = fuse_axes(main, rows) if rows else None
    if row is None:  # a single row (a full reduction): one work-item
        row = main.split(cols[0], nparts=1)[0]
    _, local = bind_flat(main, row, group)
    if lane is not None:
        main.vectorize(lane)
    _attach_all(s, main, local, lambda st: _arrange(st, vec))
    return None
