"""Compute definitions for the tensor-manipulation ops (references in tensor.py).

Every op is pure data movement: each output element reads one input element, at an
index that is affine in the output index (reshape, transpose, slice, split, concat,
expand, tile, depth/space) or loaded at run time (gather, gather_elements).

`schedule_movement` vectorizes rows: when the innermost output dimension is read
contiguously (transpose keeping the last axis, concat / split / slice / pad off the
last axis, ...) its loop is split by gcd(lanes, extent) and vectorized; the vectorizer
leaves any loop whose loads are not affine in the lane (a reversed slice, a gather along
the last axis, a transpose of the last axis) as a scalar loop, which is still correct.
identity and reshape keep the fully fused `schedule_injective` (both are copies).

Gather indices are wrapped at run time (negative counts from the end) and clamped into
range so an out-of-range index reads an edge element instead of faulting (the numpy
reference raises IndexError there; a kernel cannot raise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import tensorir.ops.tensor  # noqa: F401  (the references register the ops first)
from tensorir.loop.ir import Cmp, Expr
from tensorir.loop.visitor import walk
from tensorir.ops.kernel import empty_tensor
from tensorir.ops.registry import register_compute
from tensorir.schedule.defaults import PARALLEL_MIN_WORK, inline_injective, schedule_injective
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.te import IterVar, Tensor, cast, compute, if_then_else, max_, min_
from tensorir.target import Target

Index = tuple[Expr, ...]


# ---- schedule ---------------------------------------------------------------------------
def vectorize_rows(st: Stage, target: Target) -> None:
    """Split the innermost axis by gcd(lanes, extent) and vectorize it; fuse the rest
    (with the row's outer part) into one loop, parallel when the work is large."""
    axes = list(st.op.axis)
    if not axes:
        return
    size = math.prod(st.tensor.shape)
    width = math.gcd(target.vector_lanes(st.tensor.dtype), axes[-1].extent)
    if width > 1:
        if axes[-1].extent > width:
            outer_last, inner = st.split(axes[-1], factor=width)
            axes[-1:] = [outer_last]
        else:
            inner = axes.pop()
        st.vectorize(inner)
    if not axes:
        return
    fused = st.fuse(*axes) if len(axes) > 1 else axes[0]
    if size >= PARALLEL_MIN_WORK and fused.extent > 1:
        st.parallel(fused)


def schedule_movement(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Data movement: intermediates inlined, each output's rows vectorized."""
    inline_injective(s)
    for st in s.stages:
        if st.is_output:
            vectorize_rows(st, target)


# ---- helpers ----------------------------------------------------------------------------
def wrap_index(v: Expr, dim: int) -> Expr:
    """A run-time index in [-dim, dim) -> [0, dim): negative counts from the end; anything
    outside is clamped to the nearest edge (the kernel must not read out of bounds)."""
    v = cast(v, "int64")
    wrapped = if_then_else(v < 0, v + dim, v)
    return min_(max_(wrapped, 0), dim - 1)


def unravel(flat: Expr, shape: Sequence[int]) -> Index:
    """Row-major multi-index of `flat` in `shape`."""
    out: list[Expr] = []
    for d in reversed(shape[1:]):
        out.append(flat % d)
        flat = flat // d
    out.append(flat)
    return tuple(reversed(out))


def ravel(index: Sequence[Expr], shape: Sequence[int]) -> Expr:
    acc = index[0]
    for i, d in zip(index[1:], shape[1:], strict=True):
        acc = acc * d + i
    return acc


# ---- identity / reshape / transpose -------------------------------------------------------
@register_compute("identity", schedule=schedule_injective)
def identity_compute(x: Tensor) -> Tensor:
    return compute(x.shape, lambda *i: x[i], name="identity")


@register_compute("reshape", schedule=schedule_injective)
def reshape_compute(x: Tensor, shape: Sequence[int]) -> Tensor:
    shape = tuple(shape)
    if not shape:
        return compute((), lambda: x[tuple(0 for _ in x.shape)], name="reshape")
    if not x.shape:
        return compute(shape, lambda *i: x[()], name="reshape")
    return compute(shape, lambda *i: x[unravel(ravel(i, shape), x.shape)], name="reshape")


@register_compute("transpose", schedule=schedule_movement)
def transpose_compute(x: Tensor, perm: Sequence[int]) -> Tensor:
    shape = tuple(x.shape[p] for p in perm)

    def body(*i: Expr) -> Expr:
        src: list[Any] = [None] * x.ndim
        for k, p in enumerate(perm):
            src[p] = i[k]
        return x[tuple(src)]

    return compute(shape, body, name="transpose")


# ---- concat / split / slice --------------------------------------------------------------
def schedule_concat(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """The axes after the concat axis fused into one contiguous run per (.., concat index),
    vectorized (a partial last block guarded), so which input a block reads is decided once
    per block, not per element; the rest fused and parallel."""
    inline_injective(s)
    y = s[outputs[0]]
    axes = list(y.op.axis)
    tests = [n.a for n in walk(y.op.body) if isinstance(n, Cmp) and any(n.a is a for a in axes)]
    cut = next((k for k, a in enumerate(axes) if tests and tests[0] is a), len(axes) - 1)
    inner = axes[cut + 1 :] or axes[cut:]
    outer = axes[: len(axes) - len(inner)]
    run: IterVar | None = y.fuse(*inner) if len(inner) > 1 else inner[0]
    lanes = target.vector_lanes(y.tensor.dtype)
    if lanes > 1 and run is not None and run.extent >= lanes:
        run, vec = y.split(run, factor=lanes) if run.extent > lanes else (None, run)
        y.vectorize(vec)
    rest = [*outer, *([run] if run is not None else [])]
    fused = (y.fuse(*rest) if len(rest) > 1 else rest[0]) if rest else None
    if fused is not None and math.prod(y.tensor.shape) >= PARALLEL_MIN_WORK and fused.extent > 1:
        y.parallel(fused)


@register_compute("concat", schedule=schedule_concat)
def concat_compute(*xs: Tensor, axis: int) -> Tensor:
    offsets = [0]
    for t in xs:
        offsets.append(offsets[-1] + t.shape[axis])
    shape = list(xs[0].shape)
    shape[axis] = offsets[-1]

    def pick(lo: int, hi: int, i: Index) -> Expr:
        """The element from inputs lo..hi-1 (a balanced tree of range tests)."""
        while xs[lo].shape[axis] == 0:  # an empty input is never read
            lo += 1
        while xs[hi - 1].shape[axis] == 0:
            hi -= 1
        if hi - lo == 1:
            src = list(i)
            src[axis] = i[axis] - offsets[lo] if offsets[lo] else i[axis]
            return xs[lo][tuple(src)]
        mid = (lo + hi) // 2
        return if_then_else(i[axis] < offsets[mid], pick(lo, mid, i), pick(mid, hi, i))

    return compute(shape, lambda *i: pick(0, len(xs), i), name="concat")


@register_compute("split", schedule=schedule_movement)
def split_compute(x: Tensor, axis: int, sizes: Sequence[int]) -> tuple[Tensor, ...]:
    outs, start = [], 0
    for k, size in enumerate(sizes):
        shape = list(x.shape)
        shape[axis] = size

        def body(*i: Expr, _start: int = start) -> Expr:
            src = list(i)
            src[axis] = i[axis] + _start if _start else i[axis]
            return x[tuple(src)]

        if size == 0:
            outs.append(empty_tensor(shape, x.dtype, f"split{k}"))
        else:
            outs.append(compute(shape, body, name=f"split{k}"))
        start += size
    return tuple(outs)


@register_compute("slice", schedule=schedule_movement)
def slice_compute(
    x: Tensor, starts: Sequence[int], ends: Sequence[int], axes: Sequence[int], steps: Sequence[int]
) -> Tensor:
    shape = list(x.shape)
    first = {a: (s, st) for s, a, st in zip(starts, axes, steps, strict=True)}
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        shape[a] = max(0, -(-(e - s) // st))

    def body(*i: Expr) -> Expr:
        src = list(i)
        for a, (s, st) in first.items():
            src[a] = i[a] * st + s if st != 1 else i[a] + s
        return x[tuple(src)]

    return compute(shape, body, name="slice")


# ---- gather ------------------------------------------------------------------------------
@register_compute("gather", schedule=schedule_movement)
def gather_compute(data: Tensor, indices: Tensor, axis: int) -> Tensor:
    r = indices.ndim
    shape = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]

    def body(*i: Expr) -> Expr:
        k = wrap_index(indices[tuple(i[axis : axis + r])], data.shape[axis])
        return data[(*i[:axis], k, *i[axis + r :])]

    return compute(shape, body, name="gather")


@register_compute("gather_elements", schedule=schedule_movement)
def gather_elements_compute(data: Tensor, indices: Tensor, axis: int) -> Tensor:
    def body(*i: Expr) -> Expr:
        k = wrap_index(indices[i], data.shape[axis])
        return data[(*i[:axis], k, *i[axis + 1 :])]

    return compute(indices.shape, body, name="gather_elements")


# ---- expand / tile -------------------------------------------------------------------------
@register_compute("expand", schedule=schedule_movement)
def expand_compute(x: Tensor, shape: Sequence[int]) -> Tensor:
    shape = tuple(shape)
    if not shape:
        return compute((), lambda: x[()], name="expand")
    return compute(shape, lambda *i: x.bcast[i], name="expand")


@register_compute("tile", schedule=schedule_movement)
def tile_compute(x: Tensor, repeats: Sequence[int]) -> Tensor:
    shape = tuple(d * r for d, r in zip(x.shape, repeats, strict=True))

    def body(*i: Expr) -> Expr:
        return x[tuple(j % d if r > 1 else j for j, d, r in zip(i, x.shape, repeats, strict=True))]

    if not shape:
        return compute((), lambda: x[()], name="tile")
    return compute(shape, body, name="tile")


# ---- depth_to_space / space_to_depth ---------------------------------------------------------
@register_compute("depth_to_space", schedule=schedule_movement)
def depth_to_space_compute(x: Tensor, blocksize: int, mode: str) -> Tensor:
    n, c, h, w = x.shape
    b = blocksize
    oc = c // (b * b)

    def body(i: Expr, j: Expr, y: Expr, z: Expr) -> Expr:
        bh, bw = y % b, z % b
        src_c = (bh * b + bw) * oc + j if mode == "DCR" else j * (b * b) + bh * b + bw
        return x[i, src_c, y // b, z // b]

    return compute((n, oc, h * b, w * b), body, name="depth_to_space")


@register_compute("space_to_depth", schedule=schedule_movement)
def space_to_depth_compute(x: Tensor, blocksize: int) -> Tensor:
    n, c, h, w = x.shape
    b = blocksize

    def body(i: Expr, j: Expr, y: Expr, z: Expr) -> Expr:
        block = j // c
        return x[i, j % c, y * b + block // b, z * b + block % b]

    return compute((n, c * b * b, h // b, w // b), body, name="space_to_depth")
