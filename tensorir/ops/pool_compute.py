"""Compute definitions and default schedules for max_pool (values and int64 indices),
avg_pool and the global pools (references in pool.py).

Windowed pools read a padded input stage `<op>_pad` (-inf / the dtype's minimum for max,
zeros for avg, extended for ceil-mode windows) and reduce over the window taps:

    max_pool_acc[n, c, *o] = max_taps pad[n, c, *(o*s + t*d)]           (values = a copy)
    max_pool_tap[n, c, *o] = min_taps (t if pad[..] == values[n, c, *o] else K)
    indices[n, c, *o]      = flat index of tap `tap` in the unpadded input (row-major, or
                             spatial axes column-major for storage_order 1)

so the index is numpy's argmax (the first maximum in row-major window order).
avg_pool divides the window sum by its tap count, a closed form per axis:
#{t < k : lo <= o*s + t*d < hi} with [lo, hi) the image (or image + pads when
count_include_pad). Windowed pools use `schedule_windowed` (nn_compute.py): per (image,
channel, row chunk) in parallel, output width vectorized, rows unrolled, taps between.
Global pools reduce the spatial axes with the channels as the vector axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tensorir.ops.pool  # noqa: F401  (the references register the ops first)
from tensorir.loop.ir import Const, Expr
from tensorir.ops.conv import Ints, out_spatial, spatial_attrs
from tensorir.ops.nn_compute import (
    acc_type,
    const,
    fuse_all,
    inline_elementwise,
    load,
    lowest,
    maybe_parallel,
    pad_spatial,
    pick_vector,
    place_pad,
    schedule_copy,
    schedule_pad,
    schedule_windowed,
    stage_named,
    work_of,
)
from tensorir.ops.registry import register_compute
from tensorir.schedule.schedule import Schedule
from tensorir.schedule.te import Tensor, cast, compute, max_, min_, reduce_axis, select, sum_
from tensorir.target import Target


def _window(
    x: Tensor, kernel: Ints, strides: Ints | None, pads: Ints | None, dilations: Ints | None, ceil_mode: int
) -> tuple[Ints, Ints, Ints, Ints, list[int]]:
    """strides, pads, dilations, output size and the padded extent the windows reach."""
    nsp = x.ndim - 2
    s, p, d = spatial_attrs(nsp, strides, pads, dilations)
    out = out_spatial(x.shape[2:], tuple(kernel), s, p, d, bool(ceil_mode))
    need = [(out[i] - 1) * s[i] + (kernel[i] - 1) * d[i] + 1 for i in range(nsp)]
    return s, p, d, out, need


def _taps(kernel: Ints, prefix: str) -> list:
    return [reduce_axis(k, f"{prefix}{i}") for i, k in enumerate(kernel)]


def _at(o: Sequence[Expr], taps: Sequence[Expr], s: Ints, d: Ints) -> list[Expr]:
    return [o[i] * s[i] + taps[i] * d[i] for i in range(len(o))]


def max_pool_compute(
    x: Tensor,
    kernel_shape: Ints = (),
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    ceil_mode: int = 0,
    storage_order: int = 0,
    indices: int = 1,
) -> tuple[Tensor, Tensor] | Tensor:
    k = tuple(kernel_shape)
    s, p, d, out, need = _window(x, k, strides, pads, dilations, ceil_mode)
    nsp, (n, c), sp = len(k), x.shape[:2], x.shape[2:]
    xp = pad_spatial(x, p[:nsp], need, lowest(x.dtype), "max_pool_pad")
    t1 = _taps(k, "r")
    acc = compute(
        (n, c, *out), lambda b, ch, *o: max_(xp[(b, ch, *_at(o, t1, s, d))], axis=t1), name="max_pool_acc"
    )
    values = compute(acc.shape, lambda *i: acc[i], name="max_pool")
    if not indices:
        return values
    t2 = _taps(k, "t")
    flat: Expr = Const(0, "int64")
    for i, t in enumerate(t2):
        flat = flat * k[i] + t
    ktot = Const(math.prod(k), "int64")

    def tap(b: Expr, ch: Expr, *o: Expr) -> Expr:
        hit = xp[(b, ch, *_at(o, t2, s, d))].eq(values[(b, ch, *o)])
        return min_(select(hit, flat, ktot), axis=t2)

    first = compute((n, c, *out), tap, name="max_pool_tap")

    def index(b: Expr, ch: Expr, *o: Expr) -> Expr:
        t, rest = first[(b, ch, *o)], []
        for i in reversed(range(nsp)):
            rest.insert(0, t % k[i] if i else t)
            t = t // k[i]
        pos = [o[i] * s[i] + rest[i] * d[i] - p[i] for i in range(nsp)]
        order = range(nsp) if storage_order else reversed(range(nsp))
        idx, step = Const(0, "int64"), 1
        for i in order:
            idx, step = idx + pos[i] * step, step * sp[i]
        return idx + (b * c + ch) * step

    return values, compute((n, c, *out), index, name="max_pool_idx")


def _count(o: Expr, k: int, s: int, d: int, lo: int, hi: int) -> Expr:
    """#{t in [0, k): lo <= o*s + t*d < hi}: the first tap at or past each bound is
    ceil((bound - o*s) / d) = -floor((o*s - bound) / d), clamped to [0, k]."""

    def first_tap(bound: int) -> Expr:
        return min_(max_(-((o * s - bound) // d), 0), k)

    return first_tap(hi) - first_tap(lo)


def avg_pool_compute(
    x: Tensor,
    kernel_shape: Ints = (),
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    ceil_mode: int = 0,
    count_include_pad: int = 0,
) -> Tensor:
    k = tuple(kernel_shape)
    s, p, d, out, need = _window(x, k, strides, pads, dilations, ceil_mode)
    nsp, sp = len(k), x.shape[2:]
    dt = acc_type(x.dtype)
    xp = pad_spatial(x, p[:nsp], need, const(0, x.dtype), "avg_pool_pad")
    taps = _taps(k, "r")
    acc = compute(
        (*x.shape[:2], *out),
        lambda b, ch, *o: sum_(load(xp, (b, ch, *_at(o, taps, s, d)), dt), axis=taps),
        name="avg_pool_acc",
    )

    def body(b: Expr, ch: Expr, *o: Expr) -> Expr:
        count: Expr | None = None
        for i in range(nsp):
            lo, hi = (0, sp[i] + p[i] + p[nsp + i]) if count_include_pad else (p[i], p[i] + sp[i])
            ci = _count(o[i], k[i], s[i], d[i], lo, hi)
            count = ci if count is None else count * ci
        return load(acc, (b, ch, *o), dt) / cast(count, dt)

    return compute(acc.shape, body, name="avg_pool", dtype=x.dtype)


PART = 16  # lanes of a global pool's partial sums over contiguous pixels


def _global(x: Tensor, kind: str) -> Tensor:
    """acc[b, c] = sum (max) over the pixels. On a plain NCHW map whose rows are whole blocks
    of PART pixels, in two steps: PART partial sums per channel over contiguous pixels
    (`_part`, vector loads), then the PART summed; otherwise one reduction per channel
    (vectorized across channels by the schedule: strided loads, right for NCHW[x]c's blocks
    and small maps)."""
    n, c, *sp = x.shape
    dt = acc_type(x.dtype) if kind == "avg" else x.dtype
    red = sum_ if kind == "avg" else max_
    pixels = math.prod(sp)
    if len(sp) == 2 and sp[1] % PART == 0 and pixels >= 2 * PART:
        width, r = sp[1], reduce_axis(pixels // PART, "r")

        def part(b: Expr, ch: Expr, lane: Expr) -> Expr:
            p = r * PART + lane
            return red(load(x, (b, ch, p // width, p % width), dt), axis=[r])

        partial = compute((n, c, PART), part, name=f"global_{kind}_pool_part")
        lane = reduce_axis(PART, "lane")
        acc = compute(
            (n, c), lambda b, ch: red(partial[b, ch, lane], axis=[lane]), name=f"global_{kind}_pool_acc"
        )
    else:
        rs = [reduce_axis(e, f"r{i}") for i, e in enumerate(sp)]
        acc = compute(
            (n, c), lambda b, ch: red(load(x, (b, ch, *rs), dt), axis=rs), name=f"global_{kind}_pool_acc"
        )
    scale = const(1.0 / pixels, dt) if kind == "avg" else None

    def body(b: Expr, ch: Expr, *_: Expr) -> Expr:
        v = acc[b, ch]
        return cast(v * scale if scale is not None else v, x.dtype)

    return compute((n, c, *(1 for _ in sp)), body, name=f"global_{kind}_pool")


# ---- schedules ----------------------------------------------------------------------------
def schedule_pool(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Each windowed reduction by `schedule_windowed` under the output that reads it
    (max_pool: values, then the first-hit tap under the indices). The pad stage is computed
    per row chunk of the values when they are its only reader (knob `pad_at`: the chunk's
    padded rows stay in cache instead of a padded copy of the input going through memory),
    else copied at root."""
    keep = [st for st in s.stages if st.name.endswith(("_pad", "_acc", "_tap"))]
    inline_elementwise(s, keep=keep)
    pad = stage_named(s, "_pad")
    outers = []
    for red in (stage_named(s, "_acc"), stage_named(s, "_tap")):
        if red is not None:  # under the output that reads it (through inlined epilogues)
            y = next(st for st in s.stages if st.is_output and any(t is red.tensor for t in s.reads(st)))
            outers.append((y, schedule_windowed(s, y, red, target)))
    if pad is None:
        return
    lanes = target.vector_lanes(pad.tensor.dtype)
    if len(outers) == 1:  # the values are the pad's only reader
        place_pad(pad, *outers[0], chunk_default=True, lanes=lanes)
    else:
        schedule_pad(pad, lanes)


def schedule_global_pool(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Per image, channels in vector blocks (lanes across channels: strided loads), the
    spatial reduction inside them; or, with partial sums (`_global`), the PART lanes of each
    channel vectorized under its pixel loop and summed per channel after; then the
    (n, c, 1, ...) output copied."""
    inline_elementwise(s, keep=[st for st in s.stages if st.name.endswith("_part")])
    part = stage_named(s, "_part")
    acc = stage_named(s, "_acc")
    y = next(st for st in s.stages if st.is_output)
    if part is not None:
        b, ch, lane = part.op.axis
        part.reorder(b, ch, *part.op.reduce_axis, lane)
        part.vectorize(lane)
        maybe_parallel(part, fuse_all(part, [b, ch]), work_of(part))
        fuse_all(acc, list(acc.op.axis))
    else:
        b, ch = acc.op.axis
        v = pick_vector(ch.extent, target.vector_lanes(acc.tensor.dtype))
        co, ci = acc.split(ch, factor=v)
        acc.reorder(b, co, *acc.op.reduce_axis, ci)
        acc.vectorize(ci)
        maybe_parallel(acc, fuse_all(acc, [b, co]), work_of(acc))
    schedule_copy(y, target)


register_compute("max_pool", schedule=schedule_pool)(max_pool_compute)
register_compute("avg_pool", schedule=schedule_pool)(avg_pool_compute)
register_compute("global_avg_pool", schedule=schedule_global_pool)(lambda x: _global(x, "avg"))
register_compute("global_max_pool", schedule=schedule_global_pool)(lambda x: _global(x, "max"))
